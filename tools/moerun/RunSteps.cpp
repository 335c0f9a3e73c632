//===- moerun/RunSteps.cpp - The seam between moerun and the trainer -------===//
//
// The training step itself (runtime/train's Trainer) is not part of this
// build yet: runSteps says so and fails on every rank, rather than pretending
// to train. `moerun --dry-run` runs everything up to this point.
//
//===----------------------------------------------------------------------===//
#include "RunSteps.h"

#include <cstdio>

using namespace moerun;

std::vector<moert::PipelineOp> moerun::pipelineOpsFor(const moec::LaunchPlan &Plan, int64_t PpRank) {
  std::vector<moert::PipelineOp> Ops;
  for (const moec::LaunchOp &Op : Plan.Schedule[size_t(PpRank)])
    Ops.push_back({Op.K == moec::LaunchOp::Forward ? moert::PipelineOp::Forward : moert::PipelineOp::Backward,
                   Op.Microbatch, int(Op.Chunk)});
  return Ops;
}

int moerun::runSteps(RunContext &Ctx) {
  if (Ctx.World.rank() == 0)
    std::fprintf(stderr, "moerun: this build has no trainer (runtime/train) to run training steps; "
                         "the launch checks passed (use --dry-run to only run them)\n");
  return 5;
}
