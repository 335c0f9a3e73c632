//===- LongContext.cpp - Practice rules of the long-context seed ----------===//
//
// From bench/reference/seeds/moe-long-context.fr.txt: size CP for ~4K-token
// shards, keep DP alive, prefer selective recompute, avoid attention
// recompute at very long context, and the pitfalls around CUDA graphs.
//
//===----------------------------------------------------------------------===//
#include "moec/Basic/Quantity.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace moec;

namespace {
constexpr int64_t ShardTarget = 4096;
constexpr int64_t LongContext = 32 * 1024;
constexpr int64_t VeryLongContext = 128 * 1024;

std::string tokens(int64_t N) { return Quantity::integer(N).format(); }

int64_t roundToPowerOfTwo(double X) {
  if (X <= 1)
    return 1;
  int64_t Lo = 1;
  while (Lo * 2 <= X)
    Lo *= 2;
  return (X / Lo) < (2.0 * Lo / X) ? Lo : Lo * 2;
}

bool hasGraphs(const Recipe &R) { return !R.CudaGraph.empty(); }
} // namespace

namespace moec::rules {

void check_cp_shard_size(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.SeqLen <= ShardTarget)
    return;
  int64_t Shard = C.shardTokens();
  if (Shard <= 2 * ShardTarget && Shard >= ShardTarget / 2)
    return;
  // Small shards without CP come from TP (sequence parallel): CP cannot help.
  if (Shard < ShardTarget / 2 && R.Parallel.CP <= 1)
    return;
  int64_t TPSplit = R.Parallel.SequenceParallel ? R.Parallel.TP : 1;
  int64_t Suggested = roundToPowerOfTwo(double(R.SeqLen) / ShardTarget / TPSplit);
  auto B = C.report(diag::cp_shard_size, "parallel.cp", R.Parallel.CP, tokens(Shard), Suggested);
  Recipe V = R;
  V.Parallel.CP = Suggested;
  if (Suggested != R.Parallel.CP && C.variantAcceptable(V))
    C.fixit(B, "parallel.cp", std::to_string(Suggested));
}

void check_dp_collapsed(RuleContext &C) {
  if (C.R.SeqLen > ShardTarget && C.R.Parallel.DP == 1)
    C.report(diag::dp_collapsed, "parallel.cp", tokens(C.R.SeqLen));
}

void check_prefer_selective_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Recompute.Kind != RecomputeKind::Full || R.SeqLen <= ShardTarget)
    return;
  // Only modules the model has: moe_act needs grouped-GEMM experts, and mlp
  // recomputes dense MLP layers only (a no-op on an all-MoE model).
  Recipe Selective = R;
  Selective.Recompute = RecomputeConfig();
  Selective.Recompute.Kind = RecomputeKind::Selective;
  if (R.Model.MLA)
    Selective.Recompute.Modules.push_back(RecomputeModule::MlaUpProj);
  Selective.Recompute.Modules.push_back(RecomputeModule::LayerNorm);
  if (R.Model.isMoE() && R.MoE.GroupedGemm)
    Selective.Recompute.Modules.push_back(RecomputeModule::MoeAct);
  if (!R.Model.isMoE() || R.Model.MoE->DenseLayers > 0)
    Selective.Recompute.Modules.push_back(RecomputeModule::Mlp);
  // Full recompute is the right call when no selective set fits.
  if (llvm::Optional<MemoryEstimate> M = C.memoryOf(Selective); M && !M->fits())
    return;
  std::vector<std::string> Names;
  for (RecomputeModule Mod : Selective.Recompute.Modules)
    Names.push_back(recomputeModuleName(Mod).str());
  auto B = C.report(diag::prefer_selective_recompute, "recompute", tokens(R.SeqLen));
  C.fixit(B, "recompute", "selective(" + llvm::join(Names, ", ") + ")");
}

void check_attn_recompute_long_context(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Recompute.Kind == RecomputeKind::Selective && R.SeqLen >= LongContext &&
      llvm::is_contained(R.Recompute.Modules, RecomputeModule::CoreAttn))
    C.report(diag::attn_recompute_long_context, "recompute", tokens(R.SeqLen));
}

void check_nvl72_tp_lever(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isNVL72() && R.Parallel.CP >= 8 && R.Parallel.TP == 1)
    C.report(diag::nvl72_tp_lever, "parallel.cp", R.Gpu.Name, R.Parallel.CP, R.Gpu.NVLinkDomain);
}

void check_gbs_accumulation(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t M = C.microbatches();
  if (M > 64)
    C.report(diag::gbs_accumulation, "batch.global", M, R.GlobalBatch, R.MicroBatch, R.Parallel.DP);
}

void check_cp_without_ep(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && R.Parallel.CP > 1 && R.Parallel.EP == 1)
    C.report(diag::cp_without_ep, "parallel.cp", R.Parallel.CP, R.Model.MoE->Experts);
}

void check_short_baseline_long_context(RuleContext &C) {
  const Recipe &R = C.R;
  if (!R.BaseSeqLen || *R.BaseSeqLen > ShardTarget || R.SeqLen < LongContext)
    return;
  auto Inherited = [&](llvm::StringRef Path) {
    const Provenance &P = R.origin(Path);
    return P.IsDefault || P.Chain.size() > 1;
  };
  if (Inherited("recompute") && Inherited("dispatcher") && Inherited("offload.optimizer"))
    C.report(diag::short_baseline_long_context, "seq_len", R.Name, tokens(*R.BaseSeqLen), R.Base, tokens(R.SeqLen));
}

void check_gpu_count_infeasible(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (R.WorldSize <= 0)
    return;
  __int128 Dense = __int128(P.TP) * P.CP, Expert = __int128(P.ETP) * P.EP;
  __int128 Needed = __int128(P.PP) * std::max(Dense, Expert);
  if (Needed <= R.WorldSize)
    return;
  // The largest layout that fits: with this pp, each stage has W / pp GPUs.
  std::string Fits = P.PP > R.WorldSize
                         ? "pp = " + std::to_string(P.PP) + " alone exceeds it"
                         : "with pp = " + std::to_string(P.PP) + ", tp x cp and etp x ep can be at most " +
                               std::to_string(R.WorldSize / P.PP);
  // Report at the entry that overshoots: pp, else the larger factor of the larger product.
  const char *Path = "parallel.pp";
  if (P.PP == 1)
    Path = Expert >= Dense ? (P.EP >= P.ETP ? "parallel.ep" : "parallel.etp")
                           : (P.CP >= P.TP ? "parallel.cp" : "parallel.tp");
  C.report(diag::gpu_count_infeasible, Path, int64_t(std::min<__int128>(Needed, INT64_MAX)), P.PP,
           int64_t(std::min<__int128>(Dense, INT64_MAX)), int64_t(std::min<__int128>(Expert, INT64_MAX)), R.WorldSize,
           Fits);
}

void check_cuda_graph_dynamic_shapes(RuleContext &C) {
  if (hasGraphs(C.R) && C.R.VariableLength)
    C.report(diag::cuda_graph_dynamic_shapes, "cuda_graph");
}

void check_cuda_graph_before_stable(RuleContext &C) {
  if (hasGraphs(C.R) && C.R.Recompute.Kind == RecomputeKind::Full)
    C.report(diag::cuda_graph_before_stable, "cuda_graph");
}

void check_long_context_kernels(RuleContext &C) {
  if (C.R.SeqLen >= VeryLongContext)
    C.report(diag::long_context_kernels, "seq_len", tokens(C.R.SeqLen));
}

void check_long_context_offload(RuleContext &C) {
  if (C.R.SeqLen >= VeryLongContext && C.R.OffloadOptimizer == 0)
    C.report(diag::long_context_offload, "offload.optimizer", tokens(C.R.SeqLen));
}

void check_recompute_module_alias(RuleContext &C) {
  for (const auto &[Alias, Range] : C.R.Recompute.Aliases) {
    std::string Name = Alias == "up_proj" ? "mla_up_proj" : "layernorm";
    C.reportAt(diag::recompute_module_alias, Range, "recompute", Alias, Name).fixit(Range, Name);
  }
}

} // namespace moec::rules
