//===- Analysis.h - One document checked the way `moec check` does -*- C++ -*-===//
//
// The language server analyses a document from scratch on every change: a
// fresh SourceMgr, DiagnosticEngine and Sema over the editor's text (named by
// its path, so that imports resolve as on disk), the rule catalog over every
// recipe, then the engine's final list. Everything the features need (the
// syntax tree, the recipes with provenance, the definitions of the imports and
// the catalog) is kept alive with it.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LSP_ANALYSIS_H
#define MOEC_LSP_ANALYSIS_H

#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Lsp/Protocol.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/SourceMgr.h"
#include <memory>
#include <string>
#include <vector>

namespace moec::lsp {

struct AnalysisOptions {
  std::vector<std::string> IncludeDirs;
  /// --target: wins over the recipes' target field.
  llvm::Optional<Target> TargetOverride;
  DiagnosticOptions Diagnostics;
  /// Run the checks that need the planner's memory model (as `moec check`
  /// does unless --no-planner).
  bool UsePlanner = true;
};

/// Where the built-in catalog lives on disk for editors: the catalog is
/// embedded in moec, so the server writes a read-only copy of each file into
/// a directory and points go-to-definition there.
class CatalogFiles {
public:
  explicit CatalogFiles(std::string Dir) : Dir(std::move(Dir)) {}
  /// The on-disk copy of a built-in buffer ("<builtin>/models.moe"), written
  /// on first use; None when Name is not built in or the copy failed.
  llvm::Optional<std::string> pathFor(llvm::StringRef BufferName);
  /// True if Path is one of the copies (opening one must not report that
  /// every definition shadows itself).
  bool contains(llvm::StringRef Path) const;
  const std::string &directory() const { return Dir; }

private:
  std::string Dir;
  bool Written = false, WriteFailed = false;
};

/// A location in some buffer of an analysis, as LSP wants it.
struct Location {
  std::string URI;
  Position Start, End;
};

class Analysis {
public:
  /// Analyses Text as the file at Path (an absolute path, or a name that is
  /// not on disk: imports then resolve against the include directories only).
  static std::unique_ptr<Analysis> run(std::string Path, std::string Text, const AnalysisOptions &Opts);

  llvm::StringRef path() const { return Path; }
  llvm::StringRef text() const { return Text; }
  const LineTable &lines() const { return Lines; }
  llvm::SourceMgr &sourceMgr() { return SM; }
  const llvm::SourceMgr &sourceMgr() const { return SM; }
  const ast::File *file() const { return S ? S->mainFile() : nullptr; }
  const Sema &sema() const { return *S; }
  const std::vector<Recipe> &recipes() const { return Recipes; }
  /// The engine's final list (after @allow, -W flags, deduplication).
  const std::vector<Diagnostic> &diagnostics() const { return Final; }
  unsigned mainBuffer() const { return MainBuffer; }

  /// The byte offset of a pointer into the main buffer, or None.
  llvm::Optional<size_t> offsetOf(llvm::SMLoc L) const;
  const char *pointerAt(size_t Offset) const;
  /// The main buffer's range as LSP positions; None when not in it.
  llvm::Optional<std::pair<Position, Position>> mainRange(llvm::SMRange R) const;
  /// A range in any buffer with a file behind it: the main document (as
  /// MainURI), an import on disk, or the catalog's copy.
  llvm::Optional<Location> locate(llvm::SMRange R, llvm::StringRef MainURI, CatalogFiles &Catalog);
  /// The range in the main buffer through which buffer Buf was imported
  /// (the outermost import statement), or None.
  llvm::Optional<llvm::SMRange> importedThrough(unsigned Buf) const;
  /// "file.moe:12" for messages (hover provenance).
  std::string describe(llvm::SMLoc L) const;
  std::string sourceText(llvm::SMRange R) const;

private:
  Analysis() = default;
  std::string Path, Text;
  LineTable Lines{""};
  llvm::SourceMgr SM;
  std::unique_ptr<DiagnosticEngine> Diags;
  std::unique_ptr<Sema> S;
  std::vector<Recipe> Recipes;
  std::vector<Diagnostic> Final;
  unsigned MainBuffer = 0;
};

} // namespace moec::lsp

#endif
