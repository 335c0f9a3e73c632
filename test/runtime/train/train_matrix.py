#!/usr/bin/env python3
"""Every parallel layout equals one rank: the trainer's equivalence matrix.

For each layout below: write a recipe for the catalog's tiny_moe on the `cpu`
system, `moec plan` it, run `mpirun -np N moert-train-driver PLAN --steps 3
--dump DIR`, and compare the loss of every step, every full gradient after
step 1 and every full parameter after step 3 with the one-rank run
(compare_dumps.py: max-abs error <= 1e-5 of each tensor's largest reference
magnitude). Prints one line per layout with its time; exits 1 if any layout
fails to plan, run or match, or if a control run from another seed is
not told apart from the one-rank run.

With --backend cuda (a driver built with the CUDA backend, such as
moert-train-driver-emu on the CPU emulation of CUDA) every run computes on that
backend, and its one-rank losses must also differ from the host backend's (the
backend really ran: bf16 operands) by no more than bf16 rounding explains
(--host-tol, relative). Every layout then routes by forced balance
(moe.force_balance): a layout changes what bf16 rounds (the ring's per-block
softmax under cp, partial sums under tp), which is enough to flip a learned
router's top-k choice and move that expert's gradients entirely (measured: up to
38% of a tensor's scale in 10 of the 57 layouts), a difference of routing, not of
the layout's arithmetic; forced routing is the same in every layout.

Usage: train_matrix.py --moec MOEC --driver DRIVER --mpirun MPIRUN --work DIR
                       [--only NAME,...] [--tol 1e-5]
                       [--backend cpu|cuda] [--host-tol 1e-3]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_dumps  # noqa: E402

STEPS = 3
# The optimizer is AdamW, whose update lr * g / (|g| + eps) has slope up to
# lr / (4 eps) (at |g| = eps). Gradients of one tensor span many decades
# (rarely routed experts, rare tokens, ~1e-9 against a scale of ~1e-2), and
# layouts sum them in different orders, so they differ at fp32 rounding level
# (~1e-7 of the tensor's scale; checked at 1e-5 after step 1). With lr = 1e-3
# and eps = 1e-8 that slope turns such differences into parameter differences
# of up to ~5e-5 of the parameters' scale after 3 steps, for any correct
# implementation. lr = 1e-4 and eps = 1e-6 bound the amplified rounding to
# ~2e-6 of scale while each step still moves parameters by up to 1e-4, ~300x
# the tolerance, so a wrong update still shows.
LR = "1e-4"
ADAM_EPS = "1e-6"
SEQ_LEN = 32
GLOBAL_BATCH = 8

# name: (ranks, parallel settings, recompute or None); a name ending in
# "_distopt" runs the distributed optimizer (ZeRO-1), which leaves no summed
# gradients behind, so only its losses and parameters are compared.
LAYOUTS = [
    ("dp2", 2, "tp = 1", None),
    ("tp2", 2, "tp = 2", None),
    ("cp2", 2, "cp = 2", None),
    ("cp4", 4, "cp = 4", None),
    ("ep2", 2, "ep = 2", None),
    ("ep4", 4, "ep = 4", None),
    ("pp2", 2, "pp = 2", None),
    ("pp2_vpp2", 2, "pp = 2; vpp = 2", None),
    ("pp4", 4, "pp = 4", None),
    ("tp2_cp2", 4, "tp = 2; cp = 2", None),
    ("cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", None),
    ("dp2_tp2_ep2", 4, "tp = 2; ep = 2", None),
    ("tp2_pp2_selective", 4, "tp = 2; pp = 2", "selective(core_attn, moe_act, layernorm)"),
    ("ep2_pp2_full", 4, "ep = 2; pp = 2", "full"),
    ("dp2_cp2_ep4_pp2", 8, "cp = 2; ep = 4; pp = 2", None),
    ("tp2_dp2_pp2_vpp2", 8, "tp = 2; pp = 2; vpp = 2", "selective(mlp, moe)"),
    ("dp2_ep2_cp2_distopt", 8, "cp = 2; ep = 2", None),
    # Megatron's other cp_comm_types: all-gathered K/V (their gradients reduce-scattered back), and
    # the all-to-all that trades sequence shards for head shards; a2a_p2p runs as the ring (a note).
    ("cp2_allgather_ep2", 4, "cp = 2; ep = 2; cp_comm = allgather", "selective(core_attn)"),
    ("dp2_cp2_a2a_ep2", 4, "cp = 2; ep = 2; cp_comm = a2a", None),
    ("cp2_a2a_pp2", 4, "cp = 2; pp = 2; cp_comm = a2a", None),
    ("cp4_a2a_p2p", 4, "cp = 4; cp_comm = a2a_p2p; cp_hierarchy = [2, 2]", None),
    # Groups of one take a shortcut in the distributed optimizer (no master
    # copy, no all-gather): every bucket on one rank, the edp bucket with ep2.
    ("one_rank_distopt", 1, "tp = 1", None),
    ("dp2_ep2_distopt", 2, "ep = 2", None),
    # Expert tensor parallelism over the tp group: each expert's gate/up split by columns, down
    # by rows; the group's dispatched rows gathered before the experts, the partial outputs
    # reduce-scattered after.
    ("tp2_etp2", 2, "tp = 2; etp = 2", None),
    ("tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2", None),
    ("tp2_etp2_pp2_moe", 4, "tp = 2; etp = 2; pp = 2", "selective(moe)"),
    ("tp2_etp2_ep2_distopt", 4, "tp = 2; ep = 2; etp = 2", None),
    # The sigmoid router with its expert bias (BIASED_MODEL), against its own one-rank run: the
    # bias moves by the tokens every expert got from all ranks of a stage (tp, cp and dp), so
    # each layout's biases after 3 steps (dumped with the parameters) must be the one rank's.
    ("bias_dp2_tp2_ep2", 4, "tp = 2; ep = 2", None),
    ("bias_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", "selective(moe)"),
    ("bias_dp2_cp2_ep4_pp2", 8, "cp = 2; ep = 4; pp = 2", None),
    # Qwen3's QK-norm (QK_MODEL): the per-head norm weights are replicated over tp and see only
    # their heads and sequence shard, so their gradients are summed over tp, cp and dp.
    ("qk_tp2_cp2", 4, "tp = 2; cp = 2", None),
    ("qk_tp2_pp2_full", 4, "tp = 2; pp = 2", "full"),
    # Multi-head latent attention (MLA_MODEL, with a query latent; MLAKV_MODEL, without, as
    # DeepSeek-V2-Lite): the down-projections and their norms are replicated over tp and run on
    # each rank's sequence shard, the up-projections are split by heads, the shared RoPE key is
    # gathered over tp and its gradient reduce-scattered; under cp the ring carries per-head K
    # (no-RoPE and RoPE parts) and the narrower V; mla_up_proj drops Q, K, V for recompute.
    ("mla_tp2_cp2", 4, "tp = 2; cp = 2", None),
    ("mla_tp2_ep2_upproj", 4, "tp = 2; ep = 2", "selective(mla_up_proj, layernorm)"),
    ("mla_cp2_ep2_pp2_full", 4, "cp = 2; ep = 2; pp = 2", "full"),
    ("mlakv_tp2_cp2", 4, "tp = 2; cp = 2", None),
    ("mlakv_tp2_pp2_upproj", 4, "tp = 2; pp = 2", "selective(mla_up_proj, core_attn)"),
    # The DeepSeek-V3 family at its smallest (DSV3_MODEL): latent attention, the sigmoid router
    # with its expert bias, group-limited top-k, weights scaled by 2.5, a shared expert; under
    # every parallel dimension, expert tensor parallelism included.
    ("dsv3_tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2", None),
    ("dsv3_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", "selective(mla_up_proj, moe)"),
    ("dsv3_dp2_cp2_ep4_pp2", 8, "cp = 2; ep = 4; pp = 2", None),
    # DeepSeek-V3's multi-token prediction (MTP_MODEL: two blocks, chained): each block's
    # future tokens come from the whole sequence whatever CP splits; under PP the last stage
    # holds a copy of the embedding whose gradient is summed with the first stage's.
    ("mtp_tp2_cp2", 4, "tp = 2; cp = 2", None),
    ("mtp_ep2_pp2_full", 4, "ep = 2; pp = 2", "full"),
    ("mtp_cp2_ep2_pp2_distopt", 4, "cp = 2; ep = 2; pp = 2", "selective(mla_up_proj, moe)"),
    # Qwen3-Next's layers (NEXT_MODEL): Gated DeltaNet on every layer but each second, gated full
    # attention with QK-norm on those, one MTP block; tp splits the linear layers by heads (the
    # conv, dt_bias and A_log with them). No cp: Megatron-Core 0.16 has none for Gated DeltaNet.
    ("next_tp2", 2, "tp = 2", None),
    ("next_dp2_tp2_ep2", 4, "tp = 2; ep = 2", None),
    ("next_ep2_pp2_full", 4, "ep = 2; pp = 2", "full"),
    ("next_tp2_pp2_selective", 4, "tp = 2; pp = 2", "selective(core_attn, layernorm, moe, gdn_norm_out)"),
    ("next_dp2_ep2_distopt", 2, "ep = 2", None),
    ("next_tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2", None),
    # Forced balanced routing (moe.force_balance, Megatron moe_router_force_load_balancing): the
    # logits are drawn per token from its sample and position, so every layout routes as one rank
    # does, recomputation included.
    ("fb_dp2_tp2_ep2", 4, "tp = 2; ep = 2", None),
    ("fb_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", "selective(moe)"),
    # A vision-language model (VL_MODEL, mock images): the tower on the embedding chunk, its tokens
    # in place of each image's placeholders and its deepstack feature added after layer 0; every tp
    # rank runs the whole tower for its sequence shard's rows (gradients summed over tp), every cp
    # rank for its positions' rows (summed over cp); multimodal RoPE rotates by each token's time,
    # row and column positions, which a cp rank takes from its whole sequence. Images of 32 pixels take 18 of the 32 tokens,
    # so that their placeholders reach both tp shards.
    ("vl_dp2_tp2_ep2", 4, "tp = 2; ep = 2", None),
    ("vl_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", "selective(moe)"),
    ("vl_tp2_etp2_ep2", 4, "tp = 2; ep = 2; etp = 2", None),
    # Heads of 32 columns (HD32_MODEL): the CUDA backend's matrix runs its attention kernels on these.
    ("hd32_tp2_cp2", 4, "tp = 2; cp = 2", "selective(core_attn)"),
    ("hd32_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", None),
    ("hd32_dp2_cp2_ep4_pp2_vpp2", 8, "cp = 2; ep = 4; pp = 2; vpp = 2", None),
    ("hd32_cp2_allgather_ep2", 4, "cp = 2; ep = 2; cp_comm = allgather", None),
    ("hd32_cp2_a2a_ep2", 4, "cp = 2; ep = 2; cp_comm = a2a", None),
    # Qwen3-Next's layers and Qwen3's QK-norm with attention heads of 32 (NEXTW_MODEL, QKW_MODEL),
    # which the CUDA backend runs whole on the device: the QK-norm, the output gate, Gated
    # DeltaNet's convolution, norms, gates and recurrence; the QK-norm in the device's cp ring.
    ("nextw_tp2_pp2", 4, "tp = 2; pp = 2", "selective(core_attn, gdn_norm_out)"),
    ("qkw_tp2_cp2", 4, "tp = 2; cp = 2", None),
    # Latent attention at DeepSeek-V3's head widths (MLAW_MODEL: queries and keys 192 wide, values
    # 128), which the CUDA backend's kernels take, in its ring (Megatron runs latent attention's cp by p2p only).
    ("mlaw_tp2_cp2", 4, "tp = 2; cp = 2", "selective(mla_up_proj)"),
    ("mlaw_cp2_ep2_pp2", 4, "cp = 2; ep = 2; pp = 2", None),
]
# tiny_moe with the sigmoid router and aux-loss-free balancing; a bias update rate of
# Megatron's 1e-3 changes routing within 3 steps of this tiny model.
BIASED_MODEL = "model tiny_biased extends tiny_moe {\n  moe { router = sigmoid; expert_bias = true }\n}\n"
QK_MODEL = "model tiny_qk extends tiny_moe { qk_norm = true }\n"
# Latent attention: query and key heads 16 wide (8 of them RoPE), values 12, latents 24 and 16.
MLA_MODEL = ("model tiny_mla extends tiny_moe {\n  kv_heads = 4\n  attention = mla(q_lora_rank = 24, "
             "kv_lora_rank = 16, qk_head_dim = 8, qk_rope_head_dim = 8, v_head_dim = 12)\n}\n")
MLAKV_MODEL = ("model tiny_mlakv extends tiny_moe {\n  kv_heads = 4\n  attention = mla(kv_lora_rank = 16, "
               "qk_head_dim = 8, qk_rope_head_dim = 8, v_head_dim = 12)\n}\n")
DSV3_MODEL = ("model tiny_dsv3 extends tiny_mla {\n  moe {\n    router = sigmoid; expert_bias = true; groups = 4; "
              "group_top_k = 2\n    topk_scaling = 2.5; shared_experts = 1; shared_ffn_hidden = 32\n  }\n}\n")
MTP_MODEL = "model tiny_mtp extends tiny_dsv3 { mtp_layers = 2 }\n"
NEXT_MODEL = ("model tiny_next extends tiny_moe {\n  qk_norm = true; mtp_layers = 1\n"
              "  linear_attention { interval = 2; key_heads = 2; value_heads = 4; head_dim = 8 }\n}\n")
VL_MODEL = ("model tiny_vl extends tiny_moe {\n  mrope_section = [4, 2, 2]\n  vision {\n    layers = 2; hidden = 16; heads = 2; ffn_hidden = 32; "
            "patch_size = 4; spatial_merge = 2\n    position_embeddings = 16; deepstack_layers = [0]\n  }\n}\n")
# Heads of 32 columns, the narrowest the CUDA backend's attention kernels take (tiny_moe's 16 run
# attention's host code there); routed by forced balance (RECIPE_LINES), as a cp layout of the
# CUDA backend must be (test/runtime/cuda/CMakeLists.txt).
HD32_MODEL = "model tiny_hd32 extends tiny_moe { head_dim = 32 }\n"
NEXTW_MODEL = "model tiny_nextw extends tiny_next { head_dim = 32 }\n"
QKW_MODEL = "model tiny_qkw extends tiny_moe { qk_norm = true; head_dim = 32 }\n"
# Latent attention at DeepSeek-V3's head widths (qk 128 + 64 RoPE, values 128), routed by forced
# balance as HD32_MODEL is.
MLAW_MODEL = ("model tiny_mlaw extends tiny_moe {\n  kv_heads = 4\n  attention = mla(q_lora_rank = 24, "
              "kv_lora_rank = 16, qk_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128)\n}\n")
# A layout's name prefix picks its model (and its own one-rank reference, "<prefix>one_rank").
MODELS = {"bias_": ("tiny_biased", BIASED_MODEL), "qk_": ("tiny_qk", QK_MODEL), "mla_": ("tiny_mla", MLA_MODEL),
          "mlakv_": ("tiny_mlakv", MLAKV_MODEL), "dsv3_": ("tiny_dsv3", MLA_MODEL + DSV3_MODEL),
          "mtp_": ("tiny_mtp", MLA_MODEL + DSV3_MODEL + MTP_MODEL), "next_": ("tiny_next", NEXT_MODEL),
          "fb_": ("tiny_moe", ""), "vl_": ("tiny_vl", VL_MODEL),
          "hd32_": ("tiny_hd32", HD32_MODEL), "mlaw_": ("tiny_mlaw", MLAW_MODEL),
          "nextw_": ("tiny_nextw", NEXT_MODEL + NEXTW_MODEL), "qkw_": ("tiny_qkw", QKW_MODEL)}
# A layout's name prefix that adds recipe lines (to its one-rank reference too).
FORCED = "  moe { force_balance = true }"
RECIPE_LINES = {"fb_": FORCED, "vl_": "  data { image_size = 32 }", "hd32_": FORCED, "mlaw_": FORCED,
                "nextw_": FORCED, "qkw_": FORCED}


def model_of(name):
    return next(((p, m, d) for p, (m, d) in MODELS.items() if name.startswith(p)), ("", "tiny_moe", ""))


def recipe(name, ranks, parallel, recompute, force_balance=False):
    _, model, definition = model_of(name)
    lines = [
        definition + f"recipe {name} {{",
        f"  model = {model}",
        f"  cluster {{ gpu = cpu; gpus = {ranks} }}",
        f"  seq_len = {SEQ_LEN}",
        f"  batch {{ micro = 1; global = {GLOBAL_BATCH} }}",
        f"  parallel {{ {parallel} }}",
        "  precision = bf16",
    ]
    if recompute:
        lines.append(f"  recompute = {recompute}")
    lines += [line for prefix, line in RECIPE_LINES.items() if name.startswith(prefix)]
    if force_balance and not any("force_balance" in line for line in lines):
        lines.append(FORCED)
    lines.append("}")
    return "\n".join(lines) + "\n"


def run(cmd, env, timeout=120):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout


def run_layout(args, env, name, ranks, parallel, recompute, extra=()):
    d = os.path.join(args.work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "dump"))
    src = os.path.join(d, f"{name}.moe")
    with open(src, "w") as f:
        f.write(recipe(name, ranks, parallel, recompute, args.force_balance))
    plan = os.path.join(d, "plan.toml")
    rc, out = run([args.moec, "plan", src, "-o", plan], env)
    if rc != 0:
        return f"moec plan failed:\n{out}"
    rc, out = run([args.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
                   "-np", str(ranks), args.driver, plan, "--steps", str(STEPS),
                   "--lr", LR, "--adam-eps", ADAM_EPS, "--dump", os.path.join(d, "dump"),
                   "--backend", args.backend, *extra], env)
    with open(os.path.join(d, "run.log"), "w") as f:
        f.write(out)
    if rc != 0:
        return f"run failed (exit {rc}):\n{out[-3000:]}"
    return None


def check_against_host(args, env, ref):
    """The backend's one-rank losses are near the host backend's, and not equal to them.

    Losses only: bf16 operands move a router's scores enough to flip a few top-k
    choices, which moves those experts' gradients by far more than rounding."""
    # The same recipe as the backend's one-rank run (force_balance kept).
    host = argparse.Namespace(**{**vars(args), "backend": "cpu"})
    err = run_layout(host, env, "host_one_rank", 1, "tp = 1", None)
    if err:
        print(f"host_one_rank: {err}")
        return False
    host_ref = os.path.join(args.work, "host_one_rank", "dump")
    far, worst = compare_dumps.compare(host_ref, ref, args.host_tol, kinds=())
    same = compare_dumps.read_loss(host_ref) == compare_dumps.read_loss(ref)
    if far or same:
        print(f"one_rank on {args.backend}: " + ("the same losses as the host backend's run: the backend did not "
                                                 "compute" if same else "MISMATCH with the host backend's losses"
                                                 "\n  " + "\n  ".join(far[:15])))
        return False
    print(f"one_rank on {args.backend}: losses within {args.host_tol:g} of the host backend's run "
          f"(worst rel error {worst:.1e}), and not equal to them")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moec", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--host-tol", type=float, default=1e-3)
    args = ap.parse_args()
    args.force_balance = args.backend != "cpu"
    if args.force_balance:
        print(f"every layout routes by forced balance on the {args.backend} backend")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    os.makedirs(args.work, exist_ok=True)
    wanted = set(filter(None, args.only.split(",")))
    start = time.time()
    err = run_layout(args, env, "one_rank", 1, "tp = 1", None)
    if err:
        print(f"one_rank: {err}")
        return 1
    print(f"one_rank: ran in {time.time() - start:.1f} s")
    ref = os.path.join(args.work, "one_rank", "dump")
    # Control: the comparison must tell runs apart. A one-rank run from
    # another seed (other initial weights and data) must mismatch.
    err = run_layout(args, env, "control", 1, "tp = 1", None, ("--seed", "99"))
    problems = [err] if err else compare_dumps.compare(ref, os.path.join(args.work, "control", "dump"), args.tol)[0]
    if err or not problems:
        print(f"control: {'run failed: ' + err if err else 'a run from another seed compared equal'}")
        return 1
    print(f"control (other seed): told apart ({len(problems)} mismatches)")
    if args.backend != "cpu" and not check_against_host(args, env, ref):
        return 1
    refs = {"": ref}
    for prefix in MODELS:
        if wanted and not any(n.startswith(prefix) for n in wanted):
            continue
        err = run_layout(args, env, prefix + "one_rank", 1, "tp = 1", None)
        if err:
            print(f"{prefix}one_rank: {err}")
            return 1
        refs[prefix] = os.path.join(args.work, prefix + "one_rank", "dump")
        print(f"{prefix}one_rank: ran")
    if "bias_" in refs:
        # The biases must have moved, or the bias layouts test nothing of the update.
        biases = {n: v for n, (_, v) in compare_dumps.read_run(refs["bias_"], "params").items() if "expert_bias" in n}
        if not biases or not all(any(x != 0 for x in v) for v in biases.values()):
            print("bias_one_rank: the expert biases are missing from the dump or did not move")
            return 1
        print("bias_one_rank: its expert biases moved")
    if args.backend == "cpu" and "fb_" in refs and not compare_dumps.compare(ref, refs["fb_"], args.tol)[0]:
        # The same model and data routed by the router: forcing must have changed the run.
        print("fb_one_rank: equals the unforced one-rank run; moe.force_balance did nothing")
        return 1
    failed = []
    for name, ranks, parallel, recompute in LAYOUTS:
        if wanted and name not in wanted:
            continue
        t0 = time.time()
        distopt = name.endswith("_distopt")
        err = run_layout(args, env, name, ranks, parallel, recompute,
                         ("--distributed-optimizer",) if distopt else ())
        if err is None:
            problems, worst = compare_dumps.compare(refs[model_of(name)[0]],
                                                    os.path.join(args.work, name, "dump"), args.tol,
                                                    ("params",) if distopt else ("grads", "params"))
            if problems:
                err = "MISMATCH\n  " + "\n  ".join(problems[:15])
        status = "match" if err is None else err
        extra = f", worst rel error {worst:.1e}" if err is None else ""
        print(f"{name} ({ranks} ranks): {status}{extra} [{time.time() - t0:.1f} s]")
        sys.stdout.flush()
        if err:
            failed.append(name)
    print(f"{len(failed)} of {len(LAYOUTS) if not wanted else len(wanted)} layouts failed"
          f"{': ' + ', '.join(failed) if failed else ''}; total {time.time() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
