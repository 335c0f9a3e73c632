//===- kernels/cuda/AdamW.cu ----------------------------------------------===//
#include "kernels/cuda/AdamW.h"

#include <algorithm>
#include <cmath>

namespace moert::cuda {

namespace {

__global__ void adamWKernel(int64_t Count, AdamWStep C, float *Param, float *M, float *V, const float *Grad,
                            bf16 *ParamBf16) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    double G = double(Grad[I]) * C.ClipScale;
    double NewM = C.Beta1 * double(M[I]) + (1 - C.Beta1) * G;
    double NewV = C.Beta2 * double(V[I]) + (1 - C.Beta2) * G * G;
    M[I] = float(NewM);
    V[I] = float(NewV);
    double P = double(Param[I]) * (1 - C.Decay);
    P -= C.StepSize * NewM / (sqrt(NewV) / C.Bc2Sqrt + C.Eps);
    Param[I] = float(P);
    if (ParamBf16)
      ParamBf16[I] = __float2bfloat16_rn(float(P));
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

__global__ void sumPartialsKernel(const double *Partial, int Count, double *Result) {
  double S = 0;
  for (int I = 0; I < Count; ++I)
    S += Partial[I];
  *Result = S;
}

} // namespace

AdamWStep adamWStep(double Lr, double Beta1, double Beta2, double Eps, double WeightDecay, int64_t Step,
                    double ClipScale) {
  AdamWStep C;
  C.Beta1 = Beta1;
  C.Beta2 = Beta2;
  C.Eps = Eps;
  C.StepSize = Lr / (1 - std::pow(Beta1, double(Step)));
  C.Bc2Sqrt = std::sqrt(1 - std::pow(Beta2, double(Step)));
  C.ClipScale = ClipScale;
  C.Decay = Lr * WeightDecay;
  return C;
}

void adamWUpdate(int64_t Count, const AdamWStep &C, float *Param, float *M, float *V, const float *Grad,
                 bf16 *ParamBf16, cudaStream_t Stream) {
  if (Count == 0)
    return;
  unsigned Blocks = unsigned(std::min<int64_t>((Count + 255) / 256, 65535));
  adamWKernel<<<Blocks, 256, 0, Stream>>>(Count, C, Param, M, V, Grad, ParamBf16);
  MOERT_CUDA_CHECK_LAUNCH();
}

void sumSquares(int64_t Count, const float *X, double *Scratch, double *Result, cudaStream_t Stream) {
  sumSquaresKernel<<<SumBlocks, SumThreads, 0, Stream>>>(Count, X, Scratch);
  MOERT_CUDA_CHECK_LAUNCH();
  sumPartialsKernel<<<1, 1, 0, Stream>>>(Scratch, SumBlocks, Result);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
