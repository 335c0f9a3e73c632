//===- Driver.h - What every moec command that reads recipes shares ------===//
#ifndef MOEC_TOOLS_MOEC_DRIVER_H
#define MOEC_TOOLS_MOEC_DRIVER_H

#include "Options.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/SourceMgr.h"
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moec::driver {

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

/// Applies -Werror and -Wno-ID to Opts; returns the flags (as given after
/// -W) that name no diagnostic, for the caller to report.
std::vector<std::string> applyWarningFlags(DiagnosticOptions &Opts);

/// --target as a Target (None when not given). An unknown name is reported
/// through Diags (no location: it is on the command line) and sets Bad.
llvm::Optional<Target> commandLineTarget(DiagnosticEngine &Diags, bool &Bad);

/// Parses and checks the files of the command line (CheckFiles, -I, -W,
/// --recipe); with RunRules the rule catalog runs over every recipe.
std::unique_ptr<Compilation> compile(bool RunRules, bool CapErrors = true);

/// One checked recipe point, for the commands that act on one (run, export,
/// launch). Status nonzero: stop with it (the message is printed).
struct OnePoint {
  std::unique_ptr<Compilation> C;
  const Recipe *R = nullptr;
  std::string File;
  int Status = ExitOK;
};

/// Checks the command line's one file (rules included) as `moec check` does,
/// prints the diagnostics and returns its one recipe point: --recipe chooses
/// a recipe or a sweep point (`name[field=value, ...]`). A file with errors
/// gives no point ("the recipe has errors; " + Refusal).
OnePoint compileOnePoint(llvm::StringRef Command, llvm::StringRef Refusal);

/// Prints the diagnostics collected so far in the chosen format.
void renderDiagnostics(Compilation &C, Format F);

} // namespace moec::driver

#endif
