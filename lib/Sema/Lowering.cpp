//===- Lowering.cpp - Checked values to the typed Recipe IR ---------------===//
#include "SemaImpl.h"
#include "moec/Layout/Pipeline.h"
#include "moec/Sema/TargetDefaults.h"

#include <deque>

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace moec;
using llvm::SMRange;
using llvm::StringRef;

const Provenance &Recipe::origin(StringRef Path) const {
  static const Provenance None;
  auto It = Origins.find(Path);
  return It == Origins.end() ? None : It->second;
}

namespace {
/// Typed reads of values that Scope already checked against the schema.
struct Reader {
  Scope &Sc;
  int64_t count(StringRef P, int64_t Fallback = 0) {
    const Value *V = Sc.get(P);
    return V && V->K == Value::Kind::Number && V->Num.isInteger() ? V->Num.getInteger() : Fallback;
  }
  llvm::Optional<int64_t> optCount(StringRef P) {
    const Value *V = Sc.get(P);
    if (V && V->K == Value::Kind::Number && V->Num.isInteger())
      return V->Num.getInteger();
    return llvm::None;
  }
  double real(StringRef P, double Fallback = 0) {
    const Value *V = Sc.get(P);
    return V && V->K == Value::Kind::Number ? V->Num.getReal() : Fallback;
  }
  llvm::Optional<double> optReal(StringRef P) {
    const Value *V = Sc.get(P);
    if (V && V->K == Value::Kind::Number)
      return V->Num.getReal();
    return llvm::None;
  }
  bool boolean(StringRef P) {
    const Value *V = Sc.get(P);
    return V && V->K == Value::Kind::Bool && V->Bool;
  }
  /// A checked enumeration value (RecipeEnums.def). Fallback stands only
  /// for a value that failed to evaluate (reported; the recipe is dropped).
  template <typename E> E enumValue(StringRef P, E Fallback = E(0)) {
    std::string N = name(P);
    llvm::Optional<E> V = parseEnum<E>(N);
    assert((V || N.empty() || Sc.failed(P)) && "the schema accepts only RecipeEnums.def spellings");
    return V.getValueOr(Fallback);
  }
  std::string name(StringRef P) {
    const Value *V = Sc.get(P);
    return V ? V->Text : std::string();
  }
};
} // namespace

void SemaImpl::checkRequired(Scope &Sc) {
  DefInfo &D = Sc.definition();
  for (const FieldSpec &F : schemaFor(D.kind())) {
    bool Needed = F.Req == Presence::Required;
    if (F.Req == Presence::RequiredInSection)
      for (auto &KV : D.Fields)
        if (StringRef(KV.first()).startswith((F.section() + ".").str()))
          Needed = true;
    if (!Needed || Sc.isSet(F.Path) || D.Rejected.count(F.Path))
      continue;
    if (D.kind() == ast::DefKind::Recipe && F.Path.startswith("cluster.") && Sc.isSet("cluster"))
      continue;
    Diags.report(diag::missing_field, D.AST->NameRange, ast::defKindName(D.kind()), D.name(), F.Path);
  }
}

Scope &SemaImpl::evaluateAll(Scope &Sc) {
  checkRequired(Sc);
  for (auto &KV : Sc.definition().Fields)
    Sc.get(KV.first());
  return Sc;
}

const ModelSpec *SemaImpl::lowerModel(DefInfo &D) {
  if (D.Lowered)
    return D.Model ? D.Model.getPointer() : nullptr;
  D.Lowered = true;
  unsigned Before = Diags.errorCount();
  Scope &Sc = evaluateAll(sharedScope(D));
  Reader R{Sc};
  ModelSpec M;
  M.Name = std::string(D.name());
  M.Layers = R.count("layers");
  M.Hidden = R.count("hidden");
  M.Heads = R.count("heads");
  M.KvHeads = R.count("kv_heads");
  M.HeadDim = R.count("head_dim");
  M.Vocab = R.count("vocab");
  M.MtpLayers = R.count("mtp_layers");
  M.FfnHidden = R.optCount("ffn_hidden");
  M.MaxSeqLen = R.optCount("max_seq_len");
  M.RopeTheta = R.optReal("rope_theta");
  M.RopeFraction = R.optReal("rope_fraction");
  M.NormEpsilon = R.optReal("norm_epsilon");
  M.QkNorm = R.boolean("qk_norm");
  if (const Value *L = Sc.get("mrope_section")) {
    for (const Value &Axis : L->Elements)
      M.MropeSection.push_back(Axis.Num.getInteger());
    // One count per axis (time, rows, columns), together half the rotated
    // dimensions: each frequency rotates a pair of them.
    const int64_t Rotated = int64_t(std::llround(double(M.HeadDim) * M.RopeFraction.getValueOr(1.0)));
    int64_t Sum = 0;
    for (int64_t N : M.MropeSection)
      Sum += N;
    if (M.HeadDim > 0 && (M.MropeSection.size() != 3 || 2 * Sum != Rotated))
      Diags.report(diag::value_out_of_range, Sc.provenance("mrope_section").Range, "mrope_section",
                   fmt::format("[{}]", fmt::join(M.MropeSection, ", ")),
                   fmt::format("three counts (time, rows, columns) summing to {}, half of the {} dimensions RoPE "
                               "rotates in a head",
                               Rotated / 2, Rotated));
  }
  if (!Sc.isSet("head_dim") && !Sc.get("head_dim") && M.Hidden && M.Heads)
    Diags.report(diag::missing_field, D.AST->NameRange, "model", D.name(), "head_dim")
        .note(diag::note_value_set_here, Sc.provenance("hidden").Range, "hidden");
  if (const Value *A = Sc.get("attention"); A && A->K == Value::Kind::Call) {
    MLASpec S;
    auto Named = [&](StringRef N) {
      const Value *X = A->named(N);
      return X ? X->Num.getInteger() : 0;
    };
    S.QLoraRank = Named("q_lora_rank");
    S.KvLoraRank = Named("kv_lora_rank");
    S.QkHeadDim = Named("qk_head_dim");
    S.QkRopeHeadDim = Named("qk_rope_head_dim");
    S.VHeadDim = Named("v_head_dim");
    M.MLA = S;
  }
  auto HasSection = [&](StringRef Section) {
    for (auto &KV : D.Fields)
      if (StringRef(KV.first()).startswith((Section + ".").str()))
        return true;
    return false;
  };
  if (HasSection("moe")) {
    MoESpec S;
    S.Experts = R.count("moe.experts");
    S.TopK = R.count("moe.top_k");
    S.FfnHidden = R.count("moe.ffn_hidden");
    S.SharedExperts = R.count("moe.shared_experts");
    S.SharedFfnHidden = R.optCount("moe.shared_ffn_hidden");
    S.DenseLayers = R.count("moe.dense_layers");
    S.RouterKind = R.enumValue<Router>("moe.router");
    S.ExpertBias = R.boolean("moe.expert_bias");
    S.SharedExpertGate = R.boolean("moe.shared_expert_gate");
    S.PreSoftmax = R.boolean("moe.pre_softmax");
    S.TopKScaling = R.optReal("moe.topk_scaling");
    S.Groups = R.optCount("moe.groups");
    S.GroupTopK = R.optCount("moe.group_top_k");
    M.MoE = S;
  }
  if (HasSection("linear_attention"))
    M.LinearAttention =
        LinearAttentionSpec{R.count("linear_attention.interval"), R.count("linear_attention.key_heads"),
                            R.count("linear_attention.value_heads"), R.count("linear_attention.head_dim")};
  if (HasSection("vision")) {
    VisionSpec S;
    S.Layers = R.count("vision.layers");
    S.Hidden = R.count("vision.hidden");
    S.Heads = R.count("vision.heads");
    S.FfnHidden = R.count("vision.ffn_hidden");
    S.PatchSize = R.count("vision.patch_size");
    S.SpatialMerge = R.count("vision.spatial_merge", 1);
    S.OutHidden = R.optCount("vision.out_hidden");
    S.TemporalPatch = R.count("vision.temporal_patch", 2);
    S.PositionEmbeddings = R.optCount("vision.position_embeddings");
    if (const Value *L = Sc.get("vision.deepstack_layers")) {
      for (const Value &Layer : L->Elements)
        S.DeepstackLayers.push_back(Layer.Num.getInteger());
      for (int64_t Layer : S.DeepstackLayers)
        if (Layer >= S.Layers && S.Layers > 0) {
          Diags.report(diag::value_out_of_range, Sc.provenance("vision.deepstack_layers").Range,
                       "vision.deepstack_layers", fmt::format("[{}]", fmt::join(S.DeepstackLayers, ", ")),
                       fmt::format("encoder blocks, below vision.layers = {}", S.Layers));
          break;
        }
    }
    // The table is a square grid (transformers' num_grid_per_side).
    if (S.PositionEmbeddings) {
      const auto Side = int64_t(std::llround(std::sqrt(double(*S.PositionEmbeddings))));
      if (Side * Side != *S.PositionEmbeddings)
        Diags.report(diag::value_out_of_range, Sc.provenance("vision.position_embeddings").Range,
                     "vision.position_embeddings", std::to_string(*S.PositionEmbeddings),
                     "a square number (a grid of positions)");
    }
    // An image in the text: its ids default to the vocabulary's last three.
    const struct {
      const char *Field;
      int64_t VisionSpec::*Id;
      int64_t FromEnd;
    } Tokens[] = {{"vision.start_token", &VisionSpec::StartToken, 3},
                  {"vision.image_token", &VisionSpec::ImageToken, 2},
                  {"vision.end_token", &VisionSpec::EndToken, 1}};
    for (const auto &T : Tokens) {
      S.*T.Id = R.optCount(T.Field).getValueOr(M.Vocab - T.FromEnd);
      if (M.Vocab > 0 && (S.*T.Id < 0 || S.*T.Id >= M.Vocab))
        Diags.report(diag::value_out_of_range, Sc.provenance(T.Field).Range, T.Field, std::to_string(S.*T.Id),
                     fmt::format("token ids, below vocab = {}", M.Vocab));
    }
    if (S.StartToken == S.ImageToken || S.ImageToken == S.EndToken || S.StartToken == S.EndToken)
      Diags.report(
          diag::value_out_of_range, Sc.provenance("vision.image_token").Range, "vision.image_token",
          std::to_string(S.ImageToken),
          fmt::format("an id apart from vision.start_token = {} and vision.end_token = {}", S.StartToken, S.EndToken));
    M.Vision = S;
  }
  if (Diags.errorCount() == Before)
    D.Model = M;
  return D.Model ? D.Model.getPointer() : nullptr;
}

const GpuSpec *SemaImpl::lowerGpu(DefInfo &D) {
  if (D.Lowered)
    return D.Gpu ? D.Gpu.getPointer() : nullptr;
  D.Lowered = true;
  unsigned Before = Diags.errorCount();
  Scope &Sc = evaluateAll(sharedScope(D));
  Reader R{Sc};
  GpuSpec G;
  G.Name = std::string(D.name());
  G.Arch = R.enumValue<GpuArch>("arch", GpuArch::Hopper);
  G.SM = R.count("sm");
  G.MemoryBytes = R.real("memory");
  G.HbmBytesPerSec = R.real("hbm");
  G.Bf16Flops = R.real("bf16");
  G.Fp8Flops = R.optReal("fp8");
  G.Fp4Flops = R.optReal("fp4");
  G.Multiprocessors = R.count("multiprocessors", 0);
  G.TensorFlopsPerClock = R.count("tensor_flops_per_clock", 0);
  G.ExpPerClock = R.count("exp_per_clock", 0);
  G.GpusPerNode = R.count("gpus_per_node", 1);
  G.NVLinkDomain = R.count("nvlink_domain", 1);
  G.NVLinkBytesPerSec = R.real("nvlink");
  G.NetworkBytesPerSec = R.real("network");
  G.HostMemoryBytesPerSec = R.real("host_memory");
  G.HostLinkBytesPerSec = R.real("host_link");
  if (Diags.errorCount() == Before)
    D.Gpu = G;
  return D.Gpu ? D.Gpu.getPointer() : nullptr;
}

void SemaImpl::checkDefinition(DefInfo &D) {
  if (!resolve(D))
    return;
  switch (D.kind()) {
  case ast::DefKind::Model:
    lowerModel(D);
    return;
  case ast::DefKind::Gpu:
    lowerGpu(D);
    return;
  case ast::DefKind::Cluster: {
    Scope &Sc = evaluateAll(sharedScope(D));
    if (const Value *G = Sc.get("gpu"); G && G->Ref)
      lowerGpu(*G->Ref);
    return;
  }
  case ast::DefKind::Recipe:
    return; // lowered per sweep point by analyze()
  }
}

llvm::Optional<Recipe> SemaImpl::lowerRecipe(Scope &Sc, std::string PointName) {
  DefInfo &D = Sc.definition();
  unsigned Before = Diags.errorCount();
  evaluateAll(Sc);
  // cluster.gpu is required unless a named cluster provides it.
  if (!Sc.isSet("cluster.gpu") && !Sc.isSet("cluster") && !D.Rejected.count("cluster.gpu"))
    Diags.report(diag::missing_field, D.AST->NameRange, "recipe", D.name(), "cluster.gpu");

  Reader R{Sc};
  Recipe Out;
  // Errors in the cluster's shape (a world size that does not divide, a
  // stated dp that disagrees) leave a recipe the rules can still check:
  // they must not hide the parallelism errors (DP stays 0 where unknown).
  unsigned ShapeErrors = 0;
  Out.Name = std::string(D.name());
  Out.PointName = std::move(PointName);
  Out.NameRange = D.AST->NameRange;
  Out.Base = D.AST->Base;
  if (Opts.TargetOverride) {
    Out.Tgt = *Opts.TargetOverride;
  } else if (const Value *T = Sc.get("target"); T && Sc.isSet("target")) {
    if (auto Known = lookupTarget(T->Text)) {
      Out.Tgt = *Known;
    } else {
      std::vector<StringRef> Names;
      for (const TargetInfo &I : allTargets())
        Names.push_back(I.Name);
      Diags.report(diag::unknown_target, Sc.provenance("target").Range, T->Text, didYouMean(T->Text, Names),
                   knownTargetList());
    }
  }

  if (const Value *M = Sc.get("model"); M && M->Ref)
    if (const ModelSpec *Spec = lowerModel(*M->Ref))
      Out.Model = *Spec;
  const Value *G = Sc.get("cluster.gpu");
  if (G && G->Ref)
    if (const GpuSpec *Spec = lowerGpu(*G->Ref))
      Out.Gpu = *Spec;

  // World size: nodes or gpus, consistent with each other and with whole nodes.
  // A named cluster (`cluster = eos`) states them too; the recipe's own win.
  const Value *Named = Sc.isSet("cluster") ? Sc.get("cluster") : nullptr;
  auto Stated = [&](StringRef Path) {
    return Sc.isSet(Path) ||
           (Named && Named->Ref && sharedScope(*Named->Ref).isSet(Path.drop_front(strlen("cluster."))));
  };
  SMRange ClusterRange = Sc.provenance(Stated("cluster.nodes") ? "cluster.nodes" : "cluster.gpus").Range;
  auto Nodes = R.optCount("cluster.nodes");
  int64_t PerNode = Out.Gpu.GpusPerNode > 0 ? Out.Gpu.GpusPerNode : 1;
  // A size that failed to evaluate was reported; checking it again would
  // only repeat the error as a conflict with "0".
  bool SizeFailed = Sc.failed("cluster.nodes") || Sc.failed("cluster.gpus");
  if (G && G->Ref && !SizeFailed) {
    if (Stated("cluster.gpus") && Nodes) {
      int64_t Stated = R.count("cluster.gpus");
      if (Stated != *Nodes * PerNode && ++ShapeErrors)
        Diags.report(diag::cluster_size_conflict, Sc.provenance("cluster.gpus").Range, *Nodes, Stated, PerNode,
                     *Nodes * PerNode);
      Out.WorldSize = Stated;
      Out.Nodes = *Nodes;
    } else if (Nodes) {
      Out.Nodes = *Nodes;
      Out.WorldSize = R.count("cluster.gpus");
    } else if (auto Gpus = R.optCount("cluster.gpus")) {
      Out.WorldSize = *Gpus;
      if (*Gpus % PerNode != 0 && Out.Gpu.Arch != GpuArch::Cpu)
        Diags.report(diag::partial_node, Sc.provenance("cluster.gpus").Range, *Gpus, PerNode);
      Out.Nodes = (*Gpus + PerNode - 1) / PerNode;
    } else if (!Sc.failed("cluster.nodes") && !Sc.failed("cluster.gpus")) {
      auto Missing = Diags.report(diag::cluster_size_missing, D.AST->NameRange);
      if (Named && Named->Ref)
        Missing.note(diag::note_defined_here, Named->Ref->AST->NameRange, Named->Ref->name());
    }
  }

  // nodes x gpus_per_node obeys the same ceiling as a stated cluster.gpus
  // (Evaluator.cpp): the rules multiply the world size, and a plan lists
  // every rank.
  if (Out.WorldSize > (int64_t(1) << 20)) {
    Diags.report(diag::value_out_of_range, ClusterRange, "cluster.gpus", Out.WorldSize,
                 fmt::format("between 1 and {}", int64_t(1) << 20));
    Out.WorldSize = 0;
  }

  Out.SeqLen = R.count("seq_len");
  Out.MicroBatch = R.count("batch.micro");
  Out.GlobalBatch = R.count("batch.global");

  ParallelConfig &P = Out.Parallel;
  P.TP = R.count("parallel.tp", 1);
  P.CP = R.count("parallel.cp", 1);
  P.EP = R.count("parallel.ep", 1);
  P.ETP = R.count("parallel.etp", 1);
  P.PP = R.count("parallel.pp", 1);
  P.VPP = R.count("parallel.vpp", 1);
  P.SequenceParallel = R.boolean("parallel.sp");
  P.FSDP = R.boolean("parallel.fsdp");
  P.CpCommKind = R.enumValue<CpComm>("parallel.cp_comm");
  if (const Value *L = Sc.get("parallel.layout"))
    P.Layout = L->Text;
  P.Order = R.enumValue<RankOrder>("parallel.order");
  if (const Value *H = Sc.get("parallel.cp_hierarchy"))
    for (const Value &Size : H->Elements)
      P.CpHierarchy.push_back(Size.Num.getInteger());
  P.FsdpKind = R.enumValue<FsdpImpl>("parallel.fsdp_impl");
  P.TpCommOverlap = R.boolean("parallel.tp_comm_overlap");

  // dp and edp: derived from the grid; a stated value is checked against it.
  if (Out.WorldSize > 0) {
    struct Axis {
      const char *Name, *Path;
      int64_t A, B;
      const char *Formula;
      int64_t *Into;
    } Axes[] = {{"dp", "parallel.dp", P.TP, P.CP, "tp x cp x pp", &P.DP},
                {"edp", "parallel.edp", P.ETP, P.EP, "etp x ep x pp", &P.EDP}};
    bool Reported = false;
    for (Axis &A : Axes) {
      __int128 Grid = __int128(A.A) * A.B * P.PP;
      bool Divides = Grid > 0 && Grid <= INT64_MAX && Out.WorldSize % int64_t(Grid) == 0;
      if (!Divides) {
        // A grid larger than the job is gpu-count-infeasible (lib/Rules).
        if (!Reported && Grid > 0 && Grid <= Out.WorldSize && ++ShapeErrors)
          Diags.report(diag::world_size, ClusterRange, Out.WorldSize, A.Formula,
                       fmt::format("{} x {} x {}", A.A, A.B, P.PP));
        Reported = true; // one message per recipe; the other axis usually follows
        continue;
      }
      int64_t Derived = Out.WorldSize / int64_t(Grid);
      *A.Into = Derived;
      if (Sc.isSet(A.Path)) {
        int64_t Stated = R.count(A.Path);
        if (Stated != Derived && ++ShapeErrors)
          Diags.report(diag::stated_value_mismatch, Sc.provenance(A.Path).Range, A.Name, Stated, Derived,
                       fmt::format("{} GPUs / ({} = {} x {} x {})", Out.WorldSize, A.Formula, A.A, A.B, P.PP));
      }
    }
  }

  // The planner schedules every micro batch of a step on every pipeline
  // stage, two ops each, and a plan lists them all: bounded so that a
  // well-typed but absurd batch cannot make moec allocate billions of ops
  // (found by fuzz-plan). 2^20 ops plan in about half a second; real jobs
  // schedule tens of thousands. The memory model plans a global batch that
  // does not divide (gbs-divisible) with the whole micro batches it holds,
  // so the bound applies to those too (found by fuzz-plan again).
  // The bound is planPipeline's own.
  if (P.DP > 0 && Out.MicroBatch > 0) {
    int64_t Microbatches = std::max<int64_t>(Out.GlobalBatch / (Out.MicroBatch * P.DP), 1);
    __int128 Ops = __int128(2) * Microbatches * P.PP * P.VPP;
    if (Ops > MaxScheduleOps)
      Diags.report(diag::value_out_of_range, Sc.provenance("batch.global").Range, "batch.global", Out.GlobalBatch,
                   fmt::format("one whose pipeline schedule (2 x {} micro batches x pp {} x vpp {}) has at most {} ops",
                               Microbatches, P.PP, P.VPP, MaxScheduleOps));
  }

  Out.Prec = R.enumValue<Precision>("precision");
  Out.Fp8ParamGather =
      Sc.isSet("fp8_param_gather") ? R.boolean("fp8_param_gather") : presetFp8ParamGather(Out.Tgt, Out.Prec);
  Out.Fp4ParamGather =
      Sc.isSet("fp4_param_gather") ? R.boolean("fp4_param_gather") : presetFp4ParamGather(Out.Tgt, Out.Prec);
  Out.Bf16FirstLayers = R.count("bf16_layers.first");
  Out.Bf16LastLayers = R.count("bf16_layers.last");
  Out.Dispatch = R.enumValue<Dispatcher>("dispatcher");

  if (const Value *RC = Sc.get("recompute")) {
    RecomputeConfig &C = Out.Recompute;
    if (RC->Text == "full") {
      C.Kind = RecomputeKind::Full;
      if (const Value *M = RC->named("method"))
        C.Method = parseEnum<RecomputeMethod>(M->Text).getValueOr(RecomputeMethod::Uniform);
      if (const Value *L = RC->named("layers"))
        C.Layers = L->Num.getInteger();
    } else if (RC->Text == "selective") {
      C.Kind = RecomputeKind::Selective;
      for (const Value &M : RC->Elements) {
        if (M.Text == "up_proj" || M.Text == "norm")
          C.Aliases.push_back({M.Text, M.Range});
        StringRef Name = M.Text == "up_proj" ? "mla_up_proj" : M.Text == "norm" ? "layernorm" : StringRef(M.Text);
        if (auto Mod = parseEnum<RecomputeModule>(Name); Mod && !llvm::is_contained(C.Modules, *Mod))
          C.Modules.push_back(*Mod);
      }
    }
  }
  if (const Value *CG = Sc.get("cuda_graph"))
    for (const Value &S : CG->Elements)
      if (auto Scope = parseEnum<GraphScope>(S.Text))
        Out.CudaGraph.push_back(*Scope);
  Out.CudaGraphImpl = R.enumValue<GraphImpl>("cuda_graph_impl");
  MoERuntimeConfig &MC = Out.MoE;
  MC.CapacityFactor = R.optReal("moe.capacity_factor");
  MC.PadToCapacity = R.boolean("moe.pad_to_capacity");
  MC.OverlapEpComm = R.boolean("moe.overlap_ep_comm");
  MC.DelayWgrad = R.boolean("moe.delay_wgrad");
  MC.SharedExpertOverlap = R.boolean("moe.shared_expert_overlap");
  MC.DispatcherSms = R.optCount("moe.dispatcher_sms");
  MC.RouterPrecision = R.enumValue<RouterDtype>("moe.router_dtype");
  MC.GroupedGemm = R.boolean("moe.grouped_gemm");
  MC.ForceBalance = R.boolean("moe.force_balance");
  OptimizerConfig &O = Out.Optimizer;
  O.Kind = R.enumValue<OptimizerKind>("optimizer.type");
  O.Distributed = R.boolean("optimizer.distributed");
  O.Schedule.Lr = R.optReal("optimizer.lr");
  O.Schedule.MinLr = R.real("optimizer.min_lr");
  O.Schedule.WarmupSteps = R.count("optimizer.warmup_steps");
  O.Schedule.Decay = R.enumValue<LrDecay>("optimizer.decay");
  O.Schedule.DecaySteps = R.optCount("optimizer.decay_steps");
  O.AdamW.WeightDecay = R.real("optimizer.weight_decay");
  O.AdamW.Beta1 = R.real("optimizer.adam_beta1");
  O.AdamW.Beta2 = R.real("optimizer.adam_beta2");
  O.AdamW.Eps = R.real("optimizer.adam_eps");
  O.AdamW.ClipGrad = R.real("optimizer.clip_grad");
  O.PrecisionAware = R.boolean("optimizer.precision_aware");
  O.OverlapGradReduce = R.boolean("optimizer.overlap_grad_reduce");
  O.OverlapParamGather = R.boolean("optimizer.overlap_param_gather");
  Out.OffloadActivations = R.boolean("offload.activations");
  if (const Value *A = Sc.get("offload.activations"); A && A->K == Value::Kind::List)
    for (const Value &M : A->Elements)
      if (auto Mod = parseEnum<OffloadModule>(M.Text); Mod && !llvm::is_contained(Out.OffloadModules, *Mod))
        Out.OffloadModules.push_back(*Mod);
  Out.OffloadActivationLayers = R.optCount("offload.activation_layers");
  Out.OffloadOptimizer = R.real("offload.optimizer");
  Out.OverlapOffloadCopies = R.boolean("offload.overlap_copies");
  if (const Value *DS = Sc.get("data.source"); DS && DS->K == Value::Kind::Call) {
    Out.Data = DataSourceKind::Real;
    Out.DataPath = DS->Elements.empty() ? "" : DS->Elements[0].Text;
  }
  Out.VariableLength = R.boolean("data.variable_length");
  Out.ShuffleData = R.boolean("data.shuffle");
  if (const Value *S = Sc.get("data.split")) {
    for (const Value &W : S->Elements)
      Out.DataSplit.push_back(W.Num.getInteger());
    // Megatron-Core pads the weights to three and normalises them by their
    // sum (blended_megatron_dataset_config.py parse_and_normalize_split); a
    // run needs sequences to train on.
    if (Out.DataSplit.size() > 3 || Out.DataSplit.empty() || Out.DataSplit[0] <= 0)
      Diags.report(diag::value_out_of_range, Sc.provenance("data.split").Range, "data.split",
                   fmt::format("[{}]", fmt::join(Out.DataSplit, ", ")),
                   "1 to 3 weights (training, validation, test) with a positive training weight");
  }
  Out.EvalInterval = R.optCount("data.eval_interval");
  Out.EvalIters = R.count("data.eval_iters", 100);
  Out.ImagesPerSample = R.count("data.images_per_sample", 1);
  Out.ImageSize = R.count("data.image_size", 448);
  Out.VisionFrozen = R.boolean("vision.frozen");
  Out.LanguageFrozen = R.boolean("language.frozen");
  Out.SweptFields.assign(D.SweepPaths.begin(), D.SweepPaths.end());
  if (DefInfo *Base = D.AST->Base.empty() ? nullptr : lookup(D.AST->Base);
      Base && Base != &D && Base->kind() == ast::DefKind::Recipe && resolve(*Base)) {
    Scope BaseScope(*this, *Base, Sc.choice());
    if (const Value *S = BaseScope.get("seq_len"); S && S->Num.isInteger())
      Out.BaseSeqLen = S->Num.getInteger();
  }

  for (const FieldSpec &F : schemaFor(ast::DefKind::Recipe))
    Out.Origins[F.Path] = Sc.provenance(F.Path);

  if (Diags.errorCount() - Before > ShapeErrors)
    return llvm::None;
  return Out;
}

std::vector<Recipe> SemaImpl::analyze(llvm::Optional<StringRef> OnlyRecipe) {
  // Recipe's move constructor is not noexcept (StringMap), so a growing
  // vector would copy every recipe on each regrowth; collect in a deque.
  std::deque<Recipe> Recipes;
  if (!Main)
    return {};
  // `name[field=value, ...]` selects one sweep point of recipe `name`.
  llvm::Optional<std::string> OnlyPoint;
  std::string WrittenPoint;
  auto Squeeze = [](StringRef S) {
    std::string Out;
    for (char C : S)
      if (C != ' ' && C != '\t')
        Out += C;
    return Out;
  };
  if (OnlyRecipe && OnlyRecipe->contains('[')) {
    WrittenPoint = OnlyRecipe->str();
    OnlyPoint = Squeeze(*OnlyRecipe);
    OnlyRecipe = OnlyRecipe->split('[').first.rtrim();
  }
  std::vector<std::string> PointsSeen;
  if (OnlyRecipe) {
    DefInfo *D = UserDefs.lookup(*OnlyRecipe);
    bool InMain = D && D->kind() == ast::DefKind::Recipe &&
                  llvm::any_of(Main->Definitions, [&](const ast::Definition &X) { return &X == D->AST; });
    if (!InMain) {
      std::vector<StringRef> Names;
      for (const ast::Definition &X : Main->Definitions)
        if (X.Kind == ast::DefKind::Recipe)
          Names.push_back(X.Name);
      StringRef File = Diags.getSourceMgr().getMemoryBuffer(Main->BufferID)->getBufferIdentifier();
      Diags.report(diag::unknown_recipe, SMRange(), OnlyRecipe->str(), File == "-" ? "<stdin>" : File.str(),
                   didYouMean(*OnlyRecipe, Names));
      return {};
    }
  }

  // A definition the parser recovered inside (a syntax error there is
  // reported) is not checked, nor what extends it: its skipped entry would
  // only be reported again as missing.
  auto Damaged = [&](const ast::Definition &X) {
    const ast::Definition *Cur = &X;
    for (unsigned Depth = 0; Cur && Depth < 256; ++Depth) {
      if (Cur->Damaged)
        return true;
      DefInfo *Base = Cur->Base.empty() ? nullptr : UserDefs.lookup(Cur->Base);
      Cur = Base ? Base->AST : nullptr;
    }
    return false;
  };
  for (const ast::Definition &AST : Main->Definitions) {
    DefInfo *D = UserDefs.lookup(AST.Name);
    if (!D || D->AST != &AST)
      continue; // a duplicate, already reported
    if (Damaged(AST))
      continue;
    if (AST.Kind != ast::DefKind::Recipe) {
      checkDefinition(*D);
      continue;
    }
    if (OnlyRecipe && AST.Name != *OnlyRecipe)
      continue;
    if (!resolve(*D))
      continue;

    // The cartesian product of the recipe's sweeps, bounded before expansion.
    std::vector<std::pair<std::string, unsigned>> Dims;
    uint64_t Points = 1;
    std::vector<std::string> Factors;
    for (const std::string &Path : D->SweepPaths) {
      const FieldEntry &E = D->Fields[Path];
      unsigned N = llvm::cast<ast::ListExpr>(E.Value)->Elements.size();
      Dims.push_back({Path, N});
      Factors.push_back(std::to_string(N));
      Points = std::min<uint64_t>(Points * N, uint64_t(1) << 40);
    }
    if (Points > Opts.MaxSweepPoints) {
      Diags.report(diag::sweep_too_large, AST.NameRange, Points, llvm::join(Factors, " x "), Opts.MaxSweepPoints);
      continue;
    }
    std::vector<unsigned> Index(Dims.size(), 0);
    for (uint64_t Point = 0; Point < Points; ++Point) {
      SweepChoice Choice;
      std::string Name = AST.Name;
      if (!Dims.empty()) {
        std::vector<std::string> Labels;
        for (size_t I = 0; I < Dims.size(); ++I) {
          Choice[Dims[I].first] = Index[I];
          const auto *L = llvm::cast<ast::ListExpr>(D->Fields[Dims[I].first].Value);
          StringRef Short = StringRef(Dims[I].first).rsplit('.').second;
          if (Short.empty())
            Short = Dims[I].first;
          Labels.push_back((Short + "=" + sourceText(L->Elements[Index[I]]->getRange())).str());
        }
        Name += "[" + llvm::join(Labels, ", ") + "]";
      }
      bool Selected = !OnlyPoint || Squeeze(Name) == *OnlyPoint;
      if (OnlyPoint)
        PointsSeen.push_back(Name);
      if (Selected) {
        Diags.setRecipeContext(Name);
        Scope Sc(*this, *D, Choice);
        if (auto R = lowerRecipe(Sc, Name))
          Recipes.push_back(std::move(*R));
        Diags.setRecipeContext("");
      }
      // Advance the odometer.
      for (size_t I = Dims.size(); I-- > 0;) {
        if (++Index[I] < Dims[I].second)
          break;
        Index[I] = 0;
      }
    }
  }
  if (OnlyPoint && !PointsSeen.empty() &&
      !llvm::any_of(PointsSeen, [&](const std::string &N) { return Squeeze(N) == *OnlyPoint; })) {
    std::vector<StringRef> Names(PointsSeen.begin(), PointsSeen.end());
    std::vector<std::string> Shown(PointsSeen.begin(), PointsSeen.begin() + std::min<size_t>(PointsSeen.size(), 6));
    if (PointsSeen.size() > Shown.size())
      Shown.push_back(fmt::format("... ({} in all)", PointsSeen.size()));
    const DefInfo *D = UserDefs.lookup(*OnlyRecipe);
    Diags.report(diag::unknown_sweep_point, D && D->AST ? D->AST->NameRange : SMRange(), OnlyRecipe->str(),
                 WrittenPoint, didYouMean(WrittenPoint, Names), llvm::join(Shown, ", "));
  }
  std::vector<Recipe> Out;
  Out.reserve(Recipes.size());
  for (Recipe &R : Recipes)
    Out.push_back(std::move(R));
  return Out;
}
