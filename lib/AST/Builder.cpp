//===- Builder.cpp - Syntax trees built in memory -------------------------===//
#include "moec/AST/Builder.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <cassert>
#include <cmath>
#include <fmt/format.h>

using namespace moec::ast;
using llvm::StringRef;

namespace {
const llvm::SMRange NoRange;

ExprPtr number(Expr::Kind K, std::string Digits) {
  return std::make_unique<NumberLit>(K, NoRange, std::move(Digits), std::string());
}
ExprPtr negated(ExprPtr Magnitude) { return std::make_unique<UnaryExpr>(NoRange, '-', std::move(Magnitude)); }

llvm::SmallVector<std::string, 2> parts(StringRef Dotted) {
  llvm::SmallVector<StringRef, 2> Split;
  Dotted.split(Split, '.');
  llvm::SmallVector<std::string, 2> Out;
  for (StringRef P : Split)
    Out.push_back(P.str());
  return Out;
}
} // namespace

ExprPtr moec::ast::makeInt(int64_t V) {
  if (V >= 0)
    return number(Expr::Kind::Int, std::to_string(V));
  // -V overflows for INT64_MIN: spell the magnitude from the unsigned value.
  return negated(number(Expr::Kind::Int, std::to_string(0 - uint64_t(V))));
}

ExprPtr moec::ast::makeReal(double V) {
  assert(std::isfinite(V) && "a .moe float is finite");
  if (std::signbit(V))
    return negated(makeReal(-V));
  // fmt's shortest round-trip form; `2` would read back as an integer.
  std::string S = fmt::format("{}", V);
  if (S.find_first_of(".eE") == std::string::npos)
    S += ".0";
  return number(Expr::Kind::Float, std::move(S));
}

ExprPtr moec::ast::makeNumber(double V) {
  if (std::isfinite(V) && V == std::trunc(V) && std::fabs(V) < 9.0e18)
    return makeInt(int64_t(V));
  return makeReal(V);
}

ExprPtr moec::ast::makeBool(bool V) { return std::make_unique<BoolLit>(NoRange, V); }

ExprPtr moec::ast::makeString(StringRef V) { return std::make_unique<StringLit>(NoRange, V.str()); }

ExprPtr moec::ast::makeName(StringRef Dotted) {
  // The definition keywords are names inside a block (`model = x`); a part
  // that is no name would print as something else (`true`, `a-b`).
  assert(llvm::all_of(parts(Dotted),
                      [](StringRef P) {
                        return isIdentifier(P) || P == "recipe" || P == "model" || P == "gpu" || P == "cluster";
                      }) &&
         "a path is made of names");
  return std::make_unique<PathExpr>(NoRange, parts(Dotted));
}

ExprPtr moec::ast::makeList(std::vector<ExprPtr> Elements) {
  return std::make_unique<ListExpr>(Expr::Kind::List, NoRange, std::move(Elements));
}

ExprPtr moec::ast::makeNameList(const std::vector<std::string> &Names) {
  std::vector<ExprPtr> Elements;
  for (const std::string &N : Names)
    Elements.push_back(makeName(N));
  return makeList(std::move(Elements));
}

Argument moec::ast::makeArg(StringRef Name, ExprPtr Value) { return {Name.str(), NoRange, std::move(Value)}; }

ExprPtr moec::ast::makeCall(StringRef Callee, std::vector<Argument> Args) {
  return std::make_unique<CallExpr>(NoRange, Callee.str(), NoRange, std::move(Args));
}

Entry moec::ast::makeAssignment(StringRef Path, ExprPtr Value) {
  Entry E;
  E.Path = parts(Path);
  E.Value = std::move(Value);
  return E;
}

Entry moec::ast::makeSection(StringRef Name, std::vector<Entry> Children) {
  Entry E;
  E.Path = parts(Name);
  E.Children = std::move(Children);
  return E;
}

Definition moec::ast::makeDefinition(DefKind Kind, StringRef Name, std::vector<Entry> Entries, StringRef Base) {
  Definition D;
  D.Kind = Kind;
  D.Name = Name.str();
  D.Base = Base.str();
  D.Entries = std::move(Entries);
  return D;
}

std::string moec::ast::printed(const File &F, const PrintOptions &Opts) {
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  print(F, OS, Opts);
  return OS.str();
}

bool moec::ast::isIdentifier(StringRef S) {
  static const char *Keywords[] = {"import", "recipe", "model", "gpu", "cluster", "extends", "sweep", "true", "false"};
  return !S.empty() && (llvm::isAlpha(S[0]) || S[0] == '_') &&
         llvm::all_of(S, [](char C) { return llvm::isAlnum(C) || C == '_'; }) && !llvm::is_contained(Keywords, S);
}

bool moec::ast::isStringLiteralText(StringRef S) {
  return llvm::none_of(S, [](char C) { return (unsigned char)C < 0x20 && C != '\t' && C != '\n'; });
}
