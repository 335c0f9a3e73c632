//===- train/Trainer.cpp - A launch plan's training steps on this rank
//-----===//
#include "train/Trainer.h"

#include <fmt/format.h>

#include "checkpoint/HuggingFaceCheckpoint.h"
#include "checkpoint/SafeTensors.h"
#include "data/MultimodalSamples.h"
#include "kernels/host/Blas.h"
#include "model/ModelOps.h"
#include "model/Router.h"
#include "parallel/cp/ContextParallelAttention.h"
#include "parallel/pp/PipelineExecutor.h"
#include "train/HuggingFaceImport.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <sys/resource.h>

using namespace moert;

std::map<std::string, std::unique_ptr<Communicator>> moert::createPlanGroups(const moec::LaunchPlan &Plan,
                                                                             CommWorld &World) {
  std::map<std::string, std::unique_ptr<Communicator>> Groups;
  for (const auto &[Kind, Lists] : Plan.Groups)
    Groups[Kind] = World.split(Kind, Lists);
  return Groups;
}

namespace {

[[noreturn]] void refuse(const std::string &Message) { throw std::runtime_error("trainer: " + Message); }

/// Hi/lo float pair of a double, so sums over ranks keep ~48 bits.
void splitDouble(double X, float *Out) {
  Out[0] = float(X);
  Out[1] = float(X - double(Out[0]));
}
double joinDouble(const float *In) { return double(In[0]) + double(In[1]); }

/// Bytes as MiB + remainder, both exact in a float (up to 16 TiB).
void splitBytes(int64_t Bytes, float *Out) {
  Out[0] = float(Bytes >> 20);
  Out[1] = float(Bytes & ((int64_t(1) << 20) - 1));
}
int64_t joinBytes(const float *In) { return (int64_t(In[0]) << 20) + int64_t(In[1]); }

/// User + system CPU seconds of this process so far.
double cpuSeconds() {
  struct rusage U;
  if (getrusage(RUSAGE_SELF, &U) != 0)
    return 0;
  return double(U.ru_utime.tv_sec + U.ru_stime.tv_sec) + 1e-6 * double(U.ru_utime.tv_usec + U.ru_stime.tv_usec);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

} // namespace

ModelConfig moert::modelConfigOf(const moec::LaunchPlan &Plan) {
  const moec::LaunchModel &M = Plan.Model;
  if (!M.Unsupported.empty()) {
    std::string Names;
    for (const std::string &U : M.Unsupported)
      Names += (Names.empty() ? "" : ", ") + U;
    refuse("the CPU runtime does not implement " + Names);
  }
  ModelConfig C;
  C.Layers = M.Layers;
  C.Hidden = M.Hidden;
  C.FfnHidden = M.FfnHidden.value_or(0);
  C.Heads = M.Heads;
  C.KvHeads = M.KvHeads;
  C.HeadDim = M.HeadDim;
  C.Vocab = M.Vocab;
  C.QkNorm = M.QkNorm;
  C.MtpLayers = M.MtpLayers;
  if (M.RopeFraction < 1) {
    // Megatron's RotaryEmbedding rotates int(head_dim x rotary_percent) dims.
    C.RotaryDim = int64_t(double(M.HeadDim) * M.RopeFraction);
    if (C.RotaryDim < 2 || C.RotaryDim % 2)
      refuse("rope_fraction " + std::to_string(M.RopeFraction) + " of head_dim " + std::to_string(M.HeadDim) +
             " rotates " + std::to_string(C.RotaryDim) +
             " dimensions; RoPE needs an even number, at least 2: choose a rope_fraction that gives one");
  }
  if (M.LinearAttention)
    C.Linear = ModelConfig::LinearAttention{M.LinearAttention->Interval, M.LinearAttention->KeyHeads,
                                            M.LinearAttention->ValueHeads, M.LinearAttention->HeadDim};
  C.RopeTheta = M.RopeTheta;
  C.RmsNormEps = M.NormEpsilon;
  if (!M.MropeSection.empty()) {
    if (M.Mla)
      refuse("mrope_section beside latent attention: multimodal RoPE rotates query-key heads");
    C.MropeSection = std::array<int64_t, 3>{M.MropeSection[0], M.MropeSection[1], M.MropeSection[2]};
  }
  if (M.Mla)
    C.Mla = ModelConfig::LatentAttention{M.Mla->QLoraRank, M.Mla->KvLoraRank, M.Mla->QkHeadDim, M.Mla->QkRopeHeadDim,
                                         M.Mla->VHeadDim};
  if (M.MoE) {
    C.Experts = M.MoE->Experts;
    C.TopK = M.MoE->TopK;
    C.MoeFfnHidden = M.MoE->FfnHidden;
    C.SharedFfnHidden =
        M.MoE->SharedExperts > 0 ? M.MoE->SharedFfnHidden.value_or(M.MoE->SharedExperts * C.MoeFfnHidden) : 0;
    C.DenseLayers = M.MoE->DenseLayers;
    C.SigmoidRouter = M.MoE->SigmoidRouter;
    C.PreSoftmax = M.MoE->PreSoftmax;
    C.RouterGroups = M.MoE->Groups;
    C.RouterGroupTopK = M.MoE->GroupTopK;
    C.ExpertBias = M.MoE->ExpertBias;
    C.ForceBalance = M.MoE->ForceBalance;
    C.SharedExpertGate = M.MoE->SharedExpertGate;
    C.TopKScaling = M.MoE->TopKScaling;
  }
  if (C.DenseLayers > 0 && C.FfnHidden <= 0)
    refuse("dense layers need the model's ffn_hidden");
  if (M.Vision) {
    const moec::LaunchVision &V = *M.Vision;
    VisionConfig T;
    T.Depth = V.Layers;
    T.Hidden = V.Hidden;
    T.Heads = V.Heads;
    T.FfnHidden = V.FfnHidden;
    T.OutHidden = V.OutHidden;
    T.PatchSize = V.PatchSize;
    T.TemporalPatch = V.TemporalPatch;
    T.MergeSize = V.SpatialMerge;
    T.DeepstackLayers = V.DeepstackLayers;
    T.PositionGrid = int64_t(std::llround(std::sqrt(double(V.PositionEmbeddings))));
    if (V.PositionEmbeddings <= 0 || T.PositionGrid * T.PositionGrid != V.PositionEmbeddings)
      refuse("the vision tower interpolates a learned position table: set vision.position_embeddings (a square "
             "number; Qwen3-VL 2304)");
    if (T.OutHidden != C.Hidden)
      refuse("vision.out_hidden " + std::to_string(T.OutHidden) + " is not the decoder's hidden size " +
             std::to_string(C.Hidden) + ": the tower's tokens replace the placeholders' embeddings");
    if (T.Hidden % T.Heads || (T.Hidden / T.Heads) % 4)
      refuse("vision.hidden / vision.heads must be a multiple of 4 (the 2-D RoPE rotates rows and columns in pairs)");
    if (C.MtpLayers > 0)
      refuse("multi-token prediction beside a vision tower: the MTP blocks' future tokens would cross the image "
             "placeholders; set mtp_layers = 0");
    C.Vision = T;
    C.VisionFrozen = Plan.VisionFrozen;
  }
  return C;
}

struct Trainer::Impl final : public PipelineStage {
  const moec::LaunchPlan &Plan;
  CommWorld &World;
  TrainerOptions Options;
  CommClock Clock;
  /// Timed views of the plan's groups (and of the world), by kind.
  std::map<std::string, std::unique_ptr<Communicator>> Timed;
  std::vector<std::unique_ptr<Communicator>> Selves;
  std::unique_ptr<Communicator> EmbeddingGroup; ///< with MTP blocks on a later stage than the embedding
  int64_t PpRank = 0, DpRank = 0, CpRank = 0, CpSize = 1, TpSize = 1;
  ModelConfig Config;
  ModelOptions MOpts;
  std::vector<std::unique_ptr<StageModel>> Chunks;
  std::shared_ptr<const TokenSource> Data;
  std::shared_ptr<const IndexedDataset> Dataset; ///< the plan's indexed dataset, if Data reads one
  /// A vision model's samples: images and their placeholders before the text
  /// of Data (of ValidData when evaluating).
  std::unique_ptr<MultimodalSamples> Multimodal, ValidMultimodal;
  /// Held-out samples for evaluate(): the validation part of the split, or
  /// mock samples past any index training reaches; null without one.
  std::shared_ptr<const TokenSource> ValidData;
  bool Evaluating = false;     ///< batch() and forward() serve evaluate()
  int64_t EvalBase = 0;        ///< the first validation sample of the global batch evaluated
  PipelineSchedule ForwardOps; ///< every rank's forwards of one global batch, in pipeline order
  std::unique_ptr<PipelineExecutor> Executor;
  /// The groups over device buffers (TrainerOptions::DeviceGroup), over
  /// Timed's communicators, which outlive them.
  std::vector<std::unique_ptr<Communicator>> DeviceGroups;
  std::unique_ptr<AdamW> Optimizer;
  LrSchedule Schedule;
  PipelineSchedule Ops;                  ///< every pp rank's schedule of a training step
  int64_t StepIndex = 0;                 ///< steps done
  int64_t ConsumedSamples = 0;           ///< global samples trained on (the data position)
  std::map<int64_t, MicroBatch> Batches; ///< this step's, by local micro batch
  int64_t LastPeak = 0;

  Impl(const moec::LaunchPlan &Plan, CommWorld &World, std::map<std::string, std::unique_ptr<Communicator>> &Groups,
       const TrainerOptions &Options, std::vector<std::string> &Notes)
      : Plan(Plan), World(World), Options(Options) {
    if (Plan.WorldSize != World.size())
      refuse("the plan is for " + std::to_string(Plan.WorldSize) + " ranks, the job has " +
             std::to_string(World.size()));
    if (Plan.Model.LinearAttention && Plan.Parallel.CP > 1)
      refuse("Gated DeltaNet (linear_attention) runs without context parallelism, as in Megatron-Core 0.16, whose "
             "GatedDeltaNet has no context-parallel form (ssm/gated_delta_net.py:37); cp is " +
             std::to_string(Plan.Parallel.CP) + ": set parallel { cp = 1 }");
    if (Plan.Model.LinearAttention && Plan.Model.LinearAttention->KeyHeads % Plan.Parallel.TP)
      refuse("linear_attention.key_heads " + std::to_string(Plan.Model.LinearAttention->KeyHeads) +
             " do not split over tp " + std::to_string(Plan.Parallel.TP) + ": choose a tp that divides them");
    if (Plan.Parallel.ETP != 1 && Plan.Parallel.ETP != Plan.Parallel.TP)
      refuse("expert tensor parallelism is implemented over the tp group: etp must be 1 or tp (" +
             std::to_string(Plan.Parallel.TP) + "), not " + std::to_string(Plan.Parallel.ETP));
    for (auto &[Kind, Comm] : Groups)
      time(Kind, *Comm);
    time("world", World.world());

    const moec::LaunchRank &Me = Plan.Ranks[size_t(World.rank())];
    auto Coord = [&](const char *K) {
      auto It = Me.Dense.find(K);
      return It == Me.Dense.end() ? int64_t(0) : It->second;
    };
    PpRank = Coord("pp");
    DpRank = Coord("dp");
    CpRank = group("cp").rank();
    CpSize = group("cp").size();
    TpSize = group("tp").size();
    if (CpSize != Plan.Parallel.CP || TpSize != Plan.Parallel.TP || group("pp").size() != Plan.Parallel.PP ||
        group("pp").rank() != PpRank)
      refuse("the process groups do not match the plan's layout");

    Config = modelConfigOf(Plan);
    if (Plan.GlobalBatch <= 0 || Plan.MicroBatch <= 0 || Plan.SeqLen <= 0 || Plan.GlobalBatch % Plan.MicroBatch)
      refuse("global_batch must be a positive multiple of micro_batch");
    int64_t M = Plan.GlobalBatch / Plan.MicroBatch;
    if (M % Plan.Parallel.DP || M / Plan.Parallel.DP != Plan.Microbatches)
      refuse("the plan's micro batches per rank disagree with its batch sizes");
    MOpts.Seed = Options.Seed;
    MOpts.CeScale = 1.0 / double(Plan.GlobalBatch * Plan.SeqLen);
    MOpts.AuxScale = 1.0 / double(M);
    // Depth k's loss is the mean over the tokens with a label k + 1 places
    // ahead in their sequence (Megatron's rolled loss mask), which is
    // Megatron's mean per micro batch and rank when CP is 1; under CP
    // Megatron divides by each CP rank's own count, which differs between
    // layouts, so the runtime keeps the global mean.
    for (int64_t K = 1; K <= Config.MtpLayers; ++K) {
      if (Plan.SeqLen <= K)
        refuse("seq_len " + std::to_string(Plan.SeqLen) + " leaves MTP block " + std::to_string(K) +
               " no token to predict: make seq_len longer than mtp_layers + 1");
      MOpts.MtpCeScale.push_back(Config.MtpLossScale / double(Config.MtpLayers) /
                                 double(Plan.GlobalBatch * (Plan.SeqLen - K)));
    }
    recompute(Notes);
    if (Plan.Parallel.FSDP)
      Notes.push_back("fsdp: the CPU runtime keeps whole parameter replicas "
                      "(AdamW's distributed variant shards the moments only)");
    if (!Plan.Dispatcher.empty() && Plan.Dispatcher != "alltoall")
      Notes.push_back("dispatcher " + Plan.Dispatcher + ": the CPU runtime moves tokens by all-to-all");
    if (Plan.Data.Shuffle && Plan.Data.Mock)
      Notes.push_back("data.shuffle: mock data have no order to shuffle");
    if (Plan.Data.VariableLength)
      Notes.push_back("variable-length data: the CPU runtime trains on fixed "
                      "seq_len windows of the corpus");
    ComputeBackend &Compute = Options.Compute ? *Options.Compute : hostBackend();
    MOpts.Compute = &Compute;
    Notes.push_back(std::string("the ") + Compute.name() + " backend computes " + Compute.precision() +
                    " (the plan's precision " + Plan.Precision + " only shapes the plan)");

    ParallelContext Ctx{&group("tp"), &group("cp"), &group("tp-cp"), &group("ep"), &group("etp")};
    Ctx.CpKind = cpExchange(Notes);
    // Every rank makes the same device groups in the same order.
    if (Options.DeviceGroup)
      for (const char *Kind : {"tp", "cp", "ep", "etp", "pp", "dp-cp", "edp"})
        addDeviceGroup(Kind);
    for (int64_t C = 0; C < Plan.Parallel.VPP; ++C) {
      const moec::LaunchStage &S = Plan.stage(PpRank, C);
      if (S.MtpLayers > 0 && (!S.Loss || S.MtpLayers != Config.MtpLayers))
        refuse("the CPU runtime runs the MTP blocks on the stage with the loss, all of them: the pipeline layout "
               "puts " +
               std::to_string(S.MtpLayers) + " of " + std::to_string(Config.MtpLayers) + " on a stage " +
               (S.Loss ? "with" : "without") + " it; put every 'm' of pipeline_layout in the stage with 'L'");
      StageSpec Spec{S.FirstLayer, S.DecoderLayers, S.Embedding, S.Loss, S.MtpLayers > 0};
      Chunks.push_back(std::make_unique<StageModel>(Config, Spec, Ctx, MOpts));
    }

    // The MTP blocks read the embedding on the last stage: its first and last
    // stages form an embedding group (one per pp group; the stages between
    // are groups of their own, which every rank's split needs).
    if (Config.MtpLayers > 0 && Plan.Parallel.PP > 1) {
      std::vector<std::vector<int>> Lists;
      for (const std::vector<int> &Pp : Plan.Groups.at("pp")) {
        Lists.push_back({Pp.front(), Pp.back()});
        for (size_t I = 1; I + 1 < Pp.size(); ++I)
          Lists.push_back({Pp[I]});
      }
      EmbeddingGroup = World.split("embedding", Lists);
      time("embedding", *EmbeddingGroup);
    }

    Data = Options.Data;
    if (!Data) {
      if (Plan.Data.Mock) {
        auto Mock = std::make_shared<MockSource>(Config.Vocab, Plan.SeqLen, Options.Seed);
        Data = Mock;
        // The same stream's samples from 2^62 on: held out from training,
        // which never counts that far.
        ValidData = std::make_shared<OffsetSource>(Mock, int64_t(1) << 62);
        if (!Plan.Data.Split.empty())
          Notes.push_back("data.split: mock data have no sequences to split; evaluation holds out the stream's "
                          "samples from index 2^62 on");
      } else {
        std::string Error;
        // The ids are checked by checkDataShare, a share per rank.
        std::shared_ptr<const IndexedDataset> Whole = IndexedDataset::openIndex(Plan.Data.Path, Error);
        if (!Whole)
          refuse("the plan's dataset '" + Plan.Data.Path + "': " + Error);
        Dataset = Whole;
        std::vector<SequenceRange> Parts = splitSequences(Plan.Data.Split, Whole->numSequences());
        std::unique_ptr<IndexedSource> Src = IndexedSource::over(Whole, Config.Vocab, Plan.SeqLen, Parts[0].First,
                                                                 Parts[0].End, "its training part", Error);
        if (!Src)
          refuse("the plan's dataset '" + Plan.Data.Path + "': " + Error);
        if (!Plan.Data.Split.empty()) {
          Notes.push_back(fmt::format("data.split: of the {} sequences, [{}, {}) train, [{}, {}) validate, [{}, {}) "
                                      "test (not read)",
                                      Whole->numSequences(), Parts[0].First, Parts[0].End, Parts[1].First, Parts[1].End,
                                      Parts[2].First, Parts[2].End));
          if (Parts[1].size() > 0) {
            ValidData = IndexedSource::over(Whole, Config.Vocab, Plan.SeqLen, Parts[1].First, Parts[1].End,
                                            "its validation part", Error);
            if (!ValidData)
              refuse("the plan's dataset '" + Plan.Data.Path + "': " + Error);
          }
        }
        if (Plan.Data.Shuffle) {
          int64_t N = Src->passSamples();
          Data = std::make_shared<ShuffledSource>(std::move(Src), N, Options.Seed);
        } else {
          Data = std::move(Src);
        }
      }
    }
    if (Data->seqLen() != Plan.SeqLen || Data->vocab() != Config.Vocab)
      refuse("the data source's seq_len or vocab differs from the plan's");
    if (Config.Vision)
      openImages(Notes);
    if (Plan.Data.EvalInterval > 0 && !ValidData)
      refuse(Options.Data ? "data.eval_interval: the caller's data source has no validation part"
                          : "data.eval_interval: data.split gives the validation part no sequence; give it a weight "
                            "(data { split = [969, 30, 1] }) or leave eval_interval unset");

    Executor = std::make_unique<PipelineExecutor>(group("pp"), int(Plan.Parallel.VPP), *this, *MOpts.Compute);
    // The executor reads the neighbours' schedules too: they say in which
    // order messages arrive.
    for (const std::vector<moec::LaunchOp> &RankOps : Plan.Schedule) {
      Ops.emplace_back();
      for (const moec::LaunchOp &Op : RankOps)
        Ops.back().push_back({Op.K == moec::LaunchOp::Forward ? PipelineOp::Forward : PipelineOp::Backward,
                              Op.Microbatch, int(Op.Chunk)});
    }
    // Evaluation runs forwards only, micro batch by micro batch through the
    // chunks: every rank in the same order, so each receive's sender has
    // already run the op that feeds it.
    std::vector<PipelineOp> Forwards;
    for (int64_t Mb = 0; Mb < Plan.Microbatches; ++Mb)
      for (int C = 0; C < int(Plan.Parallel.VPP); ++C)
        Forwards.push_back({PipelineOp::ForwardOnly, Mb, C});
    ForwardOps.assign(Plan.Schedule.size(), Forwards);
    AdamWOptions AOpts = Options.Optimizer;
    if (Options.OptimizerFromPlan) {
      const moec::LaunchOptimizer &O = Plan.Optimizer;
      AOpts.Distributed = O.Distributed;
      AOpts.WeightDecay = O.WeightDecay;
      AOpts.Beta1 = O.AdamBeta1;
      AOpts.Beta2 = O.AdamBeta2;
      AOpts.Eps = O.AdamEps;
      AOpts.ClipGradNorm = O.ClipGrad;
      if (O.Type != "adam")
        Notes.push_back("optimizer " + O.Type +
                        ": the CPU runtime trains "
                        "with AdamW");
      if (O.OffloadFraction > 0)
        Notes.push_back("optimizer offload: the CPU runtime keeps the whole "
                        "optimizer state in (host) memory");
    }
    // The plan's schedule; its peak rate, when the plan sets none, is the
    // caller's (moerun --lr).
    const moec::LaunchOptimizer &O = Plan.Optimizer;
    Schedule.Lr = Options.OptimizerFromPlan && O.Lr ? *O.Lr : AOpts.Lr;
    if (Options.OptimizerFromPlan) {
      Schedule.MinLr = O.MinLr;
      Schedule.WarmupSteps = O.WarmupSteps;
      if (!LrSchedule::parseDecay(O.Decay, Schedule.Style))
        refuse("unknown learning-rate decay '" + O.Decay + "'");
      Schedule.DecaySteps = O.DecaySteps ? *O.DecaySteps : std::max<int64_t>(Options.TotalSteps, 1);
      if (Schedule.Style != LrSchedule::Decay::Constant && Schedule.DecaySteps <= Schedule.WarmupSteps)
        refuse("the learning rate decays until step " + std::to_string(Schedule.DecaySteps) +
               ", which does not come after its " + std::to_string(Schedule.WarmupSteps) + " warm-up steps");
    }
    GradientGroups GG{&group("dp-cp"), &group("tp"), &group("edp")};
    Optimizer = std::make_unique<AdamW>(allParameters(), GG, group("world"), AOpts, *MOpts.Compute);
  }

  ~Impl() override { settleOnHost(); }

  /// The group of a kind over device buffers (TrainerOptions::DeviceGroup)
  /// as its host group's counterpart (Communicator::device()), where the
  /// group has peers.
  void addDeviceGroup(const std::string &Kind) {
    Communicator &Host = group(Kind);
    if (Host.size() == 1)
      return;
    DeviceGroups.push_back(Options.DeviceGroup(Kind, Host));
    Host.setDevice(DeviceGroups.back().get());
  }

  Communicator &group(const std::string &Kind) {
    auto It = Timed.find(Kind);
    if (It != Timed.end())
      return *It->second;
    // A kind the plan does not list is a dimension of size one.
    Selves.push_back(createSelfCommunicator(Kind));
    return time(Kind, *Selves.back());
  }

  /// Registers the group of a kind, timed under its part of the step.
  Communicator &time(const std::string &Kind, Communicator &Comm) {
    auto &Slot = Timed[Kind];
    Slot = std::make_unique<TimedCommunicator>(Comm, Clock, commPartOfGroup(Kind));
    return *Slot;
  }

  void recompute(std::vector<std::string> &Notes) {
    const moec::LaunchRecompute &R = Plan.Recompute;
    if (R.Kind == "full") {
      MOpts.Recompute.Full = true;
      if (R.Layers > 0 && R.Layers < Config.Layers)
        Notes.push_back("recompute = full(layers = " + std::to_string(R.Layers) +
                        "): the CPU runtime recomputes every layer");
    } else if (R.Kind == "selective") {
      static const std::set<std::string> Known = {"core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts"};
      for (const std::string &M : R.Modules) {
        if (Known.count(M))
          MOpts.Recompute.Modules.push_back(M);
        else
          Notes.push_back("recompute module '" + M + "' has no counterpart in the CPU model: ignored");
      }
    }
  }

  std::vector<Parameter *> allParameters() {
    std::vector<Parameter *> All;
    for (auto &C : Chunks)
      for (Parameter *Param : C->parameters())
        All.push_back(Param);
    return All;
  }

  /// Every parameter's values and gradients: no value changes between a
  /// step's first forward and its optimizer step, and gradients are only
  /// added to until the step's reductions read them, so the compute backend
  /// may keep its own copies for that long (ComputeBackend::holdArrays;
  /// those resident on it already, keepOnBackend, are left to it).
  std::vector<HeldArray> heldParameters() {
    std::vector<HeldArray> Held;
    for (Parameter *Param : allParameters()) {
      Held.push_back({Param->Value.data(), Param->Value.numel(), HeldArray::Read});
      Held.push_back({Param->Grad.data(), Param->Grad.numel(), HeldArray::Accumulate});
    }
    for (Parameter *Param : allFrozenParameters())
      Held.push_back({Param->Value.data(), Param->Value.numel(), HeldArray::Read});
    return Held;
  }

  void keepOnBackend() {
    // The parameters only the backend's operations read, their gradients
    // and moments, and the buckets a device group sums
    // (AdamW::residentArrays): on a GPU the optimizer steps them where they
    // are instead of moving them.
    if (!Resident)
      MOpts.Compute->makeResident(Optimizer->residentArrays());
    Resident = true;
  }
  /// Before host code reads the parameters' values (and gradients) without
  /// writing them (a checkpoint, whose moments AdamW::moments() asks for, a
  /// dump): they come back and stay resident.
  void readBack(bool Grads) {
    for (Parameter *Param : allParameters()) {
      MOpts.Compute->hostReads(Param->Value.data(), Param->Value.numel());
      if (Grads)
        MOpts.Compute->hostReads(Param->Grad.data(), Param->Grad.numel());
    }
  }
  /// Before host code writes the parameters or the optimizer's state (a
  /// checkpoint's load, an import) or hands them out.
  void settleOnHost() {
    if (Resident)
      MOpts.Compute->releaseResident();
    Resident = false;
  }
  bool Resident = false;

  std::vector<Parameter *> allFrozenParameters() {
    std::vector<Parameter *> All;
    for (auto &C : Chunks)
      for (Parameter *Param : C->frozenParameters())
        All.push_back(Param);
    return All;
  }

  std::vector<ExpertBias *> allBiases() {
    std::vector<ExpertBias *> All;
    for (auto &C : Chunks)
      for (ExpertBias *B : C->expertBiases())
        All.push_back(B);
    return All;
  }

  /// Megatron-Core finalize_model_grads _update_router_expert_bias: the
  /// tokens each expert got, summed over every rank of the stage (tp, cp and
  /// dp: each routed its own tokens), move the bias; then the counts restart.
  void updateExpertBiases() {
    for (ExpertBias *B : allBiases()) {
      size_t E = B->Tokens.size();
      group("tp").allReduceSum(B->Tokens.data(), E);
      group("dp-cp").allReduceSum(B->Tokens.data(), E);
      Router::updateBias(B->State.Value.data(), B->Tokens.data(), int64_t(E), Config.BiasUpdateRate);
      std::fill(B->Tokens.begin(), B->Tokens.end(), 0.0f);
    }
  }

  /// A vision model's samples: mock images of data.image_size, or the
  /// decoded images beside a real dataset (PREFIX.vision.*).
  void openImages(std::vector<std::string> &Notes) {
    const moec::LaunchVision &V = *Plan.Model.Vision;
    ImageTokens Ids{int32_t(V.StartToken), int32_t(V.ImageToken), int32_t(V.EndToken)};
    PatchGeometry Geometry{V.PatchSize, V.TemporalPatch, V.SpatialMerge};
    auto Make = [&](std::shared_ptr<const TokenSource> Text,
                    const std::shared_ptr<const VisionDataset> &Images) -> std::unique_ptr<MultimodalSamples> {
      if (!Text)
        return nullptr;
      if (Images)
        return std::make_unique<MultimodalSamples>(Text, Ids, Geometry, Plan.Data.ImagesPerSample, Images);
      return std::make_unique<MultimodalSamples>(Text, Ids, Geometry, Plan.Data.ImagesPerSample, Plan.Data.ImageSize,
                                                 Options.Seed);
    };
    std::shared_ptr<VisionDataset> Images;
    if (!Plan.Data.Mock) {
      Images = std::make_shared<VisionDataset>();
      std::string Error;
      if (!Images->open(Plan.Data.Path, Error))
        refuse("the plan's images beside '" + Plan.Data.Path + "' (moerun-mkdata --images writes them): " + Error);
      Notes.push_back(fmt::format("images: {} decoded images from {}.vision.*, {} per sample", Images->images().size(),
                                  Plan.Data.Path, Plan.Data.ImagesPerSample));
    } else {
      Notes.push_back(fmt::format("images: mock, {} per sample of {} x {} pixels", Plan.Data.ImagesPerSample,
                                  Plan.Data.ImageSize, Plan.Data.ImageSize));
    }
    Multimodal = Make(Data, Images);
    ValidMultimodal = Make(ValidData, Images);
    if (std::string Why = Multimodal->problem(); !Why.empty())
      refuse(Why);
  }

  const MicroBatch &batch(int64_t Mb) {
    auto It = Batches.find(Mb);
    if (It != Batches.end())
      return It->second;
    MicroBatch &B = Batches[Mb];
    B.Sequences = Plan.MicroBatch;
    B.SeqLen = Plan.SeqLen;
    int64_t Global = DpRank * Plan.Microbatches + Mb;
    int64_t First = (Evaluating ? EvalBase : ConsumedSamples) + Global * Plan.MicroBatch;
    B.FirstSample = First;
    const TokenSource &Source = Evaluating ? *ValidData : *Data;
    std::vector<int64_t> Pos = localPositions(int(CpRank), int(CpSize), Plan.SeqLen);
    std::vector<int32_t> Sample(size_t(Plan.SeqLen + 1));
    if (Multimodal) {
      multimodalBatch(B, First, Pos);
      return B;
    }
    for (int64_t S = 0; S < Plan.MicroBatch; ++S) {
      Source.sample(First + S, Sample.data());
      for (int64_t P : Pos) {
        B.Tokens.push_back(Sample[size_t(P)]);
        B.Labels.push_back(Sample[size_t(P + 1)]);
      }
      B.MtpTokens.resize(size_t(Config.MtpLayers));
      B.MtpLabels.resize(size_t(Config.MtpLayers));
      for (int64_t K = 1; K <= Config.MtpLayers; ++K)
        for (int64_t P : Pos) {
          bool Inside = P + K < Plan.SeqLen;
          B.MtpTokens[size_t(K - 1)].push_back(Inside ? Sample[size_t(P + K)] : 0);
          B.MtpLabels[size_t(K - 1)].push_back(Inside ? Sample[size_t(P + K + 1)] : -1);
        }
    }
    return B;
  }

  /// The plan's cp_comm as the cp group's exchange; a2a_p2p's hierarchy runs
  /// as the ring over the whole group (the same results, other traffic).
  CpExchange cpExchange(std::vector<std::string> &Notes) {
    const std::string &Kind = Plan.Parallel.CpComm;
    if (Plan.Parallel.CP <= 1 || Kind == "p2p")
      return CpExchange::Ring;
    if (Kind == "allgather")
      return CpExchange::AllGather;
    if (Kind == "a2a") {
      const int64_t Tp = Plan.Parallel.TP, Cp = Plan.Parallel.CP;
      if (Config.Mla || Config.Heads % (Tp * Cp) || Config.KvHeads % (Tp * Cp))
        refuse("cp_comm a2a gives each cp rank whole heads: a tp rank's " + std::to_string(Config.Heads / Tp) +
               " query and " + std::to_string(Config.KvHeads / Tp) + " key/value heads must divide by cp = " +
               std::to_string(Cp) + (Config.Mla ? " (and latent attention runs with p2p only)" : "") +
               "; cp_comm = p2p or allgather takes any head count");
      return CpExchange::AllToAll;
    }
    Notes.push_back("cp_comm " + Kind + ": the CPU runtime runs the ring (p2p) over the whole cp group");
    return CpExchange::Ring;
  }

  /// The objective is the mean cross entropy over the global batch's
  /// labelled tokens (the text of a vision-language batch; Megatron's
  /// calculate_per_token_loss): this step's micro batches are built first to
  /// count them, over this rank's positions, then over dp and cp.
  void scaleByLabelledTokens() {
    double Labelled = 0;
    for (int64_t Mb = 0; Mb < Plan.Microbatches; ++Mb)
      for (int32_t L : batch(Mb).Labels)
        Labelled += L >= 0 ? 1 : 0;
    float Sum[2];
    splitDouble(Labelled, Sum);
    group("dp-cp").allReduceSum(Sum, 2);
    const double Tokens = joinDouble(Sum);
    for (auto &C : Chunks)
      C->setCeScale(Tokens > 0 ? 1.0 / Tokens : 0.0);
  }

  /// A vision model's micro batch: each sequence's images and placeholders,
  /// its text, labels without the images, and the tower row of every
  /// placeholder among this CP rank's positions.
  void multimodalBatch(MicroBatch &B, int64_t First, const std::vector<int64_t> &Pos) {
    const MultimodalSamples &Source = Evaluating ? *ValidMultimodal : *Multimodal;
    const int32_t Placeholder = int32_t(Plan.Model.Vision->ImageToken);
    int64_t RowsBefore = 0; // tower rows of the micro batch's earlier images
    for (int64_t S = 0; S < Plan.MicroBatch; ++S) {
      MultimodalSample Sample = Source.sample(First + S);
      std::vector<int32_t> Labels = Source.labels(Sample.Tokens);
      std::vector<int32_t> Row(Sample.Tokens.size(), -1);
      for (size_t P = 0, K = 0; P < Row.size(); ++P)
        if (Sample.Tokens[P] == Placeholder)
          Row[P] = int32_t(RowsBefore + int64_t(K++));
      MultimodalPositions Rope;
      if (Config.MropeSection) {
        // Over the sequence's seq_len inputs, which hold its images whole.
        std::vector<int32_t> Inputs(Sample.Tokens.begin(), Sample.Tokens.begin() + Plan.SeqLen);
        std::vector<std::array<int64_t, 3>> Grids;
        for (const SampleImage &I : Sample.Images)
          Grids.push_back({I.Frames, I.Rows, I.Cols});
        std::string Error;
        Rope = multimodalPositions(Inputs, Placeholder, Grids, Config.Vision->MergeSize, Error);
        if (!Error.empty())
          refuse("sample " + std::to_string(First + S) + "'s images: " + Error);
      }
      for (int64_t P : Pos) {
        B.Tokens.push_back(Sample.Tokens[size_t(P)]);
        B.Labels.push_back(Labels[size_t(P)]);
        B.VisionRows.push_back(Row[size_t(P)]);
        if (Config.MropeSection)
          for (size_t A = 0; A < 3; ++A)
            B.RopePositions[A].push_back(Rope.Axes[A][size_t(P)]);
      }
      for (SampleImage &I : Sample.Images) {
        B.Images.push_back({I.Frames, I.Rows, I.Cols});
        B.ImagePatches.insert(B.ImagePatches.end(), I.Patches.begin(), I.Patches.end());
      }
      RowsBefore += Sample.imageTokens() / (Config.Vision->MergeSize * Config.Vision->MergeSize);
    }
  }

  // PipelineStage.
  Tensor forward(int64_t Mb, int Chunk, Tensor *Input) override {
    Tensor Out = Chunks[size_t(Chunk)]->forward(Mb, batch(Mb), Input);
    if (Evaluating) // no backward follows: free what it would have used
      Chunks[size_t(Chunk)]->discard(Mb);
    return Out;
  }

  EvalStats evaluate(const std::function<void()> &OnOp) {
    for (auto &C : Chunks)
      C->resetStepStats();
    Evaluating = true;
    for (auto &C : Chunks)
      C->setTraining(false);
    for (int64_t B = 0; B < Plan.Data.EvalIters; ++B) {
      EvalBase = B * Plan.GlobalBatch;
      Batches.clear();
      HeldArrays Held(*MOpts.Compute, heldParameters());
      Executor->runStep(ForwardOps, OnOp);
    }
    Evaluating = false;
    for (auto &C : Chunks)
      C->setTraining(true);
    Batches.clear();
    double CeSum = 0;
    int64_t Tokens = 0;
    for (auto &C : Chunks) {
      CeSum += C->loss().CeSum;
      Tokens += C->loss().Tokens;
      C->resetStepStats();
    }
    float Sums[4];
    splitDouble(CeSum, Sums);
    splitDouble(double(Tokens), Sums + 2);
    World.world().allReduceSum(Sums, 4);
    EvalStats E;
    E.Tokens = int64_t(std::llround(joinDouble(Sums + 2)));
    E.Loss = E.Tokens ? joinDouble(Sums) / double(E.Tokens) : 0.0;
    return E;
  }
  Tensor backward(int64_t Mb, int Chunk, Tensor *OutGrad) override {
    return Chunks[size_t(Chunk)]->backward(Mb, OutGrad);
  }
  std::vector<int64_t> activationShape(int64_t, int) override {
    return {Plan.MicroBatch * Plan.SeqLen / CpSize / TpSize, Config.Hidden};
  }

  int64_t staticBytes() {
    int64_t B = 0;
    for (Parameter *Param : allParameters())
      B += Param->Value.bytes() + Param->Grad.bytes();
    return B + Optimizer->stateElements() * int64_t(sizeof(float));
  }

  TrainStepStats step(const std::function<void()> &OnOp) {
    keepOnBackend();
    Optimizer->zeroGrads();
    for (auto &C : Chunks)
      C->resetStepStats();
    Batches.clear();
    double Comm0 = Clock.Seconds, Blas0 = blasSeconds(), T0 = now();
    std::array<double, NumCommParts> Parts0 = Clock.PartSeconds;
    double Cpu0 = cpuSeconds();
    if (Multimodal)
      scaleByLabelledTokens();
    ComputeBackend &Compute = *MOpts.Compute;
    BackendTraffic Moved0 = Compute.traffic();
    Compute.resetPeak();
    {
      HeldArrays Held(Compute, heldParameters());
      Executor->runStep(Ops, OnOp);
    }
    double Lr = Schedule.ofStep(StepIndex + 1);
    Optimizer->setLr(Lr);
    tieEmbeddingGrads();
    AdamWStepInfo Info = Optimizer->step();
    updateExpertBiases();
    // What the step copied, its optimizer's step included.
    BackendTraffic Moved = Compute.traffic();
    double Seconds = now() - T0;
    double Cpu = cpuSeconds() - Cpu0;
    double CommSeconds = Clock.Seconds - Comm0;
    double Blas = blasSeconds() - Blas0;
    ++StepIndex;
    ConsumedSamples += Plan.GlobalBatch;
    Batches.clear();

    int64_t Activations = 0;
    double CeSum = 0, AuxSum = 0, MtpSum = 0;
    int64_t Tokens = 0, MtpTokens = 0;
    for (auto &C : Chunks) {
      auto It = C->peakActivationBytes().find("total");
      if (It != C->peakActivationBytes().end())
        Activations += It->second;
      CeSum += C->loss().CeSum;
      Tokens += C->loss().Tokens;
      AuxSum += C->loss().AuxSum;
      for (size_t K = 0; K < C->loss().MtpCeSum.size(); ++K) {
        MtpSum += C->loss().MtpCeSum[K];
        MtpTokens += C->loss().MtpTokens[K];
      }
    }
    LastPeak = Activations + staticBytes();
    // Every tp-cp rank of a micro batch holds the same aux losses: count one.
    if (group("tp-cp").rank() != 0)
      AuxSum = 0;

    Communicator &W = World.world(); // not timed: bookkeeping, not the step
    float Sums[10];
    splitDouble(CeSum, Sums);
    splitDouble(AuxSum, Sums + 2);
    splitDouble(double(Tokens), Sums + 4);
    splitDouble(MtpSum, Sums + 6);
    splitDouble(double(MtpTokens), Sums + 8);
    W.allReduceSum(Sums, 10);
    const int Device = 8 + int(NumCommParts), PerRank = Device + 4;
    float Mine[PerRank];
    splitDouble(Seconds, Mine);
    splitDouble(CommSeconds, Mine + 2);
    Mine[4] = float(Blas);
    splitBytes(LastPeak, Mine + 5);
    Mine[7] = float(Cpu);
    for (size_t P = 0; P < NumCommParts; ++P)
      Mine[8 + P] = float(Clock.PartSeconds[P] - Parts0[P]);
    splitBytes(Moved.DevicePeakBytes, Mine + Device);
    splitBytes(Moved.HostToDeviceBytes + Moved.DeviceToHostBytes - Moved0.HostToDeviceBytes - Moved0.DeviceToHostBytes,
               Mine + Device + 2);
    std::vector<float> All(size_t(W.size() * PerRank));
    W.allGather(Mine, All.data(), PerRank);

    TrainStepStats S;
    S.Step = StepIndex;
    S.Tokens = int64_t(std::llround(joinDouble(Sums + 4)));
    S.Loss = S.Tokens ? joinDouble(Sums) / double(S.Tokens) : 0.0;
    S.AuxLoss = joinDouble(Sums + 2) * MOpts.AuxScale;
    double MtpCount = joinDouble(Sums + 8);
    S.MtpLoss = MtpCount > 0 ? joinDouble(Sums + 6) / MtpCount : 0.0;
    S.GradNorm = Info.GradNorm;
    S.LearningRate = Lr;
    for (int R = 0; R < W.size(); ++R) {
      const float *X = All.data() + R * PerRank;
      S.StepSeconds = std::max(S.StepSeconds, joinDouble(X));
      S.CommSeconds += joinDouble(X + 2) / W.size();
      S.ComputeSeconds += (joinDouble(X) - joinDouble(X + 2)) / W.size();
      S.BlasSeconds += double(X[4]) / W.size();
      S.CpuSeconds += double(X[7]) / W.size();
      for (size_t P = 0; P < NumCommParts; ++P)
        S.CommPartSeconds[P] += double(X[8 + P]) / W.size();

      int64_t Peak = joinBytes(X + 5);
      S.RankPeakBytes.push_back(Peak);
      S.PeakBytes = std::max(S.PeakBytes, Peak);
      S.DevicePeakBytes = std::max(S.DevicePeakBytes, joinBytes(X + Device));
      S.StagedBytes = std::max(S.StagedBytes, joinBytes(X + Device + 2));
    }
    S.TokensPerSecond = S.StepSeconds > 0 ? double(Plan.GlobalBatch * Plan.SeqLen) / S.StepSeconds : 0.0;
    S.UsefulTokensPerSecond = S.StepSeconds > 0 ? double(S.Tokens) / S.StepSeconds : 0.0;
    return S;
  }

  /// Megatron's _allreduce_embedding_grads: the first stage's embedding and
  /// the MTP stage's copy each take the sum of both gradients.
  void tieEmbeddingGrads() {
    if (!Timed.count("embedding"))
      return;
    for (Parameter *Param : allParameters())
      if (Param->Name == "embedding") // resident on the first stage: asked for, summed on the host
        MOpts.Compute->allReduceSum(Param->Grad.data(), Param->Grad.numel(), group("embedding"));
  }

  bool owns(const Parameter &Param) {
    if (Param.TiedCopy)
      return false;
    if (Param.Kind == ParamKind::Expert) // split over etp = tp: the tp shards are gathered first
      return group("edp").rank() == 0 && (Param.Split == TpSplit::None || group("tp").rank() == 0);
    return group("tp").rank() == 0 && group("dp-cp").rank() == 0;
  }

  /// The full tensor of a tp-split parameter (collective over tp).
  Tensor gatherFull(const Tensor &Shard, TpSplit Split) {
    Communicator &Tp = *Timed.at("tp");
    if (Split == TpSplit::None || Tp.size() == 1)
      return Shard;
    int64_t T = Tp.size();
    std::vector<float> Out(size_t(Shard.numel() * T));
    Tp.allGather(Shard.data(), Out.data(), size_t(Shard.numel()));
    std::vector<int64_t> Shape = Shard.shape();
    if (Split == TpSplit::Rows) {
      Shape[0] *= T;
      Tensor Full(Shape);
      std::copy(Out.begin(), Out.end(), Full.data());
      return Full;
    }
    int64_t Rows = Shard.rows(), Cols = Shard.cols();
    Shape.back() *= T;
    Tensor Full(Shape);
    for (int64_t R = 0; R < T; ++R)
      for (int64_t I = 0; I < Rows; ++I)
        std::copy_n(Out.data() + (R * Rows + I) * Cols, Cols, Full.data() + I * Cols * T + R * Cols);
    return Full;
  }

  /// True on every rank when Ok holds on every rank.
  bool agree(bool Ok) {
    float Failed = Ok ? 0.0f : 1.0f;
    World.world().allReduceSum(&Failed, 1);
    return Failed == 0.0f;
  }

  /// This rank's shard of a full tensor (the inverse of gatherFull).
  void sliceShard(const std::vector<float> &Full, TpSplit Split, float *Shard, const std::vector<int64_t> &Shape) {
    int64_t T = TpSize, R = group("tp").rank();
    int64_t Numel = 1;
    for (int64_t D : Shape)
      Numel *= D;
    if (Split == TpSplit::None || T == 1) {
      std::copy_n(Full.data(), Numel, Shard);
    } else if (Split == TpSplit::Rows) {
      std::copy_n(Full.data() + R * Numel, Numel, Shard);
    } else {
      int64_t Cols = Shape.back(), Rows = Numel / Cols;
      for (int64_t I = 0; I < Rows; ++I)
        std::copy_n(Full.data() + I * Cols * T + R * Cols, Cols, Shard + I * Cols);
    }
  }

  /// The full shape of a parameter whose shard this rank holds.
  std::vector<int64_t> fullShape(const Parameter &Param) {
    std::vector<int64_t> Shape = Param.Value.shape();
    if (Param.Split == TpSplit::Rows)
      Shape[0] *= TpSize;
    else if (Param.Split == TpSplit::Cols)
      Shape.back() *= TpSize;
    return Shape;
  }

  bool save(const std::string &Dir, int Keep, std::string &Path, std::string &Error,
            const std::function<void()> &AfterWrite) {
    readBack(/*Grads=*/false);
    std::string Staging;
    bool Ok = World.rank() != 0 || beginCheckpoint(Dir, StepIndex, Staging, Error);
    if (!agree(Ok))
      return false;
    Staging = checkpointStagingPath(Dir, StepIndex);
    std::vector<Parameter *> Params = allParameters();
    std::vector<ParameterMoments> Moments = Optimizer->moments();
    std::vector<Tensor> Full;
    Full.reserve(3 * Params.size());
    std::vector<SafeTensor> Mine;
    for (size_t I = 0; I < Params.size(); ++I) {
      Parameter &Param = *Params[I];
      Tensor M(Param.Value.shape()), V(Param.Value.shape());
      std::copy(Moments[I].ExpAvg.begin(), Moments[I].ExpAvg.end(), M.data());
      std::copy(Moments[I].ExpAvgSq.begin(), Moments[I].ExpAvgSq.end(), V.data());
      // Every tp rank takes part in the gathers; only the owner writes.
      Full.push_back(gatherFull(Param.Value, Param.Split));
      Full.push_back(gatherFull(M, Param.Split));
      Full.push_back(gatherFull(V, Param.Split));
      if (!owns(Param))
        continue;
      const Tensor *T = &Full[Full.size() - 3];
      Mine.push_back({Param.Name, T[0].shape(), T[0].data()});
      Mine.push_back({ExpAvgPrefix + Param.Name, T[1].shape(), T[1].data()});
      Mine.push_back({ExpAvgSqPrefix + Param.Name, T[2].shape(), T[2].data()});
    }
    for (ExpertBias *B : allBiases())
      if (owns(B->State))
        Mine.push_back({B->State.Name, B->State.Value.shape(), B->State.Value.data()});
    // Frozen weights: the values alone (whole on every rank, no moments).
    for (Parameter *Param : allFrozenParameters())
      if (owns(*Param))
        Mine.push_back({Param->Name, Param->Value.shape(), Param->Value.data()});
    if (!Mine.empty())
      Ok = writeSafeTensors(Staging + "/" + tensorFileName(World.rank()), Mine, {{"format", "moerun"}}, Error);
    if (AfterWrite)
      AfterWrite();
    if (!agree(Ok))
      return false;
    if (World.rank() == 0) {
      CheckpointManifest Man;
      Man.Step = StepIndex;
      Man.ConsumedSamples = ConsumedSamples;
      Man.Seed = Options.Seed;
      Man.Recipe = Plan.Recipe;
      Man.RecipeHash = Plan.RecipeHash;
      const moec::LaunchParallel &L = Plan.Parallel;
      Man.Layout = {{"tp", L.TP}, {"cp", L.CP},   {"ep", L.EP}, {"etp", L.ETP},
                    {"pp", L.PP}, {"vpp", L.VPP}, {"dp", L.DP}};
      Man.DistributedOptimizer = Optimizer->options().Distributed;
      Man.OptimizerSteps = Optimizer->steps();
      Ok = commitCheckpoint(Dir, Staging, Man, Keep, Error);
    }
    Path = Dir + "/" + checkpointDirName(StepIndex);
    return agree(Ok);
  }

  bool load(const std::string &Path, const CheckpointManifest &M, std::string &Error) {
    settleOnHost();
    bool Ok = true;
    auto Refuse = [&](const std::string &Why) {
      if (Ok)
        Error = Why;
      Ok = false;
    };
    // The data order depends on the seed for mock data and shuffled datasets.
    if ((Plan.Data.Mock || Plan.Data.Shuffle) && !Options.Data && M.Seed != Options.Seed)
      Refuse(std::string("the checkpoint was trained on the ") + (Plan.Data.Mock ? "mock data" : "shuffled data") +
             " of --seed " + std::to_string(M.Seed) + "; resume with --seed " + std::to_string(M.Seed));
    std::map<std::string, SafeTensorsFile> Files;
    auto Read = [&](const std::string &Name, const std::vector<int64_t> &Shape, std::vector<float> &Out) {
      auto It = M.Tensors.find(Name);
      if (It == M.Tensors.end()) {
        Refuse("the checkpoint has no tensor '" + Name + "': it is not of this plan's model");
        return;
      }
      if (It->second.Shape != Shape) {
        auto Str = [](const std::vector<int64_t> &S) {
          std::string Out = "[";
          for (size_t I = 0; I < S.size(); ++I)
            Out += (I ? ", " : "") + std::to_string(S[I]);
          return Out + "]";
        };
        Refuse("tensor '" + Name + "' is " + Str(It->second.Shape) + " in the checkpoint and " + Str(Shape) +
               " in this plan's model: the checkpoint is of another model");
        return;
      }
      auto F = Files.find(It->second.File);
      if (F == Files.end()) {
        F = Files.emplace(It->second.File, SafeTensorsFile()).first;
        std::string E;
        if (!F->second.open(Path + "/" + It->second.File, E)) {
          Refuse(E);
          return;
        }
      }
      std::string E;
      if (!F->second.read(Name, Out, E))
        Refuse(E);
    };
    std::vector<Parameter *> Params = allParameters();
    std::vector<ParameterMoments> Moments(Params.size());
    std::vector<float> Full;
    int64_t Owned = 0;
    for (size_t I = 0; I < Params.size() && Ok; ++I) {
      Parameter &Param = *Params[I];
      std::vector<int64_t> Shape = fullShape(Param);
      Owned += owns(Param) ? 1 : 0;
      Read(Param.Name, Shape, Full);
      if (!Ok)
        break;
      sliceShard(Full, Param.Split, Param.Value.data(), Param.Value.shape());
      for (auto [Prefix, Dst] : {std::pair{ExpAvgPrefix, &Moments[I].ExpAvg}, {ExpAvgSqPrefix, &Moments[I].ExpAvgSq}}) {
        Read(Prefix + Param.Name, Shape, Full);
        if (!Ok)
          break;
        Dst->resize(size_t(Param.Value.numel()));
        sliceShard(Full, Param.Split, Dst->data(), Param.Value.shape());
      }
    }
    for (ExpertBias *B : allBiases()) {
      if (!Ok)
        break;
      Owned += owns(B->State) ? 1 : 0;
      Read(B->State.Name, B->State.Value.shape(), Full);
      if (Ok)
        std::copy(Full.begin(), Full.end(), B->State.Value.data());
    }
    for (Parameter *Param : allFrozenParameters()) {
      if (!Ok)
        break;
      Owned += owns(*Param) ? 1 : 0;
      Read(Param->Name, Param->Value.shape(), Full);
      if (Ok)
        std::copy(Full.begin(), Full.end(), Param->Value.data());
    }
    // Every tensor of the model was found; the checkpoint may hold more.
    float Count = float(Owned);
    World.world().allReduceSum(&Count, 1);
    int64_t Values = 0;
    for (const auto &[Name, T] : M.Tensors)
      Values += llvm::StringRef(Name).startswith("optimizer.") ? 0 : 1;
    if (Ok && World.rank() == 0 && int64_t(Count) != Values)
      Refuse("the checkpoint holds " + std::to_string(Values) + " parameters, this plan's model " +
             std::to_string(int64_t(Count)) + ": it is of another model");
    if (!agree(Ok))
      return false;
    Optimizer->setMoments(Moments);
    Optimizer->setSteps(M.OptimizerSteps);
    StepIndex = M.Step;
    ConsumedSamples = M.ConsumedSamples;
    return true;
  }

  bool initFromHuggingFace(const std::string &Dir, std::string &Error) {
    settleOnHost();
    bool Ok = true;
    auto Refuse = [&](const std::string &Why) {
      if (Ok)
        Error = Why;
      Ok = false;
    };
    HuggingFaceCheckpoint Checkpoint;
    std::string E;
    if (!Checkpoint.open(Dir, E))
      Refuse(E);
    HuggingFaceImport Import(Config, Checkpoint);
    std::vector<float> Full;
    std::vector<Parameter *> Params = allParameters(), Frozen = allFrozenParameters();
    Params.insert(Params.end(), Frozen.begin(), Frozen.end());
    for (Parameter *Param : Params) {
      if (!Ok)
        break;
      if (!Import.read(Param->Name, fullShape(*Param), Full, E))
        Refuse(E);
      else
        sliceShard(Full, Param->Split, Param->Value.data(), Param->Value.shape());
    }
    for (ExpertBias *B : allBiases()) {
      bool Found = false;
      if (!Ok)
        break;
      if (!Import.readExpertBias(B->State.Name, B->State.Value.shape(), Full, Found, E))
        Refuse(E);
      else if (Found)
        std::copy(Full.begin(), Full.end(), B->State.Value.data());
    }
    return agree(Ok);
  }

  void dump(const std::string &Path, bool Grads) {
    readBack(Grads);
    std::vector<Tensor> Keep;
    std::vector<Parameter *> Params = allParameters();
    // The expert biases are model state without a gradient.
    if (!Grads)
      for (ExpertBias *B : allBiases())
        Params.push_back(&B->State);
    Keep.reserve(Params.size());
    std::vector<NamedTensor> Mine;
    for (Parameter *Param : Params) {
      // Every tp rank takes part in the gather; only the owner writes.
      Keep.push_back(gatherFull(Grads ? Param->Grad : Param->Value, Param->Split));
      if (owns(*Param))
        Mine.push_back({Param->Name, &Keep.back()});
    }
    if (!writeTensorFile(Path, Mine))
      World.abort("trainer: cannot write " + Path, 3);
  }
};

Trainer::Trainer(const moec::LaunchPlan &Plan, CommWorld &World,
                 std::map<std::string, std::unique_ptr<Communicator>> &Groups, const TrainerOptions &Options)
    : P(std::make_unique<Impl>(Plan, World, Groups, Options, Notes)) {}

Trainer::~Trainer() = default;

std::string Trainer::checkDataShare() const {
  if (!P->Dataset)
    return "";
  const int64_t S = P->Dataset->numSequences(), Rank = P->World.rank(), Ranks = P->World.size();
  std::string Error = P->Dataset->checkTokens(P->Config.Vocab, S * Rank / Ranks, S * (Rank + 1) / Ranks);
  return Error.empty() ? "" : "the plan's dataset '" + P->Plan.Data.Path + "': " + Error;
}

TrainStepStats Trainer::step(const std::function<void()> &OnOp) { return P->step(OnOp); }

EvalStats Trainer::evaluate(const std::function<void()> &OnOp) { return P->evaluate(OnOp); }

int64_t Trainer::evalInterval() const { return P->Plan.Data.EvalInterval; }

std::vector<Parameter *> Trainer::parameters() {
  P->settleOnHost();
  return P->allParameters();
}

int64_t Trainer::localPeakBytes() const { return P->LastPeak; }

void Trainer::dumpTensors(const std::string &Path, bool Grads) { P->dump(Path, Grads); }

bool Trainer::save(const std::string &Dir, int Keep, std::string &Path, std::string &Error,
                   const std::function<void()> &AfterWrite) {
  return P->save(Dir, Keep, Path, Error, AfterWrite);
}

bool Trainer::initFromHuggingFace(const std::string &Dir, std::string &Error) {
  return P->initFromHuggingFace(Dir, Error);
}

bool Trainer::load(const std::string &Path, const CheckpointManifest &M, std::string &Error) {
  return P->load(Path, M, Error);
}

int64_t Trainer::stepsDone() const { return P->StepIndex; }

const AdamWOptions &Trainer::optimizerOptions() const { return P->Optimizer->options(); }

bool moert::writeTensorFile(const std::string &Path, const std::vector<NamedTensor> &Tensors) {
  std::FILE *F = std::fopen(Path.c_str(), "wb");
  if (!F)
    return false;
  bool Ok = std::fwrite("MOEDUMP1\n", 1, 9, F) == 9;
  for (const NamedTensor &T : Tensors) {
    uint32_t Len = uint32_t(T.Name.size()), Rank = uint32_t(T.Value->rank());
    Ok &= std::fwrite(&Len, sizeof Len, 1, F) == 1;
    Ok &= std::fwrite(T.Name.data(), 1, Len, F) == Len;
    Ok &= std::fwrite(&Rank, sizeof Rank, 1, F) == 1;
    Ok &= std::fwrite(T.Value->shape().data(), sizeof(int64_t), Rank, F) == Rank;
    size_t N = size_t(T.Value->numel());
    Ok &= std::fwrite(T.Value->data(), sizeof(float), N, F) == N;
  }
  return std::fclose(F) == 0 && Ok;
}
