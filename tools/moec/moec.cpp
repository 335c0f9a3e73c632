//===- moec.cpp - The moec command line -----------------------------------===//
//
//   moec check FILE... [--recipe NAME] [--format text|json|sarif] [-Werror]
//                      [-Wno-ID] [-I DIR] [--color auto|always|never]
//   moec explain ID
//
// Exit status: 0 no error, 1 at least one error diagnostic, 2 the tool could
// not run (usage, unreadable file).
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Schema.h"
#include "moec/Sema/Sema.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace moec;
namespace cl = llvm::cl;

namespace {
cl::SubCommand CheckCmd("check", "Parse, type-check and lint recipes");
cl::SubCommand ExplainCmd("explain", "Explain a diagnostic ID");
cl::SubCommand SchemaCmd("schema", "Print the field tables of the language (Markdown)");
cl::SubCommand RuleIndexCmd("rule-index", "Print the rule index (Markdown) for docs/rules.md");

cl::list<std::string> CheckFiles(cl::Positional, cl::desc("<file.moe | ->..."), cl::sub(CheckCmd));
cl::opt<std::string> RecipeName("recipe", cl::desc("Check only this recipe"), cl::value_desc("name"),
                                cl::sub(CheckCmd));
enum class Format { Text, JSON, SARIF };
cl::opt<Format> OutputFormat("format", cl::desc("Diagnostic output format"), cl::init(Format::Text),
                             cl::values(clEnumValN(Format::Text, "text", "clang-style text on stderr"),
                                        clEnumValN(Format::JSON, "json", "a JSON array on stdout"),
                                        clEnumValN(Format::SARIF, "sarif", "SARIF 2.1.0 on stdout")),
                             cl::sub(CheckCmd));
cl::list<std::string> Warnings("W", cl::Prefix, cl::desc("-Werror: warnings are errors; -Wno-ID: silence ID"),
                               cl::value_desc("error|no-ID"), cl::sub(CheckCmd));
cl::list<std::string> IncludeDirs("I", cl::Prefix, cl::desc("Add a directory to the import search path"),
                                  cl::value_desc("dir"), cl::sub(CheckCmd));
enum class ColorMode { Auto, Always, Never };
cl::opt<ColorMode> Color("color", cl::desc("Colour text diagnostics"), cl::init(ColorMode::Auto),
                         cl::values(clEnumValN(ColorMode::Auto, "auto", "when stderr is a terminal"),
                                    clEnumValN(ColorMode::Always, "always", "always"),
                                    clEnumValN(ColorMode::Never, "never", "never")),
                         cl::sub(CheckCmd));
cl::opt<bool> DumpAST("dump-ast", cl::desc("Print the syntax tree as canonical source"), cl::sub(CheckCmd));
cl::opt<bool> DumpRecipe("dump-recipe", cl::desc("Print each typed recipe with provenance"), cl::sub(CheckCmd));
cl::opt<bool> ListRules("list-rules", cl::desc("List every diagnostic ID with its severity"), cl::sub(CheckCmd));
cl::opt<unsigned> ErrorLimit("error-limit", cl::desc("Stop after this many errors (0: no limit)"), cl::init(50),
                             cl::sub(CheckCmd));

cl::opt<std::string> ExplainID(cl::Positional, cl::desc("<diagnostic-id>"), cl::Required, cl::sub(ExplainCmd));

constexpr int ExitOK = 0, ExitErrors = 1, ExitUsage = 2;

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

/// The first sentence of an explanation, for one-line summaries.
llvm::StringRef firstSentence(llvm::StringRef Text) {
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

  DiagnosticOptions Opts;
  Opts.ErrorLimit = ErrorLimit;
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

  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM, Opts);
  for (const std::string &W : UnknownWarnings) {
    std::vector<llvm::StringRef> Known;
    for (const DiagInfo &I : allDiagInfos())
      Known.push_back(I.Id);
    Diags.report(diag::unknown_diagnostic, llvm::SMRange(), W, didYouMean(W, Known));
  }

  SemaOptions SOpts;
  SOpts.IncludeDirs.assign(IncludeDirs.begin(), IncludeDirs.end());
  SOpts.Catalog = BuiltinCatalog::parse(Diags, SOpts.Limits);
  bool Unreadable = false;
  std::vector<Recipe> Recipes;
  // Each file is its own unit: its names do not leak into the next file.
  std::vector<std::unique_ptr<Sema>> Units;
  for (const std::string &File : CheckFiles) {
    Units.push_back(std::make_unique<Sema>(Diags, SOpts));
    Sema &S = *Units.back();
    Sema::LoadResult Load = S.loadFile(File);
    if (Load == Sema::LoadResult::Unreadable) {
      Unreadable = true;
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
  bool SomeFileDefines = !RecipeName.empty() && llvm::any_of(Units, [&](const std::unique_ptr<Sema> &S) {
                           return S->mainFile() && Defines(*S);
                         });
  for (const std::unique_ptr<Sema> &Unit : Units) {
    Sema &S = *Unit;
    if (!S.mainFile() || (SomeFileDefines && !Defines(S)))
      continue;
    llvm::Optional<llvm::StringRef> Only;
    if (!RecipeName.empty())
      Only = llvm::StringRef(RecipeName);
    std::vector<Recipe> Found = S.analyze(Only);
    for (const Recipe &R : Found)
      runRules(R, Diags);
    if (DumpRecipe)
      for (const Recipe &R : Found)
        printRecipe(R, SM, llvm::outs());
    Recipes.insert(Recipes.end(), std::make_move_iterator(Found.begin()), std::make_move_iterator(Found.end()));
  }

  const std::vector<Diagnostic> &Final = Diags.finish();
  switch (OutputFormat) {
  case Format::Text: {
    bool Colors = Color == ColorMode::Always ||
                  (Color == ColorMode::Auto && llvm::sys::Process::StandardErrHasColors());
    renderText(Final, SM, llvm::errs(), Colors);
    break;
  }
  case Format::JSON:
    llvm::outs() << llvm::formatv("{0:2}", renderJSON(Final, SM)) << "\n";
    break;
  case Format::SARIF:
    llvm::outs() << llvm::formatv("{0:2}", renderSARIF(Final, SM, MOEC_VERSION)) << "\n";
    break;
  }
  if (Unreadable)
    return ExitUsage;
  return Diags.hasErrors() ? ExitErrors : ExitOK;
}
} // namespace

int main(int argc, char **argv) {
  cl::SetVersionPrinter([](llvm::raw_ostream &OS) { OS << "moec " << MOEC_VERSION << "\n"; });
  if (!cl::ParseCommandLineOptions(argc, argv, "moec: a compiler for MoE training recipes\n", &llvm::errs()))
    return ExitUsage;
  if (CheckCmd)
    return runCheck();
  if (ExplainCmd)
    return runExplain();
  if (RuleIndexCmd)
    return runRuleIndex();
  if (SchemaCmd) {
    printSchemaMarkdown(llvm::outs());
    return ExitOK;
  }
  llvm::errs() << "moec: expected a command: check, explain or schema (see moec --help)\n";
  return ExitUsage;
}
