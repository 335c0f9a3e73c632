"""Seeded random generator of MoE training configurations for the Megatron differential suite.

Each configuration is drawn once as abstract choices and then written out twice,
independently:
  * "moe":    the `.moe` recipe text that moec checks (docs/language.md), and
  * "bridge": the Megatron-Bridge 0.3.1 field settings the oracle applies to the Bridge
              recipe (test/megatron/oracle.py), written from the Bridge/Megatron-Core
              field names directly, never from `moec export`.
The draw is biased towards valid settings (sizes that divide, layers that split over
the pipeline) so that a good share is accepted, with a minority of deliberate
perturbations so that each start-up check is exercised.
"""

import json
import random
import sys

MODELS = {
    # name: layers, has shared experts, mtp layers, linear attention
    "qwen3_30b_a3b": dict(layers=48, shared=False, mtp=0),
    "qwen3_235b_a22b": dict(layers=94, shared=False, mtp=0),
    "deepseek_v3": dict(layers=61, shared=True, mtp=1),
    "qwen3_next_80b_a3b": dict(layers=48, shared=True, mtp=1),
}
GPUS = ["h100_sxm", "h200_sxm", "b200", "b300", "gb200_nvl72", "gb300_nvl72"]
PRECISIONS = {
    "bf16": "bf16_mixed",
    "fp8.delayed": "bf16_with_fp8_delayed_scaling_mixed",
    "fp8.tensorwise": "bf16_with_fp8_current_scaling_mixed",
    "fp8.blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
DISPATCHERS = {"alltoall": ("alltoall", None), "allgather": ("allgather", None),
               "deepep": ("flex", "deepep"), "hybridep": ("flex", "hybridep")}
CP_COMM = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather", "a2a_p2p": "a2a+p2p"}
RECOMPUTE_MODULES = ["core_attn", "moe_act", "layernorm", "mlp", "moe", "shared_experts", "mla_up_proj"]
GRAPH_SCOPES = ["attn", "mlp", "moe", "moe_router", "moe_preprocess"]
FP8_PRECISIONS = ("fp8.delayed", "fp8.tensorwise", "fp8.blockwise", "mxfp8")
# optimizer.type -> Bridge OptimizerConfig.optimizer. Bridge 0.3.1 picks Muon by name:
# training/optim.py:62 builds get_megatron_muon_optimizer when "muon" is in the name.
# Muon with optimizer.distributed is "dist_muon", the layer-wise distributed variant
# (optim.py:76), with use_distributed_optimizer off: Muon refuses Megatron's distributed
# optimizer (core muon.py:192).
OPTIMIZERS = {"adam": "adam", "sgd": "sgd", "muon": "muon"}
# moe.router_dtype -> TransformerConfig.moe_router_dtype (Literal['fp32', 'fp64'] or None:
# None computes the router in the parameters' dtype, BF16 here).
ROUTER_DTYPES = {"fp32": "fp32", "fp64": "fp64", "bf16": None}


def _hierarchy(r, cp):
    """parallel.cp_hierarchy: a factorisation of cp (innermost first), rarely a wrong one."""
    if r.random() < 0.1:
        return r.choice([[2, 4], [4, 2], [2], [3], [2, 2, 2]])
    return r.choice({1: [[1]], 2: [[2], [1, 2], [2, 1]], 4: [[2, 2], [4], [1, 4], [4, 1]],
                     8: [[2, 4], [4, 2], [8]]}.get(cp, [[cp]]))


def _w(r, pairs):
    """Weighted choice from [(value, weight), ...]."""
    tot = sum(w for _, w in pairs)
    x = r.random() * tot
    for v, w in pairs:
        x -= w
        if x <= 0:
            return v
    return pairs[-1][0]


def _layout(layers, stages, mtp):
    """An explicit Megatron-Core pipeline layout: E first, (m)L last, decoders spread evenly."""
    base, extra = divmod(layers, stages)
    parts = []
    for s in range(stages):
        n = base + (1 if s >= stages - extra else 0)
        p = ("E" if s == 0 else "") + "t" * n + ("m" * mtp + "L" if s == stages - 1 else "")
        parts.append(p)
    return "|".join(parts)


def draw(r, idx):
    c = {}
    c["model"] = r.choice(list(MODELS))
    mi = MODELS[c["model"]]
    c["gpu"] = r.choice(GPUS)
    c["tp"] = _w(r, [(1, 4), (2, 3), (4, 2), (8, 1)])
    c["cp"] = _w(r, [(1, 6), (2, 2), (4, 1)])
    c["pp"] = _w(r, [(1, 4), (2, 2), (4, 2), (8, 1)])
    c["vpp"] = _w(r, [(1, 6), (2, 2), (4, 1)]) if c["pp"] > 1 else _w(r, [(1, 19), (2, 1)])
    dp = _w(r, [(1, 2), (2, 3), (4, 3), (8, 2), (16, 1)])
    c["etp"] = _w(r, [(1, 6), (c["tp"], 2), (2, 1)])
    gpus = c["tp"] * c["cp"] * c["pp"] * dp
    # EP: a divisor of the expert-data-parallel room (gpus / (etp * pp)) most of the time
    room = max(1, gpus // (c["etp"] * c["pp"]))
    eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if room % e == 0 and e <= room] or [1]
    c["ep"] = r.choice(eps) if r.random() < 0.9 else r.choice([2, 4, 8, 16, 32, 64])
    if r.random() < 0.05:
        gpus += r.choice([-8, 8, 4])
        gpus = max(gpus, 8)
    c["gpus"] = gpus
    c["seq_len"] = _w(r, [(4096, 5), (8192, 3), (32768, 1), (6144, 1), (4000, 0.3)])
    c["micro"] = _w(r, [(1, 5), (2, 2), (4, 1)])
    dpsz = max(1, gpus // (c["tp"] * c["cp"] * c["pp"]))
    c["global"] = c["micro"] * dpsz * _w(r, [(1, 1), (4, 2), (16, 2), (64, 1)])
    if r.random() < 0.07:
        c["global"] += r.choice([1, c["micro"], 3])
    c["sp"] = c["tp"] > 1 if r.random() < 0.85 else (not (c["tp"] > 1))
    c["cp_comm"] = r.choice(list(CP_COMM)) if c["cp"] > 1 and r.random() < 0.6 else None
    # Pipeline layout: DeepSeek-V3's 61 layers (and 94/48 that do not split) need one.
    stages = c["pp"] * c["vpp"]
    c["layout"] = None
    if stages > 1 and (mi["layers"] % stages != 0 or mi["mtp"]) and r.random() < 0.85:
        c["layout"] = _layout(mi["layers"], stages, mi["mtp"])
    c["precision"] = _w(r, [("bf16", 5), ("fp8.delayed", 1), ("fp8.tensorwise", 1.5),
                            ("fp8.blockwise", 1.5), ("mxfp8", 1.5), ("nvfp4", 1)])
    c["dispatcher"] = _w(r, [("alltoall", 5), ("allgather", 1), ("deepep", 2), ("hybridep", 2)])
    rc = _w(r, [("none", 3), ("full", 2), ("selective", 4)])
    if rc == "selective":
        c["recompute"] = ("selective", sorted(r.sample(RECOMPUTE_MODULES, r.choice([1, 1, 2, 3]))))
    else:
        c["recompute"] = (rc, None)
    g = _w(r, [("none", 6), ("scoped", 3), ("full_iteration", 1)])
    if g == "scoped":
        c["cuda_graph"] = sorted(r.sample(GRAPH_SCOPES, r.choice([1, 1, 2, 3])))
        c["cuda_graph_impl"] = _w(r, [("transformer_engine", 3), ("local", 1)])
    elif g == "full_iteration":
        c["cuda_graph"] = ["full_iteration"]
        c["cuda_graph_impl"] = "local"
    else:
        c["cuda_graph"] = None
        c["cuda_graph_impl"] = None
    c["overlap_ep_comm"] = r.random() < 0.15
    c["delay_wgrad"] = c["overlap_ep_comm"] and r.random() < 0.4
    c["shared_expert_overlap"] = r.random() < (0.2 if mi["shared"] else 0.05)
    c["offload_optimizer"] = _w(r, [(0, 8), (0.5, 1), (1.0, 1)])
    c["offload_activations"] = r.random() < 0.07
    c["offload_layers"] = r.choice([1, 2, 4]) if c["offload_activations"] else None
    c["fsdp"] = r.random() < 0.08
    # ---- fields added for the independent generator's coverage (each modest probability) ----
    c["delay_wgrad"] = c["delay_wgrad"] or r.random() < 0.03  # also without the EP overlap
    # parallel.cp_hierarchy: with cp_comm = a2a_p2p mostly, rarely with another cp_comm or cp 1
    c["cp_hierarchy"] = None
    if c["cp_comm"] == "a2a_p2p" and r.random() < 0.85:
        c["cp_hierarchy"] = _hierarchy(r, c["cp"])
    elif r.random() < 0.03:
        c["cp_hierarchy"] = _hierarchy(r, c["cp"])
    c["tp_comm_overlap"] = r.random() < 0.1
    c["order"] = _w(r, [(None, 90), ("tp_cp_ep_pp_dp", 8), ("tp_cp_ep_dp_pp", 2)])
    c["fsdp_impl"] = None
    if c["fsdp"]:
        c["fsdp_impl"] = _w(r, [(None, 5), ("torch", 4), ("megatron", 1)])
        if c["fsdp_impl"] != "torch" and r.random() < 0.3:
            c["order"] = "tp_cp_ep_pp_dp"   # Megatron-FSDP with the tp-pp-dp mapping
    elif r.random() < 0.02:
        c["fsdp_impl"] = "torch"            # stated without fsdp = true: no FSDP
    c["opt_type"] = _w(r, [(None, 85), ("adam", 3), ("sgd", 6), ("muon", 6)])
    dist_false = 0.7 if c["opt_type"] == "muon" else 0.08
    c["opt_distributed"] = _w(r, [(None, 1 - dist_false - 0.03), (False, dist_false), (True, 0.03)])
    c["precision_aware"] = _w(r, [(None, 90), (True, 6), (False, 4)])
    c["overlap_grad_reduce"] = _w(r, [(None, 90), (False, 7), (True, 3)])
    c["overlap_param_gather"] = _w(r, [(None, 88), (False, 9), (True, 3)])
    if c["offload_optimizer"] and r.random() < 0.3:
        c["offload_optimizer"] = r.choice([0.25, 0.75, 0.1])
    if c["offload_activations"] and r.random() < 0.25:
        c["offload_layers"] = _w(r, [(None, 2), (MODELS[c["model"]]["layers"], 1),
                                     (MODELS[c["model"]]["layers"] - 1, 1)])
    if not c["offload_activations"] and r.random() < 0.01:
        c["offload_layers"] = 2             # activation_layers without activations: no effect
    c["capacity_factor"] = _w(r, [(None, 88), (1.0, 4), (1.25, 4), (2.0, 2), (0.5, 2)])
    c["pad_to_capacity"] = ((c["capacity_factor"] is not None and r.random() < 0.5)
                            or r.random() < 0.015)
    c["router_dtype"] = _w(r, [(None, 88), ("fp32", 3), ("fp64", 5), ("bf16", 4)])
    c["grouped_gemm"] = _w(r, [(None, 91), (False, 7), (True, 2)])
    # bf16_layers.first / last (Megatron first_last_layers_bf16), mostly with an FP8 precision
    c["bf16_first"] = c["bf16_last"] = None
    if r.random() < (0.12 if c["precision"] in FP8_PRECISIONS else 0.02):
        vals = [(0, 1), (1, 4), (2, 3), (4, 1), (13, 0.5), (24, 0.5)]
        which = _w(r, [("both", 3), ("first", 1), ("last", 1)])
        if which in ("both", "first"):
            c["bf16_first"] = _w(r, vals)
        if which in ("both", "last"):
            c["bf16_last"] = _w(r, vals)
    c["fp8_param_gather"] = None
    if r.random() < (0.15 if c["precision"] in FP8_PRECISIONS else 0.04):
        c["fp8_param_gather"] = r.random() < 0.5
    # cuda_graph_impl also written for full_iteration (where .moe ignores it), or left to its default
    c["cuda_graph_impl_written"] = c["cuda_graph"] is not None and (
        c["cuda_graph"] != ["full_iteration"] or r.random() < 0.4)
    if c["cuda_graph"] == ["full_iteration"] and c["cuda_graph_impl_written"]:
        c["cuda_graph_impl_moe"] = r.choice(["transformer_engine", "local"])
    elif c["cuda_graph_impl_written"] and c["cuda_graph_impl"] == "transformer_engine" and r.random() < 0.3:
        c["cuda_graph_impl_written"] = False  # the default
        c["cuda_graph_impl_moe"] = None
    else:
        c["cuda_graph_impl_moe"] = c["cuda_graph_impl"] if c["cuda_graph_impl_written"] else None
    # offload.activations = [modules] (fine-grained activation offload), drawn last so that
    # the earlier fields of every case keep their values; never with cpu_offloading.
    c["offload_modules"] = None
    if not c["offload_activations"] and r.random() < 0.06:
        pool = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1",
                "moe_act", "fused_group_mlp"]
        c["offload_modules"] = [m for m in pool if r.random() < 0.3] or [r.choice(pool)]
    # moe.force_balance (moe_router_force_load_balancing), as the perf recipes set it
    c["force_balance"] = _w(r, [(None, 94), (True, 4), (False, 2)])
    return c


def to_moe(name, c):
    L = ["recipe %s {" % name, "  model = %s" % c["model"],
         "  cluster { gpu = %s; gpus = %d }" % (c["gpu"], c["gpus"]),
         "  seq_len = %d" % c["seq_len"],
         "  batch { micro = %d; global = %d }" % (c["micro"], c["global"])]
    p = ["tp = %d" % c["tp"], "cp = %d" % c["cp"], "ep = %d" % c["ep"], "etp = %d" % c["etp"],
         "pp = %d" % c["pp"], "vpp = %d" % c["vpp"], "sp = %s" % str(c["sp"]).lower()]
    if c["cp_comm"]:
        p.append("cp_comm = %s" % c["cp_comm"])
    if c["cp_hierarchy"]:
        p.append("cp_hierarchy = [%s]" % ", ".join(str(x) for x in c["cp_hierarchy"]))
    if c["fsdp"]:
        p.append("fsdp = true")
    if c["fsdp_impl"]:
        p.append("fsdp_impl = %s" % c["fsdp_impl"])
    if c["order"]:
        p.append("order = %s" % c["order"])
    if c["tp_comm_overlap"]:
        p.append("tp_comm_overlap = true")
    if c["layout"]:
        p.append('layout = "%s"' % c["layout"])
    L.append("  parallel { %s }" % "; ".join(p))
    L.append("  precision = %s" % c["precision"])
    if c["fp8_param_gather"] is not None:
        L.append("  fp8_param_gather = %s" % str(c["fp8_param_gather"]).lower())
    bl = []
    if c["bf16_first"] is not None:
        bl.append("first = %d" % c["bf16_first"])
    if c["bf16_last"] is not None:
        bl.append("last = %d" % c["bf16_last"])
    if bl:
        L.append("  bf16_layers { %s }" % "; ".join(bl))
    L.append("  dispatcher = %s" % c["dispatcher"])
    kind, mods = c["recompute"]
    L.append("  recompute = %s" % (("selective(%s)" % ", ".join(mods)) if kind == "selective" else kind))
    if c["cuda_graph"]:
        L.append("  cuda_graph = [%s]" % ", ".join(c["cuda_graph"]))
        if c["cuda_graph_impl_moe"]:
            L.append("  cuda_graph_impl = %s" % c["cuda_graph_impl_moe"])
    else:
        L.append("  cuda_graph = none")
    moe = []
    if c["overlap_ep_comm"]:
        moe.append("overlap_ep_comm = true")
    if c["delay_wgrad"]:
        moe.append("delay_wgrad = true")
    if c["shared_expert_overlap"]:
        moe.append("shared_expert_overlap = true")
    if c["capacity_factor"] is not None:
        moe.append("capacity_factor = %r" % c["capacity_factor"])
    if c["pad_to_capacity"]:
        moe.append("pad_to_capacity = true")
    if c["router_dtype"]:
        moe.append("router_dtype = %s" % c["router_dtype"])
    if c["grouped_gemm"] is not None:
        moe.append("grouped_gemm = %s" % str(c["grouped_gemm"]).lower())
    if c["force_balance"] is not None:
        moe.append("force_balance = %s" % str(c["force_balance"]).lower())
    if moe:
        L.append("  moe { %s }" % "; ".join(moe))
    off = []
    if c["offload_optimizer"]:
        off.append("optimizer = %s" % c["offload_optimizer"])
    if c["offload_activations"]:
        off.append("activations = true")
    elif c["offload_modules"]:
        off.append("activations = [%s]" % ", ".join(c["offload_modules"]))
    if c["offload_layers"] is not None:
        off.append("activation_layers = %d" % c["offload_layers"])
    if off:
        L.append("  offload { %s }" % "; ".join(off))
    opt = []
    if c["opt_type"]:
        opt.append("type = %s" % c["opt_type"])
    for k, f in (("opt_distributed", "distributed"), ("precision_aware", "precision_aware"),
                 ("overlap_grad_reduce", "overlap_grad_reduce"),
                 ("overlap_param_gather", "overlap_param_gather")):
        if c[k] is not None:
            opt.append("%s = %s" % (f, str(c[k]).lower()))
    if opt:
        L.append("  optimizer { %s }" % "; ".join(opt))
    L.append("}")
    return "\n".join(L) + "\n"


def to_bridge(c):
    tok, backend = DISPATCHERS[c["dispatcher"]]
    m = {
        "tensor_model_parallel_size": c["tp"],
        "pipeline_model_parallel_size": c["pp"],
        "virtual_pipeline_model_parallel_size": c["vpp"] if c["vpp"] > 1 else None,
        "context_parallel_size": c["cp"],
        "expert_model_parallel_size": c["ep"],
        "expert_tensor_parallel_size": c["etp"],
        "sequence_parallel": c["sp"],
        "seq_length": c["seq_len"],
        "pipeline_model_parallel_layout": c["layout"],
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
        # .moe has no field for these: an uneven split is written as parallel.layout. Some
        # Bridge recipes (qwen3_235b_a22b_pretrain_config) set both to True, which changes
        # Megatron's layer-split arithmetic and forbids a layout, so they are pinned here.
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "moe_token_dispatcher_type": tok,
        "moe_flex_dispatcher_backend": backend,
        "moe_shared_expert_overlap": c["shared_expert_overlap"],
        "cpu_offloading": c["offload_activations"],
        "cpu_offloading_num_layers": c["offload_layers"] or 0,
        "fine_grained_activation_offloading": bool(c["offload_modules"]),
        "offload_modules": list(c["offload_modules"] or []),
        "hierarchical_context_parallel_sizes": list(c["cp_hierarchy"]) if c["cp_hierarchy"] else None,
        "moe_expert_capacity_factor": c["capacity_factor"],
        "moe_pad_expert_input_to_capacity": c["pad_to_capacity"],
        # .moe defaults: router_dtype fp32, grouped_gemm true (some recipes leave the dtype None)
        "moe_router_dtype": ROUTER_DTYPES[c["router_dtype"] or "fp32"],
        "moe_grouped_gemm": True if c["grouped_gemm"] is None else c["grouped_gemm"],
        "moe_router_force_load_balancing": bool(c["force_balance"]),
    }
    if c["cp"] > 1:
        m["cp_comm_type"] = CP_COMM[c["cp_comm"] or "p2p"]
    kind, mods = c["recompute"]
    if kind == "none":
        m.update(recompute_granularity=None, recompute_method=None, recompute_num_layers=None,
                 recompute_modules=None)
    elif kind == "full":
        m.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                 recompute_modules=None)
    else:
        m.update(recompute_granularity="selective", recompute_method=None, recompute_num_layers=None,
                 recompute_modules=list(mods))
    # optimizer.precision_aware: stated, or derived as offload.optimizer > 0 (docs/language.md)
    pao = bool(c["offload_optimizer"]) if c["precision_aware"] is None else c["precision_aware"]
    b = {"model": m, "train": {"micro_batch_size": c["micro"], "global_batch_size": c["global"]},
         "mixed_precision": PRECISIONS[c["precision"]],
         "optimizer": {"use_precision_aware_optimizer": pao,
                       "optimizer": OPTIMIZERS[c["opt_type"] or "adam"]}}
    if c["cuda_graph"]:
        # full_iteration is captured by the local implementation whatever cuda_graph_impl says
        # (.moe ignores the impl there; Megatron-Core's TE impl refuses full_iteration)
        m["cuda_graph_impl"] = "local" if c["cuda_graph"] == ["full_iteration"] else c["cuda_graph_impl"]
        m["cuda_graph_scope"] = list(c["cuda_graph"])
        m["use_te_rng_tracker"] = True
        b["rng"] = {"te_rng_tracker": True}
        if c["cuda_graph"] == ["full_iteration"]:
            b["rerun_state_machine"] = {"check_for_nan_in_loss": False}
            b["ddp"] = {"check_for_nan_in_grad": False}
    else:
        m["cuda_graph_impl"] = "none"
        m["cuda_graph_scope"] = []
    if not pao:
        # Without the precision-aware optimizer Megatron-Core requires FP32 master grads and
        # moments (its defaults); the DeepSeek-V3 recipe sets BF16 ones for its
        # precision-aware optimizer, so turning that off means resetting them.
        b["optimizer"].update(main_grads_dtype="torch.float32", main_params_dtype="torch.float32",
                              exp_avg_dtype="torch.float32", exp_avg_sq_dtype="torch.float32")
    if c["offload_optimizer"]:
        b["optimizer"].update(optimizer_cpu_offload=True, optimizer_offload_fraction=float(c["offload_optimizer"]))
    # optimizer.distributed: stated, or derived: off under torch FSDP2, else on; and
    # optimizer.overlap_param_gather follows it unless stated (docs/language.md).
    torch_fsdp = bool(c["fsdp"]) and c["fsdp_impl"] == "torch"
    distributed = c["opt_distributed"] if c["opt_distributed"] is not None else not torch_fsdp
    if c["opt_type"] == "muon" and distributed:
        b["optimizer"]["optimizer"] = "dist_muon"
        b["optimizer"]["use_distributed_optimizer"] = False
        b.setdefault("ddp", {})["use_distributed_optimizer"] = False
    elif c["opt_distributed"] is not None or torch_fsdp:
        # Bridge keeps the two in sync, turning both on if either is on (config.py:1888-1900)
        b["optimizer"]["use_distributed_optimizer"] = distributed
        b.setdefault("ddp", {})["use_distributed_optimizer"] = distributed
    overlaps = {k: c[k] for k in ("overlap_grad_reduce", "overlap_param_gather") if c[k] is not None}
    if c["overlap_param_gather"] is None and not distributed:
        overlaps["overlap_param_gather"] = False
    b.setdefault("ddp", {}).update(overlaps)
    if c["overlap_ep_comm"] or c["delay_wgrad"] or c["tp_comm_overlap"]:
        # CommOverlapConfig is Bridge's user-facing switch for these (training/comm_overlap.py)
        b["comm_overlap"] = {"overlap_moe_expert_parallel_comm": c["overlap_ep_comm"],
                             "delay_wgrad_compute": c["delay_wgrad"],
                             "tp_comm_overlap": c["tp_comm_overlap"]}
    if overlaps and ("comm_overlap" in b or c["model"] == "deepseek_v3"):
        # A CommOverlapConfig (deepseek_v3.py:168 sets one) overwrites ddp.overlap_* with its
        # own dp-dependent defaults unless they are given to it (comm_overlap.py:527-549).
        b.setdefault("comm_overlap", {}).update(overlaps)
    if not b["ddp"]:
        del b["ddp"]
    if c["fsdp"] and c["fsdp_impl"] == "torch":
        b["dist"] = {"use_torch_fsdp2": True}
    elif c["fsdp"]:
        b.setdefault("ddp", {}).update(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
        b["checkpoint"] = {"ckpt_format": "fsdp_dtensor"}
    if c["order"]:
        b.setdefault("dist", {})["use_tp_pp_dp_mapping"] = c["order"] == "tp_cp_ep_pp_dp"
    mp = {}
    if c["fp8_param_gather"] is not None:
        # unset: the preset's own value (Bridge presets: true for delayed, tensorwise, mxfp8)
        mp["fp8_param_gather"] = c["fp8_param_gather"]
        if c["precision"] == "mxfp8" and not c["fp8_param_gather"]:
            # the mxfp8 preset's reuse_grad_buf_for_mxfp8_param_ag only applies to FP8
            # parameters (core distributed_data_parallel_config.py:153-154 requires them)
            mp["reuse_grad_buf_for_mxfp8_param_ag"] = False
    if c["bf16_first"] is not None or c["bf16_last"] is not None:
        first, last = c["bf16_first"] or 0, c["bf16_last"] or 0
        mp.update(first_last_layers_bf16=(first + last) > 0, num_layers_at_start_in_bf16=first,
                  num_layers_at_end_in_bf16=last)
    if mp:
        b["mixed_precision_fields"] = mp
    return b


def generate(count, seed):
    r = random.Random(seed)
    out = []
    for i in range(count):
        c = draw(r, i)
        name = "cfg%05d" % i
        out.append({"name": name, "choices": c, "moe": to_moe(name, c),
                    "oracle": {"gpu": c["gpu"], "gpus": c["gpus"], "model_name": c["model"],
                               "bridge": to_bridge(c)}})
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    s = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for g in generate(n, s):
        print(g["moe"])
        print(json.dumps(g["oracle"]))
