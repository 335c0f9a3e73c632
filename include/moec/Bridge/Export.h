//===- Export.h - A recipe as Megatron-Bridge configuration -------*- C++ -*-===//
//
// Lowers a checked Recipe to the ConfigContainer field overrides that
// reproduce it in Megatron-Bridge (field map: docs/megatron-bridge.md, from
// the reference notes' §5), the environment variables the setting needs, and
// the recipe settings that have no Bridge field, each with its reason.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BRIDGE_EXPORT_H
#define MOEC_BRIDGE_EXPORT_H

#include "moec/Bridge/BridgeValue.h"
#include "moec/Sema/Recipe.h"
#include <string>
#include <vector>

namespace moec {
namespace bridge {

/// One ConfigContainer field: `model.tensor_model_parallel_size` = 2.
struct Override {
  std::string Key;
  Value V;
  /// The .moe field it comes from ("parallel.tp"), or why it is implied.
  std::string From;
};

struct EnvVar {
  std::string Name, Value, Reason;
};

/// A recipe setting that the export cannot carry, and why.
struct NotExported {
  std::string Field, Value, Reason;
};

struct ExportOptions {
  /// Also write the model's architecture (model.num_layers, ...), so that the
  /// file names its model without the Bridge recipe (and `moec import` can
  /// find it in the catalog). On for YAML, off for a command's overrides,
  /// where the Bridge recipe already brings the architecture.
  bool Architecture = false;
};

struct BridgeExport {
  std::string RecipeName; // the recipe point
  std::string ModelName, GpuName;
  int64_t Gpus = 0, Nodes = 0, GpusPerNode = 0;
  std::vector<Override> Overrides; // in the order of the field map
  std::vector<EnvVar> Env;
  std::vector<NotExported> Dropped;
};

/// The overrides, environment and untranslated settings of one recipe point.
BridgeExport exportOverrides(const Recipe &R, const ExportOptions &Opts = {});

/// `key=value key=value ...` on one line, each word shell-quoted as needed.
std::string renderOverrideLine(const BridgeExport &E);

/// A YAML document of nested ConfigContainer sections. A comment header
/// names the recipe, model and cluster (which a ConfigContainer does not
/// hold) in a form `moec import` reads back, then the environment and the
/// untranslated settings.
std::string renderYAML(const BridgeExport &E);

/// The Bridge preset name of a precision (`bf16_mixed`, ...).
llvm::StringRef mixedPrecisionPreset(Precision P);

/// The header line that carries what a ConfigContainer does not:
/// `# moec: recipe=NAME model=NAME gpu=NAME gpus=N`.
std::string headerLine(const BridgeExport &E);

} // namespace bridge
} // namespace moec

#endif
