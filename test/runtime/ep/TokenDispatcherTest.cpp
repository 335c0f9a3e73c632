//===- TokenDispatcherTest.cpp - Expert-parallel dispatch and combine -----===//
//
// A group of one against a direct per-token computation (forward, analytic and
// finite-difference gradients); then EP = world size against the group of one
// over the whole batch, with every rank holding a consecutive slice of it.
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"
#include "kernels/host/Blas.h"
#include "parallel/ep/TokenDispatcher.h"

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

Routing makeRouting(int64_t N, int64_t TopK, std::vector<int32_t> Allowed,
                    std::mt19937 &Rng) {
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

Tensor scaleByExpert(const TokenDispatcher &D, const DispatchState &S,
                     const Tensor &Rows) {
  Tensor Out = Rows;
  int64_t Row = 0;
  for (int64_t L = 0; L < D.localExperts(); ++L)
    for (int64_t I = 0; I < S.TokensPerLocalExpert[L]; ++I, ++Row)
      for (int64_t H = 0; H < Rows.cols(); ++H)
        Out.row(Row)[H] *= float(D.globalExpert(L) + 1);
  return Out;
}

SelfRun runScaled(TokenDispatcher &D, const Tensor &X, const Routing &R,
                  const Tensor &G) {
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
      EXPECT_NEAR(Run.DWeights[T * TopK + K],
                  (R.Experts[T * TopK + K] + 1) * Dot, 1e-5);
  }
  // dExpertOut: the row of copy (n, k) is Weights[n, k] * G[n].
  int64_t Row = 0;
  for (int32_t E = 0; E < Experts; ++E)
    for (int64_t C = 0; C < N * TopK; ++C)
      if (R.Experts[C] == E) {
        for (int64_t H = 0; H < Hidden; ++H)
          EXPECT_FLOAT_EQ(Run.DExpertOut.row(Row)[H],
                          R.Weights[C] * G.row(C / TopK)[H]);
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
    double Fd = (lossOf(runScaled(D, X, Plus, G).Y, G) -
                 lossOf(runScaled(D, X, Minus, G).Y, G)) /
                (2 * Step);
    EXPECT_NEAR(Run.DWeights[C], Fd, 1e-3 * std::max(1.0, std::fabs(Fd))) << C;
  }
  for (int64_t I = 0; I < X.numel(); ++I) {
    Tensor Plus = X, Minus = X;
    Plus[I] += Step;
    Minus[I] -= Step;
    double Fd = (lossOf(runScaled(D, Plus, R, G).Y, G) -
                 lossOf(runScaled(D, Minus, R, G).Y, G)) /
                (2 * Step);
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

} // namespace
