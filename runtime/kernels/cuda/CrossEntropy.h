//===- kernels/cuda/CrossEntropy.h - Vocabulary-parallel cross entropy ----===//
//
// The loss head of parallel/tp/VocabParallel.h on the device, in the three
// phases its tensor-parallel reductions separate: logits [N, Vocab] fp32 (the
// output GEMM's fp32 result for this rank's vocabulary slice, ids from
// VocabStart) give their row maxima; with the group's maxima they are replaced
// by exp(logit - max), giving per row [sum of exponentials, target logit -
// max] (the target only on the rank that owns the label); with the group's
// sums the backward is Scale * (softmax - onehot(label)) in bf16, the input of
// the output projection's backward GEMMs (0 for a negative, ignored label).
// Between the phases the caller combines the statistics over the group (on a
// group of one there is nothing to combine), on the host or, over the group's
// device communicator, where they are (maxOverSlices). One block per row; max and sum
// are fp32 block reductions.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CROSSENTROPY_H
#define MOERT_KERNELS_CUDA_CROSSENTROPY_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// RowMax[n] = max over this slice of Logits[n].
void crossEntropyRowMax(int64_t N, int64_t Vocab, const float *Logits, float *RowMax, cudaStream_t Stream);
/// Logits[n] <- exp(Logits[n] - RowMax[n]) (RowMax: the group's);
/// Stats[2n] = their sum, Stats[2n + 1] = Logits[n][label] - RowMax[n] where
/// this slice owns the label, else 0.
void crossEntropyExpSum(int64_t N, int64_t Vocab, float *Logits, const float *RowMax, const int32_t *Labels,
                        int64_t VocabStart, float *Stats, cudaStream_t Stream);
/// Max[n] = the maximum of Values[s N + n] over Slices slices (the group's
/// row maxima, all-gathered on the device).
void maxOverSlices(int64_t Slices, int64_t N, const float *Values, float *Max, cudaStream_t Stream);
/// DLogits = Scale * (Exp / Stats[2n] - onehot(label)) (Stats: the group's
/// sums), 0 rows for negative labels.
void crossEntropyGrad(int64_t N, int64_t Vocab, const float *Exp, const float *Stats, const int32_t *Labels,
                      int64_t VocabStart, float Scale, bf16 *DLogits, cudaStream_t Stream);

} // namespace moert::cuda

#endif
