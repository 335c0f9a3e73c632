//===- kernels/cuda/Attention.h - Flash-style causal attention (BF16) -----===//
//
// Tiled attention with an online softmax: the score matrix never exists in
// memory. The semantics are those of parallel/cp/ContextParallelAttention.h
// and AttentionBlock.h, generalised to explicit absolute positions so that
// one kernel serves plain causal attention and every step of a CP ring:
//
//   S = Scale * Q K^T per (batch, query head); key j is visible to query i iff
//   KPos[j] <= QPos[i]; query head h reads KV head h / (QHeads / KvHeads).
//
// Layouts (row-major): Q [Batch, QTokens, QHeads, HeadDim] bf16; K [Batch,
// KTokens, KvHeads, HeadDim] bf16; V [Batch, KTokens, KvHeads, VHeadDim]
// bf16; QPos [QTokens], KPos [KTokens] int32 (the same for every batch row);
// Out [Batch, QTokens, QHeads, VHeadDim] fp32 (the merge buffer of a ring,
// kept in fp32 so that merging blocks does not round); Lse, Delta [Batch,
// QHeads, QTokens] fp32. Values may be narrower than keys, as in multi-head
// latent attention.
//
// attentionForwardBlock merges one K/V block into (Out, Lse) by the
// log-sum-exp rule, exactly like attendSpanForward: Out stays normalised over
// every key merged so far, Lse is the log of that denominator, -inf before
// the first visible key; rows that see no key of this block are untouched.
// The backward recomputes probabilities from the FINAL Lse and Delta =
// rowsum(DOut * Out), and accumulates (+=) into fp32 DQ, DK, DV. It runs as
// two kernels (one owning dK/dV per key tile, one owning dQ per query tile),
// so no atomics are used and results are deterministic.
//
// The widths (HeadDim, VHeadDim) must be one of attentionKernelWidths():
// 32, 64, 72, 128 or 256 both, or 192 and 128 (DeepSeek-V3's and Kimi K2's
// latent attention); std::invalid_argument otherwise. The
// kernels use CUDA cores with fp32 accumulation, not tensor cores: 6-10
// TFLOP/s on an H200, 40-80x slower than cuDNN's fused attention
// (CudnnAttention.h, which whole-sequence attention uses where cuDNN is built
// in); they remain for the CP ring's masked blocks and the CUDA emulation.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_ATTENTION_H
#define MOERT_KERNELS_CUDA_ATTENTION_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>
#include <vector>

namespace moert::cuda {

struct DeviceAttentionShape {
  int64_t Batch = 1;
  int64_t QTokens = 0, KTokens = 0;
  int64_t QHeads = 0, KvHeads = 0;
  int64_t HeadDim = 0;  ///< of queries and keys
  float Scale = 1.0f;   ///< usually 1 / sqrt(HeadDim)
  int64_t VHeadDim = 0; ///< of values and outputs; 0: HeadDim
  int64_t vHeadDim() const { return VHeadDim > 0 ? VHeadDim : HeadDim; }
};

/// The (query-key, value) head widths the kernels are built for.
struct AttentionWidths {
  int64_t HeadDim, VHeadDim;
};
const std::vector<AttentionWidths> &attentionKernelWidths();
bool attentionKernelTakesWidths(int64_t HeadDim, int64_t VHeadDim);

/// Out = 0, Lse = -inf: the state before the first block is merged.
void attentionInit(const DeviceAttentionShape &S, float *Out, float *Lse, cudaStream_t Stream);

void attentionForwardBlock(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K,
                           const bf16 *V, const int32_t *KPos, float *Out, float *Lse, cudaStream_t Stream);

/// Delta[b, h, i] = sum_d DOut[b, i, h, d] * Out[b, i, h, d] (d < VHeadDim).
void attentionDelta(const DeviceAttentionShape &S, const bf16 *DOut, const float *Out, float *Delta,
                    cudaStream_t Stream);

/// Accumulates this K/V block's share of the gradients: DQ [like Q], DK
/// [like K], DV [like V] fp32, +=.
void attentionBackwardBlock(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K,
                            const bf16 *V, const int32_t *KPos, const float *Lse, const float *Delta, const bf16 *DOut,
                            float *DQ, float *DK, float *DV, cudaStream_t Stream);

/// Whole causal attention on one rank (QTokens == KTokens, shared positions):
/// init, one forward block. Positions are the tokens' absolute positions.
void causalAttentionForward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V,
                            const int32_t *Positions, float *Out, float *Lse, cudaStream_t Stream);
/// Its backward: DQ, DK, DV are overwritten; Delta is scratch [like Lse].
void causalAttentionBackward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V,
                             const int32_t *Positions, const float *Out, const float *Lse, const bf16 *DOut,
                             float *Delta, float *DQ, float *DK, float *DV, cudaStream_t Stream);

/// Floating-point operations of a causal forward over full sequences
/// (2 * B * H * visible pairs * (HeadDim + VHeadDim); the backward is 2.5x: two recomputes of S
/// and dP plus dQ, dK, dV), for the benchmarks.
double causalAttentionFlops(const DeviceAttentionShape &S);

} // namespace moert::cuda

#endif
