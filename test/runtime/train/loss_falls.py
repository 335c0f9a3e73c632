#!/usr/bin/env python3
"""Training learns: the loss of moerun on a small corpus falls, and the step
log holds what it promises.

Builds a corpus at test time (moerun-mkdata: an order-2 Markov chain over 16
ids, read by a model of vocabulary 256, so even learning which ids occur takes
the loss from ln 256 ~ 5.5 towards ln 15 ~ 2.7), plans tiny_moe on 4 ranks
(tp 2, ep 2, dp 2) with data.source = real(...), runs
`mpirun -np 4 moerun plan --steps 25 --lr 3e-3 --log FILE` and checks:
  * the log has one JSON object per step, steps 1..25, each with step, loss,
    step_time_s, tokens_per_s, peak_bytes, compute_s, comm_s, aux_loss, gemm_s,
    cpu_s, all finite and positive (comm_s may be 0), compute_s + comm_s <=
    step_time_s and gemm_s <= compute_s;
  * comm_s split by dimension: tp_comm_s + cp_comm_s + ep_comm_s + dp_comm_s
    + pp_comm_s = comm_s, cp and pp (of size one here) 0, tp, ep and dp
    positive;
  * tokens_per_s = global_batch * seq_len / step_time_s;
  * standard output has the human line of every step, the note that the CPU
    computes in fp32 and the peak bytes of every rank;
  * the mean loss of the last 5 steps is below the first step's by more than 1.

Usage: loss_falls.py --moec MOEC --moerun MOERUN --mkdata MKDATA
                     --mpirun MPIRUN --work DIR
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

STEPS = 25
SEQ_LEN, GLOBAL = 32, 16


def main():
    ap = argparse.ArgumentParser()
    for a in ("--moec", "--moerun", "--mkdata", "--mpirun", "--work"):
        ap.add_argument(a, required=True)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    prefix = os.path.join(a.work, "corpus")
    subprocess.run([a.mkdata, "--out", prefix, "--vocab", "16", "--tokens", "20000",
                    "--seed", "7"], check=True, env=env)
    recipe = os.path.join(a.work, "learn.moe")
    with open(recipe, "w") as f:
        f.write("recipe learn {\n  model = tiny_moe\n  cluster { gpu = cpu; gpus = 4 }\n"
                f"  seq_len = {SEQ_LEN}\n  batch {{ micro = 2; global = {GLOBAL} }}\n"
                "  parallel { tp = 2; ep = 2 }\n"
                f"  data {{ source = real(\"{prefix}\") }}\n  precision = bf16\n}}\n")
    plan = os.path.join(a.work, "plan.toml")
    subprocess.run([a.moec, "plan", recipe, "-o", plan], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    log = os.path.join(a.work, "log.jsonl")
    p = subprocess.run([a.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
                        "-np", "4", a.moerun, plan, "--steps", str(STEPS), "--lr", "3e-3",
                        "--log", log], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    print(p.stdout)
    errors = []
    if p.returncode != 0:
        errors.append(f"moerun exited {p.returncode}")
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    if [r.get("step") for r in rows] != list(range(1, STEPS + 1)):
        errors.append(f"log steps are {[r.get('step') for r in rows]}")
    for r in rows:
        for k in ("loss", "aux_loss", "step_time_s", "tokens_per_s", "peak_bytes", "compute_s", "comm_s",
                  "gemm_s", "cpu_s"):
            v = r.get(k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and k != "comm_s"):
                errors.append(f"step {r.get('step')}: {k} = {v!r}")
        if not errors and r["compute_s"] + r["comm_s"] > r["step_time_s"] * 1.001:
            errors.append(f"step {r['step']}: compute + comm exceeds the step time")
        if not errors and r["gemm_s"] > r["compute_s"] * 1.001:
            errors.append(f"step {r['step']}: gemm_s exceeds compute_s")
        parts = {d: r.get(f"{d}_comm_s") for d in ("tp", "cp", "ep", "dp", "pp")}
        if not all(isinstance(v, (int, float)) and v >= 0 for v in parts.values()):
            errors.append(f"step {r.get('step')}: communication by dimension {parts}")
        elif abs(sum(parts.values()) - r["comm_s"]) > 1e-5 * max(r["comm_s"], 1e-3):
            errors.append(f"step {r['step']}: the dimensions' {sum(parts.values())} s are not comm_s {r['comm_s']}")
        elif parts["cp"] != 0 or parts["pp"] != 0 or min(parts["tp"], parts["ep"], parts["dp"]) <= 0:
            errors.append(f"step {r['step']}: communication by dimension {parts} for tp 2 ep 2 dp 2")
        if not errors and abs(r["tokens_per_s"] * r["step_time_s"] - GLOBAL * SEQ_LEN) > 1e-3 * GLOBAL * SEQ_LEN:
            errors.append(f"step {r['step']}: tokens_per_s is not {GLOBAL * SEQ_LEN} / step_time_s")
        if f"step {r.get('step')}/{STEPS}" not in p.stdout:
            errors.append(f"no human line for step {r.get('step')}")
    if "moerun: peak bytes per rank" not in p.stdout or " 3: " not in p.stdout.split("peak bytes per rank")[-1]:
        errors.append("no per-rank peak memory line for all 4 ranks")
    if "computes in fp32" not in p.stdout:
        errors.append("no note that the CPU backend computes in fp32")
    if len(rows) == STEPS:
        first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
        print(f"loss: step 1 {first:.4f}, mean of the last 5 steps {last:.4f}")
        if not last < first - 1.0:
            errors.append(f"loss did not fall: {first:.4f} -> {last:.4f}")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
