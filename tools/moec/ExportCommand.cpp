//===- ExportCommand.cpp - moec export --to megatron-bridge ---------------===//
//
//   moec export --to megatron-bridge FILE [--recipe NAME] [--format overrides|yaml] [-o FILE]
//
// Prints the Megatron-Bridge ConfigContainer overrides that reproduce one
// recipe point: on one line for a command, or as YAML. The environment the
// setting needs and the settings with no Bridge field go to stderr as notes
// (the YAML also carries them as comments). docs/megatron-bridge.md.
//
//===----------------------------------------------------------------------===//
#include "BridgeCommon.h"
#include "Commands.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

// Declared in Commands.h for main; its options follow it in this file, so they
// are constructed after it.
cl::SubCommand ExportCmd("export", "Print the Megatron-Bridge configuration that reproduces a recipe");

namespace {
enum class ExportFormat { Overrides, YAML };

// The subcommand and its options sit together: a cl::opt naming a
// subcommand must be constructed after it, which one file guarantees.
cl::opt<std::string> ExportFile(cl::Positional, cl::desc("<file.moe | ->"), cl::sub(ExportCmd));
cl::opt<std::string> ExportTo("to", cl::desc("Target framework (megatron-bridge)"), cl::value_desc("framework"),
                              cl::sub(ExportCmd));
cl::opt<std::string> ExportRecipe("recipe", cl::desc("Export this recipe (or sweep point)"), cl::value_desc("name"),
                                  cl::sub(ExportCmd));
cl::opt<ExportFormat>
    ExportFmt("format", cl::desc("Output form"), cl::init(ExportFormat::Overrides),
              cl::values(clEnumValN(ExportFormat::Overrides, "overrides", "key=value overrides on one line"),
                         clEnumValN(ExportFormat::YAML, "yaml", "a YAML ConfigContainer")),
              cl::sub(ExportCmd));
cl::opt<std::string> ExportOutput("o", cl::desc("Write to this file (atomically) instead of stdout"),
                                  cl::value_desc("file"), cl::sub(ExportCmd));
cl::list<std::string> ExportIncludes("I", cl::Prefix, cl::desc("Add a directory to the import search path"),
                                     cl::value_desc("dir"), cl::sub(ExportCmd));
cl::opt<std::string> ExportTarget("target", cl::desc("The Megatron release to export for (moec targets lists them)"),
                                  cl::value_desc("name"), cl::sub(ExportCmd));
cl::list<std::string> ExportWarnings("W", cl::Prefix, cl::desc("-Werror: warnings are errors; -Wno-ID: silence ID"),
                                     cl::value_desc("error|no-ID"), cl::sub(ExportCmd));
} // namespace

OnePoint compileOnePoint(llvm::StringRef Command, const std::string &File, const std::string &Recipe,
                         const std::vector<std::string> &Includes, const std::vector<std::string> &Warns,
                         const std::string &Target) {
  if (File.empty()) {
    llvm::errs() << "moec " << Command << ": expected one recipe file (use - for standard input)\n";
    OnePoint P;
    P.Status = ExitUsage;
    return P;
  }
  // The shared driver reads the shared options: hand it this command's.
  CheckFiles.clear();
  CheckFiles.push_back(File);
  RecipeName = Recipe;
  TargetName = Target;
  for (const std::string &I : Includes)
    IncludeDirs.push_back(I);
  for (const std::string &W : Warns)
    Warnings.push_back(W);
  return compileOnePoint(Command, "nothing is written");
}

bool refuseNonBridgeTarget(const OnePoint &P, llvm::StringRef Command) {
  if (getTargetInfo(P.R->Tgt).Kind == Framework::Bridge)
    return true;
  DiagnosticEngine Diags(P.C->SM);
  const Provenance &Where = P.R->origin("target");
  llvm::SMRange At = !TargetName.empty() || Where.IsDefault ? P.R->NameRange : Where.Range;
  Diags.report(diag::target_not_bridge, At, Command.str(), targetName(P.R->Tgt).str());
  renderText(Diags.finish(), P.C->SM, llvm::errs(), false);
  return false;
}

void reportDropped(const OnePoint &P, const bridge::BridgeExport &E) {
  if (E.Dropped.empty())
    return;
  DiagnosticOptions Opts;
  applyWarningFlags(Opts); // -Wno-not-exported, -Werror (unknown ones were refused already)
  DiagnosticEngine Diags(P.C->SM, Opts);
  for (const bridge::NotExported &D : E.Dropped) {
    // The field that set it, else its section (`model` for the model's).
    llvm::StringRef Field = llvm::StringRef(D.Field).split(',').first;
    llvm::SMRange Where = P.R->origin(Field).Range;
    if (!Where.isValid())
      Where = P.R->origin(Field.split('.').first).Range;
    Diags.report(diag::not_exported, Where, D.Field, D.Value, D.Reason);
  }
  renderText(Diags.finish(), P.C->SM, llvm::errs(), false);
}

int runExport() {
  if (ExportTo != "megatron-bridge") {
    llvm::errs() << "moec export: "
                 << (ExportTo.empty() ? std::string("give the target with --to megatron-bridge")
                                      : "unknown target '" + ExportTo +
                                            "'; the target is "
                                            "megatron-bridge")
                 << "\n";
    return ExitUsage;
  }
  OnePoint P = compileOnePoint("export", ExportFile, ExportRecipe, ExportIncludes, ExportWarnings, ExportTarget);
  if (P.Status)
    return P.Status;
  if (!refuseNonBridgeTarget(P, "export"))
    return ExitErrors;
  bridge::ExportOptions Opts;
  // YAML stands alone (it names its model); a command line goes with a
  // Bridge recipe, which brings the architecture.
  Opts.Architecture = ExportFmt == ExportFormat::YAML;
  bridge::BridgeExport E = bridge::exportOverrides(*P.R, Opts);
  std::string Out = ExportFmt == ExportFormat::YAML ? bridge::renderYAML(E) : bridge::renderOverrideLine(E) + "\n";
  if (ExportFmt == ExportFormat::Overrides)
    for (const bridge::EnvVar &V : E.Env)
      llvm::errs() << fmt::format("moec export: note: environment {}={} ({})\n", V.Name, V.Value, V.Reason);
  reportDropped(P, E);
  if (ExportOutput.empty()) {
    llvm::outs() << Out;
    return ExitOK;
  }
  if (llvm::Error Err = writeFileAtomically(ExportOutput, Out)) {
    llvm::errs() << "moec export: " << llvm::toString(std::move(Err)) << "\n";
    return ExitUsage;
  }
  return ExitOK;
}

} // namespace moec::driver
