//===- ReportCommand.cpp - moec report ------------------------------------===//
//
// moec report FILE [--recipe NAME] [-o report.html] [--log steps.jsonl]
//
// One recipe: its plan drawn (lib/Report). A recipe with sweeps: every point
// decided as `moec sweep` decides it, the scatter of all of them, and the
// other figures for the fastest feasible point.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/Emit/Sweep.h"
#include "moec/Report/HtmlReport.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include <optional>
#include <set>

namespace moec::driver {

namespace {
/// -o, else FILE.moe -> FILE.html in the current directory (standard input:
/// report.html).
std::string outputPath() {
  if (!ReportOutput.empty())
    return ReportOutput;
  llvm::StringRef In = CheckFiles.front();
  if (In == "-")
    return "report.html";
  llvm::SmallString<128> Name(llvm::sys::path::filename(In));
  llvm::sys::path::replace_extension(Name, "html");
  return std::string(Name);
}

/// The diagnostics as the page lists them: every one moec check shows,
/// remarks included.
std::vector<ReportDiagnostic> pageDiagnostics(const Compilation &C, llvm::ArrayRef<Diagnostic> Final) {
  std::vector<ReportDiagnostic> Out;
  for (const Diagnostic &D : Final) {
    ReportDiagnostic R;
    R.Severity = severityName(D.Sev).str();
    R.Id = getDiagInfo(D.ID).Id.str();
    R.Message = D.Message;
    R.Point = llvm::StringRef(D.Recipe).endswith("]") ? D.Recipe : "";
    if (D.Range.Start.isValid()) {
      unsigned Buf = C.SM.FindBufferContainingLoc(D.Range.Start);
      auto [Line, Col] = C.SM.getLineAndColumn(D.Range.Start, Buf);
      R.Where = fmt::format(
          "{}:{}:{}", llvm::sys::path::filename(C.SM.getMemoryBuffer(Buf)->getBufferIdentifier()).str(), Line, Col);
    }
    Out.push_back(std::move(R));
  }
  return Out;
}

int writeReport(const Plan &P, llvm::ArrayRef<SweepPoint> Sweep, llvm::ArrayRef<ReportDiagnostic> Diagnostics,
                const ReportRun *Run) {
  std::string Out = outputPath();
  if (llvm::Error E = writeFileAtomically(Out, renderHtmlReport(P, Sweep, Diagnostics, Run))) {
    llvm::errs() << "moec report: " << llvm::toString(std::move(E)) << "\n";
    return ExitUsage;
  }
  if (ReportOutput.empty())
    llvm::errs() << "moec report: wrote " << Out << "\n";
  return ExitOK;
}
} // namespace

int runReport() {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec report: expected one recipe file (use - for standard input)\n";
    return ExitUsage;
  }
  // The log is read first: a bad one ends the command before any page is
  // written.
  std::optional<ReportRun> Run;
  if (!ReportLog.empty()) {
    llvm::Expected<std::vector<StepRecord>> Steps = readStepLog(ReportLog);
    if (!Steps) {
      llvm::errs() << "moec report: --log " << llvm::toString(Steps.takeError()) << "\n";
      return ExitUsage;
    }
    Run = ReportRun{std::string(llvm::sys::path::filename(ReportLog)), std::move(*Steps)};
  }
  const ReportRun *RunPtr = Run ? &*Run : nullptr;
  // A sweep's points are decided by their own errors, as in `moec sweep`.
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true, /*CapErrors=*/false);
  const std::vector<Diagnostic> &Final = C->Diags->finish();
  bool Fatal = llvm::any_of(Final, [](const Diagnostic &D) { return D.Sev == Severity::Error && D.Recipe.empty(); });
  std::set<std::string> Recipes;
  for (const auto &Point : C->Recipes)
    Recipes.insert(Point.first.Name);
  bool Sweep = Recipes.size() == 1 && C->Recipes.size() > 1;
  // One recipe reports like `moec plan`: only when it checks.
  if (Fatal || C->Unreadable || (!Sweep && C->Diags->hasErrors())) {
    renderText(Final, C->SM, llvm::errs(), false, ShowRemarks);
    return C->Unreadable ? ExitUsage : ExitErrors;
  }
  if (Recipes.empty()) {
    llvm::errs() << "moec report: '" << CheckFiles.front() << "' defines no recipe\n";
    return ExitErrors;
  }
  if (Recipes.size() > 1) {
    llvm::errs() << fmt::format("moec report: '{}' defines {} recipes; choose one with --recipe\n", CheckFiles.front(),
                                Recipes.size());
    return ExitUsage;
  }

  if (!Sweep) {
    renderText(Final, C->SM, llvm::errs(), false, ShowRemarks); // warnings
    auto &[R, File] = C->Recipes.front();
    llvm::Expected<Plan> P = buildPlan(R, File);
    if (!P) {
      llvm::errs() << "moec report: " << R.PointName << ": " << llvm::toString(P.takeError()) << "\n";
      return ExitErrors;
    }
    return writeReport(*P, {}, pageDiagnostics(*C, Final), RunPtr);
  }

  std::vector<SweepPoint> Points = evaluateSweep(C->Recipes, Final, /*PredictMemoryPruned=*/true);
  // The figures draw the fastest feasible point, else the first one the
  // planner could predict (feasible points come first).
  const SweepPoint *Shown = nullptr;
  for (const SweepPoint &S : Points)
    if (S.Predicted) {
      Shown = &S;
      break;
    }
  if (!Shown) {
    renderText(Final, C->SM, llvm::errs(), false, ShowRemarks);
    llvm::errs() << "moec report: no point of the sweep has a plan to draw\n";
    return ExitErrors;
  }
  for (auto &[R, File] : C->Recipes) {
    if (R.PointName != Shown->Name)
      continue;
    llvm::Expected<Plan> P = buildPlan(R, File);
    if (!P) {
      llvm::errs() << "moec report: " << R.PointName << ": " << llvm::toString(P.takeError()) << "\n";
      return ExitErrors;
    }
    size_t Feasible = llvm::count_if(Points, [](const SweepPoint &S) { return S.Feasible; });
    llvm::errs() << fmt::format("moec report: {} points, {} feasible; the figures draw {}\n", Points.size(), Feasible,
                                Shown->Name);
    return writeReport(*P, Points, pageDiagnostics(*C, Final), RunPtr);
  }
  llvm::errs() << "moec report: lost sweep point " << Shown->Name << "\n";
  return ExitErrors;
}

} // namespace moec::driver
