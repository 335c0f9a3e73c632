//===- Sweep.h - Evaluating the points of a sweep ----------------*- C++ -*-===//
//
// What `moec sweep` decides for each point, as data: feasible or not (and
// why), and the planner's prediction where one exists. `moec sweep` prints
// it as a ranking; `moec report`'s scatter draws it, and asks for the
// prediction of points pruned only for memory so they can be drawn (marked
// infeasible) next to the ones that fit.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_EMIT_SWEEP_H
#define MOEC_EMIT_SWEEP_H

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
/// An error that several points share is reported once, for the recipe
/// ("r", not "r[micro=2]"; DiagnosticEngine::finish): it prunes each of its
/// points. Errors outside any point are the caller's to report. With
/// PredictMemoryPruned, points whose only errors are memory ones are planned
/// too (Predicted) so they can be drawn.
std::vector<SweepPoint> evaluateSweep(llvm::ArrayRef<std::pair<Recipe, std::string>> Points,
                                      llvm::ArrayRef<Diagnostic> Final, bool PredictMemoryPruned = false);

} // namespace moec

#endif
