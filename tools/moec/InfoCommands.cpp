//===- InfoCommands.cpp - moec explain, rule-index, schema ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Schema.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

int runExplain() {
  llvm::Optional<diag::ID> ID = lookupDiagID(ExplainID);
  if (!ID) {
    std::vector<llvm::StringRef> Known;
    for (const DiagInfo &I : allDiagInfos())
      Known.push_back(I.Id);
    llvm::SourceMgr SM;
    DiagnosticOptions Opts;
    Opts.WarningsAsErrors = true; // nothing to explain: the tool exits 2
    DiagnosticEngine Diags(SM, Opts);
    Diags.report(diag::unknown_diagnostic, llvm::SMRange(), ExplainID.getValue(), didYouMean(ExplainID, Known));
    renderText(Diags.finish(), SM, llvm::errs(), false);
    return ExitUsage;
  }
  const DiagInfo &Info = getDiagInfo(*ID);
  llvm::outs() << Info.Id << " (" << severityName(Info.DefaultSeverity) << ")\n\n" << Info.Explanation << "\n";
  if (llvm::StringRef Source = ruleSource(*ID); !Source.empty())
    llvm::outs() << "\nSource: " << Source << "\n";
  if (ruleHasTargets(*ID)) {
    llvm::outs() << "\nWhere it holds:\n";
    for (const TargetInfo &T : allTargets()) {
      llvm::Optional<Severity> Sev = ruleSeverity(*ID, T.T);
      llvm::outs() << "  " << llvm::formatv("{0,-26}", T.Name) << " "
                   << llvm::formatv("{0,-8}", Sev ? severityName(*Sev) : "off") << " " << ruleMirror(*ID, T.T) << "\n";
    }
  } else if (!ruleSource(*ID).empty()) {
    llvm::outs() << "\nHolds for every target.\n";
  }
  return ExitOK;
}

static llvm::StringRef firstSentence(llvm::StringRef Text);

/// The first sentence of an explanation, for one-line summaries.
static llvm::StringRef firstSentence(llvm::StringRef Text) {
  size_t End = Text.find(". ");
  return End == llvm::StringRef::npos ? Text : Text.take_front(End + 1);
}

int runRuleIndex() {
  llvm::outs() << "| ID |";
  for (const TargetInfo &T : allTargets())
    llvm::outs() << " " << T.Name << " |";
  llvm::outs() << " source | what it checks |\n| --- |";
  for (size_t I = 0; I < allTargets().size(); ++I)
    llvm::outs() << " --- |";
  llvm::outs() << " --- | --- |\n";
  for (const RuleSpec &R : allRules()) {
    const DiagInfo &I = getDiagInfo(R.ID);
    llvm::outs() << "| `" << I.Id << "` |";
    for (const TargetInfo &T : allTargets()) {
      llvm::Optional<Severity> Sev = ruleSeverity(R.ID, T.T);
      llvm::outs() << " " << (Sev ? severityName(*Sev) : "off") << " |";
    }
    llvm::outs() << " " << R.Source << " | " << firstSentence(I.Explanation) << " |\n";
  }
  return ExitOK;
}

int runTargets() {
  for (const TargetInfo &T : allTargets())
    llvm::outs() << llvm::formatv("{0,-26}", T.Name) << " " << T.Components
                 << (T.T == DefaultTarget ? " (the default)" : "") << "\n";
  return ExitOK;
}

int runSchema() {
  printSchemaMarkdown(llvm::outs());
  return ExitOK;
}

} // namespace moec::driver
