//===- AST.cpp - Printing the syntax tree ---------------------------------===//
//
// --dump-ast prints the tree back as canonical .moe source, so that the dump
// is itself a valid recipe that parses to the same tree; tools that write
// .moe (moec import) print the trees they build the same way.
//
//===----------------------------------------------------------------------===//
#include "moec/AST/AST.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

using namespace moec::ast;
using llvm::cast;

llvm::StringRef moec::ast::defKindName(DefKind K) {
  switch (K) {
  case DefKind::Recipe:
    return "recipe";
  case DefKind::Model:
    return "model";
  case DefKind::Gpu:
    return "gpu";
  case DefKind::Cluster:
    return "cluster";
  }
  llvm_unreachable("unknown definition kind");
}

std::string PathExpr::joined() const { return llvm::join(Parts, "."); }

static void printString(llvm::StringRef S, llvm::raw_ostream &OS) {
  OS << '"';
  for (char C : S) {
    if (C == '"' || C == '\\')
      OS << '\\' << C;
    else if (C == '\n')
      OS << "\\n";
    else
      OS << C;
  }
  OS << '"';
}

static int precedence(char Op) { return (Op == '+' || Op == '-') ? 1 : 2; }

static void printArgs(const std::vector<Argument> &Args, llvm::raw_ostream &OS) {
  OS << '(';
  llvm::interleaveComma(Args, OS, [&](const Argument &A) {
    if (!A.Name.empty())
      OS << A.Name << " = ";
    printExpr(*A.Value, OS);
  });
  OS << ')';
}

static void printOperand(const Expr &E, int ParentPrec, bool IsRight, llvm::raw_ostream &OS) {
  if (const auto *B = llvm::dyn_cast<BinaryExpr>(&E)) {
    int P = precedence(B->Op);
    if (P < ParentPrec || (IsRight && P == ParentPrec)) {
      OS << '(';
      printExpr(E, OS);
      OS << ')';
      return;
    }
  }
  printExpr(E, OS);
}

void moec::ast::printExpr(const Expr &E, llvm::raw_ostream &OS) {
  switch (E.getKind()) {
  case Expr::Kind::Int:
  case Expr::Kind::Float:
  case Expr::Kind::Quantity: {
    const auto &N = cast<NumberLit>(E);
    OS << N.Digits << N.Unit;
    return;
  }
  case Expr::Kind::String:
    printString(cast<StringLit>(E).Value, OS);
    return;
  case Expr::Kind::Bool:
    OS << (cast<BoolLit>(E).Value ? "true" : "false");
    return;
  case Expr::Kind::Path:
    OS << cast<PathExpr>(E).joined();
    return;
  case Expr::Kind::List:
  case Expr::Kind::Sweep: {
    if (E.getKind() == Expr::Kind::Sweep)
      OS << "sweep ";
    OS << '[';
    llvm::interleaveComma(cast<ListExpr>(E).Elements, OS, [&](const ExprPtr &X) { printExpr(*X, OS); });
    OS << ']';
    return;
  }
  case Expr::Kind::Call: {
    const auto &C = cast<CallExpr>(E);
    OS << C.Callee;
    printArgs(C.Args, OS);
    return;
  }
  case Expr::Kind::Unary: {
    const auto &U = cast<UnaryExpr>(E);
    OS << U.Op;
    printOperand(*U.Operand, 3, false, OS);
    return;
  }
  case Expr::Kind::Binary: {
    const auto &B = cast<BinaryExpr>(E);
    int P = precedence(B.Op);
    printOperand(*B.LHS, P, false, OS);
    OS << ' ' << B.Op << ' ';
    printOperand(*B.RHS, P, true, OS);
    return;
  }
  }
}

static void printAnnotations(const std::vector<Annotation> &As, unsigned Indent, llvm::raw_ostream &OS) {
  for (const Annotation &A : As) {
    OS.indent(Indent) << '@' << A.Name;
    if (!A.Args.empty())
      printArgs(A.Args, OS);
    OS << '\n';
  }
}

static bool hasAnnotations(const std::vector<Entry> &Entries) {
  return llvm::any_of(Entries, [](const Entry &E) { return !E.Annotations.empty() || hasAnnotations(E.Children); });
}

/// A section's entries on one line, `{ a = 1; b { c = 2 } }`.
static void printInline(const std::vector<Entry> &Entries, llvm::raw_ostream &OS) {
  OS << "{ ";
  for (const Entry &E : Entries) {
    if (&E != &Entries.front())
      OS << "; ";
    OS << llvm::join(E.Path, ".");
    if (E.isSection()) {
      OS << ' ';
      printInline(E.Children, OS);
    } else {
      OS << " = ";
      printExpr(*E.Value, OS);
    }
  }
  OS << " }";
}

static void printEntries(const std::vector<Entry> &Entries, unsigned Indent, const PrintOptions &Opts,
                         llvm::raw_ostream &OS) {
  for (const Entry &E : Entries) {
    printAnnotations(E.Annotations, Indent, OS);
    std::string Path = llvm::join(E.Path, ".");
    OS.indent(Indent) << Path;
    if (E.isSection()) {
      if (Opts.InlineWidth && !E.Children.empty() && !hasAnnotations(E.Children)) {
        std::string Line;
        llvm::raw_string_ostream LS(Line);
        printInline(E.Children, LS);
        if (Indent + Path.size() + 1 + LS.str().size() <= Opts.InlineWidth) {
          OS << ' ' << Line << '\n';
          continue;
        }
      }
      OS << " {\n";
      printEntries(E.Children, Indent + 2, Opts, OS);
      OS.indent(Indent) << "}\n";
    } else {
      OS << " = ";
      printExpr(*E.Value, OS);
      OS << '\n';
    }
  }
}

void moec::ast::print(const File &F, llvm::raw_ostream &OS, const PrintOptions &Opts) {
  for (const Import &I : F.Imports) {
    OS << "import ";
    printString(I.Path, OS);
    OS << '\n';
  }
  for (const Definition &D : F.Definitions) {
    if (!F.Imports.empty() || &D != &F.Definitions.front())
      OS << '\n';
    printAnnotations(D.Annotations, 0, OS);
    std::string Header = (defKindName(D.Kind) + " " + D.Name).str();
    if (!D.Base.empty())
      Header += " extends " + D.Base;
    OS << Header;
    if (Opts.InlineWidth && !D.Entries.empty() && !hasAnnotations(D.Entries)) {
      std::string Line;
      llvm::raw_string_ostream LS(Line);
      printInline(D.Entries, LS);
      if (Header.size() + 1 + LS.str().size() <= Opts.InlineWidth) {
        OS << ' ' << Line << '\n';
        continue;
      }
    }
    OS << " {\n";
    printEntries(D.Entries, 2, Opts, OS);
    OS << "}\n";
  }
}

void moec::ast::dump(const File &F, llvm::raw_ostream &OS) { print(F, OS, PrintOptions()); }
