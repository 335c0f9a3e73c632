#!/usr/bin/env python3
"""moerun against Hugging Face's modeling code: a tiny random Qwen3-MoE built with the
`transformers` package (Qwen3MoeForCausalLM, float32, on the CPU) is saved, its config.json
imported by `moec plan` through `hf(...)`, its weights loaded with `moerun --init-from-hf`, and
the first step's training loss compared with the transformers forward on the same tokens: the
first two windows of a corpus written by moerun-mkdata, read back with Megatron-Core's
IndexedDataset (moerun's windows: sample i is the seq_len + 1 tokens at stream position
i * seq_len). The model exercises GQA with QK-norm, RoPE, the softmax router with normalised
top-k weights (norm_topk_prob, which is Megatron's top-k-then-softmax) and SwiGLU experts.

The DeepSeek-V3 family (DeepseekV3ForCausalLM): multi-head latent attention with a query latent,
a dense first layer, the sigmoid router with group-limited top-k and a shared expert; loss and all
gradients under one rank, tp 2, cp 2 and ep 2 x pp 2. transformers returns no router logits for
it, so the reference recomputes them with hooks on the routers and builds Megatron's
load-balancing loss with Megatron-Core 0.16.1's own functions (compute_routing_scores_for_aux_loss,
switch_load_balancing_loss_func); a control without that term must be told apart.

The Qwen3-Next family (Qwen3NextForCausalLM): Gated DeltaNet on the first layer, gated full
attention with partial RoPE on the second, zero-centred RMSNorms (1 + w), the gated shared expert;
loss under one rank, tp 2, ep 2 x pp 2 and tp 2 x etp 2 x ep 2, all gradients under one rank, tp 2
and ep 2 x pp 2. The reference's fused tensors (in_proj_qkvz, in_proj_ba, conv1d, the query and
gate heads of q_proj) are cut here into moerun's matrices independently of moerun's own import.
Its decay rates are kept at 0.05-0.5 (test/megatron/gdn.py says why).

The Qwen3-VL family (Qwen3VLMoeForConditionalGeneration): the vision tower, its deepstack merger,
interleaved multimodal RoPE and the fused experts of the checkpoint, on two PNG files decoded by
moerun-mkdata --images beside a token corpus; the samples (each an image's start, placeholders and
end, then text; no loss on image tokens) are built here from the files moerun reads. Loss and all
gradients, the tower's included, under one rank, tp 2, cp 2 and ep 2 x pp 2, and the loss with the
tower frozen; the same checkpoint read with 1-D RoPE (no mrope_section) must be told apart.

Layouts: one rank, tp 2, ep 2, pp 2 and tp 2 with etp 2 and ep 2. Tolerance 1e-6 relative: both
sides compute in fp32 (the loss itself is summed in double on both), and the logits come from
sums of a few hundred products in different orders (BLAS blocking, tp/ep/etp partial sums), so
they differ by a few fp32 roundings of each logit (measured: 1.2e-9 to 5.1e-8 of the loss); a
wrong weight, norm, RoPE base or routing rule moves it by far more (the control, a checkpoint
whose q_norm weights are left at ones, moves it by 2.5e-3; the RoPE base of 10000 instead of
the config's 1e6, by 9e-5).

Gradients: moerun's objective is the mean cross entropy plus, per micro batch (here one
sequence) and MoE layer, Megatron's load-balancing loss coeff x E x sum_e f_e P_e (f_e the share
of the micro batch's routed copies that went to e, a constant; P_e the mean softmax score),
times 1 / micro batches. transformers' own aux loss is normalised otherwise, so the reference
objective is built here from the router logits transformers returns (output_router_logits) and
differentiated by torch autograd. Every gradient moert-train-driver dumps after step 1 must match
the torch gradient of the same Hugging Face tensor (transposed for Linear weights) within 1e-5 of
the tensor's largest magnitude, under one rank and under tp 2, ep 2 and pp 2.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/runtime/train/hf_reference.py --moec MOEC
       --moerun MOERUN --driver MOERT_TRAIN_DRIVER --mkdata MKDATA --mpirun MPIRUN --work DIR
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "megatron"))
import compare_dumps  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)
import torch  # noqa: E402

SEQ_LEN, SAMPLES, VOCAB = 64, 2, 128
TOL = 1e-6
GRAD_TOL = 1e-5
AUX_COEFF = 1e-2  # moert::ModelConfig::AuxLossCoeff, Megatron's moe_aux_loss_coeff default
DEEPSEEK_LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2", 2, "tp = 2"), ("cp2", 2, "cp = 2"), ("ep2_pp2", 4, "ep = 2; pp = 2")]
MTP_LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2_cp2", 4, "tp = 2; cp = 2"), ("ep2_pp2", 4, "ep = 2; pp = 2")]
NEXT_LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2", 2, "tp = 2"), ("ep2_pp2", 4, "ep = 2; pp = 2"),
                ("tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2")]
NEXT_GRAD_LAYOUTS = NEXT_LAYOUTS[:3]
GRAD_LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2", 2, "tp = 2"), ("ep2", 2, "ep = 2"), ("pp2", 2, "pp = 2")]
LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2", 2, "tp = 2"), ("ep2", 2, "ep = 2"), ("pp2", 2, "pp = 2"),
           ("tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2")]


def tiny_qwen3_moe(out_dir, perturb_q_norm=True):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, rope_theta=1000000.0,
                            rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=128,
                            decoder_sparse_step=1, mlp_only_layers=[], attention_dropout=0.0)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).float().eval()
    with torch.no_grad():
        # Norm weights start at one; move them so that a norm loaded wrong (or not at all) shows.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") and (perturb_q_norm or "q_norm" not in name):
                p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


def tiny_deepseek_v3(out_dir, layers=2, save=True):
    """DeepSeek-V3's architecture at a few dozen dimensions: multi-head latent attention with a
    query latent (q 24, kv 16, no-RoPE 8 + RoPE 8 per head, values 12, interleaved RoPE), a dense
    first layer, then the sigmoid router with group-limited top-4 (4 groups, the best 2), the
    normalised top-k weights scaled by DeepSeek-V3's routed_scaling_factor of 2.5, and a shared
    expert."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    config = DeepseekV3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
                              n_routed_experts=8, routed_scaling_factor=2.5, kv_lora_rank=16, q_lora_rank=24,
                              qk_rope_head_dim=8, v_head_dim=12, qk_nope_head_dim=8, n_group=4, topk_group=2,
                              num_experts_per_tok=4, first_k_dense_replace=1, norm_topk_prob=True,
                              rope_theta=10000.0, rope_scaling=None, rope_interleave=True, rms_norm_eps=1e-5,
                              tie_word_embeddings=False, max_position_embeddings=128, attention_dropout=0.0,
                              # What DeepSeek-V3's own config.json says and moec's hf() reads.
                              scoring_func="sigmoid", topk_method="noaux_tc")
    torch.manual_seed(1)
    model = DeepseekV3ForCausalLM(config).float().eval()
    # transformers builds the two latent norms at eps 1e-6 whatever the config says (DeepSeek-V3's
    # own rms_norm_eps); Megatron-Core builds every norm at one layernorm_epsilon, as moerun does.
    for layer in model.model.layers:
        layer.self_attn.q_a_layernorm.variance_epsilon = config.rms_norm_eps
        layer.self_attn.kv_a_layernorm.variance_epsilon = config.rms_norm_eps
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.2 * torch.randn_like(p))
    if save:
        model.save_pretrained(out_dir, safe_serialization=True)
    return model


def tiny_deepseek_v3_mtp(out_dir):
    """tiny_deepseek_v3 with one multi-token-prediction block, stored as DeepSeek-V3 stores its
    own: config.json says num_hidden_layers 2 and num_nextn_predict_layers 1, and the block is
    model.layers.2, a decoder layer's tensors beside enorm, hnorm, eh_proj ([H, 2H]),
    shared_head.norm and copies of the embedding and the output head. transformers builds no
    MTP block; a three-layer model supplies the block's decoder layer (returned with the two-layer
    main model and the block's own tensors)."""
    from transformers import DeepseekV3ForCausalLM
    full = tiny_deepseek_v3(out_dir, layers=3, save=False)
    config = full.config.to_dict()
    config["num_hidden_layers"] = 2
    main = DeepseekV3ForCausalLM(type(full.config)(**config)).float().eval()
    missing, _ = main.load_state_dict(full.state_dict(), strict=False)
    assert not missing, missing
    for layer in main.model.layers:
        layer.self_attn.q_a_layernorm.variance_epsilon = config["rms_norm_eps"]
        layer.self_attn.kv_a_layernorm.variance_epsilon = config["rms_norm_eps"]
    main.save_pretrained(out_dir, safe_serialization=True)
    H = config["hidden_size"]
    torch.manual_seed(2)
    own = {"enorm.weight": 1 + 0.2 * torch.randn(H), "hnorm.weight": 1 + 0.2 * torch.randn(H),
           "eh_proj.weight": 0.1 * torch.randn(H, 2 * H), "shared_head.norm.weight": 1 + 0.2 * torch.randn(H)}
    tensors = {n: t.contiguous() for n, t in full.state_dict().items() if n.startswith("model.layers.2.")}
    tensors.update({"model.layers.2." + n: t for n, t in own.items()})
    tensors["model.layers.2.embed_tokens.weight"] = main.model.embed_tokens.weight.detach().clone()
    tensors["model.layers.2.shared_head.head.weight"] = main.lm_head.weight.detach().clone()
    add_to_checkpoint(out_dir, tensors, {"num_nextn_predict_layers": 1})
    return full, main, own


def tiny_qwen3_next(out_dir, swap_query_gate=False, layers=2):
    """Qwen3-Next's architecture at a few dozen dimensions: layer 0 Gated DeltaNet (2 key heads,
    4 value heads, 8 wide), layer 1 full attention (4 query heads, 2 key-value heads, 16 wide,
    RoPE on a quarter of each head) whose output a sigmoid gates, 8 experts top-2 and a gated
    shared expert 48 wide on both; rms_norm_eps 1e-6, as Qwen3-Next's own (hf() carries it as
    norm_epsilon: the Gated DeltaNet's output norm divides by a root mean square near 1e-3, where
    an epsilon of Megatron's default 1e-5 moves the loss by 5e-4). swap_query_gate saves q_proj
    with each head's query and gate exchanged (the control); layers 3 adds a second full-attention
    layer (the MTP block's)."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    config = Qwen3NextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                             shared_expert_intermediate_size=48, num_hidden_layers=layers, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.25, num_experts=8,
                             layer_types=["linear_attention", "full_attention", "full_attention"][:layers],
                             num_experts_per_tok=2, norm_topk_prob=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                             full_attention_interval=2, linear_num_key_heads=2, linear_num_value_heads=4,
                             linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                             tie_word_embeddings=False, max_position_embeddings=128, decoder_sparse_step=1,
                             mlp_only_layers=[], attention_dropout=0.0)
    torch.manual_seed(3)
    model = Qwen3NextForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # zero-centred ones start at 0, the gated norm's at 1
                p.add_(0.2 * torch.randn_like(p))
            elif name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 0.5).log())
            elif name.endswith("dt_bias"):
                p.add_(0.3 * torch.randn_like(p))
    if swap_query_gate:
        with torch.no_grad():
            q = model.model.layers[1].self_attn.q_proj.weight
            heads = config.num_attention_heads
            q.copy_(q.reshape(heads, 2, -1).flip(1).reshape(q.shape))
    if out_dir:
        model.save_pretrained(out_dir, safe_serialization=True)
    return model


# Qwen3-VL: image ids at the top of the tiny vocabulary, and two PNG files (pixel size) that
# moerun-mkdata resizes to 40 x 24 and 24 x 32 pixels: 15 and 12 image tokens of 4-pixel patches.
VL_START, VL_IMAGE, VL_END = 124, 125, 126
VL_IMAGES = [(40, 24), (24, 32)]
VL_LAYOUTS = [("one_rank", 1, "tp = 1"), ("tp2", 2, "tp = 2"), ("cp2", 2, "cp = 2"), ("ep2_pp2", 4, "ep = 2; pp = 2")]


def tiny_qwen3_vl_moe(out_dir, mrope=True):
    """Qwen3-VL-MoE's architecture at a few dozen dimensions: the Qwen3-MoE decoder of
    tiny_qwen3_moe with interleaved multimodal RoPE over sections [4, 2, 2] of its 8 frequencies,
    its experts fused (gate_up_proj, down_proj) as transformers stores them; a two-block vision
    tower (32 wide, 4-pixel patches, two frames, a 4 x 4 position table, 2 x 2 merge into the
    decoder's 64) whose first block feeds a deepstack merger. mrope False writes the same weights
    with a config.json that has no mrope_section (the control)."""
    import json
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration
    config = Qwen3VLMoeConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_experts=8, num_experts_per_tok=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         max_position_embeddings=128, decoder_sparse_step=1, mlp_only_layers=[], attention_dropout=0.0,
                         rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=48, out_hidden_size=64,
                           patch_size=4, temporal_patch_size=2, in_channels=3, spatial_merge_size=2,
                           num_position_embeddings=16, deepstack_visual_indexes=[0], hidden_act="gelu_pytorch_tanh"),
        image_token_id=VL_IMAGE, vision_start_token_id=VL_START, vision_end_token_id=VL_END,
        tie_word_embeddings=False)
    torch.manual_seed(6)
    model = Qwen3VLMoeForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        # Norms start at one and biases at zero; move them so that one loaded wrong shows.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "norm1" in name or "norm2" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)
    if not mrope:
        path = os.path.join(out_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        del saved["text_config"]["rope_scaling"]["mrope_section"]
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)
    return model


def vision_dataset(prefix):
    """The images moerun-mkdata --images wrote beside PREFIX (docs/runtime.md, PREFIX.vision.idx
    and .bin): [(frames, rows, cols, patches [frames x rows x cols, patch values])]."""
    import struct
    with open(prefix + ".vision.idx", "rb") as f:
        idx = f.read()
    assert idx[:8] == b"MOEVISN\0", "not a vision index"
    _, count, patch, temporal, _ = struct.unpack_from("<5Q", idx, 8)
    values = torch.from_file(prefix + ".vision.bin", dtype=torch.float32,
                             size=os.path.getsize(prefix + ".vision.bin") // 4)
    out, at, dim = [], 8 + 40 + 24, 3 * temporal * patch * patch
    for _ in range(count):
        frames, rows, cols, offset = struct.unpack_from("<4Q", idx, at)
        at += 32
        n = frames * rows * cols
        out.append((frames, rows, cols, values[offset:offset + n * dim].reshape(n, dim).clone()))
    return out


def vl_samples(corpus, images, merge=2):
    """moerun's vision-language samples (runtime/data/MultimodalSamples.cpp) built independently:
    sample s is image s mod N (start, one placeholder per merged patch, end), then the text window
    s with the three image ids read as 0, cut to seq_len + 1; the labels are the next tokens, -1
    where the next token belongs to an image. Returns (tokens, labels, images of each sample)."""
    out = []
    for s, words in enumerate(windows(corpus)):
        frames, rows, cols, patches = images[s % len(images)]
        tokens = [VL_START] + [VL_IMAGE] * (frames * rows * cols // (merge * merge)) + [VL_END]
        tokens += [0 if w in (VL_START, VL_IMAGE, VL_END) else int(w) for w in words]
        tokens = torch.tensor(tokens[:SEQ_LEN + 1])
        labels = torch.where((tokens[1:] == VL_START) | (tokens[1:] == VL_IMAGE) | (tokens[1:] == VL_END), -1,
                             tokens[1:])
        out.append((tokens[:-1], labels, [(frames, rows, cols, patches)]))
    return out


def vl_reference(model, samples, aux_coeff=AUX_COEFF):
    """transformers' loss (mean cross entropy over the text labels) and every parameter's gradient
    of moerun's objective: that loss plus, per sequence and MoE layer, Megatron's load-balancing
    loss of the routers' logits (hooks on the router Linears; Megatron-Core's own functions)."""
    cfg = model.config.text_config
    x = torch.stack([t for t, _, _ in samples])
    y = torch.stack([l for _, l, _ in samples])
    images = [i for _, _, imgs in samples for i in imgs]
    pixels = torch.cat([p for _, _, _, p in images])
    grid = torch.tensor([[f, r, c] for f, r, c, _ in images])
    captured = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda mod, inp, out: captured.append(out.float()))
             for layer in model.model.language_model.layers]
    model.zero_grad()
    logits = model(input_ids=x, pixel_values=pixels, image_grid_thw=grid).logits
    for h in hooks:
        h.remove()
    ce = torch.nn.functional.cross_entropy(logits.double().reshape(-1, VOCAB), y.reshape(-1), ignore_index=-1)
    aux = 0
    for router_logits in captured:
        for b in range(len(samples)):
            aux = aux + megatron_aux(router_logits[b * SEQ_LEN:(b + 1) * SEQ_LEN], cfg.num_experts_per_tok, "softmax",
                                     cfg.num_experts, aux_coeff)
    (ce.float() + aux / len(samples)).backward()
    return float(ce), {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def qwen3_vl_runtime_view(grads, cfg):
    """Hugging Face name -> gradient, as moerun's names and layouts: the decoder under
    model.language_model., the fused experts cut per expert ([in, out] already), the tower's
    Linear weights transposed (the patch embedding's Conv3d flattened first)."""
    ffn = cfg.text_config.moe_intermediate_size
    block = {"norm1.weight": "norm1", "norm1.bias": "norm1_bias", "attn.qkv.weight": "qkv", "attn.qkv.bias": "qkv_bias",
             "attn.proj.weight": "proj", "attn.proj.bias": "proj_bias", "norm2.weight": "norm2",
             "norm2.bias": "norm2_bias", "mlp.linear_fc1.weight": "fc1", "mlp.linear_fc1.bias": "fc1_bias",
             "mlp.linear_fc2.weight": "fc2", "mlp.linear_fc2.bias": "fc2_bias"}
    merger = {"norm.weight": "norm", "norm.bias": "norm_bias", "linear_fc1.weight": "fc1",
              "linear_fc1.bias": "fc1_bias", "linear_fc2.weight": "fc2", "linear_fc2.bias": "fc2_bias"}
    tower = {"patch_embed.proj.weight": "patch_embed", "patch_embed.proj.bias": "patch_embed_bias",
             "pos_embed.weight": "pos_embed"}
    out = {}
    for hf, g in grads.items():
        if hf.startswith("model.visual."):
            rest = hf[len("model.visual."):]
            m = re.fullmatch(r"(blocks|deepstack_merger_list)\.(\d+)\.(.*)", rest)
            if m and m.group(1) == "blocks":
                name = f"blocks.{m.group(2)}.{block[m.group(3)]}"
            elif m:
                name = f"deepstack.{m.group(2)}.{merger[m.group(3)]}"
            elif rest.startswith("merger."):
                name = "merger." + merger[rest[len("merger."):]]
            else:
                name = tower[rest]
            out["vision." + name] = g.reshape(g.shape[0], -1).t() if rest.endswith("weight") and g.dim() > 1 and \
                "pos_embed" not in rest else g
            continue
        hf = hf.replace("model.language_model.", "model.")
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)", hf)
        if m:
            for e in range(g.shape[0]):
                pre = f"layers.{m.group(1)}.experts.{e}."
                if m.group(2) == "down_proj":
                    out[pre + "down"] = g[e]
                else:
                    out[pre + "gate"], out[pre + "up"] = g[e][:, :ffn], g[e][:, ffn:]
            continue
        name, linear = runtime_name(hf)
        out[name] = g.t() if linear else g
    return out


def qwen3_vl(a):
    """The Qwen3-VL family: a tiny Qwen3VLMoeForConditionalGeneration on two decoded images beside
    a token corpus (moerun-mkdata), the first step's loss and every gradient (tower included)
    against transformers under one rank and the layouts of VL_LAYOUTS (tp runs the whole tower on
    every rank, cp takes each rank's multimodal positions from its whole sequence, pp puts the tower
    and the deepstack layer on the first stage), and the loss with the tower frozen. Control: the same checkpoint with a config.json
    that has no mrope_section (1-D RoPE) must be told apart."""
    corpus = os.path.join(a.work, "vl_corpus")
    subprocess.run([a.mkdata, "--out", corpus, "--vocab", str(VOCAB), "--tokens", "2000", "--seed", "7"], check=True,
                   env=a.env, stdout=subprocess.DEVNULL)
    pngs = []
    for i, (w, h) in enumerate(VL_IMAGES):
        pngs.append(os.path.join(a.work, f"vl_{i}.png"))
        subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "lit", "cli", "Inputs", "write_png.py"), pngs[-1],
                        str(w), str(h)], check=True)
    subprocess.run([a.mkdata, "--out", corpus, "--images", ",".join(pngs), "--patch-size", "4", "--min-pixels", "256",
                    "--max-pixels", "1024"], check=True, env=a.env, stdout=subprocess.DEVNULL)
    hf_dir = os.path.join(a.work, "qwen3_vl_moe_tiny")
    model = tiny_qwen3_vl_moe(hf_dir)
    samples = vl_samples(corpus, vision_dataset(corpus))
    ref, grads = vl_reference(model, samples)
    grads = qwen3_vl_runtime_view(grads, model.config)
    print(f"transformers Qwen3VLMoeForConditionalGeneration: loss {ref!r} over "
          f"{sum(int((l >= 0).sum()) for _, l, _ in samples)} text labels")
    for name, ranks, parallel in VL_LAYOUTS:
        check_loss(a, f"Qwen3-VL {name}", "vl_" + name, ranks, parallel, hf_dir, corpus, ref)
        check_gradients(a, f"Qwen3-VL gradients under {name}", "vl_" + name, ranks, parallel, hf_dir, corpus, grads)
    # A frozen tower is not among the parameters the optimizer steps; --init-from-hf loads it all the same.
    check_loss(a, "Qwen3-VL with the tower frozen, tp2", "vl_frozen_tp2", 2, "tp = 2", hf_dir, corpus, ref,
               "  vision { frozen = true }\n")
    control_dir = os.path.join(a.work, "qwen3_vl_moe_no_mrope")
    tiny_qwen3_vl_moe(control_dir, mrope=False)
    check_control(a, "Qwen3-VL control (no mrope_section: 1-D RoPE)", "vl_control", control_dir, corpus, ref)


def tiny_qwen3_next_mtp(out_dir):
    """tiny_qwen3_next with one multi-token-prediction block, stored as Qwen3-Next stores its own
    (mtp.fc [H, 2H] over [embedding, hidden], mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden,
    mtp.norm, all zero-centred, and a gated full-attention layer mtp.layers.0; config.json
    mtp_num_hidden_layers 1). transformers builds no MTP block; a three-layer model supplies the
    block's layer (returned with the two-layer main model and the block's own tensors)."""
    from transformers import Qwen3NextForCausalLM
    full = tiny_qwen3_next(None, layers=3)
    config = full.config.to_dict()
    config["num_hidden_layers"], config["layer_types"] = 2, config["layer_types"][:2]
    main = Qwen3NextForCausalLM(type(full.config)(**config)).float().eval()
    missing, _ = main.load_state_dict(full.state_dict(), strict=False)
    assert not missing, missing
    main.save_pretrained(out_dir, safe_serialization=True)
    H = config["hidden_size"]
    torch.manual_seed(4)
    own = {"pre_fc_norm_embedding.weight": 0.2 * torch.randn(H), "pre_fc_norm_hidden.weight": 0.2 * torch.randn(H),
           "fc.weight": 0.1 * torch.randn(H, 2 * H), "norm.weight": 0.2 * torch.randn(H)}
    prefix = "model.layers.2."
    tensors = {"mtp.layers.0." + n[len(prefix):]: t.contiguous() for n, t in full.state_dict().items()
               if n.startswith(prefix)}
    tensors.update({"mtp." + n: t for n, t in own.items()})
    add_to_checkpoint(out_dir, tensors, {"mtp_num_hidden_layers": 1})
    return full, main, own


def qwen3_next_runtime_view(grads, cfg):
    """Hugging Face name -> gradient, cut into moerun's names and layouts ([in, out] for Linear
    weights): the fused Gated DeltaNet projections per key head, the conv over q, k and v, and
    q_proj's per-head [query, gate]."""
    hk, hv, d = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim
    r, heads, hd = hv // hk, cfg.num_attention_heads, cfg.head_dim
    out = {}
    for hf, g in grads.items():
        m = re.fullmatch(r"model\.layers\.(\d+)\.(linear_attn|self_attn|mlp)\.(.*)", hf)
        pre = f"layers.{m.group(1)}." if m else ""
        rest = m.group(3) if m else ""
        if m and m.group(2) == "linear_attn":
            if rest == "in_proj_qkvz.weight":
                q, k, v, z = g.reshape(hk, 2 * d + 2 * r * d, -1).split([d, d, r * d, r * d], dim=1)
                for n, t in zip("qkvz", (q, k, v, z)):
                    out[pre + "gdn." + n] = t.reshape(-1, t.shape[-1]).t()
            elif rest == "in_proj_ba.weight":
                b, a = g.reshape(hk, 2 * r, -1).split([r, r], dim=1)
                out[pre + "gdn.b"], out[pre + "gdn.a"] = (t.reshape(-1, t.shape[-1]).t() for t in (b, a))
            elif rest == "conv1d.weight":
                for n, t in zip(("conv_q", "conv_k", "conv_v"), g[:, 0, :].split([hk * d, hk * d, hv * d])):
                    out[pre + "gdn." + n] = t
            elif rest in ("dt_bias", "A_log"):
                out[pre + "gdn." + rest.lower()] = g.reshape(-1, 1)
            else:
                out[pre + {"norm.weight": "gdn.norm", "out_proj.weight": "gdn.out"}[rest]] = (
                    g.t() if rest == "out_proj.weight" else g)
        elif m and rest == "q_proj.weight":
            q, gate = g.reshape(heads, 2, hd, -1).unbind(1)
            out[pre + "attn.q"], out[pre + "attn.gate"] = (t.reshape(heads * hd, -1).t() for t in (q, gate))
        elif m and rest == "shared_expert_gate.weight":
            out[pre + "shared.gate_weight"] = g.t()
        else:
            name, linear = runtime_name(hf)
            out[name] = g.t() if linear else g
    return out


# The MTP block's own tensors (enorm, hnorm, eh_proj, the block's final norm) as each family names them.
DEEPSEEK_MTP = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight")
QWEN3_NEXT_MTP = ("pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "fc.weight", "norm.weight")


def mtp_reference_loss(full, main, own, samples, names=DEEPSEEK_MTP, zero_centred=False):
    """The MTP block's mean cross entropy as Megatron-Core computes it, built from transformers'
    decoder layer (layer 2 of the three-layer model full): the main model's normalised output and
    the embeddings of the next tokens (0 past the end) through enorm / hnorm, [embedding, hidden]
    through eh_proj, the layer (causal, RoPE at the same positions), the block's final norm and the
    output head, against the tokens two ahead; the last position has no label. Qwen3-Next's norms
    are zero-centred (x (1 + w))."""
    cfg = main.config
    x = torch.stack([s[:-1] for s in samples])
    labels = torch.stack([s[2:] for s in samples])
    B, T = x.shape
    enorm, hnorm, proj, final = (own[n] for n in names)

    def rms(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * (1 + w if zero_centred else w)

    with torch.no_grad():
        h = main.model(input_ids=x).last_hidden_state
        ahead = torch.cat([x[:, 1:], torch.zeros(B, 1, dtype=x.dtype)], 1)
        e = main.model.embed_tokens(ahead)
        X = torch.cat([rms(e, enorm), rms(h, hnorm)], -1) @ proj.t()
        pos = torch.arange(T).unsqueeze(0).expand(B, T)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None].expand(B, 1, T, T)
        Y = full.model.layers[2](X, attention_mask=mask, position_ids=pos,
                                 position_embeddings=full.model.rotary_emb(X, pos))
        Y = Y[0] if isinstance(Y, tuple) else Y
        logits = main.lm_head(rms(Y, final)).double()
    return float(torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1)))


def add_to_checkpoint(out_dir, tensors, config):
    """Adds tensors to a saved model.safetensors and keys to its config.json (the MTP blocks that
    transformers does not build)."""
    import json
    from safetensors.torch import load_file, save_file
    path = os.path.join(out_dir, "model.safetensors")
    saved = load_file(path)
    saved.update(tensors)
    save_file(saved, path, metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(config)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def windows(prefix):
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(prefix)
    stream = torch.cat([torch.as_tensor(ds[i].astype("int64")) for i in range(len(ds))])
    return [stream[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN + 1] for i in range(SAMPLES)]


def reference_loss(model, samples):
    x = torch.stack([s[:-1] for s in samples])
    y = torch.stack([s[1:] for s in samples])
    with torch.no_grad():
        logits = model(input_ids=x).logits.double()
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)))


def reference_gradients(model, samples):
    """Name -> gradient of moerun's objective, for every Hugging Face parameter."""
    cfg = model.config
    x = torch.stack([s[:-1] for s in samples])
    y = torch.stack([s[1:] for s in samples])
    model.zero_grad()
    out = model(input_ids=x, output_router_logits=True)
    ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), y.reshape(-1))
    experts, k = cfg.num_experts, cfg.num_experts_per_tok
    aux = 0
    for logits in out.router_logits:  # [batch * seq, experts] per MoE layer
        for b in range(len(samples)):
            part = logits[b * SEQ_LEN:(b + 1) * SEQ_LEN]
            probs = torch.softmax(part.float(), dim=-1)
            chosen = torch.topk(part, k, dim=-1).indices
            f = torch.bincount(chosen.flatten(), minlength=experts).float() / (SEQ_LEN * k)
            aux = aux + AUX_COEFF * experts * (f.detach() * probs.mean(dim=0)).sum()
    (ce + aux / len(samples)).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def megatron_aux(logits, topk, score_function, experts, coeff):
    """Megatron-Core 0.16.1's load-balancing loss of one micro batch, by its own functions: the
    counts of each token's top-k by the scores over all experts (no bias, no groups) and the
    scores, normalised for a sigmoid router (moe_utils.py)."""
    from megatron.core.transformer.moe.moe_utils import (compute_routing_scores_for_aux_loss,
                                                         switch_load_balancing_loss_func)
    routing_map, scores = compute_routing_scores_for_aux_loss(logits, topk, score_function)
    return switch_load_balancing_loss_func(probs=scores, tokens_per_expert=routing_map.sum(dim=0).float(),
                                           total_num_tokens=logits.shape[0], topk=topk, num_experts=experts,
                                           moe_aux_loss_coeff=coeff)


def deepseek_reference_gradients(model, samples, aux_coeff=None):
    """Name -> gradient of moerun's objective on the DeepSeek-V3 model: transformers returns no
    router logits for it, so hooks on the routers recompute them from the routers' inputs (in
    the graph, so the aux loss reaches the hidden states as in Megatron)."""
    cfg = model.config
    x = torch.stack([s[:-1] for s in samples])
    y = torch.stack([s[1:] for s in samples])
    captured = []
    hooks = [layer.mlp.gate.register_forward_hook(
        lambda mod, inp, out: captured.append(torch.nn.functional.linear(inp[0].reshape(-1, cfg.hidden_size).float(),
                                                                         mod.weight.float())))
             for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    model.zero_grad()
    out = model(input_ids=x)
    for h in hooks:
        h.remove()
    ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), y.reshape(-1))
    aux = 0
    for logits in captured:
        for b in range(len(samples)):
            aux = aux + megatron_aux(logits[b * SEQ_LEN:(b + 1) * SEQ_LEN], cfg.num_experts_per_tok, "sigmoid",
                                     cfg.n_routed_experts, AUX_COEFF if aux_coeff is None else aux_coeff)
    (ce + aux / len(samples)).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def runtime_name(hf):
    """The moerun parameter of a Hugging Face tensor and whether it is a Linear weight ([out, in])."""
    if hf == "model.embed_tokens.weight":
        return "embedding", False
    if hf == "model.norm.weight":
        return "final_norm", False
    if hf == "lm_head.weight":
        return "output", True
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.*)\.weight", hf)
    layer, rest = m.group(1), m.group(2)
    e = re.fullmatch(r"mlp\.experts\.(\d+)\.(gate|up|down)_proj", rest)
    if e:
        return f"layers.{layer}.experts.{e.group(1)}.{e.group(2)}", True
    names = {"input_layernorm": ("attn_norm", False), "post_attention_layernorm": ("mlp_norm", False),
             "self_attn.q_norm": ("attn.q_norm", False), "self_attn.k_norm": ("attn.k_norm", False),
             "mlp.gate": ("router", True), "self_attn.q_a_proj": ("attn.q_down", True),
             "self_attn.q_a_layernorm": ("attn.q_down_norm", False), "self_attn.q_b_proj": ("attn.q_up", True),
             "self_attn.kv_a_proj_with_mqa": ("attn.kv_down", True),
             "self_attn.kv_a_layernorm": ("attn.kv_down_norm", False), "self_attn.kv_b_proj": ("attn.kv_up", True)}
    for p in "qkvo":
        names[f"self_attn.{p}_proj"] = (f"attn.{p}", True)
    for p in ("gate", "up", "down"):
        names[f"mlp.{p}_proj"] = (f"mlp.{p}", True)
        names[f"mlp.shared_experts.{p}_proj"] = (f"shared.{p}", True)
        names[f"mlp.shared_expert.{p}_proj"] = (f"shared.{p}", True)
    name, linear = names[rest]
    return f"layers.{layer}.{name}", linear


def recipe(name, ranks, parallel, hf_dir, corpus, extra=""):
    return (f'recipe {name} {{\n  model = hf("{hf_dir}/config.json")\n  cluster {{ gpu = cpu; gpus = {ranks} }}\n'
            f"  seq_len = {SEQ_LEN}\n  batch {{ micro = 1; global = {SAMPLES} }}\n  parallel {{ {parallel} }}\n"
            f'  data {{ source = real("{corpus}") }}\n{extra}}}\n')


def driver_gradients(a, name, ranks, parallel, hf_dir, corpus):
    """moert-train-driver's full gradients after step 1 (None and the output on failure)."""
    plan = harness.plan(a, "grad_" + name, recipe("grad_" + name, ranks, parallel, hf_dir, corpus))
    dump = os.path.join(a.work, "grad_" + name)
    os.makedirs(dump, exist_ok=True)
    cmd = [a.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "-np", str(ranks),
           a.driver, plan, "--steps", "1", "--init-from-hf", hf_dir, "--dump", dump]
    p = subprocess.run(cmd, env=a.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        return None, p.stdout
    return compare_dumps.read_run(dump, "grads"), p.stdout


def runtime_view(grads):
    """Hugging Face name -> gradient, as moerun's names and layouts (Linear weights transposed)."""
    out = {}
    for hf, g in grads.items():
        name, linear = runtime_name(hf)
        out[name] = g.t() if linear else g
    return out


def compare_gradients(ours, ref):
    """The worst error over every tensor of ref (moerun's names; of the tensor's largest reference
    magnitude) and the tensors that miss GRAD_TOL."""
    if any(k.startswith("model.") or k == "lm_head.weight" for k in ref):
        ref = runtime_view(ref)
    worst, bad = 0.0, []
    for name, want in ref.items():
        if name not in ours:
            bad.append(f"{name}: not in moerun's dump")
            continue
        shape, values = ours[name]
        got = torch.tensor(values, dtype=torch.float32).reshape(shape)
        err = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)
        worst = max(worst, err)
        if err > GRAD_TOL:
            bad.append(f"{name}: {err:.1e}")
    return worst, bad


def check_loss(a, label, name, ranks, parallel, hf_dir, corpus, ref, extra=""):
    """moerun's step-1 loss under one layout against the transformers loss ref."""
    loss, out = run(a, name, ranks, parallel, hf_dir, corpus, extra)
    rel = abs(loss - ref) / abs(ref) if loss is not None else float("inf")
    check(loss is not None and rel <= TOL,
          f"{label} ({ranks} ranks): moerun's step-1 loss {loss!r} equals transformers' within {rel:.1e} relative",
          out)


def check_control(a, label, name, hf_dir, corpus, ref):
    """moerun's step-1 loss on one rank from a control checkpoint must be told apart from ref."""
    loss, out = run(a, name, 1, "tp = 1", hf_dir, corpus)
    rel = abs(loss - ref) / abs(ref) if loss is not None else 0.0
    check(loss is not None and rel > 100 * TOL, f"{label}: told apart, {rel:.1e} relative", out)


def check_gradients(a, label, name, ranks, parallel, hf_dir, corpus, ref):
    """moert-train-driver's step-1 gradients under one layout against torch's ref; returns them."""
    ours, out = driver_gradients(a, name, ranks, parallel, hf_dir, corpus)
    if ours is None:
        check(False, f"{label}: moert-train-driver failed", out)
        return None
    worst, bad = compare_gradients(ours, ref)
    check(not bad, f"{label} ({ranks} ranks): all {len(ref)} tensors equal torch's within {worst:.1e} of their "
          "scale" + (f"; off: {', '.join(bad[:5])}" if bad else ""))
    return ours


def run(a, name, ranks, parallel, hf_dir, corpus, extra=""):
    plan = harness.plan(a, name, recipe(name, ranks, parallel, hf_dir, corpus, extra))
    log = os.path.join(a.work, name + ".jsonl")
    rc, out = harness.moerun(a, ranks, plan, ["--steps", "1", "--init-from-hf", hf_dir, "--log", log])
    if rc != 0 or not os.path.exists(log):
        return None, out
    return harness.records(log)[0]["loss"], out


def deepseek_v3(a, corpus, samples):
    """The DeepSeek-V3 family: loss and every gradient against transformers under one rank and
    the layouts of DEEPSEEK_LAYOUTS (tp splits the latent up-projections by heads, cp runs the
    ring over full per-head K and V, ep splits the routed experts)."""
    hf_dir = os.path.join(a.work, "deepseek_v3_tiny")
    model = tiny_deepseek_v3(hf_dir)
    ref = reference_loss(model, samples)
    print(f"transformers DeepseekV3ForCausalLM: loss {ref!r}")
    grads = deepseek_reference_gradients(model, samples)
    for name, ranks, parallel in DEEPSEEK_LAYOUTS:
        check_loss(a, f"DeepSeek-V3 {name}", "dsv3_" + name, ranks, parallel, hf_dir, corpus, ref)
        ours = check_gradients(a, f"DeepSeek-V3 gradients under {name}", "dsv3_" + name, ranks, parallel, hf_dir,
                               corpus, grads)
        if ours is not None and name == "one_rank":
            # Control: Megatron's load-balancing term is in what matched.
            _, bad = compare_gradients(ours, deepseek_reference_gradients(model, samples, aux_coeff=0.0))
            check(bool(bad), f"DeepSeek-V3 control (reference without Megatron's aux loss): {len(bad)} tensors "
                  "told apart")


def check_mtp_losses(a, label, prefix, hf_dir, corpus, ref, ref_mtp, layouts):
    """moerun's step-1 loss and MTP loss under each layout against the references."""
    for name, ranks, parallel in layouts:
        plan = harness.plan(a, prefix + name, recipe(prefix + name, ranks, parallel, hf_dir, corpus))
        log = os.path.join(a.work, prefix + name + ".jsonl")
        rc, out = harness.moerun(a, ranks, plan, ["--steps", "1", "--init-from-hf", hf_dir, "--log", log])
        first = harness.records(log)[0] if rc == 0 and os.path.exists(log) else {}
        errs = [abs(first[k] - want) / abs(want) if k in first else float("inf")
                for k, want in (("loss", ref), ("mtp_loss", ref_mtp))]
        check(max(errs) <= TOL, f"{label} {name} ({ranks} ranks): loss and MTP loss equal the reference "
              f"within {max(errs):.1e} relative", out)


def deepseek_v3_mtp(a, corpus, samples):
    """DeepSeek-V3 with its MTP block read from the checkpoint by --init-from-hf: the step-1 loss
    and MTP loss moerun logs against transformers' main model and the block's reference, under
    one rank and the layouts of MTP_LAYOUTS (cp takes each token's next from the whole sequence;
    pp puts the block and a copy of the embedding on the last stage)."""
    hf_dir = os.path.join(a.work, "deepseek_v3_mtp_tiny")
    full, main, own = tiny_deepseek_v3_mtp(hf_dir)
    ref, ref_mtp = reference_loss(main, samples), mtp_reference_loss(full, main, own, samples)
    print(f"transformers DeepseekV3ForCausalLM with the MTP block: loss {ref!r}, MTP loss {ref_mtp!r}")
    check_mtp_losses(a, "DeepSeek-V3 MTP", "mtp_", hf_dir, corpus, ref, ref_mtp, MTP_LAYOUTS)
    # Control: the block's eh_proj read transposed ([embedding, hidden] halves swapped) must show.
    swapped = dict(own, **{"eh_proj.weight": own["eh_proj.weight"].roll(own["eh_proj.weight"].shape[0], 1)})
    other = mtp_reference_loss(full, main, swapped, samples)
    check(abs(other - ref_mtp) / abs(ref_mtp) > 100 * TOL,
          f"DeepSeek-V3 MTP control (embedding and hidden halves swapped): told apart, {other!r}")


def qwen3_next(a, corpus, samples):
    """The Qwen3-Next family: loss under NEXT_LAYOUTS and every gradient under NEXT_GRAD_LAYOUTS
    against transformers (no cp: Megatron-Core 0.16 has none for Gated DeltaNet)."""
    hf_dir = os.path.join(a.work, "qwen3_next_tiny")
    model = tiny_qwen3_next(hf_dir)
    ref = reference_loss(model, samples)
    print(f"transformers Qwen3NextForCausalLM: loss {ref!r}")
    grads = qwen3_next_runtime_view(reference_gradients(model, samples), model.config)
    for name, ranks, parallel in NEXT_LAYOUTS:
        check_loss(a, f"Qwen3-Next {name}", "next_" + name, ranks, parallel, hf_dir, corpus, ref)
    for name, ranks, parallel in NEXT_GRAD_LAYOUTS:
        check_gradients(a, f"Qwen3-Next gradients under {name}", "next_" + name, ranks, parallel, hf_dir, corpus,
                        grads)
    # Control: each head's query and output gate exchanged in the checkpoint moerun reads.
    control_dir = os.path.join(a.work, "qwen3_next_control")
    tiny_qwen3_next(control_dir, swap_query_gate=True)
    check_control(a, "Qwen3-Next control (query and gate heads exchanged)", "next_control", control_dir, corpus, ref)
    # Its MTP block, read from mtp.*.
    hf_dir = os.path.join(a.work, "qwen3_next_mtp_tiny")
    full, main, own = tiny_qwen3_next_mtp(hf_dir)
    ref, ref_mtp = reference_loss(main, samples), mtp_reference_loss(full, main, own, samples, QWEN3_NEXT_MTP, True)
    print(f"transformers Qwen3NextForCausalLM with the MTP block: loss {ref!r}, MTP loss {ref_mtp!r}")
    check_mtp_losses(a, "Qwen3-Next MTP", "next_mtp_", hf_dir, corpus, ref, ref_mtp, NEXT_GRAD_LAYOUTS)
    # Control: the block's norms read as plain weights (not 1 + w) must show.
    other = mtp_reference_loss(full, main, own, samples, QWEN3_NEXT_MTP, zero_centred=False)
    check(abs(other - ref_mtp) / abs(ref_mtp) > 100 * TOL,
          f"Qwen3-Next MTP control (norms not zero-centred): told apart, {other!r}")


def main():
    a = harness.args(extra=[("--driver", "moert-train-driver, for the gradient dumps")])
    corpus = os.path.join(a.work, "corpus")
    subprocess.run([a.mkdata, "--out", corpus, "--vocab", str(VOCAB), "--tokens", "2000", "--seed", "5"],
                   check=True, env=a.env, stdout=subprocess.DEVNULL)
    samples = windows(corpus)
    hf_dir = os.path.join(a.work, "qwen3_moe_tiny")
    model = tiny_qwen3_moe(hf_dir)
    ref = reference_loss(model, samples)
    print(f"transformers Qwen3MoeForCausalLM: loss {ref!r}")
    for name, ranks, parallel in LAYOUTS:
        check_loss(a, name, name, ranks, parallel, hf_dir, corpus, ref)
    grads = reference_gradients(model, samples)
    for name, ranks, parallel in GRAD_LAYOUTS:
        check_gradients(a, f"gradients under {name}", name, ranks, parallel, hf_dir, corpus, grads)
    deepseek_v3(a, corpus, samples)
    deepseek_v3_mtp(a, corpus, samples)
    qwen3_next(a, corpus, samples)
    qwen3_vl(a)
    # Control: the same weights but the q-norm left at ones in the checkpoint moerun reads.
    control_dir = os.path.join(a.work, "control")
    tiny_qwen3_moe(control_dir, perturb_q_norm=False)
    check_control(a, "control (q_norm not loaded as trained)", "control", control_dir, corpus, ref)
    return harness.finish("hf_reference")


if __name__ == "__main__":
    sys.exit(main())
