#!/usr/bin/env python3
"""The runtime's vision tower (runtime/model/VisionTower.cpp, tool `moert-vision`) against
transformers' Qwen3VLMoeVisionModel (transformers 4.57.1, models/qwen3_vl_moe), the encoder of
the Qwen3-VL MoE catalog models, run in float64 on the same weights: the patch embedding (its
Conv3d, whose stride is its kernel, as a linear over the flattened patch), the learned position
table bilinearly interpolated to each image's grid, blocks of LayerNorm, attention with the 2-D
RoPE (bidirectional, each image alone) and a GELU-tanh MLP, the 2 x 2 patch merger and the
deepstack mergers.

Each case draws a tiny tower (every LayerNorm and bias moved off its initial value, so that one
loaded wrong shows), images of several grids (square and not, a grid other than the position
table's, which interpolates; two frames), patches and output gradients; runs both; and compares
the merged tokens, the deepstack features, the patches' gradient and every parameter's gradient,
each within RTOL of the tensor's largest magnitude (the runtime computes in float32). Controls:
the runtime given the images in another grid (rows and columns exchanged), and the reference's
qkv read with query and key exchanged, must each be told apart. Exit 0 when every case agrees.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/vision.py --tool build/test/runtime/model/moert-vision
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)
import torch  # noqa: E402

RTOL = 2e-5
# (depth, hidden, heads, ffn, out_hidden, patch, position grid, deepstack layers, images (frames, rows, cols))
CASES = [
    (1, 16, 2, 24, 12, 2, 2, [], [(1, 2, 2)]),
    (2, 32, 4, 48, 24, 4, 4, [0], [(1, 4, 4), (1, 6, 4)]),
    (3, 32, 2, 40, 16, 2, 6, [0, 2], [(2, 4, 2), (1, 2, 8)]),
]


def tiny_tower(depth, hidden, heads, ffn, out_hidden, patch, grid, deepstack, seed):
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeVisionConfig
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeVisionModel
    config = Qwen3VLMoeVisionConfig(depth=depth, hidden_size=hidden, num_heads=heads, intermediate_size=ffn,
                                    out_hidden_size=out_hidden, patch_size=patch, temporal_patch_size=2,
                                    in_channels=3, spatial_merge_size=2, num_position_embeddings=grid * grid,
                                    deepstack_visual_indexes=deepstack, hidden_act="gelu_pytorch_tanh")
    torch.manual_seed(seed)
    model = Qwen3VLMoeVisionModel._from_config(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.2 * torch.randn_like(p) if ("norm" in name or name.endswith("bias")) else 0.0 * p)
            if name.endswith("weight") and "norm" not in name:
                p.copy_(0.2 * torch.randn_like(p))
    return model


def runtime_names(depth, deepstack):
    """Our parameters in VisionTower::parameters() order, each with its Hugging Face tensor and
    whether that is a Linear weight ([out, in], transposed to the runtime's [in, out])."""
    names = [("patch_embed", "patch_embed.proj.weight", True), ("patch_embed_bias", "patch_embed.proj.bias", False),
             ("pos_embed", "pos_embed.weight", False)]
    for i in range(depth):
        b = f"blocks.{i}."
        for ours, hf, linear in (("norm1", "norm1.weight", False), ("norm1_bias", "norm1.bias", False),
                                 ("qkv", "attn.qkv.weight", True), ("qkv_bias", "attn.qkv.bias", False),
                                 ("proj", "attn.proj.weight", True), ("proj_bias", "attn.proj.bias", False),
                                 ("norm2", "norm2.weight", False), ("norm2_bias", "norm2.bias", False),
                                 ("fc1", "mlp.linear_fc1.weight", True), ("fc1_bias", "mlp.linear_fc1.bias", False),
                                 ("fc2", "mlp.linear_fc2.weight", True), ("fc2_bias", "mlp.linear_fc2.bias", False)):
            names.append((b + ours, b + hf, linear))
    mergers = [("merger.", "merger.")] + [(f"deepstack.{j}.", f"deepstack_merger_list.{j}.")
                                          for j in range(len(deepstack))]
    for ours_pre, hf_pre in mergers:
        for ours, hf, linear in (("norm", "norm.weight", False), ("norm_bias", "norm.bias", False),
                                 ("fc1", "linear_fc1.weight", True), ("fc1_bias", "linear_fc1.bias", False),
                                 ("fc2", "linear_fc2.weight", True), ("fc2_bias", "linear_fc2.bias", False)):
            names.append((ours_pre + ours, hf_pre + hf, linear))
    return names


def ours_layout(t, linear):
    return t.reshape(t.shape[0], -1).t() if linear else t


def error(ours, ref):
    return float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def run_case(tool, case, seed, exchange_grid=False, swap_qk=False):
    depth, hidden, heads, ffn, out_hidden, patch, grid, deepstack, images = case
    model = tiny_tower(depth, hidden, heads, ffn, out_hidden, patch, grid, deepstack, seed)
    named = dict(model.named_parameters())
    patch_dim = 3 * 2 * patch * patch
    n = sum(t * h * w for t, h, w in images)
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(n, patch_dim, generator=g, dtype=torch.float64, requires_grad=True)
    thw = torch.tensor(images)
    tokens, feats = model(x, thw)
    d_tokens = torch.randn(tokens.shape, generator=g, dtype=torch.float64)
    d_feats = [torch.randn(f.shape, generator=g, dtype=torch.float64) for f in feats]
    (tokens * d_tokens).sum().backward(retain_graph=True)
    for f, d in zip(feats, d_feats):
        (f * d).sum().backward(retain_graph=True)
    names = runtime_names(depth, deepstack)
    values = [ours_layout(named[hf].detach(), linear) for _, hf, linear in names]
    if swap_qk:  # the reference's qkv columns read as [k, q, v]
        for i, (ours, _, _) in enumerate(names):
            if ours.endswith("qkv") or ours.endswith("qkv_bias"):
                q, k, v = values[i].chunk(3, dim=-1)
                values[i] = torch.cat([k, q, v], -1)
    grids = [(t, w, h) for t, h, w in images] if exchange_grid else images
    header = [depth, hidden, heads, ffn, out_hidden, patch, 2, 3, 2, grid, len(deepstack), *deepstack, len(grids)]
    lines = [" ".join(map(str, header)), " ".join(f"{t} {h} {w}" for t, h, w in grids)]
    for t in values + [x.detach(), d_tokens] + d_feats:
        lines.append(" ".join(f"{v:.17g}" for v in t.reshape(-1).tolist()))
    p = subprocess.run([tool], input="\n".join(lines) + "\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    out = p.stdout.strip().split("\n")
    refs = [("tokens", tokens.detach())] + [(f"deepstack {j}", f.detach()) for j, f in enumerate(feats)]
    refs += [("d_patches", x.grad)] + [("d" + ours, ours_layout(named[hf].grad, linear)) for ours, hf, linear in names]
    errs = {}
    for (name, ref), line in zip(refs, out):
        got = torch.tensor([float(v) for v in line.split()], dtype=torch.float64)
        errs[name] = error(got.reshape(ref.shape), ref) if got.numel() == ref.numel() else float("inf")
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    failed = 0
    for seed, case in enumerate(CASES):
        errs = run_case(args.tool, case, seed + 1)
        bad = [n for n, e in errs.items() if e > RTOL]
        failed += bool(bad)
        print(f"vision tower depth {case[0]}, hidden {case[1]}, {case[2]} heads, images {case[8]}: "
              f"{'agrees with Qwen3VLMoeVisionModel' if not bad else 'DIFFERS in ' + ', '.join(bad[:6])} "
              f"({len(errs)} tensors; worst {max(errs.values()):.1e} of scale)")
    for label, kw in (("images given rows and columns exchanged", {"exchange_grid": True}),
                      ("query and key exchanged", {"swap_qk": True})):
        errs = run_case(args.tool, CASES[1], 2, **kw)
        told = errs["tokens"] > RTOL
        failed += not told
        print(f"control ({label}): {'told apart' if told else 'NOT told apart'}")
    print("vision: all agree" if not failed else f"vision: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
