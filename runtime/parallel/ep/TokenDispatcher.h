//===- parallel/ep/TokenDispatcher.h - Expert-parallel token all-to-all ----===//
//
// Moves routed token copies to the ranks that own their experts and back,
// over the plan's ep group (expert e lives on ep rank e / (Experts / EP), as
// local expert e % (Experts / EP)):
//
//   dispatch: permute the N x TopK copies by destination expert, all-to-all the
//             per-expert counts, then the token rows; the receiver gets its
//             rows grouped by local expert (expert-major; within one expert,
//             by source ep rank, then source token order, then k).
//   combine:  the inverse all-to-all, then unpermute and sum the TopK copies
//             of each token weighted by its routing weights.
//
// Backward runs the same exchanges in the opposite directions. Each call works
// on a DispatchState that the caller keeps per micro batch (several are in
// flight under a pipeline schedule).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_EP_TOKENDISPATCHER_H
#define MOERT_PARALLEL_EP_TOKENDISPATCHER_H

#include "comm/Communicator.h"
#include "kernels/host/Tensor.h"

#include <cstdint>
#include <vector>

namespace moert {

/// Routing bookkeeping of one dispatch, needed by combine and the backward.
struct DispatchState {
  int64_t Tokens = 0; ///< N
  int64_t TopK = 0;
  /// Rows this rank received for each of its local experts.
  std::vector<int64_t> TokensPerLocalExpert;
  // Implementation state (permutation, per-peer counts, the combined copies
  // that combineBackward needs); owned by TokenDispatcher.
  std::vector<int64_t> Permutation;
  std::vector<size_t> SendCounts, SendOffsets, RecvCounts, RecvOffsets;
  std::vector<int64_t> RecvExpertOrder;
  Tensor CombinedCopies;
};

class TokenDispatcher {
public:
  TokenDispatcher(Communicator &Ep, int64_t Experts, int64_t TopK, int64_t Hidden);

  int64_t localExperts() const;
  /// Global id of local expert L on this rank.
  int64_t globalExpert(int64_t L) const;

  /// X [N, Hidden]; Experts [N * TopK] global expert ids (token-major). Returns
  /// the rows for this rank's experts, [sum(TokensPerLocalExpert), Hidden].
  Tensor dispatch(const Tensor &X, const std::vector<int32_t> &Experts,
                  DispatchState &S);
  /// ExpertOut has dispatch()'s rows; Weights [N * TopK]. Returns Y [N, Hidden],
  /// Y[n] = sum_k Weights[n, k] * ExpertOut(copy n, k).
  Tensor combine(const Tensor &ExpertOut, const std::vector<float> &Weights,
                 DispatchState &S);
  /// Backward of combine: returns dExpertOut (rows as dispatch() returned) and
  /// writes dWeights [N * TopK].
  Tensor combineBackward(const Tensor &DY, const std::vector<float> &Weights,
                         DispatchState &S, std::vector<float> &DWeights);
  /// Backward of dispatch: returns dX [N, Hidden], summed over the TopK copies.
  Tensor dispatchBackward(const Tensor &DExpertIn, DispatchState &S);

private:
  Communicator &Ep;
  int64_t Experts, TopK, Hidden;
};

} // namespace moert

#endif
