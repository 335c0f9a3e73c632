//===- Commands.h - The moec subcommands ----------------------------------===//
#ifndef MOEC_TOOLS_MOEC_COMMANDS_H
#define MOEC_TOOLS_MOEC_COMMANDS_H

namespace moec::driver {
int runCheck();
int runPlan();
int runSweep();
int runRun(const char *Argv0);
int runExplain();
int runRuleIndex();
int runSchema();
int runFmt();
} // namespace moec::driver

#endif
