//===- moerun/RunSteps.cpp - The seam between moerun and the trainer -------===//
//
// runSteps builds runtime/train's Trainer over moerun's groups and runs the
// steps, beating the watchdog after every pipeline op and writing each step
// to the log on rank 0. Loss: global-batch mean cross entropy; tokens/s: the
// whole job's global_batch * seq_len over the slowest rank's step time; peak
// bytes: the largest rank's (activations + parameters + gradients + AdamW
// moments); compute/comm: means over ranks of time inside communicator calls
// and the rest of the step.
//
//===----------------------------------------------------------------------===//
#include "RunSteps.h"

#include "kernels/host/Blas.h"
#include "train/Trainer.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

using namespace moerun;

std::vector<moert::PipelineOp> moerun::pipelineOpsFor(const moec::LaunchPlan &Plan, int64_t PpRank) {
  std::vector<moert::PipelineOp> Ops;
  for (const moec::LaunchOp &Op : Plan.Schedule[size_t(PpRank)])
    Ops.push_back({Op.K == moec::LaunchOp::Forward ? moert::PipelineOp::Forward : moert::PipelineOp::Backward,
                   Op.Microbatch, int(Op.Chunk)});
  return Ops;
}

int moerun::runSteps(RunContext &Ctx) {
  moert::setBlasThreads(1);
  moert::TrainerOptions Opts;
  Opts.Seed = Ctx.Opts.Seed;
  Opts.Optimizer.Lr = Ctx.Opts.LearningRate;
  std::unique_ptr<moert::Trainer> T;
  std::string Error;
  Ctx.Dog.beat("building the model");
  try {
    T = std::make_unique<moert::Trainer>(Ctx.Plan, Ctx.World, Ctx.Groups, Opts);
  } catch (const std::exception &E) {
    Error = E.what();
  }
  // A refusal depends on the plan only, so every rank refuses alike.
  if (!T) {
    if (Ctx.World.rank() == 0)
      std::fprintf(stderr, "moerun: %s\n", Error.c_str());
    return 5;
  }
  if (Ctx.World.rank() == 0)
    for (const std::string &Note : T->notes())
      std::printf("moerun: note: %s\n", Note.c_str());
  std::vector<int64_t> RankPeaks;
  for (int64_t S = 1; S <= Ctx.Opts.Steps; ++S) {
    Ctx.Dog.beat("step " + std::to_string(S));
    moert::TrainStepStats St = T->step([&] { Ctx.Dog.beat(); });
    RankPeaks.resize(St.RankPeakBytes.size());
    for (size_t R = 0; R < RankPeaks.size(); ++R)
      RankPeaks[R] = std::max(RankPeaks[R], St.RankPeakBytes[R]);
    if (!Ctx.Log)
      continue;
    StepRecord R;
    R.Step = St.Step;
    R.Loss = St.Loss;
    R.StepTimeSeconds = St.StepSeconds;
    R.TokensPerSecond = St.TokensPerSecond;
    R.PeakBytes = St.PeakBytes;
    R.ComputeSeconds = St.ComputeSeconds;
    R.CommSeconds = St.CommSeconds;
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
