//===- CheckCommand.cpp - moec check ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include "moec/Rules/RuleEngine.h"

namespace moec::driver {

int runCheck() {
  if (ListRules) {
    for (const DiagInfo &I : allDiagInfos()) {
      llvm::StringRef Source = ruleSource(lookupDiagID(I.Id).getValue());
      llvm::outs() << llvm::formatv("{0,-36} {1,-8} {2}\n", I.Id, severityName(I.DefaultSeverity),
                                    Source.empty() ? "front end" : Source);
    }
    return ExitOK;
  }
  if (CheckFiles.empty()) {
    llvm::errs() << "moec check: no input files (use - for standard input)\n";
    return ExitUsage;
  }
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true);
  if (!CheckOutput.empty()) {
    // The report file is replaced whole or not at all (docs/reliability.md).
    const std::vector<Diagnostic> &Final = C->Diags->finish();
    std::string Report;
    llvm::raw_string_ostream OS(Report);
    if (OutputFormat == Format::Text)
      renderText(Final, C->SM, OS, /*Colors=*/false, ShowRemarks);
    else if (OutputFormat == Format::JSON)
      OS << llvm::formatv("{0:2}", renderJSON(Final, C->SM)) << "\n";
    else
      OS << llvm::formatv("{0:2}", renderSARIF(Final, C->SM, MOEC_VERSION)) << "\n";
    OS.flush();
    if (llvm::Error E = writeFileAtomically(CheckOutput, Report)) {
      llvm::errs() << "moec check: " << llvm::toString(std::move(E)) << "\n";
      return ExitUsage;
    }
  } else {
    renderDiagnostics(*C, OutputFormat);
  }
  if (C->Unreadable)
    return ExitUsage;
  return C->Diags->hasErrors() ? ExitErrors : ExitOK;
}

} // namespace moec::driver
