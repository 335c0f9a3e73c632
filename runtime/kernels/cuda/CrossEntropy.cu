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

__device__ bool owns(int32_t Label, int64_t VocabStart, int64_t Vocab) {
  return Label >= 0 && Label >= VocabStart && Label < VocabStart + Vocab;
}

__global__ void __launch_bounds__(Threads)
    maxOverSlicesKernel(int64_t Slices, int64_t N, const float *Values, float *Max) {
  const int64_t I = int64_t(blockIdx.x) * Threads + threadIdx.x;
  if (I >= N)
    return;
  float M = Values[I];
  for (int64_t S = 1; S < Slices; ++S)
    M = fmaxf(M, Values[S * N + I]);
  Max[I] = M;
}

__global__ void __launch_bounds__(Threads) rowMaxKernel(int64_t Vocab, const float *Logits, float *RowMax) {
  const float *Row = Logits + int64_t(blockIdx.x) * Vocab;
  float M = -INFINITY;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads)
    M = fmaxf(M, Row[J]);
  M = blockReduce<true>(M);
  if (threadIdx.x == 0)
    RowMax[blockIdx.x] = M;
}

__global__ void __launch_bounds__(Threads) expSumKernel(int64_t Vocab, float *Logits, const float *RowMax,
                                                        const int32_t *Labels, int64_t VocabStart, float *Stats) {
  float *Row = Logits + int64_t(blockIdx.x) * Vocab;
  const int32_t Label = Labels[blockIdx.x];
  const float M = RowMax[blockIdx.x];
  // The target logit is read before any thread can overwrite the row with
  // its exponential.
  const float Target = owns(Label, VocabStart, Vocab) ? Row[Label - VocabStart] - M : 0.f;
  __syncthreads();
  float Sum = 0.f;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads) {
    float E = __expf(Row[J] - M);
    Row[J] = E;
    Sum += E;
  }
  Sum = blockReduce<false>(Sum);
  if (threadIdx.x == 0) {
    Stats[2 * int64_t(blockIdx.x)] = Sum;
    Stats[2 * int64_t(blockIdx.x) + 1] = Target;
  }
}

__global__ void __launch_bounds__(Threads)
    gradKernel(int64_t Vocab, const float *Exp, const float *Stats, const int32_t *Labels, int64_t VocabStart,
               float Scale, bf16 *DLogits) {
  const int64_t Off = int64_t(blockIdx.x) * Vocab;
  const int32_t Label = Labels[blockIdx.x];
  const float Inv = 1.f / Stats[2 * int64_t(blockIdx.x)];
  const int64_t Target = owns(Label, VocabStart, Vocab) ? Label - VocabStart : -1;
  for (int64_t J = threadIdx.x; J < Vocab; J += Threads) {
    float G = Label < 0 ? 0.f : Scale * (Exp[Off + J] * Inv - (J == Target));
    DLogits[Off + J] = __float2bfloat16_rn(G);
  }
}

} // namespace

void crossEntropyRowMax(int64_t N, int64_t Vocab, const float *Logits, float *RowMax, cudaStream_t Stream) {
  if (N == 0)
    return;
  rowMaxKernel<<<unsigned(N), Threads, 0, Stream>>>(Vocab, Logits, RowMax);
  MOERT_CUDA_CHECK_LAUNCH();
}

void crossEntropyExpSum(int64_t N, int64_t Vocab, float *Logits, const float *RowMax, const int32_t *Labels,
                        int64_t VocabStart, float *Stats, cudaStream_t Stream) {
  if (N == 0)
    return;
  expSumKernel<<<unsigned(N), Threads, 0, Stream>>>(Vocab, Logits, RowMax, Labels, VocabStart, Stats);
  MOERT_CUDA_CHECK_LAUNCH();
}

void crossEntropyGrad(int64_t N, int64_t Vocab, const float *Exp, const float *Stats, const int32_t *Labels,
                      int64_t VocabStart, float Scale, bf16 *DLogits, cudaStream_t Stream) {
  if (N == 0)
    return;
  gradKernel<<<unsigned(N), Threads, 0, Stream>>>(Vocab, Exp, Stats, Labels, VocabStart, Scale, DLogits);
  MOERT_CUDA_CHECK_LAUNCH();
}

void maxOverSlices(int64_t Slices, int64_t N, const float *Values, float *Max, cudaStream_t Stream) {
  if (N == 0)
    return;
  maxOverSlicesKernel<<<unsigned((N + Threads - 1) / Threads), Threads, 0, Stream>>>(Slices, N, Values, Max);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
