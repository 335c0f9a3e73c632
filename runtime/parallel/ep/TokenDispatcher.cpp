//===- parallel/ep/TokenDispatcher.cpp - Expert-parallel token all-to-all -===//
#include "parallel/ep/TokenDispatcher.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moert {

namespace {

/// Misuse by the caller (shapes, expert ids) is a bug in the runtime, not a
/// user error: report it and stop this rank, which ends the MPI job.
[[noreturn]] void fail(const Communicator &Ep, const char *What) {
  std::fprintf(stderr, "moerun: internal error in token dispatch (group '%s', rank %d): %s\n", Ep.name().c_str(),
               Ep.rank(), What);
  std::abort();
}

void copyRow(const float *From, float *To, int64_t Hidden) {
  if (Hidden)
    std::memcpy(To, From, size_t(Hidden) * sizeof(float));
}

} // namespace

TokenDispatcher::TokenDispatcher(Communicator &Ep, int64_t Experts, int64_t TopK, int64_t Hidden)
    : Ep(Ep), Experts(Experts), TopK(TopK), Hidden(Hidden) {
  if (Experts <= 0 || TopK <= 0 || Hidden <= 0)
    fail(Ep, "experts, top-k and hidden size must be positive");
  if (Experts % Ep.size())
    fail(Ep, "the expert count is not a multiple of the ep group size");
}

int64_t TokenDispatcher::localExperts() const { return Experts / Ep.size(); }

int64_t TokenDispatcher::globalExpert(int64_t L) const { return Ep.rank() * localExperts() + L; }

PermuteArgs DispatchState::moves(const float *Weights) const {
  return {Tokens, TopK, Hidden, Permutation.data(), RowOfCopy.data(), Weights};
}

void TokenDispatcher::route(int64_t N, const std::vector<int32_t> &ExpertIds, DispatchState &S) {
  if (int64_t(ExpertIds.size()) != N * TopK)
    fail(Ep, "dispatch: expert ids are not [N * TopK]");
  int Peers = Ep.size();
  int64_t Local = localExperts(), Copies = N * TopK;
  S.Tokens = N;
  S.TopK = TopK;
  S.Hidden = Hidden;

  // Counting sort of the copies by expert: stable, so within one expert the
  // copies stay in copy order (token, then k).
  std::vector<int64_t> PerExpert(Experts, 0);
  for (int32_t E : ExpertIds) {
    if (E < 0 || E >= Experts)
      fail(Ep, "dispatch: expert id out of range");
    ++PerExpert[E];
  }
  std::vector<int64_t> Next(Experts, 0);
  for (int64_t E = 1; E < Experts; ++E)
    Next[E] = Next[E - 1] + PerExpert[E - 1];
  S.Permutation.assign(Copies, 0);
  S.RowOfCopy.assign(Copies, 0);
  for (int64_t C = 0; C < Copies; ++C) {
    S.RowOfCopy[C] = Next[ExpertIds[C]]++;
    S.Permutation[S.RowOfCopy[C]] = C;
  }

  // Peer p's slice of PerExpert is the counts for its local experts, so after
  // the exchange FromPeer[p * Local + l] is what p sends to local expert l.
  std::vector<int64_t> FromPeer(Experts, 0);
  Ep.allToAll(PerExpert.data(), FromPeer.data(), size_t(Local));

  S.SendCounts.assign(Peers, 0);
  S.SendOffsets.assign(Peers, 0);
  S.RecvCounts.assign(Peers, 0);
  S.RecvOffsets.assign(Peers, 0);
  S.TokensPerLocalExpert.assign(Local, 0);
  size_t SendAt = 0, RecvAt = 0;
  for (int P = 0; P < Peers; ++P) {
    int64_t SendRows = 0, RecvRows = 0;
    for (int64_t L = 0; L < Local; ++L) {
      SendRows += PerExpert[P * Local + L];
      RecvRows += FromPeer[P * Local + L];
      S.TokensPerLocalExpert[L] += FromPeer[P * Local + L];
    }
    S.SendOffsets[P] = SendAt;
    S.SendCounts[P] = size_t(SendRows * Hidden);
    S.RecvOffsets[P] = RecvAt;
    S.RecvCounts[P] = size_t(RecvRows * Hidden);
    SendAt += S.SendCounts[P];
    RecvAt += S.RecvCounts[P];
  }

  // The receive buffer is source-rank-major; regroup it expert-major.
  S.RecvExpertOrder.clear();
  S.RecvExpertOrder.reserve(RecvAt / size_t(Hidden));
  for (int64_t L = 0; L < Local; ++L)
    for (int P = 0; P < Peers; ++P) {
      int64_t Base = int64_t(S.RecvOffsets[P]) / Hidden;
      for (int64_t Before = 0; Before < L; ++Before)
        Base += FromPeer[P * Local + Before];
      for (int64_t I = 0; I < FromPeer[P * Local + L]; ++I)
        S.RecvExpertOrder.push_back(Base + I);
    }
  S.ExpertRowOfRecv.assign(S.RecvExpertOrder.size(), 0);
  for (size_t I = 0; I < S.RecvExpertOrder.size(); ++I)
    S.ExpertRowOfRecv[size_t(S.RecvExpertOrder[I])] = int64_t(I);
  S.CombinedCopies = Tensor();
}

Tensor TokenDispatcher::dispatch(const Tensor &X, const std::vector<int32_t> &ExpertIds, DispatchState &S) {
  int64_t N = X.rows();
  if (N && X.cols() != Hidden)
    fail(Ep, "dispatch: X is not [N, Hidden]");
  route(N, ExpertIds, S);
  currentBackend().hostReads(X.data(), X.numel()); // permuted and sent from host memory
  Tensor SendRows({N * TopK, Hidden});
  hostBackend().permuteRows(S.moves(), X.data(), SendRows.data());
  return toExperts(SendRows, S);
}

Tensor TokenDispatcher::toExperts(const Tensor &SendRows, const DispatchState &S) {
  int64_t Rows = int64_t(S.RecvExpertOrder.size());
  Tensor Recv({Rows, Hidden});
  Ep.allToAllV(SendRows.data(), S.SendCounts, S.SendOffsets, Recv.data(), S.RecvCounts, S.RecvOffsets);
  Tensor Out({Rows, Hidden});
  for (int64_t I = 0; I < Rows; ++I)
    copyRow(Recv.row(S.RecvExpertOrder[I]), Out.row(I), Hidden);
  return Out;
}

Tensor TokenDispatcher::toSendOrder(const Tensor &Rows, const DispatchState &S) {
  int64_t N = int64_t(S.RecvExpertOrder.size());
  if (Rows.rows() != N || (N && Rows.cols() != Hidden))
    fail(Ep, "expert rows do not match the dispatch");
  Tensor Back({N, Hidden});
  for (int64_t I = 0; I < N; ++I)
    copyRow(Rows.row(I), Back.row(S.RecvExpertOrder[I]), Hidden);
  Tensor SendRows({S.Tokens * S.TopK, Hidden});
  // The reverse exchange: what this rank received it now sends back.
  Ep.allToAllV(Back.data(), S.RecvCounts, S.RecvOffsets, SendRows.data(), S.SendCounts, S.SendOffsets);
  return SendRows;
}

namespace {
/// Out in Shape, its storage kept where the caller shaped it (and may hold it).
void shape(Tensor &Out, const std::vector<int64_t> &Shape) {
  if (Out.shape() != Shape)
    Out.resize(Shape);
}
} // namespace

void TokenDispatcher::toExperts(const Tensor &SendRows, const DispatchState &S, Tensor &ExpertRows) {
  ComputeBackend &Backend = currentBackend();
  Tensor Recv({int64_t(S.RecvExpertOrder.size()), Hidden});
  HeldArrays OnlyTheBackendReads(Backend, {{Recv.data(), Recv.numel(), HeldArray::BackendOnly}});
  Backend.allToAllV(SendRows.data(), S.SendCounts, S.SendOffsets, Recv.data(), S.RecvCounts, S.RecvOffsets, Ep);
  shape(ExpertRows, Recv.shape());
  Backend.permuteRows(PermuteArgs::ofRows(S.RecvExpertOrder, S.ExpertRowOfRecv, Hidden), Recv.data(),
                      ExpertRows.data());
}

void TokenDispatcher::toSenders(const Tensor &ExpertRows, const DispatchState &S, Tensor &SendRows) {
  ComputeBackend &Backend = currentBackend();
  if (ExpertRows.rows() != int64_t(S.RecvExpertOrder.size()) || (ExpertRows.rows() && ExpertRows.cols() != Hidden))
    fail(Ep, "expert rows do not match the dispatch");
  Tensor Back(ExpertRows.shape());
  HeldArrays OnlyTheBackendReads(Backend, {{Back.data(), Back.numel(), HeldArray::BackendOnly}});
  Backend.permuteRows(PermuteArgs::ofRows(S.ExpertRowOfRecv, S.RecvExpertOrder, Hidden), ExpertRows.data(),
                      Back.data());
  shape(SendRows, {S.Tokens * S.TopK, Hidden});
  Backend.allToAllV(Back.data(), S.RecvCounts, S.RecvOffsets, SendRows.data(), S.SendCounts, S.SendOffsets, Ep);
}

Tensor TokenDispatcher::combine(const Tensor &ExpertOut, const std::vector<float> &Weights, DispatchState &S) {
  int64_t N = S.Tokens, Copies = N * S.TopK;
  if (int64_t(Weights.size()) != Copies)
    fail(Ep, "combine: weights are not [N * TopK]");
  S.CombinedCopies = toSendOrder(ExpertOut, S);
  Tensor Y({N, Hidden});
  hostBackend().unpermuteRows(S.moves(Weights.data()), S.CombinedCopies.data(), Y.data());
  return Y;
}

Tensor TokenDispatcher::combineBackward(const Tensor &DY, const std::vector<float> &Weights, DispatchState &S,
                                        std::vector<float> &DWeights) {
  int64_t N = S.Tokens, Copies = N * S.TopK;
  if (DY.rows() != N || (N && DY.cols() != Hidden))
    fail(Ep, "combineBackward: dY is not [N, Hidden]");
  if (int64_t(Weights.size()) != Copies)
    fail(Ep, "combineBackward: weights are not [N * TopK]");
  if (S.CombinedCopies.rows() != Copies)
    fail(Ep, "combineBackward: combine() has not run on this state");
  DWeights.assign(Copies, 0.0f);
  Tensor SendRows({Copies, Hidden});
  currentBackend().hostReads(DY.data(), DY.numel()); // combined on the host
  hostBackend().unpermuteRowsBackward(S.moves(Weights.data()), DY.data(), S.CombinedCopies.data(), SendRows.data(),
                                      DWeights.data());
  return toExperts(SendRows, S);
}

Tensor TokenDispatcher::dispatchBackward(const Tensor &DExpertIn, DispatchState &S) {
  Tensor SendRows = toSendOrder(DExpertIn, S);
  Tensor DX({S.Tokens, Hidden});
  hostBackend().permuteRowsBackward(S.moves(), SendRows.data(), DX.data());
  return DX;
}

} // namespace moert
