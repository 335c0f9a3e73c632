//===- CommTest.cpp - The MPI communicator against hand-computed results --===//
#include "MpiTestEnv.h"

#include <gtest/gtest.h>

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
