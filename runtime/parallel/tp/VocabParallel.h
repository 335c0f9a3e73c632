//===- parallel/tp/VocabParallel.h - Vocabulary-split embedding and loss --===//
//
// The embedding table [Vocab, Hidden] and the output head [Hidden, Vocab] are
// split by vocabulary over tp: rank t owns ids [t * Vocab / TP, (t+1) *
// Vocab / TP) (VocabStart = t * Vocab / TP). Every tp rank sees all N local
// tokens and labels.
//
//  * Embedding: each rank looks up the tokens it owns (zero rows elsewhere)
//    and the tp sum is reduce-scattered straight to the sequence shards.
//  * Cross entropy: logits [N, Vocab / TP]; the row max, the softmax
//    denominator and the target logit are combined over tp, so no rank ever
//    holds a full row of logits.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_TP_VOCABPARALLEL_H
#define MOERT_PARALLEL_TP_VOCABPARALLEL_H

#include "comm/Communicator.h"
#include "kernels/host/Tensor.h"

#include <cstdint>
#include <vector>

namespace moert {

/// Returns this rank's sequence shard [N / TP, Hidden] of the embeddings of
/// Tokens [N]; Table is the local vocabulary slice [Vocab / TP, Hidden].
Tensor vocabParallelEmbeddingForward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &Table,
                                     int64_t VocabStart);
/// The same into XShard: on a group of one, into its own storage where it
/// has the shard's shape already (so that a hold on it keeps the rows on the
/// backend).
void vocabParallelEmbeddingForward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &Table,
                                   int64_t VocabStart, Tensor &XShard);
/// DTable += the rows of the gathered gradient for the tokens this rank owns.
void vocabParallelEmbeddingBackward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &DShard,
                                    Tensor &DTable, int64_t VocabStart);

/// Each of Values[0, N) replaced by its maximum over the tp group (through an
/// all-gather: the Communicator has no max-reduce, and N * TP floats are
/// cheap).
void maxOverGroup(Communicator &Tp, float *Values, int64_t N);

/// Logits [N, Vocab / TP] are replaced by the softmax probabilities of this
/// rank's vocabulary slice; Losses[n] = -log p(Labels[n]) (double, the same on
/// every tp rank; 0 for a negative label, which is ignored).
void vocabParallelCrossEntropyForward(Communicator &Tp, Tensor &Logits, const std::vector<int32_t> &Labels,
                                      int64_t VocabStart, std::vector<double> &Losses);
/// Gradient of Scale * sum_n Losses[n] with respect to this rank's logits,
/// from the probabilities forward left in Probs. Local, no communication.
Tensor vocabParallelCrossEntropyBackward(const Tensor &Probs, const std::vector<int32_t> &Labels, int64_t VocabStart,
                                         float Scale);

} // namespace moert

#endif
