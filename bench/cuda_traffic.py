#!/usr/bin/env python3
"""What the CUDA backend moves between host and device per training step.

Until activations are device-resident, a step on `moerun --backend cuda` copies
every operation's activations through host memory, and those copies, not the
kernels, bound it on a GPU. The bytes are the same whatever runs the kernels,
so they are measured here without a GPU: the trainer's test driver built
against the CPU emulation of CUDA (moert-train-driver-emu) trains a few small
layouts for two steps on the CUDA backend and reports, per step, the most bytes
a rank staged, the device memory peak and the host peak. Rewrites its section of
docs/benchmarks.md.

It also times, on this machine's host, the conversion pass that moving bf16
instead of fp32 would need (moert-host-staging-bench), which the backend's
choice to round on the device rests on.

usage: cuda_traffic.py --moec MOEC --driver MOERT_TRAIN_DRIVER_EMU
                       --staging-bench MOERT_HOST_STAGING_BENCH [--no-write]
"""
import argparse
import datetime
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_speed import env, machine, mpi, write_section  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- BEGIN cuda_traffic -->", "<!-- END cuda_traffic -->"
SEQ_LEN, MICRO, GLOBAL = 32, 1, 8
# name: (model definition, model, ranks, parallel settings[, recompute[, the driver's options]])
BIG_VOCAB = "model tiny_bigvocab extends tiny_moe { vocab = 16384 }\n"
# Heads of 32 columns: attention runs on the backend's kernels (tiny_moe's 16
# run its host code, whose score products cross as products).
HEADS_32 = "model tiny_hd32 extends tiny_moe { head_dim = 32 }\n"
# Closer to a real MoE's proportions: each token's eight experts of sixteen
# and a shared expert, so the routed rows outnumber the tokens eight to one.
TOP_8 = ("model tiny_top8 extends tiny_moe {\n  hidden = 128; head_dim = 32\n"
         "  moe { experts = 16; top_k = 8; ffn_hidden = 32; shared_experts = 1 }\n}\n")
# Latent attention at DeepSeek-V3's head widths (queries and keys 128 + 64 wide, values 128), which
# the attention kernels take.
MLA_WIDE = ("model tiny_mlaw extends tiny_moe {\n  kv_heads = 4\n  attention = mla(q_lora_rank = 24, "
            "kv_lora_rank = 16, qk_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128)\n}\n")
# Qwen3-Next's layers: Gated DeltaNet on every layer but each second, gated attention with QK-norm
# on the others, its heads 32 wide so that the attention kernels take them (as they take
# Qwen3-Next's 256).
NEXT = ("model tiny_next extends tiny_moe {\n  qk_norm = true; head_dim = 32\n"
        "  linear_attention { interval = 2; key_heads = 2; value_heads = 4; head_dim = 8 }\n}\n")
# Qwen3-VL's layers: multimodal RoPE in the decoder (heads of 32) and a vision tower of two blocks with
# heads of 32 and a deepstack merger.
VL = ("model tiny_vl extends tiny_moe {\n  head_dim = 32; mrope_section = [8, 4, 4]\n  vision {\n"
      "    layers = 2; hidden = 64; heads = 2; ffn_hidden = 128; patch_size = 4; spatial_merge = 2\n"
      "    position_embeddings = 16; deepstack_layers = [0]\n  }\n}\n")
# One multi-token prediction block (DeepSeek-V3's and Qwen3-Next's), heads of 32.
MTP_32 = "model tiny_mtp32 extends tiny_moe {\n  head_dim = 32; mtp_layers = 1\n}\n"
CASES = [
    ("tiny_moe, 1 rank", "", "tiny_moe", 1, "tp = 1"),
    ("tiny_moe with heads of 32, 1 rank", HEADS_32, "tiny_hd32", 1, "tp = 1"),
    ("hidden 128, heads of 32, top 8 of 16 experts and a shared one, 1 rank", TOP_8, "tiny_top8", 1, "tp = 1"),
    ("tiny_moe with a 16384-token vocabulary, 1 rank", BIG_VOCAB, "tiny_bigvocab", 1, "tp = 1"),
    ("tiny_moe with a 16384-token vocabulary, tp 2", BIG_VOCAB, "tiny_bigvocab", 2, "tp = 2"),
    ("tiny_moe, ep 2 x pp 2", "", "tiny_moe", 4, "ep = 2; pp = 2"),
    ("tiny_moe with heads of 32, pp 2", HEADS_32, "tiny_hd32", 2, "pp = 2"),
    ("tiny_moe with heads of 32, pp 2 x vpp 2", HEADS_32, "tiny_hd32", 2, "pp = 2; vpp = 2"),
    ("tiny_moe with heads of 32, cp 2 (the ring)", HEADS_32, "tiny_hd32", 2, "cp = 2"),
    ("tiny_moe with heads of 32, cp 2 (all-gather)", HEADS_32, "tiny_hd32", 2, "cp = 2; cp_comm = allgather"),
    ("tiny_moe with heads of 32, cp 2 (all-to-all)", HEADS_32, "tiny_hd32", 2, "cp = 2; cp_comm = a2a"),
    ("tiny_moe, cp 2 (all-to-all; heads the kernels do not take, through host memory)", "", "tiny_moe", 2,
     "cp = 2; cp_comm = a2a"),
    ("tiny_moe with heads of 32, ep 2", HEADS_32, "tiny_hd32", 2, "ep = 2"),
    ("tiny_moe with heads of 32, tp 2", HEADS_32, "tiny_hd32", 2, "tp = 2"),
    ("tiny_moe with heads of 32, tp 2 x etp 2", HEADS_32, "tiny_hd32", 2, "tp = 2; etp = 2"),
    ("latent attention at DeepSeek-V3's head widths, 1 rank", MLA_WIDE, "tiny_mlaw", 1, "tp = 1"),
    ("latent attention at DeepSeek-V3's head widths, tp 2 x cp 2", MLA_WIDE, "tiny_mlaw", 4, "tp = 2; cp = 2"),
    ("Qwen3-Next's layers (Gated DeltaNet, gated attention with QK-norm), 1 rank", NEXT, "tiny_next", 1, "tp = 1"),
    ("Qwen3-Next's layers, tp 2", NEXT, "tiny_next", 2, "tp = 2"),
    ("Qwen3-VL's layers (a vision tower, multimodal RoPE), 1 rank", VL, "tiny_vl", 1, "tp = 1"),
    ("tiny_moe with heads of 32 and a multi-token prediction block, 1 rank", MTP_32, "tiny_mtp32", 1, "tp = 1"),
    ("tiny_moe, dp 2", "", "tiny_moe", 2, "tp = 1"),
    ("tiny_moe with heads of 32, dp 2, the distributed optimizer", HEADS_32, "tiny_hd32", 2, "tp = 1", None,
     ["--distributed-optimizer"]),
    ("tiny_moe with heads of 32, full recompute, 1 rank", HEADS_32, "tiny_hd32", 1, "tp = 1", "full"),
    ("tiny_moe with heads of 32, selective recompute (core_attn), 1 rank", HEADS_32, "tiny_hd32", 1, "tp = 1",
     "selective(core_attn)"),
    ("tiny_moe with heads of 32, selective recompute (moe_act, layernorm), 1 rank", HEADS_32, "tiny_hd32", 1,
     "tp = 1", "selective(moe_act, layernorm)"),
    ("hidden 128, heads of 32, top 8 of 16 experts and a shared one, selective recompute (moe), 1 rank", TOP_8,
     "tiny_top8", 1, "tp = 1", "selective(moe)"),
]
STEP = re.compile(r"^step (\d+)/\d+ .* peak ([0-9.]+) MiB")
DEVICE = re.compile(r"^  device peak ([0-9.]+) MiB, staged ([0-9.]+) MiB")
BY_OPERATION = re.compile(r"^  rank 0 staged by operation:(.*)$")
COPIES = re.compile(r"^  rank 0 copies by operation:(.*)$")
WAITS = re.compile(r"^  rank 0 waits by operation:(.*)$")
# The one-rank cases whose copies are broken down by operation.
BROKEN_DOWN = 3


def recipe(definition, model, ranks, parallel, recompute=None):
    return (definition + f"recipe traffic {{\n  model = {model}\n  cluster {{ gpu = cpu; gpus = {ranks} }}\n"
            f"  seq_len = {SEQ_LEN}\n  batch {{ micro = {MICRO}; global = {GLOBAL} }}\n"
            f"  parallel {{ {parallel} }}\n  precision = bf16\n  moe {{ force_balance = true }}\n"
            # A vision model trains on mock images of 32 pixels (18 of the 32 tokens).
            + ("  data { image_size = 32 }\n" if "vision {" in definition else "")
            + (f"  recompute = {recompute}\n" if recompute else "") + "}\n")


def measure(args, work, index, case):
    name, definition, model, ranks, parallel = case[:5]
    recompute = case[5] if len(case) > 5 else None
    driver_options = case[6] if len(case) > 6 else []
    moe = work / f"case{index}.moe"
    moe.write_text(recipe(definition, model, ranks, parallel, recompute))
    plan = work / f"case{index}.toml"
    subprocess.run([args.moec, "plan", str(moe), "-o", str(plan), "--quiet"], check=True, env=env(),
                   stderr=subprocess.DEVNULL)
    p = subprocess.run(mpi("mpirun", ranks) + [args.driver, str(plan), "--steps", "2", "--backend", "cuda"]
                       + driver_options,
                       env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"cuda_traffic: {name} failed (exit {p.returncode}):\n{p.stdout[-2000:]}")
    rows, host_peak, by_operation, copies, waits = [], None, [], [], []
    for line in p.stdout.splitlines():
        if m := STEP.match(line):
            host_peak = float(m.group(2))
        elif m := DEVICE.match(line):
            rows.append((host_peak, float(m.group(1)), float(m.group(2))))
        elif m := BY_OPERATION.match(line):
            parts = (part.strip().rsplit(" ", 1) for part in m.group(1).split(";") if part.strip())
            by_operation.append({op: tuple(float(x) for x in mib.split("/")) for op, mib in parts})
        elif m := COPIES.match(line):
            copies.append(count(m.group(1)))
        elif m := WAITS.match(line):
            waits.append(count(m.group(1)))
    if len(rows) != 2 or len(by_operation) != 2 or len(copies) != 2 or len(waits) != 2:
        sys.exit(f"cuda_traffic: {name}: expected two steps with device figures, got:\n{p.stdout[-2000:]}")
    host, device, staged = rows[-1]  # the second step: the allocator's cache is warm
    return (f"| {name} | {ranks} | {staged:.2f} | {copies[-1]} | {waits[-1]} | {device:.2f} | {host:.2f} |",
            by_operation[-1])


def count(parts):
    """The sum of a step log line's "operation N;" parts."""
    return sum(int(part.strip().rsplit(" ", 1)[1]) for part in parts.split(";") if part.strip())


def breakdown(names, by_operation):
    """The copies of the one-rank cases by the table operation that made them."""
    ops = sorted(set().union(*by_operation), key=lambda op: -sum(sum(case.get(op, (0, 0))) for case in by_operation))
    head = "| operation | " + " | ".join(f"{n}: to device / back, MiB" for n in names) + " |\n"
    head += "| --- |" + " ---: |" * len(names) + "\n"
    lines = ["| " + op + " | " + " | ".join("%.2f / %.2f" % case.get(op, (0, 0)) for case in by_operation) + " |"
             for op in ops]
    return head + "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moec", required=True)
    ap.add_argument("--driver", required=True, help="moert-train-driver-emu")
    ap.add_argument("--staging-bench", required=True, help="moert-host-staging-bench")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measured = [measure(args, Path(tmp), i, c) for i, c in enumerate(CASES)]
    rows = [row for row, _ in measured]
    by_op = breakdown([c[0] for c in CASES[:BROKEN_DOWN]], [ops for _, ops in measured[:BROKEN_DOWN]])
    timing = subprocess.run([args.staging_bench], check=True, capture_output=True, text=True).stdout
    conv = re.search(r"to bf16 ([0-9.]+), from bf16 ([0-9.]+), fp32 copy ([0-9.]+)", timing)
    if not conv:
        sys.exit(f"cuda_traffic: unexpected output of {args.staging_bench}: {timing}")
    to_bf16, from_bf16, copy = (float(g) for g in conv.groups())
    m = machine()
    text = (f"{BEGIN}\n## CUDA backend: host-device traffic per step\n\n"
            "What `moerun --backend cuda` copies between host and device in one training step, its optimizer's "
            "step included (the step log's `staged_bytes`), measured on the CPU emulation of CUDA (the bytes do not depend on what runs the "
            f"kernels): seq_len {SEQ_LEN}, global batch {GLOBAL}, micro batch {MICRO}, routing forced balanced, "
            "the second of two steps. *staged*: the most any rank copied; *copies*: how many copies rank 0 made, either way; "
            "*waits*: of those, the ones the host waits for (a copy to or from pageable host memory waits for all "
            "the work queued on the GPU before it: it synchronizes its stream, so that the host cannot run ahead "
            "of the device across it; an upload of up to 8 MiB is staged through a ring of pinned memory instead and "
            "only queued); *device peak*: the caching "
            "allocator's; *host peak*: the trainer's activations, parameters, gradients and optimizer moments. "
            "The parameters that no group sums and no host code reads stay on the device from step to step "
            "with their gradients and Adam's moments, and the optimizer steps them there (under the distributed "
            "optimizer each rank's shard, its gradient reduce-scattered and its values all-gathered over the "
            "device group); the others move once a "
            "step (their gradients summed on the device) and are stepped on the host; every SwiGLU MLP (routed "
            "experts, dense and shared) moves its rows once each way, and the routed experts' rows "
            "neither way (the tokens are permuted to them and combined on the device, under ep exchanged "
            "between the devices over the ep group's device communicator, and under etp gathered and summed "
            "over the etp group's); cp's ring and all-gather run on the "
            "device, their blocks travelling between device buffers, and so does the all-to-all (where the kernels take "
            "each rank's share of the heads), and so do tp's sequence gathers and reduce-scatters; "
            "the tokens' positions go to the device once for every RoPE and attention call that reads them, and "
            "so do the tokens' ids (for the embedding's lookup and its scatter), the experts the router chose (made on "
            "the device, from which the permutation of the token copies is made there too), and "
            "the pairs of rows that place the vision tower's tokens (its tokens, its features and their gradients); "
            "the loss head keeps the logits on the "
            "device (its rows' statistics come back behind the queued work, made into losses when the step's loss "
            "is read); the router's logits, scores and routing weights stay there, and so do the weights' gradients "
            "(each token's experts come back for the host's dispatcher, and the experts' fractions go up for the "
            "router's backward); latent attention at DeepSeek-V3's head widths runs on the device "
            "whole (its latents, their norms, the split of the RoPE key, each head's key and value assembled from the "
            "up-projection and the shared RoPE key, the interleaved RoPE, the attention kernels, and the backward of "
            "each); Gated DeltaNet runs there whole (its convolution, query and key norms, gates, recurrence and "
            "output norm, and everything that passes between them and their gradients), and so do the QK-norm and "
            "the output gate of the attention beside it, and the vision tower, whose merged tokens take their "
            "rows of the decoder's input and whose deepstack features add to its first layers' outputs there, and "
            "a multi-token prediction block whole (the future tokens' embeddings, the norms, the concatenation and "
            "its projection, the layer and the block's loss head, forward and backward); an activation several products read moves once for them (holds nest), and one that "
            "operations make and later ones read (the normalised inputs, queries, keys and values, their "
            "gradients) moves once, as the result; a layer's branch inputs (the residual stream), normalised inputs, "
            "queries, keys and values, attention output and log-sum-exp, its norms' statistics and its MLPs' products stay on the device from its forward to its backward (what a recompute policy drops, "
            "from its recompute), which raises the device peak a little, and what only the backend reads (the MLPs' products, the "
            "normalised inputs, the queries, keys and values, their gradients after RoPE, attention's output, its "
            "statistics and its gradient, every norm's statistics, the vision tower's too) "
            "never comes back to the host; the residual stream stays on the device in fp32 from layer to layer, "
            "forward and backward, with the outputs and input gradients added to it and attention's gradients "
            "(where no host attention reads them), from the "
            "embedding's rows to the final norm "
            "and back, and from one pipeline stage's device to the next's (the pp group's device communicator), "
            "so that it crosses only where host code reads it; "
            "other activations still cross at every operation. Arrays cross in fp32 and are rounded to bf16 (or widened back) on "
            "the device: twice the bytes of a bf16 copy, for no conversion pass on the host, which on one core "
            f"of this machine takes {to_bf16:.2f} ns an element to bf16 and {from_bf16:.2f} ns back where an fp32 "
            f"copy of it takes {copy:.2f} ns (moert-host-staging-bench). Generated by "
            "`bench/cuda_traffic.py` (`bench/cuda_traffic.sh` builds the tools and runs it).\n\n"
            "| layout | ranks | staged MiB | copies | waits | device peak MiB | host peak MiB |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) +
            "\n\nThe one-rank copies by the operation that made them (rank 0's step log lines, "
            "`BackendTraffic::ByOperation`; *resident*: the first upload of the parameters, gradients and moments "
            "kept on the device, none after; *outermost hold*: the other parameters and their gradients; "
            "*optimizer*: the gradient norm's one figure; *embedding*: the looked-up rows and their gradient; *nested holds*: activations held for "
            "several products):\n\n" + by_op +
            f"\n\nMachine: {m['cpu']}, {m['cores']} cores, {m['os']}. Measured "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.\n{END}\n")
    print(text)
    if not args.no_write:
        write_section(DOC, text, BEGIN, END)


if __name__ == "__main__":
    main()
