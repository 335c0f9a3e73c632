#!/usr/bin/env python3
"""Compares a parallel run's dumps with the one-rank run's (moert-train-driver --dump).

Each run directory holds loss.txt ("step ce aux" per line) and, per rank,
grads.rankR.bin (full gradients after step 1) and params.rankR.bin (full
parameters after the last step), in Trainer::writeTensorFile's format. The
ranks' files of a run are merged (every tensor must come from exactly one
rank) and compared tensor by tensor with the reference run:

  criterion: max_i |x_i - ref_i| <= tol * max_i |ref_i|   (tol = 1e-5)

i.e. the largest absolute error relative to the tensor's scale (its largest
reference magnitude). Losses compare the same way, each step's cross entropy
and aux loss as one-element tensors. The set of tensor names and every shape
must be the same in both runs.

Usage: compare_dumps.py REFERENCE_DIR RUN_DIR [--tol 1e-5] [--no-grads]
Exit status 0 when everything matches, 1 otherwise (mismatches are listed).
"""
import argparse
import array
import glob
import math
import os
import struct
import sys


def read_tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"MOEDUMP1\n"):
        raise ValueError(f"{path}: not a tensor dump")
    pos, out = 9, {}
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos); pos += 4
        name = data[pos:pos + n].decode(); pos += n
        (rank,) = struct.unpack_from("<I", data, pos); pos += 4
        shape = struct.unpack_from(f"<{rank}q", data, pos); pos += 8 * rank
        count = 1
        for d in shape:
            count *= d
        values = array.array("f")
        values.frombytes(data[pos:pos + 4 * count]); pos += 4 * count
        if len(values) != count:
            raise ValueError(f"{path}: {name} truncated")
        out[name] = (tuple(shape), values)
    return out


def read_run(directory, kind):
    files = sorted(glob.glob(os.path.join(directory, f"{kind}.rank*.bin")))
    if not files:
        raise ValueError(f"{directory}: no {kind}.rank*.bin")
    merged, origin = {}, {}
    for path in files:
        for name, tensor in read_tensors(path).items():
            if name in merged:
                raise ValueError(f"{kind}: {name} written by both {origin[name]} and {path}")
            merged[name], origin[name] = tensor, path
    return merged


def read_loss(directory):
    rows = {}
    with open(os.path.join(directory, "loss.txt")) as f:
        for line in f:
            step, ce, aux = line.split()
            rows[int(step)] = (float(ce), float(aux))
    return rows


def rel_error(x, ref):
    # A NaN compares false with everything, so max() would pass it over: a
    # value that is not finite on either side is a mismatch outright.
    if not all(math.isfinite(v) for v in x) or not all(math.isfinite(v) for v in ref):
        return math.inf
    scale = max((abs(v) for v in ref), default=0.0)
    err = max((abs(a - b) for a, b in zip(x, ref)), default=0.0)
    return err / scale if scale > 0 else err


def compare(ref_dir, run_dir, tol, kinds=("grads", "params")):
    problems, worst = [], 0.0
    ref_loss, run_loss = read_loss(ref_dir), read_loss(run_dir)
    if sorted(ref_loss) != sorted(run_loss):
        problems.append(f"loss steps differ: {sorted(ref_loss)} vs {sorted(run_loss)}")
    for step in sorted(set(ref_loss) & set(run_loss)):
        for i, what in enumerate(("loss", "aux")):
            e = rel_error([run_loss[step][i]], [ref_loss[step][i]])
            worst = max(worst, e)
            if e > tol:
                problems.append(f"step {step} {what}: {run_loss[step][i]!r} vs {ref_loss[step][i]!r} (rel {e:.2e})")
    for kind in kinds:
        ref, run = read_run(ref_dir, kind), read_run(run_dir, kind)
        if set(ref) != set(run):
            missing = sorted(set(ref) - set(run))[:5]
            extra = sorted(set(run) - set(ref))[:5]
            problems.append(f"{kind}: tensors differ (missing {missing}, extra {extra})")
        for name in sorted(set(ref) & set(run)):
            (rs, rv), (xs, xv) = ref[name], run[name]
            if rs != xs:
                problems.append(f"{kind} {name}: shape {xs} vs {rs}")
                continue
            e = rel_error(xv, rv)
            worst = max(worst, e)
            if e > tol:
                problems.append(f"{kind} {name}: rel max-abs error {e:.2e} > {tol:g}")
    return problems, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("run")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--no-grads", action="store_true", help="the run has no gradient dumps")
    a = ap.parse_args()
    problems, worst = compare(a.reference, a.run, a.tol, ("params",) if a.no_grads else ("grads", "params"))
    for p in problems[:40]:
        print(p)
    print(f"{'MISMATCH' if problems else 'match'}: worst relative error {worst:.2e} (tol {a.tol:g})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
