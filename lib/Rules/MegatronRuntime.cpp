//===- MegatronRuntime.cpp - Megatron-Core start-up rules ---------------===//
//
// What Megatron-Core (and Megatron-Bridge) refuse at start-up about token
// dispatchers, expert-parallel overlap, activation recompute, CUDA graphs,
// precision, the optimizer and activation offload: megatron-rules.md
// sections 7-13 and bridge-facts.md section 2. The catalog entries are in
// include/moec/Rules/MegatronRuntime.def.
//
//===----------------------------------------------------------------------===//
#include "moec/Layout/PipelineLayout.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

using namespace moec;

namespace {
constexpr int64_t LongContext = 32 * 1024; // where attn-recompute-long-context takes over

bool isFlex(Dispatcher D) { return D == Dispatcher::DeepEP || D == Dispatcher::HybridEP; }
bool isFP8(Precision P) {
  return P == Precision::FP8Delayed || P == Precision::FP8Tensorwise || P == Precision::FP8Blockwise ||
         P == Precision::MXFP8;
}
template <typename E> bool has(const llvm::SmallVectorImpl<E> &L, E S) { return llvm::is_contained(L, S); }
bool recomputes(const Recipe &R, RecomputeModule M) {
  return R.Recompute.Kind == RecomputeKind::Selective && llvm::is_contained(R.Recompute.Modules, M);
}
/// Per-layer CUDA graphs: scopes other than full_iteration (which is the
/// full-iteration implementation, not a module list).
bool perLayerGraphs(const Recipe &R) { return !R.CudaGraph.empty() && !has(R.CudaGraph, GraphScope::FullIteration); }
/// Megatron's cpu_offloading: on when stated; Megatron-LM's validate_args
/// also turns it on for a positive layer count, Megatron-Bridge does not.
bool activationOffload(const Recipe &R) {
  return R.OffloadActivations ||
         (getTargetInfo(R.Tgt).RunsValidateArgs && R.OffloadActivationLayers && *R.OffloadActivationLayers > 0);
}
const char *activationOffloadPath(const Recipe &R) {
  return R.OffloadActivations ? "offload.activations" : "offload.activation_layers";
}
bool everyLayerMoE(const Recipe &R) { return R.Model.isMoE() && R.Model.MoE->DenseLayers == 0; }
/// Expert-parallel overlap that can exist at all (ep-overlap-needs-ep reports
/// the rest); the other overlap rules check only these.
bool epOverlap(const RuleContext &C) {
  return C.R.MoE.OverlapEpComm && C.isMoE() && C.R.Model.MoE->Experts > 1 && C.R.Parallel.EP > 1;
}

bool isWordChar(char C) { return llvm::isAlnum(C) || C == '_'; }

/// The first whole-word occurrence of Word inside Outer, or an invalid range.
llvm::SMRange findWord(llvm::SMRange Outer, llvm::StringRef Word) {
  const char *B = Outer.Start.getPointer(), *E = Outer.End.getPointer();
  if (!B || !E || E <= B)
    return {};
  llvm::StringRef Text(B, E - B);
  for (size_t At = Text.find(Word); At != llvm::StringRef::npos; At = Text.find(Word, At + 1)) {
    size_t End = At + Word.size();
    if ((At == 0 || !isWordChar(Text[At - 1])) && (End == Text.size() || !isWordChar(Text[End])))
      return llvm::SMRange(llvm::SMLoc::getFromPointer(B + At), llvm::SMLoc::getFromPointer(B + End));
  }
  return {};
}

/// The module's token in the recompute value (its Megatron name, or the
/// seeds' shorthand the recipe wrote).
llvm::SMRange moduleToken(const Recipe &R, RecomputeModule M) {
  const Provenance &P = R.origin("recompute");
  if (P.IsDefault)
    return {};
  llvm::SMRange Tok = findWord(P.Range, recomputeModuleName(M));
  if (!Tok.Start.isValid() && M == RecomputeModule::MlaUpProj)
    Tok = findWord(P.Range, "up_proj");
  if (!Tok.Start.isValid() && M == RecomputeModule::LayerNorm)
    Tok = findWord(P.Range, "norm");
  return Tok;
}

llvm::SMRange scopeToken(const Recipe &R, GraphScope S) {
  const Provenance &P = R.origin("cuda_graph");
  return P.IsDefault ? llvm::SMRange() : findWord(P.Range, graphScopeName(S));
}

/// Reports at Token when the recipe's text holds it, else at the entry of Path.
template <typename... Args>
DiagnosticBuilder reportToken(RuleContext &C, diag::ID ID, llvm::SMRange Token, llvm::StringRef Path, Args &&...A) {
  if (Token.Start.isValid())
    return C.reportAt(ID, Token, Path, std::forward<Args>(A)...);
  return C.report(ID, Path, std::forward<Args>(A)...);
}

/// Replaces the value of Path (not the whole entry, so that sweeps keep
/// their other points) when the recipe sets it.
void replaceValue(const RuleContext &C, DiagnosticBuilder &B, llvm::StringRef Path, const std::string &Value) {
  const Provenance &P = C.R.origin(Path);
  if (!P.IsDefault && P.Range.Start.isValid())
    B.fixit(P.Range, Value);
}

std::string recomputeWithout(const Recipe &R, llvm::ArrayRef<RecomputeModule> Drop) {
  std::vector<std::string> Kept;
  for (RecomputeModule M : R.Recompute.Modules)
    if (!llvm::is_contained(Drop, M))
      Kept.push_back(recomputeModuleName(M).str());
  return Kept.empty() ? "none" : "selective(" + llvm::join(Kept, ", ") + ")";
}

std::string scopeList(llvm::ArrayRef<GraphScope> Scopes) {
  if (Scopes.empty())
    return "none";
  std::vector<std::string> Names;
  for (GraphScope S : Scopes)
    Names.push_back(graphScopeName(S).str());
  return "[" + llvm::join(Names, ", ") + "]";
}

std::string scopesWithout(const Recipe &R, llvm::ArrayRef<GraphScope> Drop) {
  llvm::SmallVector<GraphScope, 4> Kept;
  for (GraphScope S : R.CudaGraph)
    if (!llvm::is_contained(Drop, S))
      Kept.push_back(S);
  return scopeList(Kept);
}

/// moe_router (and moe_preprocess) a scope may hold under this recipe's
/// routing and recompute: MLM-CG-013 and MLM-CG-015.
bool routerScopeAllowed(const Recipe &R) {
  return !(R.CudaGraphImpl == GraphImpl::TransformerEngine && recomputes(R, RecomputeModule::Moe));
}
bool preprocessScopeAllowed(const Recipe &R) {
  return !(R.Dispatch == Dispatcher::AllToAll && !R.MoE.PadToCapacity && R.MoE.CapacityFactor);
}

/// Decoder layers on the largest (virtual) pipeline stage.
int64_t maxStageLayers(const Recipe &R) {
  const ParallelConfig &P = R.Parallel;
  if (P.Layout) {
    PipelineLayout Layout;
    LayoutError Err;
    if (parsePipelineLayout(*P.Layout, Layout, Err) && !Layout.Stages.empty()) {
      int64_t Max = 0;
      for (const LayoutStage &S : Layout.Stages)
        Max = std::max(Max, S.DecoderLayers);
      return Max;
    }
  }
  int64_t Stages = std::max<int64_t>(1, P.PP * P.VPP);
  return (R.Model.Layers + Stages - 1) / Stages;
}

/// Appends `Path = Value` after the entry of Anchor (in the same section
/// style), for a field the recipe leaves at its default.
void appendAfter(const RuleContext &C, DiagnosticBuilder &B, llvm::StringRef Anchor, llvm::StringRef Path,
                 llvm::StringRef Value) {
  const Provenance &P = C.R.origin(Anchor);
  if (P.IsDefault || !P.EntryRange.Start.isValid() || !P.PathRange.Start.isValid())
    return;
  std::string Entry(P.EntryRange.Start.getPointer(), P.EntryRange.End.getPointer());
  std::string Written(P.PathRange.Start.getPointer(), P.PathRange.End.getPointer());
  // `optimizer.distributed` keeps its prefix; `distributed` inside a section drops it.
  llvm::StringRef Section = Anchor.rsplit('.').first;
  std::string Target = Written.find('.') != std::string::npos ? Path.str() : Path.drop_front(Section.size() + 1).str();
  B.fixit(P.EntryRange, Entry + "; " + Target + " = " + Value.str());
}
} // namespace

namespace moec::rules {

//--- Token dispatchers ------------------------------------------------------

void check_deepep_pad_to_capacity(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && R.Dispatch == Dispatcher::DeepEP && R.MoE.PadToCapacity) {
    auto B = C.report(diag::deepep_pad_to_capacity, "dispatcher");
    C.fixit(B, "dispatcher", "alltoall");
  }
}

void check_deepep_needs_ep(RuleContext &C) {
  const Recipe &R = C.R;
  bool Checked = R.Dispatch == Dispatcher::DeepEP || (R.Dispatch == Dispatcher::HybridEP && C.coreMinor() < 17);
  if (C.isMoE() && Checked && R.Parallel.ETP * R.Parallel.EP == 1) {
    auto B = C.report(diag::deepep_needs_ep, "dispatcher", dispatcherName(R.Dispatch));
    C.fixit(B, "dispatcher", "alltoall");
  }
}

void check_flex_router_dtype(RuleContext &C) {
  const Recipe &R = C.R;
  if (!C.isMoE() || !isFlex(R.Dispatch) || R.MoE.RouterPrecision == RouterDtype::FP32)
    return;
  auto B = C.report(diag::flex_router_dtype, "moe.router_dtype", dispatcherName(R.Dispatch),
                    R.MoE.RouterPrecision == RouterDtype::BF16 ? "bf16" : "fp64");
  C.fixit(B, "moe.router_dtype", "fp32");
}

void check_router_dtype_bf16(RuleContext &C) {
  const Recipe &R = C.R;
  // With deepep/hybridep, flex-router-dtype reports it.
  if (!C.isMoE() || isFlex(R.Dispatch) || R.MoE.RouterPrecision != RouterDtype::BF16 || R.Model.MoE->Experts < 32)
    return;
  auto B = C.report(diag::router_dtype_bf16, "moe.router_dtype", R.Model.MoE->Experts);
  C.fixit(B, "moe.router_dtype", "fp32");
}

void check_shared_expert_overlap_dispatcher(RuleContext &C) {
  const Recipe &R = C.R;
  bool FlexOverlaps = C.coreMinor() >= 17;
  bool Refused = R.Dispatch == Dispatcher::AllGather || (isFlex(R.Dispatch) && !FlexOverlaps);
  if (C.isMoE() && R.Model.MoE->SharedExperts > 0 && R.MoE.SharedExpertOverlap && Refused) {
    auto B = C.report(diag::shared_expert_overlap_dispatcher, "moe.shared_expert_overlap",
                      FlexOverlaps ? "alltoall, deepep or hybridep" : "alltoall", dispatcherName(R.Dispatch));
    C.fixit(B, "dispatcher", "alltoall");
  }
}

void check_shared_expert_overlap_flex(RuleContext &C) {
  const Recipe &R = C.R;
  // With EP overlap, ep-overlap-shared-expert-overlap reports the error instead.
  if (C.isMoE() && R.MoE.SharedExpertOverlap && isFlex(R.Dispatch) && !R.MoE.OverlapEpComm) {
    auto B = C.report(diag::shared_expert_overlap_flex, "moe.shared_expert_overlap", dispatcherName(R.Dispatch));
    C.fixit(B, "moe.shared_expert_overlap", "false");
  }
}

void check_dispatcher_sms_unused(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.MoE.DispatcherSms && !isFlex(R.Dispatch)) {
    auto B =
        C.report(diag::dispatcher_sms_unused, "moe.dispatcher_sms", *R.MoE.DispatcherSms, dispatcherName(R.Dispatch));
    C.fixit(B, "dispatcher", "hybridep");
  }
}

void check_allgather_variable_length(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && R.Dispatch == Dispatcher::AllGather && R.VariableLength) {
    auto B = C.report(diag::allgather_variable_length, "dispatcher");
    C.fixit(B, "dispatcher", "alltoall");
  }
}

//--- Expert-parallel overlap ------------------------------------------------

void check_ep_overlap_needs_ep(RuleContext &C) {
  const Recipe &R = C.R;
  if (!R.MoE.OverlapEpComm)
    return;
  std::string Why;
  if (!C.isMoE() || R.Model.MoE->Experts <= 1)
    Why = fmt::format("{} has no expert layers", R.Model.Name);
  else if (R.Parallel.EP <= 1)
    Why = "ep = 1; raise parallel.ep or turn the overlap off";
  else
    return;
  auto B = C.report(diag::ep_overlap_needs_ep, "moe.overlap_ep_comm", Why);
  C.fixit(B, "moe.overlap_ep_comm", "false");
}

void check_ep_overlap_dispatcher(RuleContext &C) {
  if (epOverlap(C) && C.R.Dispatch == Dispatcher::AllGather) {
    auto B = C.report(diag::ep_overlap_dispatcher, "dispatcher");
    C.fixit(B, "dispatcher", "alltoall");
  }
}

void check_ep_overlap_needs_vpp(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (epOverlap(C) && P.PP > 1 && P.VPP <= 1)
    C.report(diag::ep_overlap_needs_vpp, "moe.overlap_ep_comm", P.PP);
}

void check_ep_overlap_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  if (!epOverlap(C))
    return;
  if (R.Recompute.Kind == RecomputeKind::Full) {
    C.report(diag::ep_overlap_recompute, "recompute", "full recompute",
             "recompute selected modules (not 'moe') or turn the overlap off");
    return;
  }
  if (!recomputes(R, RecomputeModule::Moe) || C.coreMinor() < 17)
    return;
  auto B = reportToken(C, diag::ep_overlap_recompute, moduleToken(R, RecomputeModule::Moe), "recompute",
                       "recomputing 'moe'", "recompute moe_act instead, or turn the overlap off");
  // moe_act keeps most of what recomputing the whole block saved.
  Recipe V = R;
  llvm::erase_value(V.Recompute.Modules, RecomputeModule::Moe);
  if (R.MoE.GroupedGemm && !llvm::is_contained(V.Recompute.Modules, RecomputeModule::MoeAct))
    V.Recompute.Modules.insert(V.Recompute.Modules.begin(), RecomputeModule::MoeAct);
  std::vector<std::string> Names;
  for (RecomputeModule M : V.Recompute.Modules)
    Names.push_back(recomputeModuleName(M).str());
  if (Names.empty())
    V.Recompute.Kind = RecomputeKind::None;
  if (C.variantAcceptable(V))
    replaceValue(C, B, "recompute", Names.empty() ? "none" : "selective(" + llvm::join(Names, ", ") + ")");
}

void check_ep_overlap_shared_expert_overlap(RuleContext &C) {
  if (epOverlap(C) && C.R.MoE.SharedExpertOverlap) {
    auto B = C.report(diag::ep_overlap_shared_expert_overlap, "moe.shared_expert_overlap");
    C.fixit(B, "moe.shared_expert_overlap", "false");
  }
}

void check_ep_overlap_mtp(RuleContext &C) {
  const Recipe &R = C.R;
  if (!epOverlap(C) || R.Model.MtpLayers == 0)
    return;
  if (R.Model.MtpLayers > 1)
    C.report(diag::ep_overlap_mtp, "moe.overlap_ep_comm",
             fmt::format("supports at most 1 MTP layer, but {} has {}", R.Model.Name, R.Model.MtpLayers));
  else if (C.coreMinor() < 17 && R.Parallel.PP == 1)
    C.report(diag::ep_overlap_mtp, "moe.overlap_ep_comm",
             fmt::format("with the MTP layer of {} needs pp > 1 in Megatron-Core 0.{}", R.Model.Name, C.coreMinor()));
}

void check_ep_overlap_graph_scope(RuleContext &C) {
  const Recipe &R = C.R;
  if (!epOverlap(C) || R.CudaGraph.empty())
    return;
  // Core 0.16 runs full_iteration graphs with the local implementation.
  bool Local = R.CudaGraphImpl == GraphImpl::Local || has(R.CudaGraph, GraphScope::FullIteration);
  if (C.coreMinor() < 17 && Local) {
    auto B =
        C.report(diag::ep_overlap_graph_scope, "cuda_graph",
                 fmt::format("local CUDA graphs ({}) in Megatron-Core 0.{}", scopeList(R.CudaGraph), C.coreMinor()));
    replaceValue(C, B, "cuda_graph", "none");
    return;
  }
  if (!perLayerGraphs(R) || R.CudaGraphImpl != GraphImpl::TransformerEngine)
    return;
  for (GraphScope S : R.CudaGraph) {
    if (S != GraphScope::Moe && S != GraphScope::Mlp)
      continue;
    // Scopes Megatron refuses anyway are reported by cuda-graph-moe-drop-and-pad
    // and cuda-graph-mlp-all-moe.
    if ((S == GraphScope::Moe && !R.MoE.dropAndPad()) || (S == GraphScope::Mlp && everyLayerMoE(R)))
      continue;
    auto B = reportToken(C, diag::ep_overlap_graph_scope, scopeToken(R, S), "cuda_graph",
                         fmt::format("the transformer_engine CUDA-graph scope '{}'", graphScopeName(S)));
    replaceValue(C, B, "cuda_graph", scopesWithout(R, {GraphScope::Moe, GraphScope::Mlp}));
    return;
  }
}

void check_delay_wgrad_needs_ep_overlap(RuleContext &C) {
  if (C.R.MoE.DelayWgrad && !C.R.MoE.OverlapEpComm) {
    auto B = C.report(diag::delay_wgrad_needs_ep_overlap, "moe.delay_wgrad");
    C.fixit(B, "moe.delay_wgrad", "false");
  }
}

//--- Activation recompute ---------------------------------------------------

void check_recompute_block_needs_layers(RuleContext &C) {
  const Recipe &R = C.R;
  const RecomputeConfig &RC = R.Recompute;
  if (RC.Kind != RecomputeKind::Full || RC.Method != RecomputeMethod::Block || RC.Layers)
    return;
  int64_t PerStage = maxStageLayers(R);
  auto B = C.report(diag::recompute_block_needs_layers, "recompute", PerStage);
  replaceValue(C, B, "recompute", fmt::format("full(method = block, layers = {})", PerStage));
}

void check_recompute_layers_exceed_stage(RuleContext &C) {
  const Recipe &R = C.R;
  const RecomputeConfig &RC = R.Recompute;
  int64_t PerStage = maxStageLayers(R);
  if (RC.Kind != RecomputeKind::Full || !RC.Layers || PerStage <= 0 || *RC.Layers <= PerStage)
    return;
  bool Block = RC.Method == RecomputeMethod::Block;
  auto B = C.report(diag::recompute_layers_exceed_stage, "recompute", *RC.Layers, PerStage,
                    Block ? fmt::format("block recomputes every layer from layers = {} on", PerStage)
                          : std::string("uniform then checkpoints each stage as one chunk"));
  replaceValue(C, B, "recompute",
               fmt::format("full(method = {}, layers = {})", Block ? "block" : "uniform", Block ? PerStage : 1));
}

void check_recompute_module_unavailable(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Recompute.Kind != RecomputeKind::Selective)
    return;
  const ModelSpec &M = R.Model;
  for (RecomputeModule Mod : R.Recompute.Modules) {
    std::string Why;
    bool GroupedGemmFix = false;
    if (Mod == RecomputeModule::MoeAct && !M.isMoE())
      Why = fmt::format("moe_act recompute needs MoE experts, but {} has none", M.Name);
    else if (Mod == RecomputeModule::MoeAct && !R.MoE.GroupedGemm) {
      Why = "moe_act recompute needs grouped-GEMM experts, but moe.grouped_gemm = false";
      GroupedGemmFix = true;
    } else if (Mod == RecomputeModule::MlaUpProj && !M.MLA)
      Why = fmt::format("mla_up_proj recompute needs multi-latent attention, but {} uses gqa", M.Name);
    else if (Mod == RecomputeModule::GdnNormOut && C.coreMinor() < 19)
      Why = fmt::format("gdn_norm_out recompute does not exist in Megatron-Core 0.{} (it came in 0.19)", C.coreMinor());
    else if (Mod == RecomputeModule::GdnNormOut && !M.LinearAttention)
      Why =
          fmt::format("gdn_norm_out recompute needs Gated DeltaNet (linear_attention) layers, but {} has none", M.Name);
    else
      continue;
    auto B = reportToken(C, diag::recompute_module_unavailable, moduleToken(R, Mod), "recompute", Why);
    if (GroupedGemmFix)
      C.fixit(B, "moe.grouped_gemm", "true");
    else
      replaceValue(C, B, "recompute", recomputeWithout(R, {Mod}));
  }
}

void check_recompute_mlp_no_dense(RuleContext &C) {
  const Recipe &R = C.R;
  if (!everyLayerMoE(R) || !recomputes(R, RecomputeModule::Mlp))
    return;
  auto B =
      reportToken(C, diag::recompute_mlp_no_dense, moduleToken(R, RecomputeModule::Mlp), "recompute", R.Model.Name);
  replaceValue(C, B, "recompute", recomputeWithout(R, {RecomputeModule::Mlp}));
}

void check_core_attn_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  // From 32K tokens attn-recompute-long-context says it with the sequence length.
  if (!recomputes(R, RecomputeModule::CoreAttn) || R.SeqLen >= LongContext)
    return;
  auto B = reportToken(C, diag::core_attn_recompute, moduleToken(R, RecomputeModule::CoreAttn), "recompute");
  replaceValue(C, B, "recompute", recomputeWithout(R, {RecomputeModule::CoreAttn}));
}

void check_shared_expert_recompute_overlap(RuleContext &C) {
  const Recipe &R = C.R;
  if (!C.isMoE() || R.Model.MoE->SharedExperts == 0 || !R.MoE.SharedExpertOverlap ||
      !recomputes(R, RecomputeModule::SharedExperts))
    return;
  auto B = reportToken(C, diag::shared_expert_recompute_overlap, moduleToken(R, RecomputeModule::SharedExperts),
                       "recompute");
  C.fixit(B, "moe.shared_expert_overlap", "false");
}

void check_fp8_delayed_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Prec != Precision::FP8Delayed || R.Recompute.Kind != RecomputeKind::Selective)
    return;
  for (RecomputeModule M : R.Recompute.Modules) {
    if (M != RecomputeModule::MoeAct && M != RecomputeModule::LayerNorm)
      continue;
    auto B = reportToken(C, diag::fp8_delayed_recompute, moduleToken(R, M), "recompute", recomputeModuleName(M));
    C.fixit(B, "precision", "fp8.tensorwise");
    return;
  }
}

//--- CUDA graphs ------------------------------------------------------------

void check_cuda_graph_full_iteration_alone(RuleContext &C) {
  const Recipe &R = C.R;
  if (!has(R.CudaGraph, GraphScope::FullIteration) || R.CudaGraph.size() == 1)
    return;
  auto B = C.report(diag::cuda_graph_full_iteration_alone, "cuda_graph", scopesWithout(R, {GraphScope::FullIteration}));
  replaceValue(C, B, "cuda_graph", "[full_iteration]");
}

void check_cuda_graph_local_scope(RuleContext &C) {
  const Recipe &R = C.R;
  if (perLayerGraphs(R) && R.CudaGraphImpl == GraphImpl::Local) {
    auto B = C.report(diag::cuda_graph_local_scope, "cuda_graph_impl", scopeList(R.CudaGraph));
    C.fixit(B, "cuda_graph_impl", "transformer_engine");
  }
}

void check_cuda_graph_activation_offload(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.CudaGraph.empty() || !activationOffload(R))
    return;
  if (perLayerGraphs(R)) {
    auto B = C.report(diag::cuda_graph_activation_offload, activationOffloadPath(R),
                      fmt::format("per-layer CUDA graphs ({}); use full_iteration graphs or turn the offload off",
                                  scopeList(R.CudaGraph)));
    replaceValue(C, B, "cuda_graph", C.coreMinor() < 17 ? "none" : "[full_iteration]");
  } else if (C.coreMinor() < 17) {
    auto B = C.report(
        diag::cuda_graph_activation_offload, activationOffloadPath(R),
        fmt::format("CUDA graphs in Megatron-Core 0.{}, full_iteration included; turn one of them off", C.coreMinor()));
    replaceValue(C, B, "cuda_graph", "none");
  }
}

void check_cuda_graph_router_scope(RuleContext &C) {
  const Recipe &R = C.R;
  if (!C.isMoE() || !perLayerGraphs(R))
    return;
  const auto &G = R.CudaGraph;
  // Without drop-and-pad, cuda-graph-moe-drop-and-pad replaces 'moe' itself.
  if (has(G, GraphScope::Moe) && R.MoE.dropAndPad() &&
      (has(G, GraphScope::MoeRouter) || has(G, GraphScope::MoePreprocess))) {
    GraphScope First = has(G, GraphScope::MoeRouter) ? GraphScope::MoeRouter : GraphScope::MoePreprocess;
    std::string Extra = has(G, GraphScope::MoeRouter) && has(G, GraphScope::MoePreprocess)
                            ? "'moe_router' and 'moe_preprocess'"
                            : fmt::format("'{}'", graphScopeName(First));
    auto B = reportToken(C, diag::cuda_graph_router_scope, scopeToken(R, First), "cuda_graph",
                         fmt::format("CUDA-graph scope 'moe' already captures the router; drop {}", Extra));
    replaceValue(C, B, "cuda_graph", scopesWithout(R, {GraphScope::MoeRouter, GraphScope::MoePreprocess}));
    return;
  }
  // The local implementation adds moe_router itself (MLM-CG-008).
  if (has(G, GraphScope::MoePreprocess) && !has(G, GraphScope::MoeRouter) && !has(G, GraphScope::Moe) &&
      R.CudaGraphImpl == GraphImpl::TransformerEngine) {
    auto B = reportToken(C, diag::cuda_graph_router_scope, scopeToken(R, GraphScope::MoePreprocess), "cuda_graph",
                         "CUDA-graph scope 'moe_preprocess' needs 'moe_router' in the scope");
    if (!routerScopeAllowed(R))
      return; // cuda-graph-router-moe-recompute would refuse the router: no single fix
    llvm::SmallVector<GraphScope, 4> Fixed;
    for (GraphScope S : G) {
      if (S == GraphScope::MoePreprocess)
        Fixed.push_back(GraphScope::MoeRouter);
      Fixed.push_back(S);
    }
    replaceValue(C, B, "cuda_graph", scopeList(Fixed));
  }
}

void check_cuda_graph_moe_scope_dense(RuleContext &C) {
  const Recipe &R = C.R;
  if ((C.isMoE() && R.Model.MoE->Experts > 1) || R.CudaGraph.empty())
    return;
  for (GraphScope S : R.CudaGraph) {
    if (S != GraphScope::Moe && S != GraphScope::MoeRouter && S != GraphScope::MoePreprocess)
      continue;
    auto B = reportToken(C, diag::cuda_graph_moe_scope_dense, scopeToken(R, S), "cuda_graph", graphScopeName(S),
                         R.Model.Name);
    replaceValue(C, B, "cuda_graph",
                 scopesWithout(R, {GraphScope::Moe, GraphScope::MoeRouter, GraphScope::MoePreprocess}));
    return;
  }
}

void check_cuda_graph_mlp_all_moe(RuleContext &C) {
  const Recipe &R = C.R;
  if (!everyLayerMoE(R) || !perLayerGraphs(R) || !has(R.CudaGraph, GraphScope::Mlp))
    return;
  auto B = reportToken(C, diag::cuda_graph_mlp_all_moe, scopeToken(R, GraphScope::Mlp), "cuda_graph", R.Model.Name);
  replaceValue(C, B, "cuda_graph", scopesWithout(R, {GraphScope::Mlp}));
}

void check_cuda_graph_moe_drop_and_pad(RuleContext &C) {
  const Recipe &R = C.R;
  if (!C.isMoE() || R.Model.MoE->Experts <= 1 || !perLayerGraphs(R) || !has(R.CudaGraph, GraphScope::Moe) ||
      R.MoE.dropAndPad())
    return;
  std::string Why =
      !R.MoE.CapacityFactor ? "moe.capacity_factor is unset (dropless routing)" : "moe.pad_to_capacity is false";
  auto B = reportToken(C, diag::cuda_graph_moe_drop_and_pad, scopeToken(R, GraphScope::Moe), "cuda_graph", Why);
  // The safe MoE scope, as far as this recipe's routing and recompute allow it.
  llvm::SmallVector<GraphScope, 4> Fixed;
  for (GraphScope S : R.CudaGraph) {
    if (S == GraphScope::MoeRouter || S == GraphScope::MoePreprocess)
      continue;
    if (S != GraphScope::Moe) {
      Fixed.push_back(S);
      continue;
    }
    if (routerScopeAllowed(R)) {
      Fixed.push_back(GraphScope::MoeRouter);
      if (preprocessScopeAllowed(R))
        Fixed.push_back(GraphScope::MoePreprocess);
    }
  }
  replaceValue(C, B, "cuda_graph", scopeList(Fixed));
}

void check_cuda_graph_preprocess_capacity(RuleContext &C) {
  const Recipe &R = C.R;
  // The local implementation captures moe_preprocess with moe_router by
  // itself (transformer_config.py:1725 in 0.16.1).
  bool Local = R.CudaGraphImpl == GraphImpl::Local;
  bool Preprocess = has(R.CudaGraph, GraphScope::MoePreprocess) || (Local && has(R.CudaGraph, GraphScope::MoeRouter));
  if (!C.isMoE() || !perLayerGraphs(R) || !Preprocess || preprocessScopeAllowed(R))
    return;
  GraphScope Named = has(R.CudaGraph, GraphScope::MoePreprocess) ? GraphScope::MoePreprocess : GraphScope::MoeRouter;
  bool Implied = Named == GraphScope::MoeRouter;
  auto B = reportToken(
      C, diag::cuda_graph_preprocess_capacity, scopeToken(R, Named), "cuda_graph",
      Implied ? "'moe_router' (cuda_graph_impl = local captures moe_preprocess with it)" : "'moe_preprocess'",
      *R.MoE.CapacityFactor, Implied ? "drop moe_router or capture with transformer_engine" : "drop moe_preprocess");
  replaceValue(C, B, "cuda_graph",
               Local ? scopesWithout(R, {GraphScope::MoePreprocess, GraphScope::MoeRouter})
                     : scopesWithout(R, {GraphScope::MoePreprocess}));
}

void check_cuda_graph_full_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  if (!perLayerGraphs(R) || R.Recompute.Kind != RecomputeKind::Full)
    return;
  auto B = C.report(diag::cuda_graph_full_recompute, "cuda_graph", scopeList(R.CudaGraph));
  replaceValue(C, B, "cuda_graph", "[full_iteration]");
}

void check_cuda_graph_router_moe_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  // With 'moe' in the scope, cuda-graph-router-scope or cuda-graph-moe-drop-and-pad
  // already drop the router.
  if (!C.isMoE() || !perLayerGraphs(R) || routerScopeAllowed(R) || !has(R.CudaGraph, GraphScope::MoeRouter) ||
      has(R.CudaGraph, GraphScope::Moe))
    return;
  auto B = reportToken(C, diag::cuda_graph_router_moe_recompute, scopeToken(R, GraphScope::MoeRouter), "cuda_graph");
  replaceValue(C, B, "cuda_graph", scopesWithout(R, {GraphScope::MoeRouter, GraphScope::MoePreprocess}));
}

void check_cuda_graph_mamba_scope(RuleContext &C) {
  const Recipe &R = C.R;
  if (!has(R.CudaGraph, GraphScope::Mamba))
    return;
  bool GDN = R.Model.LinearAttention.hasValue();
  auto B = reportToken(C, diag::cuda_graph_mamba_scope, scopeToken(R, GraphScope::Mamba), "cuda_graph", R.Model.Name,
                       GDN ? "; its Gated DeltaNet layers are graphed by 'attn'" : "");
  llvm::SmallVector<GraphScope, 4> Fixed;
  for (GraphScope S : R.CudaGraph) {
    if (S != GraphScope::Mamba)
      Fixed.push_back(S);
    else if (GDN && !has(R.CudaGraph, GraphScope::Attn))
      Fixed.push_back(GraphScope::Attn);
  }
  replaceValue(C, B, "cuda_graph", scopeList(Fixed));
}

//--- Precision --------------------------------------------------------------

void check_bf16_layers_delayed(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Prec != Precision::FP8Delayed || (R.Bf16FirstLayers == 0 && R.Bf16LastLayers == 0))
    return;
  auto B = C.report(diag::bf16_layers_delayed, R.Bf16FirstLayers ? "bf16_layers.first" : "bf16_layers.last");
  C.fixit(B, "precision", "fp8.tensorwise");
}

void check_bf16_layers_exceed_stage(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t Bound = R.Model.Layers / std::max<int64_t>(1, R.Parallel.PP);
  for (auto [Which, N] : {std::pair<const char *, int64_t>{"first", R.Bf16FirstLayers}, {"last", R.Bf16LastLayers}}) {
    if (N <= Bound)
      continue;
    std::string Path = std::string("bf16_layers.") + Which;
    auto B = C.report(diag::bf16_layers_exceed_stage, Path, Which, N, R.Model.Layers, R.Parallel.PP, Bound);
    C.fixit(B, Path, std::to_string(Bound));
  }
}

void check_fp8_param_gather_invalid(RuleContext &C) {
  const Recipe &R = C.R;
  if (!R.Fp8ParamGather)
    return;
  std::string Why;
  if (!isFP8(R.Prec))
    Why = fmt::format("an FP8 precision, but precision = {}", precisionName(R.Prec));
  // The sharding half is validate_args only (arguments.py:655): a
  // Megatron-Bridge run gathers FP8 parameters without it.
  else if (!R.Optimizer.Distributed && !R.Parallel.FSDP && getTargetInfo(R.Tgt).RunsValidateArgs)
    Why = "the distributed optimizer or FSDP, but optimizer.distributed = false";
  else
    return;
  auto B = C.report(diag::fp8_param_gather_invalid, "fp8_param_gather", Why);
  C.fixit(B, "fp8_param_gather", "false");
}

void check_fp4_param_gather_invalid(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Fp4ParamGather && R.Prec != Precision::NVFP4) {
    auto B = C.report(diag::fp4_param_gather_invalid, "fp4_param_gather", precisionName(R.Prec));
    C.fixit(B, "fp4_param_gather", "false");
  }
}

//--- Optimizer --------------------------------------------------------------

void check_optimizer_offload_needs_precision_aware(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.OffloadOptimizer > 0 && !R.Optimizer.PrecisionAware) {
    auto B = C.report(diag::optimizer_offload_needs_precision_aware, "optimizer.precision_aware", R.OffloadOptimizer);
    C.fixit(B, "optimizer.precision_aware", "true");
  }
}

void check_optimizer_offload_fp8_param_gather(RuleContext &C) {
  const Recipe &R = C.R;
  // Without an FP8 precision fp8-param-gather-invalid reports it.
  if (R.OffloadOptimizer > 0 && R.Fp8ParamGather && isFP8(R.Prec) && R.Prec != Precision::FP8Delayed) {
    auto B = C.report(diag::optimizer_offload_fp8_param_gather, "fp8_param_gather", precisionName(R.Prec));
    C.fixit(B, "fp8_param_gather", "false");
  }
}

void check_precision_aware_needs_distributed_adam(RuleContext &C) {
  const Recipe &R = C.R;
  const OptimizerConfig &O = R.Optimizer;
  if (!O.PrecisionAware)
    return;
  std::string Why = R.origin("optimizer.precision_aware").IsDefault && R.OffloadOptimizer > 0
                        ? fmt::format(" (on for offload.optimizer = {})", R.OffloadOptimizer)
                        : std::string();
  if (O.Kind != OptimizerKind::Adam) {
    auto B = C.report(diag::precision_aware_needs_distributed_adam, "optimizer.type", Why, "adam",
                      fmt::format("optimizer.type = {}", enumName(O.Kind)));
    C.fixit(B, "optimizer.type", "adam");
  } else if (!O.Distributed) {
    auto B = C.report(diag::precision_aware_needs_distributed_adam, "optimizer.distributed", Why,
                      "the distributed optimizer", "optimizer.distributed = false");
    C.fixit(B, "optimizer.distributed", "true");
  }
}

void check_overlap_param_gather_prerequisites(RuleContext &C) {
  const Recipe &R = C.R;
  const OptimizerConfig &O = R.Optimizer;
  if (!O.OverlapParamGather)
    return;
  bool Sharded = O.Distributed || (R.Parallel.FSDP && R.Parallel.FsdpKind == FsdpImpl::Megatron);
  const char *Cause;
  std::string Needs;
  if (!Sharded) {
    Cause = "optimizer.distributed";
    Needs = "the distributed optimizer or Megatron-FSDP, but optimizer.distributed = false";
  } else if (!O.OverlapGradReduce) {
    Cause = "optimizer.overlap_grad_reduce";
    Needs = "overlap_grad_reduce, but optimizer.overlap_grad_reduce = false";
  } else {
    return;
  }
  bool Stated = !R.origin("optimizer.overlap_param_gather").IsDefault;
  auto B = C.report(diag::overlap_param_gather_prerequisites, Stated ? "optimizer.overlap_param_gather" : Cause,
                    Stated ? "" : " (on by default)", Needs);
  if (Stated)
    C.fixit(B, "optimizer.overlap_param_gather", "false");
  else
    appendAfter(C, B, Cause, "optimizer.overlap_param_gather", "false");
}

void check_muon_fsdp(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Optimizer.Kind == OptimizerKind::Muon && R.Parallel.FSDP) {
    auto B = C.report(diag::muon_fsdp, "optimizer.type");
    Recipe V = R;
    V.Optimizer.Kind = OptimizerKind::Adam;
    if (C.variantAcceptable(V)) // Adam keeps a second moment: it may not fit
      C.fixit(B, "optimizer.type", "adam");
  }
}

void check_muon_distributed_optimizer(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Optimizer.Kind == OptimizerKind::Muon && R.Optimizer.Distributed && C.coreMinor() < 17) {
    auto B = C.report(diag::muon_distributed_optimizer, "optimizer.type", C.coreMinor());
    C.fixit(B, "optimizer.distributed", "false");
  }
}

void check_fsdp_rank_order(RuleContext &C) {
  const ParallelConfig &P = C.R.Parallel;
  if (P.FSDP && P.FsdpKind == FsdpImpl::Megatron && P.Order == RankOrder::TpCpEpPpDp) {
    auto B = C.report(diag::fsdp_rank_order, "parallel.order");
    C.fixit(B, "parallel.order", "tp_cp_ep_dp_pp");
  }
}

void check_vlm_interleaved_pipeline(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Model.isVLM() && R.Parallel.VPP > 1) {
    auto B = C.report(diag::vlm_interleaved_pipeline, "parallel.vpp", R.Model.Name, R.Parallel.VPP);
    C.fixit(B, "parallel.vpp", "1");
  }
}

//--- Activation offload -----------------------------------------------------

void check_activation_offload_layers_range(RuleContext &C) {
  const Recipe &R = C.R;
  if (!R.OffloadActivationLayers || *R.OffloadActivationLayers < R.Model.Layers)
    return;
  auto B = C.report(diag::activation_offload_layers_range, "offload.activation_layers", *R.OffloadActivationLayers,
                    R.Model.Layers, R.Model.Name);
  C.fixit(B, "offload.activation_layers", std::to_string(R.Model.Layers - 1));
}

void check_activation_offload_layers_implicit(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.OffloadActivations || !R.OffloadActivationLayers || *R.OffloadActivationLayers == 0)
    return;
  auto B = C.report(diag::activation_offload_layers_implicit, "offload.activation_layers", *R.OffloadActivationLayers);
  C.fixit(B, "offload.activations", "true");
}

void check_activation_offload_layers_ignored(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.OffloadActivations || !R.OffloadActivationLayers || *R.OffloadActivationLayers == 0)
    return;
  auto B = C.report(diag::activation_offload_layers_ignored, "offload.activation_layers", *R.OffloadActivationLayers);
  C.fixit(B, "offload.activations", "true");
}

/// The offload list with core_attn added (the fix-it of attn_proj alone).
std::string offloadListWith(const Recipe &R, OffloadModule Extra) {
  std::vector<std::string> Names;
  for (OffloadModule M : R.OffloadModules) {
    if (M == OffloadModule::AttnProj)
      Names.push_back(enumName(Extra).str());
    Names.push_back(enumName(M).str());
  }
  return "[" + llvm::join(Names, ", ") + "]";
}

void check_activation_offload_attn_proj_alone(RuleContext &C) {
  const Recipe &R = C.R;
  if (!has(R.OffloadModules, OffloadModule::AttnProj) || has(R.OffloadModules, OffloadModule::CoreAttn))
    return;
  auto B = C.report(diag::activation_offload_attn_proj_alone, "offload.activations");
  C.fixit(B, "offload.activations", offloadListWith(R, OffloadModule::CoreAttn));
}

void check_activation_offload_module_release(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.coreMinor() >= 20 || !has(R.OffloadModules, OffloadModule::FusedGroupMlp))
    return;
  C.report(diag::activation_offload_module_release, "offload.activations", enumName(OffloadModule::FusedGroupMlp),
           C.coreMinor());
}

void check_activation_offload_recomputed_moe(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Recompute.Kind != RecomputeKind::Selective || !has(R.Recompute.Modules, RecomputeModule::Moe))
    return;
  std::vector<std::string> Inside;
  for (OffloadModule M : {OffloadModule::ExpertFc1, OffloadModule::MoeAct, OffloadModule::FusedGroupMlp})
    if (has(R.OffloadModules, M))
      Inside.push_back(enumName(M).str());
  if (!Inside.empty())
    C.report(diag::activation_offload_recomputed_moe, "offload.activations", llvm::join(Inside, ", "));
}

void check_activation_offload_local_graphs(RuleContext &C) {
  const Recipe &R = C.R;
  if (!perLayerGraphs(R) || R.CudaGraphImpl != GraphImpl::Local)
    return;
  std::vector<std::string> Outside;
  for (OffloadModule M : R.OffloadModules)
    if (M != OffloadModule::ExpertFc1 && M != OffloadModule::MoeAct && M != OffloadModule::FusedGroupMlp)
      Outside.push_back(enumName(M).str());
  if (!Outside.empty())
    C.report(diag::activation_offload_local_graphs, "offload.activations", llvm::join(Outside, ", "));
}

void check_activation_offload_pipeline(RuleContext &C) {
  const Recipe &R = C.R;
  if (activationOffload(R) && R.Parallel.PP > 1)
    C.report(diag::activation_offload_pipeline, activationOffloadPath(R), R.Parallel.PP);
}

void check_activation_offload_recompute(RuleContext &C) {
  const Recipe &R = C.R;
  if (!activationOffload(R) || R.Recompute.Kind == RecomputeKind::None)
    return;
  std::string Setting = R.Recompute.Kind == RecomputeKind::Full ? "full" : recomputeWithout(R, {});
  auto B = C.report(diag::activation_offload_recompute, "recompute", Setting);
  replaceValue(C, B, "recompute", "none");
}

} // namespace moec::rules
