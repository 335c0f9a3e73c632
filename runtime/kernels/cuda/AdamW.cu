//===- kernels/cuda/AdamW.cu ----------------------------------------------===//
#include "kernels/cuda/AdamW.h"

#include <algorithm>

namespace moert::cuda {

namespace {

/// The host's expression (kernels/Backend.cpp updateRange), one rounding
/// per operation: the intrinsics keep nvcc from contracting into FMAs.
__global__ void adamWKernel(int64_t Count, AdamWConstants C, float *Param, float *M, float *V, const float *Grad,
                            bf16 *ParamBf16) {
  const float KeepM = __fsub_rn(1.0f, C.Beta1), KeepV = __fsub_rn(1.0f, C.Beta2), Shrink = __fsub_rn(1.0f, C.Decay);
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    float G = __fmul_rn(Grad[I], C.Scale);
    float NewM = __fadd_rn(__fmul_rn(C.Beta1, M[I]), __fmul_rn(KeepM, G));
    float NewV = __fadd_rn(__fmul_rn(C.Beta2, V[I]), __fmul_rn(__fmul_rn(KeepV, G), G));
    M[I] = NewM;
    V[I] = NewV;
    float Denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(NewV), C.Bc2Sqrt), C.Eps);
    float P = __fsub_rn(__fmul_rn(Param[I], Shrink), __fdiv_rn(__fmul_rn(C.StepSize, NewM), Denominator));
    Param[I] = P;
    if (ParamBf16)
      ParamBf16[I] = __float2bfloat16_rn(P);
  }
}

constexpr int SumThreads = 256, SumBlocks = int(SumSquaresScratch);

/// Each block sums a fixed strided share into Partial[block]; a second
/// one-block launch adds the partials in order: deterministic for a given
/// Count.
__global__ void sumSquaresKernel(int64_t Count, const float *X, double *Partial) {
  __shared__ double Shared[SumThreads];
  double S = 0;
  for (int64_t I = int64_t(blockIdx.x) * SumThreads + threadIdx.x; I < Count; I += int64_t(gridDim.x) * SumThreads)
    S += double(X[I]) * double(X[I]);
  Shared[threadIdx.x] = S;
  __syncthreads();
  for (int Half = SumThreads / 2; Half > 0; Half /= 2) {
    if (int(threadIdx.x) < Half)
      Shared[threadIdx.x] += Shared[threadIdx.x + Half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    Partial[blockIdx.x] = Shared[0];
}

__global__ void sumPartialsKernel(const double *Partial, int Count, double *Result, bool Accumulate) {
  double S = 0;
  for (int I = 0; I < Count; ++I)
    S += Partial[I];
  *Result = Accumulate ? *Result + S : S;
}

} // namespace

void adamWUpdate(int64_t Count, const AdamWConstants &C, float *Param, float *M, float *V, const float *Grad,
                 bf16 *ParamBf16, cudaStream_t Stream) {
  if (Count == 0)
    return;
  unsigned Blocks = unsigned(std::min<int64_t>((Count + 255) / 256, 65535));
  adamWKernel<<<Blocks, 256, 0, Stream>>>(Count, C, Param, M, V, Grad, ParamBf16);
  MOERT_CUDA_CHECK_LAUNCH();
}

void sumSquares(int64_t Count, const float *X, double *Scratch, double *Result, bool Accumulate, cudaStream_t Stream) {
  // A block per 256 elements up to SumBlocks: a norm weight's few elements
  // take one block, not SumBlocks mostly idle ones.
  const int Blocks = int(std::clamp<int64_t>((Count + SumThreads - 1) / SumThreads, 1, SumBlocks));
  sumSquaresKernel<<<Blocks, SumThreads, 0, Stream>>>(Count, X, Scratch);
  MOERT_CUDA_CHECK_LAUNCH();
  sumPartialsKernel<<<1, 1, 0, Stream>>>(Scratch, Blocks, Result, Accumulate);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
