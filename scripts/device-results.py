#!/usr/bin/env python3
"""Puts what scripts/device-check.sh brought back into docs/benchmarks.md.

    scripts/device-results.py DIR            # DIR: the check's $OUT, fetched
    scripts/device-results.py --bench TABLE  # bench/cuda/run.sh's table alone

DIR's cuda-benchmarks.md replaces the "CUDA kernels" section (between the
cuda-bench markers), the table made from its step-h200.jsonl (moerun's step
log of bench/cuda/step_h200.moe) the "One GPU training step" section
(gpu-step markers), with host-staging.txt (moert-host-staging-bench) after
it, and its device-report.md the "GPU tests on a device"
section (device-check markers); a section is added at the end of the page
the first time.
"""
import argparse
import datetime
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


def replace_block(text, name, body):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        return text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    return text.rstrip() + "\n\n" + block + "\n"


def step_table(log, device):
    """moerun's step log of step_h200 as a Markdown table, each step beside the plan."""
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not steps:
        sys.exit(f"device-results: {log} has no step")

    def cell(record, key, scale, digits):
        value = record.get(key)
        return "-" if value is None else f"{value / scale:.{digits}f}"

    rows = []
    for r in steps:
        plan = r.get("predicted_step_time_s")
        ratio = f"{r['step_time_s'] / plan:.2f}x" if plan else "-"
        cells = [str(r["step"]), cell(r, "step_time_s", 1, 3), cell(r, "predicted_step_time_s", 1, 3), ratio,
                 cell(r, "tokens_per_s", 1, 0), cell(r, "device_peak_bytes", 1e9, 1),
                 cell(r, "predicted_peak_bytes", 1e9, 1), cell(r, "staged_bytes", 1e9, 1), cell(r, "loss", 1, 3)]
        rows.append("| " + " | ".join(cells) + " |")
    return (f"### bench/cuda/step_h200.moe trained by moerun on {device}\n\n"
            "`moerun step_h200.toml --backend cuda --steps 3 --log step-h200.jsonl` (scripts/device-check.sh): "
            "each step's wall time and the plan's prediction, the device memory peak (the caching "
            "allocator's) beside the plan's, and what the compute backend copied between host and device "
            "(*staged*). The first step also fills the allocator's cache.\n\n"
            "| step | step s | plan s | measured / plan | tokens/s | device peak GB | plan GB | staged GB | loss |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=pathlib.Path)
    parser.add_argument("--bench", type=pathlib.Path)
    parser.add_argument("--doc", type=pathlib.Path, default=DOC, help="the page to update (docs/benchmarks.md)")
    args = parser.parse_args()
    bench = args.bench or (args.dir / "cuda-benchmarks.md" if args.dir else None)
    report = args.dir / "device-report.md" if args.dir else None
    if bench is None or not bench.is_file():
        sys.exit(f"device-results: no benchmark table ({bench})")
    text = args.doc.read_text()
    text = replace_block(text, "cuda-bench", "## CUDA kernels\n\n" + bench.read_text())
    device = bench.read_text().splitlines()[0].removeprefix("### CUDA kernels on ").strip()
    step = args.dir / "step-h200.jsonl" if args.dir else None
    if step is not None and step.is_file():
        body = "## One GPU training step\n\n" + step_table(step, device)
        staging = args.dir / "host-staging.txt"
        if staging.is_file():
            body += ("\nMoving an activation's elements between host and device on the same machine "
                     "(`moert-host-staging-bench`, pageable host memory): what the backend does (fp32 over the "
                     "link, rounded or widened by the device) against rounding on the host and moving bf16.\n\n"
                     + "".join(f"- {line}\n" for line in staging.read_text().splitlines() if line.strip()))
        text = replace_block(text, "gpu-step", body)
    if report is not None:
        if not report.is_file():
            sys.exit(f"device-results: no {report}")
        today = datetime.date.today().isoformat()
        body = (f"## GPU tests on a device\n\n`scripts/device-check.sh` on {device}, {today}: each GPU "
                "test program as ctest runs it (label `gpu`), then the kernel benchmark and the kernel "
                "test under compute-sanitizer (our kernels; cuDNN's are left out). *result* is GoogleTest's "
                "count, or the exit status.\n\n"
                + report.read_text())
        text = replace_block(text, "device-check", body)
    args.doc.write_text(text)
    print(f"updated {args.doc}")


if __name__ == "__main__":
    main()
