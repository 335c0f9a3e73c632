#!/usr/bin/env python3
"""Speed benchmark for `moec check`.

Generates two inputs,

  (a) a file of 20 realistic recipes (variations of the examples: DeepSeek-V3 at
      32K-256K on H100/B300/GB300, Qwen3-235B on GB200, Qwen3-VL, Qwen3-30B, ...;
      full recipes, some extending others), and
  (b) a file of about 10,000 lines (hundreds of recipes of the same families),

runs `moec check` on each N times, timing every run from the outside with
time.perf_counter() around subprocess.run (so process start-up, dynamic loading
and the built-in catalog are included), and writes the figures to
docs/benchmarks.md between the markers

  <!-- BEGIN check_speed -->
  <!-- END check_speed -->

leaving the rest of the file alone, so that other benchmarks can keep their
own sections there.

Targets: the 20-recipe file under 20 ms, the 10,000-line file under 200 ms
(median wall time per run).

Usage: bench/check_speed.py [--moec PATH] [--runs N] [--out FILE] [--keep DIR] [--strict]
(bench/run.sh builds a Release moec into build/ first and runs this script.)
"""

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN check_speed -->"
END = "<!-- END check_speed -->"

TARGET_SMALL_MS = 20.0
TARGET_LARGE_MS = 200.0
TARGET_EXAMPLES_MS = 50.0  # issue 3: moec check over all of examples/ in one process
LARGE_LINES = 10_000

# --------------------------------------------------------------------------------------
# Recipe generation
# --------------------------------------------------------------------------------------

# Models that the presets need beyond the built-in catalog (as in the examples).
EXTRA_MODELS = """\
# Position ranges extended for long-context runs (YaRN rescaling), as in the examples.
model deepseek_v3_256k extends deepseek_v3 {
  max_seq_len = 256K
}

model qwen3_235b_a22b_128k extends qwen3_235b_a22b {
  max_seq_len = 128K
}
"""

# Full recipes: every field a real launch sets. Figures follow the examples'
# reasoning: cp ~ seq_len / 4K, dp = W / (tp*cp*pp), edp = W / (etp*ep*pp).
PRESETS = [
    dict(name="dsv3_128k_h100", model="deepseek_v3", gpu="h100_sxm", nodes=32, seq="128K", micro=1, gbs=256,
         par="tp = 1; cp = 32; ep = 32; pp = 8; vpp = 4", layout="Et|(tt|)*30mL", prec="fp8.blockwise",
         disp="deepep", rc="selective(mla_up_proj, layernorm, moe, mlp)", graph="none", offload="1.0",
         data="dsv3_long_context_text_document"),
    dict(name="dsv3_64k_h100", model="deepseek_v3", gpu="h100_sxm", nodes=16, seq="64K", micro=1, gbs=256,
         par="tp = 1; cp = 16; ep = 16; pp = 8; vpp = 4", layout="Et|(tt|)*30mL", prec="fp8.blockwise",
         disp="deepep", rc="selective(mla_up_proj, layernorm, moe, mlp)", graph="none", offload="1.0",
         data="dsv3_long_context_text_document"),
    dict(name="dsv3_32k_h100", model="deepseek_v3", gpu="h100_sxm", nodes=8, seq="32K", micro=1, gbs=256,
         par="tp = 1; cp = 8; ep = 8; pp = 8; vpp = 4", layout="Et|(tt|)*30mL", prec="fp8.blockwise",
         disp="deepep", rc="selective(mla_up_proj, layernorm, moe)", graph="none", offload="0.5",
         data="dsv3_text_document"),
    dict(name="dsv3_256k_h100", model="deepseek_v3_256k", gpu="h100_sxm", nodes=64, seq="256K", micro=1, gbs=256,
         par="tp = 1; cp = 64; ep = 32; pp = 8; vpp = 4; edp = 2", layout="Et|(tt|)*30mL", prec="fp8.blockwise",
         disp="deepep", rc="selective(mla_up_proj, layernorm, moe, mlp)", graph="none", offload="1.0",
         data="dsv3_long_context_text_document"),
    dict(name="dsv3_128k_b300", model="deepseek_v3", gpu="b300", nodes=32, seq="128K", micro=1, gbs=256,
         par="tp = 1; cp = 32; ep = 32; pp = 8; vpp = 4", layout="Et|(tt|)*30mL", prec="mxfp8",
         disp="deepep", rc="selective(mla_up_proj, layernorm, moe)", graph="none", offload="0.5",
         data="dsv3_long_context_text_document"),
    dict(name="dsv3_128k_gb300", model="deepseek_v3", gpu="gb300_nvl72", nodes=64, seq="128K", micro=1, gbs=256,
         par="tp = 1; cp = 32; ep = 32; pp = 8; vpp = 4", layout="Et|(tt|)*30mL", prec="mxfp8",
         disp="hybridep", rc="selective(mla_up_proj, layernorm, moe_act)", graph="[moe_router, moe_preprocess]",
         offload="0.5", data="dsv3_long_context_text_document"),
    dict(name="qwen3_235b_128k_gb200", model="qwen3_235b_a22b_128k", gpu="gb200_nvl72", nodes=32, seq="128K",
         micro=1, gbs=64, par="tp = 4; cp = 4; ep = 32; etp = 1; pp = 4; vpp = 12", layout="Et|(tt|)*46tL",
         prec="bf16", disp="hybridep", rc="selective(moe_act, layernorm)",
         graph="[attn, moe_router, moe_preprocess]", offload="1.0", data="qwen3_long_context_text_document"),
    dict(name="qwen3_235b_64k_gb200", model="qwen3_235b_a22b_128k", gpu="gb200_nvl72", nodes=32, seq="64K",
         micro=1, gbs=64, par="tp = 4; cp = 2; ep = 32; etp = 1; pp = 4; vpp = 12", layout="Et|(tt|)*46tL",
         prec="bf16", disp="hybridep", rc="selective(moe_act, layernorm)",
         graph="[attn, moe_router, moe_preprocess]", offload="1.0", data="qwen3_long_context_text_document"),
    dict(name="qwen3_235b_32k_gb200", model="qwen3_235b_a22b", gpu="gb200_nvl72", nodes=32, seq="32K",
         micro=1, gbs=128, par="tp = 4; cp = 1; ep = 32; etp = 1; pp = 4; vpp = 12", layout="Et|(tt|)*46tL",
         prec="mxfp8", disp="hybridep", rc="selective(moe_act, layernorm)", graph="[moe_router, moe_preprocess]",
         offload="0.5", data="qwen3_text_document"),
    dict(name="qwen3_vl_3d_gb200", model="qwen3_vl_30b_a3b", gpu="gb200_nvl72", nodes=8, seq="8K", micro=2,
         gbs=512, par="tp = 1; cp = 1; pp = 1; ep = 32; etp = 1; fsdp = false", prec="bf16", disp="hybridep",
         rc="selective(moe_act, layernorm)", graph="[moe_router, moe_preprocess]", data="vlm_image_text_energon",
         vision="false"),
    dict(name="qwen3_vl_fsdp_gb200", model="qwen3_vl_235b_a22b", gpu="gb200_nvl72", nodes=16, seq="4K", micro=4,
         gbs=256, par="tp = 1; cp = 1; pp = 1; ep = 64; fsdp = true", prec="bf16", disp="hybridep", rc="full",
         graph="none", data="vlm_image_text_energon", vision="true"),
    dict(name="qwen3_30b_32k_h200", model="qwen3_30b_a3b", gpu="h200_sxm", nodes=4, seq="32K", micro=1, gbs=128,
         par="tp = 1; cp = 4; ep = 8; pp = 1", prec="fp8.blockwise", disp="alltoall",
         rc="selective(moe_act, layernorm)", graph="[moe_router]", offload="0.0", data="qwen3_text_document"),
    dict(name="qwen3_30b_16k_b200", model="qwen3_30b_a3b", gpu="b200", nodes=2, seq="16K", micro=1, gbs=128,
         par="tp = 1; cp = 2; ep = 8; pp = 1", prec="mxfp8", disp="deepep", rc="selective(moe_act)",
         graph="[moe_router, moe_preprocess]", data="qwen3_text_document"),
    dict(name="mixtral_32k_h100", model="mixtral_8x7b", gpu="h100_sxm", nodes=4, seq="32K", micro=1, gbs=128,
         par="tp = 2; cp = 2; ep = 8; pp = 1", prec="bf16", disp="alltoall", rc="selective(core_attn)",
         graph="none", data="mixtral_text_document"),
    dict(name="qwen3_next_64k_gb200", model="qwen3_next_80b_a3b", gpu="gb200_nvl72", nodes=16, seq="64K", micro=1,
         gbs=128, par="tp = 2; cp = 4; ep = 16; pp = 1", prec="bf16", disp="hybridep",
         rc="selective(moe_act, layernorm)", graph="[moe_router]", offload="0.5", data="qwen3_next_text_document"),
]

# Recipes that extend a preset and change a few fields (the way a team explores).
EXTENSIONS = [
    ("dsv3_128k_h100_full_recompute", "dsv3_128k_h100", ["recompute = full(method = uniform, layers = 1)"]),
    ("qwen3_235b_128k_gb200_mxfp8", "qwen3_235b_128k_gb200", ["precision  = mxfp8"]),
    ("qwen3_30b_32k_h200_gbs256", "qwen3_30b_32k_h200", ["batch { global = 256 }"]),
    ("qwen3_vl_3d_gb200_frozen", "qwen3_vl_3d_gb200", ["vision { frozen = true }", "batch { micro = 1 }"]),
    ("dsv3_64k_h100_bf16", "dsv3_64k_h100", ["precision = bf16", "offload { optimizer = 0.5 }"]),
]


def render(p, name=None, gbs=None, rc=None, graph=None, offload=None, data=None, prec=None):
    """A full recipe in the examples' layout."""
    name = name or p["name"]
    lines = [f"recipe {name} {{",
             f"  model      = {p['model']}",
             f"  cluster    {{ gpu = {p['gpu']}; nodes = {p['nodes']} }}",
             f"  seq_len    = {p['seq']}",
             f"  batch      {{ micro = {p['micro']}; global = {gbs or p['gbs']} }}"]
    if "layout" in p:
        lines += ["  parallel   {", f"    {p['par']}", f'    layout = "{p["layout"]}"', "  }"]
    else:
        lines += [f"  parallel   {{ {p['par']} }}"]
    lines += [f"  precision  = {prec or p['prec']}",
              f"  dispatcher = {p['disp']}",
              f"  recompute  = {rc or p['rc']}",
              f"  cuda_graph = {graph or p['graph']}"]
    off = offload if offload is not None else p.get("offload")
    if off is not None:
        lines.append(f"  offload    {{ optimizer = {off} }}")
    lines.append(f'  data       {{ source = real("data/{data or p["data"]}"); variable_length = false }}')
    if "vision" in p:
        lines.append(f"  vision     {{ frozen = {p['vision']} }}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_extension(name, base, overrides):
    return "\n".join([f"recipe {name} extends {base} {{"] + [f"  {o}" for o in overrides] + ["}"]) + "\n"


def small_file():
    """(a) 20 recipes: 15 full presets and 5 extending ones."""
    parts = ["# moec check benchmark (a): 20 recipes, generated by bench/check_speed.py.\n", EXTRA_MODELS]
    parts += [render(p) for p in PRESETS]
    assert all(compatible_graph(p["rc"], p["graph"]) == p["graph"] for p in PRESETS)
    parts += [render_extension(*e) for e in EXTENSIONS]
    assert len(PRESETS) + len(EXTENSIONS) == 20
    return "\n".join(parts)


# Per-architecture choices that keep every generated variant valid.
RECOMPUTE = {
    "deepseek": ["selective(mla_up_proj, layernorm, moe, mlp)", "selective(mla_up_proj, layernorm, moe)",
                 "selective(layernorm, moe_act)", "full"],
    "other": ["selective(moe_act, layernorm)", "selective(moe_act)", "selective(core_attn, moe_act)", "full"],
}
GRAPHS = {
    "hopper": ["none", "[moe_router]", "[moe_router, moe_preprocess]"],
    "blackwell": ["none", "[moe_router]", "[moe_router, moe_preprocess]", "[attn, moe_router, moe_preprocess]"],
}
OFFLOADS = ["0.0", "0.25", "0.5", "1.0"]


def compatible_graph(rc, graph):
    """Megatron-Core rejects full recompute with per-layer CUDA graphs, and recomputing
    the whole MoE layer with the moe_router graph; fall back to no graphs there."""
    modules = re.findall(r"\w+", rc.partition("(")[2])
    if rc.startswith("full") and graph != "none":
        return "none"
    if "moe" in modules and "moe_router" in graph:
        return "none"
    return graph


def large_file(target_lines=LARGE_LINES):
    """(b) About target_lines lines: variants of the presets, every fifth one an extension."""
    parts = [f"# moec check benchmark (b): about {target_lines} lines, generated by bench/check_speed.py.\n",
             EXTRA_MODELS]
    lines = sum(p.count("\n") + 1 for p in parts)
    count = 0
    full_names = []
    i = 0
    while lines < target_lines:
        p = PRESETS[i % len(PRESETS)]
        v = i // len(PRESETS)
        name = f"{p['name']}_v{v}"
        if i % 5 == 4 and full_names:
            base = full_names[-1]
            base_preset = PRESETS[(i - 1) % len(PRESETS)]
            overrides = ["batch { global = %d }" % (2 * base_preset["gbs"]),
                         "offload { optimizer = %s }" % OFFLOADS[v % len(OFFLOADS)]]
            text = render_extension(f"{base}_x", base, overrides)
        else:
            family = "deepseek" if p["model"].startswith("deepseek") else "other"
            arch = "hopper" if p["gpu"].startswith("h") else "blackwell"
            rc = RECOMPUTE[family][v % len(RECOMPUTE[family])]
            text = render(p, name=name,
                          gbs=p["gbs"] * (1, 2, 4)[v % 3],
                          rc=rc,
                          graph=compatible_graph(rc, GRAPHS[arch][(v + i) % len(GRAPHS[arch])]),
                          offload=OFFLOADS[(v + i) % len(OFFLOADS)] if "offload" in p or v % 2 else None,
                          data=f"{p['data']}_{v}")
            full_names.append(name)
        parts.append(text)
        lines += text.count("\n") + 1
        count += 1
        i += 1
    return "\n".join(parts), count


def minimal_file():
    """One small recipe: the cost of starting moec and loading the catalog."""
    return ("recipe tiny {\n  model = tiny_moe\n  cluster { gpu = cpu; nodes = 1 }\n"
            "  seq_len = 1K\n  batch { micro = 1; global = 2 }\n}\n")


# --------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------

def run_once(moec, path, extra=()):
    """Wall milliseconds (perf_counter around subprocess.run), CPU milliseconds of the
    child (user + system, from getrusage), and the completed process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    files = [str(p) for p in (path if isinstance(path, list) else [path])]
    proc = subprocess.run([str(moec), "check", *extra, *files], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    wall = (time.perf_counter() - start) * 1000.0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000.0
    return wall, cpu, proc


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def measure(moec, path, runs, warmup=3, extra=()):
    for _ in range(warmup):
        run_once(moec, path, extra)
    samples = [run_once(moec, path, extra)[:2] for _ in range(runs)]
    times = [w for w, _ in samples]
    cpu = [c for _, c in samples]
    return dict(min=min(times), median=statistics.median(times), p90=percentile(times, 90),
                mean=statistics.fmean(times), max=max(times), cpu_median=statistics.median(cpu), runs=runs)


def diagnostics_summary(moec, path, extra=()):
    """Exit status and diagnostic counts by severity (from --format json)."""
    _, _, proc = run_once(moec, path, ["--format", "json", *extra])
    counts = {"error": 0, "warning": 0, "remark": 0}
    ids = {}
    try:
        diags = json.loads(proc.stdout.decode() or "[]")
        for d in diags:
            counts[d.get("severity", "error")] = counts.get(d.get("severity", "error"), 0) + 1
            ids[d.get("id")] = ids.get(d.get("id"), 0) + 1
    except json.JSONDecodeError:
        counts = None
    return proc.returncode, counts, ids, proc.stderr.decode()


# --------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, timeout=10).stdout.strip()
    except Exception:
        return ""


def machine_info(moec):
    info = {}
    lscpu = sh("lscpu")
    m = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    info["cpu"] = m.group(1).strip() if m else platform.processor() or "unknown"
    info["cores"] = str(os.cpu_count() or "?")
    mem = sh("grep MemTotal /proc/meminfo")
    m = re.search(r"(\d+)\s*kB", mem)
    info["memory"] = f"{int(m.group(1)) / 1024 / 1024:.1f} GiB" if m else "unknown"
    osr = sh(". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"")
    info["os"] = f"{osr or platform.system()} (kernel {platform.release()})"
    # The compiler and build type of the build that produced moec.
    cache = None
    for d in Path(moec).resolve().parents:
        if (d / "CMakeCache.txt").exists():
            cache = (d / "CMakeCache.txt").read_text(errors="replace")
            break
    cxx, build_type = "c++", "unknown"
    if cache:
        m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", cache, re.M)
        cxx = m.group(1).strip() if m else cxx
        m = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache, re.M)
        build_type = (m.group(1).strip() or "(none)") if m else build_type
    info["compiler"] = sh(f"{cxx} --version | head -1") or cxx
    info["build_type"] = build_type
    commit = sh(f"git -C {ROOT} rev-parse --short HEAD")
    dirty = sh(f"git -C {ROOT} status --porcelain --untracked-files=no")
    info["commit"] = (commit + (" + uncommitted changes" if dirty else "")) if commit else "unknown"
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    info["load"] = " / ".join(f"{x:.2f}" for x in load) if load else "unknown"
    info["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
    return info


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------

def section(results, info, runs):
    rows = []
    for r in results:
        target = f"< {r['target']:.0f} ms" if r["target"] else "—"
        verdict = ("**pass**" if r["stats"]["median"] < r["target"] else "**FAIL**") if r["target"] else "—"
        cpu_verdict = ("pass" if r["stats"]["cpu_median"] < r["target"] else "fail") if r["target"] else "—"
        s = r["stats"]
        rows.append(f"| {r['label']} | {r['lines']:,} | {r['recipes']} | {s['min']:.1f} | {s['median']:.1f} | "
                    f"{s['p90']:.1f} | {target} | {verdict} | {s['cpu_median']:.1f} | {cpu_verdict} |")
    checks = []
    for r in results:
        c = r["diags"]
        counts = ("could not parse --format json output" if c["counts"] is None else
                  f"{c['counts']['error']} errors, {c['counts']['warning']} warnings, "
                  f"{c['counts']['remark']} remarks")
        checks.append(f"- {r['label']}: exit status {c['rc']}, {counts}")
    out = [
        BEGIN,
        "## moec check",
        "",
        "Wall time of one `moec check FILE` process, measured from outside with `time.perf_counter()` around",
        "`subprocess.run` (process start-up, dynamic loading and parsing the built-in catalog included), "
        f"{runs} timed runs after 3 warm-up runs. Pass/fail compares the **median** with the target.",
        "Generated by `bench/check_speed.py` (`bench/run.sh` builds Release into `build/` and runs it); the",
        "inputs are generated by the script (variations of `examples/`; `--keep DIR` saves them).",
        "*median CPU ms* is the child's user + system time (`getrusage`): on a machine busy with other",
        "work (see the load average below) wall time includes waiting for a core, CPU time does not, so",
        "*CPU vs target* says what an otherwise idle machine would show.",
        "",
        "| input | lines | recipes | min ms | median ms | p90 ms | target | result (median wall) "
        "| median CPU ms | CPU vs target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |",
        *rows,
        "",
        "What the checked files produced (so the timings are of real work, not of an early exit):",
        "",
        *checks,
        "",
        "Machine:",
        "",
        f"- CPU: {info['cpu']}, {info['cores']} cores visible",
        f"- memory: {info['memory']}",
        f"- OS: {info['os']}",
        f"- compiler: {info['compiler']}",
        f"- build type: {info['build_type']}",
        f"- moec commit: {info['commit']}",
        f"- load average (1/5/15 min) at the start: {info['load']}; at the end: {info.get('load_end', '?')}",
        f"- measured: {info['date']}",
        END,
    ]
    return "\n".join(out) + "\n"


def write_section(out_path, text):
    out_path = Path(out_path)
    if out_path.exists():
        doc = out_path.read_text()
    else:
        doc = "# Benchmarks\n\nEach section below is written by the script named in it; edit the scripts, " \
              "not the sections.\n"
    if BEGIN in doc and END in doc:
        start = doc.index(BEGIN)
        end = doc.index(END) + len(END)
        if doc[end:end + 1] == "\n":
            end += 1
        doc = doc[:start] + text + doc[end:]
    else:
        if not doc.endswith("\n"):
            doc += "\n"
        doc += "\n" + text
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moec", default=str(ROOT / "build" / "tools" / "moec" / "moec"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--keep", help="write the generated inputs to this directory and keep them")
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing the file")
    ap.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")
    args = ap.parse_args()

    moec = Path(args.moec)
    if not os.access(moec, os.X_OK):
        sys.exit(f"check_speed: no moec executable at {moec} (build first: bench/run.sh)")

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="moec-check-speed-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        small = tmp / "bench_20_recipes.moe"
        small.write_text(small_file())
        text, n_large = large_file()
        large = tmp / "bench_10k_lines.moe"
        large.write_text(text)
        tiny = tmp / "bench_minimal.moe"
        tiny.write_text(minimal_file())

        examples = sorted((ROOT / "examples").rglob("*.moe"))
        example_recipes = sum(p.read_text().count("\nrecipe ") + p.read_text().startswith("recipe ")
                              for p in examples)
        inputs = [
            ("startup: 1 minimal recipe", tiny, 1, None),
            ("20 recipes", small, 20, TARGET_SMALL_MS),
            (f"~{LARGE_LINES:,} lines", large, n_large, TARGET_LARGE_MS),
            (f"~{LARGE_LINES:,} lines, --no-planner", large, n_large, TARGET_LARGE_MS),
            (f"all of examples/ ({len(examples)} files), one process", examples, example_recipes,
             TARGET_EXAMPLES_MS),
        ]
        info = machine_info(moec)
        results = []
        for label, path, recipes, target in inputs:
            extra = ["--no-planner"] if "--no-planner" in label else []
            rc, counts, ids, stderr = diagnostics_summary(moec, path, extra)
            if rc not in (0, 1) or counts is None:
                print(f"check_speed: moec failed on {path} (exit {rc}):\n{stderr}", file=sys.stderr)
            stats = measure(moec, path, args.runs, extra=extra)
            lines = sum(p.read_text().count("\n") for p in (path if isinstance(path, list) else [path]))
            results.append(dict(label=label, path=path, lines=lines, recipes=recipes, target=target, stats=stats,
                                diags=dict(rc=rc, counts=counts, ids=ids)))
            verdict = "" if target is None else ("  PASS" if stats["median"] < target else "  FAIL")
            print(f"{label:28s} {lines:6d} lines  min {stats['min']:7.1f}  median {stats['median']:7.1f}  "
                  f"p90 {stats['p90']:7.1f}  cpu {stats['cpu_median']:7.1f} ms  (exit {rc}, {counts}){verdict}")
            if ids:
                print("    diagnostics: " + ", ".join(f"{k} x{v}" for k, v in sorted(ids.items())))

        if hasattr(os, "getloadavg"):
            info["load_end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
        text = section(results, info, args.runs)
        if args.no_write:
            print(text)
        else:
            write_section(args.out, text)
            print(f"check_speed: wrote the 'moec check' section of {args.out}")
        missed = [r for r in results if r["target"] and r["stats"]["median"] >= r["target"]]
        return 1 if (missed and args.strict) else 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
