//===- parallel/ep/TokenDispatcher.h - Expert-parallel token all-to-all ---===//
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
//             of each token weighted by its routing weights, k ascending.
//
// Why this order: when the ep group's ranks hold consecutive slices of one
// batch, an expert sees exactly the rows (and in the same order) that a single
// rank would give it for the whole batch, and every per-token sum runs in the
// same order; so any layout reproduces one rank's numbers, not just closely.
//
// The moves within a rank (permute, unpermute and their backwards) are the
// ComputeBackend's (kernels/Backend.h). dispatch() and the others run them on
// the host, where their exchanges send from. Or the caller runs them on its
// own backend, from route()'s bookkeeping, with the exchanges between them
// (toExperts, toSenders) on that backend too, over the ep group's device
// counterpart (Communicator::device()) where it has one (model/MoeBlock.cpp does, so that the rows stay
// on a GPU); a rank alone in its ep group has nothing to exchange.
//
// Backward runs the same exchanges in the opposite directions. Each call works
// on a DispatchState that the caller keeps per micro batch (several are in
// flight under a pipeline schedule). A group of one (createSelfCommunicator)
// runs the same code with the exchanges reduced to copies.
//
// Every rank of the ep group must call dispatch, combine, combineBackward and
// dispatchBackward the same number of times in the same order (they are
// collectives), even a rank with no tokens or whose experts receive nothing.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_EP_TOKENDISPATCHER_H
#define MOERT_PARALLEL_EP_TOKENDISPATCHER_H

#include "comm/Communicator.h"
#include "kernels/Backend.h"
#include "kernels/host/Tensor.h"

#include <cstdint>
#include <vector>

namespace moert {

/// Routing bookkeeping of one dispatch, needed by combine and the backward.
/// A copy is one (token n, slot k) pair, numbered n * TopK + k.
struct DispatchState {
  int64_t Tokens = 0; ///< N
  int64_t TopK = 0;
  int64_t Hidden = 0;
  /// Rows this rank received for each of its local experts; dispatch()'s
  /// result holds them in this order, local expert 0 first.
  std::vector<int64_t> TokensPerLocalExpert;

  // Implementation state, owned by TokenDispatcher.
  /// Send row j carries copy Permutation[j]; rows are sorted by global expert
  /// (hence by destination rank), then by copy number.
  std::vector<int64_t> Permutation;
  /// Its inverse: copy c is send row RowOfCopy[c].
  std::vector<int64_t> RowOfCopy;
  /// Per peer, in floats (rows * Hidden), of the forward (dispatch) exchange;
  /// the reverse exchanges swap send and receive.
  std::vector<size_t> SendCounts, SendOffsets, RecvCounts, RecvOffsets;
  /// Row i of dispatch()'s result is row RecvExpertOrder[i] of the receive
  /// buffer, which arrives source-rank-major (then local expert, then copy).
  std::vector<int64_t> RecvExpertOrder;
  /// Its inverse: receive row r is row ExpertRowOfRecv[r] of the result.
  std::vector<int64_t> ExpertRowOfRecv;
  /// The expert outputs back at this rank, [N * TopK, Hidden] in send order;
  /// written by combine(), read by combineBackward() for dWeights.
  Tensor CombinedCopies;

  /// The local moves' arguments (ComputeBackend::permuteRows and the
  /// others), with the routing weights where given.
  PermuteArgs moves(const float *Weights = nullptr) const;
};

class TokenDispatcher {
public:
  /// Experts must be a multiple of Ep.size().
  TokenDispatcher(Communicator &Ep, int64_t Experts, int64_t TopK, int64_t Hidden);

  int64_t localExperts() const;
  /// Global id of local expert L on this rank.
  int64_t globalExpert(int64_t L) const;

  /// Whether the ep group is this rank alone: dispatch()'s rows are then
  /// permuteRows()'s, in send order, and nothing is exchanged.
  bool local() const { return Ep.size() == 1; }
  /// The bookkeeping of a dispatch of N tokens (collective over the ep group:
  /// it exchanges the counts), without moving rows.
  void route(int64_t N, const std::vector<int32_t> &Experts, DispatchState &S);
  /// X [N, Hidden]; Experts [N * TopK] global expert ids (token-major). Returns
  /// the rows for this rank's experts, [sum(TokensPerLocalExpert), Hidden].
  Tensor dispatch(const Tensor &X, const std::vector<int32_t> &Experts, DispatchState &S);
  /// ExpertOut has dispatch()'s rows; Weights [N * TopK]. Returns Y [N,
  /// Hidden], Y[n] = sum_k Weights[n, k] * ExpertOut(copy n, k), k ascending.
  Tensor combine(const Tensor &ExpertOut, const std::vector<float> &Weights, DispatchState &S);
  /// Backward of combine (after combine on the same S): returns dExpertOut
  /// (rows as dispatch() returned) and writes dWeights [N * TopK],
  /// dWeights[n, k] = <DY[n], ExpertOut(copy n, k)>.
  Tensor combineBackward(const Tensor &DY, const std::vector<float> &Weights, DispatchState &S,
                         std::vector<float> &DWeights);
  /// Backward of dispatch: returns dX [N, Hidden], summed over the TopK copies
  /// in k order.
  Tensor dispatchBackward(const Tensor &DExpertIn, DispatchState &S);

  /// The exchanges alone, on the current compute backend (over the ep
  /// group's Communicator::device() where it has one), for a caller that runs the moves there after route():
  /// send-ordered rows [N * TopK, Hidden] to this rank's expert-major rows
  /// (dispatch()'s), and back. An output the caller shaped keeps its
  /// storage (and a backend its copy, where the caller holds it).
  void toExperts(const Tensor &SendRows, const DispatchState &S, Tensor &ExpertRows);
  void toSenders(const Tensor &ExpertRows, const DispatchState &S, Tensor &SendRows);

private:
  /// The forward exchange: send-ordered rows [N * TopK, Hidden] (row j is
  /// copy Permutation[j]) to this rank's expert-major rows.
  Tensor toExperts(const Tensor &SendRows, const DispatchState &S);
  /// The reverse exchange: expert-major rows back to send order.
  Tensor toSendOrder(const Tensor &Rows, const DispatchState &S);

  Communicator &Ep;
  int64_t Experts, TopK, Hidden;
};

} // namespace moert

#endif
