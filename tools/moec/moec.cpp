//===- moec.cpp - The moec command line -----------------------------------===//
//
//   moec check FILE... [--recipe NAME] [--format text|json|sarif] [-Werror]
//                      [-Wno-ID] [-I DIR] [--color auto|always|never]
//   moec plan FILE [--recipe NAME] [--format toml|json] [-o FILE] [--dump-layout]
//   moec sweep FILE [--csv]
//   moec run FILE [--recipe NAME] --np N [--steps K] [--log FILE] [--moerun PATH]
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

#include "llvm/Support/raw_ostream.h"

using namespace moec::driver;

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
  llvm::errs() << "moec: expected a command: check, plan, sweep, explain, targets, schema, run, fmt, lsp, report, export, import or launch (see moec --help)\n";
  return ExitUsage;
}
