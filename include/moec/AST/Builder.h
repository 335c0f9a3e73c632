//===- Builder.h - Syntax trees built in memory ------------------*- C++ -*-===//
//
// Tools that write .moe (moec import) build the tree of what they write and
// print it with ast::print, instead of concatenating text: quoting, escapes
// and the spelling of numbers are then decided in one place, and the text
// can be checked by parsing it back to the same tree.
//
// Built nodes have empty source ranges. Only the printers and the tree
// comparison may be given them; Sema and the formatter read positions.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_AST_BUILDER_H
#define MOEC_AST_BUILDER_H

#include "moec/AST/AST.h"
#include <cstdint>

namespace moec::ast {

/// An integer literal; a negative value is unary minus on its magnitude, as
/// the parser reads `-3`.
ExprPtr makeInt(int64_t V);
/// A float literal spelled with the fewest digits that read back as V, with
/// a '.' or an exponent so that it stays a float (2.0, 1e-05). V is finite.
ExprPtr makeReal(double V);
/// V as an integer literal when it is a whole number an int64 holds (a RoPE
/// base of 1e6 is written 1000000), otherwise as makeReal.
ExprPtr makeNumber(double V);
ExprPtr makeBool(bool V);
ExprPtr makeString(llvm::StringRef V);
/// A name or a dotted path (`fp8.tensorwise`); each part is an identifier.
ExprPtr makeName(llvm::StringRef Dotted);
ExprPtr makeList(std::vector<ExprPtr> Elements);
/// A list of names.
ExprPtr makeNameList(const std::vector<std::string> &Names);
/// A named argument (`layers = 2`), or a positional one when Name is empty.
Argument makeArg(llvm::StringRef Name, ExprPtr Value);
ExprPtr makeCall(llvm::StringRef Callee, std::vector<Argument> Args);

Entry makeAssignment(llvm::StringRef Path, ExprPtr Value);
Entry makeSection(llvm::StringRef Name, std::vector<Entry> Children);
/// `Kind Name [extends Base] { Entries }`.
Definition makeDefinition(DefKind Kind, llvm::StringRef Name, std::vector<Entry> Entries, llvm::StringRef Base = "");
/// F as source text (ast::print into a string).
std::string printed(const File &F, const PrintOptions &Opts = PrintOptions());

/// Whether S is an identifier of the language (a name a path is made of,
/// not a keyword).
bool isIdentifier(llvm::StringRef S);
/// Whether a string literal can hold S: the lexer refuses control
/// characters other than tab, and only '"', '\\' and newline have escapes.
bool isStringLiteralText(llvm::StringRef S);

} // namespace moec::ast

#endif
