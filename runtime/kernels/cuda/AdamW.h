//===- kernels/cuda/AdamW.h - The AdamW element update on the GPU ---------===//
//
// The update of parallel/dp/AdamW.h (PyTorch's order), per element, evaluated
// in double as on the host: g = grad * ClipScale; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p = p (1 - Decay) - StepSize m / (sqrt(v) /
// Bc2Sqrt + Eps), with StepSize = lr / (1 - b1^t), Bc2Sqrt = sqrt(1 - b2^t),
// Decay = lr * wd or 0. Param (the fp32 master), M and V are updated in
// place; ParamBf16, when not null, receives the bf16 compute copy. The
// gradient reduction and the global norm stay with the DP code (over the
// DeviceCommunicator); this is the local step after them.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_ADAMW_H
#define MOERT_KERNELS_CUDA_ADAMW_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

struct AdamWStep {
  double Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8;
  double StepSize = 0; ///< lr / (1 - beta1^t)
  double Bc2Sqrt = 1;  ///< sqrt(1 - beta2^t)
  double ClipScale = 1;
  double Decay = 0; ///< lr * weight decay, or 0 for exempt parameters
};

/// The constants of step Step (1 for the first) from the options.
AdamWStep adamWStep(double Lr, double Beta1, double Beta2, double Eps, double WeightDecay, int64_t Step,
                    double ClipScale);

void adamWUpdate(int64_t Count, const AdamWStep &C, float *Param, float *M, float *V, const float *Grad,
                 bf16 *ParamBf16, cudaStream_t Stream);

/// Device doubles sumSquares needs as scratch.
constexpr int64_t SumSquaresScratch = 256;
/// Sum of squares of X in double (for the global gradient norm), written to
/// *Result on the device: a two-level reduction in a fixed order, so the
/// result is deterministic. Scratch holds SumSquaresScratch doubles.
void sumSquares(int64_t Count, const float *X, double *Scratch, double *Result, cudaStream_t Stream);

} // namespace moert::cuda

#endif
