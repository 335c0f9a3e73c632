//===- RuleEngine.h - Checks over a typed recipe -----------------*- C++ -*-===//
//
// A rule is an entry in Rules.def (ID, severity, message, explanation,
// source) and a function `void check_<Enum>(RuleContext &)` in its family
// file. The registry is generated from Rules.def, so a rule without a check
// function does not link.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_RULES_RULEENGINE_H
#define MOEC_RULES_RULEENGINE_H

#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Model/Memory.h"
#include "moec/Sema/Recipe.h"

namespace moec {

class RuleContext {
public:
  RuleContext(const Recipe &R, DiagnosticEngine &Diags, bool UsePlanner = true)
      : R(R), Diags(Diags), UsePlanner(UsePlanner) {}

  const Recipe &R;

  /// Reports at the entry that set Path (or at the recipe's name when Path
  /// kept its default), with a note when the value was inherited.
  template <typename... Args> DiagnosticBuilder report(diag::ID ID, llvm::StringRef Path, Args &&...A) {
    DiagnosticBuilder B = Diags.report(ID, where(Path), std::forward<Args>(A)...);
    noteInheritance(B, Path);
    return B;
  }
  /// Reports at an exact range inside the entry that set Path.
  template <typename... Args>
  DiagnosticBuilder reportAt(diag::ID ID, llvm::SMRange Range, llvm::StringRef Path, Args &&...A) {
    DiagnosticBuilder B = Diags.report(ID, Range, std::forward<Args>(A)...);
    noteInheritance(B, Path);
    return B;
  }
  /// Adds a fix-it that rewrites Path's entry as `path = Value`, when the
  /// recipe sets Path itself; defaults have no entry to rewrite.
  void fixit(DiagnosticBuilder &B, llvm::StringRef Path, const std::string &Value) const;

  // Quantities rules share.
  bool isMoE() const { return R.Model.isMoE(); }
  /// Micro batches per step, GBS / (MBS x DP); 0 when that is not exact.
  int64_t microbatches() const;
  /// Tokens per GPU along the sequence: S / (CP x (TP if sequence parallel)).
  int64_t shardTokens() const;
  /// The planner's memory estimate for this recipe (null when its pipeline
  /// cannot be planned; another rule reports why). Computed once.
  const MemoryEstimate *memory();
  /// The memory estimate of a variant of this recipe (e.g. another recompute).
  llvm::Optional<MemoryEstimate> memoryOf(const Recipe &Variant) const;
  /// An NVL72-class system: an NVLink domain that spans several nodes.
  bool isNVL72() const { return R.Gpu.NVLinkDomain > R.Gpu.GpusPerNode; }

private:
  llvm::SMRange where(llvm::StringRef Path) const;
  void noteInheritance(DiagnosticBuilder &B, llvm::StringRef Path) const;
  DiagnosticEngine &Diags;
  bool UsePlanner;
  bool MemoryComputed = false;
  llvm::Optional<MemoryEstimate> Memory;
};

struct RuleSpec {
  diag::ID ID;
  llvm::StringLiteral Source;
  void (*Check)(RuleContext &);
};

/// Every rule, in Rules.def order.
llvm::ArrayRef<RuleSpec> allRules();
/// The source (seed section or Megatron rule) of a rule, or "" for a
/// diagnostic that is not a rule.
llvm::StringRef ruleSource(diag::ID ID);
/// Runs every rule over one recipe (one sweep point). Without the planner,
/// the rules that need its memory model (memory-exceeds-hbm,
/// memory-headroom) stay silent and prefer-selective-recompute does not
/// check that a selective set fits.
void runRules(const Recipe &R, DiagnosticEngine &Diags, bool UsePlanner = true);

} // namespace moec

#endif
