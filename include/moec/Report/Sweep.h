//===- Sweep.h - Evaluating the points of a sweep ----------------*- C++ -*-===//
//
// What `moec sweep` decides for each point, as data: feasible or not (and
// why), and the planner's prediction where one exists. The report's scatter
// draws it; points pruned only for memory still carry their prediction so
// they can be drawn (marked infeasible) next to the ones that fit.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REPORT_SWEEP_H
#define MOEC_REPORT_SWEEP_H

#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Recipe.h"
#include "llvm/ADT/ArrayRef.h"
#include <string>
#include <utility>
#include <vector>

namespace moec {

struct SweepPoint {
  std::string Name; // the recipe's PointName
  bool Feasible = false;
  /// The planner ran and the numbers below are the point's prediction. False
  /// for points with structural errors (their numbers would mean nothing).
  bool Predicted = false;
  std::string Reason; // why the point is infeasible ("message [id]")
  double TokensPerSecPerGpu = 0, StepTime = 0, MFU = 0, PeakBytes = 0, CapacityBytes = 0;
  /// 1-based rank of a feasible point by predicted tokens/s; 0 otherwise.
  int Rank = 0;
};

/// Decides every compiled point of a sweep from the diagnostics the rules
/// reported for it (Final: the engine's finished list): a point with an
/// error is infeasible with its most telling error as the reason (a
/// structural error over a memory one), a point whose plan does not fit
/// its HBM is infeasible, the rest are feasible. Feasible points come first,
/// fastest first (ties in source order), then the infeasible ones by name.
/// Errors outside any point are the caller's to report.
std::vector<SweepPoint> evaluateSweep(llvm::ArrayRef<std::pair<Recipe, std::string>> Points,
                                      llvm::ArrayRef<Diagnostic> Final);

} // namespace moec

#endif
