//===- Plan.h - A recipe lowered to a launch plan -----------------*- C++ -*-===//
//
// A Plan is everything the runtime needs to launch one recipe (one sweep
// point): the typed configuration, the rank layout and its process groups,
// the pipeline placement and schedule, and the planner's predictions. It is
// written as versioned TOML or JSON (docs/plan-format.md); both carry the
// same tree.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_EMIT_PLAN_H
#define MOEC_EMIT_PLAN_H

#include "moec/Layout/Pipeline.h"
#include "moec/Layout/ProcessGrid.h"
#include "moec/Model/Memory.h"
#include "moec/Model/Performance.h"
#include "moec/Sema/Recipe.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <memory>

namespace moec {

constexpr int PlanVersion = 1;

struct Plan {
  Recipe R;
  std::string RecipeHash; // xxh64 of the canonical configuration
  std::string SourceFile;
  std::unique_ptr<ProcessGrid> Grid;
  PipelinePlan Pipeline;
  MemoryEstimate Memory;
  FlopCount Flops;
  StepTimeBreakdown Time;
};

struct PlanOptions {
  bool WithRanks = true; // rank layout and groups (skipped by `moec sweep`)
  const Calibration *Calib = &Calibration::defaults();
};

/// Lowers a checked recipe. Fails only for a recipe the rules would reject
/// (layers that do not split, a layout that does not parse).
llvm::Expected<Plan> buildPlan(const Recipe &R, llvm::StringRef SourceFile, const PlanOptions &Opts = {});

/// The recipe's configuration as canonical JSON (the plan's `config`).
llvm::json::Value recipeToJSON(const Recipe &R);
/// The whole plan; `ranks` and `groups` only when the plan has a grid.
llvm::json::Value planToJSON(const Plan &P);
/// The same tree as TOML.
std::string planToTOML(const Plan &P);
/// A few lines for people: layout, memory of the peak stage, speed.
void printPlanSummary(const Plan &P, llvm::raw_ostream &OS);

/// The rank layout in readable form (`moec plan --dump-layout`): every process
/// group, the pipeline placement and schedule, and each rank's node and
/// coordinates. The same facts as the plan's [groups], [pipeline] and [[ranks]].
void printLayout(const Plan &P, llvm::raw_ostream &OS);

/// Writes Contents to Path through a temporary file in the same directory
/// and a rename, so a failed or interrupted write leaves the old file.
llvm::Error writeFileAtomically(llvm::StringRef Path, llvm::StringRef Contents);

} // namespace moec

#endif
