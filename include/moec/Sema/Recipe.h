//===- Recipe.h - The typed, resolved recipe IR ------------------*- C++ -*-===//
//
// What Sema produces and every later phase (rules, planner, emitters) reads:
// one Recipe per sweep point, every field typed, defaulted and derived, and
// every value tied to the source that set it.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SEMA_RECIPE_H
#define MOEC_SEMA_RECIPE_H

#include "moec/Target/Target.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include <cstdint>
#include <string>
#include <vector>

namespace moec {

// The enumerations fields take, from RecipeEnums.def.
#define VALUE(Enumerator, Spelling) Enumerator,
#define RECIPE_ENUM(Type, Values) enum class Type { Values };
#include "moec/Sema/RecipeEnums.def"
#undef VALUE
enum class RecomputeKind { None, Full, Selective };
enum class DataSourceKind { Mock, Real };

/// The .moe spellings of an enumeration, in declaration order.
template <typename E> llvm::ArrayRef<llvm::StringLiteral> enumNames();
#define VALUE(Enumerator, Spelling) Spelling,
#define RECIPE_ENUM(Type, Values)                                                                                      \
  template <> inline llvm::ArrayRef<llvm::StringLiteral> enumNames<Type>() {                                           \
    static constexpr llvm::StringLiteral Names[] = {Values};                                                           \
    return Names;                                                                                                      \
  }
#include "moec/Sema/RecipeEnums.def"
#undef VALUE

template <typename E> llvm::StringRef enumName(E V) { return enumNames<E>()[unsigned(V)]; }
/// The value spelled Name, or None: a value the schema accepted always parses.
template <typename E> llvm::Optional<E> parseEnum(llvm::StringRef Name) {
  llvm::ArrayRef<llvm::StringLiteral> Names = enumNames<E>();
  for (unsigned I = 0; I < Names.size(); ++I)
    if (Names[I] == Name)
      return E(I);
  return llvm::None;
}

inline llvm::StringRef precisionName(Precision P) { return enumName(P); }
inline llvm::StringRef dispatcherName(Dispatcher D) { return enumName(D); }
inline llvm::StringRef recomputeModuleName(RecomputeModule M) { return enumName(M); }
inline llvm::StringRef graphScopeName(GraphScope S) { return enumName(S); }

/// Where a value came from: the range that set it (or the definition name for
/// a default), and the definitions it was inherited through, outermost first.
struct Provenance {
  llvm::SMRange Range;                     // the value (the chosen element for a sweep)
  llvm::SMRange EntryRange;                // the whole `path = value` entry, for fix-its
  llvm::SMRange PathRange;                 // the path as written (`cp` or `parallel.cp`)
  llvm::SmallVector<std::string, 2> Chain; // e.g. {"base", "child"}: set in base
  bool IsDefault = false;
};

struct GpuSpec {
  std::string Name;
  GpuArch Arch = GpuArch::Hopper;
  int64_t SM = 0;
  int64_t Multiprocessors = 0; // 0 when the system does not say
  /// Per SM and clock: dense BF16 tensor-core FLOPs and softmax
  /// exponentials (MUFU.EX2); 0 when the system does not say.
  int64_t TensorFlopsPerClock = 0, ExpPerClock = 0;
  double MemoryBytes = 0, HbmBytesPerSec = 0;
  double Bf16Flops = 0;
  llvm::Optional<double> Fp8Flops, Fp4Flops;
  int64_t GpusPerNode = 1, NVLinkDomain = 1;
  double NVLinkBytesPerSec = 0, NetworkBytesPerSec = 0;
  /// The host: DRAM bandwidth of one node (shared by its GPUs) and the
  /// CPU-GPU link per GPU per direction; 0 when the system does not say.
  double HostMemoryBytesPerSec = 0, HostLinkBytesPerSec = 0;
};

struct MLASpec {
  int64_t QLoraRank = 0, KvLoraRank = 0, QkHeadDim = 0, QkRopeHeadDim = 0, VHeadDim = 0;
};

struct MoESpec {
  int64_t Experts = 0, TopK = 0, FfnHidden = 0, SharedExperts = 0, DenseLayers = 0;
  llvm::Optional<int64_t> SharedFfnHidden;
  Router RouterKind = Router::Softmax;
  bool ExpertBias = false;
  bool SharedExpertGate = false;      // sigmoid gate on the shared experts' output (moe_shared_expert_gate)
  bool PreSoftmax = false;            // softmax before the top-k selection
  llvm::Optional<double> TopKScaling; // factor on the routing weights (moe_router_topk_scaling_factor)
  llvm::Optional<int64_t> Groups, GroupTopK;
};

struct LinearAttentionSpec {
  int64_t Interval = 0, KeyHeads = 0, ValueHeads = 0, HeadDim = 0;
};

struct VisionSpec {
  int64_t Layers = 0, Hidden = 0, Heads = 0, FfnHidden = 0, PatchSize = 0, SpatialMerge = 1, TemporalPatch = 2;
  llvm::Optional<int64_t> OutHidden, PositionEmbeddings;
  std::vector<int64_t> DeepstackLayers;
  /// Token ids of an image in the text: start, Placeholders x image, end.
  int64_t StartToken = 0, ImageToken = 0, EndToken = 0;
};

struct ModelSpec {
  std::string Name;
  int64_t Layers = 0, Hidden = 0, Heads = 0, KvHeads = 0, HeadDim = 0, Vocab = 0, MtpLayers = 0;
  llvm::Optional<int64_t> FfnHidden, MaxSeqLen;
  llvm::Optional<double> RopeTheta;
  llvm::Optional<double> RopeFraction; // of each head RoPE rotates (rotary_percent); unset: all
  /// Rotary frequencies per position axis (time, rows, columns) of Qwen-VL's
  /// interleaved multimodal RoPE (mrope_section); empty: one position axis.
  std::vector<int64_t> MropeSection;
  llvm::Optional<double> NormEpsilon; // of every RMSNorm (layernorm_epsilon); unset: Megatron's 1e-5
  bool QkNorm = false;
  llvm::Optional<MLASpec> MLA;
  llvm::Optional<MoESpec> MoE;
  llvm::Optional<LinearAttentionSpec> LinearAttention;
  llvm::Optional<VisionSpec> Vision;
  bool isMoE() const { return MoE.hasValue(); }
  bool isVLM() const { return Vision.hasValue(); }
};

struct ParallelConfig {
  int64_t TP = 1, CP = 1, EP = 1, ETP = 1, PP = 1, VPP = 1;
  int64_t DP = 0, EDP = 0; // 0 when the world size does not divide (world-size error)
  bool SequenceParallel = false, FSDP = false;
  CpComm CpCommKind = CpComm::P2P;
  llvm::Optional<std::string> Layout;
  RankOrder Order = RankOrder::TpCpEpDpPp;
  llvm::SmallVector<int64_t, 2> CpHierarchy; // empty: flat CP
  FsdpImpl FsdpKind = FsdpImpl::Megatron;
  bool TpCommOverlap = false;
};

/// Megatron's moe_* switches that a recipe (not the model) chooses.
struct MoERuntimeConfig {
  llvm::Optional<double> CapacityFactor; // unset: dropless
  bool PadToCapacity = false;
  bool OverlapEpComm = false;
  bool DelayWgrad = false;
  bool SharedExpertOverlap = false;
  llvm::Optional<int64_t> DispatcherSms; // unset: Megatron's default for the dispatcher
  RouterDtype RouterPrecision = RouterDtype::FP32;
  bool GroupedGemm = true;
  /// Routing by standard-normal logits in place of the router's
  /// (moe_router_force_load_balancing): what published benchmarks run and
  /// what the step model prices, every expert's load equal in expectation.
  bool ForceBalance = false;
  bool dropAndPad() const { return CapacityFactor && PadToCapacity; }
};

/// Megatron's OptimizerParamScheduler settings (iteration-based).
struct LrScheduleConfig {
  llvm::Optional<double> Lr; // unset: the runtime's default
  double MinLr = 0;
  int64_t WarmupSteps = 0;
  LrDecay Decay = LrDecay::Constant;
  llvm::Optional<int64_t> DecaySteps; // unset: the run's last step
};

/// Megatron-Core's OptimizerConfig defaults (optimizer_config.py).
struct AdamWConfig {
  double WeightDecay = 0.01;
  double Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8;
  double ClipGrad = 1.0; // 0: no clipping
};

struct OptimizerConfig {
  OptimizerKind Kind = OptimizerKind::Adam;
  LrScheduleConfig Schedule;
  AdamWConfig AdamW;
  bool Distributed = true;
  bool PrecisionAware = false;
  bool OverlapGradReduce = true;
  bool OverlapParamGather = true;
};

struct RecomputeConfig {
  RecomputeKind Kind = RecomputeKind::None;
  RecomputeMethod Method = RecomputeMethod::Uniform;
  llvm::Optional<int64_t> Layers;
  llvm::SmallVector<RecomputeModule, 4> Modules;
  /// Modules written with the seeds' shorthand (up_proj, norm), for the
  /// recompute-module-alias rule.
  llvm::SmallVector<std::pair<std::string, llvm::SMRange>, 2> Aliases;
};

struct Recipe {
  std::string Name;      // the definition's name
  std::string PointName; // "name" or "name[micro=2, recompute=full]"
  llvm::SMRange NameRange;
  std::string Base; // the recipe it extends directly, if any
  /// The Megatron release checked for: --target, else the recipe's target
  /// field, else DefaultTarget.
  Target Tgt = DefaultTarget;

  ModelSpec Model;
  GpuSpec Gpu;
  int64_t Nodes = 0, WorldSize = 0;
  int64_t SeqLen = 0, MicroBatch = 0, GlobalBatch = 0;
  ParallelConfig Parallel;
  Precision Prec = Precision::BF16;
  bool Fp8ParamGather = false;                     // stated, else the target's preset (TargetDefaults.h)
  bool Fp4ParamGather = false;                     // stated, else the target's NVFP4 preset
  int64_t Bf16FirstLayers = 0, Bf16LastLayers = 0; // Megatron first_last_layers_bf16
  Dispatcher Dispatch = Dispatcher::AllToAll;
  RecomputeConfig Recompute;
  llvm::SmallVector<GraphScope, 4> CudaGraph; // empty: none
  GraphImpl CudaGraphImpl = GraphImpl::TransformerEngine;
  MoERuntimeConfig MoE;
  OptimizerConfig Optimizer;
  double OffloadOptimizer = 0;
  bool OverlapOffloadCopies = false; // Megatron overlap_cpu_optimizer_d2h_h2d
  bool OffloadActivations = false;   // whole layers (cpu_offloading)
  /// Modules whose inputs are offloaded in every layer (Megatron's
  /// fine_grained_activation_offloading with offload_modules); empty: none.
  llvm::SmallVector<OffloadModule, 4> OffloadModules;
  llvm::Optional<int64_t> OffloadActivationLayers;
  DataSourceKind Data = DataSourceKind::Mock;
  std::string DataPath;
  bool VariableLength = false;
  bool ShuffleData = false;
  /// data.split's weights (train, valid, test; empty: all train), and the
  /// evaluation every EvalInterval steps (unset: none) over EvalIters global
  /// batches.
  llvm::SmallVector<int64_t, 3> DataSplit;
  llvm::Optional<int64_t> EvalInterval;
  int64_t EvalIters = 100;
  /// VLM image payload: images per sample and their side in pixels.
  int64_t ImagesPerSample = 1, ImageSize = 448;
  bool VisionFrozen = false;
  /// VLM: the language model is frozen (Megatron-Bridge freeze_language_model).
  bool LanguageFrozen = false;
  /// The seq_len of the recipe this one extends, when that is a recipe.
  llvm::Optional<int64_t> BaseSeqLen;
  /// Fields that take several values across this recipe's sweep points.
  llvm::SmallVector<std::string, 2> SweptFields;

  /// Provenance of every recipe field by path ("parallel.cp").
  llvm::StringMap<Provenance> Origins;
  const Provenance &origin(llvm::StringRef Path) const;
};

/// Prints a recipe as indented text with the provenance of every value that
/// was set (not defaulted), for --dump-recipe and tests.
void printRecipe(const Recipe &R, const llvm::SourceMgr &SM, llvm::raw_ostream &OS);
/// One line of a model's figures (`layers=24 hidden=2048 ... moe(...)`), as
/// --dump-recipe and the language server's hover show them.
void printModelSummary(const ModelSpec &M, llvm::raw_ostream &OS);
/// One line of a GPU's figures (memory, peaks, links).
void printGpuSummary(const GpuSpec &G, llvm::raw_ostream &OS);

} // namespace moec

#endif
