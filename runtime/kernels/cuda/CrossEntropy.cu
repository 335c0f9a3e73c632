//===- kernels/cuda/CrossEntropy.cu ---------------------------------------===//
#include "kernels/cuda/CrossEntropy.h"

namespace moert::cuda {

namespace {

constexpr int Threads = 256;

template <bool IsMax> __device__ float blockReduce(float V) {
  __shared__ float Partial[Threads / 32];
  for (int Off = 16; Off > 0; Off >>= 1) {
    float O = __shfl_xor_sync(0xffffffffu, V, Off);
    V = IsMax ? fmaxf(V, O) : V + O;
  }
  __syncthreads(); // a previous reduction may still read Partial
  if (threadIdx.x % 32 == 0)
    Partial[threadIdx.x / 32] = V;
  __syncthreads();
  V = Partial[0];
  for (int I = 1; I < Threads / 32; ++I)
    V = IsMax ? fmaxf(V, Partial[I]) : V + Partial[I];
  return V;
}

__global__ void __launch_bounds__(Threads)
    forwardKernel(int64_t Vocab, float *Logits, const int32_t *Labels, float *Losses) {
  float *Row = Logits + int64_t(blockIdx.x) * Vocab;
  const int32_t Label = Labels[blockIdx.x];
  // The target logit is read before any thread can overwrite the row: the
  // exponentials below are written after the max reduction's barriers, which
  // a read placed after the reduction would race with.
  const float TargetLogit = Label >= 0 ? Row[Label] : 0.f;
  float M = -INFINITY;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads)
    M = fmaxf(M, Row[J]);
  M = blockReduce<true>(M);
  const float Target = TargetLogit - M;
  float Sum = 0.f;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads) {
    float E = __expf(Row[J] - M);
    Row[J] = E;
    Sum += E;
  }
  Sum = blockReduce<false>(Sum);
  const float Inv = 1.f / Sum;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads)
    Row[J] *= Inv;
  if (threadIdx.x == 0)
    Losses[blockIdx.x] = Label >= 0 ? logf(Sum) - Target : 0.f;
}

__global__ void __launch_bounds__(Threads)
    backwardKernel(int64_t Vocab, const float *Probs, const int32_t *Labels, float Scale, bf16 *DLogits) {
  const int64_t Off = int64_t(blockIdx.x) * Vocab;
  const int32_t Label = Labels[blockIdx.x];
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads) {
    float G = Label < 0 ? 0.f : Scale * (Probs[Off + J] - (J == Label));
    DLogits[Off + J] = __float2bfloat16_rn(G);
  }
}

} // namespace

void crossEntropyForward(int64_t N, int64_t Vocab, float *Logits, const int32_t *Labels, float *Losses,
                         cudaStream_t Stream) {
  if (N == 0)
    return;
  forwardKernel<<<unsigned(N), Threads, 0, Stream>>>(Vocab, Logits, Labels, Losses);
  MOERT_CUDA_CHECK_LAUNCH();
}

void crossEntropyBackward(int64_t N, int64_t Vocab, const float *Probs, const int32_t *Labels, float Scale,
                          bf16 *DLogits, cudaStream_t Stream) {
  if (N == 0)
    return;
  backwardKernel<<<unsigned(N), Threads, 0, Stream>>>(Vocab, Probs, Labels, Scale, DLogits);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
