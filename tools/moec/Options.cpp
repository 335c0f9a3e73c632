//===- Options.cpp - The moec command line's subcommands and options -----===//
#include "Options.h"

namespace moec::driver {

cl::SubCommand CheckCmd("check", "Parse, type-check and lint recipes");
cl::SubCommand ExplainCmd("explain", "Explain a diagnostic ID");
cl::SubCommand SchemaCmd("schema", "Print the field tables of the language (Markdown)");
cl::SubCommand TargetsCmd("targets", "List the Megatron releases moec checks against, with their components");
cl::SubCommand RuleIndexCmd("rule-index", "Print the rule index (Markdown) for docs/rules.md");
cl::SubCommand PlanCmd("plan", "Lower a recipe to a launch plan (rank layout, schedule, memory, speed)");
cl::SubCommand SweepCmd("sweep", "Expand sweeps, prune infeasible points, rank the rest by predicted speed");
cl::SubCommand LspCmd("lsp", "Serve the Language Server Protocol on stdin/stdout (docs/editors.md)");
cl::SubCommand RunCmd("run", "Compile a recipe to a plan and run it on this machine with mpirun and moerun");
cl::SubCommand ReportCmd("report", "Draw a recipe's plan (memory, schedule, ranks, step time, sweep) "
                                   "as an HTML page");

cl::list<std::string> CheckFiles(cl::Positional, cl::desc("<file.moe | ->..."), cl::sub(CheckCmd), cl::sub(PlanCmd),
                                 cl::sub(SweepCmd), cl::sub(RunCmd), cl::sub(ReportCmd));
cl::opt<std::string> RecipeName("recipe", cl::desc("Check only this recipe"), cl::value_desc("name"), cl::sub(CheckCmd),
                                cl::sub(PlanCmd), cl::sub(SweepCmd), cl::sub(RunCmd), cl::sub(ReportCmd));
cl::opt<Format> OutputFormat("format", cl::desc("Diagnostic output format"), cl::init(Format::Text),
                             cl::values(clEnumValN(Format::Text, "text", "clang-style text on stderr"),
                                        clEnumValN(Format::JSON, "json", "a JSON array on stdout"),
                                        clEnumValN(Format::SARIF, "sarif", "SARIF 2.1.0 on stdout")),
                             cl::sub(CheckCmd));
cl::list<std::string> Warnings("W", cl::Prefix, cl::desc("-Werror: warnings are errors; -Wno-ID: silence ID"),
                               cl::value_desc("error|no-ID"), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd),
                               cl::sub(RunCmd), cl::sub(LspCmd), cl::sub(ReportCmd));
cl::list<std::string> IncludeDirs("I", cl::Prefix, cl::desc("Add a directory to the import search path"),
                                  cl::value_desc("dir"), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd),
                                  cl::sub(RunCmd), cl::sub(LspCmd), cl::sub(ReportCmd));
cl::opt<std::string> TargetName("target",
                                cl::desc("The Megatron release to check for (moec targets lists them); "
                                         "wins over the recipes' target field"),
                                cl::value_desc("name"), cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd),
                                cl::sub(RunCmd), cl::sub(LspCmd), cl::sub(ReportCmd));
cl::opt<ColorMode> Color("color", cl::desc("Colour text diagnostics"), cl::init(ColorMode::Auto),
                         cl::values(clEnumValN(ColorMode::Auto, "auto", "when stderr is a terminal"),
                                    clEnumValN(ColorMode::Always, "always", "always"),
                                    clEnumValN(ColorMode::Never, "never", "never")),
                         cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd), cl::sub(ReportCmd));
cl::opt<bool> ShowRemarks("remarks",
                          cl::desc("Print every remark (by default text output summarises them in one line; JSON "
                                   "and SARIF always carry them)"),
                          cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd), cl::sub(ReportCmd), cl::sub(RunCmd));
cl::opt<bool> ApplyFixIts("fix",
                          cl::desc("Apply the fix-its of errors and warnings to the files in place (atomically); "
                                   "remarks' suggestions are left alone"),
                          cl::sub(CheckCmd));
cl::opt<bool> DumpAST("dump-ast", cl::desc("Print the syntax tree as canonical source"), cl::sub(CheckCmd));
cl::opt<bool> DumpRecipe("dump-recipe", cl::desc("Print each typed recipe with provenance"), cl::sub(CheckCmd));
cl::opt<bool> NoPlanner("no-planner",
                        cl::desc("Skip the checks that need the planner's memory model (memory-exceeds-hbm, "
                                 "memory-headroom)"),
                        cl::sub(CheckCmd), cl::sub(LspCmd));
cl::opt<bool> ListRules("list-rules", cl::desc("List every diagnostic ID with its severity"), cl::sub(CheckCmd));
cl::opt<unsigned> ErrorLimit("error-limit", cl::desc("Stop after this many errors (0: no limit)"), cl::init(50),
                             cl::sub(CheckCmd), cl::sub(PlanCmd), cl::sub(SweepCmd));
cl::opt<unsigned> MaxSweepPoints("max-sweep-points",
                                 cl::desc("Refuse a recipe whose sweeps expand to more points than this"),
                                 cl::init(10000), cl::value_desc("N"), cl::sub(CheckCmd), cl::sub(PlanCmd),
                                 cl::sub(SweepCmd), cl::sub(RunCmd));
cl::opt<std::string> CheckOutput("o",
                                 cl::desc("Write the diagnostics (in the --format chosen) to this file, "
                                          "atomically, instead of stdout or stderr"),
                                 cl::value_desc("file"), cl::sub(CheckCmd));

cl::opt<PlanFormatKind> PlanFormat("format", cl::desc("Plan output format"), cl::init(PlanFormatKind::TOML),
                                   cl::values(clEnumValN(PlanFormatKind::TOML, "toml", "TOML (the runtime's input)"),
                                              clEnumValN(PlanFormatKind::JSON, "json", "JSON (for other tools)")),
                                   cl::sub(PlanCmd));
cl::opt<std::string> PlanOutput("o", cl::desc("Write the plan to this file (atomically) instead of stdout"),
                                cl::value_desc("file"), cl::sub(PlanCmd));
cl::opt<bool> Quiet("quiet", cl::desc("Do not print the human summary"), cl::sub(PlanCmd));
cl::opt<bool> DumpLayout("dump-layout",
                         cl::desc("Print the rank layout (groups, pipeline stages and schedule, rank coordinates) "
                                  "instead of the plan"),
                         cl::sub(PlanCmd));
cl::opt<bool> SweepCSV("csv", cl::desc("Print the ranking as CSV"), cl::sub(SweepCmd));

cl::opt<unsigned> RunRanks("np", cl::desc("Number of ranks (default: the recipe's world size, which it must equal)"),
                           cl::value_desc("N"), cl::sub(RunCmd));
cl::opt<unsigned> RunSteps("steps", cl::desc("Training steps"), cl::init(1), cl::value_desc("K"), cl::sub(RunCmd));
cl::opt<std::string> RunLog("log", cl::desc("Write one JSON line per step to this file"), cl::value_desc("file"),
                            cl::sub(RunCmd));
cl::opt<std::string> RunMoerun("moerun", cl::desc("The moerun executable (default: found next to moec)"),
                               cl::value_desc("path"), cl::sub(RunCmd));
cl::opt<std::string> RunSeed("seed", cl::desc("Forwarded to moerun"), cl::value_desc("S"), cl::sub(RunCmd));
cl::opt<std::string> RunLR("lr", cl::desc("Forwarded to moerun"), cl::value_desc("X"), cl::sub(RunCmd));
cl::opt<std::string> RunTimeout("timeout", cl::desc("Forwarded to moerun"), cl::value_desc("seconds"), cl::sub(RunCmd));
cl::opt<std::string> RunSave("save", cl::desc("Forwarded to moerun: save checkpoints in this directory"),
                             cl::value_desc("dir"), cl::sub(RunCmd));
cl::opt<std::string> RunSaveInterval("save-interval", cl::desc("Forwarded to moerun"), cl::value_desc("K"),
                                     cl::sub(RunCmd));
cl::opt<std::string> RunKeep("keep", cl::desc("Forwarded to moerun"), cl::value_desc("N"), cl::sub(RunCmd));
cl::opt<std::string> RunLoad("load", cl::desc("Forwarded to moerun: resume from this directory's latest checkpoint"),
                             cl::value_desc("dir"), cl::sub(RunCmd));
cl::opt<std::string> RunInitFromHf("init-from-hf",
                                   cl::desc("Forwarded to moerun: start from this Hugging Face checkpoint directory"),
                                   cl::value_desc("dir"), cl::sub(RunCmd));
cl::opt<std::string> RunBackend("backend",
                                cl::desc("Forwarded to moerun: compute on the host (cpu) or on CUDA devices (cuda); "
                                         "default: the plan's"),
                                cl::value_desc("cpu|cuda"), cl::sub(RunCmd));
cl::opt<bool> RunDry("dry-run", cl::desc("Only check the plan and the process groups (moerun --dry-run)"),
                     cl::sub(RunCmd));

cl::opt<std::string> ExplainID(cl::Positional, cl::desc("<diagnostic-id>"), cl::Required, cl::sub(ExplainCmd));

cl::SubCommand FmtCmd("fmt", "Print .moe files in the canonical layout (docs/formatting.md)");
cl::list<std::string> FmtFiles(cl::Positional, cl::desc("<file.moe | ->..."), cl::OneOrMore, cl::sub(FmtCmd));
cl::opt<bool> FmtCheck("check", cl::desc("Print a diff for each file that is not formatted; exit 1 if any"),
                       cl::sub(FmtCmd));
cl::opt<bool> FmtWrite("write", cl::desc("Rewrite the files that are not formatted (atomically)"), cl::sub(FmtCmd));

cl::opt<std::string> LspCatalogDir("catalog-dir",
                                   cl::desc("Where go-to-definition finds the built-in catalog: a read-only copy "
                                            "is written there (default: <tmp>/moec-<version>-catalog)"),
                                   cl::value_desc("dir"), cl::sub(LspCmd));
cl::opt<bool> LspStdio("stdio", cl::desc("Accepted for clients that pass it: stdio is the only transport"),
                       cl::sub(LspCmd));

cl::opt<std::string> ReportOutput("o",
                                  cl::desc("Write the report to this file, atomically (default: the recipe file's "
                                           "name with .html, in the current directory)"),
                                  cl::value_desc("report.html"), cl::sub(ReportCmd));
cl::opt<std::string> ReportLog("log",
                               cl::desc("Add a run of the plan to the report: moerun's step log (--log), drawn as "
                                        "its loss curve and measured against the plan's predictions"),
                               cl::value_desc("steps.jsonl"), cl::sub(ReportCmd));

} // namespace moec::driver
