//===- PipelineExecutorTest.cpp - Pipeline schedules over MPI ---------------===//
//
// The world is the pp group. Virtual stage v maps x to s_v * x + v with
// s_v = 1 + v / 4 (its backward multiplies the gradient by s_v), so the
// pipeline's outputs and input gradients are known in closed form: any
// message delivered to the wrong op, lost, or mixed up between micro batches
// or chunks changes them.
//
//===----------------------------------------------------------------------===//
#include "parallel/pp/PipelineExecutor.h"
#include "MpiTestEnv.h"
#include "comm/ForwardingComm.h"
#include "moec/Layout/Pipeline.h"

#include <gtest/gtest.h>
#include <map>
#include <set>

using namespace moert;

namespace {

class ToyStage : public PipelineStage {
public:
  ToyStage(int Rank, int PP, int Vpp, int64_t N) : Rank(Rank), PP(PP), Vpp(Vpp), N(N) {}

  static float scale(int V) { return 1.0f + 0.25f * float(V); }
  static float input(int64_t Mb, int64_t I) { return float(Mb) + 0.5f * float(I % 11); }
  static float lossGrad(int64_t Mb, int64_t I) { return 1.0f + float(Mb) + 0.1f * float(I % 7); }

  Tensor forward(int64_t Mb, int Chunk, Tensor *In) override {
    int V = Chunk * PP + Rank;
    EXPECT_EQ(In == nullptr, V == 0) << "v" << V;
    EXPECT_TRUE(Forwarded.insert({Mb, Chunk}).second);
    Tensor Y({N});
    for (int64_t I = 0; I < N; ++I) {
      float X = In ? (*In)[I] : input(Mb, I);
      Y[I] = scale(V) * X + float(V);
    }
    if (V == PP * Vpp - 1) {
      Outputs[Mb] = Y;
      return Tensor();
    }
    return Y;
  }

  Tensor backward(int64_t Mb, int Chunk, Tensor *OutGrad) override {
    int V = Chunk * PP + Rank;
    EXPECT_EQ(OutGrad == nullptr, V == PP * Vpp - 1) << "v" << V;
    EXPECT_TRUE(Forwarded.count({Mb, Chunk}))
        << "backward of micro batch " << Mb << " chunk " << Chunk << " before its forward";
    Tensor G({N});
    for (int64_t I = 0; I < N; ++I)
      G[I] = scale(V) * (OutGrad ? (*OutGrad)[I] : lossGrad(Mb, I));
    if (V == 0) {
      InputGrads[Mb] = G;
      return Tensor();
    }
    return G;
  }

  std::vector<int64_t> activationShape(int64_t, int) override { return {N}; }

  int Rank, PP, Vpp;
  int64_t N;
  std::set<std::pair<int64_t, int>> Forwarded;
  std::map<int64_t, Tensor> Outputs, InputGrads;
};

std::vector<PipelineOp> convert(const std::vector<moec::ScheduledOp> &Ops) {
  std::vector<PipelineOp> Out;
  for (const moec::ScheduledOp &Op : Ops)
    Out.push_back({Op.K == moec::ScheduledOp::Forward ? PipelineOp::Forward : PipelineOp::Backward, Op.Microbatch,
                   int(Op.Chunk)});
  return Out;
}

/// The world with NCCL's matching: every message travels with one tag, so
/// messages between a pair match in posting order, whatever tag the
/// executor gives them (MPI's non-overtaking rule for one tag).
class TaglessComm final : public ForwardingCommunicator {
public:
  using ForwardingCommunicator::ForwardingCommunicator;

protected:
  std::unique_ptr<Request> doIsend(const void *D, size_t N, int Dest, int, DType T) override {
    return Inner.isend(D, N, Dest, /*Tag=*/0, T);
  }
  std::unique_ptr<Request> doIrecv(void *D, size_t N, int Src, int, DType T) override {
    return Inner.irecv(D, N, Src, /*Tag=*/0, T);
  }
};

/// Runs Steps steps of the schedules (one per rank) and checks the closed
/// form, over MPI with tags and again with NCCL's tagless matching.
void runAndCheck(const PipelineSchedule &Schedules, int Vpp, int64_t M, int64_t N, int Steps = 1,
                 int64_t ExpectPeak = -1) {
  Communicator &World = test::world().world();
  TaglessComm Tagless(World);
  const int PP = World.size(), Rank = World.rank(), V = PP * Vpp;
  const std::vector<PipelineOp> &Ops = Schedules[size_t(Rank)];
  for (int Step = 0; Step < 2 * Steps; ++Step) {
    Communicator &Pp = Step % 2 ? static_cast<Communicator &>(Tagless) : World;
    SCOPED_TRACE(Step % 2 ? "messages matched in posting order" : "messages matched by tag");
    ToyStage Stage(Rank, PP, Vpp, N);
    PipelineExecutor Exec(Pp, Vpp, Stage);
    int64_t Heartbeats = 0;
    Exec.runStep(Schedules, [&] { ++Heartbeats; });
    EXPECT_EQ(Heartbeats, int64_t(Ops.size()));
    if (ExpectPeak >= 0) {
      EXPECT_EQ(Exec.lastStats().PeakInFlight, ExpectPeak);
    }
    EXPECT_EQ(int64_t(Stage.Forwarded.size()), M * Vpp);
    if (Rank == PP - 1) { // holds the last virtual stage
      ASSERT_EQ(int64_t(Stage.Outputs.size()), M);
      for (int64_t Mb = 0; Mb < M; ++Mb)
        for (int64_t I = 0; I < N; ++I) {
          float X = ToyStage::input(Mb, I);
          for (int S = 0; S < V; ++S)
            X = ToyStage::scale(S) * X + float(S);
          ASSERT_NEAR(Stage.Outputs[Mb][I], X, 1e-5f * std::abs(X)) << "micro batch " << Mb << " element " << I;
        }
    }
    if (Rank == 0) { // holds virtual stage 0
      ASSERT_EQ(int64_t(Stage.InputGrads.size()), M);
      for (int64_t Mb = 0; Mb < M; ++Mb)
        for (int64_t I = 0; I < N; ++I) {
          float G = ToyStage::lossGrad(Mb, I);
          for (int S = 0; S < V; ++S)
            G *= ToyStage::scale(S);
          ASSERT_NEAR(Stage.InputGrads[Mb][I], G, 1e-5f * std::abs(G)) << "micro batch " << Mb << " element " << I;
        }
    }
  }
}

/// The planner's schedule for this world as the pp group.
moec::PipelinePlan plannerSchedule(int Vpp, int64_t M) {
  moec::PipelineInput In;
  In.PP = test::world().size();
  In.VPP = Vpp;
  In.DecoderLayers = In.PP * Vpp;
  In.Microbatches = M;
  llvm::Expected<moec::PipelinePlan> P = moec::planPipeline(In);
  if (!P) {
    ADD_FAILURE() << llvm::toString(P.takeError());
    return moec::PipelinePlan();
  }
  return std::move(*P);
}

void runPlanner(int Vpp, int64_t M, int64_t N, int Steps = 1) {
  moec::PipelinePlan P = plannerSchedule(Vpp, M);
  int Rank = test::world().rank();
  ASSERT_EQ(P.Schedule.size(), size_t(test::world().size()));
  PipelineSchedule Schedules;
  for (const std::vector<moec::ScheduledOp> &RankOps : P.Schedule)
    Schedules.push_back(convert(RankOps));
  runAndCheck(Schedules, Vpp, M, N, Steps, P.PeakInFlight[size_t(Rank)]);
}

TEST(PipelineExecutor, OneFOneB) {
  int PP = test::world().size();
  for (int64_t M : {int64_t(1), int64_t(PP), int64_t(2 * PP + 1)})
    runPlanner(1, M, 7);
}

TEST(PipelineExecutor, RepeatedSteps) { runPlanner(1, 4, 5, /*Steps=*/3); }

TEST(PipelineExecutor, Interleaved) {
  int PP = test::world().size();
  if (PP == 1)
    GTEST_SKIP() << "interleaving needs pp > 1";
  for (int Vpp : {2, 3})
    for (int64_t M : {int64_t(PP), int64_t(2 * PP)})
      runPlanner(Vpp, M, 6);
}

// Messages far past MPI's eager limit travel by rendezvous: a blocking send
// would deadlock 1F1B's steady state, where neighbours send to each other.
TEST(PipelineExecutor, LargeMessages) {
  int PP = test::world().size();
  runPlanner(1, 2 * PP, 100000);
  if (PP > 1)
    runPlanner(2, 2 * PP, 100000);
}

// GPipe order, hand-written: every forward of chunk 0, then chunk 1, ...,
// then the backwards in reverse. Many messages in flight at once.
TEST(PipelineExecutor, AllForwardsFirst) {
  for (int Vpp : {1, 2}) {
    const int64_t M = 5;
    std::vector<PipelineOp> Ops;
    for (int C = 0; C < Vpp; ++C)
      for (int64_t Mb = 0; Mb < M; ++Mb)
        Ops.push_back({PipelineOp::Forward, Mb, C});
    for (int C = Vpp - 1; C >= 0; --C)
      for (int64_t Mb = 0; Mb < M; ++Mb)
        Ops.push_back({PipelineOp::Backward, Mb, C});
    runAndCheck(PipelineSchedule(size_t(test::world().size()), Ops), Vpp, M, 9, 1, M * Vpp);
  }
}

// Neighbours that take the micro batches in opposite orders (all forwards,
// then all backwards; odd ranks from the last micro batch down): a rank
// needs its messages in the reverse of the order they are sent, which
// posting-order matching (NCCL) only survives because receives are posted
// in the sender's order.
TEST(PipelineExecutor, NeighboursInOppositeOrders) {
  const int PP = test::world().size();
  const int64_t M = 4;
  PipelineSchedule Schedules(static_cast<size_t>(PP));
  for (int R = 0; R < PP; ++R) {
    for (PipelineOp::Kind K : {PipelineOp::Forward, PipelineOp::Backward})
      for (int64_t I = 0; I < M; ++I)
        Schedules[size_t(R)].push_back({K, R % 2 ? M - 1 - I : I, 0});
  }
  runAndCheck(Schedules, 1, M, 5, 1, M);
}

TEST(PipelineExecutor, TagsAreDistinctAndInRange) {
  std::set<int> Seen;
  const int Vpp = 4;
  for (int64_t Mb = 0; Mb < 1000; ++Mb)
    for (int C = 0; C < Vpp; ++C)
      for (bool B : {false, true}) {
        int Tag = PipelineExecutor::tagFor(Mb, C, Vpp, B);
        EXPECT_GE(Tag, 0);
        EXPECT_LT(Tag, 32767);
        EXPECT_TRUE(Seen.insert(Tag).second);
      }
  // Past the bound tags wrap instead of exceeding MPI's limit.
  EXPECT_LT(PipelineExecutor::tagFor(int64_t(1) << 40, 3, Vpp, true), 32767);
}

} // namespace
