//===- LspCommand.cpp - moec lsp ------------------------------------------===//
//
// The language server (lib/Lsp) on stdin/stdout. Everything on stdout is
// protocol; moec prints nothing else there while serving.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Driver.h"
#include "Options.h"

#include "moec/Lsp/Server.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"
#include <iostream>

namespace moec::driver {

int runLsp() {
  lsp::ServerOptions Opts;
  Opts.Version = MOEC_VERSION;
  Opts.Analysis.IncludeDirs.assign(IncludeDirs.begin(), IncludeDirs.end());
  Opts.Analysis.UsePlanner = !NoPlanner;
  // The server has no document to report a bad flag in: refuse to start.
  for (const std::string &Flag : applyWarningFlags(Opts.Analysis.Diagnostics)) {
    llvm::errs() << "moec lsp: unknown diagnostic flag -W" << Flag << "\n";
    return ExitUsage;
  }
  if (!TargetName.empty()) {
    Opts.Analysis.TargetOverride = lookupTarget(TargetName);
    if (!Opts.Analysis.TargetOverride) {
      llvm::errs() << "moec lsp: unknown target '" << TargetName << "'; known targets: " << knownTargetList() << "\n";
      return ExitUsage;
    }
  }
  if (!LspCatalogDir.empty()) {
    Opts.CatalogDir = LspCatalogDir;
  } else {
    // Per user and version: another user's read-only copy cannot be
    // rewritten, and another version's catalog may differ.
    llvm::SmallString<256> Dir;
    llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, Dir);
    std::string Name = std::string("moec-") + MOEC_VERSION + "-catalog";
    if (llvm::Optional<std::string> User = llvm::sys::Process::GetEnv("USER"))
      Name += "-" + *User;
    llvm::sys::path::append(Dir, Name);
    Opts.CatalogDir = std::string(Dir);
  }
  // Unlimited errors: an editor shows all of them, the cap is for terminals.
  Opts.Analysis.Diagnostics.ErrorLimit = 0;
  std::ios::sync_with_stdio(false);
  return lsp::serve(std::cin, llvm::outs(), std::move(Opts));
}

} // namespace moec::driver
