#!/usr/bin/env python3
"""Megatron-Bridge round trip: do Bridge 0.3.1's own MoE recipes come into moec and go back out unchanged?

For every MoE recipe of Bridge 0.3.1 (oracle.RECIPES, PROVIDER_RECIPES and HF_RECIPES; the
Hugging Face configs they read are transcribed in oracle.HF_CONFIGS and checked against Bridge's
provider classes first, check_transcriptions), this
  1. builds the recipe with Bridge 0.3.1 and writes it with Bridge's own ConfigContainer.to_yaml();
  2. runs `moec import --from megatron-bridge` on that file, with the smallest GPU count the
     recipe's parallelism and global batch allow on which moec predicts that it fits, on H100,
     else H200, else B200 (a ConfigContainer does not hold the cluster);
  3. runs `moec check --no-planner --target megatron-bridge@0.3.1` on the result: what Megatron
     would reject at start-up (memory is a prediction, not a start-up check, and is left out);
     an error there is right only where the oracle rejects the recipe as Bridge ships it;
  4. runs `moec export --to megatron-bridge --target megatron-bridge@0.3.1` on it, applies the
     overrides to a fresh build of the same recipe with Bridge's own override mechanism
     (omegaconf_utils.process_config_with_overrides), and runs the oracle's start-up
     validation on it (oracle.run: runtime_config_update(), process groups, the layer split,
     the dispatcher);
  5. compares every field moec models (FIELDS) between the original recipe and the one the
     overrides produced.
Prints one line per recipe (`round trip ok` or what failed); with --doc PAGE the table of the
results must be the one PAGE shows between its BEGIN/END markers (--update rewrites it). Exit 0
when every recipe came back and the page is current.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/roundtrip.py --moec build/tools/moec/moec
       [--doc docs/megatron-bridge.md [--update]] [--keep DIR]
"""

import argparse
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

TARGET = "megatron-bridge@0.3.1"
BEGIN, END = "<!-- BEGIN roundtrip.py table -->", "<!-- END roundtrip.py table -->"
GPU = "h100_sxm"
GPUS = ["h100_sxm", "h200_sxm", "b200"]

# The ConfigContainer fields a .moe recipe states (docs/megatron-bridge.md, the field map):
# the round trip must give each back as the recipe had it.
FIELDS = [
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size",
    "model.expert_model_parallel_size", "model.expert_tensor_parallel_size", "model.sequence_parallel",
    "model.seq_length", "train.micro_batch_size", "train.global_batch_size",
    "model.pipeline_model_parallel_layout", "model.account_for_embedding_in_pipeline_split",
    "model.account_for_loss_in_pipeline_split", "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage", "model.recompute_granularity", "model.recompute_method",
    "model.recompute_num_layers", "model.recompute_modules", "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend", "model.moe_deepep_num_sms", "model.moe_hybridep_num_sms",
    "model.cuda_graph_impl", "model.cuda_graph_scope",
    "model.fp8", "model.fp8_recipe", "model.fp4", "model.cp_comm_type",
    "model.hierarchical_context_parallel_sizes", "model.moe_router_dtype",
    "model.moe_router_force_load_balancing",
    "optimizer.optimizer", "optimizer.use_distributed_optimizer", "ddp.use_distributed_optimizer",
    "optimizer.use_precision_aware_optimizer",
    "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.use_megatron_fsdp",
    "model.freeze_language_model", "model.freeze_vision_model",
    "optimizer.lr", "optimizer.min_lr", "scheduler.lr_warmup_iters", "scheduler.lr_decay_style",
    "scheduler.lr_decay_iters", "optimizer.weight_decay", "optimizer.adam_beta1", "optimizer.adam_beta2",
    "optimizer.adam_eps", "optimizer.clip_grad", "dataset.split", "train.eval_interval", "train.eval_iters",
]


def field(cfg, path):
    obj = cfg
    for part in path.split("."):
        if not hasattr(obj, part):
            return "<absent>"
        obj = getattr(obj, part)
    return normalize(obj)


def reset_to_default(cfg, path):
    """Sets cfg's field at path to its dataclass default (a field with no default, or on an object
    that is not a dataclass, is left as it is)."""
    import dataclasses
    *parents, name = path.split(".")
    obj = cfg
    for part in parents:
        obj = getattr(obj, part, None)
    if obj is None or not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        if f.name != name:
            continue
        if f.default is not dataclasses.MISSING:
            setattr(obj, name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(obj, name, f.default_factory())


def normalize(v):
    """Values as a comparison sees them: enums by value, layouts as lists, scopes as sorted lists."""
    if hasattr(v, "value") and not isinstance(v, (int, float, str, bool)):
        v = v.value
    if hasattr(v, "layout") and isinstance(getattr(v, "layout"), list):  # PipelineParallelLayerLayout
        v = v.layout
    if isinstance(v, (list, tuple)):
        return [normalize(x) for x in v]
    if hasattr(v, "name") and not isinstance(v, (int, float, str, bool)):
        return str(v.name)
    return v


def layout_string(v):
    """A layout as one string with its runs spelled out (`t*4` and `(t*4|)*3` expanded as Megatron's
    layout parser does, the list form joined), so that the two forms compare."""
    if isinstance(v, list):
        sym = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
        return "|".join("".join(sym.get(str(x), "?") for x in stage) for stage in v)
    if isinstance(v, str):
        while True:
            m = re.search(r"\(([^()]*)\)\*(\d+)", v)
            if not m:
                break
            v = v[:m.start()] + m.group(1) * int(m.group(2)) + v[m.end():]
        return re.sub(r"([a-zA-Z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), v)
    return v


# MoE recipes whose model provider states the architecture itself (no Hugging Face config to
# read), so that they build offline too.
PROVIDER_RECIPES = {
    "olmoe_7b": ("megatron.bridge.recipes.olmoe.olmoe_7b", "olmoe_7b_pretrain_config", None),
    # Kimi-K2 with its default optimizer, dist_muon (Muon with Bridge's layer-wise distributed
    # optimizer, training/optim.py:62-77: optimizer.type = muon with optimizer.distributed),
    # and with Adam.
    "kimi_k2": ("megatron.bridge.recipes.kimi.kimi_k2", "kimi_k2_pretrain_config", None),
    "kimi_k2_adam": ("megatron.bridge.recipes.kimi.kimi_k2", "kimi_k2_adam_pretrain_config", None),
    # Qwen3-30B with HybridEP and an SM budget, as the H100 perf recipes run it
    # (perf_recipes/qwen/h100/qwen3_moe.py: hybridep_num_sms=32).
    "qwen3_30b_a3b_hybridep": ("megatron.bridge.recipes.qwen.qwen3_moe", "qwen3_30b_a3b_hybridep_pretrain_config",
                               None),
}


# MoE recipes that read a Hugging Face config.json (AutoBridge.from_hf_pretrained): the oracle's
# offline cache holds a transcription of each (oracle.HF_CONFIGS). Each names the Bridge model
# provider class of the same model, and check_transcriptions compares the two on ARCH_FIELDS:
# a wrong transcription shows there, except where the provider class itself is known to differ
# from the published checkpoint (PROVIDER_DIFFERS).
HF_RECIPES = {
    "moonlight_16b": ("megatron.bridge.recipes.moonlight.moonlight_16b", "moonlight_16b_pretrain_config",
                      "MoonlightModelProvider16B"),
    "deepseek_v2_lite": ("megatron.bridge.recipes.deepseek.deepseek_v2", "deepseek_v2_lite_pretrain_config",
                         "DeepSeekV2LiteModelProvider"),
    "deepseek_v2": ("megatron.bridge.recipes.deepseek.deepseek_v2", "deepseek_v2_pretrain_config",
                    "DeepSeekV2ModelProvider"),
    "deepseek_v3_32nodes": ("megatron.bridge.recipes.deepseek.deepseek_v3", "deepseek_v3_pretrain_config_32nodes",
                            "DeepSeekV3ModelProvider"),
    "glm45_355b": ("megatron.bridge.recipes.glm.glm45", "glm45_355b_pretrain_config", "GLM45ModelProvider355B"),
    "glm45_air_106b": ("megatron.bridge.recipes.glm.glm45", "glm45_air_106b_pretrain_config",
                       "GLM45AirModelProvider106B"),
    "gpt_oss_20b": ("megatron.bridge.recipes.gpt_oss.gpt_oss", "gpt_oss_20b_pretrain_config", "GPTOSSProvider20B"),
    "gpt_oss_120b": ("megatron.bridge.recipes.gpt_oss.gpt_oss", "gpt_oss_120b_pretrain_config",
                     "GPTOSSProvider120B"),
}
ARCH_FIELDS = ["num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size", "mtp_num_layers",
               "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
               "moe_layer_freq", "moe_router_score_function", "moe_router_enable_expert_bias",
               "moe_router_topk_scaling_factor", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
               "v_head_dim", "rotary_base", "rotary_percent", "add_qkv_bias", "window_size"]
PROVIDER_DIFFERS = {
    # MoonlightModelProvider16B pads the vocabulary (163842); the checkpoint has 163840.
    "moonlight_16b": {"vocab_size"},
    # DeepSeekV2LiteModelProvider has no query compression (q_lora_rank None), as the
    # checkpoint; Bridge 0.3.1's DeepSeek-V2 bridge turns the checkpoint's null into the MLA
    # provider default, 512 (main preserves the null: tests/unit_tests/models/deepseek).
    "deepseek_v2_lite": {"q_lora_rank"},
    # DeepSeekV2ModelProvider leaves the heads to the checkpoint (0) and keeps the MLA default
    # q_lora_rank 512; the checkpoint has 128 heads and 1536.
    "deepseek_v2": {"num_attention_heads", "q_lora_rank"},
    # DeepSeekV3ModelProvider likewise (0 heads, q_lora_rank 512) and states no MTP layer; the
    # checkpoint has 128 heads, 1536 and one MTP layer.
    "deepseek_v3_32nodes": {"num_attention_heads", "q_lora_rank", "mtp_num_layers"},
}


def check_transcriptions():
    """The transcribed config.json of every HF_RECIPES model against its provider class."""
    import megatron.bridge.models as providers
    bad = []
    for model, (mod, fn, provider) in HF_RECIPES.items():
        built, stated = build(mod, fn).model, getattr(providers, provider)()
        for f in ARCH_FIELDS:
            if f not in PROVIDER_DIFFERS.get(model, ()) and getattr(built, f, None) != getattr(stated, f, None):
                bad.append("%s.%s: %r from config.json, %r in %s" % (fn, f, getattr(built, f, None),
                                                                      getattr(stated, f, None), provider))
    return bad


# MoE recipes with no .moe form: the import must refuse them with one error that says why, and
# write nothing.
REFUSED_RECIPES = {
    # Nemotron-3 Nano: a hybrid of Mamba, attention and MoE layers (hybrid_override_pattern).
    "nemotron_3_nano": ("megatron.bridge.recipes.nemotronh.nemotron_3_nano", "nemotron_3_nano_pretrain_config",
                        "describes a hybrid Mamba model"),
}


def define_variants():
    """Recipe calls with arguments, as functions oracle.run can build by name."""
    import megatron.bridge.recipes.kimi.kimi_k2 as kimi
    kimi.kimi_k2_adam_pretrain_config = lambda: kimi.kimi_k2_pretrain_config(optimizer_type="adam")
    import megatron.bridge.recipes.qwen.qwen3_moe as qwen3_moe

    def hybridep():
        cfg = qwen3_moe.qwen3_30b_a3b_pretrain_config()
        cfg.model.moe_token_dispatcher_type = "flex"
        cfg.model.moe_flex_dispatcher_backend = "hybridep"
        cfg.model.moe_hybridep_num_sms = 32
        return cfg
    qwen3_moe.qwen3_30b_a3b_hybridep_pretrain_config = hybridep

SPLIT_FIELDS = ["model.pipeline_model_parallel_layout", "model.account_for_embedding_in_pipeline_split",
                "model.account_for_loss_in_pipeline_split", "model.num_layers_in_first_pipeline_stage",
                "model.num_layers_in_last_pipeline_stage"]


def stage_split(vals, layers, mtp, pp, vpp):
    """The layers of every virtual stage as one layout string, whichever way the config says it: a
    layout, embedding/loss counted in the split, uneven first/last stages, or Megatron's even split
    (the same stages are the same run; moec writes the first form, recipes often use the others)."""
    if vals["model.pipeline_model_parallel_layout"] not in (None, "<absent>"):
        return layout_string(vals["model.pipeline_model_parallel_layout"])
    stages = pp * (vpp or 1)
    emb = bool(vals["model.account_for_embedding_in_pipeline_split"])
    loss = bool(vals["model.account_for_loss_in_pipeline_split"])
    first, last = vals["model.num_layers_in_first_pipeline_stage"], vals["model.num_layers_in_last_pipeline_stage"]
    if first or last:
        middle = stages - 2
        first = first if first is not None else (layers - last) // (stages - 1)
        last = last if last is not None else (layers - first) // (stages - 1)
        per = [first] + [(layers - first - last) // middle] * middle + [last] if middle else [first, last]
    else:
        total = layers + emb + loss
        per = [total // stages] * stages
        per[0] -= emb
        per[-1] -= loss
    parts = ["t" * n for n in per]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * (mtp or 0) + "L"
    return "|".join(parts)


def comparable(vals, cfg):
    """The modelled fields with Megatron's equivalent spellings made one: the stage split, an unset
    expert_tensor_parallel_size (TP, megatron/core/model_parallel_config.py:413), an unset
    cp_comm_type (TE's p2p, megatron/core/extensions/transformer_engine.py:1240) and unset selective
    recompute modules (["core_attn"], megatron/core/transformer/transformer_config.py:1193)."""
    out = {f: v for f, v in vals.items() if f not in SPLIT_FIELDS}
    m = cfg.model
    out["stage split"] = stage_split(vals, m.num_layers, getattr(m, "mtp_num_layers", 0) or 0,
                                     vals["model.pipeline_model_parallel_size"],
                                     vals["model.virtual_pipeline_model_parallel_size"])
    if out.get("model.expert_tensor_parallel_size") is None:  # model_parallel_config.py:413
        out["model.expert_tensor_parallel_size"] = out.get("model.tensor_model_parallel_size")
    if out.get("model.cp_comm_type") is None:
        out["model.cp_comm_type"] = "p2p"
    if out.get("model.recompute_modules") is None and out.get("model.recompute_granularity") == "selective":
        out["model.recompute_modules"] = ["core_attn"]
    return out


def build(fn_module, fn):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return getattr(importlib.import_module(fn_module), fn)()


def worlds(cfg):
    """The GPU counts the recipe's parallelism and global batch allow, smallest first."""
    import math
    m, t = cfg.model, cfg.train
    tp, pp, cp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size or 1
    ep, etp = m.expert_model_parallel_size or 1, m.expert_tensor_parallel_size or tp
    dense, expert = tp * cp, ep * etp
    unit = pp * dense * expert // math.gcd(dense, expert)
    for k in range(1, 65):
        dp = unit * k // (tp * cp * pp)
        if t.global_batch_size % (t.micro_batch_size * dp) == 0:
            yield unit * k


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moec", required=True)
    ap.add_argument("--doc", help="the page whose round-trip table (between BEGIN and END) must be this run's")
    ap.add_argument("--update", action="store_true", help="with --doc: rewrite the table instead of comparing")
    ap.add_argument("--keep", help="keep the YAML, .moe and override files here")
    a = ap.parse_args()
    oracle.init()
    define_variants()
    import torch
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
    torch.cuda.get_device_properties = lambda *x, **k: oracle._Props(GPU)
    work = a.keep or tempfile.mkdtemp(prefix="moec-roundtrip-")
    os.makedirs(work, exist_ok=True)

    rows, failed = [], 0
    for why in check_transcriptions():
        print("transcription differs from the provider: " + why)
        failed += 1
    for model, (mod, fn, _hf) in (list(oracle.RECIPES.items()) + list(PROVIDER_RECIPES.items()) +
                                  list(HF_RECIPES.items())):
        cfg = build(mod, fn)
        original = {f: field(cfg, f) for f in FIELDS}
        yaml_path = os.path.join(work, fn + ".yaml")
        with contextlib.redirect_stdout(io.StringIO()):
            cfg.to_yaml(yaml_path)
        moe_path = os.path.join(work, fn + ".moe")
        # The smallest job the layout allows whose predicted memory fits (export refuses a recipe
        # that does not fit; the round trip is about the configuration, not the cluster): on
        # H100, else on the larger GPUs.
        world, gpu = None, GPU

        def fits():
            for g in GPUS:
                for w in worlds(cfg):
                    subprocess.run([a.moec, "import", "--from", "megatron-bridge", yaml_path, "--gpu", g,
                                    "--gpus", str(w), "-o", moe_path], capture_output=True, text=True)
                    planned = subprocess.run([a.moec, "check", "--target", TARGET, moe_path], capture_output=True,
                                             text=True)
                    if "[memory-exceeds-hbm]" not in planned.stderr:
                        return w, g
            return w, g

        world, gpu = fits()
        row = {"recipe": fn, "gpus": world, "gpu": gpu}

        def fail(stage, why):
            row["result"] = "%s: %s" % (stage, why)
            rows.append(row)
            print("%s (%d x %s): FAILED at %s: %s" % (fn, world, gpu, stage, why))

        imp = subprocess.run([a.moec, "import", "--from", "megatron-bridge", yaml_path, "--gpu", gpu,
                              "--gpus", str(world), "-o", moe_path], capture_output=True, text=True)
        warnings = sum(": warning: " in line for line in imp.stderr.splitlines())
        row["import"] = "ok, %d warnings" % warnings if imp.returncode == 0 else "exit %d" % imp.returncode
        if imp.returncode != 0:
            failed += 1
            fail("import", " ".join(l for l in imp.stderr.splitlines() if ": error: " in l)[:300])
            continue
        chk = subprocess.run([a.moec, "check", "--no-planner", "--target", TARGET, moe_path],
                             capture_output=True, text=True)
        errors = [l for l in chk.stderr.splitlines() if ": error: " in l]
        row["check"] = "no error" if not errors else "%d errors" % len(errors)
        if errors:
            # An error is right where Megatron rejects the recipe as Bridge ships it.
            torch.cuda.get_device_properties = lambda *x, **k: oracle._Props(gpu)
            v = oracle.run({"gpu": gpu, "gpus": world, "model_name": model, "bridge": None}, recipe=(mod, fn),
                           apply=lambda c: None)
            ids = sorted(set(re.findall(r"\[([a-z0-9-]+)\]$", "\n".join(errors), re.M)))
            if v["verdict"] == "reject":
                row["check"] = "errors: " + ", ".join(ids)
                row["validate"] = "the recipe itself is rejected"
                row["result"] = "both reject: %s (%s)" % (v["message"][:90], v["where"])
                rows.append(row)
                print("%s (%d x %s): rejected by moec check (%s) and by Megatron (%s at %s)"
                      % (fn, world, gpu, ", ".join(ids), v["message"], v["where"]))
                continue
            failed += 1
            fail("check", errors[0][errors[0].find("error:"):][:300])
            continue
        exp = subprocess.run([a.moec, "export", "--to", "megatron-bridge", "--target", TARGET, moe_path],
                             capture_output=True, text=True)
        if exp.returncode != 0:
            failed += 1
            fail("export", exp.stderr.strip()[-300:])
            continue
        overrides = shlex.split(exp.stdout)
        with open(os.path.join(work, fn + ".overrides"), "w") as f:
            f.write(exp.stdout)
        back = {}

        def apply(c):
            # The export alone must carry the recipe: every modelled field goes back to its
            # dataclass default first, so that a field the export leaves out comes back as
            # Bridge's default, not as the recipe's own value.
            for f in FIELDS:
                reset_to_default(c, f)
            process_config_with_overrides(c, cli_overrides=overrides)
            back.update({f: field(c, f) for f in FIELDS})

        torch.cuda.get_device_properties = lambda *x, **k: oracle._Props(gpu)
        v = oracle.run({"gpu": gpu, "gpus": world, "model_name": model, "bridge": None}, recipe=(mod, fn),
                       apply=apply)
        row["validate"] = "accepted" if v["verdict"] == "accept" else "rejected"
        if v["verdict"] != "accept":
            failed += 1
            fail("validate", "%s at %s: %s (%s)" % (v.get("type"), v.get("stage"), v.get("message"), v.get("where")))
            continue
        was_all, now_all = comparable(original, cfg), comparable(back, cfg)
        diffs = ["%s: %r -> %r" % (f, was_all[f], now_all.get(f)) for f in was_all if was_all[f] != now_all.get(f)]
        row["fields"] = "all %d equal" % len(was_all) if not diffs else "%d differ" % len(diffs)
        if diffs:
            failed += 1
            fail("fields", "; ".join(diffs)[:600])
            continue
        row["result"] = "round trip ok"
        rows.append(row)
        print("%s (%d x %s): round trip ok (import %s; check %s; validate %s; fields %s)"
              % (fn, world, gpu, row["import"], row["check"], row["validate"], row["fields"]))

    for model, (mod, fn, why) in REFUSED_RECIPES.items():
        cfg = build(mod, fn)
        yaml_path, moe_path = os.path.join(work, fn + ".yaml"), os.path.join(work, fn + ".moe")
        with contextlib.redirect_stdout(io.StringIO()):
            cfg.to_yaml(yaml_path)
        imp = subprocess.run([a.moec, "import", "--from", "megatron-bridge", yaml_path, "--gpu", GPU, "--gpus", "8",
                              "-o", moe_path], capture_output=True, text=True)
        lines = [l for l in imp.stderr.splitlines() if ": error: " in l or ": warning: " in l]
        row = {"recipe": fn, "gpus": 8, "gpu": GPU, "import": "exit %d" % imp.returncode}
        if imp.returncode == 1 and len(lines) == 1 and why in lines[0] and not os.path.exists(moe_path):
            row["result"] = "refused: " + why
            print("%s: refused as it must be (%s)" % (fn, lines[0][lines[0].find("error:"):][:200]))
        else:
            failed += 1
            row["result"] = "FAILED: not refused with one message"
            print("%s: FAILED: expected exit 1 and one error containing %r, got exit %d and:\n%s"
                  % (fn, why, imp.returncode, "\n".join(lines[:5])))
        rows.append(row)

    if a.doc:
        table = io.StringIO()
        f = table
        if True:
            f.write("| Bridge 0.3.1 recipe | GPUs | moec import | moec check | Bridge validates the export "
                    "| modelled fields | result |\n| --- | --- | --- | --- | --- | --- | --- |\n")
            for r in rows:
                f.write("| `%s` | %d x %s | %s | %s | %s | %s | %s |\n" % (
                    r["recipe"], r["gpus"], r["gpu"], r.get("import", ""), r.get("check", ""), r.get("validate", ""),
                    r.get("fields", ""), r["result"]))
        page = open(a.doc).read()
        if BEGIN not in page or END not in page:
            print("roundtrip: %s has no %s ... %s block" % (a.doc, BEGIN, END))
            sys.exit(1)
        head, rest = page.split(BEGIN, 1)
        old, tail = rest.split(END, 1)
        new = "\n" + table.getvalue()
        if a.update:
            with open(a.doc, "w") as out:
                out.write(head + BEGIN + new + END + tail)
        elif old != new:
            print("roundtrip: the table in %s is stale; rerun with --doc %s --update" % (a.doc, a.doc))
            failed += 1
    print("roundtrip: %d passed, %d failed" % (len(rows) - failed, failed))
    sys.exit(1 if failed else 0)


main()
