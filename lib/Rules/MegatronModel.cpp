//===- MegatronModel.cpp - Megatron-Core start-up rules ---------------===//
//
// Sections 1-6 of bench/reference/megatron-rules.md (parallel
// decomposition, model shape, pipeline, batch, context parallel, MoE core
// and router) that Structural.cpp and Sema do not already cover, and the
// checks Megatron leaves to model build or the first forward (top-k, expert
// TP). docs/rules.md ("Megatron-Core rule map") maps every rule of these sections.
//
//===----------------------------------------------------------------------===//
#include "moec/Basic/Quantity.h"
#include "moec/Rules/RuleEngine.h"
#include <fmt/format.h>

using namespace moec;

namespace {
std::string tokens(int64_t N) { return Quantity::integer(N).format(); }

/// Sequence parallelism as Megatron runs it: validate_args turns it off at TP = 1.
bool effectiveSP(const ParallelConfig &P) { return P.SequenceParallel && P.TP > 1; }

/// Total intermediate size of the shared experts, or 0 without shared experts.
int64_t sharedExpertFfn(const MoESpec &S) {
  if (S.SharedExperts <= 0)
    return 0;
  return S.SharedFfnHidden.getValueOr(S.SharedExperts * S.FfnHidden);
}

/// Whether the model has dense (non-MoE) FFN layers.
bool hasDenseFfn(const ModelSpec &M) { return !M.isMoE() || M.MoE->DenseLayers > 0; }
} // namespace

namespace moec::rules {

//--- Parallel decomposition ---------------------------------------------------

void check_sp_without_tp(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (!P.SequenceParallel || P.TP != 1)
    return;
  auto B = C.report(diag::sp_without_tp, "parallel.sp");
  C.fixit(B, "parallel.sp", "false");
}

void check_tp_comm_overlap_needs_sp(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (!P.TpCommOverlap || effectiveSP(P))
    return;
  if (P.TP == 1) {
    auto B = C.report(diag::tp_comm_overlap_needs_sp, "parallel.tp_comm_overlap",
                      "tp_comm_overlap needs sequence parallelism, which Megatron turns off at tp = 1: there is no "
                      "tensor-parallel communication to overlap (set tp_comm_overlap = false)");
    C.fixit(B, "parallel.tp_comm_overlap", "false");
    return;
  }
  auto B = C.report(diag::tp_comm_overlap_needs_sp, "parallel.tp_comm_overlap",
                    fmt::format("tp_comm_overlap needs sequence parallelism, but parallel.sp is false at tp = {} "
                                "(set sp = true)",
                                P.TP));
  C.fixit(B, "parallel.sp", "true");
}

void check_rank_order_grid_mismatch(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (P.Order != RankOrder::TpCpEpPpDp || P.PP <= 1 || P.DP <= 0 || P.EDP <= 0 || P.DP == P.EDP)
    return;
  auto B = C.report(diag::rank_order_grid_mismatch, "parallel.order", P.PP, P.TP * P.CP, P.ETP * P.EP, P.DP, P.EDP);
  C.fixit(B, "parallel.order", "tp_cp_ep_dp_pp");
}

void check_torch_fsdp_unsupported(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (!P.FSDP || P.FsdpKind != FsdpImpl::Torch)
    return;
  if (P.PP > 1)
    C.report(diag::torch_fsdp_unsupported, "parallel.pp",
             fmt::format("torch FSDP2 does not support pipeline parallelism, but pp = {} (use pp = 1, or "
                         "fsdp_impl = megatron)",
                         P.PP));
  if (P.EP > 1)
    C.report(
        diag::torch_fsdp_unsupported, "parallel.ep",
        fmt::format("torch FSDP2 does not support expert parallelism, but ep = {} (use fsdp_impl = megatron)", P.EP));
  if (R.Optimizer.Distributed) {
    auto B = C.report(diag::torch_fsdp_unsupported, "optimizer.distributed",
                      "torch FSDP2 shards the optimizer state itself and refuses Megatron's distributed optimizer "
                      "(set optimizer.distributed = false)");
    // Overlapped parameter gathering (on by default) needs the distributed
    // optimizer; turn it off with it when the recipe left it at its default.
    bool OverlapDefault = R.Optimizer.OverlapParamGather && R.origin("optimizer.overlap_param_gather").IsDefault;
    C.fixit(B, "optimizer.distributed", OverlapDefault ? "false; overlap_param_gather = false" : "false");
  }
}

void check_megatron_fsdp_distributed_optimizer(RuleContext &C) {
  const Recipe &R = C.R;
  if (!R.Parallel.FSDP || R.Parallel.FsdpKind != FsdpImpl::Megatron || R.Optimizer.Distributed)
    return;
  auto B = C.report(diag::megatron_fsdp_distributed_optimizer, "optimizer.distributed");
  C.fixit(B, "optimizer.distributed", "true");
}

//--- Model shape vs TP/CP -----------------------------------------------------

void check_ffn_tp_divisible(RuleContext &C) {
  const ModelSpec &M = C.R.Model;
  int64_t TP = C.R.Parallel.TP;
  if (!M.FfnHidden || !hasDenseFfn(M) || *M.FfnHidden % TP == 0)
    return;
  C.report(diag::ffn_tp_divisible, "parallel.tp", *M.FfnHidden, M.Name, TP, *M.FfnHidden % TP);
}

void check_shared_expert_ffn_tp_divisible(RuleContext &C) {
  if (!C.isMoE())
    return;
  int64_t Shared = sharedExpertFfn(*C.R.Model.MoE), TP = C.R.Parallel.TP;
  if (Shared > 0 && Shared % TP != 0)
    C.report(diag::shared_expert_ffn_tp_divisible, "parallel.tp", Shared, C.R.Model.Name, TP, Shared % TP);
}

void check_expert_ffn_etp_divisible(RuleContext &C) {
  if (!C.isMoE())
    return;
  int64_t Ffn = C.R.Model.MoE->FfnHidden, ETP = C.R.Parallel.ETP;
  if (Ffn % ETP == 0)
    return;
  auto B = C.report(diag::expert_ffn_etp_divisible, "parallel.etp", Ffn, C.R.Model.Name, ETP, Ffn % ETP);
  C.fixit(B, "parallel.etp", "1");
}

void check_mla_kv_heads(RuleContext &C) {
  const ModelSpec &M = C.R.Model;
  if (M.MLA && M.KvHeads != M.Heads)
    C.report(diag::mla_kv_heads, "model", M.Name, M.KvHeads, M.Heads);
}

void check_max_seq_len_exceeded(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Model.MaxSeqLen && R.SeqLen > *R.Model.MaxSeqLen)
    C.report(diag::max_seq_len_exceeded, "seq_len", tokens(R.SeqLen), tokens(*R.Model.MaxSeqLen), R.Model.Name);
}

void check_linear_attention_heads_divisible(RuleContext &C) {
  const ModelSpec &M = C.R.Model;
  if (!M.LinearAttention)
    return;
  const LinearAttentionSpec &L = *M.LinearAttention;
  if (L.KeyHeads > 0 && L.ValueHeads % L.KeyHeads != 0) {
    C.report(diag::linear_attention_heads_divisible, "model",
             fmt::format("{} has {} linear-attention value heads, not a multiple of its {} key heads", M.Name,
                         L.ValueHeads, L.KeyHeads));
    return;
  }
  const ParallelConfig &P = C.R.Parallel;
  // Before 0.20 linear-attention-cp refuses every cp > 1.
  bool SplitsOverCp = C.coreMinor() >= 20;
  for (auto [Kind, Heads] : {std::pair<const char *, int64_t>{"key", L.KeyHeads}, {"value", L.ValueHeads}}) {
    if (Heads % P.TP != 0) {
      C.report(diag::linear_attention_heads_divisible, "parallel.tp",
               fmt::format("{} linear-attention {} heads do not divide over tp = {}", Heads, Kind, P.TP));
      return;
    }
    if (SplitsOverCp && (Heads / P.TP) % P.CP != 0) {
      C.report(diag::linear_attention_heads_divisible, "parallel.cp",
               fmt::format("{} linear-attention {} heads per tensor-parallel rank ({} / tp {}) do not divide over "
                           "cp = {}",
                           Heads / P.TP, Kind, Heads, P.TP, P.CP));
      return;
    }
  }
}

void check_linear_attention_cp(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Model.LinearAttention && R.Parallel.CP > 1 && C.coreMinor() < 20) {
    auto B = C.report(diag::linear_attention_cp, "parallel.cp", R.Model.Name, R.Parallel.CP);
    C.fixit(B, "parallel.cp", "1");
  }
}

void check_gdn_fp8_alignment(RuleContext &C) {
  const Recipe &R = C.R;
  bool FP8 = R.Prec == Precision::FP8Delayed || R.Prec == Precision::FP8Tensorwise ||
             R.Prec == Precision::FP8Blockwise || R.Prec == Precision::MXFP8;
  if (!R.Model.LinearAttention || !FP8)
    return;
  const LinearAttentionSpec &L = *R.Model.LinearAttention;
  int64_t InProj = 2 * L.KeyHeads * L.HeadDim + 2 * L.ValueHeads * L.HeadDim + 2 * L.ValueHeads;
  int64_t Align = R.Prec == Precision::MXFP8 ? 32 : 16;
  if (InProj % Align != 0)
    C.report(diag::gdn_fp8_alignment, "precision", R.Model.Name, InProj, Align, precisionName(R.Prec));
}

//--- Context parallel -------------------------------------------------------------

void check_mla_cp_comm(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (!R.Model.MLA || P.CP <= 1 || (P.CpCommKind != CpComm::A2A && P.CpCommKind != CpComm::AllGather))
    return;
  const MLASpec &M = *R.Model.MLA;
  if (M.QkHeadDim + M.QkRopeHeadDim == M.VHeadDim)
    return;
  auto B = C.report(diag::mla_cp_comm, "parallel.cp_comm", P.CpCommKind == CpComm::A2A ? "a2a" : "allgather");
  C.fixit(B, "parallel.cp_comm", "p2p");
}

void check_cp_hierarchy_product(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (P.CpHierarchy.empty())
    return;
  __int128 Product = 1;
  for (int64_t Size : P.CpHierarchy)
    Product = std::min<__int128>(Product * Size, __int128(INT64_MAX));
  if (Product == P.CP)
    return;
  auto B = C.report(diag::cp_hierarchy_product, "parallel.cp_hierarchy", int64_t(Product), P.CP);
  // Keep the inner levels and size the outermost one to make up cp, when that is exact.
  if (P.CpHierarchy.size() < 2)
    return;
  int64_t Inner = 1;
  for (size_t I = 0; I + 1 < P.CpHierarchy.size(); ++I)
    Inner *= P.CpHierarchy[I];
  if (Inner <= 0 || P.CP % Inner != 0 || P.CP / Inner < 2)
    return;
  std::string Sizes;
  for (size_t I = 0; I + 1 < P.CpHierarchy.size(); ++I)
    Sizes += fmt::format("{}, ", P.CpHierarchy[I]);
  C.fixit(B, "parallel.cp_hierarchy", fmt::format("[{}{}]", Sizes, P.CP / Inner));
}

void check_cp_hierarchy_required(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (P.CpCommKind == CpComm::A2AP2P && P.CpHierarchy.empty())
    C.report(diag::cp_hierarchy_required, "parallel.cp_comm", P.CP);
}

void check_cp_a2a_heads(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (P.CP <= 1 || (P.CpCommKind != CpComm::A2A && P.CpCommKind != CpComm::A2AP2P))
    return;
  int64_t Group = P.CP;
  if (P.CpCommKind == CpComm::A2AP2P) {
    if (P.CpHierarchy.empty())
      return; // cp-hierarchy-required reports it
    Group = P.CpHierarchy.front();
  }
  if (Group <= 1 || R.Model.Heads % P.TP != 0)
    return; // heads-divisible reports a TP split that does not work
  int64_t Heads = R.Model.Heads / P.TP;
  int64_t KvHeads = std::max<int64_t>(R.Model.KvHeads / P.TP, 1);
  const char *Path = P.CpCommKind == CpComm::A2AP2P ? "parallel.cp_hierarchy" : "parallel.cp";
  if (Heads % Group != 0)
    C.report(diag::cp_a2a_heads, Path, Heads, "attention", Group);
  else if (KvHeads % Group != 0)
    C.report(diag::cp_a2a_heads, Path, KvHeads, "key/value", Group);
}

//--- MoE core and router ------------------------------------------------------------

void check_ep_without_experts(RuleContext &C) {
  if (C.isMoE() || C.R.Parallel.EP <= 1)
    return;
  auto B = C.report(diag::ep_without_experts, "parallel.ep", C.R.Parallel.EP, C.R.Model.Name);
  C.fixit(B, "parallel.ep", "1");
}

void check_dense_layers_exceed_layers(RuleContext &C) {
  const ModelSpec &M = C.R.Model;
  if (M.isMoE() && M.MoE->DenseLayers > M.Layers)
    C.report(diag::dense_layers_exceed_layers, "model", M.Name, M.MoE->DenseLayers, M.Layers);
}

void check_grouped_gemm_unsupported(RuleContext &C) {
  const Recipe &R = C.R;
  // The CPU backend (arch cpu, SM 0) runs no CUDA kernels at all.
  if (!C.isMoE() || !R.MoE.GroupedGemm || R.Gpu.Arch == GpuArch::Cpu || R.Gpu.SM >= 80)
    return;
  auto B = C.report(diag::grouped_gemm_unsupported, "moe.grouped_gemm", R.Gpu.Name, R.Gpu.SM);
  C.fixit(B, "moe.grouped_gemm", "false");
}

void check_top_1_softmax(RuleContext &C) {
  if (!C.isMoE())
    return;
  const MoESpec &S = *C.R.Model.MoE;
  if (S.TopK == 1 && S.RouterKind == Router::Softmax && !S.PreSoftmax)
    C.report(diag::top_1_softmax, "model", C.R.Model.Name);
}

void check_expert_groups_invalid(RuleContext &C) {
  if (!C.isMoE())
    return;
  const MoESpec &S = *C.R.Model.MoE;
  if (!S.GroupTopK)
    return;
  const std::string &Name = C.R.Model.Name;
  if (!S.Groups)
    C.report(diag::expert_groups_invalid, "model",
             fmt::format("{} sets moe.group_top_k = {} without moe.groups; group-limited routing needs the number "
                         "of expert groups",
                         Name, *S.GroupTopK));
  else if (S.Experts % *S.Groups != 0)
    C.report(diag::expert_groups_invalid, "model",
             fmt::format("the {} experts of {} do not divide into moe.groups = {}", S.Experts, Name, *S.Groups));
  else if (*S.GroupTopK > *S.Groups)
    C.report(diag::expert_groups_invalid, "model",
             fmt::format("{} sets moe.group_top_k = {}, more than its moe.groups = {}", Name, *S.GroupTopK, *S.Groups));
}

namespace {
/// Group-limited routing that expert-groups-invalid accepts: {experts per group, group_top_k}.
llvm::Optional<std::pair<int64_t, int64_t>> validGroups(const RuleContext &C) {
  if (!C.isMoE())
    return llvm::None;
  const MoESpec &S = *C.R.Model.MoE;
  if (!S.GroupTopK || !S.Groups || *S.Groups <= 0 || S.Experts % *S.Groups != 0 || *S.GroupTopK > *S.Groups)
    return llvm::None;
  return std::make_pair(S.Experts / *S.Groups, *S.GroupTopK);
}
} // namespace

void check_group_top_k_unreachable(RuleContext &C) {
  auto G = validGroups(C);
  if (!G)
    return;
  auto [PerGroup, GroupTopK] = *G;
  int64_t TopK = C.R.Model.MoE->TopK;
  if (PerGroup < TopK / GroupTopK)
    C.report(diag::group_top_k_unreachable, "model",
             fmt::format("each expert group holds {} experts, fewer than the top_k / group_top_k = {} that group "
                         "scoring takes from it",
                         PerGroup, TopK / GroupTopK));
  else if (PerGroup * GroupTopK < TopK)
    C.report(diag::group_top_k_unreachable, "model",
             fmt::format("the {} selected expert groups hold {} experts, fewer than top_k = {}", GroupTopK,
                         PerGroup * GroupTopK, TopK));
}

void check_group_top_k_uneven(RuleContext &C) {
  auto G = validGroups(C);
  if (!G)
    return;
  int64_t TopK = C.R.Model.MoE->TopK, GroupTopK = G->second;
  if (TopK % GroupTopK != 0)
    C.report(diag::group_top_k_uneven, "model", TopK, GroupTopK, TopK / GroupTopK);
}

void check_expert_bias_needs_sigmoid(RuleContext &C) {
  if (C.isMoE() && C.R.Model.MoE->ExpertBias && C.R.Model.MoE->RouterKind != Router::Sigmoid)
    C.report(diag::expert_bias_needs_sigmoid, "model", C.R.Model.Name);
}

void check_pad_needs_capacity(RuleContext &C) {
  if (C.isMoE() && C.R.MoE.PadToCapacity && !C.R.MoE.CapacityFactor)
    C.report(diag::pad_needs_capacity, "moe.pad_to_capacity");
}

void check_top_k_exceeds_experts(RuleContext &C) {
  if (C.isMoE() && C.R.Model.MoE->TopK > C.R.Model.MoE->Experts)
    C.report(diag::top_k_exceeds_experts, "model", C.R.Model.Name, C.R.Model.MoE->TopK, C.R.Model.MoE->Experts);
}

} // namespace moec::rules
