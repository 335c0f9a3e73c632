#!/usr/bin/env python3
"""Evaluation on held-out samples: data.split, data.eval_interval, data.eval_iters under mpirun.

  layouts    mock data, an evaluation every 2 steps over 2 global batches: the validation
             losses of one rank and of PP2 x EP2 (4 ranks) and TP2 x DP2 agree within 1e-5
             relative (fp32 sums in another order), they appear on steps 2 and 4 only, and
             the training losses are those of the same run without evaluation, bit for bit
             (evaluation changes no parameter, moment or data position);
  split      (with --mkdata) a corpus of real sequences split [8, 2]: the start-up note gives
             each part's sequences (Megatron's rounding of the running weights) and the
             validation loss is logged; split [5, 5] trains on the same first sequences
             (equal losses) and evaluates on another part (another validation loss);
  no-valid   a split whose validation weight is 0 with eval_interval set: every rank exits
             5 before the first step, saying why.

usage: evaluate.py --moec MOEC --moerun MOERUN --mpirun MPIRUN --work DIR [--mkdata MKDATA]
"""
import os
import re
import subprocess
import sys

import harness
from harness import check, loss_texts, plan, records

def recipe(name, ranks, parallel, data):
    return (f"recipe {name} {{\n  model = tiny_moe\n  cluster {{ gpu = cpu; gpus = {ranks} }}\n"
            f"  seq_len = 32\n  batch {{ micro = 1; global = 8 }}\n  parallel {{ {parallel} }}\n"
            f"  data {{ {data} }}\n}}\n")


def moerun(a, ranks, plan_path, steps, log):
    return harness.moerun(a, ranks, plan_path, ["--steps", str(steps), "--log", log])


def main():
    a = harness.args()

    # layouts
    evaluating = "source = mock; eval_interval = 2; eval_iters = 2"
    valid = {}
    for name, ranks, parallel in [("one", 1, "tp = 1"), ("pp2_ep2", 4, "pp = 2; ep = 2"),
                                  ("tp2_dp2", 4, "tp = 2")]:
        log = os.path.join(a.work, name + ".jsonl")
        rc, out = moerun(a, ranks, plan(a, name, recipe(name, ranks, parallel, evaluating)), 5, log)
        check(rc == 0, f"{name}: trains and evaluates (exit {rc})", out)
        if rc != 0:
            continue
        recs = records(log)
        steps = [r["step"] for r in recs if "valid_loss" in r]
        check(steps == [2, 4], f"{name}: evaluated after steps {steps} (eval_interval = 2 of 5 steps)", out)
        check("validation loss" in out, f"{name}: the step line says the validation loss", out)
        valid[name] = [r["valid_loss"] for r in recs if "valid_loss" in r]
    if "one" in valid:
        for name in ("pp2_ep2", "tp2_dp2"):
            if name in valid:
                worst = max(abs(x - y) / abs(y) for x, y in zip(valid[name], valid["one"]))
                check(worst <= 1e-5, f"{name}: validation losses within 1e-5 of one rank's (worst {worst:.2e})")
        # The held-out loss falls as training goes on (the mock stream is learnable).
        check(valid["one"][1] < valid["one"][0], f"one: validation loss falls ({valid['one']})")
    log = os.path.join(a.work, "plain.jsonl")
    rc, out = moerun(a, 4, plan(a, "plain", recipe("plain", 4, "pp = 2; ep = 2", "source = mock")), 5, log)
    if rc == 0 and os.path.exists(os.path.join(a.work, "pp2_ep2.jsonl")):
        check(loss_texts(log) == loss_texts(os.path.join(a.work, "pp2_ep2.jsonl")),
              "pp2_ep2: training losses with evaluation equal those without, bit for bit")
    else:
        check(False, "plain: trains", out)

    # split
    if a.mkdata:
        prefix = os.path.join(a.work, "corpus")
        subprocess.run([a.mkdata, "--out", prefix, "--vocab", "256", "--tokens", "20000", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        split_data = f'source = real("{prefix}"); split = [8, 2]; eval_interval = 2; eval_iters = 1'
        log = os.path.join(a.work, "split.jsonl")
        rc, out = moerun(a, 2, plan(a, "split", recipe("split", 2, "pp = 2", split_data)), 2, log)
        check(rc == 0, f"split: trains on the training part (exit {rc})", out)
        m = re.search(r"data\.split: of the (\d+) sequences, \[0, (\d+)\) train, \[(\d+), (\d+)\) validate", out)
        check(bool(m), "split: the start-up note gives each part", out)
        if m:
            s, train_end, valid_begin, valid_end = map(int, m.groups())
            # Megatron: round(0.8 * S) and round(1.0 * S), half to even as Python rounds.
            check((train_end, valid_begin, valid_end) == (round(0.8 * s), round(0.8 * s), s),
                  f"split: parts [0, {train_end}) and [{valid_begin}, {valid_end}) of {s} as Megatron rounds")
        if rc == 0:
            check("valid_loss" in records(log)[-1], "split: the validation loss is logged")
            # Another boundary: training starts on the same first sequences (equal losses), the
            # validation part moves (another held-out loss).
            other = os.path.join(a.work, "split55.jsonl")
            rc2, out2 = moerun(a, 2, plan(a, "split55", recipe("split55", 2, "pp = 2",
                                                                split_data.replace("[8, 2]", "[5, 5]"))), 2, other)
            check(rc2 == 0 and loss_texts(other) == loss_texts(log),
                  "split: [5, 5] trains on the same first sequences as [8, 2]", out2)
            check(rc2 == 0 and records(other)[-1].get("valid_loss") != records(log)[-1].get("valid_loss"),
                  "split: [5, 5] evaluates on another part than [8, 2]", out2)

    # no-valid
    none = plan(a, "none", recipe("none", 2, "pp = 2", f'source = real("{os.path.join(a.work, "corpus")}"); '
                                   f'split = [1, 0, 1]; eval_interval = 1') if a.mkdata else
                recipe("none", 2, "pp = 2", "source = mock"))
    if a.mkdata:
        rc, out = moerun(a, 2, none, 1, os.path.join(a.work, "none.jsonl"))
        check(rc == 5 and "data.eval_interval: data.split gives the validation part no sequence; give it a weight" in out,
              f"no-valid: refused before the first step (exit {rc})", out)
        check("step 1/" not in out, "no-valid: no step ran", out)

    return harness.finish("evaluate")


if __name__ == "__main__":
    sys.exit(main())
