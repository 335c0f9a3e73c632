//===- RuleEngine.cpp - The registry and the context rules report through -===//
#include "moec/Rules/RuleEngine.h"

#include <vector>

using namespace moec;

namespace moec::rules {
#define RULE(Enum, Id, Severity, Format, Explanation, Source) void check_##Enum(RuleContext &C);
#include "moec/Rules/Rules.def"
} // namespace moec::rules

static const RuleSpec Registry[] = {
#define RULE(Enum, Id, Severity, Format, Explanation, Source) {diag::Enum, Source, &rules::check_##Enum},
#include "moec/Rules/Rules.def"
};

llvm::ArrayRef<RuleSpec> moec::allRules() { return Registry; }

namespace {
/// Off: the rule does not hold in a target.
enum class Holds { Off, Remark, Warning, Error };
struct TargetCell {
  Holds H;
  llvm::StringLiteral Mirror;
};
struct RuleTargetRow {
  diag::ID ID;
  TargetCell Cells[NumTargets];
};
static_assert(NumTargets == 3, "RuleTargets.def has one column per target of Targets.def");
const RuleTargetRow TargetRows[] = {
#define RULE_TARGETS(Enum, SevMain, MirrorMain, Sev031, Mirror031, SevLM, MirrorLM)                                    \
  {diag::Enum, {{Holds::SevMain, MirrorMain}, {Holds::Sev031, Mirror031}, {Holds::SevLM, MirrorLM}}},
#include "moec/Rules/RuleTargets.def"
};

/// Rows indexed by diagnostic ID (null: no entry), built once.
const RuleTargetRow *rowFor(diag::ID ID) {
  static const std::vector<const RuleTargetRow *> ByID = [] {
    std::vector<const RuleTargetRow *> V(diag::NumDiags, nullptr);
    for (const RuleTargetRow &Row : TargetRows) {
      assert(!V[Row.ID] && "a rule has one RuleTargets.def entry");
      V[Row.ID] = &Row;
    }
    return V;
  }();
  return ByID[ID];
}
} // namespace

llvm::Optional<Severity> moec::ruleSeverity(diag::ID ID, Target T) {
  const RuleTargetRow *Row = rowFor(ID);
  if (!Row)
    return getDiagInfo(ID).DefaultSeverity;
  switch (Row->Cells[unsigned(T)].H) {
  case Holds::Off:
    return llvm::None;
  case Holds::Remark:
    return Severity::Remark;
  case Holds::Warning:
    return Severity::Warning;
  case Holds::Error:
    return Severity::Error;
  }
  llvm_unreachable("unknown Holds");
}

llvm::StringRef moec::ruleMirror(diag::ID ID, Target T) {
  const RuleTargetRow *Row = rowFor(ID);
  return Row ? llvm::StringRef(Row->Cells[unsigned(T)].Mirror) : llvm::StringRef();
}

bool moec::ruleHasTargets(diag::ID ID) { return rowFor(ID) != nullptr; }

llvm::StringRef moec::ruleSource(diag::ID ID) {
  for (const RuleSpec &R : Registry)
    if (R.ID == ID)
      return R.Source;
  return "";
}

void moec::runRules(const Recipe &R, DiagnosticEngine &Diags, bool UsePlanner) {
  Diags.setRecipeContext(R.PointName);
  RuleContext C(R, Diags, UsePlanner);
  for (const RuleSpec &Rule : Registry)
    if (ruleSeverity(Rule.ID, R.Tgt))
      Rule.Check(C);
  Diags.setRecipeContext("");
}

llvm::SMRange RuleContext::where(llvm::StringRef Path) const {
  const Provenance &P = R.origin(Path);
  if (P.IsDefault || !P.Range.Start.isValid())
    return R.NameRange;
  return P.EntryRange.Start.isValid() ? P.EntryRange : P.Range;
}

void RuleContext::noteInheritance(DiagnosticBuilder &B, llvm::StringRef Path) const {
  const Provenance &P = R.origin(Path);
  if (!P.IsDefault && P.Chain.size() > 1)
    B.note(diag::note_inherited, R.NameRange, R.Name, P.Chain.front());
}

void RuleContext::fixit(DiagnosticBuilder &B, llvm::StringRef Path, const std::string &Value) const {
  const Provenance &P = R.origin(Path);
  if (P.IsDefault || !P.EntryRange.Start.isValid() || !P.PathRange.Start.isValid())
    return;
  std::string Written(P.PathRange.Start.getPointer(), P.PathRange.End.getPointer());
  B.fixit(P.EntryRange, Written + " = " + Value);
}

const MemoryEstimate *RuleContext::memory() {
  if (!MemoryComputed) {
    MemoryComputed = true;
    Memory = memoryOf(R);
  }
  return Memory ? Memory.getPointer() : nullptr;
}

llvm::Optional<MemoryEstimate> RuleContext::memoryOf(const Recipe &Variant) const {
  if (!UsePlanner || Variant.WorldSize <= 0 || Variant.Parallel.DP <= 0)
    return llvm::None;
  llvm::Expected<std::shared_ptr<const PipelinePlan>> P = sharedPipelineFor(Variant);
  if (!P) {
    llvm::consumeError(P.takeError()); // layers-split / layout-invalid report it
    return llvm::None;
  }
  return estimateMemory(Variant, **P);
}

bool RuleContext::variantAcceptable(Recipe V) const {
  ParallelConfig &P = V.Parallel;
  int64_t W = V.WorldSize;
  int64_t Dense = P.TP * P.CP * P.PP, Expert = P.ETP * P.EP * P.PP;
  if (W <= 0 || Dense <= 0 || Expert <= 0 || W % Dense != 0 || W % Expert != 0)
    return false;
  P.DP = W / Dense;
  P.EDP = W / Expert;
  if (V.MicroBatch <= 0 || V.GlobalBatch % (V.MicroBatch * P.DP) != 0)
    return false;
  const ModelSpec &M = V.Model;
  if (M.MoE && M.MoE->Experts % P.EP != 0)
    return false;
  int64_t Groups = std::max<int64_t>(M.KvHeads, 1);
  if (M.Heads % P.TP != 0 || !(Groups % P.TP == 0 || P.TP % Groups == 0))
    return false;
  if (!P.CpHierarchy.empty()) {
    int64_t Product = 1;
    for (int64_t X : P.CpHierarchy)
      Product *= X;
    if (Product != P.CP)
      return false;
  }
  if (llvm::Optional<MemoryEstimate> E = memoryOf(V); E && !E->fits())
    return false;
  return true;
}

int64_t RuleContext::microbatches() const {
  int64_t PerStep = R.MicroBatch * R.Parallel.DP;
  if (PerStep <= 0 || R.GlobalBatch % PerStep != 0)
    return 0;
  return R.GlobalBatch / PerStep;
}

int64_t RuleContext::shardTokens() const {
  int64_t Split = R.Parallel.CP * (R.Parallel.SequenceParallel ? R.Parallel.TP : 1);
  return Split > 0 ? R.SeqLen / Split : R.SeqLen;
}
