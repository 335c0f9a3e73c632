//===- FuzzCommon.h - What the pipeline fuzzers share -------------*- C++ -*-===//
//
// The `moec check` pipeline on one buffer, as the command line runs it:
// parse, Sema, the rules with the planner, the diagnostic renderers, and
// optionally `moec plan` (buildPlan, planToTOML, planToJSON) for every point
// that checked without an error.
//
// The built-in catalog is parsed once per process, not once per input: its
// syntax trees hold pointers into the embedded catalog text, and every
// input's SourceMgr registers that same text (without copying) under the
// same buffer IDs, so the shared trees' locations stay valid in each one.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TEST_FUZZ_FUZZCOMMON_H
#define MOEC_TEST_FUZZ_FUZZCOMMON_H

#include "moec/AST/AST.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace moec::fuzz {

struct PipelineResult {
  unsigned Recipes = 0; // recipes (sweep points) Sema returned
  unsigned Plans = 0;   // plans built and serialized
};

/// Runs the pipeline over Text named Name. Crashes (through the sanitizers)
/// on any defect; returns what it got through for the generators' stats.
PipelineResult runPipeline(llvm::StringRef Text, llvm::StringRef Name, bool BuildPlans);

/// Parses the catalog and runs one small recipe through the pipeline, from
/// LLVMFuzzerInitialize, so that one-time setup is not charged to an input.
void warmUp();

/// The names the built-in catalog defines for Kind (models, GPUs).
const std::vector<std::string> &catalogNames(ast::DefKind Kind);

} // namespace moec::fuzz

#endif
