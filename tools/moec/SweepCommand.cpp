//===- SweepCommand.cpp - moec sweep ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include <set>
#include <algorithm>
#include <map>

namespace moec::driver {

int runSweep() {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec sweep: expected one recipe file\n";
    return ExitUsage;
  }
  // Every point's errors decide whether it is pruned: no error cap here.
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true, /*CapErrors=*/false);
  const std::vector<Diagnostic> &Final = C->Diags->finish();
  if (C->Unreadable)
    return ExitUsage;
  // Errors outside any recipe point (syntax, names) stop the sweep.
  std::map<std::string, std::string> Pruned;
  bool Fatal = false;
  for (const Diagnostic &D : Final) {
    if (D.Sev != Severity::Error)
      continue;
    if (D.Recipe.empty())
      Fatal = true;
    else if (!Pruned.count(D.Recipe) || (Pruned[D.Recipe].find("[memory-") != std::string::npos &&
                                         D.ID != diag::memory_exceeds_hbm))
      // A structural error explains a point better than the memory it would need.
      Pruned[D.Recipe] = D.Message + " [" + getDiagInfo(D.ID).Id.str() + "]";
  }
  if (Fatal) {
    renderText(Final, C->SM, llvm::errs(), false);
    return ExitErrors;
  }
  // An error that several points share is reported once, for the recipe
  // ("r", not "r[micro=2]"; DiagnosticEngine::finish): it prunes each of
  // its points (found while fuzzing moec plan's pipeline).
  std::set<std::string> Expanded;
  for (auto &[R, File] : C->Recipes) {
    std::string Base = llvm::StringRef(R.PointName).split('[').first.str();
    auto Shared = Pruned.find(Base);
    if (Base == R.PointName || Shared == Pruned.end())
      continue;
    Expanded.insert(Base);
    if (!Pruned.count(R.PointName))
      Pruned[R.PointName] = Shared->second;
  }
  for (const std::string &Base : Expanded)
    Pruned.erase(Base);
  struct Row {
    std::string Point;
    double TokensPerSec, StepTime, MFU, PeakGB, CapacityGB;
  };
  std::vector<Row> Feasible;
  PlanOptions Opts;
  Opts.WithRanks = false;
  for (auto &[R, File] : C->Recipes) {
    if (Pruned.count(R.PointName))
      continue;
    llvm::Expected<Plan> P = buildPlan(R, File, Opts);
    if (!P) {
      Pruned[R.PointName] = llvm::toString(P.takeError());
      continue;
    }
    if (!P->Memory.fits()) {
      Pruned[R.PointName] = fmt::format("predicted peak memory {:.1f} GB exceeds {:.1f} GB",
                                        P->Memory.PeakBytes / 1e9, P->Memory.CapacityBytes / 1e9);
      continue;
    }
    Feasible.push_back({R.PointName, P->Time.TokensPerSecPerGpu, P->Time.StepTime, P->Time.MFU,
                        P->Memory.PeakBytes / 1e9, P->Memory.CapacityBytes / 1e9});
  }
  std::stable_sort(Feasible.begin(), Feasible.end(),
                   [](const Row &A, const Row &B) { return A.TokensPerSec > B.TokensPerSec; });
  if (SweepCSV) {
    llvm::outs() << "rank,point,tokens_per_s_per_gpu,step_time_s,mfu,peak_gb,capacity_gb,feasible,reason\n";
    auto Quote = [](const std::string &S) {
      std::string Out = "\"";
      for (char Ch : S)
        Out += Ch == '"' ? std::string("\"\"") : std::string(1, Ch);
      return Out + "\"";
    };
    for (size_t I = 0; I < Feasible.size(); ++I) {
      const Row &R = Feasible[I];
      llvm::outs() << fmt::format("{},{},{:.1f},{:.4f},{:.4f},{:.2f},{:.2f},true,\n", I + 1, Quote(R.Point),
                                  R.TokensPerSec, R.StepTime, R.MFU, R.PeakGB, R.CapacityGB);
    }
    for (auto &[Point, Reason] : Pruned)
      llvm::outs() << fmt::format(",{},,,,,,false,{}\n", Quote(Point), Quote(Reason));
    return ExitOK;
  }
  size_t Width = 5;
  for (const Row &R : Feasible)
    Width = std::max(Width, R.Point.size());
  llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12}  {:>8}  {:>6}  {:>14}\n", "rank", "point", Width,
                              "tokens/s/GPU", "step s", "MFU", "peak / HBM GB");
  for (size_t I = 0; I < Feasible.size(); ++I) {
    const Row &R = Feasible[I];
    llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12.0f}  {:>8.2f}  {:>5.1f}%  {:>6.1f} / {:<6.1f}\n", I + 1, R.Point,
                                Width, R.TokensPerSec, R.StepTime, 100 * R.MFU, R.PeakGB, R.CapacityGB);
  }
  if (!Pruned.empty()) {
    llvm::outs() << fmt::format("\npruned {} infeasible point{}:\n", Pruned.size(), Pruned.size() == 1 ? "" : "s");
    for (auto &[Point, Reason] : Pruned)
      llvm::outs() << "  " << Point << ": " << Reason << "\n";
  }
  return ExitOK;
}

} // namespace moec::driver
