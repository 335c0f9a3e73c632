//===- Pipeline.h - Layer placement and pipeline schedules -------*- C++ -*-===//
//
// Which layers each (virtual) pipeline stage holds, and the order in which
// each pipeline rank runs forward and backward passes of micro batches under
// 1F1B (VPP = 1) or interleaved 1F1B (VPP > 1), as Megatron-Core schedules
// them. The planner's memory model reads the in-flight micro batches per
// rank; the step-time model reads the bubble; the runtime executes the
// schedule.
//
// Schedules follow megatron/core/pipeline_parallel/schedules.py:
//  * VPP = 1 (forward_backward_pipelining_without_interleaving; PP = 1 is
//    forward_backward_no_pipelining, which is the same order): rank r runs
//    W = min(PP - r - 1, M) warm-up forwards, M - W rounds of one forward
//    then one backward, and W cool-down backwards, micro batches in order.
//  * VPP > 1 (forward_backward_pipelining_with_interleaving): the k-th
//    forward and the k-th backward of every rank follow Megatron's schedule
//    table (get_schedule_table) over groups of G micro batches
//    (microbatch_group_size_per_vp_stage, default PP): within a group, all
//    of its micro batches run chunk 0, then chunk 1, ...; backwards walk the
//    chunks in reverse. Rank r runs min((PP - r - 1) * 2 + (VPP - 1) * G,
//    M * VPP) warm-up forwards (get_pp_rank_microbatches), then one forward
//    plus one backward per step, then the cool-down backwards.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LAYOUT_PIPELINE_H
#define MOEC_LAYOUT_PIPELINE_H

#include "moec/Layout/PipelineLayout.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <string>
#include <vector>

namespace moec {

struct PipelineInput {
  int64_t DecoderLayers = 1;
  int64_t MtpLayers = 0;
  /// VPP = 1 means no interleaving. With an explicit layout and VPP = 1, the
  /// layout decides VPP (#stages / PP), as Megatron derives it; a VPP > 1
  /// that disagrees with the layout is an error.
  int64_t PP = 1, VPP = 1;
  int64_t Microbatches = 1;            // per step per data-parallel rank
  const std::string *Layout = nullptr; // explicit layout string, if any
  /// Interleaved schedule only: micro batches per group
  /// (microbatch_group_size_per_vp_stage); 0 means PP, Megatron's default.
  /// Must satisfy PP <= G <= M and M mod G in {0} or [PP, G).
  int64_t MicrobatchGroupSize = 0;
  /// Interleaved schedule only: Megatron-Core before the tunable schedule
  /// table (through core 0.9) ran every forward as warm-up on all ranks
  /// when M == PP. Current Megatron-Core does not; set this to model the
  /// older releases.
  bool LegacyAllWarmupWhenMEqualsPP = false;
};

struct ScheduledOp {
  enum Kind { Forward, Backward } K;
  int64_t Microbatch;
  int64_t Chunk; // model chunk (virtual stage index / PP) on this rank

  bool operator==(const ScheduledOp &O) const { return K == O.K && Microbatch == O.Microbatch && Chunk == O.Chunk; }
  bool operator!=(const ScheduledOp &O) const { return !(*this == O); }
};

struct PipelinePlan {
  int64_t PP = 1, VPP = 1, Microbatches = 1;
  /// PP x VPP virtual stages in model order; virtual stage v runs on pipeline
  /// rank v mod PP as model chunk v / PP.
  std::vector<LayoutStage> VirtualStages;
  /// The first decoder layer (0-based) of each virtual stage.
  std::vector<int64_t> FirstLayer;
  /// Per pipeline rank, its forward/backward ops in execution order.
  std::vector<std::vector<ScheduledOp>> Schedule;
  /// Per pipeline rank, the forwards it runs before its first backward
  /// (Megatron's num_warmup_microbatches, counted in micro-batch chunks).
  std::vector<int64_t> WarmupForwards;
  /// Per pipeline rank, the most micro-batch chunks whose activations are held
  /// at once (forwards done, backward not yet).
  std::vector<int64_t> PeakInFlight;
  /// Per pipeline rank, the candidate peaks of held activations: after each
  /// run of forwards, how many micro batches of each model chunk are held,
  /// each distinct mix once. For any non-negative per-chunk sizes, the most
  /// bytes held at once is the largest dot product with one of these, so the
  /// memory model need not walk the schedule once per size vector (the
  /// schedule has 2 x M x VPP ops per rank). Empty for a rank with more than
  /// 64 distinct mixes, where walking the schedule is as cheap.
  std::vector<std::vector<std::vector<int64_t>>> InFlightMixes;
  /// Idle fraction of the pipeline: (PP - 1) / (VPP x M + PP - 1) for 1F1B
  /// and its interleaved form, with equal stage times.
  double BubbleFraction = 0;

  int64_t rankOf(int64_t VirtualStage) const { return VirtualStage % PP; }
  int64_t chunkOf(int64_t VirtualStage) const { return VirtualStage / PP; }
  int64_t virtualStage(int64_t Rank, int64_t Chunk) const { return Chunk * PP + Rank; }
};

/// Places layers (the explicit layout, or an even split that Megatron-Core
/// would use) and builds the schedule. Errors describe an impossible input
/// (layers that do not split, a layout that does not parse or does not match
/// the model, micro batches the interleaved schedule cannot group, a
/// schedule past MaxScheduleOps ops); the rules report those to users, so
/// callers normally have a valid recipe.
llvm::Expected<PipelinePlan> planPipeline(const PipelineInput &In);

/// planPipeline refuses schedules with more ops than this over all ranks
/// (2 x PP x VPP x M); Sema refuses recipes past this bound
/// (lib/Sema/Lowering.cpp), so that no caller builds a larger one.
constexpr int64_t MaxScheduleOps = int64_t(1) << 20;

} // namespace moec

#endif
