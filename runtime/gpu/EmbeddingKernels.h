//===- gpu/EmbeddingKernels.h - Token embedding lookup on the GPU ---------===//
#ifndef MOERT_GPU_EMBEDDINGKERNELS_H
#define MOERT_GPU_EMBEDDINGKERNELS_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// Out[n] = Table[Tokens[n]] (bf16 rows of Hidden).
void embeddingForward(int64_t N, int64_t Hidden, const int32_t *Tokens, const bf16 *Table, bf16 *Out,
                      cudaStream_t Stream);
/// DTable[Tokens[n]] += DOut[n] in fp32 (atomic adds: rows of repeated tokens
/// are summed in an unspecified order).
void embeddingBackward(int64_t N, int64_t Hidden, const int32_t *Tokens, const bf16 *DOut, float *DTable,
                       cudaStream_t Stream);

} // namespace moert::cuda

#endif
