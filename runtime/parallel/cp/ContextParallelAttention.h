//===- parallel/cp/ContextParallelAttention.h - Causal attention over CP -===//
//
// Core attention (softmax(QK^T / sqrt(d)) V with a causal mask, grouped-query:
// query head h reads KV head h / (QHeads / KvHeads)) for one micro batch, with
// the sequence split over the context-parallel group as ring attention:
//
//  * Load-balanced causal chunking: a sequence of SeqLen tokens is cut into
//    2*CP chunks; CP rank r holds chunk r followed by chunk 2*CP-1-r, so every
//    rank gets the same share of the causal triangle. localPositions() gives
//    the absolute positions (RoPE and the mask use them).
//  * Forward: K/V blocks travel around the ring (point-to-point sendRecv in
//    the cp group); each rank attends its queries to every block it may see
//    and merges partial results with the online-softmax (log-sum-exp) rule.
//  * Backward: the ring runs again; dK/dV blocks travel with their K/V and
//    arrive back at their owner after a full turn.
//  * Or the cp group gathers all K/V, or trades sequence shards for head
//    shards (CpExchange), as Megatron's cp_comm_type chooses.
//
// With a CP group of one this is plain causal attention; the single-rank model
// uses the same entry points.
//
// Layouts (row-major): Q [Batch, LocalTokens, QHeads, HeadDim]; K [Batch,
// LocalTokens, KvHeads, HeadDim]; V [Batch, LocalTokens, KvHeads, VDim] and Out
// [Batch, LocalTokens, QHeads, VDim], VDim = vHeadDim() (multi-head latent
// attention's values are narrower than its queries and keys); Lse [Batch, QHeads, LocalTokens]
// (natural log of the softmax denominator, saved by forward for backward).
// LocalTokens = SeqLen / CP, in localPositions() order; SeqLen must divide by
// 2*CP when CP > 1 (a group of one takes any length).
//
// Semantics: S = (Q K^T) / sqrt(HeadDim) per (batch, query head), key j
// visible to query i iff pos(j) <= pos(i); Lse_i = log sum_j exp(S_ij) over
// visible keys (scale included); Out_i = sum_j exp(S_ij - Lse_i) V_j.
// Every output is overwritten. Bad dimensions (QHeads not a positive multiple
// of KvHeads, SeqLen not divisible) throw std::invalid_argument. The calls
// are collective over Cp: every member calls with the same Dims.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_CP_CONTEXTPARALLELATTENTION_H
#define MOERT_PARALLEL_CP_CONTEXTPARALLELATTENTION_H

#include "comm/Communicator.h"

#include <cstdint>
#include <vector>

namespace moert {

struct AttentionDims {
  int64_t Batch = 1;
  int64_t SeqLen = 0; ///< full sequence length (all CP ranks together)
  int64_t QHeads = 0; ///< query heads on this rank (after TP)
  int64_t KvHeads = 0;
  int64_t HeadDim = 0;  ///< of queries and keys
  int64_t VHeadDim = 0; ///< of values and outputs; 0: HeadDim
  int64_t vHeadDim() const { return VHeadDim > 0 ? VHeadDim : HeadDim; }
};

/// Absolute positions of this rank's LocalTokens tokens, in local order.
std::vector<int64_t> localPositions(int CpRank, int CpSize, int64_t SeqLen);

/// How the cp group exchanges what attention needs (Megatron's
/// cp_comm_type): the same results up to fp32 summation order, other
/// traffic.
enum class CpExchange {
  /// p2p: K/V blocks travel around the ring, each hop behind one block's
  /// compute (parallel/cp/Ring.h).
  Ring,
  /// allgather: every rank gathers every rank's K and V, attends its queries
  /// to them, and returns the gradients of each block by a reduce-scatter.
  AllGather,
  /// a2a (Ulysses): all-to-alls turn the sequence shards of Q, K and V into
  /// head shards, so that each rank attends over the whole sequence with
  /// QHeads / CP query and KvHeads / CP key-value heads, and the outputs
  /// (gradients) go back the same way. Both head counts must divide by CP
  /// (Transformer Engine's requirement, context_parallel.py).
  AllToAll,
};

/// Where the cp group has a device counterpart (Communicator::device()),
/// attention and its exchange run on the current backend over it where the
/// backend takes the shape (ComputeBackend::takesCpAttention), its blocks
/// never in host memory; else the all-gather still gathers and
/// reduce-scatters between the backend's arrays.
void contextParallelAttentionForward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                     const float *V, float *Out, float *Lse, CpExchange Exchange = CpExchange::Ring);

/// dQ, dK, dV are overwritten (not accumulated).
void contextParallelAttentionBackward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                      const float *V, const float *Out, const float *Lse, const float *DOut, float *DQ,
                                      float *DK, float *DV, CpExchange Exchange = CpExchange::Ring);

/// Whether these calls exchange over the cp group's device counterpart,
/// reading and writing the tensors only through the current backend: any
/// exchange where the backend takes its shape, or the all-gather (its gathers
/// and reduce-scatters between the backend's arrays). Attention's
/// gradients may then be held on it (HeldArray::Wide) as on a group of one.
bool exchangeOnBackend(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange);

/// Whether only the current backend's operations read and write the
/// log-sum-exp between the forward and the backward (a rank alone in its
/// group, or attention and its exchange wholly the backend's), so that the
/// caller may hold it there (HeldArray::Wide) from one to the other.
bool statisticsOnBackend(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange);

} // namespace moert

#endif
