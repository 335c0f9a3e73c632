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

/// compileOnePoint (Driver.h) on this command's own file, --recipe, -I, -W
/// and --target options. A recipe with errors is refused: nothing is written from it.
OnePoint compileOnePoint(llvm::StringRef Command, const std::string &File, const std::string &Recipe,
                         const std::vector<std::string> &Includes, const std::vector<std::string> &Warnings,
                         const std::string &Target);

/// False (the error printed) when the recipe's target is not a
/// Megatron-Bridge release: there is no Bridge configuration for it.
bool refuseNonBridgeTarget(const OnePoint &P, llvm::StringRef Command);

/// `FILE:LINE:COL: note: ...` at the .moe field the setting came from, for
/// the settings an export cannot carry.
void reportDropped(const OnePoint &P, const bridge::BridgeExport &E);

} // namespace moec::driver

#endif
