//===- AST.h - The .moe syntax tree ------------------------------*- C++ -*-===//
//
// The parser's output and Sema's input. Nodes own their children and carry
// source ranges (half-open [Start, End) pointers into the SourceMgr buffer);
// nothing here knows about ANTLR.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_AST_AST_H
#define MOEC_AST_AST_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/raw_ostream.h"
#include <memory>
#include <string>
#include <vector>

namespace moec::ast {

class Expr {
public:
  enum class Kind { Int, Float, Quantity, String, Bool, Path, List, Call, Sweep, Unary, Binary };
  Kind getKind() const { return K; }
  llvm::SMRange getRange() const { return Range; }
  virtual ~Expr() = default;

protected:
  Expr(Kind K, llvm::SMRange R) : K(K), Range(R) {}

private:
  Kind K;
  llvm::SMRange Range;
};
using ExprPtr = std::unique_ptr<Expr>;

/// An integer, float or quantity literal, kept as text; Sema parses it so
/// that overflow and unknown units are reported with the other type errors.
class NumberLit : public Expr {
public:
  NumberLit(Kind K, llvm::SMRange R, std::string Digits, std::string Unit)
      : Expr(K, R), Digits(std::move(Digits)), Unit(std::move(Unit)) {}
  std::string Digits;
  std::string Unit; // empty unless Kind::Quantity
  static bool classof(const Expr *E) {
    return E->getKind() == Kind::Int || E->getKind() == Kind::Float || E->getKind() == Kind::Quantity;
  }
};

class StringLit : public Expr {
public:
  StringLit(llvm::SMRange R, std::string Value) : Expr(Kind::String, R), Value(std::move(Value)) {}
  std::string Value; // escapes already decoded
  static bool classof(const Expr *E) { return E->getKind() == Kind::String; }
};

class BoolLit : public Expr {
public:
  BoolLit(llvm::SMRange R, bool Value) : Expr(Kind::Bool, R), Value(Value) {}
  bool Value;
  static bool classof(const Expr *E) { return E->getKind() == Kind::Bool; }
};

/// `a.b.c`: a field reference, an enum value or a definition name, decided by
/// Sema from the type the context expects.
class PathExpr : public Expr {
public:
  PathExpr(llvm::SMRange R, llvm::SmallVector<std::string, 2> Parts) : Expr(Kind::Path, R), Parts(std::move(Parts)) {}
  llvm::SmallVector<std::string, 2> Parts;
  std::string joined() const;
  static bool classof(const Expr *E) { return E->getKind() == Kind::Path; }
};

class ListExpr : public Expr {
public:
  ListExpr(Kind K, llvm::SMRange R, std::vector<ExprPtr> Elements) : Expr(K, R), Elements(std::move(Elements)) {}
  std::vector<ExprPtr> Elements;
  static bool classof(const Expr *E) { return E->getKind() == Kind::List || E->getKind() == Kind::Sweep; }
};

struct Argument {
  std::string Name; // empty for a positional argument
  llvm::SMRange NameRange;
  ExprPtr Value;
};

class CallExpr : public Expr {
public:
  CallExpr(llvm::SMRange R, std::string Callee, llvm::SMRange CalleeRange, std::vector<Argument> Args)
      : Expr(Kind::Call, R), Callee(std::move(Callee)), CalleeRange(CalleeRange), Args(std::move(Args)) {}
  std::string Callee;
  llvm::SMRange CalleeRange;
  std::vector<Argument> Args;
  static bool classof(const Expr *E) { return E->getKind() == Kind::Call; }
};

class UnaryExpr : public Expr {
public:
  UnaryExpr(llvm::SMRange R, char Op, ExprPtr Operand) : Expr(Kind::Unary, R), Op(Op), Operand(std::move(Operand)) {}
  char Op;
  ExprPtr Operand;
  static bool classof(const Expr *E) { return E->getKind() == Kind::Unary; }
};

class BinaryExpr : public Expr {
public:
  BinaryExpr(llvm::SMRange R, char Op, llvm::SMRange OpRange, ExprPtr LHS, ExprPtr RHS)
      : Expr(Kind::Binary, R), Op(Op), OpRange(OpRange), LHS(std::move(LHS)), RHS(std::move(RHS)) {}
  char Op;
  llvm::SMRange OpRange;
  ExprPtr LHS, RHS;
  static bool classof(const Expr *E) { return E->getKind() == Kind::Binary; }
};

struct Annotation {
  std::string Name;
  llvm::SMRange Range;
  std::vector<Argument> Args;
};

struct Entry {
  std::vector<Annotation> Annotations;
  llvm::SMRange Range;
  // An assignment `path = value`, or a section `name { entries }`.
  llvm::SmallVector<std::string, 2> Path;
  llvm::SMRange PathRange;
  ExprPtr Value;               // set for an assignment
  std::vector<Entry> Children; // set for a section
  llvm::SMRange OpenBrace;     // a section's '{'
  bool isSection() const { return !Value; }
};

enum class DefKind { Recipe, Model, Gpu, Cluster };
llvm::StringRef defKindName(DefKind K);

struct Definition {
  std::vector<Annotation> Annotations;
  DefKind Kind;
  std::string Name;
  llvm::SMRange NameRange;
  std::string Base; // empty if no `extends`
  llvm::SMRange BaseRange;
  std::vector<Entry> Entries;
  llvm::SMRange Range;
  /// A syntax error was recovered from inside it (an entry was skipped):
  /// its name resolves, but it is not checked, nor what extends it.
  bool Damaged = false;
};

struct Import {
  std::string Path;
  llvm::SMRange Range;
};

struct File {
  unsigned BufferID = 0;
  std::vector<Import> Imports;
  std::vector<Definition> Definitions;
};

struct PrintOptions {
  /// A section whose entries fit on one line within this many columns is
  /// printed on one line (`cluster { gpu = h100_sxm; gpus = 16 }`); 0: every
  /// entry on a line of its own.
  unsigned InlineWidth = 0;
};
/// Prints the tree as .moe source that parses back to the same tree: entries
/// on lines of their own (except as InlineWidth allows), two-space indentation. Reads no
/// source positions, so trees built in memory (moec/AST/Builder.h) print too.
void print(const File &F, llvm::raw_ostream &OS, const PrintOptions &Opts);
/// print with the default options, for --dump-ast.
void dump(const File &F, llvm::raw_ostream &OS);
/// Prints an expression as source text (canonical spacing).
void printExpr(const Expr &E, llvm::raw_ostream &OS);

} // namespace moec::ast

#endif
