//===- ReportTest.cpp - The HTML plan report ------------------------------===//
//
// The schedule laid out in time against hand-timed 1F1B, and the report's
// figures for known plans: one bar group per pipeline stage and the HBM
// line, one row per pipeline rank with that rank's forward and backward
// ops, one cell per rank in each group panel, the step-time parts, the sweep
// points as `moec sweep` decides them, and escaped recipe text.
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Emit/Sweep.h"
#include "moec/Report/HtmlReport.h"
#include "moec/Report/Timeline.h"
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include <cmath>
#include <gtest/gtest.h>

using namespace moec;

namespace {

const char *OneF1B = R"(
recipe tiny {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 4 }
  seq_len = 64
  batch { micro = 1; global = 8 }
  parallel { tp = 1; pp = 2; ep = 2; cp = 2 }
  precision = bf16
}
)";

const char *Interleaved = R"(
recipe inter {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 2 }
  seq_len = 32
  batch { micro = 2; global = 16 }
  parallel { tp = 1; pp = 2; vpp = 2; ep = 1; order = tp_cp_ep_pp_dp }
  recompute = selective(core_attn, moe_act)
}
)";

// The sweep of test/lit/plan/sweep.test: ep = 8 fits, ep = 2 runs out of
// memory, ep = 3 does not divide the experts.
const char *Sweep = R"(
recipe s {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 3 }
  seq_len = 4K
  batch { micro = 1; global = 48 }
  parallel { ep = sweep [2, 3, 8] }
}
)";

struct Compiled {
  Compiled() : Diags(SM), S(Diags) {}
  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  Sema S;
  std::vector<std::pair<Recipe, std::string>> Points;
};

std::unique_ptr<Compiled> compile(const char *Text, bool RunRules) {
  auto C = std::make_unique<Compiled>();
  C->S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "test.moe"));
  for (Recipe &R : C->S.analyze()) {
    if (RunRules)
      runRules(R, C->Diags, /*UsePlanner=*/true);
    C->Points.push_back({std::move(R), "test.moe"});
  }
  return C;
}

Plan planOf(const char *Text) {
  std::unique_ptr<Compiled> C = compile(Text, false);
  EXPECT_FALSE(C->Diags.hasErrors());
  EXPECT_EQ(C->Points.size(), 1u);
  if (C->Points.empty())
    return Plan();
  llvm::Expected<Plan> P = buildPlan(C->Points.front().first, "test.moe");
  EXPECT_TRUE(bool(P));
  if (!P) {
    llvm::consumeError(P.takeError());
    return Plan();
  }
  return std::move(*P);
}

size_t occurrences(llvm::StringRef Text, llvm::StringRef Needle) { return Text.count(Needle); }

/// The text from the element that starts with Open up to the next Close.
llvm::StringRef section(llvm::StringRef Page, llvm::StringRef Open, llvm::StringRef Close) {
  if (!Page.contains(Open))
    return "";
  llvm::StringRef From = Page.drop_front(Page.find(Open));
  return From.take_front(From.find(Close)); // all of it when Close is missing
}

/// The value of the first attribute Name="..." in Text.
llvm::StringRef attribute(llvm::StringRef Text, llvm::StringRef Name) {
  std::string Open = Name.str() + "=\"";
  size_t At = Text.find(Open);
  if (At == llvm::StringRef::npos)
    return "";
  llvm::StringRef Value = Text.drop_front(At + Open.size());
  return Value.take_front(Value.find('"'));
}

std::string figure(void (*Write)(const Plan &, llvm::raw_ostream &), const Plan &P) {
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  Write(P, OS);
  return std::move(OS.str());
}

TEST(ReportTimeline, OneF1BByHand) {
  // PP = 2, M = 3, forward 1, backward 2. Rank 0: F0 F1 B0 F2 B1 B2;
  // rank 1: F0 B0 F1 B1 F2 B2. Timed by hand from the dependencies.
  PipelinePlan P;
  P.PP = 2;
  P.Microbatches = 3;
  using K = ScheduledOp::Kind;
  P.Schedule = {{{K::Forward, 0, 0},
                 {K::Forward, 1, 0},
                 {K::Backward, 0, 0},
                 {K::Forward, 2, 0},
                 {K::Backward, 1, 0},
                 {K::Backward, 2, 0}},
                {{K::Forward, 0, 0},
                 {K::Backward, 0, 0},
                 {K::Forward, 1, 0},
                 {K::Backward, 1, 0},
                 {K::Forward, 2, 0},
                 {K::Backward, 2, 0}}};
  llvm::Expected<Timeline> T = layOutSchedule(P, OpDurations::uniform(2));
  ASSERT_TRUE(bool(T)) << llvm::toString(T.takeError());
  std::vector<std::pair<double, double>> Rank0, Rank1;
  for (const TimedOp &O : T->PerRank[0])
    Rank0.push_back({O.Start, O.End});
  for (const TimedOp &O : T->PerRank[1])
    Rank1.push_back({O.Start, O.End});
  EXPECT_EQ(Rank0, (std::vector<std::pair<double, double>>{{0, 1}, {1, 2}, {4, 6}, {6, 7}, {7, 9}, {10, 12}}));
  EXPECT_EQ(Rank1, (std::vector<std::pair<double, double>>{{1, 2}, {2, 4}, {4, 5}, {5, 7}, {7, 8}, {8, 10}}));
  EXPECT_DOUBLE_EQ(T->Makespan, 12);
  EXPECT_DOUBLE_EQ(T->IdleFraction, 0.25); // (PP - 1) / (M + PP - 1) with these durations
}

TEST(ReportTimeline, PlannedSchedulesRunToTheEnd) {
  for (const char *Text : {OneF1B, Interleaved}) {
    Plan P = planOf(Text);
    llvm::Expected<Timeline> T = layOutSchedule(P.Pipeline, OpDurations::uniform(P.Pipeline.PP * P.Pipeline.VPP));
    ASSERT_TRUE(bool(T)) << llvm::toString(T.takeError());
    for (size_t R = 0; R < T->PerRank.size(); ++R) {
      ASSERT_EQ(T->PerRank[R].size(), P.Pipeline.Schedule[R].size());
      for (size_t I = 1; I < T->PerRank[R].size(); ++I)
        EXPECT_GE(T->PerRank[R][I].Start, T->PerRank[R][I - 1].End);
    }
    // Every op runs once: 3 units per micro batch and chunk on every rank.
    double Busy = double(P.Pipeline.Microbatches * P.Pipeline.VPP * 3);
    EXPECT_GE(T->Makespan, Busy);
  }
}

TEST(ReportTimeline, DeadlockIsAnError) {
  PipelinePlan P;
  P.PP = 2;
  P.Microbatches = 1;
  using K = ScheduledOp::Kind;
  // Rank 0 waits for a backward that rank 1 only runs after a forward
  // rank 0 has not sent.
  P.Schedule = {{{K::Backward, 0, 0}, {K::Forward, 0, 0}}, {{K::Forward, 0, 0}, {K::Backward, 0, 0}}};
  llvm::Expected<Timeline> T = layOutSchedule(P, OpDurations::uniform(2));
  ASSERT_FALSE(bool(T));
  EXPECT_NE(llvm::toString(T.takeError()).find("deadlocks"), std::string::npos);
}

TEST(ReportFigures, MemoryHasABarGroupPerStageAndTheHbmLine) {
  Plan P = planOf(OneF1B);
  std::string Fig = figure(writeMemoryFigure, P);
  ASSERT_EQ(P.Memory.PerStage.size(), 2u);
  EXPECT_EQ(occurrences(Fig, "<g class=\"stage"), 2u);
  EXPECT_EQ(occurrences(Fig, "data-stage=\"0\""), 1u);
  EXPECT_EQ(occurrences(Fig, "data-stage=\"1\""), 1u);
  EXPECT_EQ(occurrences(Fig, "<line class=\"hbm\""), 1u);
  // One segment per non-empty category of each stage.
  for (size_t S = 0; S < 2; ++S) {
    size_t NonZero = 0;
    for (const auto &Item : P.Memory.PerStage[S].items())
      NonZero += Item.second > 0;
    llvm::StringRef Bar = section(Fig, "data-stage=\"" + std::to_string(S) + "\"", "</g>");
    EXPECT_EQ(occurrences(Bar, "class=\"seg\""), NonZero) << "stage " << S;
    EXPECT_GT(NonZero, 2u);
  }
}

TEST(ReportFigures, ScheduleHasARowPerRankWithItsOps) {
  for (const char *Text : {OneF1B, Interleaved}) {
    Plan P = planOf(Text);
    std::string Fig = figure(writeScheduleFigure, P);
    ASSERT_EQ(occurrences(Fig, "<g class=\"pp-rank\""), size_t(P.Pipeline.PP));
    for (int64_t R = 0; R < P.Pipeline.PP; ++R) {
      size_t Fwd = 0, Bwd = 0;
      for (const ScheduledOp &Op : P.Pipeline.Schedule[size_t(R)])
        (Op.K == ScheduledOp::Forward ? Fwd : Bwd)++;
      EXPECT_EQ(Fwd, size_t(P.Pipeline.Microbatches * P.Pipeline.VPP));
      llvm::StringRef Row = section(Fig, "data-rank=\"" + std::to_string(R) + "\"", "</g>\n");
      EXPECT_EQ(occurrences(Row, "class=\"op fwd\""), Fwd) << "rank " << R;
      EXPECT_EQ(occurrences(Row, "class=\"op bwd\""), Bwd) << "rank " << R;
    }
    // 1F1B with PP = 2 idles on both ranks; the drawing says whose times.
    EXPECT_GT(occurrences(Fig, "class=\"bubble\""), 0u);
    EXPECT_NE(Fig.find("the planner&#39;s per stage and chunk"), std::string::npos);
    EXPECT_EQ(occurrences(Fig, "class=\"steady\""), 0u); // few ops: every one drawn
  }
}

TEST(ReportFigures, LargeSchedulesDrawTheirSteadyStateAsABand) {
  Plan P = planOf(OneF1B);
  PipelineInput In;
  In.DecoderLayers = 4;
  In.PP = 2;
  // 2 ranks x 2 ops x M: past the detail limit, then past the drawing limit.
  for (int64_t M : {int64_t(MaxDetailedScheduleOps / 4 + 1), int64_t(MaxDrawnScheduleOps / 4 + 1)}) {
    In.Microbatches = M;
    llvm::Expected<PipelinePlan> Pipe = planPipeline(In);
    ASSERT_TRUE(bool(Pipe)) << llvm::toString(Pipe.takeError());
    P.Pipeline = std::move(*Pipe);
    std::string Fig = figure(writeScheduleFigure, P);
    bool Drawn = size_t(4 * M) <= MaxDrawnScheduleOps;
    EXPECT_EQ(Fig.find("more than this page draws") != std::string::npos, !Drawn) << M;
    if (!Drawn)
      continue;
    // Warm-up and cool-down keep their boxes; the rest of each rank is one
    // band whose op count makes up the schedule.
    ASSERT_EQ(occurrences(Fig, "<g class=\"steady\""), 2u) << M;
    for (int64_t R = 0; R < 2; ++R) {
      llvm::StringRef Row = section(Fig, "data-rank=\"" + std::to_string(R) + "\"", "</g>\n");
      size_t Boxes = occurrences(Row, "class=\"op fwd\"") + occurrences(Row, "class=\"op bwd\"");
      EXPECT_LT(Boxes, 16u) << "rank " << R;
      llvm::StringRef Ops = attribute(Row, "data-ops");
      size_t Banded = 0;
      ASSERT_FALSE(Ops.getAsInteger(10, Banded)) << Ops.str();
      EXPECT_EQ(Boxes + Banded, P.Pipeline.Schedule[size_t(R)].size()) << "rank " << R;
    }
    // Ops lose their hover text; the two bands keep theirs.
    EXPECT_EQ(occurrences(Fig, "<title>"), 2u) << M;
  }
}

TEST(ReportFigures, ScheduleBoxesTakeThePlannersStageTimes) {
  Plan P = planOf(OneF1B);
  const StepTimeBreakdown &T = P.Time;
  ASSERT_EQ(T.StageForwardSec.size(), 2u);
  std::string Fig = figure(writeScheduleFigure, P);
  EXPECT_EQ(Fig.find("equal units"), std::string::npos);
  // The last stage's backward box is as much wider than its forward box as
  // the planner's times say (first op of rank 1 is F0, then B0).
  llvm::StringRef Row = section(Fig, "data-rank=\"1\"", "</g>\n");
  auto widthOf = [](llvm::StringRef Op) {
    llvm::StringRef W = attribute(Op, "width");
    double D = 0;
    EXPECT_FALSE(W.getAsDouble(D)) << W.str();
    return D;
  };
  double Fwd = widthOf(section(Row, "class=\"op fwd\"", "</g>"));
  double Bwd = widthOf(section(Row, "class=\"op bwd\"", "</g>"));
  EXPECT_NEAR(Bwd / Fwd, T.StageBackwardSec[1] / T.StageForwardSec[1], 0.05);
}

TEST(ReportFigures, GridHasACellPerRankInEveryPanel) {
  Plan P = planOf(OneF1B);
  ASSERT_TRUE(P.Grid);
  int64_t World = P.Grid->Dense.worldSize();
  ASSERT_EQ(World, 8);
  std::string Fig = figure(writeGridFigure, P);
  for (const char *Kind : {"tp", "cp", "ep", "dp", "pp"}) {
    llvm::StringRef Panel = section(Fig, std::string("data-group=\"") + Kind + "\"", "</svg>");
    ASSERT_FALSE(Panel.empty()) << Kind;
    EXPECT_EQ(occurrences(Panel, "class=\"rank\""), size_t(World)) << Kind;
  }
  // cp = 2: ranks 0 and 1 share a cp group (tp = 1, cp fastest), rank 2 is
  // in the next one; their cells say so.
  llvm::StringRef Cp = section(Fig, "data-group=\"cp\"", "</svg>");
  EXPECT_TRUE(Cp.contains("data-rank=\"0\" data-group-index=\"0\""));
  EXPECT_TRUE(Cp.contains("data-rank=\"1\" data-group-index=\"0\""));
  EXPECT_TRUE(Cp.contains("data-rank=\"2\" data-group-index=\"1\""));
  // tp = 1: every rank alone, drawn grey.
  llvm::StringRef Tp = section(Fig, "data-group=\"tp\"", "</svg>");
  EXPECT_EQ(occurrences(Tp, "#d9d9d9"), size_t(World));
}

TEST(ReportFigures, StepTimeHasEveryNonZeroPart) {
  Plan P = planOf(OneF1B);
  std::string Fig = figure(writeStepTimeFigure, P);
  const StepTimeBreakdown &T = P.Time;
  size_t NonZero = 0;
  for (double S : {T.Compute, T.Recompute, T.TensorParallel, T.ContextParallel, T.ExpertParallel, T.PipelineP2P, T.Host,
                   T.Bubble, T.DataParallel, T.Optimizer})
    NonZero += S > 0;
  EXPECT_EQ(occurrences(Fig, "<g class=\"part\""), NonZero);
  EXPECT_GT(T.Bubble, 0);
  EXPECT_NE(Fig.find("data-part=\"bubble\""), std::string::npos);
}

/// Steps whose measured time is Factor x the plan's (the first a slow
/// warm-up), the loss falling; every record carries the plan's prediction.
ReportRun runOf(const Plan &P, double Factor, int Steps) {
  ReportRun Run{"steps.jsonl", {}};
  for (int K = 1; K <= Steps; ++K) {
    StepRecord S;
    S.Step = K;
    S.Loss = 8.0 / K;
    S.StepTimeSeconds = P.Time.StepTime * Factor * (K == 1 ? 3 : 1);
    S.TokensPerSecond = double(P.R.GlobalBatch * P.R.SeqLen) / S.StepTimeSeconds;
    S.PeakBytes = int64_t(0.5e9);
    S.PredictedStepSeconds = P.Time.StepTime;
    Run.Steps.push_back(S);
  }
  return Run;
}

std::string ratioOf(const std::string &Fig, const std::string &Measure) {
  std::string Key = "data-measure=\"" + Measure + "\" data-ratio=\"";
  size_t At = Fig.find(Key);
  if (At == std::string::npos)
    return "missing";
  At += Key.size();
  return Fig.substr(At, Fig.find('"', At) - At);
}

TEST(ReportRun, MeasuresTheRunAgainstThePlan) {
  Plan P = planOf(OneF1B);
  ReportRun Run = runOf(P, 2.0, 5);
  std::string Fig;
  llvm::raw_string_ostream OS(Fig);
  writeRunFigure(P, Run, OS);
  OS.flush();
  // The medians leave out the 3x warm-up step: twice the plan's time, half
  // its throughput and MFU.
  EXPECT_EQ(ratioOf(Fig, "step_time"), "2");
  EXPECT_EQ(ratioOf(Fig, "tokens_per_gpu"), "0.5");
  EXPECT_EQ(ratioOf(Fig, "mfu"), "0.5");
  EXPECT_NE(ratioOf(Fig, "peak_memory"), "missing");
  EXPECT_NE(Fig.find("data-drawn-steps=\"5\""), std::string::npos);
  EXPECT_EQ(occurrences(Fig, "<polyline class=\"loss\""), 1u);
  EXPECT_EQ(Fig.find("data-check=\"other-plan\""), std::string::npos);
  EXPECT_EQ(Fig.find("<circle class=\"valid\""), std::string::npos);

  // Evaluated steps get a dot each.
  Run.Steps[1].ValidLoss = 4.5;
  Run.Steps[3].ValidLoss = 2.5;
  Fig.clear();
  writeRunFigure(P, Run, OS);
  OS.flush();
  EXPECT_EQ(occurrences(Fig, "<circle class=\"valid\""), 2u);
  EXPECT_NE(Fig.find("data-step=\"4\""), std::string::npos);
  EXPECT_NE(Fig.find("validation loss (2 evaluations)"), std::string::npos);

  // A log of another plan says so; a NaN loss breaks the curve in two.
  Run.Steps[2].Loss = std::nan("");
  for (StepRecord &S : Run.Steps)
    S.PredictedStepSeconds = P.Time.StepTime * 1.5;
  Fig.clear();
  writeRunFigure(P, Run, OS);
  OS.flush();
  EXPECT_NE(Fig.find("data-check=\"other-plan\""), std::string::npos);
  EXPECT_EQ(occurrences(Fig, "<polyline class=\"loss\""), 2u);
  EXPECT_NE(Fig.find("data-drawn-steps=\"4\""), std::string::npos);

  // The page has the figure only with a run.
  EXPECT_EQ(renderHtmlReport(P).find("<figure id=\"run\""), std::string::npos);
  EXPECT_EQ(occurrences(renderHtmlReport(P, {}, {}, &Run), "<figure id=\"run\""), 1u);
}

TEST(ReportRun, SplitsCommunicationByDimensionWhereTheLogDoes) {
  Plan P = planOf(OneF1B); // cp2 ep2 pp2 over 8 ranks
  ASSERT_GT(P.Time.ExpertParallel, 0);
  ASSERT_GT(P.Time.PipelineP2P, 0);
  ASSERT_GT(P.Time.DataParallel, 0);
  ASSERT_EQ(P.Time.TensorParallel, 0);
  ReportRun Run = runOf(P, 1.0, 4);
  std::string Fig;
  llvm::raw_string_ostream OS(Fig);
  writeRunFigure(P, Run, OS);
  OS.flush();
  // A log without the split (an older moerun) gets no rows for it.
  EXPECT_EQ(ratioOf(Fig, "ep_comm"), "missing");
  EXPECT_EQ(ratioOf(Fig, "cp_comm"), "missing");

  for (StepRecord &S : Run.Steps) {
    S.EpCommSeconds = 3 * P.Time.ExpertParallel;
    S.CpCommSeconds = 0.5 * P.Time.ContextParallel;
    S.TpCommSeconds = 0.25; // measured where the plan predicts none
    S.DpCommSeconds = 4 * P.Time.DataParallel;
    S.PpCommSeconds = 2 * P.Time.PipelineP2P;
  }
  Fig.clear();
  writeRunFigure(P, Run, OS);
  OS.flush();
  EXPECT_EQ(ratioOf(Fig, "ep_comm"), "3");
  EXPECT_EQ(ratioOf(Fig, "cp_comm"), P.Time.ContextParallel > 0 ? "0.5" : "missing");
  EXPECT_EQ(ratioOf(Fig, "tp_comm"), "–");
  EXPECT_EQ(ratioOf(Fig, "dp_comm"), "4");
  EXPECT_EQ(ratioOf(Fig, "pp_comm"), "2");
}

TEST(ReportPage, EscapesRecipeText) {
  Plan P = planOf(OneF1B);
  P.R.Name = P.R.PointName = "a<b&c>\"d'";
  P.SourceFile = "dir/<script>.moe";
  P.R.Gpu.Name = "gpu<x>";
  std::string Page = renderHtmlReport(P);
  EXPECT_EQ(Page.find("a<b&c>"), std::string::npos);
  EXPECT_EQ(Page.find("<script"), std::string::npos);
  EXPECT_EQ(Page.find("gpu<x>"), std::string::npos);
  EXPECT_NE(Page.find("<title>moec report: a&lt;b&amp;c&gt;&quot;d&#39;</title>"), std::string::npos);
  EXPECT_NE(Page.find("dir/&lt;script&gt;.moe"), std::string::npos);
  EXPECT_NE(Page.find("gpu&lt;x&gt;"), std::string::npos);
  // Four figures, no sweep, no script, no external reference.
  for (const char *Id : {"memory", "schedule", "grid", "time"})
    EXPECT_EQ(occurrences(Page, std::string("<figure id=\"") + Id + "\""), 1u) << Id;
  EXPECT_EQ(Page.find("<figure id=\"sweep\""), std::string::npos);
  EXPECT_EQ(Page.find("http://"), std::string::npos);
  EXPECT_EQ(Page.find("https://"), std::string::npos);
}

TEST(ReportSweep, PointsAsMoecSweepDecidesThem) {
  std::unique_ptr<Compiled> C = compile(Sweep, true);
  std::vector<SweepPoint> Points = evaluateSweep(C->Points, C->Diags.finish(), /*PredictMemoryPruned=*/true);
  ASSERT_EQ(Points.size(), 3u);
  EXPECT_EQ(Points[0].Name, "s[ep=8]");
  EXPECT_TRUE(Points[0].Feasible);
  EXPECT_EQ(Points[0].Rank, 1);
  EXPECT_GT(Points[0].TokensPerSecPerGpu, 0);
  EXPECT_LE(Points[0].PeakBytes, Points[0].CapacityBytes);
  // Out of memory: infeasible but predicted, so it is drawn.
  EXPECT_EQ(Points[1].Name, "s[ep=2]");
  EXPECT_FALSE(Points[1].Feasible);
  EXPECT_TRUE(Points[1].Predicted);
  EXPECT_GT(Points[1].PeakBytes, Points[1].CapacityBytes);
  EXPECT_NE(Points[1].Reason.find("[memory-exceeds-hbm]"), std::string::npos);
  // Structural error: no prediction.
  EXPECT_EQ(Points[2].Name, "s[ep=3]");
  EXPECT_FALSE(Points[2].Predicted);
  EXPECT_NE(Points[2].Reason.find("[experts-divisible]"), std::string::npos);

  std::string Fig;
  llvm::raw_string_ostream OS(Fig);
  writeSweepFigure(Points, "s[ep=8]", OS);
  EXPECT_EQ(occurrences(Fig, "<g class=\"pt feasible best shown\""), 1u);
  EXPECT_EQ(occurrences(Fig, "<g class=\"pt infeasible\""), 1u);
  EXPECT_EQ(occurrences(Fig, "<line class=\"hbm\""), 1u);
  EXPECT_EQ(occurrences(Fig, "<tr class=\"infeasible\""), 2u);
  EXPECT_NE(Fig.find("s[ep=3]"), std::string::npos);
}

TEST(ReportSweep, PageHasTheFifthFigure) {
  std::unique_ptr<Compiled> C = compile(Sweep, true);
  std::vector<SweepPoint> Points = evaluateSweep(C->Points, C->Diags.finish(), /*PredictMemoryPruned=*/true);
  auto Best =
      std::find_if(C->Points.begin(), C->Points.end(), [](const auto &P) { return P.first.PointName == "s[ep=8]"; });
  ASSERT_NE(Best, C->Points.end());
  llvm::Expected<Plan> P = buildPlan(Best->first, Best->second);
  ASSERT_TRUE(bool(P));
  std::string Page = renderHtmlReport(*P, Points);
  for (const char *Id : {"memory", "schedule", "grid", "time", "sweep"})
    EXPECT_EQ(occurrences(Page, std::string("<figure id=\"") + Id + "\""), 1u) << Id;
  EXPECT_NE(Page.find("the figures draw s[ep=8] (the fastest feasible)"), std::string::npos);
}

TEST(ReportEscape, AllFiveCharacters) {
  EXPECT_EQ(escapeHtml("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(escapeHtml("plain"), "plain");
}

} // namespace
