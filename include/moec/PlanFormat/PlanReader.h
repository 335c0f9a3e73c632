//===- PlanReader.h - Reading a launch plan back for the runtime --*- C++ -*-===//
//
// The runtime (moerun) reads the TOML plan that `moec plan` writes
// (docs/plan-format.md) into a LaunchPlan: plain standard-library types only,
// so runtime code never needs LLVM beyond the readPlan() call itself. The
// reader validates everything the runtime relies on (versions, sizes that
// multiply to the world size, groups that partition the ranks, a schedule
// that runs every micro batch of every chunk exactly once in each direction)
// so that a bad plan fails on load with the file and field named, never in
// the middle of a step.
//
// Only what the runtime uses is read; of the predictions, what a run is
// measured against (LaunchPrediction).
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_EMIT_PLANREADER_H
#define MOEC_EMIT_PLANREADER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moec {

struct LaunchMoE {
  int64_t Experts = 0, TopK = 0, FfnHidden = 0, SharedExperts = 0, DenseLayers = 0;
  std::optional<int64_t> SharedFfnHidden;
  bool SigmoidRouter = false;
  /// Softmax over every expert before the top-k (no renormalisation), as
  /// Megatron's moe_router_pre_softmax; else top-k of the logits, then a
  /// softmax over the chosen.
  bool PreSoftmax = false;
  bool ExpertBias = false;
  bool SharedExpertGate = false; ///< a sigmoid gate per token on the shared experts' output
  /// Route by standard-normal logits (the recipe's moe.force_balance).
  bool ForceBalance = false;
  double TopKScaling = 1.0; ///< factor on the routing weights after the top-k
  /// Group-limited routing: the experts in Groups equal groups, a token
  /// choosing among the GroupTopK best (1 and 1: no limit).
  int64_t Groups = 1, GroupTopK = 1;
};

/// Multi-head latent attention (the plan's config.model.mla).
struct LaunchMla {
  int64_t QLoraRank = 0; ///< 0: queries from one projection
  int64_t KvLoraRank = 0, QkHeadDim = 0, QkRopeHeadDim = 0, VHeadDim = 0;
};

/// Gated DeltaNet linear attention (the plan's config.model.linear_attention):
/// every Interval-th layer full attention, the others linear.
struct LaunchLinearAttention {
  int64_t Interval = 0, KeyHeads = 0, ValueHeads = 0, HeadDim = 0;
};

/// The vision encoder (the plan's config.model.vision; model/VisionTower.h
/// runs it): blocks, width, heads, MLP size, patch side in pixels, patches
/// merged per side into one decoder token, frames per patch, the decoder's
/// width, the learned position table's rows (0: none; a square grid) and
/// the blocks whose merged output the decoder adds after its first layers.
struct LaunchVision {
  int64_t Layers = 0, Hidden = 0, Heads = 0, FfnHidden = 0, PatchSize = 0, SpatialMerge = 1, TemporalPatch = 2;
  int64_t OutHidden = 0, PositionEmbeddings = 0;
  std::vector<int64_t> DeepstackLayers;
  /// Token ids of an image in the text: StartToken, ImageToken once per
  /// merged patch, EndToken.
  int64_t StartToken = 0, ImageToken = 0, EndToken = 0;
};

struct LaunchModel {
  std::string Name;
  int64_t Layers = 0, Hidden = 0, Heads = 0, KvHeads = 0, HeadDim = 0, Vocab = 0, MtpLayers = 0;
  std::optional<int64_t> FfnHidden;
  bool QkNorm = false;        ///< RMSNorm of each query and key head before RoPE (Qwen3)
  double RopeTheta = 10000.0; ///< RoPE base (Megatron's rotary_base default when the model does not say)
  double RopeFraction = 1.0;  ///< of each head RoPE rotates (Megatron's rotary_percent)
  double NormEpsilon = 1e-5;  ///< of every RMSNorm (Megatron's layernorm_epsilon default)
  /// Rotary frequencies per position axis (time, rows, columns) of Qwen-VL's
  /// interleaved multimodal RoPE; empty: one position per token.
  std::vector<int64_t> MropeSection;
  std::optional<LaunchMoE> MoE;
  std::optional<LaunchMla> Mla;
  std::optional<LaunchLinearAttention> LinearAttention;
  std::optional<LaunchVision> Vision;
  /// The plan describes a model feature the CPU runtime does not implement:
  /// the names, for a clear refusal (none today; kept for plans of features
  /// to come).
  std::vector<std::string> Unsupported;
};

struct LaunchParallel {
  int64_t TP = 1, CP = 1, EP = 1, ETP = 1, PP = 1, VPP = 1, DP = 1, EDP = 1;
  bool SequenceParallel = false, FSDP = false;
  /// "tp-cp-ep-dp-pp" or "tp-cp-ep-pp-dp".
  std::string Order;
  /// Megatron's cp_comm_type: "p2p" (the ring), "a2a", "allgather" or
  /// "a2a_p2p".
  std::string CpComm = "p2p";
};

struct LaunchRecompute {
  std::string Kind = "none"; // none | full | selective
  std::string Method;        // full only: block | uniform
  int64_t Layers = 0;        // full only
  std::vector<std::string> Modules;
};

struct LaunchData {
  bool Mock = true;
  std::string Path; // real data only
  bool VariableLength = false;
  bool Shuffle = false; // optional: older plans do not shuffle
  /// Optional (older plans have neither): the split's weights (train, valid,
  /// test; empty: all train), and an evaluation every EvalInterval steps (0:
  /// none) over EvalIters global batches.
  std::vector<int64_t> Split;
  int64_t EvalInterval = 0, EvalIters = 0;
  /// With a vision encoder: images per sample, and the side in pixels of a
  /// mock image (data.images_per_sample, data.image_size).
  int64_t ImagesPerSample = 1, ImageSize = 448;
};

/// [config.optimizer]. A plan without the table (written before it existed)
/// reads as the replicated Adam.
struct LaunchOptimizer {
  std::string Type = "adam"; // adam | sgd | muon
  /// Megatron's distributed optimizer (ZeRO-1): moments sharded over the
  /// data-parallel ranks.
  bool Distributed = false;
  /// Share of the optimizer state kept in host memory (0..1).
  double OffloadFraction = 0;
  /// [config.optimizer.schedule]: Megatron's OptimizerParamScheduler
  /// settings; absent in older plans (a constant rate).
  std::optional<double> Lr; // unset: the runtime's --lr
  double MinLr = 0;
  int64_t WarmupSteps = 0;
  std::string Decay = "constant";    // constant | linear | cosine
  std::optional<int64_t> DecaySteps; // unset: the run's last step
  /// AdamW's settings; a plan without them: no weight decay, no clipping.
  double WeightDecay = 0;
  double AdamBeta1 = 0.9, AdamBeta2 = 0.999, AdamEps = 1e-8;
  double ClipGrad = 0;
};

/// One entry of a pipeline rank's schedule: "F3.1" is {Forward, 3, 1}.
struct LaunchOp {
  enum Kind { Forward, Backward } K = Forward;
  int64_t Microbatch = 0;
  int64_t Chunk = 0;
};

struct LaunchStage {
  int64_t VirtualStage = 0, Rank = 0, Chunk = 0;
  int64_t FirstLayer = 0, DecoderLayers = 0, MtpLayers = 0;
  bool Embedding = false, Loss = false;
};

struct LaunchRank {
  int64_t Rank = 0, Node = 0, LocalRank = 0;
  std::map<std::string, int64_t> Dense;  // tp cp dp pp
  std::map<std::string, int64_t> Expert; // etp ep edp pp
  std::map<std::string, int64_t> Groups; // kind -> index into LaunchPlan::Groups[kind]
};

/// What the plan predicts, for the step log to set beside what was measured;
/// unset when the plan lacks it.
struct LaunchPrediction {
  std::optional<double> StepSeconds; ///< predicted.step_time_s
  std::optional<double> MFU;         ///< predicted.mfu: model FLOP/s over the dense BF16 peak
  /// memory.peak_bytes less memory.breakdown.reserve: what the step itself
  /// holds on the peak stage (the reserve is the allocator's and the
  /// framework's, which the CPU runtime does not have).
  std::optional<double> PeakBytes;
};

struct LaunchPlan {
  int64_t PlanVersion = 0;
  std::string Recipe, RecipeHash, Source;
  int64_t WorldSize = 0, Nodes = 0;

  /// The GPU the plan was made for (config.gpu.name): "cpu" for the host,
  /// empty in a plan that does not say.
  std::string Gpu;
  LaunchModel Model;
  LaunchParallel Parallel;
  int64_t MicroBatch = 0, GlobalBatch = 0, SeqLen = 0;
  std::string Precision, Dispatcher;
  bool VisionFrozen = false; ///< the recipe's vision.frozen (optional: absent is false)
  LaunchRecompute Recompute;
  /// The scopes the recipe asks CUDA graphs for (config.cuda_graph: "attn",
  /// "moe_router", ...; optional, absent is none).
  std::vector<std::string> CudaGraph;
  LaunchData Data;
  LaunchOptimizer Optimizer;
  LaunchPrediction Predicted;

  /// Micro batches per step per data-parallel rank.
  int64_t Microbatches = 0;
  /// Per pipeline rank, its ops in execution order.
  std::vector<std::vector<LaunchOp>> Schedule;
  /// PP x VPP stages in virtual-stage order.
  std::vector<LaunchStage> Stages;

  /// Process groups by kind ("tp", "dp-cp", "ep", ...): lists of world ranks.
  std::map<std::string, std::vector<std::vector<int>>> Groups;
  /// One per world rank, in rank order.
  std::vector<LaunchRank> Ranks;

  const LaunchStage &stage(int64_t PpRank, int64_t Chunk) const { return Stages[size_t(Chunk * Parallel.PP + PpRank)]; }
};

/// The plan versions this reader understands.
constexpr int64_t MinReadablePlanVersion = 1, MaxReadablePlanVersion = 1;

/// Reads and validates the TOML plan at Path. Errors name the file and the
/// field ("plan.toml: pipeline.schedule[1].ops[3]: ...").
llvm::Expected<LaunchPlan> readPlan(llvm::StringRef Path);
/// The same from a document in memory; Name stands for the file in messages.
llvm::Expected<LaunchPlan> parsePlan(llvm::StringRef Document, llvm::StringRef Name);

} // namespace moec

#endif
