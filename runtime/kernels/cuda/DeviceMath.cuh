//===- kernels/cuda/DeviceMath.cuh - Device helpers the kernels share ------===//
//
// Conversions between bf16 storage and fp32 arithmetic, the activations
// written once for every kernel that applies or differentiates them, and
// the sums over a warp and a block, in a fixed order (the same bits on every
// run).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_DEVICEMATH_CUH
#define MOERT_KERNELS_CUDA_DEVICEMATH_CUH

#include "kernels/cuda/DeviceBuffer.h"

namespace moert::cuda {

__device__ inline float toF(bf16 X) { return __bfloat162float(X); }
__device__ inline float toF(float X) { return X; }
__device__ inline bf16 toB(float X) { return __float2bfloat16_rn(X); }

__device__ inline float sigmoidF(float X) { return 1.f / (1.f + __expf(-X)); }
__device__ inline float siluF(float X) { return X * sigmoidF(X); }
__device__ inline float siluSlopeF(float X) {
  const float S = sigmoidF(X);
  return S * (1.f + X * (1.f - S));
}

/// Sum over the warp; every lane gets the result.
__device__ inline float warpSum(float V) {
  for (int Off = 16; Off > 0; Off >>= 1)
    V += __shfl_xor_sync(0xffffffffu, V, Off);
  return V;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the result.
__device__ inline float blockSum(float V) {
  __shared__ float Partial[32];
  V = warpSum(V);
  const int Warp = threadIdx.x / 32, Lane = threadIdx.x % 32;
  __syncthreads(); // Partial may still be read by a previous call
  if (Lane == 0)
    Partial[Warp] = V;
  __syncthreads();
  const int Warps = blockDim.x / 32;
  return warpSum(Lane < Warps ? Partial[Lane] : 0.f);
}

} // namespace moert::cuda

#endif
