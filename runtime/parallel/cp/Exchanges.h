//===- parallel/cp/Exchanges.h - All-gather and all-to-all CP attention -*- C++ -*-===//
//
// The CpExchange variants besides the ring (ContextParallelAttention.h),
// behind its entry points: same tensors, same layouts, same semantics.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_CP_EXCHANGES_H
#define MOERT_PARALLEL_CP_EXCHANGES_H

#include "kernels/Backend.h"
#include "parallel/cp/AttentionBlock.h"

namespace moert {

/// The shape of one attention call over Cp (validates Dims and the chunking).
BlockShape blockShape(const Communicator &Cp, const AttentionDims &Dims);

/// Delta = rowsum(DOut * Out) per (batch, head, token), laid out like Lse,
/// for Tokens tokens of QHeads heads of VDim values, on Backend
/// (ComputeBackend::attentionDelta).
std::vector<float> attentionDelta(ComputeBackend &Backend, int64_t Batch, int64_t Tokens, int64_t QHeads, int64_t VDim,
                                  const float *Out, const float *DOut);

void allGatherAttentionForward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                               const float *V, float *Out, float *Lse);
void allGatherAttentionBackward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                                const float *V, const float *Lse, const float *Delta, const float *DOut, float *DQ,
                                float *DK, float *DV);

void allToAllAttentionForward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K, const float *V,
                              float *Out, float *Lse);
void allToAllAttentionBackward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                               const float *V, const float *Out, const float *Lse, const float *DOut, float *DQ,
                               float *DK, float *DV);

} // namespace moert

#endif
