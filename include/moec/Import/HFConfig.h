//===- HFConfig.h - Hugging Face config.json to a .moe model ------*- C++ -*-===//
//
// `model = hf("config.json")` lets users start from the configuration they
// already have. The importer reads the field names of DeepSeek-V3,
// Qwen3-MoE, Qwen3-Next, Qwen3-VL and Mixtral configs, builds the equivalent
// `model NAME { ... }` definition as a syntax tree and prints it as .moe
// text (ast::print), which Sema then
// parses and checks like any other model, so an imported model and a written
// one cannot behave differently.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_IMPORT_HFCONFIG_H
#define MOEC_IMPORT_HFCONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <string>
#include <vector>

namespace moec {

struct HFImport {
  std::string MoeText;              // `model NAME { ... }`
  std::vector<std::string> Ignored; // config keys with no .moe equivalent, for a remark
};

/// Converts the text of a config.json. Errors name the missing or ill-typed
/// key; they carry no location (the caller reports at the hf(...) call).
llvm::Expected<HFImport> importHFConfig(llvm::StringRef JsonText, llvm::StringRef ModelName);

} // namespace moec

#endif
