//===- CommTest.cpp - The MPI communicator against hand-computed results --===//
#include "MpiTestEnv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

using namespace moert;

TEST(MpiComm, AllReduceSumsEveryRank) {
  Communicator &W = test::world().world();
  std::vector<float> V(3, float(W.rank() + 1));
  W.allReduceSum(V.data(), V.size());
  float Expected = float(W.size() * (W.size() + 1) / 2);
  for (float X : V)
    EXPECT_EQ(X, Expected);
}

TEST(MpiComm, SplitFollowsPlanGroups) {
  CommWorld &World = test::world();
  // Two interleaved groups: even ranks and odd ranks, listed in reverse.
  std::vector<std::vector<int>> Groups(2);
  for (int R = World.size() - 1; R >= 0; --R)
    Groups[R % 2].push_back(R);
  auto G = World.split("test", Groups);
  const auto &Mine = Groups[World.rank() % 2];
  EXPECT_EQ(G->size(), int(Mine.size()));
  EXPECT_EQ(Mine[G->rank()], World.rank());
  // A sendRecv ring inside the group passes the world rank of the left peer.
  float Out = float(World.rank()), In = -1;
  int Next = (G->rank() + 1) % G->size(), Prev = (G->rank() + G->size() - 1) % G->size();
  G->sendRecv(&Out, 1, Next, &In, 1, Prev);
  EXPECT_EQ(In, float(Mine[Prev]));
}

TEST(MpiComm, AllToAllVMovesVariableBlocks) {
  Communicator &W = test::world().world();
  int N = W.size(), R = W.rank();
  // Rank r sends (p + 1) copies of value 100*r + p to peer p.
  std::vector<size_t> SC(N), SO(N), RC(N), RO(N);
  std::vector<float> Send;
  for (int P = 0; P < N; ++P) {
    SO[P] = Send.size();
    SC[P] = P + 1;
    Send.insert(Send.end(), P + 1, float(100 * R + P));
  }
  for (int P = 0; P < N; ++P) {
    RC[P] = R + 1;
    RO[P] = P * (R + 1);
  }
  std::vector<float> Recv(N * (R + 1));
  W.allToAllV(Send.data(), SC, SO, Recv.data(), RC, RO);
  for (int P = 0; P < N; ++P)
    for (int I = 0; I <= R; ++I)
      EXPECT_EQ(Recv[RO[P] + I], float(100 * P + R));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_EQ(floatFromBf16(bf16FromFloat(1.0f)), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even (1).
  EXPECT_EQ(floatFromBf16(bf16FromFloat(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 x 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even (1 + 2^-6).
  EXPECT_EQ(floatFromBf16(bf16FromFloat(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Just above the tie rounds up.
  EXPECT_EQ(floatFromBf16(bf16FromFloat(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(floatFromBf16(bf16FromFloat(-2.5f)), -2.5f);
  float Inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatFromBf16(bf16FromFloat(Inf)), Inf);
  EXPECT_TRUE(std::isnan(floatFromBf16(bf16FromFloat(std::numeric_limits<float>::quiet_NaN()))));
  // The largest float rounds past bf16's largest finite value.
  EXPECT_EQ(floatFromBf16(bf16FromFloat(std::numeric_limits<float>::max())), Inf);
}

TEST(MpiComm, Bf16AllReduceRoundsEachPartialSum) {
  Communicator &W = test::world().world();
  // Values exact in bf16 whose sums are too: rank r holds r + 1 and -(r + 1) / 4.
  std::vector<uint16_t> V = {bf16FromFloat(float(W.rank() + 1)), bf16FromFloat(-float(W.rank() + 1) / 4)};
  W.allReduceSum(V.data(), V.size(), DType::BF16);
  float Total = float(W.size() * (W.size() + 1) / 2);
  EXPECT_EQ(floatFromBf16(V[0]), Total);
  EXPECT_EQ(floatFromBf16(V[1]), -Total / 4);
  // 257 is not a bf16 (8 significant bits): every partial sum is rounded, so
  // on two ranks 256 + 1 stays 256, where an fp32 sum would give 257.
  uint16_t X = bf16FromFloat(W.rank() == 0 ? 256.0f : 1.0f);
  W.allReduceSum(&X, 1, DType::BF16);
  if (W.size() <= 2) {
    EXPECT_EQ(floatFromBf16(X), 256.0f); // 257 is a tie between 256 and 258
  }
  // Otherwise the order of the partial sums decides (1 + 1 = 2 is exact).
  EXPECT_GE(floatFromBf16(X), 256.0f);
  EXPECT_LE(floatFromBf16(X), 256.0f + float(W.size()));
}

TEST(MpiComm, TypedCollectivesMoveWholeElements) {
  Communicator &W = test::world().world();
  int N = W.size(), R = W.rank();
  // int32 all-gather and reduce-scatter.
  std::vector<int32_t> Mine = {100 * R, -R}, All(2 * N);
  W.allGather(Mine.data(), All.data(), 2, DType::I32);
  for (int P = 0; P < N; ++P) {
    EXPECT_EQ(All[2 * P], 100 * P);
    EXPECT_EQ(All[2 * P + 1], -P);
  }
  std::vector<int64_t> Parts(N, int64_t(1) << 40), Slice(1);
  Parts[R] += R;
  W.reduceScatterSum(Parts.data(), Slice.data(), 1, DType::I64);
  EXPECT_EQ(Slice[0], (int64_t(1) << 40) * N + R);
  // bf16 all-to-all-v: rank r sends p + 1 copies of r + p / 8 to peer p.
  std::vector<size_t> SC(N), SO(N), RC(N), RO(N);
  std::vector<uint16_t> Send;
  for (int P = 0; P < N; ++P) {
    SO[P] = Send.size();
    SC[P] = P + 1;
    Send.insert(Send.end(), P + 1, bf16FromFloat(float(R) + float(P) / 8));
    RC[P] = R + 1;
    RO[P] = P * (R + 1);
  }
  std::vector<uint16_t> Recv(N * (R + 1));
  W.allToAllV(Send.data(), SC, SO, Recv.data(), RC, RO, DType::BF16);
  for (int P = 0; P < N; ++P)
    for (int I = 0; I <= R; ++I)
      EXPECT_EQ(floatFromBf16(Recv[RO[P] + I]), float(P) + float(R) / 8);
  // A bf16 ring step.
  uint16_t Out = bf16FromFloat(float(R)), In = 0;
  W.sendRecv(&Out, 1, (R + 1) % N, &In, 1, (R + N - 1) % N, DType::BF16);
  EXPECT_EQ(floatFromBf16(In), float((R + N - 1) % N));
}

TEST(SelfComm, TypedCopiesWholeElements) {
  auto Self = createSelfCommunicator("self");
  std::vector<uint16_t> In = {bf16FromFloat(1.5f), bf16FromFloat(-3.0f)}, Out(2);
  Self->allGather(In.data(), Out.data(), 2, DType::BF16);
  EXPECT_EQ(Out, In);
  std::vector<int64_t> A = {7, 8, 9}, B(3);
  Self->allToAllV(A.data(), {2}, {1}, B.data(), {2}, {0}, DType::I64);
  EXPECT_EQ(B[0], 8);
  EXPECT_EQ(B[1], 9);
}
