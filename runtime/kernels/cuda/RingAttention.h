//===- kernels/cuda/RingAttention.h - Context-parallel attention on GPUs --===//
//
// parallel/cp/ContextParallelAttention.h on the CUDA backend: the same
// load-balanced chunking (localPositions), the same ring schedule
// (parallel/cp/Ring.h: K/V blocks travel to the next rank each step; in the
// backward their fp32 gradients travel with them and take one more hop home),
// the same results up to bf16 inputs and fp32 summation order. On NCCL the
// hop in flight overlaps the attention kernels; it is waited on (stream
// order) before the swap.
//
// Q [Batch, LocalTokens, QHeads, HeadDim] bf16, K [Batch, LocalTokens,
// KvHeads, HeadDim] and V [.., KvHeads, VHeadDim] bf16 (device); Out fp32
// [.., QHeads, VHeadDim]; Lse [Batch, QHeads, LocalTokens] fp32; DOut bf16
// like Out; DQ, DK, DV fp32 like Q, K, V (overwritten). Cp is any
// DeviceCommunicator (NCCL, or host-staged for several ranks on one GPU).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_RINGATTENTION_H
#define MOERT_KERNELS_CUDA_RINGATTENTION_H

#include "comm/nccl/NcclComm.h"
#include "kernels/cuda/Attention.h"
#include "parallel/cp/ContextParallelAttention.h"

#include <cstdint>
#include <vector>

namespace moert::cuda {

/// Every rank's token positions under the load-balanced chunking, rank after
/// rank ([Cp.size(), SeqLen / Cp.size()]), which the blocks' masks read. The
/// functions below take them on the device (Positions), or upload them
/// themselves where Positions is null (a copy the host waits for).
std::vector<int32_t> ringPositions(int Size, int64_t SeqLen);

void ringAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                          const bf16 *V, float *Out, float *Lse, cudaStream_t Stream,
                          const int32_t *Positions = nullptr);

void ringAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                           const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ, float *DK,
                           float *DV, cudaStream_t Stream, const int32_t *Positions = nullptr);

/// The same attention with the all-gather exchange (CpExchange::AllGather,
/// parallel/cp/Exchanges.h): every rank's K and V gathered once, the blocks
/// attended in the ring's order, every block's dK and dV summed and
/// reduce-scattered back to their owners.
void gatheredAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                              const bf16 *V, float *Out, float *Lse, cudaStream_t Stream,
                              const int32_t *Positions = nullptr);
void gatheredAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                               const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ,
                               float *DK, float *DV, cudaStream_t Stream, const int32_t *Positions = nullptr);

/// The same attention with the all-to-all exchange (CpExchange::AllToAll,
/// Ulysses): all-to-alls turn the sequence shards of Q, K and V into head
/// shards (QHeads / CP and KvHeads / CP heads of the whole sequence, the
/// ranks' tokens in rank order), one block attends over the whole sequence
/// by the tokens' positions, and the outputs (gradients) go back the same
/// way. Both head counts must divide by CP.
void headShardedAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                                 const bf16 *V, float *Out, float *Lse, cudaStream_t Stream,
                                 const int32_t *Positions = nullptr);
void headShardedAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                                  const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ,
                                  float *DK, float *DV, cudaStream_t Stream, const int32_t *Positions = nullptr);

} // namespace moert::cuda

#endif
