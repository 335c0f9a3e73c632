//===- CheckCommand.cpp - moec check ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include <map>

namespace moec::driver {

namespace {

/// `moec check --fix`: the fix-its of errors and warnings, applied to the
/// files named on the command line (as clang -fixit does). Overlapping edits
/// keep the first; a second run applies what a first one enabled. Returns
/// false when a file could not be written.
bool applyFixIts(Compilation &C, llvm::ArrayRef<Diagnostic> Final) {
  struct Edit {
    size_t Begin, End;
    std::string Text;
  };
  std::map<unsigned, std::vector<Edit>> ByBuffer;
  for (const Diagnostic &D : Final) {
    if (D.Sev == Severity::Remark)
      continue;
    for (const FixIt &F : D.FixIts) {
      if (!F.Range.Start.isValid() || !F.Range.End.isValid())
        continue;
      unsigned Buf = C.SM.FindBufferContainingLoc(F.Range.Start);
      if (!Buf || Buf != C.SM.FindBufferContainingLoc(F.Range.End))
        continue;
      const char *Base = C.SM.getMemoryBuffer(Buf)->getBufferStart();
      ByBuffer[Buf].push_back(
          {size_t(F.Range.Start.getPointer() - Base), size_t(F.Range.End.getPointer() - Base), F.Replacement});
    }
  }
  bool Ok = true;
  for (auto &[Buf, Edits] : ByBuffer) {
    llvm::StringRef Name = C.SM.getMemoryBuffer(Buf)->getBufferIdentifier();
    if (!llvm::is_contained(CheckFiles, Name) || Name == "-")
      continue; // the built-in catalog, an import, standard input
    llvm::stable_sort(Edits, [](const Edit &A, const Edit &B) { return A.Begin < B.Begin; });
    std::vector<Edit> Kept;
    unsigned Overlapping = 0;
    for (Edit &E : Edits) {
      if (!Kept.empty() && E.Begin == Kept.back().Begin && E.End == Kept.back().End && E.Text == Kept.back().Text)
        continue; // the same fix-it from several sweep points
      if (!Kept.empty() && E.Begin < Kept.back().End) {
        ++Overlapping;
        continue;
      }
      Kept.push_back(std::move(E));
    }
    std::string Text = C.SM.getMemoryBuffer(Buf)->getBuffer().str();
    for (auto It = Kept.rbegin(); It != Kept.rend(); ++It)
      Text.replace(It->Begin, It->End - It->Begin, It->Text);
    if (llvm::Error E = writeFileAtomically(Name, Text)) {
      llvm::errs() << "moec check: " << llvm::toString(std::move(E)) << "\n";
      Ok = false;
      continue;
    }
    llvm::errs() << fmt::format("moec check: applied {} fix-it{} to {}{}\n", Kept.size(), Kept.size() == 1 ? "" : "s",
                                Name.str(),
                                Overlapping ? fmt::format(" ({} overlapping one{} left for another run)", Overlapping,
                                                          Overlapping == 1 ? "" : "s")
                                            : std::string());
  }
  return Ok;
}

} // namespace

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
  if (ApplyFixIts && !applyFixIts(*C, C->Diags->finish()))
    return ExitUsage;
  return C->Diags->hasErrors() ? ExitErrors : ExitOK;
}

} // namespace moec::driver
