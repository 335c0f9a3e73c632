//===- DiagnosticRenderers.h - Text, JSON and SARIF output ------*- C++ -*-===//
#ifndef MOEC_DIAG_DIAGNOSTICRENDERERS_H
#define MOEC_DIAG_DIAGNOSTICRENDERERS_H

#include "moec/Diag/DiagnosticEngine.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace moec {

/// Clang-style: `file:line:col: severity: message [id]`, the source line, a
/// caret and range underline, then notes and fix-its. Without ShowRemarks,
/// remarks are summarised in one closing line (their count and IDs), so that
/// advice does not drown the errors and warnings.
void renderText(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM, llvm::raw_ostream &OS, bool Colors,
                bool ShowRemarks = true);

/// One JSON array of objects with id, severity, message, file, line, column,
/// end_line, end_column, recipe, notes, fixits (docs/diagnostics.md).
llvm::json::Value renderJSON(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM);

/// A SARIF 2.1.0 log with one run whose rules are every diagnostic moec knows.
llvm::json::Value renderSARIF(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM, llvm::StringRef ToolVersion);

} // namespace moec

#endif
