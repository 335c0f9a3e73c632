//===- Vlm.cpp - Practice rules of the VLM MoE seed -----------------------===//
//
// From bench/reference/seeds/moe-vlm-training.fr.txt: FSDP first, real data,
// frozen vision for decoder work, ETP only when EP is not enough, HybridEP on
// GB200-class systems, safe CUDA-graph scopes, coupled recompute and graphs.
//
//===----------------------------------------------------------------------===//
#include "moec/Rules/RuleEngine.h"
#include "llvm/ADT/STLExtras.h"

using namespace moec;

namespace moec::rules {

void check_vlm_fsdp_first(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t Grid = R.Parallel.TP * R.Parallel.PP;
  if (R.Model.isVLM() && !R.Parallel.FSDP && Grid > 1)
    C.report(diag::vlm_fsdp_first, R.Parallel.PP > 1 ? "parallel.pp" : "parallel.tp", Grid);
}

void check_vlm_mock_data(RuleContext &C) {
  if (C.R.Model.isVLM() && C.R.Data == DataSourceKind::Mock)
    C.report(diag::vlm_mock_data, "data.source");
}

void check_vlm_freeze_vision(RuleContext &C) {
  if (C.R.Model.isVLM() && !C.R.VisionFrozen)
    C.report(diag::vlm_freeze_vision, "vision.frozen");
}

void check_etp_not_free(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (!C.isMoE() || P.ETP <= 1)
    return;
  int64_t Combined = P.EP * P.ETP;
  if (R.Model.MoE->Experts % Combined != 0)
    return;
  auto B = C.report(diag::etp_not_free, "parallel.etp", P.ETP, R.Model.MoE->Experts, Combined);
  const Provenance &EP = R.origin("parallel.ep"), &ETP = R.origin("parallel.etp");
  // With ep left at its default there is no ep entry to rewrite: the etp
  // entry becomes `ep = EP x ETP; etp = 1`.
  if (EP.IsDefault && !ETP.IsDefault && ETP.EntryRange.Start.isValid() && ETP.PathRange.Start.isValid()) {
    std::string Written(ETP.PathRange.Start.getPointer(), ETP.PathRange.End.getPointer());
    std::string Prefix = Written.substr(0, Written.size() - strlen("etp"));
    B.fixit(ETP.EntryRange, Prefix + "ep = " + std::to_string(Combined) + "; " + Written + " = 1");
    return;
  }
  // One fix-it per entry, so that each replacement covers the text it replaces.
  C.fixit(B, "parallel.ep", std::to_string(Combined));
  if (!ETP.IsDefault && ETP.EntryRange.Start.getPointer() != EP.EntryRange.Start.getPointer())
    C.fixit(B, "parallel.etp", "1");
}

void check_hybridep_on_nvl72(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && C.isNVL72() && R.Gpu.Arch == GpuArch::Blackwell && R.Dispatch != Dispatcher::HybridEP &&
      R.Parallel.EP > 1)
    C.report(diag::hybridep_on_nvl72, "dispatcher", R.Gpu.Name);
}

void check_cuda_graph_moe_scope(RuleContext &C) {
  const Recipe &R = C.R;
  if (!C.isMoE() || R.MoE.dropAndPad())
    return;
  // Megatron refuses 'moe' without drop-and-pad (cuda-graph-moe-drop-and-pad,
  // an error), and 'mlp' when every layer is MoE (cuda-graph-mlp-all-moe).
  bool EveryLayerMoE = R.Model.MoE->DenseLayers == 0;
  for (GraphScope S : R.CudaGraph)
    if (S == GraphScope::Mlp && !EveryLayerMoE) {
      C.report(diag::cuda_graph_moe_scope, "cuda_graph", graphScopeName(S));
      return;
    }
}

void check_recompute_graph_coupled(RuleContext &C) {
  const Recipe &R = C.R;
  bool SweepsBoth = llvm::is_contained(R.SweptFields, "recompute") && llvm::is_contained(R.SweptFields, "cuda_graph");
  if (SweepsBoth) {
    C.report(diag::recompute_graph_coupled, "cuda_graph", "this sweep varies recompute and cuda_graph together");
    return;
  }
  if (R.Model.isVLM() && !R.CudaGraph.empty() && R.Recompute.Kind == RecomputeKind::Full)
    C.report(diag::recompute_graph_coupled, "cuda_graph", "CUDA graphs with full recompute on a VLM");
}

} // namespace moec::rules
