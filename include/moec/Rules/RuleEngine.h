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

/// A rule's severity for a target, or None where the rule does not hold
/// (RuleTargets.def; a diagnostic without an entry keeps its default).
llvm::Optional<Severity> ruleSeverity(diag::ID ID, Target T);
/// The check a rule mirrors in a target's source ("file:line ..."), or ""
/// for a rule of the seeds or the planner.
llvm::StringRef ruleMirror(diag::ID ID, Target T);
/// True when the rule has a RuleTargets.def entry.
bool ruleHasTargets(diag::ID ID);

class RuleContext {
public:
  RuleContext(const Recipe &R, DiagnosticEngine &Diags, bool UsePlanner = true)
      : R(R), Diags(Diags), UsePlanner(UsePlanner) {}

  const Recipe &R;

  /// The release checked for, and facts of it rules branch on.
  Target target() const { return R.Tgt; }
  /// Megatron-Core's minor version in the target (0.16 -> 16).
  unsigned coreMinor() const { return getTargetInfo(R.Tgt).CoreMinor; }
  bool underBridge() const { return getTargetInfo(R.Tgt).Kind == Framework::Bridge; }

  /// Reports at the entry that set Path (or at the recipe's name when Path
  /// kept its default), with a note when the value was inherited.
  /// The severity is the rule's for the recipe's target (RuleTargets.def);
  /// a rule that is off for the target reports nothing.
  template <typename... Args> DiagnosticBuilder report(diag::ID ID, llvm::StringRef Path, Args &&...A) {
    return reportAt(ID, where(Path), Path, std::forward<Args>(A)...);
  }
  /// A rule named in code: the argument count is checked at compile time.
  template <diag::ID N, typename... Args> DiagnosticBuilder report(diag::Tag<N> T, llvm::StringRef Path, Args &&...A) {
    static_assert(sizeof...(Args) == diag::Tag<N>::Arity, "wrong number of arguments for this rule's message");
    return reportAt(diag::ID(T), where(Path), Path, std::forward<Args>(A)...);
  }
  template <diag::ID N, typename... Args>
  DiagnosticBuilder reportAt(diag::Tag<N> T, llvm::SMRange Range, llvm::StringRef Path, Args &&...A) {
    static_assert(sizeof...(Args) == diag::Tag<N>::Arity, "wrong number of arguments for this rule's message");
    return reportAt(diag::ID(T), Range, Path, std::forward<Args>(A)...);
  }
  /// Reports at an exact range inside the entry that set Path.
  template <typename... Args>
  DiagnosticBuilder reportAt(diag::ID ID, llvm::SMRange Range, llvm::StringRef Path, Args &&...A) {
    llvm::Optional<Severity> Sev = ruleSeverity(ID, R.Tgt);
    if (!Sev)
      return DiagnosticBuilder(nullptr, llvm::None);
    DiagnosticBuilder B = Diags.reportAs(ID, *Sev, Range, std::forward<Args>(A)...);
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
  /// Whether a variant a fix-it would make is a recipe that still checks:
  /// its sizes divide the world, the global batch, the experts, the heads
  /// and the cp_hierarchy, and (with the planner) it fits in memory. A
  /// fix-it that trades one error for another is not offered.
  bool variantAcceptable(Recipe Variant) const;
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
