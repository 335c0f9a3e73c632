// Layer placement and Megatron-Core 1F1B / interleaved 1F1B schedules.
#include "moec/Layout/Pipeline.h"
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>

using namespace moec;

namespace {

using Ops = std::vector<ScheduledOp>;

ScheduledOp F(int64_t Mb, int64_t Chunk = 0) { return ScheduledOp{ScheduledOp::Forward, Mb, Chunk}; }
ScheduledOp B(int64_t Mb, int64_t Chunk = 0) { return ScheduledOp{ScheduledOp::Backward, Mb, Chunk}; }

std::string show(const Ops &O) {
  std::string S;
  for (const ScheduledOp &Op : O)
    S += (Op.K == ScheduledOp::Forward ? " F" : " B") + std::to_string(Op.Microbatch) + "." + std::to_string(Op.Chunk);
  return S;
}

PipelineInput input(int64_t Layers, int64_t PP, int64_t VPP, int64_t M) {
  PipelineInput In;
  In.DecoderLayers = Layers;
  In.PP = PP;
  In.VPP = VPP;
  In.Microbatches = M;
  return In;
}

PipelinePlan plan(const PipelineInput &In) {
  llvm::Expected<PipelinePlan> P = planPipeline(In);
  if (!P) {
    ADD_FAILURE() << llvm::toString(P.takeError());
    return PipelinePlan();
  }
  return std::move(*P);
}

std::string planError(const PipelineInput &In) {
  llvm::Expected<PipelinePlan> P = planPipeline(In);
  if (P)
    return "<no error>";
  return llvm::toString(P.takeError());
}

/// Runs every rank's op list against the data dependencies between virtual
/// stages (F(mb, v) after F(mb, v - 1); B(mb, v) after F(mb, v) and
/// B(mb, v + 1)), each rank in its own order; true if all ops complete.
bool runsWithoutDeadlock(const PipelinePlan &P) {
  int64_t Stages = P.PP * P.VPP;
  std::set<std::tuple<int, int64_t, int64_t>> Done; // (kind, mb, virtual stage)
  std::vector<size_t> Next(size_t(P.PP), 0);
  bool Progress = true;
  while (Progress) {
    Progress = false;
    for (int64_t R = 0; R < P.PP; ++R) {
      while (Next[R] < P.Schedule[R].size()) {
        const ScheduledOp &Op = P.Schedule[R][Next[R]];
        int64_t V = P.virtualStage(R, Op.Chunk);
        bool Ready;
        if (Op.K == ScheduledOp::Forward)
          Ready = V == 0 || Done.count({0, Op.Microbatch, V - 1});
        else
          Ready = Done.count({0, Op.Microbatch, V}) && (V == Stages - 1 || Done.count({1, Op.Microbatch, V + 1}));
        if (!Ready)
          break;
        Done.insert({Op.K == ScheduledOp::Forward ? 0 : 1, Op.Microbatch, V});
        ++Next[R];
        Progress = true;
      }
    }
  }
  for (int64_t R = 0; R < P.PP; ++R)
    if (Next[R] != P.Schedule[R].size())
      return false;
  return true;
}

} // namespace

namespace moec {
// Readable gtest output for schedules.
void PrintTo(const ScheduledOp &Op, std::ostream *OS) { *OS << show({Op}); }
} // namespace moec

//===----------------------------------------------------------------------===//
// Layer placement
//===----------------------------------------------------------------------===//

TEST(PipelinePlacement, DeepSeekV3Layout) {
  std::string Layout = "Et|(tt|)*30mL";
  PipelineInput In = input(61, 16, 1, 32);
  In.MtpLayers = 1;
  In.Layout = &Layout;
  PipelinePlan P = plan(In);
  EXPECT_EQ(P.PP, 16);
  EXPECT_EQ(P.VPP, 2); // 32 stages over PP = 16
  ASSERT_EQ(P.VirtualStages.size(), 32u);
  ASSERT_EQ(P.FirstLayer.size(), 32u);

  const LayoutStage &First = P.VirtualStages.front();
  EXPECT_TRUE(First.Embedding);
  EXPECT_FALSE(First.Loss);
  EXPECT_EQ(First.DecoderLayers, 1);
  EXPECT_EQ(First.MtpLayers, 0);
  const LayoutStage &Last = P.VirtualStages.back();
  EXPECT_FALSE(Last.Embedding);
  EXPECT_TRUE(Last.Loss);
  EXPECT_EQ(Last.DecoderLayers, 0);
  EXPECT_EQ(Last.MtpLayers, 1);
  for (size_t V = 1; V + 1 < 32; ++V) {
    EXPECT_EQ(P.VirtualStages[V].DecoderLayers, 2) << V;
    EXPECT_FALSE(P.VirtualStages[V].Embedding || P.VirtualStages[V].Loss) << V;
  }

  EXPECT_EQ(P.FirstLayer[0], 0);
  EXPECT_EQ(P.FirstLayer[1], 1);
  EXPECT_EQ(P.FirstLayer[2], 3);
  EXPECT_EQ(P.FirstLayer[16], 31);
  EXPECT_EQ(P.FirstLayer[30], 59);
  EXPECT_EQ(P.FirstLayer[31], 61);

  // Virtual stage 31 is chunk 1 of the last rank; 16 is chunk 1 of rank 0.
  EXPECT_EQ(P.rankOf(31), 15);
  EXPECT_EQ(P.chunkOf(31), 1);
  EXPECT_EQ(P.rankOf(16), 0);
  EXPECT_EQ(P.chunkOf(16), 1);
  EXPECT_EQ(P.virtualStage(15, 1), 31);

  // An explicit VPP that agrees with the layout is fine; one that does not is not.
  In.VPP = 2;
  EXPECT_EQ(plan(In).VPP, 2);
  In.VPP = 4;
  EXPECT_NE(planError(In).find("VPP = 4"), std::string::npos) << planError(In);
  // 32 stages do not go over PP = 5.
  In.VPP = 1;
  In.PP = 5;
  In.Microbatches = 5;
  EXPECT_NE(planError(In).find("not a multiple of PP = 5"), std::string::npos) << planError(In);
}

TEST(PipelinePlacement, UnevenLayout) {
  std::string Layout = "Ettt|tttt|tttt|ttL";
  PipelineInput In = input(13, 4, 1, 8);
  In.Layout = &Layout;
  PipelinePlan P = plan(In);
  EXPECT_EQ(P.VPP, 1);
  ASSERT_EQ(P.VirtualStages.size(), 4u);
  std::vector<int64_t> Layers;
  for (const LayoutStage &S : P.VirtualStages)
    Layers.push_back(S.DecoderLayers);
  EXPECT_EQ(Layers, (std::vector<int64_t>{3, 4, 4, 2}));
  EXPECT_EQ(P.FirstLayer, (std::vector<int64_t>{0, 3, 7, 11}));
  EXPECT_TRUE(P.VirtualStages[0].Embedding);
  EXPECT_TRUE(P.VirtualStages[3].Loss);
  EXPECT_EQ(P.Schedule.size(), 4u);
}

TEST(PipelinePlacement, EvenSplit) {
  PipelineInput In = input(16, 4, 2, 8);
  In.MtpLayers = 1;
  PipelinePlan P = plan(In);
  EXPECT_EQ(P.VPP, 2);
  ASSERT_EQ(P.VirtualStages.size(), 8u);
  for (const LayoutStage &S : P.VirtualStages)
    EXPECT_EQ(S.DecoderLayers, 2);
  EXPECT_EQ(P.FirstLayer, (std::vector<int64_t>{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_TRUE(P.VirtualStages[0].Embedding);
  EXPECT_FALSE(P.VirtualStages[0].Loss);
  EXPECT_TRUE(P.VirtualStages[7].Loss);
  EXPECT_EQ(P.VirtualStages[7].MtpLayers, 1);
  for (size_t V = 0; V < 7; ++V)
    EXPECT_EQ(P.VirtualStages[V].MtpLayers, 0);

  // PP = 1: one stage holds everything.
  PipelinePlan One = plan(input(7, 1, 1, 1));
  ASSERT_EQ(One.VirtualStages.size(), 1u);
  EXPECT_EQ(One.VirtualStages[0].DecoderLayers, 7);
  EXPECT_TRUE(One.VirtualStages[0].Embedding && One.VirtualStages[0].Loss);
  EXPECT_EQ(One.FirstLayer, (std::vector<int64_t>{0}));
}

TEST(PipelinePlacement, Errors) {
  // The parser's message comes through.
  std::string Unclosed = "Et|(tt|*3L";
  PipelineInput In = input(8, 2, 1, 2);
  In.Layout = &Unclosed;
  EXPECT_EQ(planError(In), "'(' is not closed in pipeline layout");
  std::string BadChar = "Etx|tL";
  In.Layout = &BadChar;
  EXPECT_NE(planError(In).find("unexpected 'x'"), std::string::npos) << planError(In);

  // A layout that does not match the model.
  std::string Short = "Ett|ttL";
  In.Layout = &Short;
  EXPECT_NE(planError(In).find("places 4 decoder layers, but the model has 8"), std::string::npos) << planError(In);
  std::string NoEmbedding = "tttt|ttttL";
  In.Layout = &NoEmbedding;
  EXPECT_NE(planError(In).find("embedding"), std::string::npos) << planError(In);
  std::string EarlyLoss = "EttttL|tttt";
  In.Layout = &EarlyLoss;
  EXPECT_NE(planError(In).find("loss"), std::string::npos) << planError(In);
  std::string Mtp = "Etttt|ttttmL";
  In.Layout = &Mtp;
  EXPECT_NE(planError(In).find("MTP"), std::string::npos) << planError(In);

  // Layers that do not split evenly.
  EXPECT_NE(planError(input(15, 4, 1, 4)).find("15 decoder layers do not split evenly over 4"), std::string::npos);
  EXPECT_NE(planError(input(16, 4, 3, 4)).find("over 12 virtual pipeline stages"), std::string::npos);

  // Nonsense sizes.
  EXPECT_NE(planError(input(4, 0, 1, 1)), "<no error>");
  EXPECT_NE(planError(input(4, 1, 1, 0)), "<no error>");
  EXPECT_NE(planError(input(4, 1, 2, 2)).find("needs PP > 1"), std::string::npos);
  EXPECT_NE(planError(input(1 << 20, 1 << 20, 1, 1 << 20)).find("more than"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

TEST(PipelineSchedule, OneF1BGoldenPP4M8) {
  PipelinePlan P = plan(input(8, 4, 1, 8));
  ASSERT_EQ(P.Schedule.size(), 4u);
  // Rank 0: 3 warm-up forwards, 5 steady rounds, 3 cool-down backwards.
  Ops Rank0 = {F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2), F(6), B(3), F(7), B(4), B(5), B(6), B(7)};
  // Rank 3 (last): no warm-up, strictly alternating.
  Ops Rank3 = {F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), F(4), B(4), F(5), B(5), F(6), B(6), F(7), B(7)};
  EXPECT_EQ(P.Schedule[0], Rank0) << show(P.Schedule[0]);
  EXPECT_EQ(P.Schedule[3], Rank3) << show(P.Schedule[3]);
  Ops Rank2 = {F(0), F(1), B(0), F(2), B(1), F(3), B(2), F(4), B(3), F(5), B(4), F(6), B(5), F(7), B(6), B(7)};
  EXPECT_EQ(P.Schedule[2], Rank2) << show(P.Schedule[2]);
  EXPECT_EQ(P.WarmupForwards, (std::vector<int64_t>{3, 2, 1, 0}));
  EXPECT_EQ(P.PeakInFlight, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_DOUBLE_EQ(P.BubbleFraction, 3.0 / 11.0);
  EXPECT_TRUE(runsWithoutDeadlock(P));
}

TEST(PipelineSchedule, OneF1BFewerMicrobatchesThanStages) {
  // M = 2 < PP = 4: warm-up is capped at M, so rank 0 runs F F B B.
  PipelinePlan P = plan(input(4, 4, 1, 2));
  EXPECT_EQ(P.Schedule[0], (Ops{F(0), F(1), B(0), B(1)})) << show(P.Schedule[0]);
  EXPECT_EQ(P.Schedule[1], (Ops{F(0), F(1), B(0), B(1)})) << show(P.Schedule[1]);
  EXPECT_EQ(P.Schedule[2], (Ops{F(0), F(1), B(0), B(1)})) << show(P.Schedule[2]); // W = 1
  EXPECT_EQ(P.Schedule[3], (Ops{F(0), B(0), F(1), B(1)})) << show(P.Schedule[3]);
  EXPECT_EQ(P.PeakInFlight, (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_TRUE(runsWithoutDeadlock(P));
}

TEST(PipelineSchedule, NoPipeline) {
  PipelinePlan P = plan(input(2, 1, 1, 1));
  ASSERT_EQ(P.Schedule.size(), 1u);
  EXPECT_EQ(P.Schedule[0], (Ops{F(0), B(0)}));
  EXPECT_EQ(P.PeakInFlight, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(P.BubbleFraction, 0.0);

  PipelinePlan Three = plan(input(2, 1, 1, 3));
  EXPECT_EQ(Three.Schedule[0], (Ops{F(0), B(0), F(1), B(1), F(2), B(2)}));
  EXPECT_EQ(Three.PeakInFlight, (std::vector<int64_t>{1}));
}

TEST(PipelineSchedule, InterleavedGoldenPP2VPP2M4) {
  PipelinePlan P = plan(input(8, 2, 2, 4));
  ASSERT_EQ(P.Schedule.size(), 2u);
  // Forward k: chunk (k / 2) mod 2, micro batch (k / 4) * 2 + k mod 2:
  //   (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1)   [F(mb, chunk)]
  // Backward k: the same micro batches, chunk 1 - that:
  //   (0,1) (1,1) (0,0) (1,0) (2,1) (3,1) (2,0) (3,0)
  // Rank 0 warm-up: (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4; rank 1: 0 + 2 = 2.
  Ops Rank0 = {F(0, 0), F(1, 0), F(0, 1), F(1, 1),                                      // warm-up
               F(2, 0), B(0, 1), F(3, 0), B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0),  // steady
               B(2, 1), B(3, 1), B(2, 0), B(3, 0)};                                     // cool-down
  Ops Rank1 = {F(0, 0), F(1, 0),                                                        // warm-up
               F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0),                    // steady
               F(3, 0), B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)}; // cool-down
  EXPECT_EQ(P.Schedule[0], Rank0) << show(P.Schedule[0]);
  EXPECT_EQ(P.Schedule[1], Rank1) << show(P.Schedule[1]);
  EXPECT_EQ(P.WarmupForwards, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(P.PeakInFlight, (std::vector<int64_t>{5, 3}));
  EXPECT_DOUBLE_EQ(P.BubbleFraction, 1.0 / 9.0);
  EXPECT_TRUE(runsWithoutDeadlock(P));
}

TEST(PipelineSchedule, InterleavedMicrobatchesMustGroup) {
  EXPECT_NE(planError(input(16, 4, 2, 6)).find("M = 6"), std::string::npos) << planError(input(16, 4, 2, 6));
  EXPECT_NE(planError(input(16, 4, 2, 2)).find("group"), std::string::npos) << planError(input(16, 4, 2, 2));
  EXPECT_EQ(planError(input(16, 4, 2, 12)), "<no error>");
}

TEST(PipelineSchedule, InterleavedGroupSize) {
  // Megatron's own example of the tunable table: PP 2, VPP 2, M 5, group 3:
  //   micro batch 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1.
  PipelineInput In = input(8, 2, 2, 5);
  In.MicrobatchGroupSize = 3;
  PipelinePlan P = plan(In);
  Ops Forwards;
  for (const ScheduledOp &Op : P.Schedule[1])
    if (Op.K == ScheduledOp::Forward)
      Forwards.push_back(Op);
  EXPECT_EQ(Forwards, (Ops{F(0, 0), F(1, 0), F(2, 0), F(0, 1), F(1, 1), F(2, 1), F(3, 0), F(4, 0), F(3, 1), F(4, 1)}))
      << show(Forwards);
  EXPECT_EQ(P.WarmupForwards, (std::vector<int64_t>{5, 3})); // (PP - r - 1) * 2 + (VPP - 1) * 3
  EXPECT_TRUE(runsWithoutDeadlock(P));
  // A last group of 1 < PP micro batches is refused, as is a group < PP.
  In.Microbatches = 4;
  EXPECT_NE(planError(In), "<no error>");
  In.MicrobatchGroupSize = 1;
  In.Microbatches = 4;
  EXPECT_NE(planError(In), "<no error>");
}

TEST(PipelineSchedule, InterleavedMEqualsPP) {
  // Current Megatron-Core: warm-up min((PP - r - 1) * 2 + (VPP - 1) * PP, M * VPP).
  PipelinePlan P = plan(input(8, 4, 2, 4));
  EXPECT_EQ(P.WarmupForwards, (std::vector<int64_t>{8, 8, 6, 4}));
  EXPECT_EQ(P.PeakInFlight, (std::vector<int64_t>{8, 8, 7, 5}));
  EXPECT_TRUE(runsWithoutDeadlock(P));
  // Older Megatron-Core: every forward is warm-up when M == PP.
  PipelineInput In = input(8, 4, 2, 4);
  In.LegacyAllWarmupWhenMEqualsPP = true;
  PipelinePlan Old = plan(In);
  EXPECT_EQ(Old.WarmupForwards, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(Old.PeakInFlight, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_TRUE(runsWithoutDeadlock(Old));
  EXPECT_EQ(Old.Schedule[0], P.Schedule[0]);
}

TEST(PipelineSchedule, InFlightPeaks) {
  // 1F1B with M >= PP: rank r holds PP - r micro batches at most.
  for (int64_t PP : {2, 4, 8})
    for (int64_t M : {PP, 2 * PP, 3 * PP + 1}) {
      PipelinePlan P = plan(input(PP, PP, 1, M));
      for (int64_t R = 0; R < PP; ++R)
        EXPECT_EQ(P.PeakInFlight[R], PP - R) << "PP=" << PP << " M=" << M << " r=" << R;
    }
  // Interleaved with M > PP: rank 0 holds PP * VPP + PP - 1 chunks, i.e.
  // 1 + (PP - 1) / (PP * VPP) times the layers of PP micro batches
  // (megatron-memory.md A.4); the last rank holds (VPP - 1) * PP + 1.
  for (int64_t PP : {2, 4, 8})
    for (int64_t VPP : {2, 3, 4}) {
      PipelinePlan P = plan(input(PP * VPP, PP, VPP, 2 * PP));
      EXPECT_EQ(P.PeakInFlight[0], PP * VPP + PP - 1) << "PP=" << PP << " VPP=" << VPP;
      EXPECT_EQ(P.PeakInFlight[PP - 1], (VPP - 1) * PP + 1) << "PP=" << PP << " VPP=" << VPP;
    }
}

TEST(PipelineSchedule, BubbleFraction) {
  EXPECT_DOUBLE_EQ(plan(input(8, 4, 1, 8)).BubbleFraction, 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(plan(input(8, 4, 2, 8)).BubbleFraction, 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(plan(input(16, 8, 2, 16)).BubbleFraction, 7.0 / 39.0);
  EXPECT_DOUBLE_EQ(plan(input(8, 1, 1, 8)).BubbleFraction, 0.0);
}

TEST(PipelineSchedule, Invariants) {
  int Checked = 0;
  for (int64_t PP = 1; PP <= 8; ++PP)
    for (int64_t VPP = 1; VPP <= 4; ++VPP)
      for (int64_t M = 1; M <= 24; ++M) {
        PipelineInput In = input(PP * VPP, PP, VPP, M);
        bool Valid = VPP == 1 || (PP > 1 && M >= PP && M % PP == 0);
        llvm::Expected<PipelinePlan> PE = planPipeline(In);
        if (!Valid) {
          EXPECT_FALSE(bool(PE)) << "PP=" << PP << " VPP=" << VPP << " M=" << M;
          if (!PE)
            llvm::consumeError(PE.takeError());
          continue;
        }
        ASSERT_TRUE(bool(PE)) << llvm::toString(PE.takeError()) << " PP=" << PP << " VPP=" << VPP << " M=" << M;
        const PipelinePlan &P = *PE;
        ++Checked;
        std::string Where = "PP=" + std::to_string(PP) + " VPP=" + std::to_string(VPP) + " M=" + std::to_string(M);
        ASSERT_EQ(P.Schedule.size(), size_t(PP)) << Where;
        ASSERT_EQ(P.PeakInFlight.size(), size_t(PP)) << Where;
        EXPECT_DOUBLE_EQ(P.BubbleFraction, double(PP - 1) / double(VPP * M + PP - 1)) << Where;
        for (int64_t R = 0; R < PP; ++R) {
          const Ops &O = P.Schedule[R];
          ASSERT_EQ(O.size(), size_t(2 * M * VPP)) << Where << " r=" << R;
          std::map<std::pair<int64_t, int64_t>, size_t> FwdAt, BwdAt;
          for (size_t I = 0; I < O.size(); ++I) {
            ASSERT_GE(O[I].Microbatch, 0);
            ASSERT_LT(O[I].Microbatch, M);
            ASSERT_GE(O[I].Chunk, 0);
            ASSERT_LT(O[I].Chunk, VPP);
            auto &At = O[I].K == ScheduledOp::Forward ? FwdAt : BwdAt;
            EXPECT_TRUE(At.emplace(std::make_pair(O[I].Microbatch, O[I].Chunk), I).second)
                << Where << " r=" << R << " repeats" << show({O[I]});
          }
          EXPECT_EQ(FwdAt.size(), size_t(M * VPP)) << Where << " r=" << R;
          EXPECT_EQ(BwdAt.size(), size_t(M * VPP)) << Where << " r=" << R;
          for (const auto &[Key, I] : BwdAt)
            EXPECT_LT(FwdAt.at(Key), I) << Where << " r=" << R << " B before F of mb " << Key.first;
          // Peak: the warm-up forwards plus the first steady-state forward.
          int64_t W = P.WarmupForwards[R];
          EXPECT_GE(P.PeakInFlight[R], 1) << Where;
          EXPECT_EQ(P.PeakInFlight[R], std::min(W + 1, M * VPP)) << Where << " r=" << R;
          if (R > 0) {
            EXPECT_LE(P.PeakInFlight[R], P.PeakInFlight[R - 1]) << Where << " r=" << R;
          }
        }
        EXPECT_TRUE(runsWithoutDeadlock(P)) << Where;
      }
  EXPECT_GT(Checked, 300);
}

// The in-flight mixes stand in for a walk of the schedule: for any
// non-negative bytes per model chunk, the largest mix-weighted sum must be
// the most bytes the walk ever holds.
TEST(PipelineSchedule, InFlightMixesGiveTheWalksPeak) {
  // Rank 0 of the golden schedule above holds chunk counts (3, 2) after its
  // warm-up and (4, 1) after F(3, 0); every later peak is held within one.
  EXPECT_EQ(plan(input(8, 2, 2, 4)).InFlightMixes[0], (std::vector<std::vector<int64_t>>{{3, 2}, {4, 1}}));
  std::mt19937_64 Rng(7);
  std::uniform_real_distribution<double> Size(0.0, 10.0);
  for (auto [PP, VPP, M] : {std::tuple<int64_t, int64_t, int64_t>{4, 1, 3},
                            {4, 1, 16},
                            {2, 2, 4},
                            {4, 2, 8},
                            {4, 3, 12},
                            {8, 4, 64},
                            {3, 5, 9},
                            {2, 40, 40},
                            {2, 254, 16}}) {
    PipelinePlan P = plan(input(PP * VPP * 2, PP, VPP, M));
    ASSERT_EQ(P.InFlightMixes.size(), size_t(PP));
    size_t Walked = 0; // ranks with too many mixes: the memory model walks
    for (const auto &Mixes : P.InFlightMixes) {
      EXPECT_LE(Mixes.size(), 64u);
      Walked += Mixes.empty();
    }
    if (VPP <= 5)
      EXPECT_EQ(Walked, 0u) << "PP " << PP << " VPP " << VPP << " M " << M;
    for (int Trial = 0; Trial < 20; ++Trial) {
      std::vector<double> Bytes;
      for (int64_t C = 0; C < VPP; ++C)
        Bytes.push_back(Trial == 0 ? 1.0 : Size(Rng));
      for (int64_t Rank = 0; Rank < PP; ++Rank) {
        double Held = 0, Walk = 0;
        for (const ScheduledOp &Op : P.Schedule[size_t(Rank)]) {
          Held += (Op.K == ScheduledOp::Forward ? 1 : -1) * Bytes[size_t(Op.Chunk)];
          Walk = std::max(Walk, Held);
        }
        if (P.InFlightMixes[size_t(Rank)].empty())
          continue;
        double Mixed = 0;
        for (const std::vector<int64_t> &Mix : P.InFlightMixes[size_t(Rank)]) {
          double Sum = 0;
          for (int64_t C = 0; C < VPP; ++C)
            Sum += double(Mix[size_t(C)]) * Bytes[size_t(C)];
          Mixed = std::max(Mixed, Sum);
        }
        EXPECT_NEAR(Mixed, Walk, 1e-9) << "PP " << PP << " VPP " << VPP << " M " << M << " rank " << Rank;
        if (Trial == 0)
          EXPECT_EQ(int64_t(Mixed), P.PeakInFlight[size_t(Rank)]);
      }
    }
  }
}
