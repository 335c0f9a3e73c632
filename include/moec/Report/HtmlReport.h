//===- HtmlReport.h - A plan drawn as one self-contained page ----*- C++ -*-===//
//
// `moec report` writes one HTML file with inline SVG and CSS, no script and
// no network access (a Content-Security-Policy forbids both), with a figure
// per question a table of numbers hides:
//   * #memory   — bytes per pipeline stage by category against the HBM line,
//   * #schedule — the pipeline schedule in time per stage (Timeline.h),
//   * #grid     — the rank grid coloured by tp, cp, ep, dp and pp group,
//   * #time     — the predicted step time by cause,
//   * #sweep    — for sweeps, predicted tokens/s against peak memory,
//   * #run      — with a step log of a run (moec report --log), its loss
//                 curve and its measured step time, throughput, memory and
//                 MFU against the plan's predictions,
// then the recipe's diagnostics (<section id="diagnostics">).
// Elements carry classes and data- attributes (stage, rank, op kind) so that
// tests and other tools can read the page back. Every piece of text from
// the recipe is escaped.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REPORT_HTMLREPORT_H
#define MOEC_REPORT_HTMLREPORT_H

#include "moec/Emit/Plan.h"
#include "moec/Emit/Sweep.h"
#include "moec/PlanFormat/StepRecord.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"
#include <string>

namespace moec {

/// Text for HTML element content and attribute values: & < > " ' escaped.
std::string escapeHtml(llvm::StringRef Text);

/// The figures, each a <figure id="..."> element. The plan must have been
/// built with ranks (PlanOptions::WithRanks) for the schedule and the grid;
/// without them those figures say so instead of drawing.
void writeMemoryFigure(const Plan &P, llvm::raw_ostream &OS);
void writeScheduleFigure(const Plan &P, llvm::raw_ostream &OS);
void writeGridFigure(const Plan &P, llvm::raw_ostream &OS);
void writeStepTimeFigure(const Plan &P, llvm::raw_ostream &OS);
/// Points as evaluateSweep returns them; Shown names the point the other
/// figures draw.
void writeSweepFigure(llvm::ArrayRef<SweepPoint> Points, llvm::StringRef Shown, llvm::raw_ostream &OS);

/// A run of P: its step log (non-empty), named LogName on the page.
struct ReportRun {
  std::string LogName;
  std::vector<StepRecord> Steps;
};
void writeRunFigure(const Plan &P, const ReportRun &Run, llvm::raw_ostream &OS);

/// A diagnostic as the page lists it (the engine's text, already located).
struct ReportDiagnostic {
  std::string Severity, Id, Message, Where, Point;
};

/// The whole page for P; with Sweep non-empty the sweep figure follows and
/// the header says that P is one of its points. Diagnostics (what `moec
/// check` says of the recipe) are listed in a <section id="diagnostics">.
/// Run, when given, adds the #run figure.
std::string renderHtmlReport(const Plan &P, llvm::ArrayRef<SweepPoint> Sweep = {},
                             llvm::ArrayRef<ReportDiagnostic> Diagnostics = {}, const ReportRun *Run = nullptr);

/// Figures past these sizes are summarised in text rather than drawn: the
/// page stays small enough for a browser.
constexpr size_t MaxDrawnScheduleOps = 100000;
constexpr int64_t MaxDrawnRanks = 32768;
/// Past these, elements lose their hover text (<title>): it would more than
/// double the page.
constexpr size_t MaxDetailedScheduleOps = 20000;
constexpr int64_t MaxDetailedRanks = 4096;

} // namespace moec

#endif
