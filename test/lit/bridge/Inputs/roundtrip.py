#!/usr/bin/env python3
"""Round trip of the published Megatron-Bridge configurations through moec.

For every row of published_configs.csv (a copy of the reference table) that the
.moe language expresses:
  1. write the row as a .moe recipe;
  2. `moec export --to megatron-bridge` (overrides) and compare, field by field,
     with the row's tp/pp/cp/ep/etp/vpp/mbs/gbs/seq_len/precision/dispatcher/
     recompute/cuda graph/offload (and EP overlap where the row states it);
  3. `moec export --format yaml`, `moec import` of that YAML, and `moec export`
     of the imported recipe: the overrides and the YAML must be identical.
Rows the language does not express are counted with the reason. Prints a
summary (checked by FileCheck) and, with --verbose, one line per row.
"""
import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
from collections import Counter

MODELS = {
    "DeepSeek-V3": "deepseek_v3",
    "Qwen3-235B-A22B": "qwen3_235b_a22b",
    "Qwen3-30B-A3B": "qwen3_30b_a3b",
    "Qwen3-Next-80B-A3B": "qwen3_next_80b_a3b",
    "Qwen3-VL-235B-A22B": "qwen3_vl_235b_a22b",
    "Qwen3-VL-30B-A3B": "qwen3_vl_30b_a3b",
    "Qwen3.5-VL-35B-A3B": "qwen35_vl_35b_a3b",
    "Qwen3.5-VL-122B-A10B": "qwen35_vl_122b_a10b",
    "Qwen3.5-VL-397B-A17B": "qwen35_vl_397b_a17b",
}
GPUS = {"H100": "h100_sxm", "B200": "b200", "B300": "b300", "GB200": "gb200_nvl72", "GB300": "gb300_nvl72",
        "VR200": "vr200_nvl72"}
# CSV precision (before any parenthesis) -> (.moe precision, Bridge preset).
PRECISION = {
    "BF16": ("bf16", "bf16_mixed"),
    "FP8-CS": ("fp8.tensorwise", "bf16_with_fp8_current_scaling_mixed"),
    "FP8-DS": ("fp8.delayed", "bf16_with_fp8_delayed_scaling_mixed"),
    "FP8-SC": ("fp8.blockwise", "bf16_with_fp8_subchannel_scaling_mixed"),
    "MXFP8": ("mxfp8", "bf16_with_mxfp8_mixed"),
    "NVFP4": ("nvfp4", "bf16_with_nvfp4_mixed"),
}
# Row settings the language has no field for, which change what is computed
# or stored: a recipe without them is a different run.
BLOCKING_NOTES = {
    "freeze_language_model": "frozen language model (no .moe field)",
    "fine_grained_activation_offloading": "fine-grained activation offloading (no .moe field)",
    "moe_paged_stash": "paged stash with a per-rank expert capacity (no .moe field)",
}


def catalog_layers(srcroot):
    """layers and mtp_layers of each catalog model, from lib/Catalog/models.moe."""
    text = open(os.path.join(srcroot, "lib", "Catalog", "models.moe")).read()
    out = {}
    for m in re.finditer(r"^model (\w+) \{(.*?)^\}", text, re.S | re.M):
        body = re.sub(r"vision \{.*?\}", "", m.group(2), flags=re.S)
        layers = int(re.search(r"\blayers = (\d+)", body).group(1))
        mtp = re.search(r"\bmtp_layers = (\d+)", body)
        out[m.group(1)] = (layers, int(mtp.group(1)) if mtp else 0)
    return out


def notes_of(row):
    notes = {}
    for part in row["notes"].split(";"):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        notes[key.strip()] = value.strip()
    return notes


def to_moe(idx, row, layers):
    """(name, .moe text, expected) or (None, reason, None)."""
    model = MODELS.get(row["model"])
    gpu = GPUS.get(row["gpu"])
    if not model or not gpu:
        return None, "model or GPU not in the catalog", None
    notes = notes_of(row)
    for key, why in BLOCKING_NOTES.items():
        if any(k.startswith(key) for k in notes):
            return None, why, None
    for col in ("dispatcher", "recompute", "cuda_graph_impl"):
        if not row[col]:
            return None, "the source does not record the %s" % col.replace("_impl", ""), None
    prec_key = row["precision"].split(" ")[0]
    if prec_key not in PRECISION:
        return None, "precision %s has no .moe value" % row["precision"], None
    prec, preset = PRECISION[prec_key]
    tp, pp, cp, ep = (int(row[c]) for c in ("tp", "pp", "cp", "ep"))
    etp = int(row["etp"]) if row["etp"] else tp  # Megatron: unset ETP is TP
    vpp = int(row["vpp"]) if row["vpp"] else 1
    name = "row%03d_%s" % (idx, re.sub(r"\W+", "_", row["config_name"]).strip("_"))
    par = ["tp = %d" % tp, "cp = %d" % cp, "ep = %d" % ep, "etp = %d" % etp, "pp = %d" % pp]
    if vpp > 1:
        par.append("vpp = %d" % vpp)
    if notes.get("SP") == "on":
        par.append("sp = true")
    layout = notes.get("pp_layout")
    if "first/last PP stage layers" in notes:
        first, last = (int(x) for x in notes["first/last PP stage layers"].split("/"))
        n, mtp = layers[model]
        middle = pp - 2
        rest = n - first - last
        if vpp > 1 or (middle and rest % middle) or (not middle and rest):
            return None, "uneven first/last stages that no layout states", None
        run = lambda k: "t" if k == 1 else "t*%d" % k
        layout = "E" + run(first) + "|" + ("(%s|)*%d" % (run(rest // middle), middle) if middle else "") + \
            run(last) + "m" * mtp + "L"
    n, mtp = layers[model]
    if not layout and n % (pp * vpp) and not mtp and (n + 2) % (pp * vpp) == 0:
        # The row gives no split, and the layers do not divide. The Bridge base
        # recipes of these models set account_for_embedding/loss_in_pipeline_split
        # (examples/published says so for Qwen3-235B): embedding and loss each
        # take a layer slot. .moe states that as the equivalent layout.
        per = (n + 2) // (pp * vpp)
        run = lambda k: "t" if k == 1 else "t*%d" % k
        middle = pp * vpp - 2
        layout = "E" + run(per - 1) + "|" + ("(%s|)*%d" % (run(per), middle) if middle else "") + run(per - 1) + "L"
    if not layout and n % (pp * vpp):
        return None, "the source gives no pipeline split for layers that do not divide over pp x vpp", None
    lines = ["recipe %s {" % name,
             "  model      = %s" % model,
             "  cluster    { gpu = %s; gpus = %s }" % (gpu, row["num_gpus"]),
             "  seq_len    = %s" % row["seq_len"],
             "  batch      { micro = %s; global = %s }" % (row["mbs"], row["gbs"]),
             "  parallel   { %s }" % "; ".join(par)]
    if layout:
        lines.append('  parallel   { layout = "%s" }' % layout)
    lines.append("  precision  = %s" % prec)
    if prec == "mxfp8":
        lines.append("  fp8_param_gather = true   # what the MXFP8 preset does")
    disp = row["dispatcher"]
    if disp == "flex":
        backend = row["dispatcher_backend"]
        if backend not in ("deepep", "hybridep"):
            return None, "flex dispatcher with backend %r has no .moe value" % backend, None
        disp = backend
    lines.append("  dispatcher = %s" % disp)
    rec = row["recompute"]
    if rec == "none" or rec.startswith("selective:[]"):
        recompute = "none"
    elif rec.startswith("selective:"):
        recompute = "selective(%s)" % ", ".join(rec.split(":", 1)[1].split("+"))
    elif rec == "full:uniform:1":
        recompute = "full"
    else:
        return None, "recompute %s has no .moe value" % rec, None
    lines.append("  recompute  = %s" % recompute)
    impl, scope = row["cuda_graph_impl"], row["cuda_graph_scope"].replace(" (language only)", "")
    if impl == "none":
        graphs = "none"
    elif impl == "full_iteration" or scope in ("full_iteration", "(whole fwd+bwd)"):
        graphs = "full_iteration"
    elif impl in ("transformer_engine", "local") and scope:
        graphs = "[%s]" % ", ".join(scope.split("+"))
        if impl == "local":
            lines.append("  cuda_graph_impl = local")
    else:
        return None, "CUDA graph %s/%s has no .moe value" % (impl, scope), None
    lines.append("  cuda_graph = %s" % graphs)
    moe = []
    if row["ep_overlap"] == "true":
        moe.append("overlap_ep_comm = true")
    if row["delay_wgrad"] == "true":
        moe.append("delay_wgrad = true")
    if moe:
        lines.append("  moe        { %s }" % "; ".join(moe))
    if "megatron_fsdp(optim_grads_params)" in notes:
        lines.append("  parallel   { fsdp = true }")
    if "precision_aware_optimizer" in notes:
        lines.append("  optimizer  { precision_aware = true }")
    if "freeze_vision_model" in notes:
        lines.append("  vision     { frozen = true }")
    lines.append("}")
    expected = {
        "model.tensor_model_parallel_size": str(tp),
        "model.pipeline_model_parallel_size": str(pp),
        "model.context_parallel_size": str(cp),
        "model.expert_model_parallel_size": str(ep),
        "model.expert_tensor_parallel_size": str(etp),
        "model.virtual_pipeline_model_parallel_size": str(vpp) if vpp > 1 else "null",
        "train.micro_batch_size": row["mbs"],
        "train.global_batch_size": row["gbs"],
        "model.seq_length": row["seq_len"],
        "mixed_precision": preset,
        "model.moe_token_dispatcher_type": row["dispatcher"],
        "optimizer.optimizer_cpu_offload": "false",
    }
    if row["dispatcher"] == "flex":
        expected["model.moe_flex_dispatcher_backend"] = row["dispatcher_backend"]
    if recompute == "none":
        expected["model.recompute_granularity"] = "null"
    elif recompute == "full":
        expected.update({"model.recompute_granularity": "full", "model.recompute_method": "uniform",
                         "model.recompute_num_layers": "1"})
    else:
        expected.update({"model.recompute_granularity": "selective",
                         "model.recompute_modules": "[%s]" % ",".join(rec.split(":", 1)[1].split("+"))})
    if graphs == "none":
        expected["model.cuda_graph_impl"] = "none"
    elif graphs == "full_iteration":
        expected.update({"model.cuda_graph_impl": "full_iteration", "model.cuda_graph_modules": "[]"})
    else:
        expected.update({"model.cuda_graph_impl": impl, "model.cuda_graph_modules": "[%s]" % scope.replace("+", ",")})
    for col, key in (("ep_overlap", "comm_overlap.overlap_moe_expert_parallel_comm"),
                     ("delay_wgrad", "comm_overlap.delay_wgrad_compute")):
        if row[col]:
            expected[key] = row[col]
    if layout:
        expected["model.pipeline_model_parallel_layout"] = '"%s"' % layout
    return name, "\n".join(lines) + "\n", expected


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moec", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--srcroot", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    layers = catalog_layers(a.srcroot)
    rows = list(csv.DictReader(open(a.csv)))
    why_not = Counter()
    rejected = Counter()
    mismatches = []
    expressible = exported = field_checks = round_trips = 0
    env_rows = env_agree = 0
    for idx, row in enumerate(rows, start=2):  # the CSV line number
        name, text, expected = to_moe(idx, row, layers)
        if name is None:
            why_not[text] += 1
            if a.verbose:
                print("line %d %s: not expressible: %s" % (idx, row["config_name"], text))
            continue
        expressible += 1
        moe = os.path.join(a.out, name + ".moe")
        open(moe, "w").write(text)
        r = run([a.moec, "export", "--to", "megatron-bridge", moe])
        if r.returncode != 0:
            ids = sorted(set(re.findall(r"error: .*\[([\w-]+)\]", r.stderr))) or [r.stderr.strip()[-200:]]
            rejected[", ".join(ids)] += 1
            if a.verbose:
                print("line %d %s: moec check errors: %s" % (idx, row["config_name"], ", ".join(ids)))
            continue
        exported += 1
        got = dict(w.split("=", 1) for w in shlex.split(r.stdout))
        bad = ["%s: exported %s, published %s" % (k, got.get(k, "(absent)"), v)
               for k, v in expected.items() if got.get(k) != v]
        field_checks += len(expected)
        if bad:
            mismatches.append("line %d %s: %s" % (idx, row["config_name"], "; ".join(bad)))
        m = re.search(r"CUDA_DEVICE_MAX_CONNECTIONS=(\d+)", row["notes"])
        if m:
            env_rows += 1
            env_agree += ("environment CUDA_DEVICE_MAX_CONNECTIONS=%s " % m.group(1)) in r.stderr
        yaml_path = os.path.join(a.out, name + ".yaml")
        back = os.path.join(a.out, name + ".back.moe")
        y = run([a.moec, "export", "--to", "megatron-bridge", "--format", "yaml", moe, "-o", yaml_path])
        i = run([a.moec, "import", "--from", "megatron-bridge", yaml_path, "-o", back])
        r2 = run([a.moec, "export", "--to", "megatron-bridge", back])
        y2 = run([a.moec, "export", "--to", "megatron-bridge", "--format", "yaml", back])
        same = (y.returncode == 0 and i.returncode == 0 and r2.returncode == 0 and r2.stdout == r.stdout and
                y2.stdout == open(yaml_path).read() and "no .moe equivalent" not in i.stderr)
        if same:
            round_trips += 1
        else:
            mismatches.append("line %d %s: round trip differs (import: %s)" %
                              (idx, row["config_name"], i.stderr.strip()[-300:]))
    print("published rows: %d" % len(rows))
    print("expressible: %d" % expressible)
    for why, n in sorted(why_not.items(), key=lambda kv: (-kv[1], kv[0])):
        print("not expressible: %d: %s" % (n, why))
    for ids, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        print("refused by moec check: %d: %s" % (n, ids))
    print("exported: %d (%d fields compared)" % (exported, field_checks))
    print("field mismatches: %d" % sum(1 for m in mismatches if "round trip" not in m))
    print("round trips identical: %d of %d" % (round_trips, exported))
    print("CUDA_DEVICE_MAX_CONNECTIONS as published: %d of %d rows that state it" % (env_rows and env_agree, env_rows))
    for m in mismatches:
        print("MISMATCH " + m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
