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

With --block-tool, the whole Gated DeltaNet block (runtime/model/GatedDeltaNet.cpp, tool
`moert-gdn`) is compared with Hugging Face's Qwen3NextGatedDeltaNet (transformers 4.57.1, its
torch path: conv1d, torch_chunk_gated_delta_rule, Qwen3NextRMSNormGated) run in float64 on the
same weights: Hugging Face's fused in_proj_qkvz and in_proj_ba (grouped by key head: q, k, the
group's values and gates; b then a) are split into the runtime's q, k, v, z, b, a matrices and its
conv into q, k and v channels. The output, the input gradient and every weight gradient must
agree within BLOCK_RTOL of scale (the runtime computes in float32).

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/gdn.py --tool build/test/runtime/model/moert-delta-rule
           [--block-tool build/test/runtime/model/moert-gdn]
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


BLOCK_RTOL = 2e-5
# (sequences, seq_len, hidden, key_heads, value_heads, head_dim)
BLOCK_SHAPES = [(1, 9, 16, 1, 1, 4), (2, 40, 32, 2, 4, 8), (1, 70, 24, 2, 2, 8)]
WEIGHTS = ["q", "k", "v", "z", "b", "a", "conv_q", "conv_k", "conv_v", "dt_bias", "a_log", "norm", "out"]


def runtime_weights(gdn, hk, hv, d):
    """Hugging Face's Qwen3NextGatedDeltaNet parameters as the runtime's matrices ([in, out]),
    as index lists into Hugging Face's tensors so that gradients map back the same way."""
    r = hv // hk
    group = 2 * d + 2 * r * d
    rows = {"q": [], "k": [], "v": [], "z": [], "b": [], "a": []}
    for j in range(hk):
        base = j * group
        rows["q"] += range(base, base + d)
        rows["k"] += range(base + d, base + 2 * d)
        rows["v"] += range(base + 2 * d, base + 2 * d + r * d)
        rows["z"] += range(base + 2 * d + r * d, base + group)
        rows["b"] += range(j * 2 * r, j * 2 * r + r)
        rows["a"] += range(j * 2 * r + r, j * 2 * r + 2 * r)
    kc, vc = hk * d, hv * d

    def take(t):
        out = {}
        for n in ("q", "k", "v", "z"):
            out[n] = t["in_proj_qkvz.weight"][rows[n]].t()
        for n in ("b", "a"):
            out[n] = t["in_proj_ba.weight"][rows[n]].t()
        conv = t["conv1d.weight"][:, 0, :]
        out["conv_q"], out["conv_k"], out["conv_v"] = conv[:kc], conv[kc:2 * kc], conv[2 * kc:2 * kc + vc]
        out["dt_bias"], out["a_log"] = t["dt_bias"].reshape(-1, 1), t["A_log"].reshape(-1, 1)
        out["norm"], out["out"] = t["norm.weight"], t["out_proj.weight"].t()
        return out
    return take


def block_case(tool, seqs, seq_len, hidden, hk, hv, d, seed, swap_ba=False):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    torch.manual_seed(seed)
    config = Qwen3NextConfig(hidden_size=hidden, linear_num_key_heads=hk, linear_num_value_heads=hv,
                             linear_key_head_dim=d, linear_value_head_dim=d, linear_conv_kernel_dim=4,
                             rms_norm_eps=1e-6, hidden_act="silu")
    gdn = Qwen3NextGatedDeltaNet(config, layer_idx=0).double()
    with torch.no_grad():
        # Decay rates A of 0.05-0.5 rather than Hugging Face's initial 0-16: the reference runs
        # its chunked form in float32 whatever the module's dtype (A_log.float(), and
        # torch_chunk_gated_delta_rule casts to float32), and with A near 16 the exp of a
        # chunk's summed decay underflows there, which leaves its gradients of A_log, dt_bias
        # and a to about 1e-4; the recurrent form the runtime runs has no such sum.
        gdn.A_log.copy_(torch.empty_like(gdn.A_log).uniform_(0.05, 0.5).log())
        gdn.dt_bias.add_(0.3 * torch.randn_like(gdn.dt_bias))
        gdn.norm.weight.add_(0.2 * torch.randn_like(gdn.norm.weight))
    x = torch.randn(seqs, seq_len, hidden, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(seqs, seq_len, hidden, dtype=torch.float64)
    y = gdn(x)
    y.backward(dy)
    named = dict(gdn.named_parameters())
    take = runtime_weights(gdn, hk, hv, d)
    values = take({n: p.detach() for n, p in named.items()})
    if swap_ba:  # the control: Hugging Face's b and a read the other way round
        values["b"], values["a"] = values["a"], values["b"]
    grads = take({n: p.grad for n, p in named.items()})
    text = f"{seqs} {seq_len} {hidden} {hk} {hv} {d} {config.rms_norm_eps}\n" + "\n".join(
        " ".join(f"{v:.17g}" for v in t.reshape(-1).tolist())
        for t in [values[n] for n in WEIGHTS] + [x.detach(), dy]) + "\n"
    p = subprocess.run([tool], input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    lines = p.stdout.strip().split("\n")
    refs = [("output", y.detach()), ("dx", x.grad)] + [("d" + n, grads[n]) for n in WEIGHTS]
    errs = {}
    for (name, ref), line in zip(refs, lines):
        ours = torch.tensor([float(v) for v in line.split()], dtype=torch.float64).reshape(ref.shape)
        errs[name] = error(ours, ref)
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--block-tool")
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
    if args.block_tool:
        for seed, shape in enumerate(BLOCK_SHAPES):
            errs = block_case(args.block_tool, *shape, seed=seed + 11)
            bad = [n for n, e in errs.items() if e > BLOCK_RTOL]
            failed += bool(bad)
            print(f"Gated DeltaNet block, sequences {shape[0]} x {shape[1]} tokens, hidden {shape[2]}, key heads "
                  f"{shape[3]}, value heads {shape[4]} x {shape[5]}: "
                  f"{'agrees with Qwen3NextGatedDeltaNet' if not bad else 'DIFFERS in ' + ', '.join(bad)} "
                  f"(output, dx and {len(WEIGHTS)} weight gradients; worst {max(errs.values()):.1e} of scale)")
        errs = block_case(args.block_tool, *BLOCK_SHAPES[1], seed=12, swap_ba=True)
        told = errs["output"] > BLOCK_RTOL
        failed += not told
        print(f"control (b and a swapped): {'told apart' if told else 'NOT told apart'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
