#!/usr/bin/env python3
"""The runtime's router (moert::Router, runtime/model/Router.cpp) against Megatron-Core 0.16.1's
own topk_routing_with_score_function (megatron/core/transformer/moe/moe_utils.py), the function
its TopKRouter calls, on the same logits.

For every router form the runtime implements (softmax after the top-k, Megatron's default;
softmax before it, moe_router_pre_softmax; sigmoid, normalised over the chosen when top_k > 1;
group-limited top-k, moe_router_num_groups / moe_router_group_topk) and several expert counts
and top-k, this draws seeded float32 logits, routes them with `moert-route` and with Megatron,
and compares, token by token, the set of chosen experts (Megatron's routing_map) and each
chosen expert's weight (routing_probs). Megatron computes in float32, the runtime sums in
double: weights agree to 2e-6 relative. Logits are drawn from a continuous distribution, so a
tie, which the two may break differently, has probability zero; a token whose chosen sets
differ is reported with its logits. Exit 0 when every token of every case agrees.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/router.py --tool build/test/runtime/model/moert-route
"""

import argparse
import itertools
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)

TOKENS = 256
RTOL = 2e-6

# (experts, top_k, groups, group_top_k): groups = 1 is plain top-k.
SHAPES = [
    (8, 1, 1, 1), (8, 2, 1, 1), (16, 4, 1, 1), (64, 8, 1, 1), (128, 8, 1, 1),
    (16, 4, 4, 2), (64, 8, 8, 4), (64, 6, 8, 3), (256, 8, 8, 4), (32, 2, 4, 1),
]
# (score function, pre_softmax)
FORMS = [("softmax", False), ("softmax", True), ("sigmoid", False)]


def megatron_routing(logits, top_k, groups, group_top_k, score, pre_softmax):
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function
    probs, routing_map = topk_routing_with_score_function(
        logits, top_k, use_pre_softmax=pre_softmax,
        num_groups=groups if groups > 1 else None, group_topk=group_top_k if groups > 1 else None,
        score_function=score)
    return probs, routing_map


def runtime_routing(tool, logits, top_k, groups, group_top_k, score, pre_softmax):
    experts = logits.shape[1]
    lines = [f"{experts} {top_k} {int(score == 'sigmoid')} {int(pre_softmax)} {groups} {group_top_k} "
             f"{logits.shape[0]}"]
    lines += [" ".join(f"{float(x):.9g}" for x in row) for row in logits.tolist()]
    p = subprocess.run([tool], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"moert-route failed (exit {p.returncode}): {p.stderr}")
    out = []
    for line in p.stdout.splitlines():
        fields = line.split()
        out.append(([int(x) for x in fields[:top_k]], [float(x) for x in fields[top_k:]]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the moert-route executable")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    import torch
    gen = torch.Generator().manual_seed(args.seed)
    cases = failures = 0
    for (experts, top_k, groups, group_top_k), (score, pre_softmax) in itertools.product(SHAPES, FORMS):
        if score == "sigmoid" and pre_softmax:
            continue
        # Megatron refuses a softmax after the top-k at top_k = 1 (every weight would be 1).
        if score == "softmax" and not pre_softmax and top_k == 1:
            continue
        cases += 1
        logits = torch.randn(TOKENS, experts, generator=gen, dtype=torch.float32) * 2.0
        probs, routing_map = megatron_routing(logits, top_k, groups, group_top_k, score, pre_softmax)
        ours = runtime_routing(args.tool, logits, top_k, groups, group_top_k, score, pre_softmax)
        name = (f"experts {experts} top_k {top_k} groups {groups}/{group_top_k} {score}"
                f"{' pre_softmax' if pre_softmax else ''}")
        bad = 0
        for t, (idx, weights) in enumerate(ours):
            chosen = sorted(torch.nonzero(routing_map[t]).flatten().tolist())
            if sorted(idx) != chosen:
                bad += 1
                if bad <= 3:
                    print(f"  {name}: token {t}: runtime chose {sorted(idx)}, Megatron {chosen}")
                continue
            for e, w in zip(idx, weights):
                ref = float(probs[t, e])
                if abs(w - ref) > RTOL * max(abs(ref), 1e-30):
                    bad += 1
                    if bad <= 3:
                        print(f"  {name}: token {t} expert {e}: runtime weight {w!r}, Megatron {ref!r}")
                    break
        failures += bad > 0
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {name}: {TOKENS - bad}/{TOKENS} tokens agree")
    print(f"{cases - failures} of {cases} router forms agree with Megatron-Core's "
          f"topk_routing_with_score_function")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
