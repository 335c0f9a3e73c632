//===- TimedCommunicatorTest.cpp - The trainer's communication clock
//-------===//
//
// The decorator must be transparent (same results as the communicator it
// wraps) and must charge waiting for a slow peer to the clock, including the
// wait() of non-blocking requests.
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
  TimedCommunicator W(test::world().world(), Clock);
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
  TimedCommunicator W(test::world().world(), Clock);
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
}
