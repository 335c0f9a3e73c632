//===- Commands.h - The moec subcommands ----------------------------------===//
#ifndef MOEC_TOOLS_MOEC_COMMANDS_H
#define MOEC_TOOLS_MOEC_COMMANDS_H

#include "llvm/Support/CommandLine.h"

namespace moec::driver {
// Defined with their options in ExportCommand.cpp, ImportCommand.cpp, LaunchCommand.cpp.
extern llvm::cl::SubCommand ExportCmd, ImportCmd, LaunchCmd;
int runExport();
int runImport();
int runLaunch();
int runCheck();
int runPlan();
int runSweep();
int runRun(const char *Argv0);
int runExplain();
int runRuleIndex();
int runTargets();
int runSchema();
int runFmt();
int runLsp();
int runReport();
} // namespace moec::driver

#endif
