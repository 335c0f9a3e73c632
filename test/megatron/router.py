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
differ is reported with its logits.

The sigmoid router's expert bias (moe_router_enable_expert_bias) is checked over ROUNDS steps:
each round routes the same logits with the current bias (Megatron's expert_bias argument: the
choice uses score + bias, the weights the score), then updates it from the round's routed tokens
with Megatron's own get_updated_expert_bias (its all-reduce over a real one-process gloo group of
parallel_state) and the runtime's Router::updateBias; the biases must agree bit for bit, and the
routing of every round as above. The update rate is 0.05 rather than Megatron's 1e-3 default so
that the bias changes many tokens' experts within a few rounds. Exit 0 when every token of every
case agrees.

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
import torch  # noqa: E402

TOKENS = 256
RTOL = 2e-6
ROUNDS = 6
BIAS_RATE = 0.05

# (experts, top_k, groups, group_top_k): groups = 1 is plain top-k.
SHAPES = [
    (8, 1, 1, 1), (8, 2, 1, 1), (16, 4, 1, 1), (64, 8, 1, 1), (128, 8, 1, 1),
    (16, 4, 4, 2), (64, 8, 8, 4), (64, 6, 8, 3), (256, 8, 8, 4), (32, 2, 4, 1),
]
# (score function, pre_softmax, top-k scaling factor or None): DeepSeek-V3 scales its sigmoid
# weights by 2.5 (moe_router_topk_scaling_factor).
FORMS = [("softmax", False, None), ("softmax", True, None), ("sigmoid", False, None), ("sigmoid", False, 2.5),
         ("softmax", True, 16.0)]


def megatron_routing(logits, top_k, groups, group_top_k, score, pre_softmax, bias=None, scaling=None):
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function
    probs, routing_map = topk_routing_with_score_function(
        logits, top_k, use_pre_softmax=pre_softmax,
        num_groups=groups if groups > 1 else None, group_topk=group_top_k if groups > 1 else None,
        scaling_factor=scaling, score_function=score, expert_bias=bias)
    return probs, routing_map


def runtime_routing(tool, logits, top_k, groups, group_top_k, score, pre_softmax, bias=None, rounds=0, scaling=None):
    """The runtime's routing of each round and, with a bias, the bias after each round."""
    experts = logits.shape[1]
    lines = [f"{experts} {top_k} {int(score == 'sigmoid')} {int(pre_softmax)} {groups} {group_top_k} "
             f"{logits.shape[0]} {rounds} {BIAS_RATE!r} {scaling or 1.0!r}"]
    lines += [" ".join(f"{float(x):.9g}" for x in row) for row in logits.tolist()]
    if rounds:
        lines.append(" ".join(f"{float(x):.9g}" for x in bias.tolist()))
    p = subprocess.run([tool], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"moert-route failed (exit {p.returncode}): {p.stderr}")
    routings, biases, current = [], [], []
    for line in p.stdout.splitlines():
        fields = line.split()
        if fields[0] == "bias":
            biases.append([float(x) for x in fields[1:]])
            routings.append(current)
            current = []
            continue
        current.append(([int(x) for x in fields[:top_k]], [float(x) for x in fields[top_k:]]))
    if not rounds:
        routings.append(current)
    return routings, biases


def compare(name, ours, probs, routing_map):
    """Mismatching tokens of one routing; prints the first three."""
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
    return bad


def init_parallel_state():
    """A real one-process gloo group, so get_updated_expert_bias's all-reduce runs as written."""
    import socket
    import torch.distributed as dist
    from megatron.core import parallel_state
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the moert-route executable")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    cases = failures = 0
    for (experts, top_k, groups, group_top_k), (score, pre_softmax, scaling) in itertools.product(SHAPES, FORMS):
        if score == "sigmoid" and pre_softmax:
            continue
        # Megatron refuses a softmax after the top-k at top_k = 1 (every weight would be 1).
        if score == "softmax" and not pre_softmax and top_k == 1:
            continue
        cases += 1
        logits = torch.randn(TOKENS, experts, generator=gen, dtype=torch.float32) * 2.0
        probs, routing_map = megatron_routing(logits, top_k, groups, group_top_k, score, pre_softmax,
                                              scaling=scaling)
        ours = runtime_routing(args.tool, logits, top_k, groups, group_top_k, score, pre_softmax,
                               scaling=scaling)[0][0]
        name = (f"experts {experts} top_k {top_k} groups {groups}/{group_top_k} {score}"
                f"{' pre_softmax' if pre_softmax else ''}{f' scaling {scaling}' if scaling else ''}")
        bad = compare(name, ours, probs, routing_map)
        failures += bad > 0
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {name}: {TOKENS - bad}/{TOKENS} tokens agree")

    from megatron.core.transformer.moe.moe_utils import get_updated_expert_bias
    init_parallel_state()
    for experts, top_k, groups, group_top_k in SHAPES:
        cases += 1
        logits = torch.randn(TOKENS, experts, generator=gen, dtype=torch.float32) * 2.0
        bias = torch.randn(experts, generator=gen, dtype=torch.float32) * 0.1
        name = f"experts {experts} top_k {top_k} groups {groups}/{group_top_k} sigmoid + expert bias"
        routings, biases = runtime_routing(args.tool, logits, top_k, groups, group_top_k, "sigmoid", False,
                                           bias, ROUNDS)
        bad = moved = 0
        first_map = None
        for r in range(ROUNDS):
            probs, routing_map = megatron_routing(logits, top_k, groups, group_top_k, "sigmoid", False, bias)
            first_map = routing_map if first_map is None else first_map
            moved += int((routing_map != first_map).any(dim=1).sum())
            bad += compare(f"{name}, round {r + 1}", routings[r], probs, routing_map)
            tokens_per_expert = routing_map.sum(dim=0).to(torch.float32)
            bias = get_updated_expert_bias(tokens_per_expert, bias, BIAS_RATE)
            ours_bias = torch.tensor(biases[r], dtype=torch.float32)  # %.9g round-trips a float32
            if not torch.equal(ours_bias, bias):
                bad += 1
                worst = int((ours_bias - bias).abs().argmax())
                print(f"  {name}, round {r + 1}: expert {worst}: runtime bias {float(ours_bias[worst])!r}, "
                      f"Megatron {float(bias[worst])!r}")
        failures += bad > 0
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {name}: {ROUNDS} rounds, routing and bias agree"
              f"{'' if bad == 0 else f' except {bad}'} (the bias moved {moved} token choices)")
    print(f"{cases - failures} of {cases} router forms agree with Megatron-Core's "
          f"topk_routing_with_score_function")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
