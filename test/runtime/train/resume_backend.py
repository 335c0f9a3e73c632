#!/usr/bin/env python3
"""A checkpoint taken on the CUDA backend resumes bit for bit.

On that backend the parameters no group sums, their gradients and Adam's
moments live on the device from step to step (ComputeBackend::makeResident),
so a checkpoint must bring them back to the host first and a resumed run must
put them back. For each layout: one run of STEPS steps that saves after step
SAVE_AT, and a second run that loads that checkpoint and trains the steps
after it; the resumed steps' losses must equal the first run's bit for bit
(the step log's %.9g), and differ from step to step (it trained). Layouts:
one rank (everything resident) and ep 2 with the distributed optimizer (the
experts resident, alone in their edp groups; the dense parameters summed over
dp-cp on the host). On one rank, the uninterrupted run's second and third
steps (before and after the save, which reads the values and moments back and
leaves them resident) must also move none of them: their step logs charge
nothing to "resident" (their first upload) or "optimizer" (the norm's one
figure rounds to 0.000 MiB) and have no "outermost hold" (the parameters a
step holds when they are not resident).

usage: resume_backend.py --moec MOEC --driver DRIVER --mpirun MPIRUN --work DIR
                         [--backend cuda]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS, SAVE_AT = 4, 2
LAYOUTS = [("one", 1, "tp = 1", []), ("ep2_distributed", 2, "ep = 2", ["--distributed-optimizer"])]


def recipe(name, ranks, parallel):
    return (f"recipe {name} {{\n  model = tiny_moe\n  cluster {{ gpu = cpu; gpus = {ranks} }}\n"
            f"  seq_len = 32\n  batch {{ micro = 1; global = 8 }}\n  parallel {{ {parallel} }}\n}}\n")


def losses(path):
    with open(path) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moec", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--backend", default="cuda")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    # Open MPI's allocations outlive MPI_Finalize (LeakSanitizer in the sanitizer build).
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1", ASAN_OPTIONS="detect_leaks=0")
    failed = False
    for name, ranks, parallel, extra in LAYOUTS:
        plan = harness.plan(a, name, recipe(name, ranks, parallel))
        ckpt = os.path.join(a.work, name + ".ckpt")

        def run(log, *args):
            cmd = [a.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
                   "-np", str(ranks), a.driver, plan, "--steps", str(STEPS), "--backend", a.backend,
                   "--log", log, *extra, *args]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                sys.exit(f"{name}: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            return losses(log), p.stdout

        whole, out = run(os.path.join(a.work, name + ".whole.jsonl"), "--save", ckpt, "--save-at", str(SAVE_AT))
        for step in (2, 3) if ranks == 1 else ():
            copies = re.search(rf"^step {step}/.*\n.*\n  rank 0 staged by operation:(.*)$", out, re.M)
            moved = copies.group(1) if copies else ""
            still = "resident 0.000/0.000;" in moved and "optimizer 0.000/0.000;" in moved and \
                "outermost hold" not in moved
            print(f"{'ok' if still else 'FAIL'} {name}: step {step} moves no resident array:{moved}")
            failed |= not still
        resumed, _ = run(os.path.join(a.work, name + ".resumed.jsonl"), "--load", ckpt)
        after = list(range(SAVE_AT + 1, STEPS + 1))
        ok = sorted(resumed) == after and all(resumed[s] == whole[s] for s in after) and \
            len({whole[s] for s in whole}) == STEPS
        print(f"{'ok' if ok else 'FAIL'} {name}: steps {after} uninterrupted {[whole[s] for s in after]}, "
              f"resumed {[resumed.get(s) for s in after]}")
        failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
