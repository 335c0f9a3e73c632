//===- Launch.cpp - Launch scripts for a compiled recipe ------------------===//
#include "moec/Bridge/Launch.h"

#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

using namespace moec;
using namespace moec::bridge;

std::string bridge::defaultBridgeRecipe(const Recipe &R) {
  if (llvm::StringRef(R.Name).endswith("_config"))
    return R.Name;
  return R.Model.Name + "_pretrain_config";
}

std::vector<EnvVar> bridge::launchEnvironment(const Recipe &R, const BridgeExport &E, const LaunchOptions &O) {
  if (O.E == Engine::Bridge)
    return E.Env;
  // moerun's kernels are OpenBLAS GEMMs; every rank is already one process
  // per core, so more BLAS threads only oversubscribe (docs/runtime.md).
  return {{"OPENBLAS_NUM_THREADS", "1", "one BLAS thread per rank: the ranks already fill the cores"},
          {"OMP_NUM_THREADS", "1", "the same for OpenMP-threaded BLAS builds"}};
}

namespace {
std::string comment(llvm::StringRef Text) {
  std::string Out;
  llvm::SmallVector<llvm::StringRef, 4> Lines;
  Text.split(Lines, '\n');
  for (llvm::StringRef L : Lines)
    Out += ("# " + L + "\n").str();
  return Out;
}

/// The program and its arguments that every rank runs.
std::vector<std::string> rankCommand(const Recipe &R, const BridgeExport &E, const LaunchOptions &O) {
  std::vector<std::string> Args;
  if (O.E == Engine::Moerun) {
    Args = {O.Moerun, O.PlanPath, "--steps", std::to_string(O.Steps)};
    if (!O.StepLog.empty())
      Args.insert(Args.end(), {"--log", O.StepLog});
    // On a GPU system every rank computes on its local GPU.
    if (R.Gpu.Arch != GpuArch::Cpu)
      Args.insert(Args.end(), {"--backend", "cuda"});
    return Args;
  }
  Args = {O.Python, O.BridgeEntry, "--recipe", O.BridgeRecipe.empty() ? defaultBridgeRecipe(R) : O.BridgeRecipe};
  for (const Override &X : E.Overrides)
    Args.push_back(X.Key + "=" + renderHydra(X.V));
  return Args;
}

std::string quoteAll(const std::vector<std::string> &Words, llvm::StringRef Sep = " ") {
  std::vector<std::string> Q;
  for (const std::string &W : Words)
    Q.push_back(shellQuote(W));
  return llvm::join(Q, Sep);
}

/// torch.distributed reads its rank from the environment; the launcher
/// knows it under its own names.
std::string torchRankWrapper(llvm::StringRef Rank, llvm::StringRef Local, llvm::StringRef Size) {
  return fmt::format("bash -c 'export RANK=${} LOCAL_RANK=${} WORLD_SIZE=${}; exec \"$@\"' bash", Rank.str(),
                     Local.str(), Size.str());
}
} // namespace

std::string bridge::renderSbatch(const Recipe &R, const BridgeExport &E, const LaunchOptions &O) {
  int64_t PerNode = R.Gpu.GpusPerNode;
  int64_t Nodes = PerNode ? (R.WorldSize + PerNode - 1) / PerNode : R.Nodes;
  bool Gpu = R.Gpu.Arch != GpuArch::Cpu;
  std::string S = "#!/bin/bash\n";
  S += fmt::format("#SBATCH --job-name={}\n", O.JobName.empty() ? R.Name : O.JobName);
  S += fmt::format("#SBATCH --nodes={}\n", Nodes);
  S += fmt::format("#SBATCH --ntasks-per-node={}\n", PerNode);
  if (Gpu)
    S += fmt::format("#SBATCH --gpus-per-node={}\n", PerNode);
  S += "#SBATCH --exclusive\n";
  S += fmt::format("#SBATCH --time={}\n", O.Time);
  if (!O.Partition.empty())
    S += fmt::format("#SBATCH --partition={}\n", O.Partition);
  if (!O.Account.empty())
    S += fmt::format("#SBATCH --account={}\n", O.Account);
  S += comment(fmt::format("Written by `moec launch` for recipe {}{}: {} x {} ({} ranks), engine {}.", E.RecipeName,
                           O.SourceFile.empty() ? "" : " of " + O.SourceFile, Nodes, R.Gpu.Name, R.WorldSize,
                           O.E == Engine::Moerun ? "moerun" : "megatron-bridge"));
  S += "set -euo pipefail\n\n";
  std::string LastReason;
  for (const EnvVar &V : launchEnvironment(R, E, O)) {
    // Variables set for one reason (HybridEP's three) share its comment.
    if (V.Reason != LastReason)
      S += comment(V.Reason);
    LastReason = V.Reason;
    S += fmt::format("export {}={}\n", V.Name, shellQuote(V.Value));
  }
  std::vector<std::string> Cmd = rankCommand(R, E, O);
  if (O.E == Engine::Moerun) {
    S += comment(fmt::format("Every rank reads the same plan (write it with `moec plan ... -o {}` on a shared file "
                             "system); ranks are placed in Slurm's order, which the plan assumes.",
                             O.PlanPath));
    S += fmt::format("srun --ntasks={} --ntasks-per-node={} --mpi=pmix --kill-on-bad-exit=1 \\\n  {}\n", R.WorldSize,
                     PerNode, quoteAll(Cmd));
    return S;
  }
  for (const NotExported &D : E.Dropped)
    S += comment(fmt::format("Not exported: {} = {} ({})", D.Field, D.Value, D.Reason));
  S += "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  S += "export MASTER_PORT=${MASTER_PORT:-29500}\n\n";
  S += "OVERRIDES=(\n";
  for (size_t I = 4; I < Cmd.size(); ++I)
    S += "  " + shellQuote(Cmd[I]) + "\n";
  S += ")\n";
  S += fmt::format(
      "srun --ntasks={} --ntasks-per-node={} --kill-on-bad-exit=1 \\\n  {} \\\n  {} \"${{OVERRIDES[@]}}\"\n",
      R.WorldSize, PerNode, torchRankWrapper("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
      quoteAll({Cmd.begin(), Cmd.begin() + 4}));
  return S;
}

std::string bridge::renderMpirun(const Recipe &R, const BridgeExport &E, const LaunchOptions &O) {
  std::vector<EnvVar> Env = launchEnvironment(R, E, O);
  std::string S;
  for (const EnvVar &V : Env)
    S += fmt::format("{}={} ", V.Name, shellQuote(V.Value));
  // torch.distributed's rendezvous: the first host of the job, unless set.
  if (O.E == Engine::Bridge)
    S += "MASTER_ADDR=${MASTER_ADDR:-$(hostname)} MASTER_PORT=${MASTER_PORT:-29500} ";
  S += fmt::format("mpirun -np {} --map-by ppr:{}:node", R.WorldSize, R.Gpu.GpusPerNode);
  for (const EnvVar &V : Env)
    S += " -x " + V.Name;
  std::vector<std::string> Cmd = rankCommand(R, E, O);
  if (O.E == Engine::Bridge) {
    S += " -x MASTER_ADDR -x MASTER_PORT ";
    S += torchRankWrapper("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE");
  }
  return S + " " + quoteAll(Cmd) + "\n";
}
