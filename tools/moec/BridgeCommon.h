//===- BridgeCommon.h - What export and launch share ----------------------===//
//
// moec export and moec launch translate one checked recipe point. Their
// options live with them (ExportCommand.cpp, LaunchCommand.cpp); this loads
// the file through the shared driver and picks the point.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TOOLS_MOEC_BRIDGECOMMON_H
#define MOEC_TOOLS_MOEC_BRIDGECOMMON_H

#include "Driver.h"
#include "moec/Bridge/Export.h"

namespace moec::driver {

struct OnePoint {
  std::unique_ptr<Compilation> C;
  const Recipe *R = nullptr;
  std::string File;
  int Status = ExitOK; // nonzero: stop with it
};

/// Checks File (rules included) as `moec check` does, prints the
/// diagnostics, and returns its one recipe point (--recipe chooses among
/// several). A recipe with errors is refused: nothing is exported from it.
OnePoint compileOnePoint(llvm::StringRef Command, const std::string &File, const std::string &Recipe,
                         const std::vector<std::string> &Includes, const std::vector<std::string> &Warnings);

/// `FILE:LINE:COL: note: ...` at the .moe field the setting came from, for
/// the settings an export cannot carry.
void reportDropped(const OnePoint &P, const bridge::BridgeExport &E, llvm::StringRef Command);

} // namespace moec::driver

#endif
