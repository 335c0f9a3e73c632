//===- InfoCommands.cpp - moec explain, rule-index, schema ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Schema.h"
#include "llvm/Support/SourceMgr.h"

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
  return ExitOK;
}

static llvm::StringRef firstSentence(llvm::StringRef Text);

/// The first sentence of an explanation, for one-line summaries.
static llvm::StringRef firstSentence(llvm::StringRef Text) {
  size_t End = Text.find(". ");
  return End == llvm::StringRef::npos ? Text : Text.take_front(End + 1);
}

int runRuleIndex() {
  llvm::outs() << "| ID | severity | source | what it checks |\n| --- | --- | --- | --- |\n";
  for (const RuleSpec &R : allRules()) {
    const DiagInfo &I = getDiagInfo(R.ID);
    llvm::outs() << "| `" << I.Id << "` | " << severityName(I.DefaultSeverity) << " | " << R.Source << " | "
                 << firstSentence(I.Explanation) << " |\n";
  }
  return ExitOK;
}

int runSchema() {
  printSchemaMarkdown(llvm::outs());
  return ExitOK;
}

} // namespace moec::driver
