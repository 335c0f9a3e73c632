//===- Sema.h - From .moe files to typed recipes -----------------*- C++ -*-===//
//
// Sema loads a file with its imports and the built-in catalog, resolves
// names and `extends`, evaluates every field against the schema, expands
// sweeps, derives dp/edp/world size, and lowers each sweep point to a Recipe.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SEMA_SEMA_H
#define MOEC_SEMA_SEMA_H

#include "moec/AST/AST.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Recipe.h"
#include "moec/Syntax/Parser.h"
#include <memory>

namespace moec {

/// The built-in catalog's syntax trees, parsed once per SourceMgr and
/// shared by every Sema over it (a `moec check` of many files parses the
/// catalog once, not once per file).
class BuiltinCatalog {
public:
  static std::shared_ptr<const BuiltinCatalog> parse(DiagnosticEngine &Diags, const ParseLimits &Limits = {});
  std::vector<std::unique_ptr<ast::File>> Files;
};

struct SemaOptions {
  std::vector<std::string> IncludeDirs;
  unsigned MaxSweepPoints = 10000;
  unsigned MaxImportDepth = 32;
  ParseLimits Limits;
  /// --target: wins over every recipe's target field.
  llvm::Optional<Target> TargetOverride;
  /// Parsed on construction when not given.
  std::shared_ptr<const BuiltinCatalog> Catalog;
};

class SemaImpl;

class Sema {
public:
  Sema(DiagnosticEngine &Diags, SemaOptions Opts = {});
  ~Sema();

  enum class LoadResult { Loaded, Unreadable, HasErrors };
  /// Loads Path ("-" reads standard input) and everything it imports.
  /// Unreadable means the tool could not run (exit status 2).
  LoadResult loadFile(llvm::StringRef Path);
  /// Loads a file already in memory (tests, the language server).
  LoadResult loadBuffer(std::unique_ptr<llvm::MemoryBuffer> Buffer);

  /// Checks every definition of the loaded file and returns its recipes, one
  /// per sweep point. With OnlyRecipe, only that recipe is lowered; an
  /// unknown name is an error.
  std::vector<Recipe> analyze(llvm::Optional<llvm::StringRef> OnlyRecipe = llvm::None);

  /// The main file's syntax tree, or null if it did not parse.
  const ast::File *mainFile() const;

  /// A definition whose name Sema resolves, for tools that navigate (the
  /// language server's go-to-definition and name completion).
  struct DefinitionRef {
    const ast::Definition *AST;
    bool Builtin;
  };
  /// Every definition a name can refer to: the built-in catalog's, then the
  /// imported files' and the main file's, in load order (a duplicate that was
  /// rejected is not listed).
  std::vector<DefinitionRef> definitions() const;
  /// What analyze() made of a model or GPU definition (its values after
  /// `extends`), or null when it was not lowered or had errors.
  const ModelSpec *loweredModel(const ast::Definition *D) const;
  const GpuSpec *loweredGpu(const ast::Definition *D) const;

  /// Every model and GPU definition of the built-in catalog, lowered as a
  /// recipe that names it has it (defaults and derived fields included), in
  /// catalog order; for tools that match a configuration against the catalog.
  struct LoweredCatalog {
    std::vector<ModelSpec> Models;
    std::vector<GpuSpec> Gpus;
  };
  LoweredCatalog lowerCatalog();

private:
  std::unique_ptr<SemaImpl> Impl;
};

} // namespace moec

#endif
