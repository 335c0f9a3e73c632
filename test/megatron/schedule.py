#!/usr/bin/env python3
"""The learning rate moerun trains with, step by step, against Megatron-Core 0.16.1's own
OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py).

For each schedule in SCHEDULES (constant, linear and cosine decay, with and without warm-up,
decay_steps set or left to the run's length) this writes a tiny .moe recipe with that
`optimizer { ... }`, plans it with `moec plan`, trains it with `mpirun -np 2 moerun`, and
compares the `lr` of every step of moerun's JSON log with what Megatron's scheduler gives
that step: Megatron builds the scheduler at num_steps = 0 and advances it after each optimizer
step, so step K runs at get_lr(num_steps = K - 1). Exit 0 when every step agrees to 1e-12.

The recipes set no other optimizer field, so moerun's start-up line (what its AdamW applies:
weight decay, betas, eps, clipping) must also show Megatron-Core's OptimizerConfig defaults.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/schedule.py --moec build/tools/moec/moec
       --moerun build/tools/moerun/moerun
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)

STEPS = 12
# (lr, min_lr, warmup_steps, decay, decay_steps or None for the run's length)
SCHEDULES = [
    (0.01, 0.0, 0, "constant", None),
    (0.01, 0.0, 4, "constant", None),
    (0.02, 0.002, 3, "linear", 9),
    (0.02, 0.002, 3, "cosine", 9),
    (3e-4, 3e-5, 0, "cosine", None),
    (1e-3, 1e-4, 2, "linear", None),
]


class _Optimizer:
    """What the scheduler touches of a MegatronOptimizer: its parameter groups."""

    def __init__(self):
        self.param_groups = [{}]


def megatron_rates(lr, min_lr, warmup, decay, decay_steps):
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    opt = _Optimizer()
    s = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=lr, min_lr=min_lr, lr_warmup_steps=warmup,
                                lr_decay_steps=decay_steps, lr_decay_style=decay, start_wd=0.0, end_wd=0.0,
                                wd_incr_steps=decay_steps, wd_incr_style="constant")
    rates = []
    for _ in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        s.step(increment=1)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moec", required=True)
    ap.add_argument("--moerun", required=True)
    a = ap.parse_args()
    mpirun = shutil.which("mpirun")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # Open MPI's own allocations outlive MPI_Finalize; under the sanitizer build they are not moerun's leaks
    # (the runtime's ctest entries set the same).
    env["ASAN_OPTIONS"] = "detect_leaks=0"
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (lr, min_lr, warmup, decay, decay_steps) in enumerate(SCHEDULES):
            fields = [f"lr = {lr!r}", f"min_lr = {min_lr!r}", f"warmup_steps = {warmup}", f"decay = {decay}"]
            if decay_steps:
                fields.append(f"decay_steps = {decay_steps}")
            name = f"s{i}"
            moe, plan, log = (os.path.join(tmp, name + x) for x in (".moe", ".toml", ".jsonl"))
            with open(moe, "w") as fh:
                fh.write(f"recipe {name} {{\n  model = tiny_moe; cluster {{ gpu = cpu; nodes = 1 }}\n"
                         f"  seq_len = 64; batch {{ micro = 1; global = 2 }}\n"
                         f"  optimizer {{ {'; '.join(fields)} }}\n}}\n")
            what = "; ".join(fields)
            p = subprocess.run([a.moec, "plan", moe, "-o", plan], capture_output=True, text=True)
            if p.returncode != 0:
                failed += 1
                print(f"{what}: FAIL moec plan: {p.stderr.strip()}")
                continue
            r = subprocess.run([mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "-np",
                                "2", a.moerun, plan, "--steps", str(STEPS), "--log", log],
                               capture_output=True, text=True, env=env, timeout=300)
            if r.returncode != 0:
                failed += 1
                print(f"{what}: FAIL moerun: {r.stderr.strip()[-400:]}")
                continue
            m = re.search(r"weight decay (\S+) .*betas (\S+)/(\S+), eps (\S+), gradient clipping (off|at norm (\S+))",
                          r.stdout)
            if i == 0:
                from megatron.core.optimizer import OptimizerConfig
                c = OptimizerConfig()
                want_adam = (c.weight_decay, c.adam_beta1, c.adam_beta2, c.adam_eps, c.clip_grad)
                got_adam = m and tuple(float(x) for x in m.group(1, 2, 3, 4, 6))
                if got_adam != want_adam:
                    failed += 1
                    print(f"AdamW defaults: FAIL moerun applies {got_adam}, Megatron-Core's OptimizerConfig has "
                          f"{want_adam} (weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad)")
                else:
                    print(f"AdamW defaults: moerun applies Megatron-Core's OptimizerConfig defaults {want_adam}")
            got = [json.loads(line)["lr"] for line in open(log)]
            want = megatron_rates(lr, min_lr, warmup, decay, decay_steps or STEPS)
            bad = [(k + 1, g, w) for k, (g, w) in enumerate(zip(got, want)) if abs(g - w) > 1e-12 * max(abs(w), 1e-30)]
            if len(got) != STEPS or bad:
                failed += 1
                print(f"{what}: FAIL steps (step, moerun, megatron): {bad[:4]} ({len(got)} steps logged)")
            else:
                print(f"{what}: {STEPS} steps agree ({', '.join(f'{x:.4g}' for x in got[:6])}, ...)")
    print(f"schedule: {len(SCHEDULES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
