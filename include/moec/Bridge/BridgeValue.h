//===- BridgeValue.h - A Megatron-Bridge configuration value -----*- C++ -*-===//
//
// The values a ConfigContainer field takes in an override or a YAML file:
// null, a boolean, an integer, a float, a string or a list of those. Kept
// typed (not pre-rendered) because the two output forms quote differently:
// Hydra overrides need quotes around `|`, `(` and `*`, YAML around `*` first.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BRIDGE_BRIDGEVALUE_H
#define MOEC_BRIDGE_BRIDGEVALUE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace moec {
namespace bridge {

struct Value {
  enum class Kind { Null, Bool, Int, Float, String, List };
  Kind K = Kind::Null;
  bool B = false;
  int64_t I = 0;
  double F = 0;
  std::string S;
  std::vector<Value> Items;

  static Value null() { return Value(); }
  static Value boolean(bool X);
  static Value integer(int64_t X);
  static Value real(double X);
  static Value string(llvm::StringRef X);
  static Value list(std::vector<Value> X);
  static Value strings(llvm::ArrayRef<std::string> X);

  bool operator==(const Value &O) const;
  bool operator!=(const Value &O) const { return !(*this == O); }
};

/// The value in Hydra override syntax (`key=<this>`): strings that Hydra
/// would not read as one plain token are double-quoted.
std::string renderHydra(const Value &V);

/// A short, unquoted form for messages and comments.
std::string renderPlain(const Value &V);

/// Quotes one shell word with single quotes when it holds anything a POSIX
/// shell would interpret.
std::string shellQuote(llvm::StringRef Word);

} // namespace bridge
} // namespace moec

#endif
