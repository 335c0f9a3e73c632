//===- moerun/RunSteps.cpp - The seam between moerun and the trainer -------===//
//
// runSteps builds runtime/train's Trainer over moerun's groups and runs the
// steps, beating the watchdog after every pipeline op and writing each step
// to the log on rank 0. Loss: global-batch mean cross entropy; tokens/s: the
// whole job's global_batch * seq_len over the slowest rank's step time; peak
// bytes: the largest rank's (activations + parameters + gradients + AdamW
// moments); compute/comm: means over ranks of time inside communicator calls
// and the rest of the step; gemm: the part of compute inside BLAS gemm.
//
// Test hook (test/runtime/moerun/faults.py, never for production use):
// MOERUN_TEST_DIE_AT_STEP=K:R makes world rank R kill itself with SIGKILL
// right after its first pipeline op of step K, so that the tests can check
// what a job does when one rank dies in the middle of a step.
//
//===----------------------------------------------------------------------===//
#include "RunSteps.h"

#include "kernels/host/Blas.h"
#include "train/Trainer.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

using namespace moerun;

std::vector<moert::PipelineOp> moerun::pipelineOpsFor(const moec::LaunchPlan &Plan, int64_t PpRank) {
  std::vector<moert::PipelineOp> Ops;
  for (const moec::LaunchOp &Op : Plan.Schedule[size_t(PpRank)])
    Ops.push_back({Op.K == moec::LaunchOp::Forward ? moert::PipelineOp::Forward : moert::PipelineOp::Backward,
                   Op.Microbatch, int(Op.Chunk)});
  return Ops;
}

namespace {

/// The step (1-based) in which this rank is to die, from
/// MOERUN_TEST_DIE_AT_STEP=K:R; 0 when it is not this rank or not set.
int64_t testDeathStep(int Rank) {
  const char *Spec = std::getenv("MOERUN_TEST_DIE_AT_STEP");
  long long Step = 0;
  int R = -1;
  if (!Spec || std::sscanf(Spec, "%lld:%d", &Step, &R) != 2 || R != Rank)
    return 0;
  return Step;
}

} // namespace

int moerun::runSteps(RunContext &Ctx) {
  moert::setBlasThreads(1);
  moert::TrainerOptions Opts;
  Opts.Seed = Ctx.Opts.Seed;
  Opts.Optimizer.Lr = Ctx.Opts.LearningRate;
  Opts.OptimizerFromPlan = true;
  Opts.TotalSteps = Ctx.Opts.Steps;
  std::unique_ptr<moert::Trainer> T;
  std::string Error;
  Ctx.Dog.beat("building the model");
  try {
    T = std::make_unique<moert::Trainer>(Ctx.Plan, Ctx.World, Ctx.Groups, Opts);
  } catch (const std::exception &E) {
    Error = E.what();
  }
  // A refusal of the plan is the same on every rank, but a dataset may be
  // missing or damaged on some ranks only (a node without the shared file
  // system): agree before anyone starts a step, so that no rank waits in a
  // collective for a peer that has given up. Rank 0 speaks for a refusal it
  // shares; a rank that fails alone says why itself.
  std::vector<float> Failed(size_t(Ctx.World.size()));
  float MineFailed = T ? 0.0f : 1.0f;
  Ctx.World.world().allGather(&MineFailed, Failed.data(), 1);
  if (std::any_of(Failed.begin(), Failed.end(), [](float F) { return F != 0.0f; })) {
    if (!T && (Ctx.World.rank() == 0 || Failed[0] == 0.0f))
      std::fprintf(stderr, "moerun: %s%s\n",
                   Ctx.World.rank() == 0 ? "" : ("rank " + std::to_string(Ctx.World.rank()) + ": ").c_str(),
                   Error.c_str());
    return 5;
  }
  if (Ctx.World.rank() == 0)
    for (const std::string &Note : T->notes())
      std::printf("moerun: note: %s\n", Note.c_str());
  std::vector<int64_t> RankPeaks;
  const int64_t DieAt = testDeathStep(Ctx.World.rank());
  for (int64_t S = 1; S <= Ctx.Opts.Steps; ++S) {
    Ctx.Dog.beat("step " + std::to_string(S));
    moert::TrainStepStats St = T->step([&] {
      if (S == DieAt)
        std::raise(SIGKILL);
      Ctx.Dog.beat();
    });
    RankPeaks.resize(St.RankPeakBytes.size());
    for (size_t R = 0; R < RankPeaks.size(); ++R)
      RankPeaks[R] = std::max(RankPeaks[R], St.RankPeakBytes[R]);
    if (!Ctx.Log)
      continue;
    StepRecord R;
    R.Step = St.Step;
    R.Loss = St.Loss;
    R.LearningRate = St.LearningRate;
    R.GradNorm = St.GradNorm;
    R.AuxLoss = St.AuxLoss;
    R.StepTimeSeconds = St.StepSeconds;
    R.TokensPerSecond = St.TokensPerSecond;
    R.PeakBytes = St.PeakBytes;
    R.ComputeSeconds = St.ComputeSeconds;
    R.CommSeconds = St.CommSeconds;
    R.GemmSeconds = St.BlasSeconds;
    R.CpuSeconds = St.CpuSeconds;
    if (!Ctx.Log->write(R, Ctx.Opts.Steps, stdout, Error)) {
      std::fprintf(stderr, "moerun: %s\n", Error.c_str());
      Ctx.World.abort("moerun: cannot write the step log", 3);
    }
  }
  if (Ctx.World.rank() == 0) {
    std::string Line = "moerun: peak bytes per rank (activations + parameters + "
                       "gradients + optimizer moments):";
    for (size_t R = 0; R < RankPeaks.size(); ++R)
      Line += (R ? ", " : " ") + std::to_string(R) + ": " + std::to_string(RankPeaks[R]);
    std::printf("%s\n", Line.c_str());
  }
  return 0;
}
