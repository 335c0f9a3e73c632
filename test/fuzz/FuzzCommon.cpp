//===- FuzzCommon.cpp - The check (and plan) pipeline for fuzzers ---------===//
#include "FuzzCommon.h"

#include "moec/Catalog/Catalog.h"
#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/PlanFormat/PlanReader.h"
#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Sema.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <map>
#include <set>

using namespace moec;

namespace {
/// Registers the embedded catalog text in SM in catalog order (IDs 1, 2, ...).
void addCatalogBuffers(llvm::SourceMgr &SM) {
  for (const CatalogFile &C : builtinCatalogFiles())
    SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(C.Text, C.Name), llvm::SMLoc());
}

std::shared_ptr<const BuiltinCatalog> sharedCatalog() {
  static std::shared_ptr<const BuiltinCatalog> Catalog = [] {
    // Kept for the process's lifetime with the trees it owns.
    static llvm::SourceMgr SM;
    static DiagnosticEngine Diags(SM);
    auto C = BuiltinCatalog::parse(Diags);
    if (Diags.hasErrors() || C->Files.size() != builtinCatalogFiles().size())
      abort(); // the catalog itself must parse
    return C;
  }();
  return Catalog;
}
} // namespace

const std::vector<std::string> &fuzz::catalogNames(ast::DefKind Kind) {
  static std::map<ast::DefKind, std::vector<std::string>> Names = [] {
    std::map<ast::DefKind, std::vector<std::string>> All;
    for (const std::unique_ptr<ast::File> &F : sharedCatalog()->Files)
      for (const ast::Definition &D : F->Definitions)
        All[D.Kind].push_back(D.Name);
    return All;
  }();
  return Names[Kind];
}

void fuzz::warmUp() {
  // The catalog's parse and ANTLR's first-use tables are built here, before
  // libFuzzer starts timing inputs.
  sharedCatalog();
  runPipeline("recipe r {\n  model = tiny_moe; cluster { gpu = cpu; nodes = 1 }\n  seq_len = 128\n"
              "  batch { micro = 1; global = 4 }\n}\n",
              "warmup.moe", /*BuildPlans=*/true);
}

fuzz::PipelineResult fuzz::runPipeline(llvm::StringRef Text, llvm::StringRef Name, bool BuildPlans) {
  PipelineResult Result;
  std::shared_ptr<const BuiltinCatalog> Catalog = sharedCatalog();
  llvm::SourceMgr SM;
  addCatalogBuffers(SM);
  // No error cap: whether a point checked is decided from every error.
  DiagnosticOptions DOpts;
  DOpts.ErrorLimit = 0;
  DiagnosticEngine Diags(SM, DOpts);
  SemaOptions Opts;
  Opts.Catalog = Catalog;
  // Checking is linear in sweep points, and 10000 points (the default bound,
  // about 0.5 s in a release build) take tens of seconds under the
  // sanitizers: a smaller bound keeps the fuzzer exploring. The bound itself
  // is tested in test/lit/reliability/max-sweep-points.test.
  Opts.MaxSweepPoints = 64;
  Sema S(Diags, Opts);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, Name));
  std::vector<Recipe> Recipes;
  // The memory model (which the planner-backed rules evaluate about twice per
  // point) is linear in a point's virtual stages and layers: 6 ms in a
  // release build for 65536 of each, a hundred milliseconds under the
  // sanitizers, so a sweep of such points would read as a hang. The points
  // within a budget of 2^17 stages and layers in all get the planner; the
  // rest are checked without it, like `moec check --no-planner`, and are not
  // planned below.
  std::vector<bool> UsedPlanner;
  if (S.mainFile()) {
    Recipes = S.analyze();
    int64_t MemoryBudget = 1 << 17;
    for (const Recipe &R : Recipes) {
      auto clamped = [](int64_t N) { return std::min<int64_t>(std::max<int64_t>(N, 1), 1 << 20); };
      int64_t Cost = clamped(R.Parallel.PP) * clamped(R.Parallel.VPP) + clamped(R.Model.Layers);
      bool UsePlanner = Cost <= MemoryBudget;
      if (UsePlanner)
        MemoryBudget -= Cost;
      UsedPlanner.push_back(UsePlanner);
      runRules(R, Diags, UsePlanner);
    }
  }
  Result.Recipes = Recipes.size();
  const std::vector<Diagnostic> &Final = Diags.finish();
  // Every renderer must cope with every diagnostic (ranges at the end of the
  // buffer, in the catalog, or none).
  llvm::raw_null_ostream Null;
  renderText(Final, SM, Null, /*Colors=*/true);
  // JSON, not SARIF: the same locations, without SARIF's table of every
  // rule, which would cost more than checking the input.
  Null << renderJSON(Final, SM);
  if (!BuildPlans)
    return Result;

  // Like `moec sweep`: a point is planned when no error names it, and only
  // when no error outside every point stopped the file.
  std::set<std::string> Failed;
  for (const Diagnostic &D : Final)
    if (D.Sev == Severity::Error) {
      if (D.Recipe.empty())
        return Result;
      Failed.insert(D.Points.begin(), D.Points.end());
    }
  int64_t RankBudget = 32;
  for (size_t I = 0; I < Recipes.size(); ++I) {
    const Recipe &R = Recipes[I];
    if (!UsedPlanner[I])
      continue;
    // An error several points share names the recipe, not a point, and
    // lists its points; one of the recipe itself fails every point.
    if (Failed.count(R.PointName) || Failed.count(llvm::StringRef(R.PointName).split('[').first.str()))
      continue;
    // A plan's cost is linear in its ranks and scheduled ops: 2^17 ops take
    // 0.06 s in a release build but seconds under the sanitizers, which
    // would read as a hang. Larger plans (32 ranks in all, over a sweep's
    // points, or 2^12 ops) are checked above, not built: their code paths
    // are the same, and writing and rereading their TOML was most of the
    // harness's time, which a million inputs cannot afford.
    int64_t Ops = R.Parallel.DP > 0 && R.GlobalBatch % (R.MicroBatch * R.Parallel.DP) == 0
                      ? 2 * R.GlobalBatch / (R.MicroBatch * R.Parallel.DP) * R.Parallel.PP * R.Parallel.VPP
                      : 0;
    if (R.WorldSize > RankBudget || Ops > (1 << 12))
      continue;
    RankBudget -= R.WorldSize; // a sweep's plans share the budget
    llvm::Expected<Plan> P = buildPlan(R, Name);
    if (!P) {
      // Documented to fail only where the rules would have reported an error.
      llvm::errs() << "buildPlan failed on a recipe that checked: " << llvm::toString(P.takeError()) << "\n";
      abort();
    }
    std::string TOML = planToTOML(*P);
    Null << TOML << planToJSON(*P);
    // What moec writes, the runtime must read.
    llvm::Expected<LaunchPlan> Read = parsePlan(TOML, "plan.toml");
    if (!Read) {
      llvm::errs() << "the runtime's reader refuses the plan moec wrote: " << llvm::toString(Read.takeError()) << "\n";
      abort();
    }
    printPlanSummary(*P, Null);
    ++Result.Plans;
  }
  return Result;
}
