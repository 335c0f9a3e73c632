//===- ScheduleFigure.cpp - The pipeline schedule as a timeline -----------===//
//
// Ops are drawn with the planner's seconds per virtual stage (forward and
// backward of one micro batch), so that a slow stage is seen as a wide box
// and the bubbles it causes on the others. With hundreds of micro batches
// a box would be a pixel wide: the steady state, where every stage
// alternates one forward and one backward, is then drawn as one band per
// stage between two axis breaks, and only the warm-up and the cool-down
// keep their boxes.
//
//===----------------------------------------------------------------------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"
#include "moec/Report/Timeline.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

using namespace moec;
using namespace moec::report;

namespace {
// Forward in blues, backward in oranges; later model chunks darker.
const char *const BubbleFill = "#eeeeee";
const char *const SteadyFill = "#c6d3e3";
// Past this many ops on a rank the steady state is drawn as a band: boxes
// of the 960-pixel plot would be under 8 pixels wide.
constexpr size_t MaxOpsPerRankDrawn = 120;
constexpr double BandWidth = 180;

std::string shade(ScheduledOp::Kind K, int64_t Chunk, int64_t VPP) {
  double Frac = VPP > 1 ? double(Chunk) / double(VPP - 1) : 0.3;
  int Light = int(82 - 44 * Frac);
  return K == ScheduledOp::Forward ? fmt::format("hsl(208,62%,{}%)", Light) : fmt::format("hsl(24,88%,{}%)", Light);
}

/// The planner's seconds when it has them for every virtual stage.
bool plannerDurations(const Plan &P, OpDurations &D) {
  const StepTimeBreakdown &T = P.Time;
  size_t V = size_t(P.Pipeline.PP * P.Pipeline.VPP);
  auto Positive = [](const std::vector<double> &S) {
    return std::all_of(S.begin(), S.end(), [](double X) { return X > 0 && std::isfinite(X); });
  };
  if (T.StageForwardSec.size() != V || T.StageBackwardSec.size() != V || !Positive(T.StageForwardSec) ||
      !Positive(T.StageBackwardSec))
    return false;
  D.Forward = T.StageForwardSec;
  D.Backward = T.StageBackwardSec;
  return true;
}

/// [From, To): the time every rank spends in its steady state, between the
/// end of the last rank's first backward and the start of the first rank's
/// last forward. Empty when the schedule has none.
struct Window {
  double From = 0, To = 0;
  bool empty() const { return !(To > From); }
};

Window steadyState(const Timeline &T) {
  Window W{0, T.Makespan};
  for (const std::vector<TimedOp> &Ops : T.PerRank) {
    auto FirstBwd =
        std::find_if(Ops.begin(), Ops.end(), [](const TimedOp &O) { return O.Op.K == ScheduledOp::Backward; });
    auto LastFwd =
        std::find_if(Ops.rbegin(), Ops.rend(), [](const TimedOp &O) { return O.Op.K == ScheduledOp::Forward; });
    if (FirstBwd == Ops.end() || LastFwd == Ops.rend())
      return {};
    W.From = std::max(W.From, FirstBwd->End);
    W.To = std::min(W.To, LastFwd->Start);
  }
  return W;
}

/// "0.25 s", "12 ms": the axis unit for a makespan in seconds.
struct TimeUnit {
  double Scale;
  const char *Name;
};
TimeUnit unitFor(double Makespan) { return Makespan >= 2 ? TimeUnit{1, "s"} : TimeUnit{1e3, "ms"}; }
} // namespace

void moec::writeScheduleFigure(const Plan &P, llvm::raw_ostream &OS) {
  const PipelinePlan &PL = P.Pipeline;
  OS << "<figure id=\"schedule\">\n<h2>Pipeline schedule</h2>\n";
  size_t Ops = 0, MaxOnRank = 0;
  for (const auto &R : PL.Schedule) {
    Ops += R.size();
    MaxOnRank = std::max(MaxOnRank, R.size());
  }
  if (Ops > MaxDrawnScheduleOps) {
    OS << "<p class=\"note\">"
       << escapeHtml(fmt::format("The schedule has {} ops, more than this page draws ({}).", Ops, MaxDrawnScheduleOps))
       << "</p></figure>\n";
    return;
  }
  OpDurations D;
  const bool Seconds = plannerDurations(P, D);
  if (!Seconds)
    D = OpDurations::uniform(PL.PP * PL.VPP);
  llvm::Expected<Timeline> T = layOutSchedule(PL, D);
  if (!T) {
    OS << "<p class=\"note\">" << escapeHtml("No schedule to draw: " + llvm::toString(T.takeError()))
       << "</p></figure>\n";
    return;
  }

  Window Steady = MaxOnRank > MaxOpsPerRankDrawn ? steadyState(*T) : Window{};
  // An op is drawn when it ends before the steady state or starts after it;
  // the others of its rank make up the band.
  auto InBand = [&](const TimedOp &O) { return !Steady.empty() && O.End > Steady.From && O.Start < Steady.To; };
  const bool Banded = !Steady.empty();

  const double Left = 72, TopPad = 8, Row = 22, Gap = 6, PlotW = 960;
  const double Height = TopPad + double(PL.PP) * (Row + Gap) + 34;
  const double Drawn = Banded ? T->Makespan - (Steady.To - Steady.From) : T->Makespan;
  const double Scale = Drawn > 0 ? (PlotW - (Banded ? BandWidth : 0)) / Drawn : 1;
  // Time to x: linear before the band, the band squeezed to BandWidth, and
  // linear again after it.
  auto X = [&](double Time) {
    if (!Banded || Time <= Steady.From)
      return Left + Time * Scale;
    if (Time >= Steady.To)
      return Left + Steady.From * Scale + BandWidth + (Time - Steady.To) * Scale;
    return Left + Steady.From * Scale + BandWidth * (Time - Steady.From) / (Steady.To - Steady.From);
  };
  const TimeUnit Unit = unitFor(T->Makespan);
  auto When = [&](double Time) {
    return Seconds ? fmt::format("{:.3g} {}", Time * Unit.Scale, Unit.Name) : fmt::format("{:g}", Time);
  };
  const bool Detailed = Ops <= MaxDetailedScheduleOps;

  OS << "<svg class=\"chart\" width=\"" << num(Left + PlotW + 16) << "\" height=\"" << num(Height)
     << "\" viewBox=\"0 0 " << num(Left + PlotW + 16) << " " << num(Height)
     << "\" role=\"img\" aria-label=\"pipeline schedule\">\n";
  for (size_t R = 0; R < T->PerRank.size(); ++R) {
    double Y = TopPad + double(R) * (Row + Gap);
    text(OS, Left - 8, Y + Row / 2 + 4, fmt::format("stage {}", R), "tick", "end");
    OS << "<g class=\"pp-rank\" data-rank=\"" << R << "\">";
    double Clock = 0;
    auto Bubble = [&](double From, double To) {
      if (To - From > 1e-9 * std::max(1.0, T->Makespan))
        rect(OS, X(From), Y, X(To) - X(From), Row, "bubble", BubbleFill,
             Detailed ? fmt::format("stage {} idle from {} to {}", R, When(From), When(To)) : std::string());
    };
    const std::vector<TimedOp> &RankOps = T->PerRank[R];
    for (size_t I = 0; I < RankOps.size(); ++I) {
      const TimedOp &O = RankOps[I];
      if (InBand(O)) {
        size_t End = I;
        int64_t FirstMb = O.Op.Microbatch, LastMb = O.Op.Microbatch;
        while (End < RankOps.size() && InBand(RankOps[End])) {
          FirstMb = std::min(FirstMb, RankOps[End].Op.Microbatch);
          LastMb = std::max(LastMb, RankOps[End].Op.Microbatch);
          ++End;
        }
        Bubble(Clock, O.Start);
        double From = O.Start, To = RankOps[End - 1].End;
        OS << "<g class=\"steady\" data-first-op=\"" << I << "\" data-ops=\"" << End - I << "\">";
        rect(OS, X(From), Y, X(To) - X(From), Row, "box", SteadyFill,
             fmt::format("stage {}: steady state from {} to {}, {} ops (micro batches {} to {}), one forward "
                         "and one backward in turn",
                         R, When(From), When(To), End - I, FirstMb, LastMb));
        text(OS, (X(From) + X(To)) / 2, Y + Row / 2 + 4, fmt::format("{} ops", End - I), "op-label", "middle");
        OS << "</g>";
        Clock = To;
        I = End - 1;
        continue;
      }
      Bubble(Clock, O.Start);
      bool Fwd = O.Op.K == ScheduledOp::Forward;
      double OX = X(O.Start), W = X(O.End) - OX;
      OS << "<g class=\"op " << (Fwd ? "fwd" : "bwd") << "\" data-mb=\"" << O.Op.Microbatch << "\" data-chunk=\""
         << O.Op.Chunk << "\">";
      rect(OS, OX, Y, W, Row, "box", shade(O.Op.K, O.Op.Chunk, PL.VPP),
           Detailed ? fmt::format("{} of micro batch {}, chunk {}: {} to {}", Fwd ? "forward" : "backward",
                                  O.Op.Microbatch, O.Op.Chunk, When(O.Start), When(O.End))
                    : std::string());
      if (W >= 14)
        text(OS, OX + W / 2, Y + Row / 2 + 4, std::to_string(O.Op.Microbatch), "op-label", "middle");
      OS << "</g>";
      Clock = O.End;
    }
    Bubble(Clock, T->Makespan);
    OS << "</g>\n";
  }
  double AxisY = TopPad + double(PL.PP) * (Row + Gap) + 4;
  // Ticks in the drawn parts only, none crowding the band's edges.
  for (double Tick : ticks(T->Makespan * (Seconds ? Unit.Scale : 1), 10)) {
    double Time = Seconds ? Tick / Unit.Scale : Tick;
    if (Time > T->Makespan * (1 + 1e-9))
      break;
    if (Banded && Time > Steady.From - 24 / Scale && Time < Steady.To + 24 / Scale)
      continue;
    text(OS, X(Time), AxisY + 10, fmt::format("{:g}", Tick), "tick", "middle");
  }
  if (Banded)
    for (double Edge : {Steady.From, Steady.To}) {
      double EX = X(Edge);
      OS << "<path class=\"axis-break\" d=\"M" << num(EX - 4) << " " << num(AxisY + 6) << "L" << num(EX + 4) << " "
         << num(AxisY - 2) << "\"/>";
      text(OS, EX, AxisY + 10, When(Edge), "tick", Edge == Steady.From ? "end" : "start");
    }
  text(OS, Left + PlotW / 2, AxisY + 26,
       Seconds ? fmt::format("time ({}){}", Unit.Name, Banded ? "; the steady state is not to scale" : "")
               : std::string("time (units: forward = 1, backward = 2)"),
       "axis-label", "middle");
  OS << "</svg>\n";

  // Every chunk up to four; past that the first and the last (shades between).
  std::vector<std::pair<std::string, std::string>> Items;
  for (ScheduledOp::Kind K : {ScheduledOp::Forward, ScheduledOp::Backward}) {
    const char *Name = K == ScheduledOp::Forward ? "forward" : "backward";
    if (PL.VPP == 1) {
      Items.push_back({shade(K, 0, 1), Name});
      continue;
    }
    for (int64_t C = 0; C < PL.VPP; ++C)
      if (PL.VPP <= 4 || C == 0 || C == PL.VPP - 1)
        Items.push_back({shade(K, C, PL.VPP), fmt::format("{}, chunk {}", Name, C)});
  }
  if (Banded)
    Items.push_back({SteadyFill, "steady state (one forward, one backward in turn)"});
  Items.push_back({BubbleFill, "bubble (idle)"});
  legend(OS, Items);

  std::string Durations;
  if (Seconds) {
    const StepTimeBreakdown &Time = P.Time;
    auto Slowest = std::max_element(Time.StageBackwardSec.begin(), Time.StageBackwardSec.end());
    size_t VS = size_t(Slowest - Time.StageBackwardSec.begin());
    Durations = fmt::format("Op durations are the planner's per stage and chunk (slowest: stage {}, chunk {}, "
                            "forward {}, backward {} per micro batch).",
                            PL.rankOf(VS), PL.chunkOf(VS), When(Time.StageForwardSec[VS]), When(*Slowest));
  } else {
    Durations = "Op durations are equal units on every stage (forward 1, backward 2): the plan has no per-stage "
                "times.";
  }
  OS << "<figcaption>"
     << escapeHtml(fmt::format(
            "{} with {} micro batches per step on {} pipeline stage{}{}; boxes are numbered by micro batch. {}{} "
            "Idle share in this drawing: {:.1f}%; the planner's bubble fraction: {:.1f}%.",
            PL.VPP > 1 ? "Interleaved 1F1B" : "1F1B", PL.Microbatches, PL.PP, PL.PP == 1 ? "" : "s",
            PL.VPP > 1 ? fmt::format(" (VPP = {})", PL.VPP) : "", Durations,
            Banded ? fmt::format(" From {} to {} every stage is in its steady state: it is drawn as one band.",
                                 When(Steady.From), When(Steady.To))
                   : std::string(),
            100 * T->IdleFraction, 100 * PL.BubbleFraction))
     << (Detailed ? "" : " Too many ops for hover details.") << "</figcaption>\n</figure>\n";
}
