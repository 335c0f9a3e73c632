//===- Sweep.cpp - Evaluating the points of a sweep -----------------------===//
#include "moec/Emit/Sweep.h"
#include "moec/Emit/Plan.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>

using namespace moec;

namespace {
bool isMemoryDiag(diag::ID ID) { return getDiagInfo(ID).Id.startswith("memory-"); }

struct Verdict {
  std::string Reason;
  bool Structural = false; // an error other than a memory one
};
} // namespace

std::vector<SweepPoint> moec::evaluateSweep(llvm::ArrayRef<std::pair<Recipe, std::string>> Points,
                                            llvm::ArrayRef<Diagnostic> Final, bool PredictMemoryPruned) {
  std::map<std::string, Verdict> Errors;
  for (const Diagnostic &D : Final) {
    if (D.Sev != Severity::Error || D.Recipe.empty())
      continue;
    bool Memory = isMemoryDiag(D.ID);
    // A message several points share is shown once, for the recipe; it
    // still fails only the points that have it.
    for (const std::string &Point : D.Points.empty() ? std::vector<std::string>{D.Recipe} : D.Points) {
      auto It = Errors.find(Point);
      // A structural error explains a point better than the memory it would need.
      if (It == Errors.end() || (!It->second.Structural && !Memory))
        Errors[Point] = {D.Message + " [" + getDiagInfo(D.ID).Id.str() + "]", !Memory};
    }
  }

  std::vector<SweepPoint> Feasible;
  // In the sweep's own order (its odometer: micro = 2 before micro = 10).
  std::vector<SweepPoint> Infeasible;
  PlanOptions Opts;
  Opts.WithRanks = false;
  for (const auto &[R, File] : Points) {
    SweepPoint S;
    S.Name = R.PointName;
    auto It = Errors.find(R.PointName);
    if (It == Errors.end()) // an error of the recipe itself, before its sweeps expand
      It = Errors.find(llvm::StringRef(R.PointName).split('[').first.str());
    bool Structural = It != Errors.end() && It->second.Structural;
    if (It != Errors.end())
      S.Reason = It->second.Reason;
    if (!Structural && (S.Reason.empty() || PredictMemoryPruned)) {
      llvm::Expected<Plan> P = buildPlan(R, File, Opts);
      if (!P) {
        S.Reason = llvm::toString(P.takeError());
      } else {
        S.Predicted = true;
        S.TokensPerSecPerGpu = P->Time.TokensPerSecPerGpu;
        S.StepTime = P->Time.StepTime;
        S.MFU = P->Time.MFU;
        S.PeakBytes = P->Memory.PeakBytes;
        S.CapacityBytes = P->Memory.CapacityBytes;
        if (S.Reason.empty() && !P->Memory.fits())
          S.Reason = fmt::format("predicted peak memory {:.1f} GB exceeds {:.1f} GB", P->Memory.PeakBytes / 1e9,
                                 P->Memory.CapacityBytes / 1e9);
      }
    }
    S.Feasible = S.Reason.empty();
    if (S.Feasible)
      Feasible.push_back(std::move(S));
    else
      Infeasible.push_back(std::move(S));
  }
  std::stable_sort(Feasible.begin(), Feasible.end(), [](const SweepPoint &A, const SweepPoint &B) {
    return A.TokensPerSecPerGpu > B.TokensPerSecPerGpu;
  });
  for (size_t I = 0; I < Feasible.size(); ++I)
    Feasible[I].Rank = int(I + 1);
  for (SweepPoint &S : Infeasible)
    Feasible.push_back(std::move(S));
  return Feasible;
}
