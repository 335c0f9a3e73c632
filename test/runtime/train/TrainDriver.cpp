//===- TrainDriver.cpp - Runs a plan's steps with the Trainer, for tests
//---===//
//
//   mpirun -np N moert-train-driver PLAN.toml [--steps K] [--dump DIR]
//                                   [--log FILE] [--lr LR] [--seed S]
//                                   [--adam-eps EPS] [--distributed-optimizer]
//                                   [--backend cpu|cuda]
//                                   [--save DIR --save-at STEP] [--load DIR]
//
// Test-only front end of runtime/train (moerun is the user-facing one): reads
// the plan, splits the plan's groups and runs K steps. Rank 0 prints one line
// per step and, with --log, appends one JSON object per step. With --dump,
// after step 1 every rank writes the full gradients it owns to
// DIR/grads.rankR.bin and after step K the full parameters to
// DIR/params.rankR.bin (Trainer::dumpTensors), and rank 0 writes every
// step's loss to DIR/loss.txt ("step ce aux" per line, %.9e). The
// distributed optimizer leaves no summed gradients behind: no grads files.
// --save writes a checkpoint to DIR after step STEP; --load starts from
// DIR's latest checkpoint and runs steps after it up to K
// (test/runtime/train/resume_backend.py).
// compare_dumps.py merges and compares them. --backend cuda needs a build
// with the CUDA backend: moert-train-driver where the toolkit was found, and
// moert-train-driver-emu, whose CUDA backend runs on the CPU emulation
// (test/runtime/cuda/emu) so that the equivalence matrix covers it without a
// GPU.
//
//===----------------------------------------------------------------------===//
#include "checkpoint/CheckpointDir.h"
#include "comm/mpi/MpiComm.h"
#include "kernels/host/Blas.h"
#include "train/Trainer.h"
#ifdef MOERT_TRAIN_DRIVER_CUDA
#include "comm/nccl/HostStagedComm.h"
#include "kernels/cuda/CudaBackend.h"
#endif

#include "llvm/Support/Error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

using namespace moert;

int main(int Argc, char **Argv) {
  std::unique_ptr<CommWorld> World = createMpiWorld(&Argc, &Argv);
  setBlasThreads(1);
  std::string PlanPath, DumpDir, LogPath, HfDir, SaveDir, LoadDir, Backend = "cpu";
  int64_t Steps = 1, SaveAt = 0;
  TrainerOptions Opts;
  for (int I = 1; I < Argc; ++I) {
    std::string A = Argv[I];
    auto Value = [&]() -> std::string {
      if (I + 1 >= Argc)
        World->abort("moert-train-driver: " + A + " needs a value", 2);
      return Argv[++I];
    };
    if (A == "--steps")
      Steps = std::atoll(Value().c_str());
    else if (A == "--dump")
      DumpDir = Value();
    else if (A == "--log")
      LogPath = Value();
    else if (A == "--lr")
      Opts.Optimizer.Lr = std::atof(Value().c_str());
    else if (A == "--distributed-optimizer")
      Opts.Optimizer.Distributed = true;
    else if (A == "--adam-eps")
      Opts.Optimizer.Eps = std::atof(Value().c_str());
    else if (A == "--init-from-hf")
      HfDir = Value();
    else if (A == "--backend")
      Backend = Value();
    else if (A == "--save")
      SaveDir = Value();
    else if (A == "--save-at")
      SaveAt = std::atoll(Value().c_str());
    else if (A == "--load")
      LoadDir = Value();
    else if (A == "--seed")
      Opts.Seed = std::strtoull(Value().c_str(), nullptr, 10);
    else if (PlanPath.empty())
      PlanPath = A;
    else
      World->abort("moert-train-driver: unexpected argument " + A, 2);
  }
  if (PlanPath.empty() || Steps < 1)
    World->abort("usage: moert-train-driver PLAN [--steps K] [--dump DIR] "
                 "[--log FILE] [--lr LR] [--seed S] [--init-from-hf DIR] [--backend cpu|cuda] "
                 "[--save DIR --save-at STEP] [--load DIR]",
                 2);
  llvm::Expected<moec::LaunchPlan> Plan = moec::readPlan(PlanPath);
  if (!Plan)
    World->abort(llvm::toString(Plan.takeError()), 2);

  auto Groups = createPlanGroups(*Plan, *World);
  std::unique_ptr<ComputeBackend> Compute;
  std::unique_ptr<Trainer> T;
  try {
    if (Backend == "cuda") {
#ifdef MOERT_TRAIN_DRIVER_CUDA
      Compute = cuda::createCudaBackend(cuda::deviceForLocalRank());
      Opts.Compute = Compute.get();
      // The gradient sums on the device, staged through the host: the
      // ranks of a test share one GPU (or the emulation's), which NCCL
      // refuses.
      Opts.DeviceGroup = [](const std::string &, Communicator &Group) { return createHostStagedCommunicator(Group); };
#else
      World->abort("moert-train-driver: built without the CUDA backend", 2);
#endif
    } else if (Backend != "cpu") {
      World->abort("moert-train-driver: --backend is cpu or cuda, not " + Backend, 2);
    }
    T = std::make_unique<Trainer>(*Plan, *World, Groups, Opts);
  } catch (const std::exception &E) {
    World->abort(E.what(), 2);
  }
  if (std::string Error = T->checkDataShare(); !Error.empty())
    World->abort(Error, 2);
  if (std::string Error; !HfDir.empty() && !T->initFromHuggingFace(HfDir, Error))
    World->abort("--init-from-hf: " + Error, 2);
  if (!LoadDir.empty()) {
    bool Found = false;
    std::string Path, Error;
    CheckpointManifest M;
    if (!findLatestCheckpoint(LoadDir, Found, Path, M, Error) || !Found || !T->load(Path, M, Error))
      World->abort("--load " + LoadDir + ": " + (Found ? Error : std::string("no checkpoint")), 6);
  }
  bool Root = World->rank() == 0;
  std::FILE *Log = nullptr, *Loss = nullptr;
  if (Root) {
    for (const std::string &N : T->notes())
      std::printf("note: %s\n", N.c_str());
    if (!LogPath.empty() && !(Log = std::fopen(LogPath.c_str(), "w")))
      World->abort("cannot write " + LogPath, 3);
    if (!DumpDir.empty() && !(Loss = std::fopen((DumpDir + "/loss.txt").c_str(), "w")))
      World->abort("cannot write " + DumpDir + "/loss.txt", 3);
  }
  std::string Rank = std::to_string(World->rank());
  for (int64_t S = T->stepsDone() + 1; S <= Steps; ++S) {
    BackendTraffic Before = Compute ? Compute->traffic() : BackendTraffic();
    TrainStepStats St = T->step();
    if (std::string Path, Error; !SaveDir.empty() && S == SaveAt && !T->save(SaveDir, 2, Path, Error, nullptr))
      World->abort("--save " + SaveDir + ": " + Error, 3);
    if (!DumpDir.empty() && S == 1 && !Opts.Optimizer.Distributed)
      T->dumpTensors(DumpDir + "/grads.rank" + Rank + ".bin", /*Grads=*/true);
    if (!DumpDir.empty() && S == Steps)
      T->dumpTensors(DumpDir + "/params.rank" + Rank + ".bin", /*Grads=*/false);
    if (!Root)
      continue;
    std::printf("step %lld/%lld loss %.6f aux %.3e | %.3f s, %.0f tokens/s, "
                "peak %.2f MiB, compute %.3f s (gemm %.3f s), comm %.3f s\n",
                (long long)S, (long long)Steps, St.Loss, St.AuxLoss, St.StepSeconds, St.TokensPerSecond,
                double(St.PeakBytes) / (1 << 20), St.ComputeSeconds, St.BlasSeconds, St.CommSeconds);
    if (Compute)
      std::printf("  device peak %.2f MiB, staged %.2f MiB\n", double(St.DevicePeakBytes) / (1 << 20),
                  double(St.StagedBytes) / (1 << 20));
    if (Compute) { // rank 0's copies by operation, MiB to the device / back
      std::printf("  rank 0 staged by operation:");
      for (const auto &[Name, Now] : Compute->traffic().ByOperation) {
        BackendTraffic::Copies Was = Before.ByOperation[Name];
        std::printf(" %s %.3f/%.3f;", Name.c_str(), double(Now.HostToDeviceBytes - Was.HostToDeviceBytes) / (1 << 20),
                    double(Now.DeviceToHostBytes - Was.DeviceToHostBytes) / (1 << 20));
      }
      std::printf("\n  rank 0 copies by operation:");
      for (const auto &[Name, Now] : Compute->traffic().ByOperation)
        if (int64_t Copies = Now.Transfers - Before.ByOperation[Name].Transfers)
          std::printf(" %s %lld;", Name.c_str(), (long long)Copies);
      std::printf("\n  rank 0 waits by operation:");
      for (const auto &[Name, Now] : Compute->traffic().ByOperation) {
        const BackendTraffic::Copies &Was = Before.ByOperation[Name];
        if (int64_t Waits = (Now.Transfers - Now.Queued) - (Was.Transfers - Was.Queued))
          std::printf(" %s %lld;", Name.c_str(), (long long)Waits);
      }
      std::printf("\n");
    }
    if (Log) {
      std::fprintf(Log,
                   "{\"step\":%lld,\"loss\":%.9g,\"aux_loss\":%.9g,"
                   "\"step_time_s\":%.6g,\"tokens_per_s\":%.6g,"
                   "\"peak_bytes\":%lld,\"compute_s\":%.6g,\"comm_s\":%.6g}\n",
                   (long long)S, St.Loss, St.AuxLoss, St.StepSeconds, St.TokensPerSecond, (long long)St.PeakBytes,
                   St.ComputeSeconds, St.CommSeconds);
      std::fflush(Log);
    }
    if (Loss)
      std::fprintf(Loss, "%lld %.9e %.9e\n", (long long)S, St.Loss, St.AuxLoss);
    std::fflush(stdout);
  }
  if (Log)
    std::fclose(Log);
  if (Loss)
    std::fclose(Loss);
  World->world().barrier();
  return 0;
}
