//===- TokenDispatcherTest.cpp - Expert-parallel dispatch and combine -----===//
//
// A group of one against a direct per-token computation (forward, analytic and
// finite-difference gradients); then EP = world size against the group of one
// over the whole batch, with every rank holding a consecutive slice of it.
//
//===----------------------------------------------------------------------===//
#include "parallel/ep/TokenDispatcher.h"
#include "MpiTestEnv.h"
#include "kernels/host/Blas.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace moert;

namespace {

/// One batch's routing: TopK distinct experts per token, drawn from Allowed,
/// with positive weights.
struct Routing {
  std::vector<int32_t> Experts;
  std::vector<float> Weights;
};

Routing makeRouting(int64_t N, int64_t TopK, std::vector<int32_t> Allowed, std::mt19937 &Rng) {
  Routing R;
  std::uniform_real_distribution<float> W(0.1f, 1.0f);
  for (int64_t T = 0; T < N; ++T) {
    std::shuffle(Allowed.begin(), Allowed.end(), Rng);
    for (int64_t K = 0; K < TopK; ++K) {
      R.Experts.push_back(Allowed[K]);
      R.Weights.push_back(W(Rng));
    }
  }
  return R;
}

Tensor randomTensor(int64_t Rows, int64_t Cols, std::mt19937 &Rng) {
  std::uniform_real_distribution<float> D(-1.0f, 1.0f);
  Tensor T({Rows, Cols});
  for (int64_t I = 0; I < T.numel(); ++I)
    T[I] = D(Rng);
  return T;
}

std::vector<int32_t> allExpertsBut(int64_t Experts, std::vector<int32_t> Skip) {
  std::vector<int32_t> Out;
  for (int32_t E = 0; E < Experts; ++E)
    if (std::find(Skip.begin(), Skip.end(), E) == Skip.end())
      Out.push_back(E);
  return Out;
}

double lossOf(const Tensor &Y, const Tensor &G) {
  double L = 0;
  for (int64_t I = 0; I < Y.numel(); ++I)
    L += double(Y[I]) * double(G[I]);
  return L;
}

//===----------------------------------------------------------------------===//
// A group of one: "expert e" multiplies its rows by e + 1.
//===----------------------------------------------------------------------===//

struct SelfRun {
  Tensor Y, DX, DExpertOut;
  std::vector<float> DWeights;
};

Tensor scaleByExpert(const TokenDispatcher &D, const DispatchState &S, const Tensor &Rows) {
  Tensor Out = Rows;
  int64_t Row = 0;
  for (int64_t L = 0; L < D.localExperts(); ++L)
    for (int64_t I = 0; I < S.TokensPerLocalExpert[L]; ++I, ++Row)
      for (int64_t H = 0; H < Rows.cols(); ++H)
        Out.row(Row)[H] *= float(D.globalExpert(L) + 1);
  return Out;
}

SelfRun runScaled(TokenDispatcher &D, const Tensor &X, const Routing &R, const Tensor &G) {
  DispatchState S;
  SelfRun Out;
  Tensor In = D.dispatch(X, R.Experts, S);
  Out.Y = D.combine(scaleByExpert(D, S, In), R.Weights, S);
  Out.DExpertOut = D.combineBackward(G, R.Weights, S, Out.DWeights);
  Out.DX = D.dispatchBackward(scaleByExpert(D, S, Out.DExpertOut), S);
  return Out;
}

TEST(TokenDispatcherSelf, RowsAreGroupedByExpertInCopyOrder) {
  auto Ep = createSelfCommunicator("ep");
  const int64_t N = 7, Hidden = 5, Experts = 4, TopK = 2;
  std::mt19937 Rng(11);
  Tensor X = randomTensor(N, Hidden, Rng);
  Routing R = makeRouting(N, TopK, allExpertsBut(Experts, {2}), Rng);
  TokenDispatcher D(*Ep, Experts, TopK, Hidden);
  ASSERT_EQ(D.localExperts(), Experts);
  DispatchState S;
  Tensor In = D.dispatch(X, R.Experts, S);
  EXPECT_EQ(S.Tokens, N);
  EXPECT_EQ(S.TopK, TopK);
  ASSERT_EQ(In.rows(), N * TopK);
  int64_t Row = 0;
  for (int32_t E = 0; E < Experts; ++E) {
    int64_t Count = 0;
    for (int64_t C = 0; C < N * TopK; ++C) {
      if (R.Experts[C] != E)
        continue;
      ++Count;
      for (int64_t H = 0; H < Hidden; ++H)
        EXPECT_EQ(In.row(Row)[H], X.row(C / TopK)[H]) << "expert " << E;
      ++Row;
    }
    EXPECT_EQ(S.TokensPerLocalExpert[E], Count);
  }
  EXPECT_EQ(S.TokensPerLocalExpert[2], 0);
}

TEST(TokenDispatcherSelf, CombineAndBackwardMatchDirectComputation) {
  auto Ep = createSelfCommunicator("ep");
  const int64_t N = 9, Hidden = 6, Experts = 5, TopK = 3;
  std::mt19937 Rng(5);
  Tensor X = randomTensor(N, Hidden, Rng), G = randomTensor(N, Hidden, Rng);
  Routing R = makeRouting(N, TopK, allExpertsBut(Experts, {1}), Rng);
  TokenDispatcher D(*Ep, Experts, TopK, Hidden);
  SelfRun Run = runScaled(D, X, R, G);

  for (int64_t T = 0; T < N; ++T) {
    double Scale = 0, Dot = 0;
    for (int64_t K = 0; K < TopK; ++K)
      Scale += R.Weights[T * TopK + K] * (R.Experts[T * TopK + K] + 1);
    for (int64_t H = 0; H < Hidden; ++H) {
      EXPECT_NEAR(Run.Y.row(T)[H], Scale * X.row(T)[H], 1e-5) << T;
      EXPECT_NEAR(Run.DX.row(T)[H], Scale * G.row(T)[H], 1e-5) << T;
      Dot += double(G.row(T)[H]) * X.row(T)[H];
    }
    for (int64_t K = 0; K < TopK; ++K)
      EXPECT_NEAR(Run.DWeights[T * TopK + K], (R.Experts[T * TopK + K] + 1) * Dot, 1e-5);
  }
  // dExpertOut: the row of copy (n, k) is Weights[n, k] * G[n].
  int64_t Row = 0;
  for (int32_t E = 0; E < Experts; ++E)
    for (int64_t C = 0; C < N * TopK; ++C)
      if (R.Experts[C] == E) {
        for (int64_t H = 0; H < Hidden; ++H)
          EXPECT_FLOAT_EQ(Run.DExpertOut.row(Row)[H], R.Weights[C] * G.row(C / TopK)[H]);
        ++Row;
      }
  EXPECT_EQ(Row, Run.DExpertOut.rows());
}

TEST(TokenDispatcherSelf, GradientsMatchFiniteDifferences) {
  auto Ep = createSelfCommunicator("ep");
  const int64_t N = 5, Hidden = 4, Experts = 4, TopK = 2;
  std::mt19937 Rng(3);
  Tensor X = randomTensor(N, Hidden, Rng), G = randomTensor(N, Hidden, Rng);
  Routing R = makeRouting(N, TopK, allExpertsBut(Experts, {}), Rng);
  TokenDispatcher D(*Ep, Experts, TopK, Hidden);
  SelfRun Run = runScaled(D, X, R, G);
  const float Step = 1e-2f;
  for (int64_t C = 0; C < N * TopK; ++C) {
    Routing Plus = R, Minus = R;
    Plus.Weights[C] += Step;
    Minus.Weights[C] -= Step;
    double Fd = (lossOf(runScaled(D, X, Plus, G).Y, G) - lossOf(runScaled(D, X, Minus, G).Y, G)) / (2 * Step);
    EXPECT_NEAR(Run.DWeights[C], Fd, 1e-3 * std::max(1.0, std::fabs(Fd))) << C;
  }
  for (int64_t I = 0; I < X.numel(); ++I) {
    Tensor Plus = X, Minus = X;
    Plus[I] += Step;
    Minus[I] -= Step;
    double Fd = (lossOf(runScaled(D, Plus, R, G).Y, G) - lossOf(runScaled(D, Minus, R, G).Y, G)) / (2 * Step);
    EXPECT_NEAR(Run.DX[I], Fd, 1e-3 * std::max(1.0, std::fabs(Fd))) << I;
  }
}

TEST(TokenDispatcherSelf, NoTokens) {
  auto Ep = createSelfCommunicator("ep");
  TokenDispatcher D(*Ep, 4, 2, 3);
  DispatchState S;
  Tensor In = D.dispatch(Tensor({0, 3}), {}, S);
  EXPECT_EQ(In.rows(), 0);
  EXPECT_EQ(S.TokensPerLocalExpert, std::vector<int64_t>(4, 0));
  Tensor Y = D.combine(In, {}, S);
  EXPECT_EQ(Y.rows(), 0);
  std::vector<float> DW(3, 1.0f);
  Tensor DOut = D.combineBackward(Tensor({0, 3}), {}, S, DW);
  EXPECT_TRUE(DW.empty());
  EXPECT_EQ(D.dispatchBackward(DOut, S).rows(), 0);
}

//===----------------------------------------------------------------------===//
// EP over MPI: expert e computes Out = In * W_e (gemm), so the backward is a
// real product too (dIn = dOut * W_e^T, dW_e = In^T * dOut).
//===----------------------------------------------------------------------===//

constexpr int64_t Hidden = 8, NumExperts = 8, TopK = 2;

/// The whole batch, built identically on every rank from one seed.
struct Batch {
  std::vector<int64_t> Shares; ///< Tokens of each ep rank, consecutive slices.
  Tensor X, G;                 ///< [N, Hidden]; G is dLoss/dY.
  Routing R;
  std::vector<Tensor> W; ///< Per expert, [Hidden, Hidden].

  int64_t begin(int Rank) const { return std::accumulate(Shares.begin(), Shares.begin() + Rank, int64_t(0)); }
};

Batch makeBatch(std::vector<int64_t> Shares, const std::vector<int32_t> &Allowed, unsigned Seed) {
  std::mt19937 Rng(Seed);
  Batch B;
  B.Shares = std::move(Shares);
  int64_t N = std::accumulate(B.Shares.begin(), B.Shares.end(), int64_t(0));
  B.X = randomTensor(N, Hidden, Rng);
  B.G = randomTensor(N, Hidden, Rng);
  B.R = makeRouting(N, TopK, Allowed, Rng);
  for (int64_t E = 0; E < NumExperts; ++E)
    B.W.push_back(randomTensor(Hidden, Hidden, Rng));
  return B;
}

Tensor sliceRows(const Tensor &T, int64_t Begin, int64_t Rows) {
  Tensor Out({Rows, T.cols()});
  std::copy(T.data() + Begin * T.cols(), T.data() + (Begin + Rows) * T.cols(), Out.data());
  return Out;
}

template <typename V> V sliceVec(const V &In, int64_t Begin, int64_t Count) {
  return V(In.begin() + Begin, In.begin() + Begin + Count);
}

/// One micro batch through dispatch, experts, combine and back, in phases so
/// that several can be interleaved.
struct Pass {
  TokenDispatcher &D;
  const Batch &B;
  Tensor X, G;
  Routing R;
  DispatchState S;
  Tensor In, Y, DX;
  std::vector<float> DWeights;
  std::vector<Tensor> DW; ///< Per local expert.

  Pass(TokenDispatcher &D, const Batch &B, int Rank)
      : D(D), B(B), X(sliceRows(B.X, B.begin(Rank), B.Shares[Rank])), G(sliceRows(B.G, B.begin(Rank), B.Shares[Rank])) {
    R.Experts = sliceVec(B.R.Experts, B.begin(Rank) * TopK, B.Shares[Rank] * TopK);
    R.Weights = sliceVec(B.R.Weights, B.begin(Rank) * TopK, B.Shares[Rank] * TopK);
  }

  /// Per local expert: Out rows = op(A rows) * op(W_e), or W_e's gradient.
  Tensor experts(const Tensor &Rows, bool Transposed) {
    Tensor Out({Rows.rows(), Hidden});
    int64_t Row = 0;
    for (int64_t L = 0; L < D.localExperts(); ++L) {
      int64_t M = S.TokensPerLocalExpert[L];
      gemm(false, Transposed, M, Hidden, Hidden, 1.0f, Rows.row(Row), B.W[D.globalExpert(L)].data(), 0.0f,
           Out.row(Row));
      Row += M;
    }
    return Out;
  }
  void dispatch() { In = D.dispatch(X, R.Experts, S); }
  void combine() { Y = D.combine(experts(In, false), R.Weights, S); }
  void backward() {
    Tensor DOut = D.combineBackward(G, R.Weights, S, DWeights);
    int64_t Row = 0;
    for (int64_t L = 0; L < D.localExperts(); ++L) {
      int64_t M = S.TokensPerLocalExpert[L];
      Tensor DWe({Hidden, Hidden});
      gemm(true, false, Hidden, Hidden, M, 1.0f, In.row(Row), DOut.row(Row), 0.0f, DWe.data());
      DW.push_back(std::move(DWe));
      Row += M;
    }
    DX = D.dispatchBackward(experts(DOut, true), S);
  }
  void run() {
    dispatch();
    combine();
    backward();
  }
};

/// Max |A - B| over max |B|: 0 when bit-identical.
double relDiff(const float *A, const float *B, int64_t Count) {
  double Diff = 0, Scale = 0;
  for (int64_t I = 0; I < Count; ++I) {
    Diff = std::max(Diff, std::fabs(double(A[I]) - double(B[I])));
    Scale = std::max(Scale, std::fabs(double(B[I])));
  }
  return Scale > 0 ? Diff / Scale : Diff;
}

/// This rank's pass over the ep group against one rank running the whole
/// batch. The expert rows are pure data movement, so they must match exactly;
/// everything else within 1e-6 relative (bit-identical in practice, since
/// each expert sees the same rows in the same order).
void expectMatchesOneRank(const Pass &P, const Batch &B, int Rank) {
  auto Self = createSelfCommunicator("ep");
  TokenDispatcher Whole(*Self, NumExperts, TopK, Hidden);
  Pass Ref(Whole, B, 0);
  Ref.X = B.X;
  Ref.G = B.G;
  Ref.R = B.R;
  Ref.run();

  int64_t Begin = B.begin(Rank), N = B.Shares[Rank];
  ASSERT_EQ(P.Y.rows(), N);
  ASSERT_EQ(P.DX.rows(), N);
  ASSERT_EQ(int64_t(P.DWeights.size()), N * TopK);
  EXPECT_LE(relDiff(P.Y.data(), Ref.Y.row(Begin), N * Hidden), 1e-6);
  EXPECT_LE(relDiff(P.DX.data(), Ref.DX.row(Begin), N * Hidden), 1e-6);
  EXPECT_LE(relDiff(P.DWeights.data(), Ref.DWeights.data() + Begin * TopK, N * TopK), 1e-6);

  // This rank's experts got the reference's rows of those experts.
  int64_t Row = 0;
  for (int64_t L = 0; L < P.D.localExperts(); ++L) {
    int64_t E = P.D.globalExpert(L), RefRow = 0;
    for (int64_t Before = 0; Before < E; ++Before)
      RefRow += Ref.S.TokensPerLocalExpert[Before];
    int64_t M = Ref.S.TokensPerLocalExpert[E];
    ASSERT_EQ(P.S.TokensPerLocalExpert[L], M) << "expert " << E;
    for (int64_t I = 0; I < M * Hidden; ++I)
      ASSERT_EQ(P.In.row(Row)[I], Ref.In.row(RefRow)[I]) << "expert " << E;
    EXPECT_LE(relDiff(P.DW[L].data(), Ref.DW[E].data(), Hidden * Hidden), 1e-6) << "expert " << E;
    Row += M;
  }
  EXPECT_EQ(P.In.rows(), Row);
}

Communicator &world() { return test::world().world(); }

TEST(TokenDispatcherEp, RandomRoutingWithEmptyExperts) {
  Communicator &Ep = world();
  // Experts 3, 6 and 7 get nothing: with 4 ranks, rank 3 receives no rows and
  // nobody sends to it.
  Batch B = makeBatch(std::vector<int64_t>(Ep.size(), 6), allExpertsBut(NumExperts, {3, 6, 7}), 21);
  TokenDispatcher D(Ep, NumExperts, TopK, Hidden);
  Pass P(D, B, Ep.rank());
  P.run();
  if (Ep.size() == 4 && Ep.rank() == 3) {
    EXPECT_EQ(P.In.rows(), 0);
  }
  expectMatchesOneRank(P, B, Ep.rank());
}

TEST(TokenDispatcherEp, EveryTokenGoesToRankZero) {
  Communicator &Ep = world();
  // Only experts 0 and 1 (rank 0's for any group size up to 4): every other
  // rank receives nothing and sends only to rank 0.
  Batch B = makeBatch(std::vector<int64_t>(Ep.size(), 5), {0, 1}, 22);
  TokenDispatcher D(Ep, NumExperts, TopK, Hidden);
  Pass P(D, B, Ep.rank());
  P.run();
  if (Ep.rank() != 0) {
    EXPECT_EQ(P.In.rows(), 0);
  } else {
    EXPECT_EQ(P.In.rows(), int64_t(B.R.Experts.size()));
  }
  expectMatchesOneRank(P, B, Ep.rank());
}

TEST(TokenDispatcherEp, UnevenSharesAndARankWithoutTokens) {
  Communicator &Ep = world();
  std::vector<int64_t> Shares;
  for (int R = 0; R < Ep.size(); ++R)
    Shares.push_back(R == 1 ? 0 : 3 + 2 * R);
  Batch B = makeBatch(Shares, allExpertsBut(NumExperts, {}), 23);
  TokenDispatcher D(Ep, NumExperts, TopK, Hidden);
  Pass P(D, B, Ep.rank());
  P.run();
  expectMatchesOneRank(P, B, Ep.rank());
}

TEST(TokenDispatcherEp, InterleavedMicroBatchesKeepTheirOwnState) {
  Communicator &Ep = world();
  Batch B1 = makeBatch(std::vector<int64_t>(Ep.size(), 4), allExpertsBut(NumExperts, {5}), 31);
  Batch B2 = makeBatch(std::vector<int64_t>(Ep.size(), 7), allExpertsBut(NumExperts, {0, 2}), 32);
  TokenDispatcher D(Ep, NumExperts, TopK, Hidden);
  Pass P1(D, B1, Ep.rank()), P2(D, B2, Ep.rank());
  // A pipeline-like order: both forwards in flight, backwards in reverse.
  P1.dispatch();
  P2.dispatch();
  P2.combine();
  P1.combine();
  P2.backward();
  P1.backward();
  expectMatchesOneRank(P1, B1, Ep.rank());
  expectMatchesOneRank(P2, B2, Ep.rank());
}

TEST(TokenDispatcherEp, ExchangesAloneMoveTheRowsAsDispatchAndCombine) {
  Communicator &Ep = world();
  // Uneven shares, a rank without tokens, and experts nobody routes to.
  std::vector<int64_t> Shares;
  for (int R = 0; R < Ep.size(); ++R)
    Shares.push_back(R == 1 ? 0 : 3 + 2 * R);
  Batch B = makeBatch(Shares, allExpertsBut(NumExperts, {2, 7}), 24);
  TokenDispatcher D(Ep, NumExperts, TopK, Hidden);
  Pass P(D, B, Ep.rank());
  DispatchState Whole;
  const Tensor Rows = D.dispatch(P.X, P.R.Experts, Whole);

  // The caller's moves around the exchanges alone, as model/MoeBlock.cpp
  // runs them on its backend.
  DispatchState S;
  D.route(P.X.rows(), P.R.Experts, S);
  Tensor SendRows({P.X.rows() * TopK, Hidden});
  hostBackend().permuteRows(S.moves(), P.X.data(), SendRows.data());
  Tensor ExpertRows;
  D.toExperts(SendRows, S, ExpertRows);
  ASSERT_EQ(ExpertRows.shape(), Rows.shape());
  EXPECT_TRUE(std::equal(Rows.data(), Rows.data() + Rows.numel(), ExpertRows.data()));

  P.S = S; // whose counts the experts read
  const Tensor Out = P.experts(ExpertRows, false);
  Tensor Back({1, 1}); // a caller's storage of another shape is replaced
  D.toSenders(Out, S, Back);
  Tensor Y({P.X.rows(), Hidden});
  hostBackend().unpermuteRows(S.moves(P.R.Weights.data()), Back.data(), Y.data());
  const Tensor Combined = D.combine(Out, P.R.Weights, Whole);
  ASSERT_EQ(Y.shape(), Combined.shape());
  EXPECT_TRUE(std::equal(Y.data(), Y.data() + Y.numel(), Combined.data()));

  // And back: the expert rows return to the send order they left in.
  Tensor Returned;
  D.toSenders(ExpertRows, S, Returned);
  ASSERT_EQ(Returned.shape(), SendRows.shape());
  EXPECT_TRUE(std::equal(SendRows.data(), SendRows.data() + SendRows.numel(), Returned.data()));
}

TEST(TokenDispatcherEp, EpGroupInsideALargerWorld) {
  CommWorld &World = test::world();
  // Pairs of ranks form ep groups, each with its own batch.
  std::vector<std::vector<int>> Groups;
  for (int R = 0; R < World.size(); R += 2) {
    Groups.push_back({R});
    if (R + 1 < World.size())
      Groups.back().push_back(R + 1);
  }
  auto Ep = World.split("ep", Groups);
  int Group = World.rank() / 2;
  Batch B = makeBatch(std::vector<int64_t>(Ep->size(), 6), allExpertsBut(NumExperts, {4}), 40 + Group);
  TokenDispatcher D(*Ep, NumExperts, TopK, Hidden);
  EXPECT_EQ(D.localExperts(), NumExperts / Ep->size());
  EXPECT_EQ(D.globalExpert(0), Ep->rank() * D.localExperts());
  Pass P(D, B, Ep->rank());
  P.run();
  expectMatchesOneRank(P, B, Ep->rank());
}

} // namespace
