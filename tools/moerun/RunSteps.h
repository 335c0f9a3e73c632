//===- moerun/RunSteps.h - The seam between moerun and the trainer ---------===//
//
// moerun does everything a job needs before its first step (plan checks,
// process groups, the watchdog, the log) and then hands over to runSteps(),
// which runs the training steps: model chunks of this rank, data, the
// pipeline executor (parallel/pp), gradient reduction and the optimizer,
// through the Trainer of runtime/train. Everything the trainer needs of the
// launch is in RunContext.
//
//===----------------------------------------------------------------------===//
#ifndef MOERUN_RUNSTEPS_H
#define MOERUN_RUNSTEPS_H

#include "StepLog.h"
#include "Watchdog.h"
#include "comm/Communicator.h"
#include "moec/PlanFormat/PlanReader.h"
#include "parallel/pp/PipelineExecutor.h"

#include <map>
#include <memory>
#include <string>

namespace moerun {

struct RunOptions {
  std::string PlanPath;
  int64_t Steps = 1;
  std::string LogPath;
  uint64_t Seed = 1234;
  double LearningRate = 1e-3;
  double TimeoutSeconds = 300;
  bool DryRun = false;
  /// Checkpoints (docs/runtime.md): written under SaveDir every
  /// SaveInterval steps (0: only), at the last step and on SIGTERM, keeping
  /// the newest Keep (0: all); the run resumes from LoadDir's latest one.
  std::string SaveDir, LoadDir;
  /// A Hugging Face checkpoint directory to start from (empty: the seed's
  /// initialisation); a checkpoint found by LoadDir wins over it.
  std::string InitFromHf;
  int64_t SaveInterval = 0;
  int Keep = 0;
  /// "cpu" (the host backend) or "cuda" (kernels/cuda/CudaBackend.h); empty:
  /// the plan's (computeBackendOf).
  std::string Backend;
};

/// What the run computes on: Opts.Backend where given, else the plan's GPU
/// decides (the host for a plan made for `cpu`, CUDA devices otherwise).
std::string computeBackendOf(const RunOptions &Opts, const moec::LaunchPlan &Plan);

struct RunContext {
  const moec::LaunchPlan &Plan;
  const RunOptions &Opts;
  moert::CommWorld &World;
  /// One communicator per group kind of the plan ("tp", "dp-cp", "ep", ...),
  /// group-local ranks in the plan's member order.
  std::map<std::string, std::unique_ptr<moert::Communicator>> &Groups;
  /// Beat after every op and phase; set the phase to say what may hang.
  Watchdog &Dog;
  /// Rank 0 only: write each finished step here (null on other ranks).
  StepLog *Log;
};

/// Trains until step Opts.Steps (from the loaded checkpoint's step, or 0);
/// returns the process exit code (0 on success, and after a SIGTERM that
/// was saved). Called on every rank after all launch checks passed.
int runSteps(RunContext &Ctx);

} // namespace moerun

#endif
