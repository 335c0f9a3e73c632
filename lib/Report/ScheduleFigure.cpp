//===- ScheduleFigure.cpp - The pipeline schedule as a timeline -----------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"
#include "moec/Report/Timeline.h"

#include <algorithm>
#include <fmt/format.h>

using namespace moec;
using namespace moec::report;

namespace {
// Forward in blues, backward in oranges; later model chunks darker.
const char *const BubbleFill = "#eeeeee";

std::string shade(ScheduledOp::Kind K, int64_t Chunk, int64_t VPP) {
  double Frac = VPP > 1 ? double(Chunk) / double(VPP - 1) : 0.3;
  int Light = int(82 - 44 * Frac);
  return K == ScheduledOp::Forward ? fmt::format("hsl(208,62%,{}%)", Light) : fmt::format("hsl(24,88%,{}%)", Light);
}
} // namespace

void moec::writeScheduleFigure(const Plan &P, llvm::raw_ostream &OS) {
  const PipelinePlan &PL = P.Pipeline;
  OS << "<figure id=\"schedule\">\n<h2>Pipeline schedule</h2>\n";
  size_t Ops = 0;
  for (const auto &R : PL.Schedule)
    Ops += R.size();
  if (Ops > MaxDrawnScheduleOps) {
    OS << "<p class=\"note\">"
       << escapeHtml(fmt::format("The schedule has {} ops, more than this page draws ({}).", Ops, MaxDrawnScheduleOps))
       << "</p></figure>\n";
    return;
  }
  llvm::Expected<Timeline> T = layOutSchedule(PL, OpDurations::uniform(PL.PP));
  if (!T) {
    OS << "<p class=\"note\">" << escapeHtml("No schedule to draw: " + llvm::toString(T.takeError()))
       << "</p></figure>\n";
    return;
  }

  const double Left = 72, TopPad = 8, Row = 22, Gap = 6, PlotW = 960;
  const double Height = TopPad + double(PL.PP) * (Row + Gap) + 34;
  const double Scale = T->Makespan > 0 ? PlotW / T->Makespan : 1;
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
        rect(OS, Left + From * Scale, Y, (To - From) * Scale, Row, "bubble", BubbleFill,
             Ops > MaxDetailedScheduleOps ? std::string()
                                          : fmt::format("stage {} idle from {:g} to {:g}", R, From, To));
    };
    for (const TimedOp &O : T->PerRank[R]) {
      Bubble(Clock, O.Start);
      bool Fwd = O.Op.K == ScheduledOp::Forward;
      double X = Left + O.Start * Scale, W = (O.End - O.Start) * Scale;
      OS << "<g class=\"op " << (Fwd ? "fwd" : "bwd") << "\" data-mb=\"" << O.Op.Microbatch << "\" data-chunk=\""
         << O.Op.Chunk << "\">";
      rect(OS, X, Y, W, Row, "box", shade(O.Op.K, O.Op.Chunk, PL.VPP),
           Ops > MaxDetailedScheduleOps
               ? std::string()
               : fmt::format("{} of micro batch {}, chunk {}: {:g} to {:g}", Fwd ? "forward" : "backward",
                             O.Op.Microbatch, O.Op.Chunk, O.Start, O.End));
      if (W >= 14)
        text(OS, X + W / 2, Y + Row / 2 + 4, std::to_string(O.Op.Microbatch), "op-label", "middle");
      OS << "</g>";
      Clock = O.End;
    }
    Bubble(Clock, T->Makespan);
    OS << "</g>\n";
  }
  double AxisY = TopPad + double(PL.PP) * (Row + Gap) + 4;
  for (double Tick : ticks(T->Makespan, 10)) {
    if (Tick > T->Makespan * (1 + 1e-9))
      break;
    text(OS, Left + Tick * Scale, AxisY + 10, fmt::format("{:g}", Tick), "tick", "middle");
  }
  text(OS, Left + PlotW / 2, AxisY + 26, "time (units: forward = 1, backward = 2)", "axis-label", "middle");
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
  Items.push_back({BubbleFill, "bubble (idle)"});
  legend(OS, Items);
  OS << "<figcaption>"
     << escapeHtml(fmt::format(
            "{} with {} micro batches per step on {} pipeline stage{}{}; boxes are numbered by micro batch. "
            "Op durations are equal units on every stage (forward 1, backward 2): the planner does not export "
            "per-stage times. Idle share in this drawing: {:.1f}%; the planner's bubble fraction: {:.1f}%.",
            PL.VPP > 1 ? "Interleaved 1F1B" : "1F1B", PL.Microbatches, PL.PP, PL.PP == 1 ? "" : "s",
            PL.VPP > 1 ? fmt::format(" (VPP = {})", PL.VPP) : "", 100 * T->IdleFraction, 100 * PL.BubbleFraction))
     << (Ops > MaxDetailedScheduleOps ? " Too many ops for hover details." : "") << "</figcaption>\n</figure>\n";
}
