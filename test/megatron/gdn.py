#!/usr/bin/env python3
"""The runtime's gated delta rule (runtime/model/GatedDeltaRule.cpp) against Megatron-Core
0.16.1's torch_chunk_gated_delta_rule (megatron/core/ssm/gated_delta_net.py), the core that its
GatedDeltaNet runs in deterministic mode (fla's chunk_gated_delta_rule otherwise, the same
function), forward and, through torch autograd, backward.

For several shapes (sequences shorter and longer than Megatron's 64-token chunks and than the
runtime's 64-token checkpoints, not multiples of either; one to four heads; key and value
widths equal and not), this draws seeded inputs as GatedDeltaNet produces them (q and k
L2-normalised, g = -exp(A_log) softplus(a + dt_bias) < 0, beta = sigmoid(b)) and an output
gradient, runs `moert-delta-rule` and Megatron's function, and compares the output and the
gradients of q, k, v, g and beta, each within RTOL of the tensor's largest magnitude (float32
in both, summed in different orders). A control with the runtime's output read one token late
must fail. Exit 0 when every case agrees.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/gdn.py --tool build/test/runtime/model/moert-delta-rule
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)
import torch  # noqa: E402
from megatron.core.ssm.gated_delta_net import torch_chunk_gated_delta_rule  # noqa: E402

RTOL = 2e-5
# (tokens, heads, dk, dv)
SHAPES = [(1, 1, 4, 4), (17, 2, 8, 8), (64, 1, 16, 16), (100, 3, 8, 12), (150, 2, 16, 8), (200, 4, 32, 32)]


def inputs(tokens, heads, dk, dv, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(1, tokens, heads, dk, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, tokens, heads, dk, generator=g), dim=-1)
    v = torch.randn(1, tokens, heads, dv, generator=g)
    a_log = torch.rand(heads, generator=g) * 2 - 1
    alpha = torch.randn(1, tokens, heads, generator=g)
    gate = -a_log.exp() * torch.nn.functional.softplus(alpha)
    beta = torch.sigmoid(torch.randn(1, tokens, heads, generator=g))
    grad_out = torch.randn(1, tokens, heads, dv, generator=g)
    return q, k, v, gate, beta, grad_out


def megatron(q, k, v, gate, beta, grad_out):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, gate, beta)]
    out, _ = torch_chunk_gated_delta_rule(*leaves[:3], g=leaves[3], beta=leaves[4])
    out.backward(grad_out)
    return [out.detach()] + [t.grad for t in leaves]


def runtime(tool, q, k, v, gate, beta, grad_out):
    _, tokens, heads, dk = q.shape
    dv = v.shape[-1]
    text = f"{tokens} {heads} {dk} {dv}\n" + "\n".join(
        " ".join(f"{x:.9g}" for x in t.reshape(-1).tolist()) for t in (q, k, v, gate, beta, grad_out)) + "\n"
    p = subprocess.run([tool], input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    lines = p.stdout.strip().split("\n")
    shapes = [v.shape, q.shape, k.shape, v.shape, gate.shape, beta.shape]
    return [torch.tensor([float(x) for x in line.split()]).reshape(s) for line, s in zip(lines, shapes)]


def error(ours, ref):
    return float((ours - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    names = ["output", "dq", "dk", "dv", "dg", "dbeta"]
    failed = 0
    for seed, shape in enumerate(SHAPES):
        case = inputs(*shape, seed=seed + 1)
        ref = megatron(*case)
        ours = runtime(args.tool, *case)
        errs = {n: error(o, r) for n, o, r in zip(names, ours, ref)}
        bad = [n for n, e in errs.items() if e > RTOL]
        failed += bool(bad)
        worst = max(errs.values())
        print(f"tokens {shape[0]} heads {shape[1]} dk {shape[2]} dv {shape[3]}: "
              f"{'agree' if not bad else 'DIFFER in ' + ', '.join(bad)} (worst {worst:.1e} of scale)")
        if shape[0] > 1 and seed == 1:
            late = torch.cat([ours[0][:, :1], ours[0][:, :-1]], 1)
            told = error(late, ref[0]) > RTOL
            failed += not told
            print(f"control (the runtime's output one token late): {'told apart' if told else 'NOT told apart'}")
    print(f"{failed} of {len(SHAPES)} cases failed" if failed else f"all {len(SHAPES)} cases agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
