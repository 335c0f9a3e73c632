#!/usr/bin/env python3
"""Puts what scripts/device-check.sh brought back into docs/benchmarks.md.

    scripts/device-results.py DIR            # DIR: the check's $OUT, fetched
    scripts/device-results.py --bench TABLE  # bench/cuda/run.sh's table alone

DIR's cuda-benchmarks.md replaces the "CUDA kernels" section (between the
cuda-bench markers), its step-bench.md the "One GPU training step" section
(gpu-step markers) and its device-report.md the "GPU tests on a device"
section (device-check markers); a section is added at the end of the page
the first time.
"""
import argparse
import datetime
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=pathlib.Path)
    parser.add_argument("--bench", type=pathlib.Path)
    args = parser.parse_args()
    bench = args.bench or (args.dir / "cuda-benchmarks.md" if args.dir else None)
    report = args.dir / "device-report.md" if args.dir else None
    if bench is None or not bench.is_file():
        sys.exit(f"device-results: no benchmark table ({bench})")
    text = DOC.read_text()
    text = replace_block(text, "cuda-bench", "## CUDA kernels\n\n" + bench.read_text())
    step = args.dir / "step-bench.md" if args.dir else None
    if step is not None and step.is_file():
        text = replace_block(text, "gpu-step", "## One GPU training step\n\n" + step.read_text())
    if report is not None:
        if not report.is_file():
            sys.exit(f"device-results: no {report}")
        device = bench.read_text().splitlines()[0].removeprefix("### CUDA kernels on ").strip()
        today = datetime.date.today().isoformat()
        body = (f"## GPU tests on a device\n\n`scripts/device-check.sh` on {device}, {today}: each GPU "
                "test program as ctest runs it (label `gpu`), then the kernel benchmark and the kernel "
                "test under compute-sanitizer (our kernels; cuDNN's are left out). *result* is GoogleTest's "
                "count, or the exit status.\n\n"
                + report.read_text())
        text = replace_block(text, "device-check", body)
    DOC.write_text(text)
    print(f"updated {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
