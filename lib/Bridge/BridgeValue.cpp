//===- BridgeValue.cpp - Megatron-Bridge values and their spellings -------===//
#include "moec/Bridge/BridgeValue.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

using namespace moec;
using namespace moec::bridge;

Value Value::boolean(bool X) {
  Value V;
  V.K = Kind::Bool;
  V.B = X;
  return V;
}
Value Value::integer(int64_t X) {
  Value V;
  V.K = Kind::Int;
  V.I = X;
  return V;
}
Value Value::real(double X) {
  Value V;
  V.K = Kind::Float;
  V.F = X;
  return V;
}
Value Value::string(llvm::StringRef X) {
  Value V;
  V.K = Kind::String;
  V.S = X.str();
  return V;
}
Value Value::list(std::vector<Value> X) {
  Value V;
  V.K = Kind::List;
  V.Items = std::move(X);
  return V;
}
Value Value::strings(llvm::ArrayRef<std::string> X) {
  std::vector<Value> Items;
  for (const std::string &S : X)
    Items.push_back(string(S));
  return list(std::move(Items));
}

bool Value::operator==(const Value &O) const {
  if (K != O.K)
    return false;
  switch (K) {
  case Kind::Null:
    return true;
  case Kind::Bool:
    return B == O.B;
  case Kind::Int:
    return I == O.I;
  case Kind::Float:
    return F == O.F;
  case Kind::String:
    return S == O.S;
  case Kind::List:
    return Items == O.Items;
  }
  return false;
}

namespace {
/// Hydra's unquoted primitives allow letters, digits and a few symbols;
/// anything else (`|`, `(`, `*`, spaces, `,`) must be quoted.
bool hydraPlain(llvm::StringRef S) {
  if (S.empty() || S == "null" || S == "true" || S == "false")
    return false;
  return llvm::all_of(S, [](char C) { return llvm::isAlnum(C) || llvm::StringRef("_-+./:").contains(C); });
}

std::string formatReal(double X) {
  std::string S = fmt::format("{}", X);
  // Keep a float a float when read back (`1` would be an integer).
  if (S.find_first_of(".eE") == std::string::npos && S.find("inf") == std::string::npos &&
      S.find("nan") == std::string::npos)
    S += ".0";
  return S;
}
} // namespace

std::string bridge::renderHydra(const Value &V) {
  switch (V.K) {
  case Value::Kind::Null:
    return "null";
  case Value::Kind::Bool:
    return V.B ? "true" : "false";
  case Value::Kind::Int:
    return std::to_string(V.I);
  case Value::Kind::Float:
    return formatReal(V.F);
  case Value::Kind::String: {
    if (hydraPlain(V.S))
      return V.S;
    std::string Out = "\"";
    for (char C : V.S) {
      if (C == '"' || C == '\\')
        Out += '\\';
      Out += C;
    }
    return Out + "\"";
  }
  case Value::Kind::List: {
    std::string Out = "[";
    for (size_t I = 0; I < V.Items.size(); ++I)
      Out += (I ? "," : "") + renderHydra(V.Items[I]);
    return Out + "]";
  }
  }
  return "";
}

std::string bridge::renderPlain(const Value &V) {
  if (V.K == Value::Kind::String)
    return V.S;
  if (V.K == Value::Kind::List) {
    std::string Out = "[";
    for (size_t I = 0; I < V.Items.size(); ++I)
      Out += (I ? ", " : "") + renderPlain(V.Items[I]);
    return Out + "]";
  }
  return renderHydra(V);
}

std::string bridge::shellQuote(llvm::StringRef Word) {
  bool Safe = !Word.empty() &&
              llvm::all_of(Word, [](char C) { return llvm::isAlnum(C) || llvm::StringRef("_-+./:=,@%").contains(C); });
  if (Safe)
    return Word.str();
  std::string Out = "'";
  for (char C : Word) {
    if (C == '\'')
      Out += "'\\''";
    else
      Out += C;
  }
  return Out + "'";
}
