//===- kernels/Backend.h - The table of operations a stage computes with --===//
//
// The transformer (model/, parallel/) is written once; its matrix products,
// attention blocks and the element-wise operations with a GPU kernel (RMSNorm,
// RoPE, SwiGLU) go through a ComputeBackend:
// the host backend (OpenBLAS and host loops, fp32) or the CUDA backend
// (kernels/cuda/CudaBackend.h: cuBLAS and the CUDA kernels, bf16 operands,
// fp32 accumulation). Operands are host fp32 arrays with the conventions of
// kernels/host/Blas.h and model/ModelOps.h; a backend that computes elsewhere
// moves them in and out itself.
//
// The backend in force is per thread (BackendScope), as a CUDA device is: the
// kernels sit several calls below a StageModel, in helpers shared by the
// attention, MoE, tensor-parallel and vision code, and StageModel installs
// its backend around each forward and backward (ModelOptions::Compute)
// rather than threading it through every one of their signatures.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_BACKEND_H
#define MOERT_KERNELS_BACKEND_H

#include "kernels/ColumnBlocks.h"
#include "kernels/LinearAttentionInput.h"
#include "kernels/RopeColumns.h"
#include "kernels/RouterSpec.h"
#include "kernels/RowPairs.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace moert {

class Communicator;
class Request;

/// GELU exactly, x Phi(x) by erf, or by its tanh approximation.
enum class GeluForm { Erf, Tanh };

/// C = Alpha * op(A) * op(B) + Beta * C, row-major; op(A) is M x K, op(B) is
/// K x N; leading dimensions are the stored rows' widths.
struct GemmArgs {
  bool TransA = false, TransB = false;
  int64_t M = 0, N = 0, K = 0;
  float Alpha = 1.0f;
  const float *A = nullptr;
  int64_t LdA = 0;
  const float *B = nullptr;
  int64_t LdB = 0;
  float Beta = 0.0f;
  float *C = nullptr;
  int64_t LdC = 0;
};

/// One query span against one key span of causal attention
/// (parallel/cp/AttentionBlock.h's attendSpanForward/Backward, whose
/// semantics these are). Q, K, V, Out and the gradients are whole local
/// tensors of LocalTokens rows per batch row ([Batch, LocalTokens, heads,
/// dim]); Lse and Delta are [Batch, QHeads, LocalTokens]. The query span is
/// rows [QBegin, QBegin + QLen) at absolute positions QPos, QPos + 1, ...,
/// the key span rows [KBegin, KBegin + KLen) from KPos; key j is visible to
/// query i iff its position is not later.
struct AttentionBlockArgs {
  int64_t Batch = 1, LocalTokens = 0, QHeads = 0, KvHeads = 0, HeadDim = 0, VHeadDim = 0;
  float Scale = 1.0f;
  int64_t QBegin = 0, QLen = 0, QPos = 0, KBegin = 0, KLen = 0, KPos = 0;
  const float *Q = nullptr, *K = nullptr, *V = nullptr;
  /// Forward: the running output and log-sum-exp the block merges into.
  float *Out = nullptr, *Lse = nullptr;
  /// Forward: no block has merged into the query span yet, so the block
  /// writes its Out and Lse (zeros and -inf where no key is visible)
  /// whatever they held: a backend that keeps them need not bring them.
  bool Fresh = false;
  /// Backward: the final log-sum-exp, rowsum(DOut * Out), the output
  /// gradient, and the gradients accumulated into (+=).
  const float *FinalLse = nullptr, *Delta = nullptr, *DOut = nullptr;
  float *DQ = nullptr, *DK = nullptr, *DV = nullptr;
};

/// Gated DeltaNet's recurrence (model/GatedDeltaRule.h) over every value
/// head of Sequences whole sequences of SeqLen tokens, in fp32: Q, K, DQ, DK
/// [Sequences * SeqLen, KeyHeads * HeadDim]; V, O, DO, DV [.., ValueHeads *
/// HeadDim]; G, Beta, DG, DBeta [.., ValueHeads]; value head h reads key head
/// h / (ValueHeads / KeyHeads). The results are overwritten.
struct DeltaRuleArgs {
  int64_t Sequences = 0, SeqLen = 0, KeyHeads = 0, ValueHeads = 0, HeadDim = 0;
  const float *Q = nullptr, *K = nullptr, *V = nullptr, *G = nullptr, *Beta = nullptr;
  /// The forward's result.
  float *O = nullptr;
  /// The backward's.
  const float *DO = nullptr;
  float *DQ = nullptr, *DK = nullptr, *DV = nullptr, *DG = nullptr, *DBeta = nullptr;
};

/// An MoE router's routing (model/Router.h: Router::route and stats
/// forward, Router::backward backward) for Tokens tokens, with the router's
/// settings (those of ModelConfig).
struct RouterArgs {
  int64_t Tokens = 0;
  RouterSpec Router;
  /// [Experts], a sigmoid router's expert bias, or null.
  const float *Bias = nullptr;
  /// [Tokens, Experts]: the logits in (the router's product), the scores
  /// out; the backward reads them.
  float *Scores = nullptr;
  /// Forced balance: [Tokens] keys whose draws replace the logits
  /// (Router::forceBalancedLogits), or null.
  const uint64_t *BalanceKeys = nullptr;
  /// [Tokens * TopK]: written by the forward, read by the backward.
  int32_t *TopIdx = nullptr;
  float *TopW = nullptr;
  /// The forward's [2 Experts + 1] load-balancing statistics.
  float *Stats = nullptr;
  /// The backward's: the routing weights' gradients, the aux loss's f_e and
  /// its scale, and the logits' gradients (overwritten).
  const float *DTopW = nullptr, *Fraction = nullptr;
  double AuxPerScore = 0;
  float *DLogits = nullptr;
};

/// Context-parallel attention (the semantics of
/// parallel/cp/ContextParallelAttention.h) run where the backend computes,
/// its exchanges over Device, the cp group's counterpart over the backend's
/// buffers (comm/nccl), never through host memory, by the exchange Kind
/// names. Q, K, V, Out and
/// DOut are this rank's [Batch, SeqLen / cp, heads, HeadDim], Lse [Batch,
/// QHeads, SeqLen / cp]; the outputs are overwritten.
struct CpAttentionArgs {
  Communicator *Device = nullptr;
  /// How the blocks travel (parallel/cp/ContextParallelAttention.h's
  /// CpExchange): around the ring (parallel/cp/Ring.h: K/V blocks and,
  /// backward, their gradients), gathered once (their gradients
  /// reduce-scattered), or by all-to-alls to head shards.
  enum Exchange { Ring, AllGather, AllToAll } Kind = Ring;
  int64_t Batch = 1, SeqLen = 0, QHeads = 0, KvHeads = 0, HeadDim = 0, VHeadDim = 0;
  const float *Q = nullptr, *K = nullptr, *V = nullptr;
  /// Written by the forward; the backward reads them.
  float *Out = nullptr, *Lse = nullptr;
  /// The backward's.
  const float *DOut = nullptr;
  float *DQ = nullptr, *DK = nullptr, *DV = nullptr;
};

/// What reads the result of an exchange of activations: any operation
/// (the exchange moves fp32, the host's bits), or products alone, which take
/// their operands in the backend's operand precision, so that the exchange
/// may move them in it (bf16 on the CUDA backend: half the bytes, the same
/// products).
enum class ReadBy { AnyOperation, Products };

/// A host array held on a backend (ComputeBackend::holdArrays).
struct HeldArray {
  enum Use {
    /// The caller leaves it unchanged while it is held (a parameter's
    /// values between two optimizer steps); the backend's own operations
    /// may write it (an activation held from its making to its last reader),
    /// and then keep their copy in step with the host array. The CUDA
    /// emulation checks at each release that the host did not write it.
    Read,
    /// A sum the backend's operations add to (C += op(A) op(B), an RMSNorm
    /// weight's gradient): the backend may keep its share apart and add it
    /// to the host array on release. The caller may add to the host array
    /// meanwhile (what host code accumulates) but reads it only after the
    /// release (a parameter's gradient during a step).
    Accumulate,
    /// Mostly the backend's own while it is held (and kept, keepArrays): its
    /// operations read it (from the host's values at first) and write it,
    /// and a backend that computes elsewhere does not copy their results
    /// back; host code that reads or writes it meanwhile calls hostReads()
    /// first (a host fallback, a ring's send), and hostWrote() after a
    /// write. After the release its host values are those the host last
    /// had (its own, or what hostReads() brought back) if no operation wrote
    /// it since, else unspecified. For what
    /// the backend's operations alone read: saved products, the queries,
    /// keys and values. The CUDA emulation fills host values the backend
    /// has not brought back with NaNs, so that a host reader that did not
    /// ask fails the equivalence matrix.
    BackendOnly,
  };
  float *Data = nullptr;
  int64_t Count = 0;
  Use Kind = Read;
  /// BackendOnly alone: the backend keeps it in fp32, not in the bf16 of
  /// its operands (made from it where an operation reads it), so that adds
  /// into it give the host's bits: the residual stream and its gradient.
  bool Wide = false;
  /// BackendOnly alone: the backend's operations write every element before
  /// one reads it, so that a backend that copies it starts its copy from
  /// nothing instead of the host's values (NaNs in the CUDA emulation, so
  /// that an element no operation wrote shows).
  bool Unset = false;

  /// The backend's own in fp32 (BackendOnly, Wide): the residual stream,
  /// and the sums, gathers and statistics only its operations read and
  /// write.
  static HeldArray wide(float *Data, int64_t Count) { return {Data, Count, BackendOnly, /*Wide=*/true}; }
};

/// What a backend moved between host and device and the device memory it
/// used; all zero for the host backend. Counters run from the backend's
/// creation; the peak from the last resetPeak().
struct BackendTraffic {
  int64_t HostToDeviceBytes = 0, DeviceToHostBytes = 0;
  int64_t DevicePeakBytes = 0;
  /// The copies by the table operation that made them ("gemm", "rope", ...;
  /// a held array's copy and its sum's return: "outermost hold", "nested
  /// holds"), so that what to keep on the device next is chosen by
  /// measurement.
  struct Copies {
    int64_t HostToDeviceBytes = 0, DeviceToHostBytes = 0;
    /// How many copies, either way. A copy to or from pageable host memory
    /// waits for all the work queued on the device before it (it
    /// synchronizes its stream: the CUDA Runtime API's "API synchronization
    /// behavior"), which keeps the host from running ahead.
    int64_t Transfers = 0;
    /// Of those, the copies only queued, which the host goes on without
    /// waiting for: uploads staged through pinned memory, and the loss
    /// head's statistics brought back behind the queued work (read when the
    /// caller asks for its losses: LossHeadArgs::LossesLater).
    int64_t Queued = 0;
  };
  std::map<std::string, Copies> ByOperation;
};

/// A loss head (parallel/tp/VocabParallel.h's cross entropy over the output
/// projection), forward and backward at once, on this rank's vocabulary
/// slice: Logits = X W ([Rows, Vocab]; X [Rows, Hidden] (all rows), W
/// [Hidden, Vocab], ids from VocabStart), Losses[n] = -log
/// softmax(Logits[n])[Labels[n]] over the group's whole vocabulary (0 for a
/// negative label), DLogits = Scale * (softmax - onehot(label)) (0 rows for
/// negative labels), DX = DLogits W^T (overwritten: this rank's part of the
/// sum over the group), DW += X^T DLogits.
struct LossHeadArgs {
  int64_t Rows = 0, Hidden = 0, Vocab = 0, VocabStart = 0;
  const float *X = nullptr, *W = nullptr;
  const int32_t *Labels = nullptr;
  float Scale = 1.0f;
  double *Losses = nullptr;
  float *DX = nullptr, *DW = nullptr;
  /// Combine per-row statistics over the tensor-parallel group, in place:
  /// the maximum of Rows row maxima, the sum of 2 * Rows [sum of
  /// exponentials, target logit] pairs (empty: a group of one).
  std::function<void(float *, int64_t)> MaxOverGroup, SumOverGroup;
  /// The group's device counterpart (Communicator::device()), or null: a
  /// backend that computes elsewhere combines the statistics over it where
  /// they are, instead of through the host's MaxOverGroup and SumOverGroup.
  Communicator *Device = nullptr;
  /// Whether the caller reads Losses only after lossesRead(Losses): a
  /// backend that computes elsewhere may then bring them back behind its
  /// queued work instead of waiting for it.
  bool LossesLater = false;
};

/// SwiGLU MLPs over groups of rows: the routed experts (model/MoeBlock.h),
/// a group of Counts[e] rows per local expert, in order, or a dense MLP or
/// the shared experts (one group; under tp this rank's column slice of Gate
/// and Up and row slice of Down, on the gathered sequence). X [Rows, Hidden];
/// per group Gate and Up [Hidden, Ffn], Down [Ffn, Hidden].
/// Forward: G = X Gate, U = X Up and Act = silu(G) * U ([Rows, Ffn]) are
/// written, and Y = Act Down ([Rows, Hidden]) where Y is non-null (a
/// recompute needs only the products the backward reads). Backward, from X,
/// G, U (Act where the caller kept it) and DY [Rows, Hidden]: DX written,
/// DGate, DUp and DDown added to (+=).
struct MlpArgs {
  std::vector<int64_t> Counts;
  int64_t Hidden = 0, Ffn = 0;
  const float *X = nullptr;
  std::vector<const float *> Gate, Up, Down;
  float *G = nullptr, *U = nullptr, *Act = nullptr, *Y = nullptr;
  const float *DY = nullptr;
  float *DX = nullptr;
  std::vector<float *> DGate, DUp, DDown;

  int64_t rows() const {
    int64_t Rows = 0;
    for (int64_t C : Counts)
      Rows += C;
    return Rows;
  }
  /// Body(group, first row, rows) for every group that has rows.
  template <typename Fn> void forEachGroup(Fn Body) const {
    int64_t Begin = 0;
    for (size_t E = 0; E < Counts.size(); ++E) {
      if (Counts[E] > 0)
        Body(E, Begin, Counts[E]);
      Begin += Counts[E];
    }
  }
};

/// The routed token copies of a rank alone in its ep group, moved between
/// its tokens and its experts' rows (parallel/ep/TokenDispatcher.h, whose
/// local steps these are: the rows are in the dispatcher's send order,
/// expert-major, then by copy). Copy c = n * TopK + k is token n's k-th
/// choice; row j carries copy Permutation[j], and copy c is row RowOfCopy[c].
/// Sums over a token's copies run in k order.
struct PermuteArgs {
  int64_t Tokens = 0, TopK = 0, Hidden = 0;
  const int64_t *Permutation = nullptr, *RowOfCopy = nullptr;
  /// The routing weights [Tokens * TopK] (unpermuteRows and its backward).
  const float *Weights = nullptr;

  int64_t copies() const { return Tokens * TopK; }

  /// A permutation of whole rows (one copy a row): row j of the result is
  /// row From[j] of the rows; To is its inverse.
  static PermuteArgs ofRows(const std::vector<int64_t> &From, const std::vector<int64_t> &To, int64_t Hidden) {
    return {int64_t(From.size()), 1, Hidden, From.data(), To.data(), nullptr};
  }
};

/// One AdamW update of Count consecutive elements (parallel/dp/AdamW.h),
/// PyTorch's order in fp32: g = Grad * Scale; M = Beta1 M + (1 - Beta1) g;
/// V = Beta2 V + (1 - Beta2) g^2; Param = Param (1 - Decay) - StepSize M /
/// (sqrt(V) / Bc2Sqrt + Eps). Param, M and V are updated in place.
struct AdamWArgs {
  int64_t Count = 0;
  float *Param = nullptr, *M = nullptr, *V = nullptr;
  const float *Grad = nullptr;
  float Beta1 = 0.9f, Beta2 = 0.999f, Eps = 1e-8f;
  float StepSize = 0; ///< lr / (1 - Beta1^t)
  float Bc2Sqrt = 1;  ///< sqrt(1 - Beta2^t)
  float Scale = 1;    ///< the gradient clipping factor
  float Decay = 0;    ///< lr * weight decay, or 0 for an exempt parameter
};

/// A vocabulary-parallel embedding's lookup (parallel/tp/VocabParallel.h):
/// this rank's table [VocabRows, Hidden] holds the ids [VocabStart,
/// VocabStart + VocabRows).
struct EmbeddingArgs {
  int64_t Tokens = 0, Hidden = 0, VocabStart = 0, VocabRows = 0;
  const int32_t *Ids = nullptr;

  bool holds(int32_t Id) const { return Id >= VocabStart && Id < VocabStart + VocabRows; }
};

/// A host array by its extent (ComputeBackend::makeResident).
struct HostArray {
  float *Data = nullptr;
  int64_t Count = 0;
};
struct ConstArray {
  const float *Data = nullptr;
  int64_t Count = 0;
};

class ComputeBackend {
public:
  virtual ~ComputeBackend();
  /// "cpu" or "cuda", as moerun's --backend names it.
  virtual const char *name() const = 0;
  /// How the backend computes, for the run's notes ("in fp32").
  virtual const char *precision() const = 0;

  virtual void gemm(const GemmArgs &G) = 0;
  /// Y = X * rstd * W per row, rstd = 1 / sqrt(mean(X^2) + Eps); X, Y [Rows,
  /// Hidden], W [Hidden], Rstd [Rows].
  virtual void rmsNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, double Eps, float *Y,
                              float *Rstd) = 0;
  /// DX = rstd * (DY W - X rstd^2 mean(DY W X)); DW += sum over rows of DY X
  /// rstd.
  virtual void rmsNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Rstd,
                               const float *DY, float *DX, float *DW) = 0;
  /// Act = silu(G) * U over Count elements.
  virtual void swiGluForward(int64_t Count, const float *G, const float *U, float *Act) = 0;
  /// DG = DAct * U * silu'(G), DU = DAct * silu(G).
  virtual void swiGluBackward(int64_t Count, const float *G, const float *U, const float *DAct, float *DG,
                              float *DU) = 0;
  /// The vision tower's LayerNorm (weight and bias) and GELU, where the
  /// backend has a kernel: true when done, false to leave them to the
  /// caller's host code (model/ModelOps.h's, whose semantics they have).
  /// Y = (X - mean) rstd W + B per row, rstd = 1 / sqrt(var + Eps); Mean and
  /// Rstd [Rows] are saved for the backward.
  virtual bool layerNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *B,
                                double Eps, float *Y, float *Mean, float *Rstd) {
    return false;
  }
  /// DX = rstd (g - mean(g) - xhat mean(g xhat)), g = DY W; DW += sum over
  /// rows of DY xhat, DB += sum over rows of DY.
  virtual bool layerNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Mean,
                                 const float *Rstd, const float *DY, float *DX, float *DW, float *DB) {
    return false;
  }
  /// Y = gelu(X), and DX = DY gelu'(X), over Count elements.
  virtual bool gelu(GeluForm, int64_t Count, const float *X, float *Y) { return false; }
  virtual bool geluBackward(GeluForm, int64_t Count, const float *X, const float *DY, float *DX) { return false; }
  /// Gated DeltaNet's output norm over Rows heads of Width and its
  /// backward (model/ModelOps.h's gatedRmsNormForward/Backward, whose
  /// semantics they have), where the backend has a kernel: true when done,
  /// false to leave it to the host's loops.
  virtual bool gatedRmsNormForward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W,
                                   double Eps, float *Y, float *Rstd) {
    return false;
  }
  virtual bool gatedRmsNormBackward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W,
                                    const float *Rstd, const float *DY, float *DO, float *DZ, float *DW) {
    return false;
  }
  /// Attention's output gate and its backward (model/ModelOps.h's
  /// sigmoidGateForward/Backward, whose semantics they have), where the
  /// backend has a kernel: true when done, false to leave it to the host.
  virtual bool sigmoidGateForward(int64_t Count, const float *X, const float *Gate, float *Y) { return false; }
  virtual bool sigmoidGateBackward(int64_t Count, const float *X, const float *Gate, const float *DY, float *DX,
                                   float *DGate) {
    return false;
  }
  /// The vision tower's linear biases, position table and 2-D rotary
  /// (model/ModelOps.h's loops of the same names, whose semantics they
  /// have), where the backend takes them: true when done, false to leave
  /// them to the host's loops. Y[r] += Bias for Rows rows of Cols; DBias +=
  /// the sum of DY's rows.
  virtual bool addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y) { return false; }
  virtual bool addColumnSums(int64_t Rows, int64_t Cols, const float *DY, float *DBias) { return false; }
  /// X[n] += sum over k < 4 of Weight[4n + k] Table[Index[4n + k]] for N rows
  /// of Cols (a bilinear interpolation of a table's rows); the backward adds
  /// Weight[4n + k] DX[n] to DTable[Index[4n + k]], n and k in order.
  virtual bool interpolateRowsForward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight,
                                      const float *Table, float *X) {
    return false;
  }
  virtual bool interpolateRowsBackward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight,
                                       const float *DX, float *DTable) {
    return false;
  }
  /// Rotary embedding in place on X [Rows, Groups * Columns.Stride] by a
  /// table of angles: pair j of row n turns by Cos and Sin [n * RopeDim / 2
  /// + j] (Inverse: back).
  virtual bool ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const float *Cos,
                           const float *Sin, bool Inverse) {
    return false;
  }
  /// Gated DeltaNet's input side (kernels/LinearAttentionInput.h;
  /// model/ModelOps.h's host loops of the same names, whose semantics they
  /// have), where the backend has a kernel: true when done, false to leave
  /// it to the host's loops. The convolution with silu: Pre = conv(X), Act =
  /// silu(Pre); its backward from DAct writes DX and adds to DW.
  virtual bool causalConvSiluForward(const CausalConv &, const float *X, const float *W, float *Pre, float *Act) {
    return false;
  }
  virtual bool causalConvSiluBackward(const CausalConv &, const float *X, const float *W, const float *Pre,
                                      const float *DAct, float *DX, float *DW) {
    return false;
  }
  /// Each of Rows heads of Width divided by its L2 norm, Y = X / sqrt(|X|^2
  /// + Eps) (Y may be X), Inv [Rows] = the factor; the backward DX = Inv (DY
  /// - Y (DY . Y)) (DX may be DY).
  virtual bool l2NormHeadsForward(int64_t Rows, int64_t Width, double Eps, const float *X, float *Y, float *Inv) {
    return false;
  }
  virtual bool l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY,
                                   float *DX) {
    return false;
  }
  /// The decay and write gates (DeltaGates), each way.
  virtual bool deltaGatesForward(const DeltaGates &, const float *A, const float *B, float *RawA, float *G,
                                 float *Beta) {
    return false;
  }
  virtual bool deltaGatesBackward(const DeltaGates &, const float *RawA, const float *G, const float *Beta,
                                  const float *DG, const float *DBeta, float *DA, float *DB, float *DALog,
                                  float *DDtBias) {
    return false;
  }
  /// Rotary embedding in place on X [Rows, Groups * Columns.Stride]
  /// (model/ModelOps.h's applyRope and applyInterleavedRope), where the
  /// backend has a kernel: true when done, false to leave it to the host
  /// code.
  virtual bool rope(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const int64_t *Positions,
                    double Theta, bool Inverse) {
    return false;
  }
  /// An attention block, where the backend has a kernel for its shape: true
  /// when done, false to leave it to the caller's host code (which still
  /// runs its products through gemm()).
  virtual bool attentionBlockForward(const AttentionBlockArgs &) { return false; }
  virtual bool attentionBlockBackward(const AttentionBlockArgs &) { return false; }
  /// Delta = rowsum(DOut * Out), which attention's backward reads: Delta[b,
  /// h, t] = sum_d Out[b, t, h, d] DOut[b, t, h, d] ([Batch, QHeads, Tokens];
  /// Out and DOut [Batch, Tokens, QHeads, VDim]).
  virtual void attentionDelta(int64_t Batch, int64_t Tokens, int64_t QHeads, int64_t VDim, const float *Out,
                              const float *DOut, float *Delta);
  /// Whether the backend routes tokens of A's router (routeTokens and
  /// routeTokensBackward then do it); if not, the caller's host code does.
  virtual bool takesRouting(const RouterArgs &) const { return false; }
  virtual void routeTokens(const RouterArgs &) { throw std::logic_error("this backend routes no tokens"); }
  virtual void routeTokensBackward(const RouterArgs &) { throw std::logic_error("this backend routes no tokens"); }
  /// Gated DeltaNet's recurrence, where the backend has a kernel for its
  /// heads: true when done, false to leave it to the caller's host code.
  virtual bool gatedDeltaRuleForward(const DeltaRuleArgs &) { return false; }
  virtual bool gatedDeltaRuleBackward(const DeltaRuleArgs &) { return false; }
  /// Whether context-parallel attention of A's shape and exchange runs on
  /// this backend over A.Device (cpAttentionForward/Backward then do it);
  /// if not, host code exchanges the blocks and calls
  /// attentionBlockForward/Backward for each.
  virtual bool takesCpAttention(const CpAttentionArgs &) const { return false; }
  virtual void cpAttentionForward(const CpAttentionArgs &) {
    throw std::logic_error("this backend runs no context-parallel attention");
  }
  virtual void cpAttentionBackward(const CpAttentionArgs &) {
    throw std::logic_error("this backend runs no context-parallel attention");
  }
  /// Whether the backend runs loss heads as one operation, keeping the
  /// logits (the step's largest activation) to itself; if not, the caller
  /// runs parallel/tp/VocabParallel.h and two products.
  virtual bool fusesLossHead() const { return false; }
  /// A group of SwiGLU MLPs each way. This composition of gemm() and
  /// swiGluForward/Backward is the reference; a backend that computes
  /// elsewhere runs it from one copy of the rows, keeping what passes
  /// between the products to itself.
  virtual void mlpForward(const MlpArgs &);
  virtual void mlpBackward(const MlpArgs &);
  /// The dispatcher made A's permutation on the host from the experts
  /// [Tokens * TopK] (ids below Experts) that routeTokens() chose. A backend
  /// that still holds those experts may make the same permutation from them
  /// where they are, so that the moves below find it there instead of
  /// receiving it.
  virtual void permutationRouted(const PermuteArgs &, const int32_t * /*Chosen*/, int64_t /*Experts*/) {}
  /// Rows [copies, Hidden]: row j = X[Permutation[j] / TopK].
  virtual void permuteRows(const PermuteArgs &, const float *X, float *Rows);
  /// DX [Tokens, Hidden] (written): DX[n] = sum_k DRows[RowOfCopy[n TopK + k]].
  virtual void permuteRowsBackward(const PermuteArgs &, const float *DRows, float *DX);
  /// Y [Tokens, Hidden] (written): Y[n] = sum_k Weights[c] Rows[RowOfCopy[c]], c = n TopK + k.
  virtual void unpermuteRows(const PermuteArgs &, const float *Rows, float *Y);
  /// DRows[RowOfCopy[c]] = Weights[c] DY[c / TopK]; DWeights[c] =
  /// <DY[c / TopK], Rows[RowOfCopy[c]]>, summed in double in hidden order
  /// (the same on every layout).
  virtual void unpermuteRowsBackward(const PermuteArgs &, const float *DY, const float *Rows, float *DRows,
                                     float *DWeights);
  /// Out [Tokens, Hidden] (written): row n = Table[Ids[n] - VocabStart]
  /// where this rank holds the id, else zeros.
  virtual void embeddingForward(const EmbeddingArgs &, const float *Table, float *Out);
  /// DTable[Ids[n] - VocabStart] += D[n] for the ids this rank holds, the
  /// tokens in order.
  virtual void embeddingBackward(const EmbeddingArgs &, const float *D, float *DTable);
  /// The optimizer's element update (AdamWArgs).
  virtual void adamW(const AdamWArgs &);
  /// The sum of the squares of every element of Arrays, in double (the
  /// global gradient norm's share of a rank): one operation for all of a
  /// rank's gradients, so that a GPU returns one figure.
  virtual double sumSquares(const std::vector<ConstArray> &Arrays);
  /// Count zeros at Data (a gradient before a step's first backward, a sum
  /// before its first product).
  virtual void zero(float *Data, int64_t Count);
  /// Out = A + B over Count elements in fp32 (the residual stream's adds);
  /// Out may be A or B. A backend that computes elsewhere adds there where
  /// one of them is held Wide, else on the host.
  virtual void add(int64_t Count, const float *A, const float *B, float *Out);
  /// Count elements from Src to Dst (a gradient into its reduction bucket,
  /// attention's key and value gradients out of the ring's buffer), on the
  /// device where one of them is held wide or resident.
  virtual void copy(const float *Src, float *Dst, int64_t Count);
  /// Blocks of columns from Src to Dst (ColumnBlocks), on the device where
  /// the destination is the backend's there (held wide or BackendOnly; a sum
  /// only into a wide one), else on the host.
  virtual void copyColumns(const ColumnBlocks &Blocks, const float *Src, float *Dst);
  /// Rows of Src to rows of Dst by Pairs (kernels/RowPairs.h): Dst row To[i]
  /// = Src row From[i], or += where Accumulate; on the device where Dst is
  /// the backend's there (held wide), else on the host. Throws
  /// std::invalid_argument where the pairs are not valid().
  virtual void copyRows(const RowPairs &Pairs, const float *Src, float *Dst, bool Accumulate);
  /// copyRows, then the source's rows zeroed (a gradient that goes to the
  /// rows' source and not on to their other readers).
  virtual void moveRows(const RowPairs &Pairs, float *Src, float *Dst);
  /// The collectives of the gradient reduction and of the distributed
  /// optimizer (comm/Communicator.h), on arrays that may be resident
  /// (makeResident): where every array is resident and the group has a
  /// device counterpart (Communicator::device(): a communicator of device
  /// buffers, comm/nccl), the backend runs it on its copies; else the group
  /// runs it on the host arrays, asked for first.
  virtual void allReduceSum(float *Data, int64_t Count, Communicator &Group);
  virtual void reduceScatterSum(const float *In, float *Out, int64_t PerRank, Communicator &Group);
  virtual void allGather(const float *In, float *Out, int64_t PerRank, Communicator &Group);
  /// Tensor parallelism's sequence exchanges of activations (parallel/tp):
  /// every member's In [PerRank] into Out [size() * PerRank] in rank order;
  /// this member's slice of the sum of every member's In [size() * PerRank]
  /// into Out [PerRank]. Over the group's device counterpart
  /// (Communicator::device()), where it has one, between the backend's
  /// copies, in fp32 (In's staged where it has none; Out's values brought
  /// back unless Out lies in a held array); else over the group on the
  /// host arrays, asked for first. Readers says what reads the gathered
  /// sequence: where products alone do, it travels in their precision.
  virtual void gatherActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group,
                                 ReadBy Readers = ReadBy::AnyOperation);
  virtual void reduceScatterActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group);
  /// Rows between the members of an exchange (the expert-parallel dispatch
  /// and its reverse): Communicator::allToAllV's semantics, counts and
  /// offsets in elements of In and Out. Over the group's device counterpart
  /// (Communicator::device()), where it has one, between the backend's
  /// copies (In's staged where it has none; Out's values brought back unless
  /// Out lies in a held array), in the precision of its operands; else over
  /// the group on the host arrays, asked for first.
  virtual void allToAllV(const float *In, const std::vector<size_t> &InCounts, const std::vector<size_t> &InOffsets,
                         float *Out, const std::vector<size_t> &OutCounts, const std::vector<size_t> &OutOffsets,
                         Communicator &Group);
  /// A pipeline stage's activations (its output, or its input's gradient)
  /// to or from a neighbour over Group (the pp group), non-blocking: the
  /// Request completes the transfer, and Data must stay allocated until
  /// then. Over the group's device counterpart (Communicator::device()),
  /// where it has one, between the backend's copies in fp32; else the
  /// host's arrays travel over the group. What the backend keeps of the
  /// array at Data (keepArrays, under any key) is what is sent, and is
  /// released; what is received is kept under Data itself until its reader
  /// takes it over (passKept) or releases it.
  virtual std::unique_ptr<Request> sendActivations(const float *Data, int64_t Count, int Peer, int Tag,
                                                   Communicator &Group);
  virtual std::unique_ptr<Request> receiveActivations(float *Data, int64_t Count, int Peer, int Tag,
                                                      Communicator &Group);
  /// Only where fusesLossHead().
  virtual void lossHead(const LossHeadArgs &) { throw std::logic_error("this backend does not fuse loss heads"); }
  /// The losses of a lossHead() with LossesLater are written by the time
  /// this returns (a backend that wrote them at once does nothing).
  virtual void lossesRead(const double * /*Losses*/) {}

  /// Arrays held until releaseArrays() (HeldArray::Use says how the caller
  /// uses them meanwhile): a backend that computes elsewhere may keep its own
  /// copy of them, made on first use, instead of moving them per operation,
  /// and accumulate there. An operand is taken from the held copy when it
  /// lies wholly inside one. Holds nest: releaseArrays() ends the latest
  /// holdArrays() still in force (the trainer holds the parameters for a
  /// step, a product that reads an activation several times holds it for
  /// those products); an array that overlaps one already held is left to
  /// the outer hold.
  virtual void holdArrays(const std::vector<HeldArray> &) {}
  virtual void releaseArrays() {}
  /// Read (or BackendOnly) arrays whose copies a hold in force made, kept
  /// on the backend past that hold until releaseKept(Key): a micro batch's
  /// saved activations from its layer's forward to the layer's backward,
  /// between which other micro batches run (so no scope could hold them).
  /// The caller neither writes nor frees them meanwhile. A Read array
  /// without such a copy is not kept (its next reader takes it from the
  /// host); a BackendOnly one is (its copy is made on its next use).
  virtual void keepArrays(const void *Key, const std::vector<HeldArray> &) {}
  virtual void releaseKept(const void *Key) {}
  /// Releases only the array at Array of those kept under Key, if it is
  /// one (a saved activation that a recompute policy frees before the
  /// backward).
  virtual void releaseKept(const void *Key, const float *Array) {}
  /// Releases all that Key keeps but the array at Retained, which stays
  /// kept under Key (a layer's input, from which a full recompute reruns
  /// the layer).
  virtual void releaseKeptBut(const void *Key, const float *Retained) {}
  /// What is kept under From is kept under To from now on (a stage's
  /// received input, taken over by its first layer).
  virtual void passKept(const void *From, const void *To) {}
  /// Host code wrote Count elements at Data in place, where a held array
  /// may lie (a host fallback of an operation the backend declined): a
  /// backend that keeps copies drops those it overlaps.
  virtual void hostWrote(const float *Data, int64_t Count) {}
  /// Host code is about to read (or write) Count elements at Data, where a
  /// BackendOnly or resident array may lie: a backend that kept its
  /// operations' results to itself brings them back.
  virtual void hostReads(const float *Data, int64_t Count) {}

  /// Arrays the backend keeps as its own, in fp32, across holds and steps
  /// until releaseResident(): the parameters' values and gradients and
  /// Adam's moments from one optimizer step to the next, which the
  /// backend's operations read and write in place (its products, adamW,
  /// sumSquares, zero), so that they do not cross between steps. Their host
  /// values are unspecified meanwhile: host code that reads or writes one
  /// calls hostReads() first (a gradient reduction over a host
  /// communicator, a checkpoint), and hostWrote() after it wrote (the
  /// reduction's sums). releaseResident() brings every one back to the host.
  /// An array that overlaps one already resident or held is left out.
  virtual void makeResident(const std::vector<HostArray> &) {}
  virtual void releaseResident() {}

  virtual BackendTraffic traffic() const { return {}; }
  virtual void resetPeak() {}
};

/// OpenBLAS and host loops in fp32: the reference every other backend is
/// compared with.
ComputeBackend &hostBackend();
/// This thread's backend: the innermost live BackendScope's, else the host's.
ComputeBackend &currentBackend();

/// Makes Backend this thread's for the scope's lifetime.
class BackendScope {
public:
  explicit BackendScope(ComputeBackend &Backend);
  ~BackendScope();
  BackendScope(const BackendScope &) = delete;
  BackendScope &operator=(const BackendScope &) = delete;

private:
  ComputeBackend *Previous;
};

/// Holds Arrays on Backend for the scope's lifetime (ComputeBackend::holdArrays).
class HeldArrays {
public:
  HeldArrays(ComputeBackend &Backend, const std::vector<HeldArray> &Arrays) : Backend(Backend) {
    Backend.holdArrays(Arrays);
  }
  ~HeldArrays() { Backend.releaseArrays(); }
  HeldArrays(const HeldArrays &) = delete;
  HeldArrays &operator=(const HeldArrays &) = delete;

private:
  ComputeBackend &Backend;
};

/// Backend.mlpForward(A); where KeepFor is not null, its products stay on
/// the backend (G, U and Act held HeldArray::BackendOnly, their host values
/// unspecified) and what the backward reads (G, U, and the input rows where
/// KeepRows) is kept under KeepFor (ComputeBackend::keepArrays) until the
/// caller releases it.
void mlpForwardKeeping(ComputeBackend &Backend, const MlpArgs &A, const void *KeepFor, bool KeepRows);

} // namespace moert

#endif
