//===- Timeline.h - Pipeline schedule laid out in time -----------*- C++ -*-===//
//
// The plan's schedule is an order of ops per pipeline rank; the report draws
// it in time. Each rank runs its ops in order, an op starting when the rank
// is free and its input has arrived: the forward of (micro batch m, virtual
// stage v) after the forward of (m, v - 1), the backward of (m, v) after the
// backward of (m, v + 1), or after its own forward on the last virtual
// stage. Sends take no time. Gaps are the pipeline bubble.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REPORT_TIMELINE_H
#define MOEC_REPORT_TIMELINE_H

#include "moec/Layout/Pipeline.h"
#include "llvm/Support/Error.h"
#include <vector>

namespace moec {

struct TimedOp {
  ScheduledOp Op;
  double Start = 0, End = 0;
};

struct Timeline {
  /// Per pipeline rank, its ops in execution order with their times.
  std::vector<std::vector<TimedOp>> PerRank;
  double Makespan = 0;
  /// Idle time over all ranks inside [0, Makespan], as a fraction of
  /// PP x Makespan.
  double IdleFraction = 0;
};

/// Op durations per virtual stage (rank r's chunk c is virtual stage
/// c x PP + r), for one micro batch's forward and backward.
struct OpDurations {
  std::vector<double> Forward, Backward;
  /// The same on every virtual stage: forward 1, backward 2 (the backward
  /// pass does twice the forward's matrix products).
  static OpDurations uniform(int64_t VirtualStages);
};

/// Times every op of P.Schedule. Fails when the schedule waits on an op that
/// no rank runs first (an invalid schedule) or the durations do not match PP.
llvm::Expected<Timeline> layOutSchedule(const PipelinePlan &P, const OpDurations &D);

} // namespace moec

#endif
