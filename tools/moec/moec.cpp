//===- moec.cpp - The moec command line -----------------------------------===//
//
//   moec check FILE... [--recipe NAME] [--format text|json|sarif] [-Werror]
//                      [-Wno-ID] [-I DIR] [--color auto|always|never]
//   moec explain ID
//   moec run FILE [--recipe NAME] --np N [--steps K] [--log FILE] [--moerun PATH]
//                 [--seed S] [--lr X] [--timeout SECONDS] [--dry-run]
//
// Exit status: 0 no error, 1 at least one error diagnostic, 2 the tool could
// not run (usage, unreadable file).
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Schema.h"
#include "moec/Sema/Sema.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include <map>
#include <unistd.h>

using namespace moec;
namespace cl = llvm::cl;

namespace {
cl::SubCommand CheckCmd("check", "Parse, type-check and lint recipes");
cl::SubCommand ExplainCmd("explain", "Explain a diagnostic ID");
cl::SubCommand SchemaCmd("schema", "Print the field tables of the language (Markdown)");
cl::SubCommand RuleIndexCmd("rule-index", "Print the rule index (Markdown) for docs/rules.md");
cl::SubCommand PlanCmd("plan", "Lower a recipe to a launch plan (rank layout, schedule, memory, speed)");
cl::SubCommand SweepCmd("sweep", "Expand sweeps, prune infeasible points, rank the rest by predicted speed");
cl::SubCommand RunCmd("run", "Compile a recipe to a plan and run it on this machine with mpirun and moerun");

cl::list<std::string> CheckFiles(cl::Positional, cl::desc("<file.moe | ->..."), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd), cl::sub(RunCmd));
cl::opt<std::string> RecipeName("recipe", cl::desc("Check only this recipe"), cl::value_desc("name"),
                                cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd), cl::sub(RunCmd));
enum class Format { Text, JSON, SARIF };
cl::opt<Format> OutputFormat("format", cl::desc("Diagnostic output format"), cl::init(Format::Text),
                             cl::values(clEnumValN(Format::Text, "text", "clang-style text on stderr"),
                                        clEnumValN(Format::JSON, "json", "a JSON array on stdout"),
                                        clEnumValN(Format::SARIF, "sarif", "SARIF 2.1.0 on stdout")),
                             cl::sub(CheckCmd));
cl::list<std::string> Warnings("W", cl::Prefix, cl::desc("-Werror: warnings are errors; -Wno-ID: silence ID"),
                               cl::value_desc("error|no-ID"), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd),
                               cl::sub(RunCmd));
cl::list<std::string> IncludeDirs("I", cl::Prefix, cl::desc("Add a directory to the import search path"),
                                  cl::value_desc("dir"), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd),
                                  cl::sub(RunCmd));
enum class ColorMode { Auto, Always, Never };
cl::opt<ColorMode> Color("color", cl::desc("Colour text diagnostics"), cl::init(ColorMode::Auto),
                         cl::values(clEnumValN(ColorMode::Auto, "auto", "when stderr is a terminal"),
                                    clEnumValN(ColorMode::Always, "always", "always"),
                                    clEnumValN(ColorMode::Never, "never", "never")),
                         cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd));
cl::opt<bool> DumpAST("dump-ast", cl::desc("Print the syntax tree as canonical source"), cl::sub(CheckCmd));
cl::opt<bool> DumpRecipe("dump-recipe", cl::desc("Print each typed recipe with provenance"), cl::sub(CheckCmd));
cl::opt<bool> NoPlanner("no-planner",
                        cl::desc("Skip the checks that need the planner's memory model (memory-exceeds-hbm, "
                                 "memory-headroom)"),
                        cl::sub(CheckCmd));
cl::opt<bool> ListRules("list-rules", cl::desc("List every diagnostic ID with its severity"), cl::sub(CheckCmd));
cl::opt<unsigned> ErrorLimit("error-limit", cl::desc("Stop after this many errors (0: no limit)"), cl::init(50),
                             cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd));

enum class PlanFormatKind { TOML, JSON };
cl::opt<PlanFormatKind> PlanFormat("format", cl::desc("Plan output format"), cl::init(PlanFormatKind::TOML),
                                   cl::values(clEnumValN(PlanFormatKind::TOML, "toml", "TOML (the runtime's input)"),
                                              clEnumValN(PlanFormatKind::JSON, "json", "JSON (for other tools)")),
                                   cl::sub(PlanCmd));
cl::opt<std::string> PlanOutput("o", cl::desc("Write the plan to this file (atomically) instead of stdout"),
                                cl::value_desc("file"), cl::sub(PlanCmd));
cl::opt<bool> Quiet("quiet", cl::desc("Do not print the human summary"), cl::sub(PlanCmd));
cl::opt<bool> SweepCSV("csv", cl::desc("Print the ranking as CSV"), cl::sub(SweepCmd));

cl::opt<unsigned> RunRanks("np", cl::desc("Number of ranks (must equal the plan's world size)"), cl::Required,
                           cl::value_desc("N"), cl::sub(RunCmd));
cl::opt<unsigned> RunSteps("steps", cl::desc("Training steps"), cl::init(1), cl::value_desc("K"), cl::sub(RunCmd));
cl::opt<std::string> RunLog("log", cl::desc("Write one JSON line per step to this file"), cl::value_desc("file"),
                            cl::sub(RunCmd));
cl::opt<std::string> RunMoerun("moerun", cl::desc("The moerun executable (default: found next to moec)"),
                               cl::value_desc("path"), cl::sub(RunCmd));
cl::opt<std::string> RunSeed("seed", cl::desc("Forwarded to moerun"), cl::value_desc("S"), cl::sub(RunCmd));
cl::opt<std::string> RunLR("lr", cl::desc("Forwarded to moerun"), cl::value_desc("X"), cl::sub(RunCmd));
cl::opt<std::string> RunTimeout("timeout", cl::desc("Forwarded to moerun"), cl::value_desc("seconds"),
                                cl::sub(RunCmd));
cl::opt<bool> RunDry("dry-run", cl::desc("Only check the plan and the process groups (moerun --dry-run)"),
                     cl::sub(RunCmd));

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

/// What every command that reads recipes shares: diagnostics options, the
/// files parsed and checked, and the recipes (one per sweep point) that
/// passed Sema, each with the rules already run over it.
struct Compilation {
  llvm::SourceMgr SM;
  std::unique_ptr<DiagnosticEngine> Diags;
  std::vector<std::unique_ptr<Sema>> Units;
  std::vector<std::pair<Recipe, std::string>> Recipes; // with the file defining it
  bool Unreadable = false;
};

std::unique_ptr<Compilation> compile(bool RunRules, bool CapErrors = true) {
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
  renderDiagnostics(*C, OutputFormat);
  if (C->Unreadable)
    return ExitUsage;
  return C->Diags->hasErrors() ? ExitErrors : ExitOK;
}

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
  } else {
    llvm::outs() << Document;
  }
  if (!Quiet)
    for (const Plan &P : Plans)
      printPlanSummary(P, llvm::errs());
  return ExitOK;
}

int runSweep() {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec sweep: expected one recipe file\n";
    return ExitUsage;
  }
  // Every point's errors decide whether it is pruned: no error cap here.
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true, /*CapErrors=*/false);
  const std::vector<Diagnostic> &Final = C->Diags->finish();
  if (C->Unreadable)
    return ExitUsage;
  // Errors outside any recipe point (syntax, names) stop the sweep.
  std::map<std::string, std::string> Pruned;
  bool Fatal = false;
  for (const Diagnostic &D : Final) {
    if (D.Sev != Severity::Error)
      continue;
    if (D.Recipe.empty())
      Fatal = true;
    else if (!Pruned.count(D.Recipe) || (Pruned[D.Recipe].find("[memory-") != std::string::npos &&
                                         D.ID != diag::memory_exceeds_hbm))
      // A structural error explains a point better than the memory it would need.
      Pruned[D.Recipe] = D.Message + " [" + getDiagInfo(D.ID).Id.str() + "]";
  }
  if (Fatal) {
    renderText(Final, C->SM, llvm::errs(), false);
    return ExitErrors;
  }
  struct Row {
    std::string Point;
    double TokensPerSec, StepTime, MFU, PeakGB, CapacityGB;
  };
  std::vector<Row> Feasible;
  PlanOptions Opts;
  Opts.WithRanks = false;
  for (auto &[R, File] : C->Recipes) {
    if (Pruned.count(R.PointName))
      continue;
    llvm::Expected<Plan> P = buildPlan(R, File, Opts);
    if (!P) {
      Pruned[R.PointName] = llvm::toString(P.takeError());
      continue;
    }
    if (!P->Memory.fits()) {
      Pruned[R.PointName] = fmt::format("predicted peak memory {:.1f} GB exceeds {:.1f} GB",
                                        P->Memory.PeakBytes / 1e9, P->Memory.CapacityBytes / 1e9);
      continue;
    }
    Feasible.push_back({R.PointName, P->Time.TokensPerSecPerGpu, P->Time.StepTime, P->Time.MFU,
                        P->Memory.PeakBytes / 1e9, P->Memory.CapacityBytes / 1e9});
  }
  std::stable_sort(Feasible.begin(), Feasible.end(),
                   [](const Row &A, const Row &B) { return A.TokensPerSec > B.TokensPerSec; });
  if (SweepCSV) {
    llvm::outs() << "rank,point,tokens_per_s_per_gpu,step_time_s,mfu,peak_gb,capacity_gb,feasible,reason\n";
    auto Quote = [](const std::string &S) {
      std::string Out = "\"";
      for (char Ch : S)
        Out += Ch == '"' ? std::string("\"\"") : std::string(1, Ch);
      return Out + "\"";
    };
    for (size_t I = 0; I < Feasible.size(); ++I) {
      const Row &R = Feasible[I];
      llvm::outs() << fmt::format("{},{},{:.1f},{:.4f},{:.4f},{:.2f},{:.2f},true,\n", I + 1, Quote(R.Point),
                                  R.TokensPerSec, R.StepTime, R.MFU, R.PeakGB, R.CapacityGB);
    }
    for (auto &[Point, Reason] : Pruned)
      llvm::outs() << fmt::format(",{},,,,,,false,{}\n", Quote(Point), Quote(Reason));
    return ExitOK;
  }
  size_t Width = 5;
  for (const Row &R : Feasible)
    Width = std::max(Width, R.Point.size());
  llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12}  {:>8}  {:>6}  {:>14}\n", "rank", "point", Width,
                              "tokens/s/GPU", "step s", "MFU", "peak / HBM GB");
  for (size_t I = 0; I < Feasible.size(); ++I) {
    const Row &R = Feasible[I];
    llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12.0f}  {:>8.2f}  {:>5.1f}%  {:>6.1f} / {:<6.1f}\n", I + 1, R.Point,
                                Width, R.TokensPerSec, R.StepTime, 100 * R.MFU, R.PeakGB, R.CapacityGB);
  }
  if (!Pruned.empty()) {
    llvm::outs() << fmt::format("\npruned {} infeasible point{}:\n", Pruned.size(), Pruned.size() == 1 ? "" : "s");
    for (auto &[Point, Reason] : Pruned)
      llvm::outs() << "  " << Point << ": " << Reason << "\n";
  }
  return ExitOK;
}
/// moerun: --moerun, else next to moec (an install), else the build tree's
/// sibling tools/moerun, else PATH.
std::string findMoerun(const char *Argv0) {
  if (!RunMoerun.empty())
    return llvm::sys::fs::can_execute(RunMoerun) ? RunMoerun.getValue() : "";
  std::string Self = llvm::sys::fs::getMainExecutable(Argv0, reinterpret_cast<void *>(&findMoerun));
  llvm::SmallString<256> Dir(Self);
  llvm::sys::path::remove_filename(Dir);
  for (const char *Rel : {"moerun", "../moerun/moerun"}) {
    llvm::SmallString<256> Candidate(Dir);
    llvm::sys::path::append(Candidate, Rel);
    if (llvm::sys::fs::can_execute(Candidate))
      return std::string(Candidate);
  }
  if (llvm::ErrorOr<std::string> OnPath = llvm::sys::findProgramByName("moerun"))
    return *OnPath;
  return "";
}

int runRun(const char *Argv0) {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec run: expected one recipe file\n";
    return ExitUsage;
  }
  // The same path as `moec plan -o`: a plan only for a recipe that checks.
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true);
  renderDiagnostics(*C, Format::Text);
  if (C->Unreadable)
    return ExitUsage;
  if (C->Diags->hasErrors())
    return ExitErrors;
  if (C->Recipes.size() != 1) {
    llvm::errs() << "moec run: '" << CheckFiles.front() << "' "
                 << (C->Recipes.empty() ? std::string("defines no recipe")
                                        : fmt::format("has {} recipes (or sweep points); choose one with --recipe, "
                                                      "or use `moec plan` and mpirun per point",
                                                      C->Recipes.size()))
                 << "\n";
    return ExitUsage;
  }
  auto &[R, File] = C->Recipes.front();
  llvm::Expected<Plan> P = buildPlan(R, File);
  if (!P) {
    llvm::errs() << "moec run: " << R.PointName << ": " << llvm::toString(P.takeError()) << "\n";
    return ExitErrors;
  }
  if (int64_t(RunRanks) != R.WorldSize) {
    llvm::errs() << fmt::format("moec run: recipe '{}' runs on {} ranks (world_size = {}), but --np is {}\n",
                                R.PointName, R.WorldSize, R.WorldSize, unsigned(RunRanks));
    return ExitUsage;
  }
  std::string Moerun = findMoerun(Argv0);
  if (Moerun.empty()) {
    if (!RunMoerun.empty())
      llvm::errs() << "moec run: --moerun '" << RunMoerun << "' is not an executable file\n";
    else
      llvm::errs() << "moec run: cannot find moerun next to moec or on PATH; give it with --moerun PATH\n";
    return ExitUsage;
  }
  llvm::ErrorOr<std::string> Mpirun = llvm::sys::findProgramByName("mpirun");
  if (!Mpirun) {
    llvm::errs() << "moec run: cannot find mpirun on PATH (install Open MPI, or launch moerun yourself: "
                    "docs/runtime.md)\n";
    return ExitUsage;
  }

  llvm::SmallString<256> Dir;
  if (std::error_code EC = llvm::sys::fs::createUniqueDirectory("moec-run", Dir)) {
    llvm::errs() << "moec run: cannot create a temporary directory: " << EC.message() << "\n";
    return ExitUsage;
  }
  llvm::SmallString<256> PlanPath(Dir);
  llvm::sys::path::append(PlanPath, "plan.toml");
  if (llvm::Error E = writeFileAtomically(PlanPath, planToTOML(*P))) {
    llvm::errs() << "moec run: " << llvm::toString(std::move(E)) << "\n";
    return ExitUsage;
  }

  std::vector<std::string> Args = {*Mpirun, "--oversubscribe", "-np", std::to_string(unsigned(RunRanks))};
  if (::getuid() == 0)
    Args.push_back("--allow-run-as-root");
  Args.insert(Args.end(), {Moerun, std::string(PlanPath), "--steps", std::to_string(unsigned(RunSteps))});
  for (auto [Flag, Value] : {std::make_pair("--log", &RunLog), std::make_pair("--seed", &RunSeed),
                             std::make_pair("--lr", &RunLR), std::make_pair("--timeout", &RunTimeout)})
    if (!Value->empty())
      Args.insert(Args.end(), {Flag, Value->getValue()});
  if (RunDry)
    Args.push_back("--dry-run");
  std::vector<llvm::StringRef> ArgRefs(Args.begin(), Args.end());
  std::string ExecError;
  int Status = llvm::sys::ExecuteAndWait(*Mpirun, ArgRefs, llvm::None, {}, 0, 0, &ExecError);
  if (Status < 0) {
    llvm::errs() << "moec run: mpirun " << (Status == -1 ? "could not be started" : "crashed") << ": " << ExecError
                 << "; the plan is kept at " << PlanPath << "\n";
    return ExitUsage;
  }
  if (Status != 0) {
    // Kept for a rerun by hand (mpirun -np N moerun PLAN).
    llvm::errs() << "moec run: mpirun exited with status " << Status << "; the plan is kept at " << PlanPath << "\n";
    return Status;
  }
  llvm::sys::fs::remove(PlanPath);
  llvm::sys::fs::remove(Dir);
  return ExitOK;
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
  if (PlanCmd)
    return runPlan();
  if (SweepCmd)
    return runSweep();
  if (RunCmd)
    return runRun(argv[0]);
  if (RuleIndexCmd)
    return runRuleIndex();
  if (SchemaCmd) {
    printSchemaMarkdown(llvm::outs());
    return ExitOK;
  }
  llvm::errs() << "moec: expected a command: check, plan, sweep, explain, schema or run (see moec --help)\n";
  return ExitUsage;
}
