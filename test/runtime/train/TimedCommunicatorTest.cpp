//===- TimedCommunicatorTest.cpp - The trainer's communication clock
//-------===//
//
// The decorator must be transparent (same results as the communicator it
// wraps) and must charge waiting for a slow peer to the clock, including the
// wait() of non-blocking requests, under the part of the step its group
// carries.
//
//===----------------------------------------------------------------------===//
#include "train/TimedCommunicator.h"
#include "MpiTestEnv.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

using namespace moert;

TEST(TimedCommunicator, ForwardsCollectives) {
  CommClock Clock;
  TimedCommunicator W(test::world().world(), Clock, CommPart::Data);
  EXPECT_EQ(W.rank(), test::world().rank());
  EXPECT_EQ(W.size(), test::world().size());
  std::vector<float> V(4, float(W.rank() + 1));
  W.allReduceSum(V.data(), V.size());
  for (float X : V)
    EXPECT_EQ(X, float(W.size() * (W.size() + 1) / 2));
  std::vector<float> All(size_t(W.size()));
  float Mine = float(10 * W.rank());
  W.allGather(&Mine, All.data(), 1);
  for (int R = 0; R < W.size(); ++R)
    EXPECT_EQ(All[size_t(R)], float(10 * R));
  EXPECT_EQ(Clock.Calls, 2);
}

TEST(TimedCommunicator, ChargesWaitingForASlowPeer) {
  CommClock Clock;
  TimedCommunicator W(test::world().world(), Clock, CommPart::Expert);
  if (W.size() < 2)
    GTEST_SKIP() << "needs a peer";
  // Rank 0 arrives 200 ms late: everyone else waits inside the barrier.
  if (W.rank() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  W.barrier();
  if (W.rank() != 0) {
    EXPECT_GT(Clock.Seconds, 0.1);
  }
  // Non-blocking: rank 1 posts its receive at once, rank 0 sends late; the
  // wait is charged.
  double Before = Clock.Seconds;
  float X = -1;
  if (W.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    float Y = 7;
    W.isend(&Y, 1, 1, 3)->wait();
  } else if (W.rank() == 1) {
    std::unique_ptr<Request> R = W.irecv(&X, 1, 0, 3);
    R->wait();
    EXPECT_EQ(X, 7.0f);
    EXPECT_GT(Clock.Seconds - Before, 0.1);
  }
  W.barrier();
  // Every second went to the group's part, none to the others.
  EXPECT_DOUBLE_EQ(Clock.PartSeconds[size_t(CommPart::Expert)], Clock.Seconds);
  for (CommPart P : {CommPart::Tensor, CommPart::Context, CommPart::Data, CommPart::Pipeline})
    EXPECT_EQ(Clock.PartSeconds[size_t(P)], 0.0);
}

TEST(TimedCommunicator, GroupsGoToThePartThePlanPrices) {
  EXPECT_EQ(commPartOfGroup("tp"), CommPart::Tensor);
  EXPECT_EQ(commPartOfGroup("etp"), CommPart::Tensor);
  EXPECT_EQ(commPartOfGroup("cp"), CommPart::Context);
  EXPECT_EQ(commPartOfGroup("ep"), CommPart::Expert);
  EXPECT_EQ(commPartOfGroup("tp-cp"), CommPart::Expert);
  EXPECT_EQ(commPartOfGroup("pp"), CommPart::Pipeline);
  for (const char *Kind : {"dp", "dp-cp", "edp", "embedding", "world"})
    EXPECT_EQ(commPartOfGroup(Kind), CommPart::Data) << Kind;
}
