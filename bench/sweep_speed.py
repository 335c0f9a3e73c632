#!/usr/bin/env python3
"""Benchmark of `moec sweep`: points per second on one core.

Runs `moec sweep bench/inputs/sweep_9600.moe` (9,600 points: Sema, every rule,
the pipeline schedule, memory and step-time models per point) RUNS times and
rewrites the "moec sweep" section of docs/benchmarks.md. Target (issue 4): at
least 10,000 points per second on one core.
"""
import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- BEGIN sweep_speed -->", "<!-- END sweep_speed -->"
TARGET = 10000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--moec", default=str(ROOT / "build/tools/moec/moec"))
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    recipe = ROOT / "bench/inputs/sweep_9600.moe"
    points = 9600
    walls, cpus = [], []
    for _ in range(args.runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(["taskset", "-c", "0", args.moec, "sweep", str(recipe)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        if proc.returncode != 0:
            sys.exit(f"sweep_speed: moec sweep exited {proc.returncode}: {proc.stderr.decode()[:500]}")
    ranked = sum(1 for line in proc.stdout.decode().splitlines() if line[:4].strip().isdigit())
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    rate_wall, rate_cpu = points / wall, points / cpu
    cpu_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    text = "\n".join([
        BEGIN, "## moec sweep", "",
        f"`moec sweep bench/inputs/sweep_9600.moe` pinned to one core (`taskset -c 0`), {args.runs} runs, median: "
        "each of the 9,600 points is lowered, checked by every rule, and planned (pipeline schedule, memory, "
        "step time); written by `bench/sweep_speed.py`.", "",
        "| points | feasible (ranked) | median wall s | median CPU s | points/s (wall) | points/s (CPU) | target | result |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        f"| {points} | {ranked} | {wall:.3f} | {cpu:.3f} | {rate_wall:,.0f} | {rate_cpu:,.0f} | >= 10,000/s | "
        f"{'**pass**' if rate_wall >= TARGET else '**FAIL**'} |", "",
        f"Machine: {cpu_name}, {os.cpu_count()} cores, {platform.platform()}; "
        f"load average at the end {' / '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        END, ""])
    doc_path = ROOT / "docs/benchmarks.md"
    doc = doc_path.read_text() if doc_path.exists() else "# Benchmarks\n"
    if BEGIN in doc:
        doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) + 1:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    doc_path.write_text(doc)
    print(f"{points} points: median {wall:.3f} s wall, {cpu:.3f} s CPU -> {rate_wall:,.0f} points/s")


if __name__ == "__main__":
    main()
