#!/usr/bin/env python3
"""Exchanges between ranks add no host-device traffic on the CUDA backend.

Where a group has a device counterpart (the host-staged communicator here, NCCL
under moerun), what tensor parallelism's sequence gathers and reduce-scatters,
context parallelism's exchanges (the ring, all-gather and all-to-all), the
expert-parallel all-to-all and the gradient sums move, what the expert
tensor-parallel group gathers and sums, and what a pipeline stage sends the
next, goes between device buffers. So a rank of a tp 2, cp 2 (by the ring, by
all-gather or by all-to-all), ep 2, tp 2 x etp 2, dp 2 or pp 2 (and
interleaved, and pp 4) layout of the heads-of-32 model (whose attention runs on
the backend's kernels) stages no more bytes a step than the one-rank run of the
same model, whose rank computes twice the tokens, experts or layers. (Through
host memory, pp 2 stages 0.31 MiB a step, tp 2 x etp 2 2.08 and cp 2 by
all-to-all 8.31, against the one rank's 0.22.) One thing a layout adds is not
an exchange: under etp the gathered expert rows' two orders (index arrays, one
pair per MoE layer and micro batch) go up, as the one rank's permutation no
longer does (it is made on the device); they are counted out of the comparison,
and they must be uploads the host only queues (none of rank 0's waiting copies
is the permutation's). The control: the same all-to-all
of tiny_moe, whose heads the attention kernels do not take, so that attention
and its exchange are host code, stages more than tiny_moe's one rank does, so
the measure sees an exchange through the host.

Runs the trainer's test driver built on the CPU emulation of CUDA
(moert-train-driver-emu) for two steps and reads the second step's `staged`
figure (the most any rank copied).

usage: exchange_traffic.py --moec MOEC --driver MOERT_TRAIN_DRIVER_EMU
                           [--mpirun MPIRUN] --work DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_matrix  # noqa: E402

# name: (ranks, parallel settings); every one the heads-of-32 model.
ONE_RANK = ("hd32_one_rank", 1, "tp = 1")
ON_DEVICE = [("hd32_tp2", 2, "tp = 2"), ("hd32_cp2", 2, "cp = 2"),
             ("hd32_cp2_allgather", 2, "cp = 2; cp_comm = allgather"),
             ("hd32_cp2_a2a", 2, "cp = 2; cp_comm = a2a"), ("hd32_ep2", 2, "ep = 2"),
             ("hd32_tp2_etp2", 2, "tp = 2; etp = 2"),
             ("hd32_dp2", 2, "tp = 1"), ("hd32_pp2", 2, "pp = 2"), ("hd32_pp2_vpp2", 2, "pp = 2; vpp = 2"),
             ("hd32_pp4", 4, "pp = 4")]
# tiny_moe's one rank, and its all-to-all through host memory.
CONTROL_ONE_RANK = ("one_rank", 1, "tp = 1")
THROUGH_HOST = ("cp2_a2a", 2, "cp = 2; cp_comm = a2a")
STAGED = re.compile(r"^  device peak [0-9.]+ MiB, staged ([0-9.]+) MiB")
BY_OPERATION = re.compile(r"^  rank 0 staged by operation:(.*)$")
WAITS = re.compile(r"^  rank 0 waits by operation:(.*)$")


def staged(args, name, ranks, parallel):
    d = os.path.join(args.work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    src, plan = os.path.join(d, f"{name}.moe"), os.path.join(d, "plan.toml")
    with open(src, "w") as f:
        f.write(train_matrix.recipe(name, ranks, parallel, None, force_balance=True))
    p = subprocess.run([args.moec, "plan", src, "-o", plan, "--quiet"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"{name}: moec plan failed (exit {p.returncode}):\n{p.stdout}")
    p = subprocess.run([args.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
                        "-np", str(ranks), args.driver, plan, "--steps", "2", "--backend", "cuda"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{name}: the run failed (exit {p.returncode}):\n{p.stdout[-3000:]}")
    lines = p.stdout.splitlines()
    figures = [float(m.group(1)) for m in map(STAGED.match, lines) if m]
    by_operation = [m.group(1) for m in map(BY_OPERATION.match, lines) if m]
    waits = [m.group(1) for m in map(WAITS.match, lines) if m]
    if len(figures) != 2 or len(by_operation) != 2 or len(waits) != 2:
        sys.exit(f"{name}: expected two steps' device figures, got:\n{p.stdout[-3000:]}")
    # rank 0's MiB to the device by operation, and the operations it waited for
    up = {op: float(mib.split("/")[0]) for op, mib in
          (part.strip().rsplit(" ", 1) for part in by_operation[-1].split(";") if part.strip())}
    waited = {part.strip().rsplit(" ", 1)[0] for part in waits[-1].split(";") if part.strip()}
    return figures[-1], up, waited


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moec", required=True)
    ap.add_argument("--driver", required=True, help="moert-train-driver-emu")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    one, one_up, _ = staged(args, *ONE_RANK)
    print(f"{ONE_RANK[0]}: {one:.2f} MiB staged a step")
    if one_up.get("permute", 0) != 0:
        sys.exit(f"{ONE_RANK[0]}: the permutation's indices went up ({one_up['permute']} MiB)")
    failed = []
    for layout in ON_DEVICE:
        mib, up, waited = staged(args, *layout)
        rows = up.get("permute", 0) if "etp" in layout[2] else 0
        ok = mib - rows <= one and "permute" not in waited
        print(f"{layout[0]}: {mib:.2f} MiB staged a step" + (f" ({rows:.3f} of them the etp rows' orders, queued)"
                                                              if rows else "") + ", " +
              ("no more than one rank" if ok else "MORE than one rank"))
        if not ok:
            failed.append(layout[0])
    control_one, _, _ = staged(args, *CONTROL_ONE_RANK)
    control, _, _ = staged(args, *THROUGH_HOST)
    seen = control > control_one
    print(f"{THROUGH_HOST[0]} (control, tiny_moe exchanged through host memory): {control:.2f} MiB staged a step "
          f"against its one rank's {control_one:.2f}, " +
          ("more" if seen else "NOT more: the measure misses host exchanges"))
    if not seen:
        failed.append(THROUGH_HOST[0])
    if failed:
        sys.exit("exchange_traffic: " + ", ".join(failed))


if __name__ == "__main__":
    main()
