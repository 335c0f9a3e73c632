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
// Token order and shards. A micro batch's N = Sequences * SeqLen / CP local
// tokens are sequence-major, each sequence's tokens in localPositions() order
// (parallel/cp). Hidden states between chunks are the SP shard: tp rank t
// holds rows [t * N / TP, (t + 1) * N / TP) of those N tokens (N % TP == 0).
// Every tp rank of a group gets the same MicroBatch.
//
// Parameters (names, full shapes, [in, out] row-major; "cols/t" = column
// shard t of TP, "rows/t" = row shard t of TP; full = unsplit):
//   embedding                 [Vocab, Hidden]            rows/t  Dense
//   layers.L.attn_norm        [Hidden]                   full    SPReplicated
//   layers.L.attn.q           [Hidden, Heads*HeadDim]    cols/t  Dense
//   layers.L.attn.k, .v       [Hidden, KvHeads*HeadDim]  cols/t  Dense
//   layers.L.attn.o           [Heads*HeadDim, Hidden]    rows/t  Dense
//   layers.L.attn.q_norm, .k_norm [HeadDim]              full    SPReplicated (QkNorm)
//   layers.L.mlp_norm         [Hidden]                   full    SPReplicated
//   dense layers (L < DenseLayers):
//   layers.L.mlp.gate, .up    [Hidden, FfnHidden]        cols/t  Dense
//   layers.L.mlp.down         [FfnHidden, Hidden]        rows/t  Dense
//   MoE layers:
//   layers.L.router           [Hidden, Experts]          full    SPReplicated
//   layers.L.router.expert_bias [Experts]                full    (ExpertBias: state, no gradient)
//   layers.L.experts.E.gate,.up [Hidden, MoeFfnHidden]   full    Expert
//   layers.L.experts.E.down   [MoeFfnHidden, Hidden]     full    Expert
//     (E = global expert id; only this ep rank's experts E / (Experts / EP);
//     under etp = tp, gate/up are cols/t and down rows/t)
//   layers.L.shared.gate,.up  [Hidden, SharedFfnHidden] cols/t
//   layers.L.shared.down      [SharedFfnHidden, Hidden] rows/t
//   layers.L.shared.gate_weight [Hidden, 1]              full    SPReplicated (SharedExpertGate)
//   final_norm                [Hidden]                   full    SPReplicated
//   output                    [Hidden, Vocab]            cols/t  Dense
//   MTP block k - 1 (k = 1..MtpLayers):
//   mtp.K.enorm, .hnorm       [Hidden]                   full    SPReplicated
//   mtp.K.eh_proj             [2 * Hidden, Hidden]       full    SPReplicated
//   mtp.K.layer.*             as layers.L.* of layer Layers + k - 1
//   mtp.K.final_norm          [Hidden]                   full    SPReplicated
//     (eh_proj is whole on every tp rank, which projects its sequence shard;
//     Megatron splits it by columns and gathers: the same product)
// Column shards of q/k/v hold whole heads (head h = columns [h*HeadDim,
// (h+1)*HeadDim)), so tp rank t owns query heads [t*Heads/TP, ...) and the KV
// heads they read. Matrices start as normal(0, 0.02) (the residual-writing
// attn.o, mlp.down, experts.*.down, shared.down: 0.02 / sqrt(2 * Layers)),
// norm weights as ones.
//
// Gradients: Dense shards are complete for this rank's tokens (sum over dp and
// cp); SPReplicated ones are partial over the tp shards too (sum over tp, cp
// and dp); an Expert's gradient covers every token routed to it from the ep
// group but only this rank's tp shard of them (sum over the rest of the
// expert-data-parallel group: tp x cp x dp / ep).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_MODEL_H
#define MOERT_MODEL_MODEL_H

#include "comm/Communicator.h"
#include "kernels/Backend.h"
#include "kernels/host/Tensor.h"
#include "parallel/cp/ContextParallelAttention.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moert {

/// The vision tower (model/VisionTower.h) of a vision-language model.
struct VisionConfig {
  int64_t Depth = 0, Hidden = 0, Heads = 0, FfnHidden = 0, OutHidden = 0;
  int64_t PatchSize = 16, TemporalPatch = 2, InChannels = 3, MergeSize = 2;
  int64_t PositionGrid = 48; ///< the position table is PositionGrid^2 x Hidden
  std::vector<int64_t> DeepstackLayers;
  double Eps = 1e-6, RopeTheta = 10000;
  int64_t headDim() const { return Hidden / Heads; }
  int64_t patchDim() const { return InChannels * TemporalPatch * PatchSize * PatchSize; }
  int64_t mergeUnit() const { return MergeSize * MergeSize; }
};

/// One image (or video) in patches: Frames x Rows x Cols.
struct ImageGrid {
  int64_t Frames = 1, Rows = 0, Cols = 0;
  int64_t patches() const { return Frames * Rows * Cols; }
};

struct ModelConfig {
  int64_t Layers = 0, Hidden = 0, FfnHidden = 0;
  int64_t Heads = 0, KvHeads = 0, HeadDim = 0, Vocab = 0;
  // MoE (Experts == 0: a dense model).
  int64_t Experts = 0, TopK = 0, MoeFfnHidden = 0;
  int64_t SharedFfnHidden = 0; ///< all shared experts together (0: none)
  int64_t DenseLayers = 0;     ///< the first DenseLayers layers use a dense MLP
  bool SigmoidRouter = false;
  /// Softmax router: softmax over every expert, then the top-k, weights not
  /// renormalised (Megatron moe_router_pre_softmax); else the top-k of the
  /// logits and a softmax over the chosen (Megatron's default).
  bool PreSoftmax = false;
  /// Group-limited routing (Megatron moe_router_num_groups/group_topk): a
  /// token picks its top-k among the experts of its RouterGroupTopK best
  /// groups, a group scoring the sum of its top-k / RouterGroupTopK scores.
  int64_t RouterGroups = 1, RouterGroupTopK = 1;
  /// Aux-loss-free balancing (Megatron moe_router_enable_expert_bias): a
  /// per-expert bias added to the sigmoid scores for the top-k choice only,
  /// moved by BiasUpdateRate towards balance after every step
  /// (moe_router_bias_update_rate, Megatron's default).
  bool ExpertBias = false;
  double BiasUpdateRate = 1e-3;
  /// Route by standard-normal logits drawn per (token, layer, expert) in
  /// place of the router's (Megatron moe_router_force_load_balancing, for
  /// benchmarks): every expert's load is equal in expectation. The router's
  /// weight still gets the straight-through gradient of those logits, as in
  /// Megatron's RandomSTE. A token is named by its global sample and
  /// position (MicroBatch::FirstSample), so every layout routes alike.
  bool ForceBalance = false;
  /// A vision tower on the embedding chunk: its merged tokens replace the
  /// embeddings of the image placeholders (MicroBatch::VisionRows) and its
  /// deepstack feature j is added to them after decoder layer j. Frozen: its
  /// parameters take no gradient and are not the stage's parameters().
  std::optional<VisionConfig> Vision;
  bool VisionFrozen = false;
  /// Multiplies every routing weight after the top-k (and its
  /// normalisation): Megatron's moe_router_topk_scaling_factor, DeepSeek's
  /// routed_scaling_factor.
  double TopKScaling = 1.0;
  double AuxLossCoeff = 1e-2;
  double RmsNormEps = 1e-5;
  double RopeTheta = 10000.0;
  /// RoPE rotates the first RotaryDim columns of each head (Megatron's
  /// rotary_percent x head_dim; Qwen3-Next a quarter); 0: all of them.
  int64_t RotaryDim = 0;
  /// Qwen-VL's interleaved multimodal RoPE (Megatron mrope_section): of the
  /// rotated dimensions' frequencies, how many follow each token's time, row
  /// and column positions (MicroBatch::RopePositions; model/ModelOps.h
  /// applyMultimodalRope). Their sum is half the rotated dimensions.
  std::optional<std::array<int64_t, 3>> MropeSection;
  /// The shared experts' output is scaled per token by sigmoid(x w) with a
  /// [Hidden] weight w (Megatron's moe_shared_expert_gate; Qwen3-Next).
  bool SharedExpertGate = false;

  /// RMSNorm of every query and key head (weights [HeadDim], shared by the
  /// heads) before RoPE: Megatron's q_layernorm / k_layernorm (Qwen3).
  bool QkNorm = false;

  /// Multi-head latent attention (DeepSeek-V2/V3, Megatron-Core
  /// MLASelfAttention): queries from a low-rank projection with its RMSNorm
  /// (QLoraRank > 0) or from one projection; keys and values from one
  /// compressed latent of KvLoraRank (RMSNorm, then an up-projection to every
  /// head's no-RoPE key and value) plus a RoPE key of QkRopeDim shared by the
  /// heads. Scores are over QkNopeDim + QkRopeDim, values VHeadDim wide;
  /// HeadDim and KvHeads are not used.
  struct LatentAttention {
    int64_t QLoraRank = 0, KvLoraRank = 0, QkNopeDim = 0, QkRopeDim = 0, VHeadDim = 0;
    int64_t qkDim() const { return QkNopeDim + QkRopeDim; }
  };
  std::optional<LatentAttention> Mla;

  /// Gated DeltaNet linear attention (Qwen3-Next; model/GatedDeltaNet.h):
  /// layer L mixes its tokens with it when (L + 1) % Interval != 0
  /// (Megatron's pattern, 1-based: every Interval-th layer is full
  /// attention); the full-attention layers then gate their output with a
  /// sigmoid (Megatron's attention_output_gate). Key and value heads are
  /// HeadDim wide; the conv is ConvKernel tokens wide (Megatron's
  /// linear_conv_kernel_dim default).
  struct LinearAttention {
    int64_t Interval = 0, KeyHeads = 0, ValueHeads = 0, HeadDim = 0, ConvKernel = 4;
  };
  std::optional<LinearAttention> Linear;
  bool isLinearLayer(int64_t Layer) const { return Linear && Layer < Layers && (Layer + 1) % Linear->Interval != 0; }

  /// Multi-token prediction (DeepSeek-V3; Megatron-Core
  /// MultiTokenPredictionBlock): MtpLayers blocks after the decoder, on the
  /// loss chunk. Block k (1-based) takes the previous block's output (the
  /// decoder's after the final norm for k = 1) and the embeddings of the
  /// tokens k places ahead, RMS-normalises both, projects their
  /// concatenation [embedding, hidden] from 2 x Hidden to Hidden, runs one
  /// decoder layer (index Layers + k - 1: an MoE layer in an MoE model) and
  /// its own final norm, and predicts the token k + 1 places ahead through
  /// the shared output head. Its cross entropy joins the objective weighted
  /// by MtpLossScale / MtpLayers (Megatron's mtp_loss_scaling_factor, 0.1
  /// by default: transformer_config.py).
  int64_t MtpLayers = 0;
  double MtpLossScale = 0.1;

  bool isMoeLayer(int64_t Layer) const { return Experts > 0 && Layer >= DenseLayers; }
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

/// How a parameter's full tensor is split over the tp group: this rank holds
/// the TpRank-th of TpSize equal slices along the first dimension (Rows) or
/// the last dimension (Cols), or the whole tensor (None). Lets tools gather
/// the full tensor from the shards.
enum class TpSplit { None, Rows, Cols };

struct Parameter {
  std::string Name; ///< global name, e.g. "layers.3.experts.5.fc1"
  ParamKind Kind = ParamKind::Dense;
  TpSplit Split = TpSplit::None;
  Tensor Value; ///< this rank's shard, fp32 (the master copy)
  Tensor Grad;  ///< same shape; backward accumulates into it
  /// A copy of the parameter of the same name on the first pipeline stage
  /// (the embedding the MTP block reads on the last stage, Megatron's shared
  /// embedding): the trainer sums its gradient with the original's over the
  /// embedding group so that both take the same steps, and checkpoints hold
  /// the original only.
  bool TiedCopy = false;
  /// Host code reads its values or adds to its gradient (Gated DeltaNet's
  /// gates and convolutions, the vision tower's biases and LayerNorms)
  /// besides the compute backend's operations: it
  /// stays a host array between steps, where the trainer keeps the others
  /// on the backend (ComputeBackend::makeResident).
  bool ReadOnHost = false;
};

/// The router's expert bias of one MoE layer: model state the optimizer does
/// not step (Megatron-Core router.py expert_bias). State is named
/// "layers.L.router.expert_bias", [Experts], the same on every rank of the
/// stage; Tokens counts the routed copies each expert got from this rank's
/// training forwards since the last update (local_tokens_per_expert).
struct ExpertBias {
  Parameter State;
  std::vector<float> Tokens;
};

/// The groups a stage computes with. Never null: unused dimensions are
/// groups of one (createSelfCommunicator).
struct ParallelContext {
  Communicator *Tp = nullptr;
  Communicator *Cp = nullptr;
  Communicator *TpCp = nullptr; ///< aux-loss statistics span all tokens of a micro batch
  Communicator *Ep = nullptr;
  /// Expert tensor parallelism: every routed expert's weights are split over
  /// this group (gate/up by columns, down by rows), whose ranks each run the
  /// group's tokens through their slice. Null: whole experts (etp = 1). The
  /// CPU runtime requires a larger group to be the tp group (etp = tp).
  Communicator *Etp = nullptr;
  /// How attention uses the cp group (Megatron's cp_comm_type).
  CpExchange CpKind = CpExchange::Ring;
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
  /// What the stage's GEMMs, norms and activations run on (kernels/Backend.h),
  /// installed around every forward and backward; null: the host backend.
  ComputeBackend *Compute = nullptr;
  /// Multiplies the sum of per-token cross-entropy losses (1 / tokens in the
  /// global batch), so gradients summed over micro batches and DP ranks are
  /// those of the global-batch mean.
  double CeScale = 1.0;
  /// Multiplies each micro batch's auxiliary loss (1 / micro batches in the
  /// global batch).
  double AuxScale = 1.0;
  /// Multiplies the sum of depth k's multi-token-prediction losses (index
  /// k - 1): MtpLossScale / MtpLayers / the tokens in the global batch that
  /// have a label k + 1 places ahead.
  std::vector<double> MtpCeScale;
  RecomputeOptions Recompute;
};

/// Which part of the model a chunk holds (from the plan's pipeline.stages).
struct StageSpec {
  int64_t FirstLayer = 0;
  int64_t NumLayers = 0;
  bool HasEmbedding = false;
  bool HasLoss = false; ///< final norm, output head and cross entropy
  /// The MTP blocks (ModelConfig::MtpLayers) follow the loss on this chunk;
  /// without the embedding the chunk holds a TiedCopy of it.
  bool HasMtp = false;
};

/// One micro batch as this rank sees it: Sequences sequences of SeqLen tokens,
/// of which this CP rank holds SeqLen / CP per sequence, in the order of
/// localPositions() (parallel/cp). Tokens and Labels are
/// [Sequences * SeqLen / CP], sequence-major; every TP rank gets the same.
struct MicroBatch {
  int64_t Sequences = 1;
  int64_t SeqLen = 0;
  /// The index of the first sequence among the samples the run has read
  /// (its sequences are FirstSample, FirstSample + 1, ...): names a token
  /// for forced routing (ModelConfig::ForceBalance).
  int64_t FirstSample = 0;
  std::vector<int32_t> Tokens;
  std::vector<int32_t> Labels;
  /// For the MTP blocks, depth k at index k - 1, in Tokens' order: the token
  /// k places ahead of each (0 past its sequence's end, as Megatron-Core's
  /// roll_tensor fills) and its label (-1 past the end: no loss).
  std::vector<std::vector<int32_t>> MtpTokens, MtpLabels;
  /// With a vision tower: the micro batch's images (all its sequences', in
  /// order) as patches [sum of patches, patchDim] in merge order, and for
  /// each token in Tokens' order the tower output row that replaces its
  /// embedding (-1: a text token).
  std::vector<ImageGrid> Images;
  std::vector<float> ImagePatches;
  std::vector<int32_t> VisionRows;
  /// Under multimodal RoPE (ModelConfig::MropeSection): each token's time,
  /// row and column positions, in Tokens' order, counted over its whole
  /// sequence (an image's tokens by their place in the image; Qwen3-VL's
  /// get_rope_index). Empty: a token's one position is its place in the
  /// sequence.
  std::array<std::vector<int64_t>, 3> RopePositions;
};

class StageModel {
public:
  StageModel(const ModelConfig &Config, const StageSpec &Stage, const ParallelContext &Groups,
             const ModelOptions &Options);
  ~StageModel();
  StageModel(const StageModel &) = delete;
  StageModel &operator=(const StageModel &) = delete;

  /// Forward of micro batch Id. Input is the previous chunk's output (nullptr
  /// on the embedding chunk, which reads MB.Tokens). Hidden states between
  /// chunks are [Sequences * SeqLen / CP / TP, Hidden]: this rank's sequence
  /// shard. Returns the output hidden states, or an empty tensor on the loss
  /// chunk (which adds to loss()). The chunk takes Input's storage (and
  /// what a backend keeps of it under its address: a pipeline's receive,
  /// ComputeBackend::receiveActivations); it keeps its output under its
  /// address on the backend, for the pipeline's send.
  Tensor forward(int64_t Id, const MicroBatch &MB, Tensor *Input);
  /// Backward of micro batch Id: OutputGrad from the next chunk (nullptr on
  /// the loss chunk). Accumulates parameter gradients; returns the gradient
  /// of the input hidden states (empty on the embedding chunk). Frees the
  /// micro batch's saved activations. OutputGrad and the result as Input
  /// and the output of forward().
  Tensor backward(int64_t Id, Tensor *OutputGrad);
  /// Frees micro batch Id's saved activations without a backward (after a
  /// forward that only evaluates).
  void discard(int64_t Id);

  std::vector<Parameter *> parameters();
  /// Model weights the optimizer does not step and that take no gradient
  /// (a frozen vision tower's): loaded and checkpointed with the rest.
  std::vector<Parameter *> frozenParameters();
  /// The expert biases of the stage's MoE layers (empty unless
  /// ModelConfig::ExpertBias).
  std::vector<ExpertBias *> expertBiases();
  /// Replaces ModelOptions::CeScale for the micro batches that follow (a
  /// global batch whose labels are masked has its own token count).
  void setCeScale(double Scale);
  /// Whether the forwards that follow train (the default) or evaluate. A
  /// training forward counts routed tokens into the expert biases' Tokens
  /// (evaluation does not, as in Megatron, which counts only under autograd),
  /// and it may run the loss head's backward with its forward
  /// (ComputeBackend::lossHead), so a backward must follow it.
  void setTraining(bool Training);

  /// Loss totals added by forward() since resetStepStats() (losses a
  /// backend brings back later, LossHeadArgs::LossesLater, are added when
  /// this is called). CeSum and Tokens
  /// cover only this rank's SP shard of tokens (labels < 0 are ignored), so
  /// their sum over the tp, cp and dp groups counts every token once. AuxSum
  /// is the same on every rank of a TpCp group (count it once per group).
  struct LossTotals {
    double CeSum = 0;   ///< unscaled sum of this rank's per-token CE losses
    int64_t Tokens = 0; ///< tokens in CeSum
    double AuxSum = 0;  ///< unscaled sum of aux losses (per micro batch, per MoE layer)
    /// Per MTP block (depth k at k - 1): the unscaled sum of its CE losses
    /// over this rank's shard, and the tokens in it (as CeSum and Tokens).
    std::vector<double> MtpCeSum;
    std::vector<int64_t> MtpTokens;
  };
  LossTotals &loss();
  /// Peak bytes of saved activations per module and in total ("total") since
  /// resetStepStats(). Modules: "layer_input" (each layer's input, the only
  /// thing Full recompute keeps), "layernorm", "attention" (Q/K/V after RoPE
  /// and the mid-layer residual), "core_attn" (attention output and LSE),
  /// "mlp", "moe" (router state, dispatched rows, expert projections),
  /// "moe_act", "shared_experts", "output" (final norm and vocab softmax),
  /// "vision" (the tower's saved activations and outputs; a frozen tower's
  /// outputs only).
  /// Recomputed modules count while their recomputed copy is alive in
  /// backward.
  const std::map<std::string, int64_t> &peakActivationBytes() const;
  /// The experts each token of micro batch Id chose in the stage's local
  /// layer Layer (token-major, top_k each) while the micro batch is in
  /// flight and the layer is an MoE layer that kept its routing; else null.
  const std::vector<int32_t> *routedExperts(int64_t Id, int64_t Layer) const;
  /// Starts a new step: the peaks restart from what is in flight now and the
  /// loss totals restart from zero.
  void resetStepStats();

private:
  struct Impl;
  std::unique_ptr<Impl> P;
};

} // namespace moert

#endif
