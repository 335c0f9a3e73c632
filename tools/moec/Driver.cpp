//===- Driver.cpp - Loading, checking and reporting recipes ---------------===//
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

namespace moec::driver {

std::unique_ptr<Compilation> compile(bool RunRules, bool CapErrors) {
  auto C = std::make_unique<Compilation>();
  DiagnosticOptions Opts;
  Opts.ErrorLimit = CapErrors ? unsigned(ErrorLimit) : 0;
  std::vector<std::string> UnknownWarnings;
  for (const std::string &W : Warnings) {
    llvm::StringRef Flag(W);
    if (Flag == "error")
      Opts.WarningsAsErrors = true;
    else if (Flag.consume_front("no-")) {
      if (auto ID = lookupDiagID(Flag))
        Opts.Disabled.insert(*ID);
      else
        UnknownWarnings.push_back(Flag.str());
    } else {
      UnknownWarnings.push_back(W);
    }
  }
  C->Diags = std::make_unique<DiagnosticEngine>(C->SM, Opts);
  DiagnosticEngine &Diags = *C->Diags;
  for (const std::string &W : UnknownWarnings) {
    std::vector<llvm::StringRef> Known;
    for (const DiagInfo &I : allDiagInfos())
      Known.push_back(I.Id);
    Diags.report(diag::unknown_diagnostic, llvm::SMRange(), W, didYouMean(W, Known));
  }

  SemaOptions SOpts;
  SOpts.IncludeDirs.assign(IncludeDirs.begin(), IncludeDirs.end());
  SOpts.MaxSweepPoints = MaxSweepPoints;
  SOpts.Catalog = BuiltinCatalog::parse(Diags, SOpts.Limits);
  // Each file is its own unit: its names do not leak into the next file.
  for (const std::string &File : CheckFiles) {
    C->Units.push_back(std::make_unique<Sema>(Diags, SOpts));
    Sema &S = *C->Units.back();
    Sema::LoadResult Load = S.loadFile(File);
    if (Load == Sema::LoadResult::Unreadable) {
      C->Unreadable = true;
      continue;
    }
    if (DumpAST && S.mainFile())
      ast::dump(*S.mainFile(), llvm::outs());
  }
  // With several files, --recipe names a recipe of one of them: the files
  // that do not define it are not analyzed rather than reported.
  auto Defines = [&](const Sema &S) {
    return llvm::any_of(S.mainFile()->Definitions, [&](const ast::Definition &D) {
      return D.Kind == ast::DefKind::Recipe && D.Name == RecipeName.getValue();
    });
  };
  bool SomeFileDefines = !RecipeName.empty() && llvm::any_of(C->Units, [&](const std::unique_ptr<Sema> &S) {
                           return S->mainFile() && Defines(*S);
                         });
  for (size_t I = 0; I < C->Units.size(); ++I) {
    Sema &S = *C->Units[I];
    if (!S.mainFile() || (SomeFileDefines && !Defines(S)))
      continue;
    llvm::Optional<llvm::StringRef> Only;
    if (!RecipeName.empty())
      Only = llvm::StringRef(RecipeName);
    std::vector<Recipe> Found = S.analyze(Only);
    if (RunRules)
      for (const Recipe &R : Found)
        runRules(R, Diags, !NoPlanner);
    if (DumpRecipe)
      for (const Recipe &R : Found)
        printRecipe(R, C->SM, llvm::outs());
    for (Recipe &R : Found)
      C->Recipes.push_back({std::move(R), CheckFiles[I]});
  }
  return C;
}

void renderDiagnostics(Compilation &C, Format F) {
  const std::vector<Diagnostic> &Final = C.Diags->finish();
  switch (F) {
  case Format::Text: {
    bool Colors = Color == ColorMode::Always ||
                  (Color == ColorMode::Auto && llvm::sys::Process::StandardErrHasColors());
    renderText(Final, C.SM, llvm::errs(), Colors);
    break;
  }
  case Format::JSON:
    llvm::outs() << llvm::formatv("{0:2}", renderJSON(Final, C.SM)) << "\n";
    break;
  case Format::SARIF:
    llvm::outs() << llvm::formatv("{0:2}", renderSARIF(Final, C.SM, MOEC_VERSION)) << "\n";
    break;
  }
}

} // namespace moec::driver
