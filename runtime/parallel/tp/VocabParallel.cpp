//===- parallel/tp/VocabParallel.cpp --------------------------------------===//
#include "parallel/tp/VocabParallel.h"

#include "kernels/Backend.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace moert {

namespace {
bool owns(int32_t Id, int64_t Start, int64_t Count) { return Id >= Start && Id < Start + Count; }
} // namespace

Tensor vocabParallelEmbeddingForward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &Table,
                                     int64_t VocabStart) {
  Tensor X;
  vocabParallelEmbeddingForward(Tp, Tokens, Table, VocabStart, X);
  return X;
}

void vocabParallelEmbeddingForward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &Table,
                                   int64_t VocabStart, Tensor &XShard) {
  const EmbeddingArgs A{int64_t(Tokens.size()), Table.cols(), VocabStart, Table.rows(), Tokens.data()};
  const bool InPlace = Tp.size() == 1 && XShard.shape() == std::vector<int64_t>{A.Tokens, A.Hidden};
  if (InPlace)
    return currentBackend().embeddingForward(A, Table.data(), XShard.data());
  PartialSums Partial({A.Tokens, A.Hidden});
  currentBackend().embeddingForward(A, Table.data(), Partial.get().data());
  reduceScatterSequence(Tp, Partial.get(), XShard);
}

void vocabParallelEmbeddingBackward(Communicator &Tp, const std::vector<int32_t> &Tokens, const Tensor &DShard,
                                    Tensor &DTable, int64_t VocabStart) {
  WholeSequence D(Tp, DShard, ReadBy::AnyOperation); // the table's gradient sums it in fp32
  const EmbeddingArgs A{int64_t(Tokens.size()), DTable.cols(), VocabStart, DTable.rows(), Tokens.data()};
  currentBackend().embeddingBackward(A, D.get().data(), DTable.data());
}

void maxOverGroup(Communicator &Tp, float *Values, int64_t N) {
  const int64_t P = Tp.size();
  if (P == 1)
    return;
  std::vector<float> All(size_t(N * P));
  Tp.allGather(Values, All.data(), size_t(N));
  for (int64_t I = 0; I < N; ++I)
    for (int64_t R = 0; R < P; ++R)
      Values[I] = std::max(Values[I], All[size_t(R * N + I)]);
}

void vocabParallelCrossEntropyForward(Communicator &Tp, Tensor &Logits, const std::vector<int32_t> &Labels,
                                      int64_t VocabStart, std::vector<double> &Losses) {
  int64_t N = Logits.rows(), V = Logits.cols();
  std::vector<float> Max(N);
  for (int64_t I = 0; I < N; ++I) {
    const float *Row = Logits.row(I);
    Max[I] = *std::max_element(Row, Row + V);
  }
  maxOverGroup(Tp, Max.data(), N);
  // Per row: [sum of exp, target logit] summed over tp.
  std::vector<float> Stats(2 * N, 0.0f);
  for (int64_t I = 0; I < N; ++I) {
    const float M = Max[I];
    float *Row = Logits.row(I);
    if (Labels[I] >= 0 && owns(Labels[I], VocabStart, V))
      Stats[2 * I + 1] = Row[Labels[I] - VocabStart] - M;
    double Sum = 0;
    for (int64_t J = 0; J < V; ++J) {
      Row[J] = std::exp(Row[J] - M);
      Sum += Row[J];
    }
    Stats[2 * I] = float(Sum);
  }
  Tp.allReduceSum(Stats.data(), Stats.size());
  Losses.assign(N, 0.0);
  for (int64_t I = 0; I < N; ++I) {
    float Inv = 1.0f / Stats[2 * I];
    float *Row = Logits.row(I);
    for (int64_t J = 0; J < V; ++J)
      Row[J] *= Inv;
    if (Labels[I] >= 0)
      Losses[I] = std::log(double(Stats[2 * I])) - double(Stats[2 * I + 1]);
  }
}

Tensor vocabParallelCrossEntropyBackward(const Tensor &Probs, const std::vector<int32_t> &Labels, int64_t VocabStart,
                                         float Scale) {
  int64_t N = Probs.rows(), V = Probs.cols();
  Tensor D({N, V});
  for (int64_t I = 0; I < N; ++I) {
    if (Labels[I] < 0)
      continue;
    const float *P = Probs.row(I);
    float *Row = D.row(I);
    for (int64_t J = 0; J < V; ++J)
      Row[J] = Scale * P[J];
    if (owns(Labels[I], VocabStart, V))
      Row[Labels[I] - VocabStart] -= Scale;
  }
  return D;
}

} // namespace moert
