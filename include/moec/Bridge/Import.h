//===- Import.h - Megatron-Bridge configuration to a .moe recipe --*- C++ -*-===//
//
// Reads a Megatron-Bridge ConfigContainer as YAML (nested sections, or the
// file `moec export --format yaml` writes) or as a list of Hydra overrides
// (`model.tensor_model_parallel_size=2 ...`), and writes the .moe recipe that
// states the same run. The model is named from the built-in catalog when the
// architecture fields match one. Every field that has no .moe equivalent is
// reported with its location and the reason, none is dropped silently; those
// that change nothing moec checks or predicts are counted by category in one
// note and listed only on request.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BRIDGE_IMPORT_H
#define MOEC_BRIDGE_IMPORT_H

#include "moec/Sema/Recipe.h"
#include <string>
#include <vector>

namespace moec {
namespace bridge {

struct ImportMessage {
  enum class Kind { Error, Warning, Note };
  Kind K = Kind::Note;
  std::string Key; // the Bridge field, when the message is about one
  std::string Message;
  unsigned Line = 0, Column = 0; // 1-based; 0 when not tied to the text
  /// A field without effect on what moec checks or predicts (logging,
  /// checkpointing, paths, ...): its category, and the message is printed
  /// only when asked (`moec import --verbose`); a note counts them.
  std::string QuietCategory;
};

struct ImportOptions {
  /// What a ConfigContainer does not hold, or overrides of what it implies.
  std::string Model, Gpu, RecipeName;
  int64_t Gpus = 0, Nodes = 0;
  /// Named in the .moe file's header comment.
  std::string SourceName;
};

struct ImportResult {
  std::string Source; // the .moe text; empty when an error stopped the import
  std::string RecipeName, ModelName;
  bool ModelFromCatalog = false;
  std::vector<ImportMessage> Messages;
  bool hasErrors() const;
  /// The fields reported as having no .moe equivalent.
  std::vector<const ImportMessage *> unmapped() const;
};

ImportResult importBridge(llvm::StringRef Text, const ImportOptions &Opts = {});

/// The built-in catalog's models, lowered (for matching an architecture).
const std::vector<ModelSpec> &catalogModels();
/// The built-in catalog's GPU systems.
const std::vector<GpuSpec> &catalogGpus();

} // namespace bridge
} // namespace moec

#endif
