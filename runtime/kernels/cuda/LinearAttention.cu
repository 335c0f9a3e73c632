//===- kernels/cuda/LinearAttention.cu ------------------------------------===//
#include "kernels/cuda/LinearAttention.h"

#include "kernels/cuda/CudaCheck.h"
#include "kernels/cuda/DeviceMath.cuh"

#include <algorithm>
#include <stdexcept>

namespace moert::cuda {

namespace {

constexpr int Threads = 256;

void checkConv(const CausalConv &C) {
  if (!C.valid())
    throw std::invalid_argument("causal convolution: whole sequences of a positive length and at least one tap");
}

unsigned gridFor(int64_t Count) { return unsigned(std::min<int64_t>((Count + Threads - 1) / Threads, 65535)); }

/// A thread per (token, channel), grid-stride: adjacent threads read
/// adjacent channels of a token.
__global__ void convSiluForwardKernel(CausalConv C, const bf16 *X, const bf16 *W, bf16 *Pre, float *Act) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < C.elements();
       I += int64_t(gridDim.x) * blockDim.x) {
    const int64_t T = I / C.Channels, Ch = I % C.Channels;
    float Sum = 0.f;
    for (int64_t J = 0; J < C.Width; ++J)
      if (C.reads(T, J))
        Sum += toF(W[Ch * C.Width + J]) * toF(X[(T - C.lag(J)) * C.Channels + Ch]);
    Pre[I] = toB(Sum);
    Act[I] = siluF(Sum);
  }
}

__global__ void siluSlopeKernel(int64_t Count, const bf16 *Pre, const float *DAct, float *DPre) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    DPre[I] = DAct[I] * siluSlopeF(toF(Pre[I]));
}

/// A thread per (token, channel): the taps of the outputs that read it.
__global__ void convInputGradKernel(CausalConv C, const bf16 *W, const float *DPre, bf16 *DX) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < C.elements();
       I += int64_t(gridDim.x) * blockDim.x) {
    const int64_t Src = I / C.Channels, Ch = I % C.Channels;
    float Sum = 0.f;
    for (int64_t J = 0; J < C.Width; ++J) {
      const int64_t T = Src + C.lag(J);
      if (T < C.Rows && C.reads(T, J))
        Sum += toF(W[Ch * C.Width + J]) * DPre[T * C.Channels + Ch];
    }
    DX[I] = toB(Sum);
  }
}

/// A thread per weight (channel, tap), the output tokens in order.
__global__ void convWeightGradKernel(CausalConv C, const bf16 *X, const float *DPre, float *DW) {
  const int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (I >= C.Channels * C.Width)
    return;
  const int64_t Ch = I / C.Width, J = I % C.Width;
  float Sum = 0.f;
  for (int64_t T = 0; T < C.Rows; ++T)
    if (C.reads(T, J))
      Sum += toF(X[(T - C.lag(J)) * C.Channels + Ch]) * DPre[T * C.Channels + Ch];
  DW[I] += Sum;
}

/// A warp per head.
__global__ void l2NormForwardKernel(int64_t Rows, int64_t Width, float Eps, const float *X, float *Y, float *Inv) {
  const int64_t Row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int Lane = threadIdx.x % 32;
  if (Row >= Rows) // the whole warp leaves together
    return;
  const float *In = X + Row * Width;
  float Sq = 0.f;
  for (int64_t J = Lane; J < Width; J += 32)
    Sq += In[J] * In[J];
  const float R = rsqrtf(warpSum(Sq) + Eps);
  for (int64_t J = Lane; J < Width; J += 32)
    Y[Row * Width + J] = In[J] * R;
  if (Lane == 0)
    Inv[Row] = R;
}

__global__ void l2NormBackwardKernel(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY,
                                     float *DX) {
  const int64_t Row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int Lane = threadIdx.x % 32;
  if (Row >= Rows)
    return;
  const int64_t Off = Row * Width;
  float Dot = 0.f;
  for (int64_t J = Lane; J < Width; J += 32)
    Dot += DY[Off + J] * Y[Off + J];
  Dot = warpSum(Dot);
  const float R = Inv[Row];
  for (int64_t J = Lane; J < Width; J += 32)
    DX[Off + J] = R * (DY[Off + J] - Y[Off + J] * Dot);
}

__device__ inline float softplusF(float X) { return X > 20.f ? X : log1pf(expf(X)); }

__global__ void gatesForwardKernel(DeltaGates Gates, const float *A, const float *B, float *RawA, float *G,
                                   float *Beta) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Gates.elements();
       I += int64_t(gridDim.x) * blockDim.x) {
    const int64_t H = I % Gates.Heads;
    const float U = A[I] + Gates.DtBias[H];
    RawA[I] = U;
    G[I] = -expf(Gates.ALog[H]) * softplusF(U);
    Beta[I] = 1.f / (1.f + expf(-B[I]));
  }
}

/// The decay's slope with respect to RawA.
__device__ inline float decaySlope(float ALog, float U) { return -expf(ALog) / (1.f + expf(-U)); }

__global__ void gatesBackwardKernel(DeltaGates Gates, const float *RawA, const float *Beta, const float *DG,
                                    const float *DBeta, bf16 *DA, bf16 *DB) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Gates.elements();
       I += int64_t(gridDim.x) * blockDim.x) {
    const int64_t H = I % Gates.Heads;
    DA[I] = toB(DG[I] * decaySlope(Gates.ALog[H], RawA[I]));
    DB[I] = toB(DBeta[I] * Beta[I] * (1.f - Beta[I]));
  }
}

/// A block per head: the terms of its tokens, strided over the block's
/// threads and summed in a fixed order.
__global__ void gatesParameterGradKernel(DeltaGates Gates, const float *RawA, const float *G, const float *DG,
                                         float *DALog, float *DDtBias) {
  const int64_t H = blockIdx.x;
  float SumA = 0.f, SumDt = 0.f;
  for (int64_t T = threadIdx.x; T < Gates.Tokens; T += blockDim.x) {
    const int64_t I = T * Gates.Heads + H;
    SumA += DG[I] * G[I];
    SumDt += DG[I] * decaySlope(Gates.ALog[H], RawA[I]);
  }
  SumA = blockSum(SumA);
  SumDt = blockSum(SumDt);
  if (threadIdx.x == 0) {
    DALog[H] += SumA;
    DDtBias[H] += SumDt;
  }
}

} // namespace

void causalConvSiluForward(const CausalConv &C, const bf16 *X, const bf16 *W, bf16 *Pre, float *Act,
                           cudaStream_t Stream) {
  checkConv(C);
  if (C.elements() == 0)
    return;
  convSiluForwardKernel<<<gridFor(C.elements()), Threads, 0, Stream>>>(C, X, W, Pre, Act);
  MOERT_CUDA_CHECK_LAUNCH();
}

void causalConvSiluBackward(const CausalConv &C, const bf16 *X, const bf16 *W, const bf16 *Pre, const float *DAct,
                            bf16 *DX, float *DW, float *Scratch, cudaStream_t Stream) {
  checkConv(C);
  if (C.elements() == 0)
    return;
  siluSlopeKernel<<<gridFor(C.elements()), Threads, 0, Stream>>>(C.elements(), Pre, DAct, Scratch);
  MOERT_CUDA_CHECK_LAUNCH();
  convInputGradKernel<<<gridFor(C.elements()), Threads, 0, Stream>>>(C, W, Scratch, DX);
  MOERT_CUDA_CHECK_LAUNCH();
  const int64_t Weights = C.Channels * C.Width;
  convWeightGradKernel<<<unsigned((Weights + 127) / 128), 128, 0, Stream>>>(C, X, Scratch, DW);
  MOERT_CUDA_CHECK_LAUNCH();
}

void l2NormHeadsForward(int64_t Rows, int64_t Width, float Eps, const float *X, float *Y, float *Inv,
                        cudaStream_t Stream) {
  if (Rows == 0)
    return;
  const int64_t Warps = Threads / 32;
  l2NormForwardKernel<<<unsigned((Rows + Warps - 1) / Warps), Threads, 0, Stream>>>(Rows, Width, Eps, X, Y, Inv);
  MOERT_CUDA_CHECK_LAUNCH();
}

void l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY, float *DX,
                         cudaStream_t Stream) {
  if (Rows == 0)
    return;
  const int64_t Warps = Threads / 32;
  l2NormBackwardKernel<<<unsigned((Rows + Warps - 1) / Warps), Threads, 0, Stream>>>(Rows, Width, Y, Inv, DY, DX);
  MOERT_CUDA_CHECK_LAUNCH();
}

void deltaGatesForward(const DeltaGates &Gates, const float *A, const float *B, float *RawA, float *G, float *Beta,
                       cudaStream_t Stream) {
  if (Gates.elements() == 0)
    return;
  gatesForwardKernel<<<gridFor(Gates.elements()), Threads, 0, Stream>>>(Gates, A, B, RawA, G, Beta);
  MOERT_CUDA_CHECK_LAUNCH();
}

void deltaGatesBackward(const DeltaGates &Gates, const float *RawA, const float *G, const float *Beta, const float *DG,
                        const float *DBeta, bf16 *DA, bf16 *DB, float *DALog, float *DDtBias, cudaStream_t Stream) {
  if (Gates.elements() == 0)
    return;
  gatesBackwardKernel<<<gridFor(Gates.elements()), Threads, 0, Stream>>>(Gates, RawA, Beta, DG, DBeta, DA, DB);
  MOERT_CUDA_CHECK_LAUNCH();
  gatesParameterGradKernel<<<unsigned(Gates.Heads), Threads, 0, Stream>>>(Gates, RawA, G, DG, DALog, DDtBias);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
