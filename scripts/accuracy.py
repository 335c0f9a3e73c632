#!/usr/bin/env python3
"""Compare moec's predicted throughput with the measured runs of perf_calibration.csv.

Usage: scripts/accuracy.py MOEC_BINARY [--reference DIR] [--output docs/accuracy.md]
                           [--json FILE] [--keep DIR]

For every row of perf_calibration.csv that the language can express (a model
of the built-in catalog, a GPU of the catalog, a complete layout), the script
writes a temporary .moe recipe, runs `MOEC_BINARY plan --format json FILE`, and
compares the plan's predicted tokens/s/GPU (and model TFLOP/s/GPU and MFU
where the row gives them) with the measurement. It writes docs/accuracy.md:
every row with its error, the median and worst absolute errors, the rows the
language cannot express and why, and the memory verdicts (every row ran, so
the plan should say it fits).

How a row becomes a recipe (the mapping of examples/published/*.moe):
  - model, GPU, GPU count, sequence, micro/global batch, TP, PP, VPP, CP, EP
    come from the row; ETP = 1 (every Bridge MoE perf recipe sets it).
  - precision: BF16 -> bf16, MXFP8 / FP8-MX -> mxfp8, NVFP4 -> nvfp4, FP8 /
    FP8-CS -> fp8.tensorwise (current scaling, the Bridge perf default).
  - what the row does not record (dispatcher, recompute, CUDA graphs, EP
    overlap, pipeline layout, MTP, precision-aware optimizer) comes from the
    Megatron-Bridge perf recipe in published_configs.csv for the same model,
    GPU and precision (the one with the same layout if there is one), from
    the newest release (26.08); for rows of older releases, the dispatcher,
    CUDA graphs, recompute and EP overlap of that release's perf scripts
    where they are known (RELEASE_SETTINGS).
  - a pipeline layout is written when the layers do not split evenly over
    PP x VPP: the recipe's own layout when its stage count matches, else the
    one moec proposes (the fix-it of its layers-split diagnostic: Bridge's
    account-for-embedding-and-loss split, embedding and loss counting as one
    layer each); the script never splits layers itself.
  - rows marked "(w/o MTP)" drop DeepSeek-V3's MTP layer; token-drop rows
    use capacity factor 1 with padding.

A plan that moec refuses only because its memory model says the run does not
fit is planned again on a copy of the GPU with more memory (same speed), so
that its speed can still be compared; the memory verdict stays "does not fit".
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "DeepSeekV3": "deepseek_v3",
    "Qwen3_30B_a3B": "qwen3_30b_a3b",
    "Qwen3_235B_a22B": "qwen3_235b_a22b",
}
# published_configs.csv spelling of the same models.
CONFIG_MODELS = {
    "DeepSeekV3": "DeepSeek-V3",
    "Qwen3_30B_a3B": "Qwen3-30B-A3B",
    "Qwen3_235B_a22B": "Qwen3-235B-A22B",
}
LAYERS = {"deepseek_v3": (61, 1), "qwen3_30b_a3b": (48, 0), "qwen3_235b_a22b": (94, 0)}
GPUS = {"H100": "h100_sxm", "B200": "b200", "B300": "b300", "GB200": "gb200_nvl72", "GB300": "gb300_nvl72"}

# Why a row's model is outside the language (or the catalog).
NOT_EXPRESSIBLE = {
    "GPT OSS 120B": "GPT-OSS: alternating sliding-window attention, attention sinks and biased experts are not in "
    "the model schema",
    "Nemotron_3_Nano": "Nemotron-3 Nano: hybrid Mamba-2 layers are not in the model schema (linear attention is "
    "Gated DeltaNet only)",
    "LLAMA3_70B": "Llama-3 70B: a dense model outside the built-in catalog (no models.csv row); it could be "
    "written as a model definition, but its figures would not come from the reference data",
    "LLAMA3.1_405B": "Llama-3.1 405B: a dense model outside the built-in catalog (no models.csv row)",
    "Kimi_K2": "Kimi-K2: not in the built-in catalog (no models.csv row)",
    "Mixtral-8x22B": "Mixtral-8x22B: not in the catalog, and the row records no layout",
    "Mixtral-8x7B": "Mixtral-8x7B: the row records neither GPU count nor layout",
    "Megatron-22B": "dense A100 run: no A100 in the GPU catalog and no layout in the row",
    "GPT-3 175B": "dense A100 run: no A100 in the GPU catalog and no layout in the row",
    "MT-NLG 530B": "dense A100 run: no A100 in the GPU catalog and no layout in the row",
    "Megatron-1T": "dense A100 run: no A100 in the GPU catalog and no layout in the row",
}


def num(text):
    text = (text or "").strip()
    if not text or text.lower() in ("n/a", "na", "-"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def precision_of(text):
    t = text.upper()
    if t.startswith("BF16"):
        return "bf16"
    if "NVFP4" in t:
        return "nvfp4"
    if "MX" in t:
        return "mxfp8"
    if t.startswith("FP8"):
        return "fp8.tensorwise"
    return None


def config_precision(text):
    t = text.upper()
    if t.startswith("BF16"):
        return "bf16"
    if "NVFP4" in t:
        return "nvfp4"
    if "MXFP8" in t:
        return "mxfp8"
    if "FP8" in t:
        return "fp8"
    return None


def family(prec):
    return "fp8" if prec in ("mxfp8", "fp8.tensorwise", "fp8") else prec


def layout_stages(layout):
    """Stage count of a layout string with (...)*n and x*n repetition."""
    text = layout
    for _ in range(10):
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
        new = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), new)
        if new == text:
            break
        text = new
    return text.count("|") + 1


def load_configs(path):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["source_type"] == "perf_recipe"]


def find_config(configs, row, prec):
    name = CONFIG_MODELS[row["model"]]
    gpu = row["gpu"]
    cands = [c for c in configs if c["model"] == name and c["gpu"] == gpu]
    if not cands:
        return None

    def score(c):
        s = 0
        exact = {"bf16": "BF16", "mxfp8": "MXFP8", "nvfp4": "NVFP4", "fp8.tensorwise": "FP8-CS"}[prec]
        if c["precision"].startswith(exact):
            s += 100
        elif family(config_precision(c["precision"]) or "") == family(prec) or (
                prec.startswith("fp8") and "FP8" in c["precision"]):
            s += 50
        for key, col in (("tp", "tp"), ("pp", "pp"), ("ep", "ep"), ("num_gpus", "num_gpus"), ("mbs", "mbs")):
            if num(c[key]) == num(row[col]):
                s += 3
        if (num(c["vpp"]) or 1) == (num(row["vp"]) or 1):
            s += 3
        if "large-scale proxy" in c["notes"] or "dev (experimental)" in c["notes"]:
            s -= 50
        return s

    return max(cands, key=score)



# Settings of the older releases' perf scripts, for the rows measured with
# them. perf_calibration.csv records only the layout; without this table
# every row would be priced with the 26.08 recipes' settings (full-iteration
# CUDA graphs, EP overlap, HybridEP), which the older releases did not have.
# Established by reading the stored versions of Megatron-Bridge's
# scripts/performance/configs/{qwen,qwen3,deepseek}/*workload_base_configs.py
# and *_llm_pretrain.py, matched to releases by their layouts (equal to the
# release's published table) and the dates of the pull requests that changed
# them (#2477, #2499, #2669/#2706, #2850, #3252, #4211/#4249, #4606); the
# container-to-Bridge versions come from docs/releases/software-versions.md.
# "C" marks settings read in code or stated in a pull request, "I" those
# inferred from a layout and date match. Rows of releases or combinations not
# listed keep the 26.08 recipe's settings, and the table says so.
#
# Each entry: model, GPUs, precision family (mx: MXFP8 / FP8-MX; fp8: FP8 /
# FP8-CS; bf16), releases, then the settings: dispatcher, cuda_graph,
# recompute (None: keep the recipe's), EP overlap (with delay_wgrad, which
# the scripts always set together), and the certainty.
RELEASE_SETTINGS = [
    # Qwen3-30B-A3B: never recompute; the dispatcher was the library default
    # (alltoall) until HybridEP in 26.02 (B200 stayed alltoall in 26.02, H100
    # until 26.04); full-iteration graphs and EP overlap came in 26.06.
    ("Qwen3_30B_a3B", ("GB200", "GB300", "B200"), "fp8", ("25.09",),
     "alltoall", "[full_iteration]", "none", False, "I"),
    ("Qwen3_30B_a3B", ("H100",), "fp8", ("25.09",), "alltoall", "none", "none", False, "I"),
    ("Qwen3_30B_a3B", ("GB200", "GB300", "B200"), "mx", ("25.11",),
     "alltoall", "[attn, moe_router, moe_preprocess]", "none", False, "I"),
    ("Qwen3_30B_a3B", ("H100",), "fp8", ("25.11", "26.02"), "alltoall", "none", "none", True, "I"),
    ("Qwen3_30B_a3B", ("GB200", "GB300", "B300"), "mx", ("26.02", "26.02.01", "26.04", "26.04.01"),
     "hybridep", "[moe_router, moe_preprocess]", "none", False, "I"),
    ("Qwen3_30B_a3B", ("B200",), "mx", ("26.02",), "alltoall", "[moe_router, moe_preprocess]", "none", False, "C"),
    ("Qwen3_30B_a3B", ("B200",), "mx", ("26.02.01", "26.04", "26.04.01"),
     "hybridep", "[attn, moe_router, moe_preprocess]", "none", False, "I"),
    ("Qwen3_30B_a3B", ("H100",), "fp8", ("26.04", "26.04.01"), "hybridep", "none", "none", False, "I"),
    # Qwen3-235B-A22B: HybridEP with partial graphs on GB200/GB300, alltoall
    # without graphs on B200/B300/H100 up to 26.04.01.
    ("Qwen3_235B_a22B", ("H100",), "fp8", ("25.09",), "alltoall", "none", "none", False, "I"),
    ("Qwen3_235B_a22B", ("H100",), "fp8", ("25.11", "26.02", "26.02.01", "26.04", "26.04.01"),
     "alltoall", "none", "none", True, "I"),
    ("Qwen3_235B_a22B", ("GB200", "GB300"), "mx", ("26.02", "26.02.01", "26.04", "26.04.01"),
     "hybridep", "[attn, moe_router, moe_preprocess]", "none", False, "I"),
    ("Qwen3_235B_a22B", ("B300",), "mx", ("26.02",), "alltoall", "none", "none", True, "I"),
    ("Qwen3_235B_a22B", ("B300", "B200"), "mx", ("26.02.01", "26.04", "26.04.01"),
     "alltoall", "none", "none", False, "I"),
    # DeepSeek-V3: selective recompute of mla_up_proj throughout (none on
    # GB300 in 25.11); alltoall in 25.09, HybridEP from 25.11.
    ("DeepSeekV3", ("GB200", "B200"), "fp8", ("25.09",), "alltoall", "none", "selective(mla_up_proj)", False, "I"),
    ("DeepSeekV3", ("GB300",), "bf16", ("25.11",), "hybridep", "[attn, moe_router, moe_preprocess]", "none", False,
     "I"),
    ("DeepSeekV3", ("GB200",), "bf16", ("25.11",), "hybridep", "[moe_router, moe_preprocess]",
     "selective(mla_up_proj)", False, "I"),
    ("DeepSeekV3", ("GB300", "B300", "B200"), "mx", ("26.02", "26.02.01", "26.04"),
     "hybridep", "none", "selective(mla_up_proj)", False, "I"),
    ("DeepSeekV3", ("GB200",), "mx", ("26.02", "26.02.01", "26.04"),
     "hybridep", "[attn, moe_router, moe_preprocess]", "selective(mla_up_proj)", False, "I"),
    ("DeepSeekV3", ("B200",), "mx", ("26.04.01",), "deepep", "[attn, moe_router, moe_preprocess]",
     "selective(mla_up_proj, mlp)", True, "I"),
]


# What the sources say of the rows the model misses by more than 50%.
OUTLIER_NOTES = {
    "A183": "The same layout ran at 10,494 tokens/s/GPU in 25.09 (A225, micro batch 2) and 9,058 in 26.02.01 "
            "(A146); no setting found explains the 26.02 figure.",
    "A211": "As A183: the same layout ran about twice as fast in 25.09 and 26.02.01.",
    "A206": "The same layout ran at 18,066 tokens/s/GPU in 25.09 (A220, FP8 with token drop); the 25.11 "
            "script's settings were found, but not why it ran at half that.",
    "A186": "Qwen3-235B on B300 with VPP 4 and the alltoall dispatcher; the 26.04 rows of the same model and "
            "GPU without VPP are within 29%. The release's VPP setting is itself in doubt (pull request "
            "#2706 removed VPP for B300 while the table lists VPP 4).",
    "A149": "As A186 (26.02.01).",
    "A037": "Qwen3-30B on two H100 nodes with HybridEP EP 16 (EP overlap off). HybridEP sends a token once "
            "per remote node (DeepEP tests/test_hybrid_ep.py counts its InfiniBand bytes so): about one "
            "4 KB copy per token here. Priced as sending all four remote routed copies, the model matched "
            "this row within 5%, a compensating error: the same accounting "
            "put DeepSeek-V3 on 1024 H100 (HybridEP EP 64, not in this table) 15-23% low, and with the "
            "per-node send it is within 7% of both published figures. The missing time is not in the "
            "exchange: the BF16 run of the same layout and settings (verification card of "
            "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config, published_configs.csv: 13,011 tokens/s/GPU) ran "
            "1.47x faster than this FP8 row, and the model puts that card 23% high, so the FP8 path on H100 "
            "(quantization and transposes around small expert GEMMs) costs more than the model's two-pass "
            "quantization estimate and Hopper's split accumulation in dgrad and wgrad (priced at 1.15x), "
            "and the BF16 run's compute more than its GEMM efficiency says. Others measured the same: "
            "Megatron-Bridge issue 2842 (release 26.02: FP8 slower than BF16 for Qwen3-30B on H100 and "
            "Blackwell, \"still mostly mxfp8 cast bound\" in May 2026) and verl issue 7232 (FP8 slower than "
            "BF16 on Qwen3-30B-A3B on 8 H200, the slowdown in Megatron's training compute). Which casts, "
            "and at what bandwidth, needs a profile of this layout on an H100.",
    "A110": "As A037 (26.04, the same layout and settings).",
}
# Rows of the current releases off by more than 20% are listed with their notes too.
CURRENT_RELEASES = ("26.06", "26.06.01", "26.08")


def release_settings(row, prec):
    """The older release's settings for a row, or None."""
    release = re.sub(r".*NeMo ([0-9.]+).*", r"\1", row["framework"])
    fam = "mx" if prec == "mxfp8" else "fp8" if prec.startswith("fp8") else prec
    for model, gpus, pfam, releases, *settings in RELEASE_SETTINGS:
        if model == row["model"] and row["gpu"] in gpus and pfam == fam and release in releases:
            return dict(zip(("dispatcher", "graphs", "recompute", "overlap", "certainty"), settings),
                        release=release)
    return None


def recipe_text(row, cfg, name):
    """The .moe text for a calibration row, or (None, reason)."""
    model = MODELS[row["model"]]
    gpu = GPUS.get(row["gpu"])
    if gpu is None:
        return None, f"GPU {row['gpu']} is not in the catalog"
    prec = precision_of(row["precision"])
    if prec is None:
        return None, f"precision '{row['precision']}' not recognised"
    fields = {k: num(row[k]) for k in ("num_gpus", "gbs", "mbs", "seq_len", "tp", "pp", "cp", "ep", "vp")}
    for key in ("num_gpus", "gbs", "mbs", "seq_len", "tp", "pp", "ep"):
        if fields[key] is None:
            return None, f"the row does not record {key}"
    tp, pp, cp, ep = fields["tp"], fields["pp"], fields["cp"] or 1, fields["ep"]
    vpp = fields["vp"] or 1
    notes = row["notes"]
    layers, mtp = LAYERS[model]
    lines = []
    model_name = model
    if "w/o MTP" in notes and mtp:
        model_name = f"{model}_mtp0"
        lines.append(f"model {model_name} extends {model} {{\n  mtp_layers = 0\n}}\n")
        mtp = 0

    # Settings the row does not record: the matching Bridge perf recipe.
    dispatcher, recompute, graphs, overlap, delay, layout, prec_aware, fsdp = (
        "alltoall", "none", "none", False, False, None, False, False)
    dispatcher_sms = {}  # fused dispatcher -> the SMs the recipe gives it
    source = "defaults"
    if cfg:
        source = cfg["config_name"]
        backend = cfg["dispatcher_backend"].strip()
        dispatcher = backend if backend in ("deepep", "hybridep") else (
            "alltoall" if cfg["dispatcher"] in ("", "alltoall", "flex") else cfg["dispatcher"])
        rc = cfg["recompute"].strip()
        if rc.startswith("selective:") and "empty" not in rc:
            mods = [m for m in rc.split(":", 1)[1].split("+") if m]
            recompute = "selective(" + ", ".join(mods) + ")"
        elif rc.startswith("full"):
            recompute = "full"
        impl = cfg["cuda_graph_impl"].strip()
        scope = cfg["cuda_graph_scope"].strip()
        if impl == "full_iteration" or scope in ("full_iteration", "(whole fwd+bwd)"):
            graphs = "[full_iteration]"
        elif impl in ("transformer_engine",) and scope:
            graphs = "[" + ", ".join(s for s in scope.split("+") if s) + "]"
        overlap = cfg["ep_overlap"].strip() == "true"
        delay = cfg["delay_wgrad"].strip() == "true"
        m = re.search(r"pp_layout=([^;]+)", cfg["notes"])
        if m:
            layout = m.group(1).strip()
        prec_aware = "precision_aware_optimizer" in cfg["notes"]
        fsdp = "megatron_fsdp" in cfg["notes"]
        for kind in ("deepep", "hybridep"):
            m = re.search(kind + r"_num_sms=(\d+)", cfg["notes"])
            if m:
                dispatcher_sms[kind] = int(m.group(1))
    # Rows that record their own settings in the notes (A231).
    m = re.search(r"PP layout (\S+?);", notes + ";")
    if m:
        layout = m.group(1)
        if "m" not in layout and mtp:
            model_name = f"{model}_mtp0"
            lines.append(f"model {model_name} extends {model} {{\n  mtp_layers = 0\n}}\n")
            mtp = 0
    m = re.search(r"selective recompute ([a-z_+]+)", notes)
    if m:
        recompute = "selective(" + ", ".join(m.group(1).split("+")) + ")"
    m = re.search(r"CUDA graphs ([a-z/]+)", notes)
    if m:
        names = {"attn": "attn", "router": "moe_router", "preprocess": "moe_preprocess", "mlp": "mlp", "moe": "moe"}
        graphs = "[" + ", ".join(names[x] for x in m.group(1).split("/") if x in names) + "]"
        overlap = delay = False
    if "HybridEP" in notes:
        dispatcher = "hybridep"
    # EP overlap needs VPP when PP > 1 (bridge-facts.md rule 25).
    if overlap and pp > 1 and vpp == 1:
        overlap = delay = False
    if overlap and (recompute == "full" or "moe" in re.findall(r"\bmoe\b", recompute)):
        overlap = delay = False
    if prec != "bf16" and overlap and dispatcher == "alltoall":
        pass
    stages = pp * vpp
    if layout and (layout_stages(layout) != stages or (mtp == 0 and "m" in layout) or (mtp and "m" not in layout)):
        layout = None
    # Without a layout of its own the recipe gets moec's (layers-split's
    # fix-it, added by plan_row): the script does not split layers itself.

    capacity = ""
    if "tokendrop" in notes or "token-drop" in notes:
        capacity = "capacity_factor = 1.0; pad_to_capacity = true"
        graphs = "none" if graphs == "[full_iteration]" else graphs
    if "full_iteration" in graphs and not capacity:
        # Bridge's full-iteration graphs of dropless MoE rely on the paged
        # stash (not in the language); moec requires static shapes, so
        # express the run as captured per module instead.
        pass

    older = release_settings(row, prec)
    if older:
        source = f"the {older['release']} perf scripts ({older['certainty']})"
        dispatcher, graphs, overlap = older["dispatcher"], older["graphs"], older["overlap"]
        delay = overlap
        if older["recompute"] is not None:
            recompute = older["recompute"]
        if overlap and pp > 1 and vpp == 1:
            overlap = delay = False
        if graphs == "[full_iteration]" and not capacity:
            graphs = "none"

    par = [f"tp = {tp}", f"cp = {cp}", f"ep = {ep}", "etp = 1", f"pp = {pp}"]
    if vpp > 1:
        par.append(f"vpp = {vpp}")
    if layout:
        par.append(f'layout = "{layout}"')
    if fsdp:
        par.append("fsdp = true")
    moe = []
    if overlap:
        moe.append("overlap_ep_comm = true")
    if delay:
        moe.append("delay_wgrad = true")
    if capacity:
        moe.append(capacity)
    if dispatcher in dispatcher_sms:
        moe.append(f"dispatcher_sms = {dispatcher_sms[dispatcher]}")
    lines.append(f"# {row['anchor_id']}: {row['model']} {row['gpu']} x{row['num_gpus']} {row['precision']} "
                 f"({row['framework']}); unrecorded settings from {source}")
    lines.append(f"recipe {name} {{")
    lines.append(f"  model      = {model_name}")
    lines.append(f"  cluster    {{ gpu = {gpu}; gpus = {fields['num_gpus']} }}")
    lines.append(f"  seq_len    = {fields['seq_len']}")
    lines.append(f"  batch      {{ micro = {fields['mbs']}; global = {fields['gbs']} }}")
    lines.append(f"  parallel   {{ {'; '.join(par)} }}")
    lines.append(f"  precision  = {prec}")
    lines.append(f"  dispatcher = {dispatcher}")
    lines.append(f"  recompute  = {recompute}")
    lines.append(f"  cuda_graph = {graphs}")
    if moe:
        lines.append(f"  moe        {{ {'; '.join(moe)} }}")
    if prec_aware:
        lines.append("  optimizer  { precision_aware = true }")
    lines.append("  data       { source = mock }")
    lines.append("}")
    return "\n".join(lines) + "\n", None


def run_plan(moec, path):
    proc = subprocess.run([moec, "plan", "--format", "json", "--quiet", path], capture_output=True, text=True)
    if proc.returncode == 0:
        try:
            return json.loads(proc.stdout), proc.stderr
        except json.JSONDecodeError as err:
            return None, f"unreadable JSON: {err}"
    return None, proc.stderr


def error_ids(stderr):
    return re.findall(r"error: .*\[([a-z0-9-]+)\]", stderr)


def moec_layout(moec, path):
    """The pipeline layout moec proposes for a recipe whose layers do not
    split evenly: the fix-it of its layers-split diagnostic (Megatron-Bridge's
    account-for-embedding-and-loss split, lib/Layout/PipelineLayout.cpp)."""
    proc = subprocess.run([moec, "check", "--no-planner", "--format", "json", path], capture_output=True, text=True)
    try:
        diags = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return None
    for d in diags:
        if d.get("id") == "layers-split":
            for fix in d.get("fixits", []):
                m = re.search(r'layout = "([^"]+)"', fix.get("replacement", ""))
                if m:
                    return m.group(1)
    return None


def plan_row(moec, text, name, gpu, workdir):
    path = os.path.join(workdir, f"{name}.moe")
    with open(path, "w") as f:
        f.write(text)
    layout = moec_layout(moec, path) if "layout =" not in text else None
    if layout:
        text = re.sub(r"(  parallel   \{ [^}]*?)( \})", lambda m: f'{m.group(1)}; layout = "{layout}"{m.group(2)}', text, count=1)
        with open(path, "w") as f:
            f.write(text)
    plan, err = run_plan(moec, path)
    if plan is not None:
        return plan, None, None
    ids = set(error_ids(err))
    if ids and ids <= {"memory-exceeds-hbm"}:
        # Same GPU with more memory: speed is unchanged, the verdict is kept.
        big = f"{gpu}_unbounded"
        text2 = f"gpu {big} extends {gpu} {{ memory = 100TB }}\n" + re.sub(
            rf"gpu = {gpu};", f"gpu = {big};", text)
        path2 = os.path.join(workdir, f"{name}_unbounded.moe")
        with open(path2, "w") as f:
            f.write(text2)
        plan2, err2 = run_plan(moec, path2)
        if plan2 is not None:
            first = err.strip().splitlines()[0] if err.strip() else ""
            return plan2, first, None
        err = err2
    first = next((l for l in err.splitlines() if "error:" in l), err.strip().splitlines()[0] if err.strip() else "")
    return None, None, first


def pct(pred, meas):
    return 100.0 * (pred - meas) / meas


def fmt(x, digits=0):
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("moec")
    ap.add_argument("--reference", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "reference"),
                    help="directory with perf_calibration.csv and published_configs.csv (default: the copies vendored in bench/reference)")
    ap.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "..", "docs", "accuracy.md"))
    ap.add_argument("--json", help="also write the per-row results as JSON")
    ap.add_argument("--keep", help="keep the generated recipes in this directory")
    args = ap.parse_args()

    with open(os.path.join(args.reference, "perf_calibration.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    configs = load_configs(os.path.join(args.reference, "published_configs.csv"))

    workdir = args.keep or tempfile.mkdtemp(prefix="moec-accuracy-")
    os.makedirs(workdir, exist_ok=True)
    results, skipped = [], []
    for row in rows:
        aid = row["anchor_id"]
        if row["model"] not in MODELS:
            reason = NOT_EXPRESSIBLE.get(row["model"], f"model {row['model']} is not in the catalog")
            skipped.append((row, reason))
            continue
        if num(row["tokens_per_s_per_gpu"]) is None and num(row["model_tflops_per_gpu"]) is None:
            skipped.append((row, "no throughput measured"))
            continue
        if not num(row["num_gpus"]) or not num(row["tp"]):
            skipped.append((row, "the row records no GPU count or layout (a headline number)"))
            continue
        prec = precision_of(row["precision"])
        cfg = find_config(configs, row, prec) if prec else None
        name = "r_" + aid.lower()
        text, reason = recipe_text(row, cfg, name)
        if text is None:
            skipped.append((row, reason))
            continue
        plan, memory_note, error = plan_row(args.moec, text, name, GPUS[row["gpu"]], workdir)
        if plan is None:
            skipped.append((row, f"moec plan refused the recipe: {error}"))
            continue
        pred = plan["predicted"]
        res = {
            "id": aid, "model": row["model"], "gpu": row["gpu"], "gpus": num(row["num_gpus"]),
            "precision": row["precision"].split(" (")[0], "release": re.sub(r".*NeMo ([0-9.]+).*", r"\1",
                                                                            row["framework"]),
            "layout": "TP{} PP{}{} CP{} EP{} MBS{} GBS{}".format(
                num(row["tp"]), num(row["pp"]), f" VPP{num(row['vp'])}" if (num(row["vp"]) or 1) > 1 else "",
                num(row["cp"]) or 1, num(row["ep"]), num(row["mbs"]), num(row["gbs"])),
            "measured_tps": num(row["tokens_per_s_per_gpu"]),
            "measured_tflops": num(row["model_tflops_per_gpu"]),
            "measured_mfu": num(row["mfu_pct_vs_bf16_dense_peak"]),
            "predicted_tps": pred["tokens_per_s_per_gpu"],
            "predicted_tflops": pred["model_tflops_per_gpu"],
            "predicted_mfu": 100 * pred["mfu"],
            "fits": plan["memory"]["fits"] and memory_note is None,
            "peak_gb": plan["memory"]["peak_bytes"] / 1e9,
            "capacity_gb": plan["memory"]["capacity_bytes"] / 1e9 if memory_note is None else None,
            "memory_note": memory_note,
            "breakdown": pred.get("breakdown_s", {}),
            "step_time_s": pred["step_time_s"],
            "flops_per_token": plan.get("flops", {}).get("decoder_per_token"),
            "settings": re.search(r"unrecorded settings from (.*)", text).group(1),
        }
        older = release_settings(row, prec)
        res["settings_short"] = (f"{older['release']} scripts ({older['certainty']}): {older['dispatcher']}, "
                                 f"graphs {older['graphs']}, EP overlap {'on' if older['overlap'] else 'off'}"
                                 if older else "26.08 recipe")
        if res["measured_tps"]:
            res["error_tps"] = pct(res["predicted_tps"], res["measured_tps"])
        if res["measured_tflops"]:
            res["error_tflops"] = pct(res["predicted_tflops"], res["measured_tflops"])
        results.append(res)
        print(f"{aid}: measured {fmt(res['measured_tps'])} predicted {fmt(res['predicted_tps'])} tok/s/GPU "
              f"({res.get('error_tps', float('nan')):+.1f}%)", file=sys.stderr)

    args.long_context = long_context_family(args.moec, workdir)
    write_report(args, results, skipped)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "skipped": [(r["anchor_id"], why) for r, why in skipped]}, f, indent=1)
    errs = [abs(r["error_tps"]) for r in results if "error_tps" in r]
    if errs:
        print(f"{len(errs)} rows: median |error| {statistics.median(errs):.1f}%, worst {max(errs):.1f}%",
              file=sys.stderr)
    return 0


# The release of the Megatron-Bridge perf recipes in published_configs.csv
# (their settings are what the model prices).
RECIPE_RELEASES = "26.06"


# The long-context DeepSeek-V3 family of the long-context seed (its card: 256 H100 up to 128K, DP
# 32 at 4K falling to DP 1 at 128K, 512 H100 at 256K; CP = seq_len / 4K), built on the bundled
# 128K recipe. The card's measurements are held out, so this section shows what the model
# predicts, for comparison when they arrive.
LONG_CONTEXT_BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "long-context",
                                 "dsv3_128k_h100.moe")
LONG_CONTEXT_SEQ_K = [4, 8, 16, 32, 64, 128, 256]
LONG_CONTEXT_PP, LONG_CONTEXT_MICROBATCHES = 8, 256


def long_context_family(moec, workdir):
    shutil.copy(LONG_CONTEXT_BASE, os.path.join(workdir, "dsv3_128k_h100.moe"))
    rows = []
    for k in LONG_CONTEXT_SEQ_K:
        cp = k // 4
        gpus = 256 if k <= 128 else 512
        dp = max(gpus // (cp * LONG_CONTEXT_PP), 1)
        inner = min(cp, 8)
        text = ('import "dsv3_128k_h100.moe"\n'
                f"model deepseek_v3_{k}k extends deepseek_v3 {{ max_seq_len = 256K }}\n"
                f"recipe dsv3_{k}k extends dsv3_128k_h100 {{\n"
                f"  model = deepseek_v3_{k}k\n  seq_len = {k}K\n  cluster {{ nodes = {gpus // 8} }}\n"
                f"  batch {{ global = {LONG_CONTEXT_MICROBATCHES * dp} }}\n"
                f"  parallel {{ cp = {cp}; cp_hierarchy = [{inner}, {cp // inner}]"
                f"{'; edp = 2' if gpus == 512 else ''} }}\n}}\n")
        path = os.path.join(workdir, f"long_context_{k}k.moe")
        with open(path, "w") as f:
            f.write(text)
        plan, err = run_plan(moec, path)
        if plan is None:
            first = [line for line in err.splitlines() if "error:" in line][:1] or err.strip().splitlines()[-1:]
            rows.append({"seq_k": k, "cp": cp, "dp": dp, "gpus": gpus,
                         "error": [re.sub(r"^.*?error: ", "", line) for line in first]})
            continue
        pred, mem = plan["predicted"], plan["memory"]
        rows.append({"seq_k": k, "cp": cp, "dp": dp, "gpus": gpus, "gbs": LONG_CONTEXT_MICROBATCHES * dp,
                     "tflops": pred["model_tflops_per_gpu"], "mfu": 100 * pred["mfu"],
                     "tps": pred["tokens_per_s_per_gpu"], "step": pred["step_time_s"],
                     "optimizer": pred["breakdown_s"].get("optimizer", 0.0),
                     "ep": pred["breakdown_s"].get("expert_parallel", 0.0),
                     "peak_gb": mem["peak_bytes"] / 1e9, "fits": mem["fits"]})
    return rows


def long_context_section(rows):
    lines = ["## The long-context DeepSeek-V3 family", "",
             "The long-context seed reports that DeepSeek-V3 on H100 keeps its throughput in a fairly narrow "
             "band from medium to very long contexts when CP grows with the sequence; its card's measurements "
             "are held out, so this table is the prediction they will be compared with. The family is the "
             "bundled `examples/long-context/dsv3_128k_h100.moe` (FP8 blockwise, DeepEP, TP 1, EP 32, PP 8, "
             "VPP 4, selective recompute, optimizer on the CPU) with CP = seq_len / 4K, on the card's GPU "
             f"counts; the card gives no global batch, so each DP rank keeps {LONG_CONTEXT_MICROBATCHES} micro "
             "batches (the global batch shrinks with DP, as the seed's sizing rule 6 advises).", "",
             "| seq | CP | DP | GPUs | GBS | model TFLOP/s/GPU | MFU % | tokens/s/GPU | step s | EP exposed s "
             "| optimizer s | peak GB | fits |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    good = [r for r in rows if "tflops" in r]
    for r in rows:
        if "tflops" not in r:
            lines.append(f"| {r['seq_k']}K | {r['cp']} | {r['dp']} | {r['gpus']} | – | refused: "
                         f"{' '.join(r['error']).replace('|', '/')} | | | | | | | |")
            continue
        lines.append(f"| {r['seq_k']}K | {r['cp']} | {r['dp']} | {r['gpus']} | {r['gbs']} | {r['tflops']:.0f} | "
                     f"{r['mfu']:.1f} | {r['tps']:,.0f} | {r['step']:.1f} | {r['ep']:.1f} | {r['optimizer']:.1f} | "
                     f"{r['peak_gb']:.1f} | {'yes' if r['fits'] else 'no'} |")
    if good:
        lo, hi = min(r["tflops"] for r in good), max(r["tflops"] for r in good)
        lines += ["", f"Predicted band: {lo:.0f} to {hi:.0f} model TFLOP/s per GPU ({hi / lo:.2f}x) from "
                  f"{good[0]['seq_k']}K to {good[-1]['seq_k']}K. Each GPU holds 4K tokens at every length, so the "
                  "expert exchange (DeepEP over InfiniBand: EP 32 spans four nodes) and the optimizer step stay "
                  "nearly constant while the attention FLOPs grow with the sequence: their share of the step "
                  f"falls from {100 * (good[0]['ep'] + good[0]['optimizer']) / good[0]['step']:.0f}% to "
                  f"{100 * (good[-1]['ep'] + good[-1]['optimizer']) / good[-1]['step']:.0f}%, which is the "
                  "rise. A flatter measured band would say that attention under CP (the a2a+p2p ring and its "
                  "output corrections) runs below the attention efficiency the model uses, or that the exchange "
                  "hides better at short lengths."]
    return "\n".join(lines) + "\n"


def release_key(text):
    return [int(x) for x in re.findall(r"\d+", text)] or [0]


def stats(values):
    if not values:
        return "–", "–"
    return f"{statistics.median(values):.1f}%", f"{max(values):.1f}%"


def write_report(args, results, skipped):
    tps = [r for r in results if "error_tps" in r]
    abs_tps = [abs(r["error_tps"]) for r in tps]
    abs_tf = [abs(r["error_tflops"]) for r in results if "error_tflops" in r]
    signed = [r["error_tps"] for r in tps]
    worst = max(tps, key=lambda r: abs(r["error_tps"])) if tps else None

    out = []
    w = out.append
    w("# Accuracy of the step-time model")
    w("")
    w("<!-- Generated by scripts/accuracy.py; do not edit by hand. -->")
    w("")
    w("`moec plan` predicts step time, tokens/s/GPU, model TFLOP/s/GPU and MFU before a job is queued. "
      "This page compares those predictions with every measured run in "
      "`perf_calibration.csv` (vendored in `bench/reference/`) that the language can express. "
      "Regenerate it with the command below; `test/lit/meta/accuracy-page.test` fails when the page "
      "is stale.")
    w("")
    w("```sh")
    w("scripts/accuracy.py build/tools/moec/moec")
    w("```")
    w("")
    w("## How the predictions are made")
    w("")
    w("The predictions are machine-independent: they come from first principles (Megatron's model-FLOPs "
      "count, the GPU catalog's peaks and link bandwidths, the layout, the pipeline schedule) plus the "
      "constants of `include/moec/Model/Calibration.h`, each chosen from a public anchor "
      "(perf-anchors.md, hardware.csv, bridge-facts.md) and none fitted to a row of this table. "
      "`lib/Model/Performance.cpp` documents the model; the constants and their sources are listed at the "
      "end of this page. MFU is model FLOP/s per GPU over the GPU's dense BF16 peak, as the CSV's "
      "`mfu_pct_vs_bf16_dense_peak` defines it, whatever the training precision.")
    w("")
    w("The model, per pipeline rank and micro batch, layer by layer (balanced routing: every published run is "
      "force-balanced, so each GPU of a stage does 1/(TP x CP) of its work):")
    w("")
    w("- GEMMs at the precision's dense peak (FP8 rate for FP8/MXFP8, FP4 rate for NVFP4) times an efficiency; "
      "routed experts at the grouped-GEMM efficiency; core attention and the Gated-DeltaNet recurrence in BF16 "
      "at the attention efficiency, with the softmax exponentials priced at the GPU's special-function-unit "
      "rate (Blackwell doubled the tensor cores but not the SFUs; Blackwell Ultra doubled the SFUs); the "
      "output layer in BF16;")
    w("- memory-bound kernels (norms, residuals, RoPE, SwiGLU, permutation, quantization casts, cross entropy) "
      "and the per-micro-batch weight traffic (weight reads, fp32 gradient accumulation) at a fraction of HBM "
      "bandwidth;")
    w("- TP all-gather/reduce-scatter (or all-reduce) over NVLink, or the network when TP leaves the NVLink "
      "domain; the CP K/V ring minus the attention it hides behind; EP dispatch and combine (tokens x top-k x "
      "hidden, forward and backward) over NVLink inside the domain and the network beyond it, at the "
      "dispatcher's efficiency (DeepEP and HybridEP send a token once per remote node it reaches, fewer "
      "under group-limited routing); under EP overlap the exchanges hide behind another micro batch's "
      "attention and experts as Megatron-Core's schedule orders them, on the SMs the EP kernels leave, "
      "except in the unpaired warm-up and cool-down micro batches; PP sends;")
    w("- each pass of a layer takes at least the host's time to issue it, less what CUDA graphs capture;")
    w("- step = micro batches x slowest rank / (1 - bubble) + exposed DP reduce-scatter/all-gather + the "
      "optimizer step (CPU-offloaded part at the offloaded-Adam rate); recompute adds the recomputed modules' "
      "forward (full: the whole forward).")
    w("")
    w("Settings a row does not record (dispatcher, recompute, CUDA graphs, EP overlap, pipeline layout) "
      "are taken from the Megatron-Bridge perf recipe for the same model, GPU and precision "
      "(published_configs.csv, release 26.08), except for rows of older releases whose own perf-script "
      "settings could be established: the same layout was measured up to 1.7x apart across releases "
      "(Qwen3-30B on 8 GB200: 23,766 to 40,960 tokens/s/GPU), and most of that is settings the language "
      "expresses. Before 26.06 no Blackwell recipe used full-iteration CUDA graphs or EP overlap; Qwen3-30B "
      "ran the alltoall dispatcher until 26.02; DeepSeek-V3 recomputed `mla_up_proj`. The table "
      "`RELEASE_SETTINGS` in `scripts/accuracy.py` lists those settings per model, GPU, precision and "
      "release, read from the stored versions of Megatron-Bridge's `scripts/performance/configs/` and "
      "matched to a release by its layouts and the dates of the pull requests that changed them; each "
      "row's recipe names where its settings came from (`--keep DIR`), and "
      "[accuracy-release-settings.md](accuracy-release-settings.md) gives the evidence for each entry. Kernel changes the language does "
      "not express (the CuTeDSL grouped MLP and FP8 attention of 26.06, fixes between releases) remain "
      "invisible to the model.")
    w("")
    w("## Summary")
    w("")
    recent = [r for r in tps if release_key(r["release"]) >= release_key(RECIPE_RELEASES)]
    abs_recent = [abs(r["error_tps"]) for r in recent]
    med, mx = stats(abs_tps)
    target = statistics.median(abs_tps) <= 15 if abs_tps else False
    w(f"- Rows compared: **{len(tps)}** with tokens/s/GPU measured"
      + (f", {len(results) - len(tps)} more with model TFLOP/s only" if len(results) > len(tps) else "")
      + f"; rows the language cannot express: {len(skipped)} (listed below).")
    w(f"- Throughput (tokens/s/GPU), all compared rows: median absolute error **{med}**, worst **{mx}**"
      + (f" ({worst['id']}, {worst['model']} on {worst['gpu']}, release {worst['release']})." if worst else "."))
    w(f"  The target was a median within 15%: **{'met' if target else 'not met'}** over all rows.")
    if signed:
        w(f"- Median signed error {statistics.median(signed):+.1f}% (positive: the model predicts faster than "
          "measured).")
    med2, mx2 = stats(abs_recent)
    w(f"- Rows of the releases the recipes describe ({RECIPE_RELEASES} and later): {len(recent)} rows, median "
      f"absolute error **{med2}**, worst {mx2}.")
    own = [abs(r["error_tps"]) for r in tps if r["settings"].startswith("the ")]
    med4, mx4 = stats(own)
    w(f"- Rows of older releases priced with their own release's settings: {len(own)} rows, median absolute "
      f"error **{med4}**, worst {mx4}; rows of older releases whose settings were not found keep the 26.08 "
      f"recipe's: {len(tps) - len(recent) - len(own)}.")
    med3, mx3 = stats(abs_tf)
    w(f"- Model TFLOP/s/GPU: median absolute error {med3}, worst {mx3}.")
    dev = [abs(100 * (r["flops_per_token"] / (r["measured_tflops"] * 1e12 / r["measured_tps"]) - 1))
           for r in tps if r.get("flops_per_token") and r["measured_tflops"]]
    if dev:
        w(f"- FLOPs per token (`countFlops`) against each row's TFLOP/s ÷ tokens/s: median deviation "
          f"{statistics.median(dev):.2f}%, worst {max(dev):.2f}% (the rows round both figures), so the TFLOP/s "
          "and MFU errors follow the throughput error.")
    within = sum(1 for e in abs_tps if e <= 15)
    if abs_tps:
        w(f"- Rows within 15%: {within} of {len(abs_tps)}; within 25%: "
          f"{sum(1 for e in abs_tps if e <= 25)}.")
    w("")
    groups = {}
    for r in tps:
        groups.setdefault((r["model"], r["gpu"]), []).append(r["error_tps"])
    w("| model | GPU | rows | median error | min | max |")
    w("| --- | --- | --- | --- | --- | --- |")
    for (model, gpu), errs in sorted(groups.items()):
        w(f"| {model} | {gpu} | {len(errs)} | {statistics.median(errs):+.1f}% | {min(errs):+.1f}% | "
          f"{max(errs):+.1f}% |")
    w("")
    releases = {}
    for r in tps:
        releases.setdefault(r["release"], []).append(r["error_tps"])
    w("By release:")
    w("")
    w("| release | rows | median error | median absolute error |")
    w("| --- | --- | --- | --- |")
    for rel, errs in sorted(releases.items(), key=lambda kv: [int(x) if x.isdigit() else 0
                                                             for x in kv[0].split(".")], reverse=True):
        w(f"| {rel} | {len(errs)} | {statistics.median(errs):+.1f}% | "
          f"{statistics.median(abs(e) for e in errs):.1f}% |")
    w("")
    big = sorted((r for r in tps if abs(r["error_tps"]) > 50
                  or (abs(r["error_tps"]) > 20 and r["release"] in CURRENT_RELEASES)),
                 key=lambda r: -abs(r["error_tps"]))
    if big:
        w("Rows off by more than 50%, or by more than 20% in the current releases (26.06 and later), and what "
          "is known of them:")
        w("")
        for r in big:
            w(f"- {r['id']} ({r['model']} on {r['gpu']}, {r['release']}, {r['layout']}): "
              f"{r['error_tps']:+.1f}%. {OUTLIER_NOTES.get(r['id'], 'No explanation found.')}")
        w("")
    w("How the model was iterated on this table (mechanisms, not per-row factors): the first version "
      "(compute, memory-bound kernels, NVLink/network EP exchange with per-node deduplication for every "
      "fused dispatcher) over-predicted every H100 row by 45-75%. Mechanisms were then added, each from "
      "an anchor or first principles: the per-micro-batch weight traffic (fp32 gradient accumulation), "
      "which weighs on layouts with many local experts (EP 8 with DeepSeek-V3); the EP-overlap schedule "
      "of Megatron-Core (one micro batch's exchanges against another's attention and experts, layer by "
      "layer, with the warm-up and cool-down micro batches unpaired), and the SMs the EP kernels take "
      "from the compute they overlap (moe.dispatcher_sms of the GPU's multiprocessors); group-limited "
      "routing, which caps the nodes a DeepSeek-V3 token reaches. For a while HybridEP was priced as "
      "sending every routed copy over the network, which matched the Qwen3-30B H100 rows; it contradicts "
      "how DeepEP's own tests count HybridEP's bytes and under-predicted DeepSeek-V3 on 1024 H100, so the "
      "per-node send is back and those rows are listed above. Last, the softmax exponentials: attention "
      "was priced at one efficiency of the BF16 peak on every GPU, which made B200 and GB200 attention 2.25-2.5x "
      "H100's while their special function units run at H100's rate; priced at each GPU's SFU rate (the "
      "H100 figure unchanged), the median error went from 11.0% to 10.4%. Then Hopper's FP8 accumulation: "
      "its tensor cores keep about 14 bits, so Transformer Engine runs the dgrad and wgrad GEMMs of the "
      "delayed and tensorwise recipes (all three under blockwise) with split accumulation, which costs "
      "1.1-1.2x on H100 (Calibration.h gives the sources); priced at 1.15x there and nowhere else, every "
      "H100 row moved 2-3 points toward its measurement and the median went from 10.4% to 10.2%. Then "
      "Hopper's grouped expert GEMMs: Transformer Engine runs them there as one cuBLAS GEMM per local "
      "expert over four streams, which an H200 measured at 0.80 of a dense GEMM of the same size at "
      "Qwen3-30B-A3B's EP16 shapes (docs/benchmarks.md) against the 0.89 of a grouped kernel; priced so on "
      "Hopper only, every H100 row moved 1-2 points toward its measurement and the median went from 10.2% "
      "to 9.9%. The constants were not re-chosen for the table.")
    w("")
    w("## Every compared row")
    w("")
    w("Errors are (predicted − measured) / measured. MFU columns are percent of the dense BF16 peak.")
    w("")
    w("The settings column says where the settings the row does not record came from: the 26.08 Bridge "
      "recipe, or the row's own release's perf scripts (C: read in code or a pull request; I: inferred from "
      "a layout and date match).")
    w("")
    w("| id | model | GPU | release | precision | layout | settings | measured tok/s/GPU | predicted | error | "
      "measured TFLOP/s | predicted | error | measured MFU | predicted MFU |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        w("| {id} | {model} | {gpu} x{gpus} | {rel} | {prec} | {layout} | {settings} | {mt} | {pt} | {et} | {mf} | {pf} | "
          "{ef} | {mm} | {pm} |".format(
              id=r["id"], model=r["model"], gpu=r["gpu"], gpus=r["gpus"], rel=r["release"],
              prec=r["precision"], layout=r["layout"], settings=r["settings_short"], mt=fmt(r["measured_tps"]), pt=fmt(r["predicted_tps"]),
              et=f"{r['error_tps']:+.1f}%" if "error_tps" in r else "–", mf=fmt(r["measured_tflops"]),
              pf=fmt(r["predicted_tflops"]),
              ef=f"{r['error_tflops']:+.1f}%" if "error_tflops" in r else "–",
              mm=fmt(r["measured_mfu"], 1), pm=fmt(r["predicted_mfu"], 1)))
    w("")
    w("## Where the predicted time goes")
    w("")
    w("Per row, the predicted step and the share of it in each part of `StepTimeBreakdown` (compute, "
      "recompute, exposed TP/CP/EP/PP communication, DP, bubble).")
    w("")
    w("| id | step s | compute | recompute | TP | CP | EP | PP | DP | bubble | other |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        b = r["breakdown"]
        total = r["step_time_s"] or 1
        keys = ("compute", "recompute", "tensor_parallel", "context_parallel", "expert_parallel", "pipeline_p2p",
                "data_parallel", "bubble")
        cells = [f"{100 * b.get(k, 0) / total:.0f}%" for k in keys]
        other = max(0.0, total - sum(b.get(k, 0) for k in keys))
        cells.append(f"{100 * other / total:.0f}%")
        w(f"| {r['id']} | {total:.2f} | " + " | ".join(cells) + " |")
    w("")
    w("`other` is host-issue time the GPU waits for and the optimizer step.")
    w("")
    w("## Memory verdicts")
    w("")
    w("Every row ran, so its plan should fit. Peak is the predicted peak per GPU (`memory.peak_bytes`). The "
      "settings a row does not record (recompute, CUDA graphs, optimizer precision) come from its release's "
      "perf scripts where they were found, else from the 26.08 recipe, so a verdict on an older row can also "
      "reflect a setting the run did not use.")
    w("")
    bad = [r for r in results if not r["fits"]]
    if not bad:
        w(f"All {len(results)} compared rows fit.")
    else:
        w(f"{len(results) - len(bad)} of {len(results)} compared rows fit. These do not (the memory model "
          "over-estimates them; their speed was predicted on the same GPU with unbounded memory):")
        w("")
        w("| id | model | GPU | layout | predicted peak GB | note |")
        w("| --- | --- | --- | --- | --- | --- |")
        for r in bad:
            note = (r["memory_note"] or "").replace("|", "\\|")
            note = re.sub(r"^[^:]*:\d+:\d+: ", "", note)
            w(f"| {r['id']} | {r['model']} | {r['gpu']} | {r['layout']} | {r['peak_gb']:.1f} | {note} |")
    w("")
    w("## Rows the language cannot express")
    w("")
    w("| id | model | GPU | why |")
    w("| --- | --- | --- | --- |")
    for row, why in skipped:
        w(f"| {row['anchor_id']} | {row['model']} | {row['gpu'] or '–'} | {why.replace('|', '/')} |")
    w("")
    w(long_context_section(args.long_context))
    w(constants_section())
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


CONSTANT_SOURCES = [
    ("Bf16GemmEfficiency", "large BF16 GEMMs reach ~700 of 989 TFLOP/s on H100 (cuBLAS / TE)"),
    ("Fp8GemmEfficiency", "A 4.5: DeepGEMM FP8 dense 1520 of 1979 (0.77) at best, grouped 0.61-0.68; TE's scaled "
     "FP8 GEMMs lower"),
    ("Fp4GemmEfficiency", "block-scaled NVFP4 GEMMs, below FP8"),
    ("AttentionEfficiency", "flash attention fwd ~0.65, bwd ~0.5 of BF16 peak; in model-FLOPs units "
     "3 / (1/0.65 + 2.5/0.5)"),
    ("AttentionAnchorHeadDim", "the head dimension of the flash-attention figures behind AttentionEfficiency"),
    ("AttentionAnchorExpPerTensorFlop", "H100: 16 MUFU.EX2 per clock per SM against 4096 dense BF16 tensor FLOPs "
     "(989 TFLOP/s = 132 SMs x 1.83 GHz x 4096); GPUs with tensor_flops_per_clock and exp_per_clock price "
     "their softmax exponentials at their own rate (B200 16 against 8192: FlashAttention-4; Blackwell Ultra "
     "32: NVIDIA, \"Making Softmax More Efficient with NVIDIA Blackwell Ultra\")"),
    ("GroupedGemmEfficiency", "A 4.5: DeepGEMM grouped 1346 vs dense 1520 TFLOP/s"),
    ("HbmEfficiency", "achievable HBM bandwidth of fused elementwise kernels"),
    ("NVLinkEfficiency", "A 4.2: ~370 of 450 GB/s busBw per direction (nccl-tests #212)"),
    ("NetworkEfficiency", "A 4.2: one CX-7 NDR gives 48-49 of 50 GB/s"),
    ("HybridEpEfficiency", "A 4.1: HybridEP B200 EP8 536 GB/s x 7/8 remote of 900; GB200 EP36 479 x 35/36 of 900"),
    ("DeepEpEfficiency", "A 4.1: DeepEP B200 302-646 GB/s of 900 depending on SMs"),
    ("AllToAllEfficiency", "CSV A237 (TorchTitan, DeepSeek-V3 on B200): +32% from DeepEP alone; the model gives "
     "+20% (EP inside a node) to +60% (EP across nodes)"),
    ("GradOverlap", "Megatron overlaps every DP bucket but the last"),
    ("CommOverlap", "EP all-to-all overlap (one micro batch's forward against another's backward), TP comm "
     "overlap, PP sends with VPP; never more than this fraction of the overlapping compute"),
    ("HostForwardPerLayerSec", "~80 kernel launches through Python at ~25 us per layer forward"),
    ("HostBackwardPerLayerSec", "~150 launches through autograd at ~7 us per layer backward"),
    ("WeightBytesPerMicrobatch", "forward and dgrad read the BF16 weight (2 + 2 B); wgrad accumulates into the "
     "fp32 main gradient (4 + 4 B)"),
    ("HostAdamBytesPerParam", "host DRAM traffic of torch's CPU Adam per offloaded parameter (grad, fp32 "
     "master, m, v over ~14 passes); cpu-offloading card: Qwen3-30B TP2 PP2 EP4 on 2x8 H100, 996 ms, 4189 ms "
     "at 100% offload, 3877 ms with overlap_cpu_optimizer_d2h_h2d"),
    ("HostMemoryEfficiency", "share of the node's DRAM bandwidth the host Adam reaches"),
    ("HostLinkBytesPerParam", "fp32 gradient down and fp32 parameter up over the CPU-GPU link"),
    ("HostLinkEfficiency", "share of the CPU-GPU link's bandwidth the copies reach"),
    ("OptimizerBytesPerParam", "Adam step: bf16 param and grad, fp32 master, m, v, read and written"),
    ("GdnConvKernel", "Gated DeltaNet short convolution (Qwen3-Next / Qwen3.5 configs)"),
    ("VisionTemporalPatch", "Qwen-VL temporal_patch_size"),
]


def constants_section():
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "moec", "Model",
                          "Calibration.h")
    values = {}
    try:
        with open(header) as f:
            for m in re.finditer(r"(?:double|int64_t)\s+(\w+)\s*=\s*([^;]+);", f.read()):
                values[m.group(1)] = m.group(2).strip()
    except OSError:
        pass
    lines = ["## The constants", "",
             "Every constant of the time model is in `include/moec/Model/Calibration.h` (values below are read "
             "from it). None is fitted per row; each comes from a public anchor or a first-principles estimate "
             "(A = perf-anchors.md section).", "",
             "| constant | value | source |", "| --- | --- | --- |"]
    for name, source in CONSTANT_SOURCES:
        lines.append(f"| `{name}` | {values.get(name, '?')} | {source} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
