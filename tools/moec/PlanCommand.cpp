//===- PlanCommand.cpp - moec plan ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

int runPlan() {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec plan: expected one recipe file (use - for standard input)\n";
    return ExitUsage;
  }
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true);
  renderDiagnostics(*C, Format::Text);
  if (C->Unreadable)
    return ExitUsage;
  // A plan is written only for a recipe that checks: no half-valid plans.
  if (C->Diags->hasErrors())
    return ExitErrors;
  if (C->Recipes.empty()) {
    llvm::errs() << "moec plan: '" << CheckFiles.front() << "' defines no recipe\n";
    return ExitErrors;
  }
  std::vector<Plan> Plans;
  for (auto &[R, File] : C->Recipes) {
    llvm::Expected<Plan> P = buildPlan(R, File);
    if (!P) {
      llvm::errs() << "moec plan: " << R.PointName << ": " << llvm::toString(P.takeError()) << "\n";
      return ExitErrors;
    }
    Plans.push_back(std::move(*P));
  }
  if (DumpLayout) {
    for (const Plan &P : Plans)
      printLayout(P, llvm::outs());
    return ExitOK;
  }
  std::string Document;
  if (PlanFormat == PlanFormatKind::JSON) {
    llvm::json::Value Tree = nullptr;
    if (Plans.size() == 1) {
      Tree = planToJSON(Plans.front());
    } else {
      llvm::json::Array All;
      for (const Plan &P : Plans)
        All.push_back(planToJSON(P));
      Tree = std::move(All);
    }
    llvm::raw_string_ostream(Document) << llvm::formatv("{0:2}", Tree) << "\n";
  } else {
    for (const Plan &P : Plans)
      Document += planToTOML(P);
  }
  if (!PlanOutput.empty()) {
    if (llvm::Error E = writeFileAtomically(PlanOutput, Document)) {
      llvm::errs() << "moec plan: " << llvm::toString(std::move(E)) << "\n";
      return ExitUsage;
    }
  } else if (llvm::sys::Process::StandardOutIsDisplayed() && !PlanFormat.getNumOccurrences()) {
    // At a terminal the document (tens of KB of TOML) would bury the summary:
    // say how to get it instead. A pipe or file still gets the document.
    llvm::errs() << "moec plan: the plan itself is not printed to a terminal; write it with -o plan.toml, or "
                    "pass --format toml|json to print it\n";
  } else {
    llvm::outs() << Document;
  }
  if (!Quiet)
    for (const Plan &P : Plans)
      printPlanSummary(P, llvm::errs());
  return ExitOK;
}

} // namespace moec::driver
