//===- gpu/EmbeddingKernels.cu --------------------------------------------===//
#include "gpu/EmbeddingKernels.h"

namespace moert::cuda {

namespace {

__global__ void embeddingForwardKernel(int64_t Hidden, const int32_t *Tokens, const bf16 *Table, bf16 *Out) {
  const bf16 *Row = Table + int64_t(Tokens[blockIdx.x]) * Hidden;
  for (int64_t C = threadIdx.x; C < Hidden; C += blockDim.x)
    Out[int64_t(blockIdx.x) * Hidden + C] = Row[C];
}

__global__ void embeddingBackwardKernel(int64_t Hidden, const int32_t *Tokens, const bf16 *DOut, float *DTable) {
  float *Row = DTable + int64_t(Tokens[blockIdx.x]) * Hidden;
  for (int64_t C = threadIdx.x; C < Hidden; C += blockDim.x)
    atomicAdd(Row + C, __bfloat162float(DOut[int64_t(blockIdx.x) * Hidden + C]));
}

} // namespace

void embeddingForward(int64_t N, int64_t Hidden, const int32_t *Tokens, const bf16 *Table, bf16 *Out,
                      cudaStream_t Stream) {
  if (N == 0)
    return;
  embeddingForwardKernel<<<unsigned(N), 128, 0, Stream>>>(Hidden, Tokens, Table, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

void embeddingBackward(int64_t N, int64_t Hidden, const int32_t *Tokens, const bf16 *DOut, float *DTable,
                       cudaStream_t Stream) {
  if (N == 0)
    return;
  embeddingBackwardKernel<<<unsigned(N), 128, 0, Stream>>>(Hidden, Tokens, DOut, DTable);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
