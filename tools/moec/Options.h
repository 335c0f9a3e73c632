//===- Options.h - The moec command line's subcommands and options -------===//
//
// Every cl::SubCommand and cl::opt of moec is defined in Options.cpp, one
// translation unit, so that options that name a subcommand are constructed
// after it (static initialisation order is only defined within a file). A
// command adds its options there and declares them here.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TOOLS_MOEC_OPTIONS_H
#define MOEC_TOOLS_MOEC_OPTIONS_H

#include "llvm/Support/CommandLine.h"
#include <string>

namespace moec::driver {
namespace cl = llvm::cl;

constexpr int ExitOK = 0, ExitErrors = 1, ExitUsage = 2;

enum class Format { Text, JSON, SARIF };
enum class ColorMode { Auto, Always, Never };
enum class PlanFormatKind { TOML, JSON };

extern cl::SubCommand CheckCmd;
extern cl::SubCommand ExplainCmd;
extern cl::SubCommand SchemaCmd;
extern cl::SubCommand RuleIndexCmd;
extern cl::SubCommand TargetsCmd;
extern cl::opt<std::string> TargetName;
extern cl::SubCommand PlanCmd;
extern cl::SubCommand SweepCmd;
extern cl::SubCommand RunCmd;
extern cl::list<std::string> CheckFiles;
extern cl::opt<std::string> RecipeName;
extern cl::opt<Format> OutputFormat;
extern cl::list<std::string> Warnings;
extern cl::list<std::string> IncludeDirs;
extern cl::opt<ColorMode> Color;
extern cl::opt<bool> DumpAST;
extern cl::opt<bool> DumpRecipe;
extern cl::opt<bool> NoPlanner;
extern cl::opt<bool> ShowRemarks;
extern cl::opt<bool> ApplyFixIts;
extern cl::opt<bool> ListRules;
extern cl::opt<unsigned> ErrorLimit;
extern cl::opt<unsigned> MaxSweepPoints;
extern cl::opt<std::string> CheckOutput;
extern cl::opt<PlanFormatKind> PlanFormat;
extern cl::opt<std::string> PlanOutput;
extern cl::opt<bool> Quiet;
extern cl::opt<bool> DumpLayout;
extern cl::opt<bool> SweepCSV;
extern cl::opt<unsigned> RunRanks;
extern cl::opt<unsigned> RunSteps;
extern cl::opt<std::string> RunLog;
extern cl::opt<std::string> RunMoerun;
extern cl::opt<std::string> RunSeed;
extern cl::opt<std::string> RunLR;
extern cl::opt<std::string> RunTimeout;
extern cl::opt<std::string> RunSave, RunSaveInterval, RunKeep, RunLoad, RunInitFromHf;
extern cl::opt<std::string> RunBackend;
extern cl::opt<bool> RunDry;
extern cl::opt<std::string> ExplainID;
extern cl::SubCommand FmtCmd;
extern cl::list<std::string> FmtFiles;
extern cl::opt<bool> FmtCheck;
extern cl::opt<bool> FmtWrite;

extern cl::SubCommand LspCmd;
extern cl::opt<std::string> LspCatalogDir;

extern cl::SubCommand ReportCmd;
extern cl::opt<std::string> ReportOutput;
extern cl::opt<std::string> ReportLog;

} // namespace moec::driver

#endif
