//===- model/Model.h - The MoE transformer, one pipeline chunk at a time ---===//
//
// A decoder-only MoE transformer: token embedding, then layers of
// [RMSNorm -> GQA attention with RoPE (causal) -> residual, RMSNorm -> MLP or
// MoE -> residual], the first DenseLayers with a dense SwiGLU MLP and the rest
// with a routed MoE (softmax or sigmoid top-k router, load-balancing auxiliary
// loss, SwiGLU experts, optional shared experts), then a final RMSNorm, the
// output head and cross entropy. Forward and backward are written out
// explicitly; GEMMs go through kernels/host/Blas.h.
//
// A StageModel holds the layers of one pipeline chunk (a virtual stage) and
// runs them for one micro batch at a time, keeping each in-flight micro
// batch's saved activations until its backward. Parallelism inside a stage:
//  * TP with sequence parallelism (parallel/tp): hidden states between layers
//    are this rank's sequence shard; column-/row-parallel linears gather and
//    reduce-scatter over the tp group; embedding and output head are split by
//    vocabulary; cross entropy is vocabulary-parallel.
//  * CP (parallel/cp): attention runs as ring attention over the cp group.
//  * EP (parallel/ep): routed experts are split over the ep group and tokens
//    travel by TokenDispatcher.
// With groups of one the same code is the single-rank reference.
//
// Parameters are initialised from the seed and the parameter's global name,
// never from the layout: a rank's shard is the slice of the same full tensor
// any layout would build, so every layout starts from the same model.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_MODEL_H
#define MOERT_MODEL_MODEL_H

#include "comm/Communicator.h"
#include "kernels/host/Tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moert {

struct ModelConfig {
  int64_t Layers = 0, Hidden = 0, FfnHidden = 0;
  int64_t Heads = 0, KvHeads = 0, HeadDim = 0, Vocab = 0;
  // MoE (Experts == 0: a dense model).
  int64_t Experts = 0, TopK = 0, MoeFfnHidden = 0, SharedExperts = 0;
  int64_t DenseLayers = 0; ///< the first DenseLayers layers use a dense MLP
  bool SigmoidRouter = false;
  double AuxLossCoeff = 1e-2;
  double RmsNormEps = 1e-5;
  double RopeTheta = 10000.0;

  bool isMoeLayer(int64_t Layer) const {
    return Experts > 0 && Layer >= DenseLayers;
  }
};

/// How a parameter's gradient is reduced before the optimizer step.
enum class ParamKind {
  /// Split over TP, or not TP-related: summed over the dp-cp group.
  Dense,
  /// Replicated on every TP rank, each of which saw only its sequence shard
  /// (norm weights, router): summed over tp as well as dp-cp.
  SequenceParallelReplicated,
  /// A routed expert's weights: summed over the edp group.
  Expert,
};

struct Parameter {
  std::string Name; ///< global name, e.g. "layers.3.experts.5.fc1"
  ParamKind Kind = ParamKind::Dense;
  Tensor Value;     ///< this rank's shard, fp32 (the master copy)
  Tensor Grad;      ///< same shape; backward accumulates into it
};

/// The groups a stage computes with. Never null: unused dimensions are
/// groups of one (createSelfCommunicator).
struct ParallelContext {
  Communicator *Tp = nullptr;
  Communicator *Cp = nullptr;
  Communicator *TpCp = nullptr; ///< aux-loss statistics span all tokens of a micro batch
  Communicator *Ep = nullptr;
};

struct RecomputeOptions {
  /// Recompute every layer of the stage from its input.
  bool Full = false;
  /// Selective: modules whose activations are dropped in forward and
  /// recomputed in backward ("core_attn", "layernorm", "mlp", "moe_act",
  /// "moe", "shared_experts").
  std::vector<std::string> Modules;
};

struct ModelOptions {
  uint64_t Seed = 1234;
  /// Multiplies the sum of per-token cross-entropy losses (1 / tokens in the
  /// global batch), so gradients summed over micro batches and DP ranks are
  /// those of the global-batch mean.
  double CeScale = 1.0;
  /// Multiplies each micro batch's auxiliary loss (1 / micro batches in the
  /// global batch).
  double AuxScale = 1.0;
  RecomputeOptions Recompute;
};

/// Which part of the model a chunk holds (from the plan's pipeline.stages).
struct StageSpec {
  int64_t FirstLayer = 0;
  int64_t NumLayers = 0;
  bool HasEmbedding = false;
  bool HasLoss = false; ///< final norm, output head and cross entropy
};

/// One micro batch as this rank sees it: Sequences sequences of SeqLen tokens,
/// of which this CP rank holds SeqLen / CP per sequence, in the order of
/// localPositions() (parallel/cp). Tokens and Labels are
/// [Sequences * SeqLen / CP], sequence-major; every TP rank gets the same.
struct MicroBatch {
  int64_t Sequences = 1;
  int64_t SeqLen = 0;
  std::vector<int32_t> Tokens;
  std::vector<int32_t> Labels;
};

class StageModel {
public:
  StageModel(const ModelConfig &Config, const StageSpec &Stage,
             const ParallelContext &Groups, const ModelOptions &Options);
  ~StageModel();
  StageModel(const StageModel &) = delete;
  StageModel &operator=(const StageModel &) = delete;

  /// Forward of micro batch Id. Input is the previous chunk's output (nullptr
  /// on the embedding chunk, which reads MB.Tokens). Hidden states between
  /// chunks are [Sequences * SeqLen / CP / TP, Hidden]: this rank's sequence
  /// shard. Returns the output hidden states, or an empty tensor on the loss
  /// chunk (which adds to loss()).
  Tensor forward(int64_t Id, const MicroBatch &MB, const Tensor *Input);
  /// Backward of micro batch Id: OutputGrad from the next chunk (nullptr on
  /// the loss chunk). Accumulates parameter gradients; returns the gradient
  /// of the input hidden states (empty on the embedding chunk). Frees the
  /// micro batch's saved activations.
  Tensor backward(int64_t Id, const Tensor *OutputGrad);

  std::vector<Parameter *> parameters();

  struct LossTotals {
    double CeSum = 0;   ///< unscaled sum of this rank's per-token CE losses
    int64_t Tokens = 0; ///< tokens in CeSum
    double AuxSum = 0;  ///< unscaled sum of aux losses (per micro batch, per MoE layer)
  };
  LossTotals &loss();
  /// Peak bytes of saved activations per module ("attention", "core_attn",
  /// "mlp", "moe", ...) and in total ("total") since resetStepStats().
  const std::map<std::string, int64_t> &peakActivationBytes() const;
  void resetStepStats();

private:
  struct Impl;
  std::unique_ptr<Impl> P;
};

} // namespace moert

#endif
