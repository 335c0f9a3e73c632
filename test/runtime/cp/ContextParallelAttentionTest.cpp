//===- ContextParallelAttentionTest.cpp - Ring attention against one rank -===//
//
// The group-of-one path is checked against a naive double-precision reference
// and finite differences; the ring (every rank of the world, or split groups)
// against the group-of-one result on the full sequence, sliced by
// localPositions.
//
//===----------------------------------------------------------------------===//
#include "AttentionReference.h"
#include "MpiTestEnv.h"

#include "parallel/cp/AttentionBlock.h"
#include "parallel/cp/ContextParallelAttention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

using namespace moert;

namespace {

std::vector<float> randomVector(size_t N, unsigned Seed, float Scale) {
  std::mt19937 Gen(Seed);
  std::normal_distribution<float> Dist(0.0f, Scale);
  std::vector<float> V(N);
  for (float &X : V)
    X = Dist(Gen);
  return V;
}

/// Full-sequence inputs of one attention call, identical on every rank.
struct Problem {
  AttentionDims Dims;
  std::vector<float> Q, K, V, DOut;
  Problem(AttentionDims D, unsigned Seed) : Dims(D) {
    size_t Tokens = size_t(D.Batch * D.SeqLen);
    // Q with a larger spread so softmax rows are far from uniform.
    Q = randomVector(Tokens * D.QHeads * D.HeadDim, Seed, 2.0f);
    K = randomVector(Tokens * D.KvHeads * D.HeadDim, Seed + 1, 1.0f);
    V = randomVector(Tokens * D.KvHeads * D.vHeadDim(), Seed + 2, 1.0f);
    DOut = randomVector(Tokens * D.QHeads * D.vHeadDim(), Seed + 3, 1.0f);
  }
};

struct Result {
  std::vector<float> Out, Lse, DQ, DK, DV;
};

/// Forward and backward on the local tensors of one call.
Result runAttention(Communicator &Cp, const AttentionDims &D, const std::vector<float> &Q, const std::vector<float> &K,
                    const std::vector<float> &V, const std::vector<float> &DOut,
                    CpExchange Exchange = CpExchange::Ring) {
  int64_t T = D.SeqLen / Cp.size();
  Result R;
  R.Out.assign(DOut.size(), NAN);
  R.Lse.assign(size_t(D.Batch * D.QHeads * T), NAN);
  R.DQ.assign(Q.size(), NAN);
  R.DK.assign(K.size(), NAN);
  R.DV.assign(V.size(), NAN);
  contextParallelAttentionForward(Cp, D, Q.data(), K.data(), V.data(), R.Out.data(), R.Lse.data(), Exchange);
  contextParallelAttentionBackward(Cp, D, Q.data(), K.data(), V.data(), R.Out.data(), R.Lse.data(), DOut.data(),
                                   R.DQ.data(), R.DK.data(), R.DV.data(), Exchange);
  return R;
}

/// Rows [Batch, SeqLen, Width] -> the rows of Positions, per batch.
std::vector<float> sliceTokens(const std::vector<float> &Full, int64_t Batch, int64_t SeqLen, int64_t Width,
                               const std::vector<int64_t> &Positions) {
  std::vector<float> Out;
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t P : Positions) {
      auto Row = Full.begin() + (B * SeqLen + P) * Width;
      Out.insert(Out.end(), Row, Row + Width);
    }
  return Out;
}

/// Lse [Batch, Heads, SeqLen] -> [Batch, Heads, local tokens].
std::vector<float> sliceLse(const std::vector<float> &Full, int64_t Batch, int64_t Heads, int64_t SeqLen,
                            const std::vector<int64_t> &Positions) {
  std::vector<float> Out;
  for (int64_t R = 0; R < Batch * Heads; ++R)
    for (int64_t P : Positions)
      Out.push_back(Full[R * SeqLen + P]);
  return Out;
}

/// Element-wise |Got - Want| <= RelTol * (|Want| + 0.1 * max|Want|): relative
/// per element, with a floor for entries that are tiny against the tensor
/// (gradients that vanish analytically, e.g. dQ of the first token, come out
/// of fp32 cancellation at about 1e-7 of the tensor's scale).
template <typename T>
void expectClose(const std::vector<float> &Got, const std::vector<T> &Want, double RelTol, const char *What) {
  ASSERT_EQ(Got.size(), Want.size()) << What;
  double MaxAbs = 0;
  for (T W : Want)
    MaxAbs = std::max(MaxAbs, std::abs(double(W)));
  ASSERT_GT(MaxAbs, 0.0) << What << " is all zero: the check would be vacuous";
  int Bad = 0;
  for (size_t I = 0; I < Got.size(); ++I) {
    double Tol = RelTol * (std::abs(double(Want[I])) + 0.1 * MaxAbs);
    if (!(std::abs(double(Got[I]) - double(Want[I])) <= Tol) && ++Bad <= 5)
      ADD_FAILURE() << What << "[" << I << "] = " << Got[I] << ", expected " << Want[I];
  }
  EXPECT_EQ(Bad, 0) << What << ": elements off";
}

void expectMatchesReference(const Result &R, const test::ReferenceAttention &Ref) {
  expectClose(R.Out, Ref.Out, 1e-5, "Out");
  expectClose(R.Lse, Ref.Lse, 1e-5, "Lse");
  expectClose(R.DQ, Ref.DQ, 1e-5, "DQ");
  expectClose(R.DK, Ref.DK, 1e-5, "DK");
  expectClose(R.DV, Ref.DV, 1e-5, "DV");
}

AttentionDims dims(int64_t Batch, int64_t SeqLen, int64_t QHeads, int64_t KvHeads, int64_t HeadDim,
                   int64_t VHeadDim = 0) {
  AttentionDims D;
  D.VHeadDim = VHeadDim;
  D.Batch = Batch;
  D.SeqLen = SeqLen;
  D.QHeads = QHeads;
  D.KvHeads = KvHeads;
  D.HeadDim = HeadDim;
  return D;
}

} // namespace

TEST(CpPositions, ChunksCoverTheSequenceOnceAndBalanceTheTriangle) {
  for (int Cp = 1; Cp <= 5; ++Cp) {
    int64_t S = 2 * Cp * 3;
    std::vector<int> Seen(size_t(S), 0);
    std::vector<int64_t> Work;
    for (int R = 0; R < Cp; ++R) {
      std::vector<int64_t> Pos = localPositions(R, Cp, S);
      ASSERT_EQ(int64_t(Pos.size()), S / Cp);
      int64_t CausalWork = 0; // keys a query at position p sees: p + 1
      for (int64_t P : Pos) {
        ASSERT_GE(P, 0);
        ASSERT_LT(P, S);
        ++Seen[size_t(P)];
        CausalWork += P + 1;
      }
      Work.push_back(CausalWork);
    }
    for (int64_t P = 0; P < S; ++P)
      EXPECT_EQ(Seen[size_t(P)], 1) << "position " << P << " cp " << Cp;
    for (int64_t W : Work)
      EXPECT_EQ(W, Work[0]) << "cp " << Cp;
  }
  // Rank 1 of 3 holds chunks 1 and 4 of six.
  std::vector<int64_t> Expected = {2, 3, 8, 9};
  EXPECT_EQ(localPositions(1, 3, 12), Expected);
  // A group of one needs no chunking, so any length works.
  EXPECT_EQ(localPositions(0, 1, 5).size(), 5u);
  EXPECT_THROW(localPositions(0, 2, 6), std::invalid_argument);
  EXPECT_THROW(localPositions(2, 2, 8), std::invalid_argument);
}

TEST(CpPositions, SpanPairsAreSkippedFullOrDiagonal) {
  // Rank 0 of 2 over 8 tokens: chunks [0, 2) and [6, 8); rank 1: [2, 4), [4,
  // 6).
  std::vector<TokenSpan> R0 = localSpans(0, 2, 8), R1 = localSpans(1, 2, 8);
  ASSERT_EQ(R0.size(), 2u);
  EXPECT_EQ(R0[1].LocalBegin, 2);
  EXPECT_EQ(R0[1].PosBegin, 6);
  EXPECT_EQ(spanMask(R0[0], R0[0]), SpanMask::Causal);
  EXPECT_EQ(spanMask(R0[1], R0[0]), SpanMask::Visible);
  EXPECT_EQ(spanMask(R0[0], R0[1]), SpanMask::Hidden);
  EXPECT_EQ(spanMask(R0[0], R1[0]), SpanMask::Hidden);
  EXPECT_EQ(spanMask(R1[0], R0[0]), SpanMask::Visible);
  EXPECT_EQ(spanMask(R1[1], R1[0]), SpanMask::Visible);
  EXPECT_EQ(spanMask(R0[1], R1[1]), SpanMask::Visible);
  // Overlapping but not equal spans still need the element mask.
  EXPECT_EQ(spanMask(TokenSpan{0, 4, 4}, TokenSpan{0, 2, 4}), SpanMask::Causal);
}

TEST(CpAttention, SingleRankMatchesNaiveReference) {
  auto Self = createSelfCommunicator("cp");
  // An odd length: the group-of-one path does not chunk.
  Problem P(dims(2, 13, 4, 2, 8), 7);
  Result R = runAttention(*Self, P.Dims, P.Q, P.K, P.V, P.DOut);
  test::ReferenceAttention Ref = test::referenceAttention(P.Dims, P.Q, P.K, P.V, P.DOut);
  expectMatchesReference(R, Ref);
  // The first token sees only itself: its output is its own V row.
  for (int64_t C = 0; C < 8; ++C)
    EXPECT_FLOAT_EQ(R.Out[size_t(3 * 8 + C)], P.V[size_t(1 * 8 + C)]);
}

TEST(CpAttention, NarrowerValuesMatchNaiveReference) {
  // Multi-head latent attention: queries and keys 12 wide (the no-RoPE and
  // RoPE parts together), values and outputs 8; the scale is 1 / sqrt(12).
  auto Self = createSelfCommunicator("cp");
  Problem P(dims(2, 11, 4, 4, 12, 8), 9);
  Result R = runAttention(*Self, P.Dims, P.Q, P.K, P.V, P.DOut);
  ASSERT_EQ(R.Out.size(), size_t(2 * 11 * 4 * 8));
  test::ReferenceAttention Ref = test::referenceAttention(P.Dims, P.Q, P.K, P.V, P.DOut);
  expectMatchesReference(R, Ref);
}

TEST(CpAttention, SingleRankBackwardMatchesFiniteDifferences) {
  auto Self = createSelfCommunicator("cp");
  Problem P(dims(1, 6, 2, 1, 4), 21);
  Result R = runAttention(*Self, P.Dims, P.Q, P.K, P.V, P.DOut);
  // Loss = sum(Out * DOut), accumulated in double over the fp32 forward.
  auto Loss = [&](const std::vector<float> &Q, const std::vector<float> &K, const std::vector<float> &V) {
    std::vector<float> Out(Q.size()), Lse(size_t(2 * 6));
    contextParallelAttentionForward(*Self, P.Dims, Q.data(), K.data(), V.data(), Out.data(), Lse.data());
    double L = 0;
    for (size_t I = 0; I < Out.size(); ++I)
      L += double(Out[I]) * P.DOut[I];
    return L;
  };
  const float Eps = 1e-2f;
  auto Check = [&](std::vector<float> &X, const std::vector<float> &Grad, const char *What) {
    double MaxGrad = 0;
    for (float G : Grad)
      MaxGrad = std::max(MaxGrad, std::abs(double(G)));
    ASSERT_GT(MaxGrad, 1e-3) << What;
    for (size_t I = 0; I < X.size(); ++I) {
      float Saved = X[I];
      X[I] = Saved + Eps;
      double Plus = Loss(P.Q, P.K, P.V);
      X[I] = Saved - Eps;
      double Minus = Loss(P.Q, P.K, P.V);
      X[I] = Saved;
      double Numeric = (Plus - Minus) / (2 * Eps);
      EXPECT_NEAR(Grad[I], Numeric, 2e-3 + 1e-2 * std::abs(Numeric)) << What << "[" << I << "]";
    }
  };
  Check(P.Q, R.DQ, "DQ");
  Check(P.K, R.DK, "DK");
  Check(P.V, R.DV, "DV");
}

TEST(CpAttention, RejectsHeadsThatDoNotGroup) {
  auto Self = createSelfCommunicator("cp");
  AttentionDims D = dims(1, 4, 3, 2, 4);
  std::vector<float> Q(4 * 3 * 4), K(4 * 2 * 4), Out(Q.size()), Lse(12);
  EXPECT_THROW(contextParallelAttentionForward(*Self, D, Q.data(), K.data(), K.data(), Out.data(), Lse.data()),
               std::invalid_argument);
}

namespace {

/// Runs a problem over Cp and checks it against the group of one on the
/// full sequence, sliced to this rank's positions.
void checkRingAgainstSingleRank(Communicator &Cp, const Problem &P, CpExchange Exchange = CpExchange::Ring) {
  const AttentionDims &D = P.Dims;
  auto Self = createSelfCommunicator("cp");
  Result Full = runAttention(*Self, D, P.Q, P.K, P.V, P.DOut);

  std::vector<int64_t> Pos = localPositions(Cp.rank(), Cp.size(), D.SeqLen);
  int64_t QW = D.QHeads * D.HeadDim, KW = D.KvHeads * D.HeadDim;
  int64_t VW = D.KvHeads * D.vHeadDim(), OW = D.QHeads * D.vHeadDim();
  auto Q = sliceTokens(P.Q, D.Batch, D.SeqLen, QW, Pos);
  auto K = sliceTokens(P.K, D.Batch, D.SeqLen, KW, Pos);
  auto V = sliceTokens(P.V, D.Batch, D.SeqLen, VW, Pos);
  auto DOut = sliceTokens(P.DOut, D.Batch, D.SeqLen, OW, Pos);
  Result Local = runAttention(Cp, D, Q, K, V, DOut, Exchange);

  expectClose(Local.Out, sliceTokens(Full.Out, D.Batch, D.SeqLen, OW, Pos), 1e-5, "Out");
  expectClose(Local.Lse, sliceLse(Full.Lse, D.Batch, D.QHeads, D.SeqLen, Pos), 1e-5, "Lse");
  expectClose(Local.DQ, sliceTokens(Full.DQ, D.Batch, D.SeqLen, QW, Pos), 1e-5, "DQ");
  expectClose(Local.DK, sliceTokens(Full.DK, D.Batch, D.SeqLen, KW, Pos), 1e-5, "DK");
  expectClose(Local.DV, sliceTokens(Full.DV, D.Batch, D.SeqLen, VW, Pos), 1e-5, "DV");
}

/// About 32 tokens, divisible by 2 * CpSize.
int64_t seqLenFor(int CpSize) {
  int64_t Unit = 2 * CpSize;
  return (32 + Unit - 1) / Unit * Unit;
}

} // namespace

TEST(CpRing, WorldRingMatchesSingleRank) {
  Communicator &W = test::world().world();
  Problem P(dims(2, seqLenFor(W.size()), 4, 2, 8), 100);
  checkRingAgainstSingleRank(W, P);
}

TEST(CpRing, MultiQueryAndTinyChunksMatchSingleRank) {
  // One token per chunk and one KV head for all query heads.
  Communicator &W = test::world().world();
  Problem P(dims(1, 2 * W.size(), 4, 1, 8), 300);
  checkRingAgainstSingleRank(W, P);
}

TEST(CpRing, NarrowerValuesMatchSingleRank) {
  // The ring carries K and V of different widths (multi-head latent
  // attention sends full per-head K and V, as Megatron-Core does).
  Communicator &W = test::world().world();
  Problem P(dims(2, seqLenFor(W.size()), 4, 4, 12, 8), 400);
  checkRingAgainstSingleRank(W, P);
}

TEST(CpRing, SplitGroupsRunIndependentRings) {
  CommWorld &World = test::world();
  // Two interleaved cp groups (even and odd world ranks, listed in reverse),
  // each on its own problem; a group may have one rank.
  std::vector<std::vector<int>> Groups(World.size() > 1 ? 2 : 1);
  for (int R = World.size() - 1; R >= 0; --R)
    Groups[size_t(R % int(Groups.size()))].push_back(R);
  auto Cp = World.split("cp", Groups);
  int Color = World.rank() % int(Groups.size());
  Problem P(dims(2, seqLenFor(Cp->size()), 4, 2, 8), 200 + 10 * unsigned(Color));
  checkRingAgainstSingleRank(*Cp, P);
}

TEST(CpRing, RanksHoldEveryPositionOnce) {
  Communicator &W = test::world().world();
  int64_t S = seqLenFor(W.size());
  std::vector<int64_t> Mine = localPositions(W.rank(), W.size(), S);
  std::vector<float> MineF(Mine.begin(), Mine.end());
  std::vector<float> All(static_cast<size_t>(S));
  W.allGather(MineF.data(), All.data(), MineF.size());
  std::sort(All.begin(), All.end());
  for (int64_t I = 0; I < S; ++I)
    EXPECT_EQ(All[size_t(I)], float(I));
}

// Megatron's other cp_comm_types: the same results as one rank, whatever
// travels.
TEST(CpExchange, AllGatherMatchesSingleRank) {
  Communicator &W = test::world().world();
  checkRingAgainstSingleRank(W, Problem(dims(2, seqLenFor(W.size()), 4, 2, 8), 500), CpExchange::AllGather);
  checkRingAgainstSingleRank(W, Problem(dims(1, 2 * W.size(), 4, 1, 8), 510), CpExchange::AllGather);
  checkRingAgainstSingleRank(W, Problem(dims(2, seqLenFor(W.size()), 4, 4, 12, 8), 520), CpExchange::AllGather);
}

TEST(CpExchange, AllToAllMatchesSingleRank) {
  // Heads in multiples of the group: each rank gets whole heads of each kind.
  Communicator &W = test::world().world();
  const int64_t C = W.size();
  checkRingAgainstSingleRank(W, Problem(dims(2, seqLenFor(W.size()), 2 * C, C, 8), 600), CpExchange::AllToAll);
  checkRingAgainstSingleRank(W, Problem(dims(1, 2 * C, 4 * C, 2 * C, 8), 610), CpExchange::AllToAll);
  checkRingAgainstSingleRank(W, Problem(dims(2, seqLenFor(W.size()), C, C, 12, 8), 620), CpExchange::AllToAll);
}

TEST(CpExchange, AllToAllRefusesHeadsThatDoNotSplit) {
  Communicator &W = test::world().world();
  if (W.size() == 1)
    GTEST_SKIP() << "a group of one needs no split";
  AttentionDims D = dims(1, seqLenFor(W.size()), 2 * W.size(), 1, 8); // one key/value head
  int64_t T = D.SeqLen / W.size();
  std::vector<float> Q(size_t(T * D.QHeads * 8)), K(size_t(T * 8)), Out(Q.size()), Lse(size_t(D.QHeads * T));
  EXPECT_THROW(
      contextParallelAttentionForward(W, D, Q.data(), K.data(), K.data(), Out.data(), Lse.data(), CpExchange::AllToAll),
      std::invalid_argument);
}
