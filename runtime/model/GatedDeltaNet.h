//===- model/GatedDeltaNet.h - Gated DeltaNet, Qwen3-Next's linear attention -===//
//
// The token mixer of the linear-attention layers, as Megatron-Core 0.16.1's
// GatedDeltaNet computes it (megatron/core/ssm/gated_delta_net.py forward):
//
//   q, k, v, z, b, a = Xn W_q, Xn W_k, Xn W_v, Xn W_z, Xn W_b, Xn W_a
//   q, k, v = silu(causal depthwise conv of width ConvKernel over each)
//   q, k = l2norm per head (eps 1e-6); key head j serves value heads
//          j r .. j r + r - 1 (r = ValueHeads / KeyHeads, repeat_interleave)
//   g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)   per value head
//   o = the gated delta rule (model/GatedDeltaRule.h) per sequence and head
//   y = (RMSNorm over each head of o) * w * silu(z), then y W_out
//
// Under tensor parallelism every projection but W_out is column-parallel by
// whole heads (the conv, dt_bias and A_log follow their channels and heads),
// W_out is row-parallel; the norm weight w [HeadDim] is whole on every rank.
// Megatron packs the six projections into one in_proj and splits it per
// rank; separate matrices compute the same. A micro batch's tokens are
// sequence-major and whole sequences (no context parallelism: Megatron-Core
// 0.16.1 has none for GatedDeltaNet).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_GATEDDELTANET_H
#define MOERT_MODEL_GATEDDELTANET_H

#include "kernels/Backend.h"
#include "model/GatedDeltaRule.h"
#include "model/Model.h"

#include <functional>

namespace moert {

struct GdnWeights {
  Parameter *Q = nullptr, *K = nullptr, *V = nullptr;             ///< [Hidden, heads x HeadDim] cols/t
  Parameter *Z = nullptr;                                         ///< [Hidden, ValueHeads x HeadDim] cols/t
  Parameter *B = nullptr, *A = nullptr;                           ///< [Hidden, ValueHeads] cols/t
  Parameter *ConvQ = nullptr, *ConvK = nullptr, *ConvV = nullptr; ///< [channels, ConvKernel] rows/t
  Parameter *DtBias = nullptr, *ALog = nullptr;                   ///< [ValueHeads] rows/t
  Parameter *Norm = nullptr;                                      ///< [HeadDim] whole
  Parameter *Out = nullptr;                                       ///< [ValueHeads x HeadDim, Hidden] rows/t
};

/// What the backward needs, for all tokens of the micro batch and this
/// rank's heads.
struct GdnSaved {
  Tensor ConvQ, ConvK, ConvV; ///< the projections before the conv
  Tensor PreQ, PreK, PreV;    ///< the conv outputs before silu
  Tensor Q, K, V;             ///< the rule's inputs (q, k after l2norm)
  std::vector<float> InvQ, InvK;
  Tensor Z, RawA, G, Beta; ///< RawA = a + dt_bias
  Tensor O, Gated;         ///< the rule's output; the gated norm's
  std::vector<float> RstdO;
  int64_t bytes() const;
  /// Drops the gated norm's output and statistics (recompute module
  /// gdn_norm_out: Megatron-Core 0.19 checkpoints the norm without its
  /// output and reruns it before the output projection's backward).
  void dropNormOut() {
    Gated = Tensor();
    RstdO.clear();
  }
};

class GatedDeltaNetBlock {
public:
  GatedDeltaNetBlock(const ModelConfig &Config, Communicator &Tp);

  /// Xn [Ns, Hidden] (this rank's sequence shard of Sequences whole
  /// sequences) -> the mixer's output Y [Ns, Hidden], its storage kept
  /// where it has that shape already (held on the backend).
  /// Where KeepFor is not null, all of S stays on the backend, kept under it
  /// (ComputeBackend::keepArrays) until the caller releases it; else all of
  /// S is on the host.
  void forward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, GdnSaved &S, Tensor &Y,
               const void *KeepFor = nullptr);
  /// DY [Ns, Hidden] -> DXn (shaped likewise); accumulates the weights'
  /// gradients.
  void backward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, const GdnSaved &S, const Tensor &DY,
                Tensor &DXn);
  /// Brings back what GdnSaved::dropNormOut removed, bit for bit.
  void recomputeNormOut(const GdnWeights &W, GdnSaved &S) const;

private:
  /// S.Gated and S.RstdO from S.O and S.Z.
  void gatedNorm(const GdnWeights &W, GdnSaved &S) const;
  /// The gates' shape and parameters, for Tokens tokens.
  DeltaGates gates(const GdnWeights &W, int64_t Tokens) const;
  /// The rule's operands in S, for the compute backend.
  DeltaRuleArgs ruleArgs(int64_t Sequences, int64_t SeqLen, const GdnSaved &S) const;
  /// Fn(head view, first row of the sequence, value head, its key head) for
  /// every sequence and value head of this rank.
  void forEachHead(int64_t Sequences, int64_t SeqLen,
                   const std::function<void(const DeltaRuleHead &, int64_t Row, int64_t H, int64_t Kh)> &Fn) const;

  const ModelConfig &Config;
  Communicator &Tp;
  int64_t KeyHeads = 0, ValueHeads = 0; ///< this rank's
};

} // namespace moert

#endif
