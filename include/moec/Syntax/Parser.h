//===- Parser.h - .moe text to AST -------------------------------*- C++ -*-===//
//
// The only component that sees ANTLR. Every lexical and syntax error becomes
// a diagnostic; the tree is returned only when the buffer parsed cleanly.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SYNTAX_PARSER_H
#define MOEC_SYNTAX_PARSER_H

#include "moec/AST/AST.h"
#include "moec/Diag/DiagnosticEngine.h"
#include <memory>

namespace moec {

struct ParseLimits {
  size_t MaxFileBytes = 8u << 20;
  unsigned MaxNesting = 128;
  unsigned MaxOperatorsPerExpression = 512;
};

/// Parses buffer BufferID of the engine's SourceMgr. Returns null after
/// reporting at least one error.
std::unique_ptr<ast::File> parseBuffer(unsigned BufferID, DiagnosticEngine &Diags, const ParseLimits &Limits = {});

} // namespace moec

#endif
