//===- SemaImpl.h - Sema's internal state (private) -------------*- C++ -*-===//
#ifndef MOEC_LIB_SEMA_SEMAIMPL_H
#define MOEC_LIB_SEMA_SEMAIMPL_H

#include "moec/Sema/Schema.h"
#include "moec/Sema/Sema.h"
#include "moec/Sema/Value.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include <deque>
#include <map>

namespace moec {

class DefInfo;

/// One field as set in a definition, after `extends` merging.
struct FieldEntry {
  const ast::Expr *Value = nullptr;
  llvm::SMRange EntryRange; // the whole entry, for @allow scopes and fix-its
  llvm::SMRange PathRange;
  const ast::Entry *Entry = nullptr;
  /// Definitions the value came through: the one that set it first, then
  /// each definition that inherited it.
  llvm::SmallVector<std::string, 2> Chain;
};

/// Which element of each sweep a point takes, by field path.
using SweepChoice = std::map<std::string, unsigned>;

/// Evaluates the fields of one definition at one sweep point, memoized, with
/// cycle detection. Models, GPUs and clusters have one shared scope each.
class Scope {
public:
  Scope(SemaImpl &S, DefInfo &Def, SweepChoice Choice = {}) : S(S), Def(Def), Choice(std::move(Choice)) {}

  /// The value of field Path (set, defaulted or derived), or null when it is
  /// unset or its evaluation failed (already reported).
  const Value *get(llvm::StringRef Path);
  bool isSet(llvm::StringRef Path) const;
  /// True if Path is set but its value could not be evaluated (reported).
  bool failed(llvm::StringRef Path) const;
  DefInfo &definition() { return Def; }
  const SweepChoice &choice() const { return Choice; }
  Provenance provenance(llvm::StringRef Path) const;

private:
  llvm::Optional<Value> compute(llvm::StringRef Path);
  llvm::Optional<Value> derive(llvm::StringRef Path);
  llvm::Optional<Value> evalField(const ast::Expr &E, const FieldSpec &F, llvm::StringRef Path);
  llvm::Optional<Value> evalNamed(const ast::Expr &E, const FieldSpec &F);
  llvm::Optional<Value> evalCall(const ast::Expr &E, const FieldSpec &F);
  llvm::Optional<Quantity> evalNumber(const ast::Expr &E, llvm::StringRef FromPath);
  llvm::Optional<Value> evalPlain(const ast::Expr &E, llvm::StringRef FromPath);
  const Value *resolveReference(const ast::PathExpr &P, llvm::StringRef FromPath);
  bool checkValue(Value &V, const FieldSpec &F, llvm::SMRange Where);
  const ast::Expr *chosenExpr(llvm::StringRef Path, const FieldEntry &E) const;

  enum class State { InProgress, Done };
  struct Slot {
    State St;
    llvm::Optional<Value> V;
    bool Failed = false;
  };
  SemaImpl &S;
  DefInfo &Def;
  SweepChoice Choice;
  llvm::StringMap<Slot> Memo;
  std::vector<std::string> Stack;
};

class DefInfo {
public:
  const ast::Definition *AST = nullptr;
  bool Builtin = false;
  unsigned ChainLength = 1; // definitions in its extends chain, itself included
  enum class State { Unresolved, Resolving, Resolved, Failed } St = State::Unresolved;
  llvm::StringMap<FieldEntry> Fields;
  std::vector<std::string> SweepPaths; // in source order
  /// Fields that are set but whose value was rejected while flattening (an
  /// empty or misplaced sweep, already reported): neither missing nor unset.
  llvm::StringSet<> Rejected;
  std::unique_ptr<Scope> Shared;   // for models, GPUs, clusters
  llvm::Optional<ModelSpec> Model; // lowered once
  llvm::Optional<GpuSpec> Gpu;
  bool Lowered = false;

  ast::DefKind kind() const { return AST->Kind; }
  llvm::StringRef name() const { return AST->Name; }
};

class SemaImpl {
public:
  SemaImpl(DiagnosticEngine &Diags, SemaOptions Opts) : Diags(Diags), Opts(std::move(Opts)) {}

  // Loading (Sema.cpp).
  void loadCatalog();
  Sema::LoadResult loadMain(std::unique_ptr<llvm::MemoryBuffer> Buffer);
  const ast::File *loadBuffer(std::unique_ptr<llvm::MemoryBuffer> Buffer, unsigned Depth, llvm::SMRange ImportedFrom);
  void loadImports(const ast::File &F, unsigned Depth);
  void registerDefinitions(const ast::File &F, bool Builtin);
  void processAnnotations(const std::vector<ast::Annotation> &As, llvm::SMRange Scope);

  // Names and inheritance (Sema.cpp).
  DefInfo *lookup(llvm::StringRef Name);
  bool resolve(DefInfo &D);
  Scope &sharedScope(DefInfo &D);
  std::vector<llvm::StringRef> namesOfKind(ast::DefKind K);
  /// model = hf("config.json"): imports the config as a model definition.
  DefInfo *importHF(llvm::StringRef Path, llvm::SMRange CallRange);
  llvm::StringMap<DefInfo *> HFModels; // by canonical path
  static constexpr unsigned MaxExtendsDepth = 64;

  // Lowering (Lowering.cpp).
  std::vector<Recipe> analyze(llvm::Optional<llvm::StringRef> OnlyRecipe);
  void checkDefinition(DefInfo &D);
  void checkRequired(Scope &Sc);
  /// Checks required fields and evaluates every field the definition sets,
  /// so that each value is type-checked once even if nothing reads it.
  Scope &evaluateAll(Scope &Sc);
  llvm::Optional<Recipe> lowerRecipe(Scope &Sc, std::string PointName);
  const ModelSpec *lowerModel(DefInfo &D);
  const GpuSpec *lowerGpu(DefInfo &D);

  std::string sourceText(llvm::SMRange R) const {
    return std::string(R.Start.getPointer(), R.End.getPointer() - R.Start.getPointer());
  }

  DiagnosticEngine &Diags;
  SemaOptions Opts;
  std::vector<std::unique_ptr<ast::File>> Files; // owns every parsed AST
  const ast::File *Main = nullptr;
  std::deque<DefInfo> Defs;
  llvm::StringMap<DefInfo *> UserDefs, BuiltinDefs;
  llvm::StringMap<bool> LoadedPaths; // canonical path -> still loading
  std::vector<std::string> LoadStack;
  std::string MainDir;
};

} // namespace moec

#endif
