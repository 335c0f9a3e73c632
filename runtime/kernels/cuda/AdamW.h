//===- kernels/cuda/AdamW.h - The AdamW element update on the GPU ---------===//
//
// The update of parallel/dp/AdamW.h (PyTorch's order) per element, in fp32
// with the host's operations in the host's order, each rounded once (no
// FMA contraction): g = grad * Scale; m = b1 m + (1 - b1) g; v = b2 v +
// (1 - b2) g g; p = p (1 - Decay) - StepSize m / (sqrt(v) / Bc2Sqrt + Eps),
// so that a step gives the host backend's bits (ComputeBackend::adamW).
// Param (the fp32 master), M and V are updated in place; ParamBf16, when not
// null, receives the bf16 compute copy. The gradient reduction stays with
// the DP code; this is the local step after it, and sumSquares is the
// global norm's local share.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_ADAMW_H
#define MOERT_KERNELS_CUDA_ADAMW_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// The scalars of one step (kernels/Backend.h AdamWArgs).
struct AdamWConstants {
  float Beta1 = 0.9f, Beta2 = 0.999f, Eps = 1e-8f;
  float StepSize = 0; ///< lr / (1 - beta1^t)
  float Bc2Sqrt = 1;  ///< sqrt(1 - beta2^t)
  float Scale = 1;    ///< the gradient clipping factor
  float Decay = 0;    ///< lr * weight decay, or 0 for exempt parameters
};

void adamWUpdate(int64_t Count, const AdamWConstants &C, float *Param, float *M, float *V, const float *Grad,
                 bf16 *ParamBf16, cudaStream_t Stream);

/// Device doubles sumSquares needs as scratch.
constexpr int64_t SumSquaresScratch = 256;
/// Sum of squares of X in double (for the global gradient norm), written to
/// (or, with Accumulate, added to) *Result on the device: a two-level
/// reduction in a fixed order, so the result is deterministic. Scratch holds
/// SumSquaresScratch doubles.
void sumSquares(int64_t Count, const float *X, double *Scratch, double *Result, bool Accumulate, cudaStream_t Stream);

} // namespace moert::cuda

#endif
