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
// Checkpoints (--save, --load; runtime/checkpoint): the run resumes from the
// latest checkpoint of --load DIR (none there: from step 0) and trains until
// step --steps; it saves every --save-interval steps, after its last step,
// and at the end of the step in which any rank got SIGTERM (Slurm's notice
// of preemption), after which it exits 0.
//
// Test hooks (test/runtime/moerun/faults.py, test/runtime/train/resume.py;
// never for production use), each K:R = step K, world rank R:
//  * MOERUN_TEST_DIE_AT_STEP: rank R kills itself with SIGKILL right after
//    its first pipeline op of step K (a rank dies in the middle of a step);
//  * MOERUN_TEST_DIE_IN_SAVE: rank R kills itself with SIGKILL in the save
//    after step K, once its tensor file is written (the writer dies mid-save);
//  * MOERUN_TEST_TERM_AT_STEP: rank R sends itself SIGTERM in step K.
//
//===----------------------------------------------------------------------===//
#include "RunSteps.h"

#include "kernels/host/Blas.h"
#ifdef MOERUN_CUDA_BACKEND
#include "comm/nccl/HostStagedComm.h"
#include "comm/nccl/NcclComm.h"
#include "kernels/cuda/CudaBackend.h"
#include "kernels/cuda/CudaGraph.h"
#endif
#include "train/Trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <stdexcept>

using namespace moerun;

namespace {

/// The step (1-based) of a test hook K:R for this rank; 0 when it is not
/// this rank or not set.
int64_t testHookStep(const char *Variable, int Rank) {
  const char *Spec = std::getenv(Variable);
  long long Step = 0;
  int R = -1;
  if (!Spec || std::sscanf(Spec, "%lld:%d", &Step, &R) != 2 || R != Rank)
    return 0;
  return Step;
}

volatile std::sig_atomic_t TermReceived = 0;
extern "C" void onTerm(int) { TermReceived = 1; }

/// Every rank calls it: true on all when Ok holds on all; otherwise rank 0
/// reports a failure it shares, and a rank that fails alone says why itself.
bool agreeOrReport(moert::CommWorld &World, bool Ok, const std::string &Error) {
  std::vector<float> Failed(size_t(World.size()));
  float Mine = Ok ? 0.0f : 1.0f;
  World.world().allGather(&Mine, Failed.data(), 1);
  if (std::none_of(Failed.begin(), Failed.end(), [](float F) { return F != 0.0f; }))
    return true;
  if (!Ok && (World.rank() == 0 || Failed[0] == 0.0f))
    std::fprintf(stderr, "moerun: %s%s\n",
                 World.rank() == 0 ? "" : ("rank " + std::to_string(World.rank()) + ": ").c_str(), Error.c_str());
  return false;
}

/// True on every rank when any rank got SIGTERM.
bool anyTerm(moert::CommWorld &World) {
  float Term = TermReceived ? 1.0f : 0.0f;
  World.world().allReduceSum(&Term, 1);
  return Term > 0;
}

std::string layoutOf(const moert::CheckpointManifest &M) {
  std::string S;
  for (const char *K : {"tp", "cp", "ep", "etp", "pp", "vpp", "dp"}) {
    auto It = M.Layout.find(K);
    if (It != M.Layout.end())
      S += (S.empty() ? "" : " ") + std::string(K) + "=" + std::to_string(It->second);
  }
  return S + (M.DistributedOptimizer ? ", distributed optimizer" : "");
}

std::unique_ptr<moert::ComputeBackend> createCudaBackend() {
#ifdef MOERUN_CUDA_BACKEND
  return moert::cuda::createCudaBackend(moert::cuda::deviceForLocalRank());
#else
  throw std::runtime_error("--backend cuda: this moerun was built without the CUDA backend (no CUDA toolkit was "
                           "found when it was configured); build it where nvcc and NCCL are installed, or use "
                           "--backend cpu");
#endif
}

/// The gradient groups over device buffers for the CUDA backend: NCCL where
/// each rank of the node has a GPU of its own, one communicator per group
/// over a fresh MPI split of it; the host-staged communicator where ranks
/// share a GPU, which NCCL refuses.
std::function<std::unique_ptr<moert::Communicator>(const std::string &, moert::Communicator &)>
deviceGroups(RunContext &Ctx) {
#ifdef MOERUN_CUDA_BACKEND
  if (moert::cuda::ranksShareDevices())
    return [](const std::string &, moert::Communicator &Group) { return moert::createHostStagedCommunicator(Group); };
  const int Device = moert::cuda::deviceForLocalRank();
  return [&Ctx, Device](const std::string &Kind, moert::Communicator &) -> std::unique_ptr<moert::Communicator> {
    return moert::createNcclCommunicator(Ctx.World.split(Kind + " (nccl)", Ctx.Plan.Groups.at(Kind)), Device);
  };
#else
  (void)Ctx;
  return nullptr;
#endif
}

/// What becomes of the CUDA-graph scopes the plan asks for: nothing is
/// captured yet, and each note says why (the scope's own reason where its
/// shapes change every step).
std::vector<std::string> cudaGraphNotes(const moec::LaunchPlan &Plan, const std::string &Backend) {
  if (Plan.CudaGraph.empty())
    return {};
  std::string Scopes;
  for (const std::string &S : Plan.CudaGraph)
    Scopes += (Scopes.empty() ? "" : ", ") + S;
  if (Backend != "cuda")
    return {
        fmt::format("cuda_graph [{}]: the {} backend launches no CUDA kernels; nothing is captured", Scopes, Backend)};
  std::vector<std::string> Notes;
#ifdef MOERUN_CUDA_BACKEND
  moert::cuda::GraphConditions When;
  When.MoeModel = Plan.Model.MoE.has_value();
  When.EpSize = Plan.Parallel.EP;
  When.VariableLength = Plan.Data.VariableLength;
  for (const std::string &S : Plan.CudaGraph) {
    std::optional<moert::cuda::GraphScope> Scope = moert::cuda::parseGraphScope(S);
    std::string Why = Scope ? moert::cuda::whyNotCapturable(*Scope, When) : "this runtime has no such scope";
    Notes.push_back(Why.empty() ? fmt::format("cuda_graph '{}': its shapes are static, but it is not captured: the "
                                              "CUDA backend copies activations through host memory between "
                                              "operations, which a graph cannot replay",
                                              S)
                                : fmt::format("cuda_graph '{}': not captured: {}", S, Why));
  }
#endif
  return Notes;
}

/// Null for the host backend (the trainer's default).
std::unique_ptr<moert::ComputeBackend> createBackend(const RunContext &Ctx) {
  if (computeBackendOf(Ctx.Opts, Ctx.Plan) != "cuda")
    return nullptr;
  try {
    return createCudaBackend();
  } catch (const std::exception &E) {
    if (!Ctx.Opts.Backend.empty())
      throw;
    throw std::runtime_error(fmt::format("the plan '{}' is for {} GPUs, so moerun computes on CUDA devices "
                                         "unless told otherwise; {}",
                                         Ctx.Opts.PlanPath, Ctx.Plan.Gpu, E.what()));
  }
}

} // namespace

std::string moerun::computeBackendOf(const RunOptions &Opts, const moec::LaunchPlan &Plan) {
  if (!Opts.Backend.empty())
    return Opts.Backend;
  return Plan.Gpu.empty() || Plan.Gpu == "cpu" ? "cpu" : "cuda";
}

int moerun::runSteps(RunContext &Ctx) {
  moert::setBlasThreads(1);
  moert::TrainerOptions Opts;
  Opts.Seed = Ctx.Opts.Seed;
  Opts.Optimizer.Lr = Ctx.Opts.LearningRate;
  Opts.OptimizerFromPlan = true;
  Opts.TotalSteps = Ctx.Opts.Steps;
  std::unique_ptr<moert::ComputeBackend> Compute; // outlives the trainer
  std::unique_ptr<moert::Trainer> T;
  std::string Error;
  Ctx.Dog.beat("building the model");
  try {
    Compute = createBackend(Ctx);
    Opts.Compute = Compute.get();
    if (Compute)
      Opts.DeviceGroup = deviceGroups(Ctx);
    T = std::make_unique<moert::Trainer>(Ctx.Plan, Ctx.World, Ctx.Groups, Opts);
  } catch (const std::exception &E) {
    Error = E.what();
  }
  // A refusal of the plan is the same on every rank, but a dataset may be
  // missing or damaged on some ranks only (a node without the shared file
  // system): agree before anyone starts a step, so that no rank waits in a
  // collective for a peer that has given up.
  if (!agreeOrReport(Ctx.World, bool(T), Error))
    return 5;
  Ctx.Dog.beat("checking the dataset");
  Error = T->checkDataShare();
  if (!agreeOrReport(Ctx.World, Error.empty(), Error))
    return 5;
  const bool Rank0 = Ctx.World.rank() == 0;
  if (Rank0) {
    for (const std::string &Note : T->notes())
      std::printf("moerun: note: %s\n", Note.c_str());
    for (const std::string &Note : cudaGraphNotes(Ctx.Plan, computeBackendOf(Ctx.Opts, Ctx.Plan)))
      std::printf("moerun: note: %s\n", Note.c_str());
    const moert::AdamWOptions &A = T->optimizerOptions();
    std::string Line = fmt::format("moerun: optimizer: AdamW{}, weight decay {:g} (not of norms and biases), betas "
                                   "{:g}/{:g}, eps {:g}, gradient clipping {}\n",
                                   A.Distributed ? " (distributed)" : "", A.WeightDecay, A.Beta1, A.Beta2, A.Eps,
                                   A.ClipGradNorm > 0 ? fmt::format("at norm {:g}", A.ClipGradNorm) : "off");
    std::fputs(Line.c_str(), stdout);
  }

  if (!Ctx.Opts.InitFromHf.empty()) {
    Ctx.Dog.beat("loading a Hugging Face checkpoint");
    bool Ok = T->initFromHuggingFace(Ctx.Opts.InitFromHf, Error);
    if (!agreeOrReport(Ctx.World, Ok, "--init-from-hf '" + Ctx.Opts.InitFromHf + "': " + Error))
      return 6;
    if (Rank0)
      std::printf("moerun: parameters from the Hugging Face checkpoint '%s'\n", Ctx.Opts.InitFromHf.c_str());
  }
  if (!Ctx.Opts.LoadDir.empty()) {
    Ctx.Dog.beat("loading a checkpoint");
    bool Found = false;
    std::string Path;
    moert::CheckpointManifest M;
    bool Ok = moert::findLatestCheckpoint(Ctx.Opts.LoadDir, Found, Path, M, Error);
    if (!agreeOrReport(Ctx.World, Ok, "--load: " + Error))
      return 6;
    if (!Found) {
      if (Rank0)
        std::printf("moerun: no checkpoint in '%s': training from step 0\n", Ctx.Opts.LoadDir.c_str());
    } else {
      Ok = T->load(Path, M, Error);
      if (!agreeOrReport(Ctx.World, Ok, "--load '" + Path + "': " + Error))
        return 6;
      if (Rank0)
        std::printf("moerun: resuming from '%s': step %lld, saved under %s\n", Path.c_str(), (long long)M.Step,
                    layoutOf(M).c_str());
    }
  }
  if (T->stepsDone() >= Ctx.Opts.Steps) {
    if (Rank0)
      std::printf("moerun: the checkpoint is at step %lld, --steps is %lld: nothing to train\n",
                  (long long)T->stepsDone(), (long long)Ctx.Opts.Steps);
    return 0;
  }
  const bool Saving = !Ctx.Opts.SaveDir.empty();
  struct sigaction OldTerm;
  if (Saving) {
    struct sigaction Act = {};
    Act.sa_handler = onTerm;
    sigemptyset(&Act.sa_mask);
    sigaction(SIGTERM, &Act, &OldTerm);
  }
  const int Rank = Ctx.World.rank();
  const int64_t DieAt = testHookStep("MOERUN_TEST_DIE_AT_STEP", Rank);
  const int64_t DieInSave = testHookStep("MOERUN_TEST_DIE_IN_SAVE", Rank);
  const int64_t TermAt = testHookStep("MOERUN_TEST_TERM_AT_STEP", Rank);
  std::vector<int64_t> RankPeaks;
  for (int64_t S = T->stepsDone() + 1; S <= Ctx.Opts.Steps; ++S) {
    Ctx.Dog.beat("step " + std::to_string(S));
    bool FirstOp = true;
    moert::TrainStepStats St = T->step([&] {
      if (S == DieAt)
        std::raise(SIGKILL);
      if (S == TermAt && FirstOp)
        std::raise(SIGTERM);
      FirstOp = false;
      Ctx.Dog.beat();
    });
    // Megatron evaluates after the steps that are multiples of eval_interval.
    std::optional<moert::EvalStats> Eval;
    if (T->evalInterval() > 0 && St.Step % T->evalInterval() == 0) {
      Ctx.Dog.beat("evaluating after step " + std::to_string(S));
      Eval = T->evaluate([&] { Ctx.Dog.beat(); });
    }
    RankPeaks.resize(St.RankPeakBytes.size());
    for (size_t R = 0; R < RankPeaks.size(); ++R)
      RankPeaks[R] = std::max(RankPeaks[R], St.RankPeakBytes[R]);
    if (Ctx.Log) {
      StepRecord R;
      R.Step = St.Step;
      R.Loss = St.Loss;
      R.LearningRate = St.LearningRate;
      R.GradNorm = St.GradNorm;
      R.AuxLoss = St.AuxLoss;
      if (Ctx.Plan.Model.MtpLayers > 0)
        R.MtpLoss = St.MtpLoss;
      R.StepTimeSeconds = St.StepSeconds;
      R.TokensPerSecond = St.TokensPerSecond;
      if (Ctx.Plan.Model.Vision)
        R.UsefulTokensPerSecond = St.UsefulTokensPerSecond;
      R.PeakBytes = St.PeakBytes;
      if (Compute) {
        R.DevicePeakBytes = double(St.DevicePeakBytes);
        R.StagedBytes = double(St.StagedBytes);
      }
      R.ComputeSeconds = St.ComputeSeconds;
      R.CommSeconds = St.CommSeconds;
      auto Part = [&](moert::CommPart P) { return St.CommPartSeconds[size_t(P)]; };
      R.TpCommSeconds = Part(moert::CommPart::Tensor);
      R.CpCommSeconds = Part(moert::CommPart::Context);
      R.EpCommSeconds = Part(moert::CommPart::Expert);
      R.DpCommSeconds = Part(moert::CommPart::Data);
      R.PpCommSeconds = Part(moert::CommPart::Pipeline);
      R.GemmSeconds = St.BlasSeconds;
      R.CpuSeconds = St.CpuSeconds;
      const moec::LaunchPrediction &Pred = Ctx.Plan.Predicted;
      R.PredictedStepSeconds = Pred.StepSeconds;
      R.PredictedPeakBytes = Pred.PeakBytes;
      if (Pred.MFU && Pred.StepSeconds && St.StepSeconds > 0)
        R.MFU = *Pred.MFU * *Pred.StepSeconds / St.StepSeconds;
      if (Eval)
        R.ValidLoss = Eval->Loss;
      if (!Ctx.Log->write(R, Ctx.Opts.Steps, stdout, Error)) {
        std::fprintf(stderr, "moerun: %s\n", Error.c_str());
        Ctx.World.abort("moerun: cannot write the step log", 3);
      }
    }
    if (!Saving)
      continue;
    const bool Stop = anyTerm(Ctx.World);
    const int64_t Interval = Ctx.Opts.SaveInterval;
    if (Stop || S == Ctx.Opts.Steps || (Interval > 0 && S % Interval == 0)) {
      Ctx.Dog.beat("saving the checkpoint of step " + std::to_string(S));
      std::string Path;
      Error.clear();
      bool Ok = T->save(Ctx.Opts.SaveDir, Ctx.Opts.Keep, Path, Error, [&] {
        if (S == DieInSave)
          std::raise(SIGKILL);
      });
      if (!agreeOrReport(Ctx.World, Error.empty(), "--save: " + Error) || !Ok)
        return 6;
      if (Rank0)
        std::printf("moerun: saved step %lld in '%s'\n", (long long)S, Path.c_str());
    }
    if (Stop) {
      if (Rank0)
        std::printf("moerun: SIGTERM: stopped after step %lld, which is saved; resume with --load %s\n", (long long)S,
                    Ctx.Opts.SaveDir.c_str());
      sigaction(SIGTERM, &OldTerm, nullptr);
      return 0;
    }
  }
  if (Saving)
    sigaction(SIGTERM, &OldTerm, nullptr);
  if (Ctx.World.rank() == 0) {
    std::string Line = "moerun: peak bytes per rank (activations + parameters + "
                       "gradients + optimizer moments):";
    for (size_t R = 0; R < RankPeaks.size(); ++R)
      Line += (R ? ", " : " ") + std::to_string(R) + ": " + std::to_string(RankPeaks[R]);
    std::printf("%s\n", Line.c_str());
  }
  return 0;
}
