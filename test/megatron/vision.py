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

With --mrope-tool, the decoder's side of the images (runtime/model/ModelOps multimodalPositions and
applyMultimodalRope, tool `moert-mrope`) against transformers' Qwen3-VL: get_rope_index's time,
row and column positions for sequences mixing text and images (runs of image_token_id after a
vision_start token; images of several grids, at the start, back to back, at the end), and the
interleaved MRoPE of Qwen3VLMoeTextRotaryEmbedding applied as apply_rotary_pos_emb does (within
MROPE_RTOL; the rotation back must return the input). A control with the row and column sections
exchanged must be told apart.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/vision.py --tool build/test/runtime/model/moert-vision
           [--mrope-tool build/test/runtime/model/moert-mrope]
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
MROPE_RTOL = 2e-6
IMAGE, START, END = 9, 7, 8  # image_token_id, vision_start_token_id, vision_end_token_id of the tiny vocabulary
# (head_dim, mrope_section, merge, [text, image grid (t, h, w) or None, ...] pieces of one sequence)
MROPE_CASES = [
    (24, [4, 4, 4], 2, [3, (1, 4, 6), 5]),
    (32, [6, 5, 5], 2, [(1, 2, 2), 2, (1, 6, 4), (1, 2, 8), 4]),
    (16, [2, 3, 3], 2, [1, (1, 8, 2)]),
]
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


def mrope_case(tool, head_dim, sections, merge, pieces, seed, tool_sections=None):
    """(positions equal, rotation error, round-trip error) of one sequence against transformers."""
    import types
    from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import (Qwen3VLMoeModel, Qwen3VLMoeTextRotaryEmbedding,
                                                                        apply_rotary_pos_emb)
    g = torch.Generator().manual_seed(seed)
    tokens, grids = [], []
    for p in pieces:
        if isinstance(p, int):
            tokens += torch.randint(10, 100, (p,), generator=g).tolist()
        else:
            t, h, w = p
            tokens += [START] + [IMAGE] * (t * (h // merge) * (w // merge)) + [END]
            grids.append(p)
    fake = types.SimpleNamespace(config=types.SimpleNamespace(
        vision_config=types.SimpleNamespace(spatial_merge_size=merge), image_token_id=IMAGE, video_token_id=-1,
        vision_start_token_id=START))
    ids = torch.tensor([tokens])
    positions, _ = Qwen3VLMoeModel.get_rope_index(fake, ids, torch.tensor(grids))
    heads, theta = 2, 5000.0
    config = Qwen3VLMoeTextConfig(head_dim=head_dim, hidden_size=heads * head_dim, num_attention_heads=heads,
                                  rope_theta=theta, max_position_embeddings=4096,
                                  rope_scaling={"rope_type": "default", "mrope_section": sections,
                                                "mrope_interleaved": True})
    rotary = Qwen3VLMoeTextRotaryEmbedding(config)
    x = torch.randn(1, heads, len(tokens), head_dim, generator=g)
    cos, sin = rotary(x, positions)
    want, _ = apply_rotary_pos_emb(x, x, cos, sin)
    use = tool_sections or sections
    text = " ".join(map(str, [head_dim, theta, *use, merge, IMAGE, len(tokens), *tokens, len(grids)]))
    text += " " + " ".join(f"{t} {h} {w}" for t, h, w in grids) + f" {heads}\n"
    flat = x[0].transpose(0, 1).reshape(len(tokens), heads * head_dim)
    text += " ".join(f"{v:.9g}" for v in flat.reshape(-1).tolist()) + "\n"
    p = subprocess.run([tool], input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    lines = p.stdout.strip().split("\n")
    ours_pos = torch.tensor([[int(v) for v in line.split()] for line in lines[:3]])
    same_pos = torch.equal(ours_pos, positions[:, 0])
    rotated = torch.tensor([float(v) for v in lines[3].split()]).reshape(len(tokens), heads, head_dim)
    back = torch.tensor([float(v) for v in lines[4].split()]).reshape(len(tokens), heads * head_dim)
    return same_pos, error(rotated.transpose(0, 1), want[0]), error(back, flat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--mrope-tool")
    args = ap.parse_args()
    failed = 0
    if args.mrope_tool:
        for seed, (hd, sections, merge, pieces) in enumerate(MROPE_CASES):
            same, err, back = mrope_case(args.mrope_tool, hd, sections, merge, pieces, seed + 1)
            ok = same and err <= MROPE_RTOL and back <= MROPE_RTOL
            failed += not ok
            print(f"MRoPE head {hd}, sections {sections}, pieces {pieces}: positions "
                  f"{'equal' if same else 'DIFFER'}, rotation within {err:.1e}, back within {back:.1e}"
                  f"{'' if ok else ' FAILED'}")
        hd, sections, merge, pieces = MROPE_CASES[1]
        _, err, _ = mrope_case(args.mrope_tool, hd, sections, merge, pieces, 2,
                               tool_sections=[sections[0], sections[2] + 1, sections[1] - 1])
        told = err > MROPE_RTOL
        failed += not told
        print(f"control (row and column sections moved): {'told apart' if told else 'NOT told apart'}")
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
