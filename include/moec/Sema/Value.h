//===- Value.h - Evaluated field values --------------------------*- C++ -*-===//
#ifndef MOEC_SEMA_VALUE_H
#define MOEC_SEMA_VALUE_H

#include "moec/Basic/Quantity.h"
#include "llvm/Support/SMLoc.h"
#include <string>
#include <vector>

namespace moec {

class DefInfo;

/// The result of evaluating an expression against a field's type.
struct Value {
  enum class Kind { Number, Bool, String, Name, Ref, Call, List };
  Kind K = Kind::Number;
  Quantity Num;
  bool Bool = false;
  std::string Text;                                 // String: contents; Name: the name; Ref/Call: the name called
  DefInfo *Ref = nullptr;                           // Ref: the definition named
  std::vector<Value> Elements;                      // List elements; Call positional arguments
  std::vector<std::pair<std::string, Value>> Named; // Call named arguments
  llvm::SMRange Range;

  static Value number(Quantity Q, llvm::SMRange R) {
    Value V;
    V.Num = Q;
    V.Range = R;
    return V;
  }
  static Value boolean(bool B, llvm::SMRange R) {
    Value V;
    V.K = Kind::Bool;
    V.Bool = B;
    V.Range = R;
    return V;
  }
  static Value name(std::string N, llvm::SMRange R) {
    Value V;
    V.K = Kind::Name;
    V.Text = std::move(N);
    V.Range = R;
    return V;
  }
  const Value *named(llvm::StringRef Name) const {
    for (auto &[N, V] : Named)
      if (N == Name)
        return &V;
    return nullptr;
  }
  /// "bytes (80GB)", "a string", "the name 'x'" for type-mismatch messages.
  std::string describe() const;
};

} // namespace moec

#endif
