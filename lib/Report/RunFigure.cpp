//===- RunFigure.cpp - A run of the plan against its predictions ----------===//
//
// The loss curve of moerun's step log, and per measure (step time, tokens/s
// per GPU, peak memory, MFU) the run's figure beside the plan's. The first
// step warms up (allocations, first touches of every buffer): the medians
// leave it out when the log has more than one step.
//
//===----------------------------------------------------------------------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

using namespace moec;
using namespace moec::report;

namespace {
double median(std::vector<double> V) {
  V.erase(std::remove_if(V.begin(), V.end(), [](double X) { return !std::isfinite(X); }), V.end());
  if (V.empty())
    return std::nan("");
  std::sort(V.begin(), V.end());
  size_t N = V.size();
  return N % 2 ? V[N / 2] : (V[N / 2 - 1] + V[N / 2]) / 2;
}

/// The steps the medians use: all but the first, unless it is the only one.
llvm::ArrayRef<StepRecord> timedSteps(llvm::ArrayRef<StepRecord> Steps) {
  return Steps.size() > 1 ? Steps.drop_front() : Steps;
}

template <class F> double medianOf(llvm::ArrayRef<StepRecord> Steps, F Get) {
  std::vector<double> V;
  for (const StepRecord &S : Steps)
    V.push_back(Get(S));
  return median(std::move(V));
}

std::string figure(double V, const char *Format) {
  return std::isfinite(V) ? fmt::format(fmt::runtime(Format), V) : "–";
}

void writeLossCurve(llvm::ArrayRef<StepRecord> Steps, llvm::raw_ostream &OS) {
  const double Left = 56, Top = 10, W = 880, H = 220;
  double Lo = INFINITY, Hi = -INFINITY;
  int64_t First = Steps.front().Step, Last = Steps.front().Step;
  for (const StepRecord &S : Steps) {
    for (double L : {S.Loss, S.ValidLoss.value_or(NAN)})
      if (std::isfinite(L)) {
        Lo = std::min(Lo, L);
        Hi = std::max(Hi, L);
      }
    First = std::min(First, S.Step);
    Last = std::max(Last, S.Step);
  }
  if (!(Hi >= Lo)) {
    OS << "<p class=\"note\">No step of the log has a finite loss to draw.</p>\n";
    return;
  }
  std::vector<double> YTicks = ticks(Lo, Hi > Lo ? Hi : Lo + 1, 5);
  double Y0 = YTicks.front(), Y1 = std::max(YTicks.back(), Hi > Lo ? Hi : Lo + 1);
  double XSpan = double(std::max<int64_t>(Last - First, 1));
  auto X = [&](double Step) { return Left + W * (Step - double(First)) / XSpan; };
  auto Y = [&](double Loss) { return Top + H * (1 - (Loss - Y0) / (Y1 - Y0)); };
  OS << "<svg class=\"chart\" width=\"" << num(Left + W + 24) << "\" height=\"" << num(Top + H + 40)
     << "\" viewBox=\"0 0 " << num(Left + W + 24) << " " << num(Top + H + 40)
     << "\" role=\"img\" aria-label=\"training loss by step\">\n";
  for (double T : YTicks) {
    OS << "<line class=\"gridline\" x1=\"" << num(Left) << "\" x2=\"" << num(Left + W) << "\" y1=\"" << num(Y(T))
       << "\" y2=\"" << num(Y(T)) << "\"/>";
    text(OS, Left - 6, Y(T) + 4, fmt::format("{:g}", T), "tick", "end");
  }
  for (double T : ticks(double(First), double(Last), 8))
    if (T >= double(First) && T <= double(Last) && T == std::floor(T)) // steps are whole
      text(OS, X(T), Top + H + 16, fmt::format("{:g}", T), "tick", "middle");
  text(OS, Left + W / 2, Top + H + 34, "step", "axis-label", "middle");
  // Non-finite losses break the line: each run of finite ones is drawn.
  std::string Points;
  size_t Drawn = 0;
  auto Flush = [&] {
    if (!Points.empty())
      OS << "<polyline class=\"loss\" points=\"" << Points << "\"/>";
    Points.clear();
  };
  for (const StepRecord &S : Steps) {
    if (!std::isfinite(S.Loss)) {
      Flush();
      continue;
    }
    Points += (Points.empty() ? "" : " ") + num(X(double(S.Step))) + "," + num(Y(S.Loss));
    ++Drawn;
  }
  Flush();
  // Evaluations (data.eval_interval): a dot per held-out loss.
  size_t Evaluations = 0;
  for (const StepRecord &S : Steps)
    if (S.ValidLoss && std::isfinite(*S.ValidLoss)) {
      OS << "<circle class=\"valid\" data-step=\"" << S.Step << "\" cx=\"" << num(X(double(S.Step))) << "\" cy=\""
         << num(Y(*S.ValidLoss)) << "\" r=\"3\"><title>"
         << escapeHtml(fmt::format("step {}: validation loss {:.4f}", S.Step, *S.ValidLoss)) << "</title></circle>";
      ++Evaluations;
    }
  OS << "\n</svg>\n";
  if (Evaluations)
    OS << "<ul class=\"legend\"><li><span class=\"swatch\" style=\"background:#4e79a7\"></span>training loss</li>"
          "<li><span class=\"swatch\" style=\"background:#e15759\"></span>validation loss ("
       << Evaluations << " evaluations)</li></ul>\n";
  OS << "<p class=\"panel-note\" data-drawn-steps=\"" << Drawn << "\">" << Drawn << " of " << Steps.size()
     << " steps drawn; loss " << escapeHtml(figure(Steps.front().Loss, "{:.4f}")) << " at step " << Steps.front().Step
     << ", " << escapeHtml(figure(Steps.back().Loss, "{:.4f}")) << " at step " << Steps.back().Step << ".</p>\n";
}
} // namespace

void moec::writeRunFigure(const Plan &P, const ReportRun &Run, llvm::raw_ostream &OS) {
  llvm::ArrayRef<StepRecord> Steps = Run.Steps;
  OS << "<figure id=\"run\">\n<h2>The run against its plan</h2>\n";
  if (Steps.empty()) {
    OS << "<p class=\"note\">The step log holds no step.</p>\n</figure>\n";
    return;
  }
  writeLossCurve(Steps, OS);

  llvm::ArrayRef<StepRecord> Timed = timedSteps(Steps);
  const StepTimeBreakdown &T = P.Time;
  const double World = double(std::max<int64_t>(P.R.WorldSize, 1));
  double Step = medianOf(Timed, [](const StepRecord &S) { return S.StepTimeSeconds; });
  double Tokens = medianOf(Timed, [&](const StepRecord &S) { return S.TokensPerSecond / World; });
  double Peak = 0;
  for (const StepRecord &S : Steps)
    Peak = std::max(Peak, double(S.PeakBytes));
  // moerun's peak counts what the job allocates, not the allocator's reserve.
  double PlanPeak = P.Memory.PeakBytes;
  if (size_t(P.Memory.PeakStage) < P.Memory.PerStage.size())
    PlanPeak -= P.Memory.PerStage[size_t(P.Memory.PeakStage)].Reserve;
  double Mfu = std::isfinite(Step) && Step > 0 ? T.MFU * T.StepTime / Step : std::nan("");

  struct Row {
    const char *Key, *Label;
    double Measured, Predicted;
    std::string (*Show)(double);
  };
  auto Seconds = [](double V) { return figure(V, "{:.3f} s"); };
  auto PerSecond = [](double V) { return figure(V, "{:.0f}"); };
  auto Bytes = [](double V) {
    return !std::isfinite(V) ? std::string("–") : V >= 1e9 ? gigabytes(V) : fmt::format("{:.1f} MB", V / 1e6);
  };
  auto Percent = [](double V) { return figure(100 * V, "{:.1f}%"); };
  const Row Rows[] = {{"step_time", "step time (median)", Step, T.StepTime, +Seconds},
                      {"tokens_per_gpu", "tokens/s per GPU (median)", Tokens, T.TokensPerSecPerGpu, +PerSecond},
                      {"peak_memory", "peak memory (largest rank, without reserve)", Peak, PlanPeak, +Bytes},
                      {"mfu", "MFU (of the dense BF16 peak)", Mfu, T.MFU, +Percent}};
  // Communication by parallel dimension, where the log splits it: time
  // inside the dimension's calls (waiting for a slower peer included)
  // against the plan's exposed time of that dimension.
  using Part = std::optional<double> StepRecord::*;
  struct CommRow {
    const char *Key, *Label;
    Part Measured;
    double Predicted;
  };
  const CommRow CommRows[] = {
      {"tp_comm", "tensor-parallel communication", &StepRecord::TpCommSeconds, T.TensorParallel},
      {"cp_comm", "context-parallel communication", &StepRecord::CpCommSeconds, T.ContextParallel},
      {"ep_comm", "expert-parallel communication", &StepRecord::EpCommSeconds, T.ExpertParallel},
      {"dp_comm", "data-parallel communication", &StepRecord::DpCommSeconds, T.DataParallel},
      {"pp_comm", "pipeline communication", &StepRecord::PpCommSeconds, T.PipelineP2P}};
  std::vector<Row> All(std::begin(Rows), std::end(Rows));
  for (const CommRow &C : CommRows) {
    double Measured = medianOf(Timed, [&](const StepRecord &S) { return (S.*C.Measured).value_or(std::nan("")); });
    if (std::isfinite(Measured) && (Measured > 0 || C.Predicted > 0))
      All.push_back({C.Key, C.Label, Measured, C.Predicted, +Seconds});
  }
  OS << "<table class=\"run\"><thead><tr><th>measure</th><th>run</th><th>plan</th><th>run / plan</th></tr>"
        "</thead><tbody>";
  for (const Row &R : All) {
    double Ratio = R.Predicted > 0 ? R.Measured / R.Predicted : std::nan("");
    OS << "<tr data-measure=\"" << R.Key << "\" data-ratio=\"" << escapeHtml(figure(Ratio, "{:.4g}")) << "\"><td>"
       << escapeHtml(R.Label) << "</td><td>" << escapeHtml(R.Show(R.Measured)) << "</td><td>"
       << escapeHtml(R.Show(R.Predicted)) << "</td><td>" << escapeHtml(figure(Ratio, "{:.2f}")) << "</td></tr>";
  }
  OS << "</tbody></table>\n";

  // A log written under another plan (or another moec) still draws, but
  // says so: its predictions are not this page's.
  for (const StepRecord &S : Steps)
    if (S.PredictedStepSeconds) {
      double Theirs = *S.PredictedStepSeconds;
      if (!(std::fabs(Theirs - T.StepTime) <= 1e-6 * std::max(std::fabs(T.StepTime), 1e-12)))
        OS << "<p class=\"note\" data-check=\"other-plan\">"
           << escapeHtml(fmt::format("The log's steps carry a predicted step time of {:.4g} s where this plan "
                                     "predicts {:.4g} s: the run was of another plan, or planned by another "
                                     "version of moec.",
                                     Theirs, T.StepTime))
           << "</p>\n";
      break;
    }
  OS << "<figcaption>"
     << escapeHtml(fmt::format("{}: steps {} to {} ({} in the log){}. The plan's figures are for one "
                               "optimizer step on the slowest pipeline stage.",
                               Run.LogName, Steps.front().Step, Steps.back().Step, Steps.size(),
                               Steps.size() > 1 ? "; the medians leave out the first step, a warm-up" : ""))
     << "</figcaption>\n</figure>\n";
}
