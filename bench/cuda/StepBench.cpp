//===- StepBench.cpp - One GPU training step against its plan -------------===//
//
//   moert-cuda-step-bench PLAN.toml [--steps N] [--out TABLE.md]
//
// Trains the plan's model on one GPU with the one-GPU training step
// (runtime/gpu/GpuModel.h): parameters initialised on the host as the CPU
// StageModel does, one micro batch of the plan's shape per step (mock tokens),
// AdamW. After two warm-up steps it times N steps (default 5) with CUDA
// events and reads the caching allocator's peak, then writes one Markdown row
// beside the plan's predicted step time and memory. The plan must be for one
// rank (the one-GPU path has no TP, CP, EP or PP). Without a GPU it says so
// and exits 0.
//
//===----------------------------------------------------------------------===//
#include "BenchFormat.h"
#include "comm/Communicator.h"
#include "gpu/GpuModel.h"
#include "kernels/cuda/CudaCheck.h"
#include "kernels/cuda/DeviceAllocator.h"
#include "moec/PlanFormat/PlanReader.h"
#include "train/Trainer.h"

#include <llvm/Support/Error.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace moert;
using namespace moert::cuda;
using moert::bench::fixed;

namespace {

MicroBatch mockBatch(const moec::LaunchPlan &Plan, int64_t Vocab, uint64_t Seed) {
  MicroBatch MB;
  MB.Sequences = Plan.MicroBatch;
  MB.SeqLen = Plan.SeqLen;
  std::mt19937_64 Gen(Seed);
  for (int64_t I = 0; I < MB.Sequences * MB.SeqLen; ++I)
    MB.Tokens.push_back(int32_t(Gen() % uint64_t(Vocab)));
  for (int64_t I = 0; I < MB.Sequences * MB.SeqLen; ++I)
    MB.Labels.push_back((I + 1) % MB.SeqLen ? MB.Tokens[size_t(I + 1)] : -1);
  return MB;
}

int run(const std::string &PlanPath, int Steps, const std::string &OutPath) {
  llvm::Expected<moec::LaunchPlan> Read = moec::readPlan(PlanPath);
  if (!Read) {
    std::cerr << "moert-cuda-step-bench: " << llvm::toString(Read.takeError()) << "\n";
    return 1;
  }
  const moec::LaunchPlan &Plan = *Read;
  if (Plan.WorldSize != 1) {
    std::cerr << "moert-cuda-step-bench: " << PlanPath << " is for " << Plan.WorldSize
              << " ranks; the one-GPU step needs a plan for one\n";
    return 1;
  }
  if (deviceCount() == 0) {
    std::cout << "SKIPPED: no CUDA device\n";
    return 0;
  }
  ModelConfig C = modelConfigOf(Plan);
  auto Tp = createSelfCommunicator("tp"), Cp = createSelfCommunicator("cp");
  auto TpCp = createSelfCommunicator("tpcp"), Ep = createSelfCommunicator("ep");
  ModelOptions O;
  O.Seed = 1234;
  auto T0 = std::chrono::steady_clock::now();
  auto Host = std::make_unique<StageModel>(C, StageSpec{0, C.Layers, true, true},
                                           ParallelContext{Tp.get(), Cp.get(), TpCp.get(), Ep.get()}, O);
  GpuModel Model(C, Host->parameters());
  Host.reset(); // the host copy is not needed any more
  double InitS = std::chrono::duration<double>(std::chrono::steady_clock::now() - T0).count();

  MicroBatch MB = mockBatch(Plan, C.Vocab, 7);
  const int64_t Tokens = MB.Sequences * MB.SeqLen;
  GpuAdamW Opt;
  Opt.Lr = 1e-4;
  Opt.ClipGradNorm = 1.0;
  auto step = [&] {
    Model.zeroGrads();
    GpuStepLoss L = Model.forwardBackward(MB, 1.0 / double(Tokens), 1e-3);
    Model.step(Opt);
    return L.CeSum / double(std::max<int64_t>(L.Tokens, 1));
  };
  step();
  step();
  cudaEvent_t Begin, End;
  MOERT_CUDA_CHECK(cudaEventCreate(&Begin));
  MOERT_CUDA_CHECK(cudaEventCreate(&End));
  std::vector<float> Ms;
  double Loss = 0;
  for (int I = 0; I < Steps; ++I) {
    MOERT_CUDA_CHECK(cudaEventRecord(Begin, nullptr));
    Loss = step();
    MOERT_CUDA_CHECK(cudaEventRecord(End, nullptr));
    MOERT_CUDA_CHECK(cudaEventSynchronize(End));
    float T = 0;
    MOERT_CUDA_CHECK(cudaEventElapsedTime(&T, Begin, End));
    Ms.push_back(T);
  }
  std::sort(Ms.begin(), Ms.end());
  double Median = Ms[Ms.size() / 2] / 1e3;
  DeviceMemoryStats Mem = deviceMemoryStats();
  double PeakGB = double(Mem.PeakAllocatedBytes) / 1e9;

  std::ostringstream Row;
  Row << "| " << Plan.Recipe << " (" << C.Layers << " layers, " << C.Experts << " experts top-" << C.TopK << ", "
      << MB.Sequences << " x " << MB.SeqLen << " tokens) | " << fixed(Median, 4) << " | "
      << (Plan.Predicted.StepSeconds ? fixed(*Plan.Predicted.StepSeconds, 4) : "-") << " | "
      << (Plan.Predicted.StepSeconds ? fixed(Median / *Plan.Predicted.StepSeconds, 2) + "x" : "-") << " | "
      << fixed(double(Tokens) / Median, 0) << " | " << fixed(PeakGB, 1) << " | "
      << (Plan.Predicted.PeakBytes ? fixed(*Plan.Predicted.PeakBytes / 1e9, 1) : "-") << " | " << fixed(Loss, 3)
      << " |";
  std::ostringstream Table;
  Table << "### One GPU training step against its plan on " << deviceDescription(0) << "\n\n"
        << "Measured by `moert-cuda-step-bench` (bench/cuda/StepBench.cpp) on the plan of `bench/cuda/step_h200.moe`: "
        << "median of " << Steps << " steps after 2 warm-up steps, CUDA events around forward, backward and AdamW; "
        << "memory is the caching allocator's peak. Host initialisation took " << fixed(InitS, 1) << " s.\n\n"
        << "| model | step s | plan s | measured / plan | tokens/s | peak GB | plan GB | loss |\n"
        << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        << Row.str() << "\n";
  std::cout << Table.str();
  if (!OutPath.empty()) {
    std::ofstream Out(OutPath);
    Out << Table.str();
    if (!Out) {
      std::cerr << "moert-cuda-step-bench: cannot write " << OutPath << "\n";
      return 1;
    }
  }
  return 0;
}

} // namespace

int main(int Argc, char **Argv) {
  std::string PlanPath, OutPath;
  int Steps = 5;
  for (int I = 1; I < Argc; ++I) {
    if (!std::strcmp(Argv[I], "--out") && I + 1 < Argc)
      OutPath = Argv[++I];
    else if (!std::strcmp(Argv[I], "--steps") && I + 1 < Argc)
      Steps = std::max(1, std::atoi(Argv[++I]));
    else if (PlanPath.empty() && Argv[I][0] != '-')
      PlanPath = Argv[I];
    else {
      std::cerr << "usage: moert-cuda-step-bench PLAN.toml [--steps N] [--out TABLE.md]\n";
      return 2;
    }
  }
  if (PlanPath.empty()) {
    std::cerr << "usage: moert-cuda-step-bench PLAN.toml [--steps N] [--out TABLE.md]\n";
    return 2;
  }
  try {
    return run(PlanPath, Steps, OutPath);
  } catch (const std::exception &E) {
    std::cerr << "moert-cuda-step-bench: " << E.what() << "\n";
    return 1;
  }
}
