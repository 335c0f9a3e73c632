//===- PlanTOML.cpp - The plan as TOML ------------------------------------===//
//
// The TOML form is produced from the JSON tree, so the two formats cannot
// drift: objects become tables, arrays arrays, and JSON null (never produced
// for a plan) is dropped since TOML has no null.
//
//===----------------------------------------------------------------------===//
#include "moec/Emit/Plan.h"

#include <sstream>
#include <toml++/toml.h>

using namespace moec;
namespace json = llvm::json;

namespace {
void insertValue(toml::array &Into, const json::Value &V);

void insertValue(toml::table &Into, llvm::StringRef Key, const json::Value &V) {
  std::string K = Key.str();
  switch (V.kind()) {
  case json::Value::Null:
    return;
  case json::Value::Boolean:
    Into.insert_or_assign(K, *V.getAsBoolean());
    return;
  case json::Value::Number:
    if (auto I = V.getAsInteger())
      Into.insert_or_assign(K, *I);
    else
      Into.insert_or_assign(K, *V.getAsNumber());
    return;
  case json::Value::String:
    Into.insert_or_assign(K, V.getAsString()->str());
    return;
  case json::Value::Array: {
    toml::array A;
    for (const json::Value &E : *V.getAsArray())
      insertValue(A, E);
    Into.insert_or_assign(K, std::move(A));
    return;
  }
  case json::Value::Object: {
    toml::table T;
    // JSON objects are unordered maps; sort keys for a stable document.
    std::vector<llvm::StringRef> Keys;
    for (const auto &KV : *V.getAsObject())
      Keys.push_back(KV.first);
    llvm::sort(Keys);
    for (llvm::StringRef Sub : Keys)
      insertValue(T, Sub, *V.getAsObject()->get(Sub));
    Into.insert_or_assign(K, std::move(T));
    return;
  }
  }
}

void insertValue(toml::array &Into, const json::Value &V) {
  toml::table Wrapper;
  insertValue(Wrapper, "v", V);
  if (toml::node *N = Wrapper.get("v"))
    Into.push_back(std::move(*N));
}
} // namespace

std::string moec::planToTOML(const Plan &P) {
  json::Value Tree = planToJSON(P);
  toml::table Root;
  std::vector<llvm::StringRef> Keys;
  for (const auto &KV : *Tree.getAsObject())
    Keys.push_back(KV.first);
  llvm::sort(Keys);
  // Scalars first so that they are not swallowed by a preceding [table].
  for (bool Tables : {false, true})
    for (llvm::StringRef K : Keys) {
      const json::Value &V = *Tree.getAsObject()->get(K);
      bool IsTable = V.kind() == json::Value::Object || V.kind() == json::Value::Array;
      if (IsTable == Tables)
        insertValue(Root, K, V);
    }
  std::ostringstream OS;
  // Plans are ASCII: non-ASCII characters in strings (a data path, a
  // recipe name) are written as \u escapes, which the reader requires.
  OS << "# moec launch plan (docs/plan-format.md)\n"
     << toml::toml_formatter{Root, toml::toml_formatter::default_flags & ~toml::format_flags::allow_unicode_strings}
     << "\n";
  return OS.str();
}
