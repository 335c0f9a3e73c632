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
#include <vector>

namespace moec {

struct ParseLimits {
  size_t MaxFileBytes = 8u << 20;
  unsigned MaxNesting = 128;
  unsigned MaxOperatorsPerExpression = 512;
};

/// Parses buffer BufferID of the engine's SourceMgr. Returns null after
/// reporting at least one error.
std::unique_ptr<ast::File> parseBuffer(unsigned BufferID, DiagnosticEngine &Diags, const ParseLimits &Limits = {});

/// A token as the grammar's lexer (grammar/Moe.g4) reads it, with byte
/// offsets into the text.
struct LexedToken {
  enum Kind {
    Name,               // IDENT
    Keyword,            // import, recipe, model, gpu, cluster, extends, sweep, true, false
    Number,             // INT, FLOAT, QUANTITY (`4K`, `80GB`)
    String,             // a closed string, quotes included
    UnterminatedString, // a string the line ends in
    Comment,            // '#' to the end of the line
    Punct,              // braces, brackets, operators, ';', ',', '.', '@', '='
    Stray               // a character the language has no use for
  };
  Kind K;
  size_t Begin, End;
};

/// Every token of Text, comments included and whitespace dropped: the
/// parser's own lexer, for the tools that read text which may not parse
/// (the formatter's comments, the language server's completion context).
std::vector<LexedToken> lexText(llvm::StringRef Text);

} // namespace moec

#endif
