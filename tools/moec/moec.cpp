//===- moec.cpp - The moec command line -----------------------------------===//
//
//   moec check FILE... [--recipe NAME] [--format text|json|sarif] [-Werror]
//                      [-Wno-ID] [-I DIR] [--color auto|always|never]
//   moec plan FILE [--recipe NAME] [--format toml|json] [-o FILE] [--dump-layout]
//   moec sweep FILE [--csv]
//   moec run FILE [--recipe NAME] [--np N] [--steps K] [--log FILE] [--moerun PATH]
//                 [--seed S] [--lr X] [--timeout SECONDS] [--dry-run]
//   moec fmt FILE... [--check | --write]
//   moec export --to megatron-bridge FILE [--recipe NAME] [--format overrides|yaml]
//   moec import --from megatron-bridge FILE.yaml [-o out.moe]
//   moec launch FILE --slurm|--mpirun [--engine moerun|bridge] [-o script]
//   moec lsp [-I DIR] [-W...] [--no-planner] [--catalog-dir DIR]
//   moec report FILE [--recipe NAME] -o report.html
//   moec explain ID | moec schema | moec rule-index
//
// Exit status: 0 no error, 1 at least one error diagnostic, 2 the tool could
// not run (usage, unreadable file).
//
// Each command lives in its own file (CheckCommand.cpp, ...); its options are
// in Options.cpp.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Options.h"

#include "moec/Diag/DiagnosticEngine.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace moec::driver;

/// `moec chek f.moe`: LLVM's parser would report every argument as unknown;
/// name the command that was probably meant instead.
static bool unknownCommand(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0')
    return false;
  llvm::StringRef Word(argv[1]);
  std::vector<llvm::StringRef> Names;
  for (cl::SubCommand *S : cl::getRegisteredSubcommands())
    if (!S->getName().empty())
      Names.push_back(S->getName());
  if (llvm::is_contained(Names, Word))
    return false;
  if (Word.endswith(".moe"))
    llvm::errs() << "moec: '" << Word << "' is not a moec command; to check it, run 'moec check " << Word << "'\n";
  else
    llvm::errs() << "moec: '" << Word << "' is not a moec command" << moec::didYouMean(Word, Names)
                 << " (moec --help lists them)\n";
  return true;
}

int main(int argc, char **argv) {
  cl::SetVersionPrinter([](llvm::raw_ostream &OS) { OS << "moec " << MOEC_VERSION << "\n"; });
  if (unknownCommand(argc, argv))
    return ExitUsage;
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
  if (TargetsCmd)
    return runTargets();
  if (RuleIndexCmd)
    return runRuleIndex();
  if (SchemaCmd)
    return runSchema();
  if (FmtCmd)
    return runFmt();
  if (ExportCmd)
    return runExport();
  if (ImportCmd)
    return runImport();
  if (LaunchCmd)
    return runLaunch();
  if (LspCmd)
    return runLsp();
  if (ReportCmd)
    return runReport();
  llvm::errs() << "moec: expected a command: check, plan, sweep, explain, targets, schema, run, fmt, lsp, report, "
                  "export, import or launch (see moec --help)\n";
  return ExitUsage;
}
