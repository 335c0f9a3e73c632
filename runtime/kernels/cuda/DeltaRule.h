//===- kernels/cuda/DeltaRule.h - Gated DeltaNet's recurrence on GPUs -----===//
//
// model/GatedDeltaRule.h's recurrence (the same operations, in fp32) over
// every value head of Sequences whole sequences at once:
//
//   S_t = exp(g_t) S_{t-1} + k_t u_t^T,  u_t = beta_t (v_t - (exp(g_t) S_{t-1})^T k_t)
//   o_t = S_t^T q_t / sqrt(HeadDim)
//
// Layouts (row-major, fp32): Q, K, DQ, DK [Sequences * SeqLen, KeyHeads *
// HeadDim]; V, O, DO, DV [.., ValueHeads * HeadDim]; G, Beta, DG, DBeta [..,
// ValueHeads]. Value head h reads key head h / (ValueHeads / KeyHeads).
//
// One block per (sequence, value head); each column of the state is held in
// registers by one thread (heads up to 32 wide) or by HeadDim / 32 adjacent
// threads of 32 rows each, which sum a column's products by shuffles: a
// column's recurrence needs nothing of the others, so the forward runs
// without a barrier, and the backward meets only to sum what several columns
// give one output (dq, dk, dbeta, dg: warp shuffles, then the warps in
// order, so the results are deterministic). The backward recomputes the
// states from checkpoints every ChunkTokens tokens, as the host's does, in a
// scratch buffer of deltaRuleScratch() floats; gradients of value heads that
// share a key head are summed in head order. Tokens run one after another:
// this is the recurrent form, not fla's chunked one on tensor cores.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_DELTARULE_H
#define MOERT_KERNELS_CUDA_DELTARULE_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>
#include <vector>

namespace moert::cuda {

struct DeltaRuleShape {
  int64_t Sequences = 0, SeqLen = 0, KeyHeads = 0, ValueHeads = 0, HeadDim = 0;
};

/// The head widths the kernels are built for.
const std::vector<int64_t> &deltaRuleHeadDims();
bool deltaRuleKernelTakes(const DeltaRuleShape &S);

/// O (overwritten). Throws std::invalid_argument for a shape the kernels do
/// not take.
void gatedDeltaRuleForward(const DeltaRuleShape &S, const float *Q, const float *K, const float *V, const float *G,
                           const float *Beta, float *O, cudaStream_t Stream);

/// Floats of scratch the backward needs.
int64_t deltaRuleScratch(const DeltaRuleShape &S);

/// DQ, DK, DV, DG, DBeta (overwritten) from DO.
void gatedDeltaRuleBackward(const DeltaRuleShape &S, const float *Q, const float *K, const float *V, const float *G,
                            const float *Beta, const float *DO, float *DQ, float *DK, float *DV, float *DG,
                            float *DBeta, float *Scratch, cudaStream_t Stream);

} // namespace moert::cuda

#endif
