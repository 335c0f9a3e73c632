//===- Plan.cpp - Building a plan and writing it --------------------------===//
#include "moec/Emit/Plan.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/xxhash.h"
#include <csignal>
#include <cstdlib>
#include <fmt/format.h>

using namespace moec;
namespace json = llvm::json;

llvm::Expected<Plan> moec::buildPlan(const Recipe &R, llvm::StringRef SourceFile, const PlanOptions &Opts) {
  Plan P;
  P.R = R;
  P.SourceFile = SourceFile.str();
  std::string Canonical;
  llvm::raw_string_ostream(Canonical) << recipeToJSON(R);
  P.RecipeHash = fmt::format("xxh64:{:016x}", llvm::xxHash64(Canonical));

  const ParallelConfig &Par = R.Parallel;
  llvm::Expected<std::shared_ptr<const PipelinePlan>> Shared = sharedPipelineFor(R);
  if (!Shared)
    return Shared.takeError();
  const PipelinePlan &Pipeline = **Shared;
  if (Opts.WithRanks) {
    P.Pipeline = Pipeline;
  } else {
    // Sweeps print no schedule: copy everything but the op lists.
    P.Pipeline.PP = Pipeline.PP;
    P.Pipeline.VPP = Pipeline.VPP;
    P.Pipeline.Microbatches = Pipeline.Microbatches;
    P.Pipeline.VirtualStages = Pipeline.VirtualStages;
    P.Pipeline.FirstLayer = Pipeline.FirstLayer;
    P.Pipeline.WarmupForwards = Pipeline.WarmupForwards;
    P.Pipeline.PeakInFlight = Pipeline.PeakInFlight;
    P.Pipeline.BubbleFraction = Pipeline.BubbleFraction;
  }

  if (Opts.WithRanks) {
    ProcessGridSizes S;
    S.TP = Par.TP;
    S.CP = Par.CP;
    S.EP = Par.EP;
    S.ETP = Par.ETP;
    S.PP = Par.PP;
    S.DP = std::max<int64_t>(Par.DP, 1);
    S.EDP = std::max<int64_t>(Par.EDP, 1);
    S.PipelineLast = Par.Order == RankOrder::TpCpEpDpPp;
    P.Grid = std::make_unique<ProcessGrid>(S);
  }
  P.Memory = estimateMemory(R, Pipeline, *Opts.Calib);
  P.Flops = countFlops(R);
  P.Time = predictStepTime(R, Pipeline, *Opts.Calib, &P.Memory);
  return P;
}

static json::Object scheduleJSON(const LrScheduleConfig &S) {
  json::Object O{{"min_lr", S.MinLr}, {"warmup_steps", S.WarmupSteps}, {"decay", enumName(S.Decay).str()}};
  if (S.Lr)
    O["lr"] = *S.Lr;
  if (S.DecaySteps)
    O["decay_steps"] = *S.DecaySteps;
  return O;
}

json::Value moec::recipeToJSON(const Recipe &R) {
  const ModelSpec &M = R.Model;
  json::Object Model{{"name", M.Name},   {"layers", M.Layers},       {"hidden", M.Hidden},
                     {"heads", M.Heads}, {"kv_heads", M.KvHeads},    {"head_dim", M.HeadDim},
                     {"vocab", M.Vocab}, {"mtp_layers", M.MtpLayers}};
  if (M.FfnHidden)
    Model["ffn_hidden"] = *M.FfnHidden;
  Model["qk_norm"] = M.QkNorm;
  if (M.RopeTheta)
    Model["rope_theta"] = *M.RopeTheta;
  if (M.RopeFraction)
    Model["rope_fraction"] = *M.RopeFraction;
  if (!M.MropeSection.empty())
    Model["mrope_section"] = json::Array(M.MropeSection);
  if (M.NormEpsilon)
    Model["norm_epsilon"] = *M.NormEpsilon;
  if (M.MLA)
    Model["mla"] = json::Object{{"q_lora_rank", M.MLA->QLoraRank},
                                {"kv_lora_rank", M.MLA->KvLoraRank},
                                {"qk_head_dim", M.MLA->QkHeadDim},
                                {"qk_rope_head_dim", M.MLA->QkRopeHeadDim},
                                {"v_head_dim", M.MLA->VHeadDim}};
  if (M.MoE) {
    json::Object MoE{{"experts", M.MoE->Experts},          {"top_k", M.MoE->TopK},
                     {"ffn_hidden", M.MoE->FfnHidden},     {"shared_experts", M.MoE->SharedExperts},
                     {"dense_layers", M.MoE->DenseLayers}, {"router", enumName(M.MoE->RouterKind)}};
    if (M.MoE->SharedFfnHidden)
      MoE["shared_ffn_hidden"] = *M.MoE->SharedFfnHidden;
    MoE["pre_softmax"] = M.MoE->PreSoftmax;
    MoE["expert_bias"] = M.MoE->ExpertBias;
    if (R.MoE.ForceBalance)
      MoE["force_balance"] = true;
    if (M.MoE->SharedExpertGate)
      MoE["shared_expert_gate"] = true;
    if (M.MoE->TopKScaling)
      MoE["topk_scaling"] = *M.MoE->TopKScaling;
    if (M.MoE->Groups)
      MoE["groups"] = *M.MoE->Groups;
    if (M.MoE->GroupTopK)
      MoE["group_top_k"] = *M.MoE->GroupTopK;
    Model["moe"] = std::move(MoE);
  }
  if (M.LinearAttention)
    Model["linear_attention"] = json::Object{{"interval", M.LinearAttention->Interval},
                                             {"key_heads", M.LinearAttention->KeyHeads},
                                             {"value_heads", M.LinearAttention->ValueHeads},
                                             {"head_dim", M.LinearAttention->HeadDim}};
  if (M.Vision) {
    json::Object V{{"layers", M.Vision->Layers},
                   {"hidden", M.Vision->Hidden},
                   {"heads", M.Vision->Heads},
                   {"ffn_hidden", M.Vision->FfnHidden},
                   {"patch_size", M.Vision->PatchSize},
                   {"spatial_merge", M.Vision->SpatialMerge},
                   {"temporal_patch", M.Vision->TemporalPatch},
                   {"out_hidden", M.Vision->OutHidden.getValueOr(M.Hidden)},
                   {"start_token", M.Vision->StartToken},
                   {"image_token", M.Vision->ImageToken},
                   {"end_token", M.Vision->EndToken}};
    if (M.Vision->PositionEmbeddings)
      V["position_embeddings"] = *M.Vision->PositionEmbeddings;
    if (!M.Vision->DeepstackLayers.empty())
      V["deepstack_layers"] = json::Array(M.Vision->DeepstackLayers);
    Model["vision"] = std::move(V);
  }

  const GpuSpec &G = R.Gpu;
  json::Object Gpu{{"name", G.Name},
                   {"memory_bytes", G.MemoryBytes},
                   {"bf16_flops", G.Bf16Flops},
                   {"gpus_per_node", G.GpusPerNode},
                   {"nvlink_domain", G.NVLinkDomain},
                   {"nvlink_bytes_per_s", G.NVLinkBytesPerSec},
                   {"network_bytes_per_s", G.NetworkBytesPerSec}};

  const ParallelConfig &P = R.Parallel;
  json::Object Parallel{{"tp", P.TP},
                        {"cp", P.CP},
                        {"ep", P.EP},
                        {"etp", P.ETP},
                        {"pp", P.PP},
                        {"vpp", P.VPP},
                        {"dp", P.DP},
                        {"edp", P.EDP},
                        {"sp", P.SequenceParallel},
                        {"fsdp", P.FSDP},
                        {"order", P.Order == RankOrder::TpCpEpDpPp ? "tp-cp-ep-dp-pp" : "tp-cp-ep-pp-dp"},
                        {"cp_comm", enumName(P.CpCommKind)}};
  if (P.Layout)
    Parallel["layout"] = *P.Layout;

  json::Object Recompute{{"kind", R.Recompute.Kind == RecomputeKind::None   ? "none"
                                  : R.Recompute.Kind == RecomputeKind::Full ? "full"
                                                                            : "selective"}};
  if (R.Recompute.Kind == RecomputeKind::Full) {
    Recompute["method"] = R.Recompute.Method == RecomputeMethod::Block ? "block" : "uniform";
    Recompute["layers"] = R.Recompute.Layers ? *R.Recompute.Layers : 1;
  }
  json::Array Modules;
  for (RecomputeModule Mod : R.Recompute.Modules)
    Modules.push_back(recomputeModuleName(Mod));
  Recompute["modules"] = std::move(Modules);
  json::Array Scopes;
  for (GraphScope S : R.CudaGraph)
    Scopes.push_back(graphScopeName(S));

  json::Object Data{{"source", R.Data == DataSourceKind::Mock ? "mock" : "real"},
                    {"variable_length", R.VariableLength},
                    {"shuffle", R.ShuffleData}};
  if (R.Data == DataSourceKind::Real)
    Data["path"] = R.DataPath;
  if (!R.DataSplit.empty())
    Data["split"] = json::Array(R.DataSplit);
  if (R.EvalInterval) {
    Data["eval_interval"] = *R.EvalInterval;
    Data["eval_iters"] = R.EvalIters;
  }
  if (R.Model.Vision) {
    Data["images_per_sample"] = R.ImagesPerSample;
    Data["image_size"] = R.ImageSize;
  }

  json::Object Out{{"model", std::move(Model)},
                   {"gpu", std::move(Gpu)},
                   {"nodes", R.Nodes},
                   {"world_size", R.WorldSize},
                   {"seq_len", R.SeqLen},
                   {"micro_batch", R.MicroBatch},
                   {"global_batch", R.GlobalBatch},
                   {"parallel", std::move(Parallel)},
                   {"precision", precisionName(R.Prec)},
                   {"dispatcher", dispatcherName(R.Dispatch)},
                   {"recompute", std::move(Recompute)},
                   {"cuda_graph", std::move(Scopes)},
                   {"offload_optimizer", R.OffloadOptimizer},
                   {"optimizer", json::Object{{"type", R.Optimizer.Kind == OptimizerKind::SGD    ? "sgd"
                                                       : R.Optimizer.Kind == OptimizerKind::Muon ? "muon"
                                                                                                 : "adam"},
                                              {"distributed", R.Optimizer.Distributed},
                                              {"offload_fraction", R.OffloadOptimizer},
                                              {"weight_decay", R.Optimizer.AdamW.WeightDecay},
                                              {"adam_beta1", R.Optimizer.AdamW.Beta1},
                                              {"adam_beta2", R.Optimizer.AdamW.Beta2},
                                              {"adam_eps", R.Optimizer.AdamW.Eps},
                                              {"clip_grad", R.Optimizer.AdamW.ClipGrad},
                                              {"schedule", scheduleJSON(R.Optimizer.Schedule)}}},
                   {"data", std::move(Data)}};
  if (R.Model.isVLM())
    Out["vision_frozen"] = R.VisionFrozen;
  return Out;
}

static json::Object breakdownJSON(const MemoryBreakdown &B) {
  json::Object O;
  for (auto &[Name, Bytes] : B.items())
    O[Name] = Bytes;
  return O;
}

json::Value moec::planToJSON(const Plan &P) {
  const Recipe &R = P.R;
  json::Object Out{{"plan_version", PlanVersion}, {"recipe", R.PointName},     {"recipe_hash", P.RecipeHash},
                   {"source", P.SourceFile},      {"world_size", R.WorldSize}, {"nodes", R.Nodes},
                   {"dp", R.Parallel.DP},         {"edp", R.Parallel.EDP},     {"config", recipeToJSON(R)}};

  const PipelinePlan &PL = P.Pipeline;
  json::Array Stages;
  for (size_t V = 0; V < PL.VirtualStages.size(); ++V) {
    const LayoutStage &S = PL.VirtualStages[V];
    Stages.push_back(json::Object{{"virtual_stage", int64_t(V)},
                                  {"rank", PL.rankOf(V)},
                                  {"chunk", PL.chunkOf(V)},
                                  {"first_layer", V < PL.FirstLayer.size() ? PL.FirstLayer[V] : 0},
                                  {"decoder_layers", S.DecoderLayers},
                                  {"mtp_layers", S.MtpLayers},
                                  {"embedding", S.Embedding},
                                  {"loss", S.Loss}});
  }
  json::Array Schedule;
  for (size_t Rank = 0; Rank < PL.Schedule.size(); ++Rank) {
    json::Array Ops;
    for (const ScheduledOp &Op : PL.Schedule[Rank])
      Ops.push_back(fmt::format("{}{}.{}", Op.K == ScheduledOp::Forward ? 'F' : 'B', Op.Microbatch, Op.Chunk));
    Schedule.push_back(json::Object{{"rank", int64_t(Rank)}, {"ops", std::move(Ops)}});
  }
  json::Array InFlight;
  for (int64_t N : PL.PeakInFlight)
    InFlight.push_back(N);
  Out["pipeline"] = json::Object{{"pp", PL.PP},
                                 {"vpp", PL.VPP},
                                 {"microbatches", PL.Microbatches},
                                 {"bubble_fraction", PL.BubbleFraction},
                                 {"stages", std::move(Stages)},
                                 {"peak_in_flight", std::move(InFlight)},
                                 {"schedule", std::move(Schedule)}};

  const MemoryEstimate &Mem = P.Memory;
  json::Array PerStage;
  for (size_t S = 0; S < Mem.PerStage.size(); ++S)
    PerStage.push_back(json::Object{{"stage", int64_t(S)},
                                    {"total_bytes", Mem.PerStage[S].total()},
                                    {"breakdown", breakdownJSON(Mem.PerStage[S])}});
  json::Object ByModule;
  for (auto &[Name, Bytes] : Mem.ActivationPerLayerByModule)
    ByModule[Name] = Bytes;
  Out["memory"] =
      json::Object{{"peak_bytes", Mem.PeakBytes},
                   {"capacity_bytes", Mem.CapacityBytes},
                   {"fits", Mem.fits()},
                   {"peak_stage", Mem.PeakStage},
                   {"breakdown", Mem.PerStage.empty() ? json::Object() : breakdownJSON(Mem.PerStage[Mem.PeakStage])},
                   {"activation_per_layer_by_module", std::move(ByModule)},
                   {"per_stage", std::move(PerStage)}};

  const StepTimeBreakdown &T = P.Time;
  Out["predicted"] = json::Object{{"step_time_s", T.StepTime},
                                  {"tokens_per_s_per_gpu", T.TokensPerSecPerGpu},
                                  {"useful_tokens_per_s_per_gpu", T.UsefulTokensPerSecPerGpu},
                                  {"model_tflops_per_gpu", T.ModelTflopsPerGpu},
                                  {"mfu", T.MFU},
                                  {"breakdown_s", json::Object{{"compute", T.Compute},
                                                               {"recompute", T.Recompute},
                                                               {"tensor_parallel", T.TensorParallel},
                                                               {"context_parallel", T.ContextParallel},
                                                               {"expert_parallel", T.ExpertParallel},
                                                               {"pipeline_p2p", T.PipelineP2P},
                                                               {"data_parallel", T.DataParallel},
                                                               {"bubble", T.Bubble},
                                                               {"host", T.Host},
                                                               {"activation_offload", T.ActivationOffload},
                                                               {"optimizer", T.Optimizer}}}};
  json::Array StageForward, StageBackward;
  for (double Sec : T.StageForwardSec)
    StageForward.push_back(Sec);
  for (double Sec : T.StageBackwardSec)
    StageBackward.push_back(Sec);
  Out["predicted"].getAsObject()->try_emplace(
      "virtual_stage_s", json::Object{{"forward", std::move(StageForward)}, {"backward", std::move(StageBackward)}});
  Out["flops"] = json::Object{{"decoder_per_token", P.Flops.DecoderPerToken},
                              {"vision_per_token", P.Flops.VisionPerToken},
                              {"per_step", P.Flops.PerStep}};

  if (P.Grid) {
    const ProcessGrid &G = *P.Grid;
    json::Object Groups;
    std::vector<std::pair<std::string, std::vector<std::vector<int64_t>>>> All;
    for (llvm::StringRef Name : ProcessGrid::denseGroupNames())
      All.push_back({Name.str(), G.groups(Name)});
    for (llvm::StringRef Name : ProcessGrid::expertGroupNames())
      All.push_back({Name.str(), G.groups(Name)});
    // Per rank, the index of its group of each kind.
    int64_t W = G.Dense.worldSize();
    std::vector<json::Object> RankGroups(W);
    for (auto &[Name, List] : All) {
      json::Array Arr;
      for (size_t I = 0; I < List.size(); ++I) {
        json::Array Members;
        for (int64_t M : List[I]) {
          Members.push_back(M);
          if (M < W)
            RankGroups[M][Name] = int64_t(I);
        }
        Arr.push_back(std::move(Members));
      }
      Groups[Name] = std::move(Arr);
    }
    json::Array Ranks;
    int64_t PerNode = std::max<int64_t>(R.Gpu.GpusPerNode, 1);
    for (int64_t Rank = 0; Rank < W; ++Rank) {
      json::Object Dense, Expert;
      for (const char *Axis : {"tp", "cp", "dp", "pp"})
        Dense[Axis] = G.Dense.coordinate(Rank, Axis);
      Expert["etp"] = G.Expert.coordinate(Rank, "tp");
      Expert["ep"] = G.Expert.coordinate(Rank, "ep");
      Expert["edp"] = G.Expert.coordinate(Rank, "dp");
      Expert["pp"] = G.Expert.coordinate(Rank, "pp");
      Ranks.push_back(json::Object{{"rank", Rank},
                                   {"node", Rank / PerNode},
                                   {"local_rank", Rank % PerNode},
                                   {"dense", std::move(Dense)},
                                   {"expert", std::move(Expert)},
                                   {"groups", std::move(RankGroups[Rank])}});
    }
    // Hierarchical CP (parallel.cp_hierarchy): the groups of each level.
    auto Levels = hierarchicalGroups(G.groups("cp"), R.Parallel.CpHierarchy);
    if (!Levels.empty()) {
      json::Array ByLevel;
      for (const auto &Level : Levels) {
        json::Array Arr;
        for (const auto &Members : Level)
          Arr.push_back(json::Array(Members));
        ByLevel.push_back(std::move(Arr));
      }
      Out["cp_hierarchy_groups"] = std::move(ByLevel);
    }
    Out["groups"] = std::move(Groups);
    Out["ranks"] = std::move(Ranks);
  }
  return Out;
}

static std::string gb(double Bytes) { return fmt::format("{:.1f} GB", Bytes / 1e9); }

void moec::printPlanSummary(const Plan &P, llvm::raw_ostream &OS) {
  const Recipe &R = P.R;
  const ParallelConfig &Par = R.Parallel;
  OS << fmt::format("plan {}: {} x {} ({} GPUs, {} nodes)\n", R.PointName, R.Model.Name, R.Gpu.Name, R.WorldSize,
                    R.Nodes);
  OS << fmt::format("  layout    tp={} cp={} ep={} etp={} pp={} vpp={} -> dp={} edp={}; {} micro batches/step, "
                    "bubble {:.1f}%\n",
                    Par.TP, Par.CP, Par.EP, Par.ETP, Par.PP, Par.VPP, Par.DP, Par.EDP, P.Pipeline.Microbatches,
                    100 * P.Pipeline.BubbleFraction);
  const MemoryEstimate &M = P.Memory;
  OS << fmt::format("  memory    peak {} of {} on pipeline stage {} ({})\n", gb(M.PeakBytes), gb(M.CapacityBytes),
                    M.PeakStage, M.fits() ? "fits" : "DOES NOT FIT");
  if (!M.PerStage.empty()) {
    std::vector<std::string> Parts;
    for (auto &[Name, Bytes] : M.PerStage[M.PeakStage].items())
      if (Bytes > 0)
        Parts.push_back(fmt::format("{} {}", Name, gb(Bytes)));
    OS << "            " << llvm::join(Parts, ", ") << "\n";
  }
  const StepTimeBreakdown &T = P.Time;
  OS << fmt::format("  speed     step {:.2f} s, {:.0f} tokens/s/GPU, {:.0f} TFLOP/s/GPU, MFU {:.1f}%\n", T.StepTime,
                    T.TokensPerSecPerGpu, T.ModelTflopsPerGpu, 100 * T.MFU);
  if (R.Model.isVLM())
    OS << fmt::format("            {:.0f} useful (text) tokens/s/GPU\n", T.UsefulTokensPerSecPerGpu);
}

/// `[0 1]`, and runs of three or more consecutive ranks as `[32-63]`.
static std::string rankList(const std::vector<int64_t> &Ranks) {
  std::vector<std::string> Parts;
  for (size_t I = 0; I < Ranks.size();) {
    size_t J = I;
    while (J + 1 < Ranks.size() && Ranks[J + 1] == Ranks[J] + 1)
      ++J;
    if (J - I >= 2) {
      Parts.push_back(fmt::format("{}-{}", Ranks[I], Ranks[J]));
    } else {
      for (size_t K = I; K <= J; ++K)
        Parts.push_back(std::to_string(Ranks[K]));
    }
    I = J + 1;
  }
  return "[" + llvm::join(Parts, " ") + "]";
}

/// Head, then Items separated by spaces, wrapped before column Width with
/// continuation lines indented under the first item: a 256-rank group list
/// or a 512-micro-batch schedule stays readable in a terminal.
static void printWrapped(llvm::raw_ostream &OS, const std::string &Head, llvm::ArrayRef<std::string> Items,
                         size_t Width = 100) {
  std::string Line = Head;
  std::string Indent(Head.size(), ' ');
  bool First = true;
  for (const std::string &Item : Items) {
    if (!First && Line.size() + 1 + Item.size() > Width) {
      OS << Line << "\n";
      Line = Indent + Item;
    } else {
      Line += (First ? "" : " ") + Item;
    }
    First = false;
  }
  OS << Line << "\n";
}

void moec::printLayout(const Plan &P, llvm::raw_ostream &OS) {
  const Recipe &R = P.R;
  const ParallelConfig &Par = R.Parallel;
  OS << fmt::format("layout {}: {} ranks on {} nodes of {} x {}, order {}\n", R.PointName, R.WorldSize, R.Nodes,
                    R.Gpu.GpusPerNode, R.Gpu.Name,
                    Par.Order == RankOrder::TpCpEpDpPp ? "tp-cp-ep-dp-pp" : "tp-cp-ep-pp-dp");
  OS << fmt::format("  dense   tp={} cp={} dp={} pp={}\n", Par.TP, Par.CP, Par.DP, Par.PP);
  OS << fmt::format("  expert  etp={} ep={} edp={} pp={}\n", Par.ETP, Par.EP, Par.EDP, Par.PP);
  if (P.Grid) {
    OS << "  groups\n";
    auto PrintKind = [&](llvm::StringRef Name) {
      std::vector<std::string> Parts;
      for (const std::vector<int64_t> &G : P.Grid->groups(Name))
        Parts.push_back(rankList(G));
      printWrapped(OS, fmt::format("    {:<9}", Name.str()), Parts);
    };
    for (llvm::StringRef Name : ProcessGrid::denseGroupNames())
      PrintKind(Name);
    for (llvm::StringRef Name : ProcessGrid::expertGroupNames())
      PrintKind(Name);
  }
  const PipelinePlan &PL = P.Pipeline;
  OS << fmt::format("  pipeline pp={} vpp={}, {} micro batches, bubble {:.1f}%\n", PL.PP, PL.VPP, PL.Microbatches,
                    100 * PL.BubbleFraction);
  for (size_t V = 0; V < PL.VirtualStages.size(); ++V) {
    const LayoutStage &S = PL.VirtualStages[V];
    std::vector<std::string> Parts;
    if (S.Embedding)
      Parts.push_back("embedding");
    if (S.DecoderLayers > 0)
      Parts.push_back(S.DecoderLayers == 1
                          ? fmt::format("layer {}", PL.FirstLayer[V])
                          : fmt::format("layers {}-{}", PL.FirstLayer[V], PL.FirstLayer[V] + S.DecoderLayers - 1));
    if (S.MtpLayers > 0)
      Parts.push_back(fmt::format("{} MTP", S.MtpLayers));
    if (S.Loss)
      Parts.push_back("loss");
    if (Parts.empty())
      Parts.push_back("empty");
    OS << fmt::format("    stage {:<3} pp rank {} chunk {}: {}\n", V, PL.rankOf(int64_t(V)), PL.chunkOf(int64_t(V)),
                      llvm::join(Parts, ", "));
  }
  for (size_t Rank = 0; Rank < PL.Schedule.size(); ++Rank) {
    std::vector<std::string> Ops;
    for (const ScheduledOp &Op : PL.Schedule[Rank])
      Ops.push_back(fmt::format("{}{}.{}", Op.K == ScheduledOp::Forward ? 'F' : 'B', Op.Microbatch, Op.Chunk));
    printWrapped(OS, fmt::format("    pp rank {} (peak {} in flight): ", Rank, PL.PeakInFlight[Rank]), Ops);
  }
  if (!P.Grid)
    return;
  const ProcessGrid &G = *P.Grid;
  int64_t PerNode = std::max<int64_t>(R.Gpu.GpusPerNode, 1);
  OS << "  ranks\n";
  for (int64_t Rank = 0; Rank < G.Dense.worldSize(); ++Rank)
    OS << fmt::format("    rank {:<5} node {:<4} gpu {:<3} tp {} cp {} dp {} pp {} | etp {} ep {} edp {}\n", Rank,
                      Rank / PerNode, Rank % PerNode, G.Dense.coordinate(Rank, "tp"), G.Dense.coordinate(Rank, "cp"),
                      G.Dense.coordinate(Rank, "dp"), G.Dense.coordinate(Rank, "pp"), G.Expert.coordinate(Rank, "tp"),
                      G.Expert.coordinate(Rank, "ep"), G.Expert.coordinate(Rank, "dp"));
}

llvm::Error moec::writeFileAtomically(llvm::StringRef Path, llvm::StringRef Contents) {
  llvm::SmallString<256> Dir(Path);
  llvm::sys::path::remove_filename(Dir);
  if (Dir.empty())
    Dir = ".";
  llvm::SmallString<256> Model(Dir);
  llvm::sys::path::append(Model, llvm::sys::path::filename(Path) + ".tmp-%%%%%%");
  int FD;
  llvm::SmallString<256> Temp;
  if (std::error_code EC = llvm::sys::fs::createUniqueFile(Model, FD, Temp))
    return llvm::createStringError(EC, "cannot create a temporary file in '%s': %s", Dir.c_str(), EC.message().c_str());
  // Interrupted by a signal (Ctrl-C, a CI timeout's SIGTERM), leave no
  // temporary behind; SIGKILL leaves it, but never a partial Path.
  llvm::sys::RemoveFileOnSignal(Temp);
  {
    llvm::raw_fd_ostream OS(FD, /*shouldClose=*/true);
    // Test hook (test/lit/reliability/atomic-*.test): MOEC_TEST_KILL_WRITER=N
    // writes the first N bytes to the temporary file and then kills the
    // process with SIGKILL, the one signal nothing can clean up after.
    if (const char *Kill = std::getenv("MOEC_TEST_KILL_WRITER")) {
      OS << Contents.take_front(std::strtoull(Kill, nullptr, 10));
      OS.flush();
      std::raise(SIGKILL);
    }
    OS << Contents;
    OS.flush();
    if (OS.has_error()) {
      std::error_code EC = OS.error();
      OS.clear_error();
      llvm::sys::fs::remove(Temp);
      llvm::sys::DontRemoveFileOnSignal(Temp);
      return llvm::createStringError(EC, "cannot write '%s': %s", Temp.c_str(), EC.message().c_str());
    }
  }
  std::error_code EC = llvm::sys::fs::rename(Temp, Path);
  if (EC)
    llvm::sys::fs::remove(Temp);
  llvm::sys::DontRemoveFileOnSignal(Temp);
  if (EC)
    return llvm::createStringError(EC, "cannot replace '%s': %s", Path.str().c_str(), EC.message().c_str());
  return llvm::Error::success();
}
