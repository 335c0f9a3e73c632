//===- kernels/cuda/CrossEntropy.h - Vocabulary cross-entropy (one rank) --===//
//
// The loss head of parallel/tp/VocabParallel.h for a tp group of one: logits
// [N, Vocab] fp32 (the output GEMM's fp32 result) are replaced by their
// softmax probabilities; Losses[n] = -log p(Labels[n]), 0 for a negative
// (ignored) label. The backward gives Scale * (p - onehot(label)) in bf16,
// the input of the output projection's backward GEMMs. One block per row;
// max and sum are fp32 block reductions.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CROSSENTROPY_H
#define MOERT_KERNELS_CUDA_CROSSENTROPY_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

void crossEntropyForward(int64_t N, int64_t Vocab, float *Logits, const int32_t *Labels, float *Losses,
                         cudaStream_t Stream);
void crossEntropyBackward(int64_t N, int64_t Vocab, const float *Probs, const int32_t *Labels, float Scale,
                          bf16 *DLogits, cudaStream_t Stream);

} // namespace moert::cuda

#endif
