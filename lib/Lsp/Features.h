//===- Features.h - Hover, completion, definition (private) -----*- C++ -*-===//
#ifndef MOEC_LIB_LSP_FEATURES_H
#define MOEC_LIB_LSP_FEATURES_H

#include "moec/Lsp/Analysis.h"
#include "llvm/Support/JSON.h"

namespace moec::lsp {

/// The definition a name refers to from the main file: a user definition
/// (the file's or an import's) first, then the built-in one. Exclude skips a
/// definition (`model x extends x` extends the built-in x).
const ast::Definition *findDefinition(const Analysis &A, llvm::StringRef Name,
                                      const ast::Definition *Exclude = nullptr);

/// A Hover result, or null when the cursor is on nothing moec can explain.
llvm::json::Value hoverAt(Analysis &A, size_t Offset);

/// A CompletionList for the cursor at Offset in Text. The context (the
/// definition, section and field the cursor is in) comes from the text, as
/// a half-typed entry seldom parses; Names, when given, supplies the
/// definitions that name completion offers.
llvm::json::Value completionAt(llvm::StringRef Text, size_t Offset, const Analysis *Names);

/// The Locations the symbol at Offset is defined at (empty array: none).
llvm::json::Value definitionAt(Analysis &A, size_t Offset, llvm::StringRef URI, CatalogFiles &Catalog);

} // namespace moec::lsp

#endif
