//===- kernels/cuda/LinearAttention.h - Gated DeltaNet's input side -------===//
//
// What Gated DeltaNet computes between its input projections and its
// recurrence (kernels/DeltaRule.h), with the semantics of model/ModelOps.h's
// loops of the same names: the causal convolution with silu, the per-head L2
// norms of the queries and keys, and the decay and write gates. Products and
// the convolution's pre-activation in bf16; what the recurrence reads and
// writes (the activations, the norms' factors, the gates, their gradients)
// in fp32, every sum in fp32. Sums over tokens (the weights' gradients) run
// in a fixed order, so results are deterministic.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_LINEARATTENTION_H
#define MOERT_KERNELS_CUDA_LINEARATTENTION_H

#include "kernels/LinearAttentionInput.h"
#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// Pre = conv(X) and Act = silu(Pre) (kernels/LinearAttentionInput.h); X and
/// W [Channels, Width] bf16.
void causalConvSiluForward(const CausalConv &C, const bf16 *X, const bf16 *W, bf16 *Pre, float *Act,
                           cudaStream_t Stream);
/// From DAct: DX written, DW += (a thread per weight, the tokens in order);
/// Scratch holds C.elements() floats (the pre-activation's gradient).
void causalConvSiluBackward(const CausalConv &C, const bf16 *X, const bf16 *W, const bf16 *Pre, const float *DAct,
                            bf16 *DX, float *DW, float *Scratch, cudaStream_t Stream);

/// Each of Rows heads of Width over its L2 norm, Y = X Inv, Inv = 1 /
/// sqrt(|X|^2 + Eps) (a warp per head); the backward DX = Inv (DY - Y (DY .
/// Y)).
void l2NormHeadsForward(int64_t Rows, int64_t Width, float Eps, const float *X, float *Y, float *Inv,
                        cudaStream_t Stream);
void l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY, float *DX,
                         cudaStream_t Stream);

/// The gates (DeltaGates, whose DtBias and ALog are device arrays here).
void deltaGatesForward(const DeltaGates &Gates, const float *A, const float *B, float *RawA, float *G, float *Beta,
                       cudaStream_t Stream);
/// DA and DB written; DALog and DDtBias added to (a block per head, its
/// tokens' terms summed in a fixed order).
void deltaGatesBackward(const DeltaGates &Gates, const float *RawA, const float *G, const float *Beta, const float *DG,
                        const float *DBeta, bf16 *DA, bf16 *DB, float *DALog, float *DDtBias, cudaStream_t Stream);

} // namespace moert::cuda

#endif
