//===- Driver.cpp - Loading, checking and reporting recipes ---------------===//
#include "Driver.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

namespace moec::driver {

std::vector<std::string> applyWarningFlags(DiagnosticOptions &Opts) {
  std::vector<std::string> Unknown;
  for (const std::string &W : Warnings) {
    llvm::StringRef Flag(W);
    if (Flag == "error")
      Opts.WarningsAsErrors = true;
    else if (Flag.consume_front("no-")) {
      if (auto ID = lookupDiagID(Flag))
        Opts.Disabled.insert(*ID);
      else
        Unknown.push_back(W);
    } else {
      Unknown.push_back(W);
    }
  }
  return Unknown;
}

llvm::Optional<Target> commandLineTarget(DiagnosticEngine &Diags, bool &Bad) {
  if (TargetName.empty())
    return llvm::None;
  if (llvm::Optional<Target> T = lookupTarget(TargetName))
    return T;
  std::vector<llvm::StringRef> Names;
  for (const TargetInfo &I : allTargets())
    Names.push_back(I.Name);
  Diags.report(diag::unknown_target, llvm::SMRange(), TargetName.getValue(), didYouMean(TargetName, Names),
               knownTargetList());
  Bad = true;
  return llvm::None;
}

std::unique_ptr<Compilation> compile(bool RunRules, bool CapErrors) {
  auto C = std::make_unique<Compilation>();
  DiagnosticOptions Opts;
  Opts.ErrorLimit = CapErrors ? unsigned(ErrorLimit) : 0;
  std::vector<std::string> UnknownWarnings = applyWarningFlags(Opts);
  C->Diags = std::make_unique<DiagnosticEngine>(C->SM, Opts);
  DiagnosticEngine &Diags = *C->Diags;
  if (!UnknownWarnings.empty()) {
    // A command line that cannot mean what it says checks nothing (exit 2).
    std::vector<std::string> Spellings = {"error"};
    for (const DiagInfo &I : allDiagInfos())
      Spellings.push_back("no-" + I.Id.str());
    std::vector<llvm::StringRef> Known(Spellings.begin(), Spellings.end());
    for (llvm::StringRef W : UnknownWarnings) {
      auto Best = closestMatch(W, Known);
      Diags.report(diag::unknown_warning_option, llvm::SMRange(), W,
                   Best ? fmt::format("; did you mean '-W{}'?", Best->str()) : std::string());
    }
    C->Unreadable = true;
    return C;
  }

  SemaOptions SOpts;
  bool BadTarget = false;
  SOpts.TargetOverride = commandLineTarget(Diags, BadTarget);
  if (BadTarget) {
    C->Unreadable = true; // nothing was checked: exit status 2
    return C;
  }
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
  // --recipe names a recipe, or one of its sweep points: name[field=value, ...].
  llvm::StringRef RecipeDefinition = llvm::StringRef(RecipeName.getValue()).split('[').first.rtrim();
  auto Defines = [&](const Sema &S) {
    return llvm::any_of(S.mainFile()->Definitions, [&](const ast::Definition &D) {
      return D.Kind == ast::DefKind::Recipe && D.Name == RecipeDefinition;
    });
  };
  bool SomeFileDefines = !RecipeName.empty() && llvm::any_of(C->Units, [&](const std::unique_ptr<Sema> &S) {
    return S->mainFile() && Defines(*S);
  });
  std::vector<std::pair<std::vector<Recipe>, std::string>> FoundPerFile;
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
    FoundPerFile.push_back({std::move(Found), CheckFiles[I]});
  }
  // Recipe's move constructor is not noexcept (StringMap), so a growing
  // vector would copy every recipe it holds: reserve once, then move.
  size_t Total = 0;
  for (const auto &F : FoundPerFile)
    Total += F.first.size();
  C->Recipes.reserve(Total);
  for (auto &F : FoundPerFile)
    for (Recipe &R : F.first)
      C->Recipes.push_back({std::move(R), F.second});
  return C;
}

void renderDiagnostics(Compilation &C, Format F) {
  const std::vector<Diagnostic> &Final = C.Diags->finish();
  switch (F) {
  case Format::Text: {
    bool Colors =
        Color == ColorMode::Always || (Color == ColorMode::Auto && llvm::sys::Process::StandardErrHasColors());
    renderText(Final, C.SM, llvm::errs(), Colors, ShowRemarks);
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

OnePoint compileOnePoint(llvm::StringRef Command, llvm::StringRef Refusal) {
  OnePoint P;
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec " << Command << ": expected one recipe file (use - for standard input)\n";
    P.Status = ExitUsage;
    return P;
  }
  // A sweep point is named `recipe[field=value, ...]`: Sema lowers and the
  // rules check that point alone.
  std::string Point = RecipeName;
  llvm::StringRef Definition = llvm::StringRef(Point).split('[').first;
  P.C = compile(/*RunRules=*/true);
  renderDiagnostics(*P.C, Format::Text);
  if (P.C->Unreadable) {
    P.Status = ExitUsage;
    return P;
  }
  if (P.C->Diags->hasErrors()) {
    llvm::errs() << "moec " << Command << ": the recipe has errors; " << Refusal << "\n";
    P.Status = ExitErrors;
    return P;
  }
  if (P.C->Recipes.size() != 1) {
    std::vector<std::string> Points;
    for (const auto &X : P.C->Recipes)
      Points.push_back("  " + X.first.PointName);
    llvm::errs() << "moec " << Command << ": '" << CheckFiles.front() << "' "
                 << (P.C->Recipes.empty()
                         ? (Definition.size() != Point.size() ? "has no sweep point '" + Point + "'"
                                                              : std::string("defines no recipe"))
                         : fmt::format("has {} recipes (or sweep points); choose one with --recipe:\n{}",
                                       P.C->Recipes.size(), llvm::join(Points, "\n")))
                 << "\n";
    P.Status = P.C->Recipes.empty() ? ExitErrors : ExitUsage;
    return P;
  }
  P.R = &P.C->Recipes.front().first;
  P.File = P.C->Recipes.front().second;
  return P;
}

} // namespace moec::driver
