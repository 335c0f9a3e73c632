"""Megatron-Bridge 0.3.1 / Megatron-Core 0.16.1 start-up oracle (runs on CPU).

Given one configuration dict (see generate.py: the "bridge" half), this module
  1. builds the ConfigContainer with the REAL Bridge recipe function for the model
     (e.g. megatron.bridge.recipes.qwen.qwen3_moe.qwen3_30b_a3b_pretrain_config). The
     recipe calls AutoBridge.from_hf_pretrained(HF_ID); this machine cannot reach the
     Hugging Face hub, so the model's config.json (public HF values, listed below) is put
     into a private offline HF cache and transformers reads it from there;
  2. sets the fields the configuration names (parallelism, precision preset, dispatcher,
     recompute, CUDA graphs, overlap, offload, FSDP, batch, sequence length);
  3. runs what a Bridge pretrain() runs at start-up before touching a GPU:
       runtime_config_update(cfg)            (mixed precision + comm overlap setup,
                                              ConfigContainer.validate(), which finalizes
                                              the model provider: TransformerConfig /
                                              ModelParallelConfig __post_init__, MoE checks)
       init_num_microbatches_calculator(...) (as bridge/training/initialize.py does)
       parallel_state.initialize_model_parallel(...) with the arguments of
                                              bridge/training/initialize.py:_initialize_distributed,
                                              on torch's "fake" process-group backend
                                              (torch.testing._internal.distributed.fake_pg)
                                              with WORLD_SIZE ranks; we are rank 0.
The verdict is {"verdict": "accept"} or {"verdict": "reject", "type", "message", "where"}
where "where" is the innermost traceback frame inside megatron/ (file:line relative to
site-packages). Failures that are artefacts of running on CPU (a TE stand-in being
called, CUDA being touched) are {"verdict": "oracle-error", ...} and never count as a
Megatron verdict.

CPU artefacts handled, and how (nothing of Megatron is replaced):
  * torch.cuda.get_device_properties(0) is read by Bridge's flex-dispatcher checks
    (training/flex_dispatcher_backend.py) to learn the GPU. There is no GPU, so the oracle
    answers it with the name / compute capability of the configuration's GPU
    (GPU_PROPS below). This describes the input hardware; it changes no Megatron logic.
  * The distributed backend is torch's own "fake" backend: every collective is a no-op,
    group creation is real torch.distributed bookkeeping. Gloo groups cannot be made on
    it (gloo needs a real rendezvous), so initialize_model_parallel is called with
    create_gloo_process_groups=False; they repeat the NCCL groups' rank lists and no
    Megatron check runs while they are created.
  * Model construction (provide_distributed_model) is NOT run as a whole: it builds TE
    modules and allocates on CUDA. What of it decides the configuration IS run with the real
    functions: the layer split of every pipeline rank / virtual stage
    (_model_build_layers) and the MoE token dispatcher's constructor
    (_model_build_dispatcher). Checks made while building the layers' modules, at the first
    step, or inside TE are not covered (see docs/megatron-agreement.md).
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "stubs")
if STUBS not in sys.path:
    sys.path.insert(0, STUBS)

_HF_HOME = None



def _qwen3_vl_moe_config(hidden_size, intermediate_size, moe_intermediate_size,
                         num_hidden_layers, num_attention_heads, out_hidden_size):
    """config.json of a Qwen3-VL MoE Instruct checkpoint; the two published ones differ only
    in these six values (vision tower: same 27-layer ViT, projected to the text width)."""
    return {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
        "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_vl_moe_text", "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "decoder_sparse_step": 1,
            "dtype": "bfloat16", "head_dim": 128, "hidden_act": "silu",
            "hidden_size": hidden_size, "initializer_range": 0.02,
            "intermediate_size": intermediate_size, "max_position_embeddings": 262144,
            "mlp_only_layers": [], "moe_intermediate_size": moe_intermediate_size,
            "norm_topk_prob": True, "num_attention_heads": num_attention_heads,
            "num_experts": 128, "num_experts_per_tok": 8,
            "num_hidden_layers": num_hidden_layers, "num_key_value_heads": 4,
            "rms_norm_eps": 1e-6,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                             "rope_type": "default"},
            "rope_theta": 5000000, "router_aux_loss_coef": 0.001, "use_cache": True,
            "vocab_size": 151936,
        },
        "vision_config": {
            "model_type": "qwen3_vl_moe", "deepstack_visual_indexes": [8, 16, 24], "depth": 27,
            "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
            "initializer_range": 0.02, "intermediate_size": 4304, "num_heads": 16,
            "num_position_embeddings": 2304, "out_hidden_size": out_hidden_size,
            "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
    }


# Public Hugging Face config.json values of the catalog models the oracle supports.
HF_CONFIGS = {
    "Qwen/Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
        "router_aux_loss_coef": 0.001, "hidden_act": "silu", "attention_bias": False,
    },
    "Qwen/Qwen3-235B-A22B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
        "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
        "router_aux_loss_coef": 0.001, "hidden_act": "silu", "attention_bias": False,
    },
    "deepseek-ai/DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "vocab_size": 129280, "max_position_embeddings": 163840,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "moe_layer_freq": 1, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
        "attention_bias": False, "aux_loss_alpha": 0.001,
    },
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "hidden_size": 2048, "intermediate_size": 5120, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "num_experts": 512, "num_experts_per_tok": 10,
        "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "full_attention_interval": 4, "partial_rotary_factor": 0.25, "rope_theta": 10000000,
        "max_position_embeddings": 262144, "vocab_size": 151936, "decoder_sparse_step": 1,
        "norm_topk_prob": True, "rms_norm_eps": 1e-6, "mlp_only_layers": [],
        "router_aux_loss_coef": 0.001, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "hidden_act": "silu", "attention_bias": False,
    },
    # Qwen3-VL MoE (model_type qwen3_vl_moe: text_config + vision_config). Transcribed from
    # the published Qwen/Qwen3-VL-*-A*B-Instruct config.json files (not downloaded here);
    # the dimensions agree with lib/Catalog/models.moe (qwen3_vl_30b_a3b / qwen3_vl_235b_a22b).
    # Bridge's Qwen3VLMoEBridge.provider_bridge (models/qwen_vl/qwen3_vl_bridge.py) reads
    # text_config (through hf_config_to_provider_kwargs) and hands vision_config to the
    # provider; the recipe loads nothing else at config time (processor / tokenizer of
    # PreTrainedVLM are lazy, the dataset provider only stores hf_processor_path).
    "Qwen/Qwen3-VL-30B-A3B-Instruct": _qwen3_vl_moe_config(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, out_hidden_size=2048),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": _qwen3_vl_moe_config(
        hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
        num_hidden_layers=94, num_attention_heads=64, out_hidden_size=4096),
}


def _deepseek_v2_config(**dims):
    """config.json of a DeepSeek-V2 checkpoint (model_type deepseek_v2); V2 and V2-Lite differ
    in the values passed."""
    conf = {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
        "first_k_dense_replace": 1, "hidden_act": "silu", "initializer_range": 0.02,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_layer_freq": 1,
        "n_shared_experts": 2, "norm_topk_prob": False, "num_experts_per_tok": 6,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-6,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
        "rope_theta": 10000, "scoring_func": "softmax", "seq_aux": True, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "vocab_size": 102400, "attention_bias": False,
    }
    conf.update(dims)
    return conf


def _glm45_config(**dims):
    """config.json of a GLM-4.5 checkpoint (model_type glm4_moe); GLM-4.5 and 4.5-Air differ in
    the values passed."""
    conf = {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
        "attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "initializer_range": 0.02,
        "max_position_embeddings": 131072, "n_group": 1, "topk_group": 1, "n_shared_experts": 1,
        "norm_topk_prob": True, "num_attention_heads": 96, "num_experts_per_tok": 8,
        "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
        "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "rms_norm_eps": 1e-5,
        "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 151552,
    }
    conf.update(dims)
    return conf


def _gpt_oss_config(layers, experts):
    """config.json of a GPT-OSS checkpoint (model_type gpt_oss), without its MXFP4
    quantization_config (how the published weights are stored, not the architecture)."""
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "pad_token_id": 199999,
        "experts_per_token": 4, "num_experts_per_tok": 4, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 2880, "intermediate_size": 2880, "initial_context_length": 4096,
        "initializer_range": 0.02, "max_position_embeddings": 131072, "num_attention_heads": 64,
        "num_key_value_heads": 8, "num_hidden_layers": layers, "num_local_experts": experts,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        "rms_norm_eps": 1e-5, "rope_theta": 150000, "router_aux_loss_coef": 0.9,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "original_max_position_embeddings": 4096, "truncate": False},
        "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "vocab_size": 201088,
    }


# The MoE checkpoints the other Bridge 0.3.1 recipes read with AutoBridge.from_hf_pretrained
# (test/megatron/roundtrip.py). Transcribed from the published config.json files (not
# downloaded here); roundtrip.py checks each against the Bridge model provider class of the same
# model on the architecture fields both state (hf_provider_mismatches).
HF_CONFIGS.update({
    "moonshotai/Moonlight-16B-A3B": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 11264, "kv_lora_rank": 512,
        "max_position_embeddings": 8192, "moe_intermediate_size": 1408, "moe_layer_freq": 1,
        "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": True,
        "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
        "num_key_value_heads": 16, "num_nextn_predict_layers": 0, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
        "routed_scaling_factor": 2.446, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 163840, "attention_bias": False,
    },
    "deepseek-ai/DeepSeek-V2-Lite": _deepseek_v2_config(
        hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=27,
        num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, q_lora_rank=None,
        n_group=1, topk_group=1, topk_method="greedy", routed_scaling_factor=1.0),
    "deepseek-ai/DeepSeek-V2": _deepseek_v2_config(
        hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=60,
        num_attention_heads=128, num_key_value_heads=128, n_routed_experts=160, q_lora_rank=1536,
        n_group=8, topk_group=3, topk_method="group_limited_greedy", routed_scaling_factor=16.0),
    "zai-org/GLM-4.5": _glm45_config(
        hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, num_hidden_layers=92,
        n_routed_experts=160, first_k_dense_replace=3, routed_scaling_factor=2.5, use_qk_norm=True),
    "zai-org/GLM-4.5-Air": _glm45_config(
        hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=46,
        n_routed_experts=128, first_k_dense_replace=1, routed_scaling_factor=1.0, use_qk_norm=False),
    "openai/gpt-oss-20b": _gpt_oss_config(layers=24, experts=32),
    "openai/gpt-oss-120b": _gpt_oss_config(layers=36, experts=128),
})

# moec catalog model -> (recipe module, recipe function, HF id it loads)
RECIPES = {
    "qwen3_30b_a3b": ("megatron.bridge.recipes.qwen.qwen3_moe", "qwen3_30b_a3b_pretrain_config", "Qwen/Qwen3-30B-A3B"),
    "qwen3_235b_a22b": ("megatron.bridge.recipes.qwen.qwen3_moe", "qwen3_235b_a22b_pretrain_config", "Qwen/Qwen3-235B-A22B"),
    "deepseek_v3": ("megatron.bridge.recipes.deepseek.deepseek_v3", "deepseek_v3_pretrain_config", "deepseek-ai/DeepSeek-V3"),
    "qwen3_next_80b_a3b": ("megatron.bridge.recipes.qwen.qwen3_next", "qwen3_next_80b_a3b_pretrain_config", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    "qwen3_vl_30b_a3b": ("megatron.bridge.recipes.qwen_vl.qwen3_vl", "qwen3_vl_30b_a3b_pretrain_config", "Qwen/Qwen3-VL-30B-A3B-Instruct"),
    "qwen3_vl_235b_a22b": ("megatron.bridge.recipes.qwen_vl.qwen3_vl", "qwen3_vl_235b_a22b_pretrain_config", "Qwen/Qwen3-VL-235B-A22B-Instruct"),
}

# What torch.cuda.get_device_properties(0) reports on each catalog GPU (name, major, minor).
GPU_PROPS = {
    "h100_sxm": ("NVIDIA H100 80GB HBM3", 9, 0),
    "h200_sxm": ("NVIDIA H200", 9, 0),
    "b200": ("NVIDIA B200", 10, 0),
    "b300": ("NVIDIA B300", 10, 3),
    "gb200_nvl72": ("NVIDIA GB200", 10, 0),
    "gb300_nvl72": ("NVIDIA GB300", 10, 3),
    "vr200_nvl72": ("NVIDIA VR200", 10, 7),
}


class _Props:
    def __init__(self, gpu):
        self.name, self.major, self.minor = GPU_PROPS[gpu]
        self.total_memory = 80 * 2**30
        self.multi_processor_count = 132


def _setup_hf_cache():
    global _HF_HOME
    if _HF_HOME is not None:
        return
    _HF_HOME = tempfile.mkdtemp(prefix="moec-megatron-hf-")
    for hf_id, conf in HF_CONFIGS.items():
        d = os.path.join(_HF_HOME, "hub", "models--" + hf_id.replace("/", "--"))
        os.makedirs(os.path.join(d, "snapshots", "0" * 40), exist_ok=True)
        os.makedirs(os.path.join(d, "refs"), exist_ok=True)
        with open(os.path.join(d, "refs", "main"), "w") as f:
            f.write("0" * 40)
        with open(os.path.join(d, "snapshots", "0" * 40, "config.json"), "w") as f:
            json.dump(conf, f)
    os.environ["HF_HOME"] = _HF_HOME
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # moec's export and launch set it whenever offload.activations lists modules
    # (Bridge's _validate_fine_grained_activation_offloading requires it on TE >= 2.10).
    os.environ["NVTE_CPU_OFFLOAD_V1"] = "1"


_initialized = False


def init():
    """Import Megatron once per process (slow: ~10 s)."""
    global _initialized
    if _initialized:
        return
    _setup_hf_cache()
    import warnings
    import logging
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch  # noqa: F401
    import megatron.bridge.training.config  # noqa: F401
    _initialized = True


def _where(tb_exc):
    frames = traceback.extract_tb(tb_exc.__traceback__)
    for fr in reversed(frames):
        p = fr.filename.replace("\\", "/")
        i = p.rfind("/megatron/")
        if i >= 0 and "/test/megatron/" not in p:
            return "%s:%d" % (p[i + 1:], fr.lineno), fr.name
    fr = frames[-1] if frames else None
    return ("%s:%d" % (fr.filename, fr.lineno) if fr else "?"), (fr.name if fr else "?")


def _is_cpu_artefact(exc):
    msg = str(exc)
    return ("CPU import-time stand-in" in msg or "Found no NVIDIA driver" in msg
            or "Torch not compiled with CUDA" in msg or "No CUDA GPUs" in msg)


def _apply(cfg, b):
    """Set the Bridge fields named by the configuration b (generate.py's 'bridge' half)."""
    import torch
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    m = cfg.model
    for k, v in b["model"].items():
        setattr(m, k, v)
    if m.pipeline_model_parallel_size > 1:
        m.pipeline_dtype = torch.bfloat16
    for k, v in b.get("train", {}).items():
        setattr(cfg.train, k, v)
    cfg.dataset.seq_length = b["model"]["seq_length"]
    cfg.mixed_precision = b["mixed_precision"]
    if b.get("mixed_precision_fields"):
        # Fields set on top of the named Bridge preset (fp8_param_gather, first/last BF16
        # layers): resolved with Bridge's own get_mixed_precision_config, as
        # runtime_config_update() would resolve the name.
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config
        cfg.mixed_precision = get_mixed_precision_config(b["mixed_precision"])
        for k, v in b["mixed_precision_fields"].items():
            setattr(cfg.mixed_precision, k, v)
    for k, v in b.get("optimizer", {}).items():
        if isinstance(v, str) and v.startswith("torch."):
            v = getattr(torch, v[len("torch."):])  # dtypes travel as "torch.float32"
        setattr(cfg.optimizer, k, v)
    for k, v in b.get("ddp", {}).items():
        setattr(cfg.ddp, k, v)
    for k, v in b.get("checkpoint", {}).items():
        setattr(cfg.checkpoint, k, v)
    for k, v in b.get("dist", {}).items():
        setattr(cfg.dist, k, v)
    for k, v in b.get("rng", {}).items():
        setattr(cfg.rng, k, v)
    for k, v in b.get("rerun_state_machine", {}).items():
        setattr(cfg.rerun_state_machine, k, v)
    co = b.get("comm_overlap")
    if co is not None:
        cfg.comm_overlap = CommOverlapConfig(**dict({"tp_comm_overlap": False}, **co))


# Which phases of a Bridge pretrain() this oracle executes, in order (the "stage" of a verdict).
STAGES = ("recipe", "apply", "runtime_config_update", "num_microbatches",
          "initialize_model_parallel", "model_build_layers", "model_build_dispatcher")

# Raised by Megatron-Core when a GPU-only package is absent; reaching it means every check
# before it in the same constructor passed (a real job has the package installed).
_MISSING_PACKAGE = ("DeepEP is not installed", "HybridEP is not installed")


def _model_build_layers(m):
    """The layer-count part of model build, for EVERY pipeline rank and virtual stage.

    A real job builds, on pipeline rank r, one model chunk per virtual stage v
    (bridge/models/model_provider.py:_create_model -> GPTModelProvider.provide(vp_stage=v)).
    For each chunk this calls, with parallel_state's pipeline rank (and virtual rank) set to
    r (v), the real functions provide() and GPTModel/TransformerBlock call to decide which
    layers the chunk holds, in their order:
      * the provider's transformer_layer_spec, resolved as provide() resolves it
        (bridge/models/gpt_provider.py:236-242); for DeepSeek-V3 / Qwen3-Next this is a
        block-spec function that itself calls get_num_layers_to_build and the layout's
        layer-id list (core/models/gpt/gpt_layer_specs.py:get_gpt_decoder_block_spec);
      * bridge gpt_provider.mtp_block_spec (provide() line 260) -> core
        get_mtp_num_layers_to_build / get_mtp_layer_offset;
      * core transformer_block._get_block_submodules(config, spec, vp_stage, pp_rank)
        (TransformerBlock.__init__) -> get_num_layers_to_build: the layers-split
        assertions (transformer_block.py:155 / 174) or, with a pipeline_model_parallel_layout,
        PipelineParallelLayerLayout.get_num_layers_to_build;
      * core transformer_layer.get_transformer_layer_offset (TransformerBlock._build_layers).
    Building the layers themselves (TE modules, CUDA allocation) is not done.
    Not run: the inline assertion in GPTModelProvider.provide() (gpt_provider.py:226-234,
    "(num_layers // pp) % vp == 0" without a flexible layout); it is not callable on its own,
    and with the generator's settings (no account_for_* / first/last-stage overrides) it is
    implied by transformer_block.py:155/174, which are run.
    """
    import inspect
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import _get_block_submodules
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
    from megatron.bridge.models.gpt_provider import mtp_block_spec

    from megatron.bridge.models.qwen_vl.qwen3_vl_provider import (
        Qwen3VLModelProvider, Qwen3VLMoEModelProvider)

    pp = m.pipeline_model_parallel_size
    vp = m.virtual_pipeline_model_parallel_size
    stages = list(range(vp)) if (pp > 1 and vp is not None) else [None]
    qwen3_vl = isinstance(m, (Qwen3VLModelProvider, Qwen3VLMoEModelProvider))
    try:
        for r in range(pp):
            ps.set_pipeline_model_parallel_rank(r)
            for v in stages:
                ps.set_virtual_pipeline_model_parallel_rank(v)
                if qwen3_vl:
                    _qwen3_vl_build_layers(m, r)
                    continue
                spec = m.transformer_layer_spec
                if not isinstance(spec, ModuleSpec):
                    if "vp_stage" in inspect.signature(spec).parameters:
                        spec = spec(m, vp_stage=v)
                    else:
                        spec = spec(m)
                mtp_block_spec(m, vp_stage=v)
                _get_block_submodules(m, spec, v, r)
                get_transformer_layer_offset(m, v, r)
    finally:
        ps.set_pipeline_model_parallel_rank(None)
        ps.set_virtual_pipeline_model_parallel_rank(None)


def _qwen3_vl_build_layers(m, r):
    """_model_build_layers for a Qwen3-VL provider on pipeline rank r (any virtual stage).

    Qwen3VL{,MoE}ModelProvider.provide(pre_process, post_process, vp_stage)
    (bridge/models/qwen_vl/qwen3_vl_provider.py) does NOT go through GPTModelProvider.provide:
    it takes the layer spec from get_gpt_layer_with_transformer_engine_spec(num_experts,
    moe_grouped_gemm, qk_layernorm, fp8=False) -- not the provider's transformer_layer_spec --
    and builds Qwen3VLModel (modelling_qwen3_vl/model.py), which does not take vp_stage: its
    Qwen3VLGPTModel -> GPTModel / Qwen3VLTransformerBlock are built with vp_stage=None for
    every virtual stage (modelling_qwen3_vl/text_model.py), and with no MTP block. So the
    real functions are called as that path calls them: spec as provide() makes it,
    _get_block_submodules(config, spec, None, r) and get_transformer_layer_offset(config,
    None, r). Neither the GPT provider's inline VP assertion (gpt_provider.py:226-234) nor
    mtp_block_spec is on this path. Not run: Qwen3VLModel.__init__'s inline assertion
    (model.py:124) that the first pipeline stage holds at least len(deepstack_visual_indexes)
    decoder layers; it is not callable on its own (see docs/megatron-agreement.md)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.transformer.transformer_block import _get_block_submodules
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
    from megatron.bridge.models.qwen_vl.qwen3_vl_provider import Qwen3VLMoEModelProvider

    if isinstance(m, Qwen3VLMoEModelProvider):
        spec = get_gpt_layer_with_transformer_engine_spec(
            num_experts=m.num_moe_experts, moe_grouped_gemm=True, qk_layernorm=m.qk_layernorm, fp8=False)
    else:
        spec = get_gpt_layer_with_transformer_engine_spec(
            num_experts=None, moe_grouped_gemm=False, qk_layernorm=m.qk_layernorm, fp8=False)
    _get_block_submodules(m, spec, None, r)
    get_transformer_layer_offset(m, None, r)


def _model_build_dispatcher(m):
    """The MoE token-dispatcher construction of model build (rank 0's groups).

    MoELayer.__init__ (core/transformer/moe/moe_layer.py:196-215) builds, per MoE layer,
    MoE{AllGather,AlltoAll,Flex}TokenDispatcher(num_local_experts, local_expert_indices,
    config, pg_collection). This runs the REAL BaseMoELayer.__init__ (expert counts and
    indices, moe_layer.py:85-116; a one-line subclass only fills in the abstract forward) and
    then the REAL constructor of the dispatcher class MoELayer picks, with the process groups
    a job uses (ProcessGroupCollection.use_mpu_process_groups()). Its assertions include
    token_dispatcher.py:1346 (flex: expert-TP x EP > 1). A constructor that gets past its
    checks and then needs what this machine lacks -- DeepEP / HybridEP (ImportError
    "... is not installed", token_dispatcher.py:997/1149) or a CUDA stream (alltoall,
    token_dispatcher.py:445) -- has passed every check it makes; that is not a verdict.
    Group sizes are the same on every rank, so rank 0's groups decide the assertion.
    """
    if not m.num_moe_experts:
        return
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe import token_dispatcher as td
    from megatron.core.transformer.moe.moe_layer import BaseMoELayer

    class _MoELayerBase(BaseMoELayer):
        def forward(self, hidden_states):  # abstract in BaseMoELayer; never called
            raise NotImplementedError

    pgs = ProcessGroupCollection.use_mpu_process_groups()
    layer = _MoELayerBase(config=m, layer_number=1, pg_collection=pgs)
    cls = {"allgather": td.MoEAllGatherTokenDispatcher, "alltoall": td.MoEAlltoAllTokenDispatcher,
           "flex": td.MoEFlexTokenDispatcher}.get(m.moe_token_dispatcher_type)
    if cls is None:  # MoELayer raises for any other type; the generator never writes one
        return
    try:
        cls(layer.num_local_experts, layer.local_expert_indices, config=m, pg_collection=pgs)
    except ImportError as e:
        if not any(s in str(e) for s in _MISSING_PACKAGE):
            raise
        return "%s stopped at %s: %s" % (cls.__name__, _where(e)[0], " ".join(str(e).split())[:80])
    except (RuntimeError, AssertionError, AttributeError) as e:
        if not _is_cpu_artefact(e):
            raise
        return "%s stopped at %s: %s" % (cls.__name__, _where(e)[0], " ".join(str(e).split())[:80])
    return None


def run(config, recipe=None, apply=None):
    """Run one configuration; return the verdict dict. config = {"gpu", "gpus", "model_name", "bridge"}.

    recipe: (module, function) of the Bridge recipe to build instead of RECIPES[model_name];
    apply:  callable(cfg) that sets the fields instead of _apply(cfg, config["bridge"])
            (test/megatron/exports.py applies `moec export` overrides with Bridge's own
            override mechanism). Everything after it is the same for both."""
    init()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.num_microbatches_calculator import (
        destroy_num_microbatches_calculator, init_num_microbatches_calculator)
    from megatron.bridge.training.config import runtime_config_update
    from torch.testing._internal.distributed.fake_pg import FakeStore
    import importlib

    world = int(config["gpus"])
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0",
                      MASTER_ADDR="localhost", MASTER_PORT="29500")
    props = _Props(config["gpu"])
    saved = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = lambda *a, **k: props
    stage = "recipe"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            modname, fn = recipe or RECIPES[config["model_name"]][:2]
            cfg = getattr(importlib.import_module(modname), fn)()
            stage = "apply"
            if apply is not None:
                apply(cfg)
            else:
                _apply(cfg, config["bridge"])
            stage = "runtime_config_update"
            runtime_config_update(cfg)
            stage = "num_microbatches"
            init_num_microbatches_calculator(0, cfg.train.rampup_batch_size, cfg.train.global_batch_size,
                                             cfg.train.micro_batch_size, cfg.data_parallel_size,
                                             cfg.train.decrease_batch_size_if_needed)
            stage = "initialize_model_parallel"
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
            m, d = cfg.model, cfg.dist
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=m.tensor_model_parallel_size,
                pipeline_model_parallel_size=m.pipeline_model_parallel_size,
                virtual_pipeline_model_parallel_size=m.virtual_pipeline_model_parallel_size,
                pipeline_model_parallel_comm_backend=m.pipeline_model_parallel_comm_backend,
                context_parallel_size=m.context_parallel_size,
                hierarchical_context_parallel_sizes=m.hierarchical_context_parallel_sizes,
                expert_model_parallel_size=m.expert_model_parallel_size,
                num_distributed_optimizer_instances=cfg.ddp.num_distributed_optimizer_instances,
                expert_tensor_parallel_size=m.expert_tensor_parallel_size,
                distributed_timeout_minutes=d.distributed_timeout_minutes,
                nccl_communicator_config_path=d.nccl_communicator_config_path,
                order="tp-cp-ep-dp-pp" if not d.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
                # Gloo groups cannot be created on the fake backend (gloo needs a real
                # rendezvous). They duplicate the NCCL groups' rank lists and Megatron makes
                # no check while creating them, so they are skipped; cfg.dist keeps its value,
                # so Bridge's validate() still sees the real setting.
                create_gloo_process_groups=False,
                use_sharp=d.use_sharp,
                high_priority_stream_groups=d.high_priority_stream_groups,
                sharp_enabled_group=d.sharp_enabled_group,
            )
            stage = "model_build_layers"
            _model_build_layers(cfg.model)
            stage = "model_build_dispatcher"
            note = _model_build_dispatcher(cfg.model)
        return {"verdict": "accept", "note": note} if note else {"verdict": "accept"}
    except BaseException as e:  # noqa: BLE001 - Megatron raises AssertionError, ValueError, ...
        if isinstance(e, KeyboardInterrupt):
            raise
        where, func = _where(e)
        msg = " ".join(str(e).split())[:400]
        kind = "oracle-error" if (_is_cpu_artefact(e) or stage in ("recipe", "apply")) else "reject"
        return {"verdict": kind, "type": type(e).__name__, "message": msg, "where": where,
                "function": func, "stage": stage}
    finally:
        torch.cuda.get_device_properties = saved
        try:
            parallel_state.destroy_model_parallel()
        except Exception:
            pass
        try:
            destroy_num_microbatches_calculator()
        except Exception:
            pass
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    # python oracle.py CONFIG.json  -> prints the verdict
    with open(sys.argv[1]) as f:
        print(json.dumps(run(json.load(f)), indent=1))
