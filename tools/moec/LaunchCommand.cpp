//===- LaunchCommand.cpp - moec launch ------------------------------------===//
//
//   moec launch FILE (--slurm | --mpirun) [--engine moerun|bridge] [--recipe NAME]
//               [--dry-run] [-o script] [--plan PATH] [--steps K] ...
//
// Prints (by default) or writes (-o) what a cluster runs for one recipe
// point: an sbatch script, or the equivalent mpirun line. With the moerun
// engine the compiled plan is written next to the script (or to --plan);
// with the bridge engine the script runs Megatron-Bridge's entry point with
// the exported overrides. docs/runtime.md ("Clusters").
//
//===----------------------------------------------------------------------===//
#include "BridgeCommon.h"
#include "Commands.h"

#include "moec/Bridge/Launch.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

// Declared in Commands.h for main; its options follow it in this file, so they
// are constructed after it.
cl::SubCommand LaunchCmd("launch", "Write the sbatch script or mpirun line that runs a recipe on a cluster");

namespace {
cl::opt<std::string> LaunchFile(cl::Positional, cl::desc("<file.moe | ->"), cl::sub(LaunchCmd));
cl::opt<bool> LaunchSlurm("slurm", cl::desc("An sbatch script"), cl::sub(LaunchCmd));
cl::opt<bool> LaunchMpirun("mpirun", cl::desc("The mpirun line"), cl::sub(LaunchCmd));
cl::opt<bridge::Engine> LaunchEngine(
    "engine",
    cl::desc("What the ranks run (default: bridge for a GPU recipe under a Megatron-Bridge target, else moerun)"),
    cl::init(bridge::Engine::Moerun),
    cl::values(clEnumValN(bridge::Engine::Moerun, "moerun", "moec's runtime on the compiled plan"),
               clEnumValN(bridge::Engine::Bridge, "bridge",
                          "Megatron-Bridge's entry point with the exported "
                          "overrides")),
    cl::sub(LaunchCmd));
cl::opt<bool> LaunchDryRun("dry-run", cl::desc("Print only, write nothing (the default without -o)"),
                           cl::sub(LaunchCmd));
cl::opt<std::string> LaunchOutput("o", cl::desc("Write the script to this file (atomically, executable)"),
                                  cl::value_desc("file"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchRecipe("recipe", cl::desc("Launch this recipe (or sweep point)"), cl::value_desc("name"),
                                  cl::sub(LaunchCmd));
cl::opt<std::string> LaunchPlan("plan",
                                cl::desc("moerun: where the plan is (written with -o); default next to the script"),
                                cl::value_desc("path"), cl::sub(LaunchCmd));
cl::opt<unsigned> LaunchSteps("steps", cl::desc("moerun: training steps"), cl::init(1), cl::value_desc("K"),
                              cl::sub(LaunchCmd));
cl::opt<std::string> LaunchLog("log", cl::desc("moerun: the step log"), cl::value_desc("file"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchMoerun("moerun", cl::desc("moerun: the executable on the nodes"), cl::init("moerun"),
                                  cl::value_desc("path"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchEntry("bridge-entry", cl::desc("bridge: the Python entry point"),
                                 cl::init("scripts/training/run_recipe.py"), cl::value_desc("path"),
                                 cl::sub(LaunchCmd));
cl::opt<std::string> LaunchBridgeRecipe("bridge-recipe",
                                        cl::desc("bridge: the Bridge recipe the overrides apply to (default: the "
                                                 "recipe's name if it ends in _config, else MODEL_pretrain_config)"),
                                        cl::value_desc("name"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchPython("python", cl::desc("bridge: the Python interpreter"), cl::init("python"),
                                  cl::value_desc("path"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchJob("job-name", cl::desc("sbatch job name (default: the recipe's)"), cl::value_desc("name"),
                               cl::sub(LaunchCmd));
cl::opt<std::string> LaunchTime("time", cl::desc("sbatch time limit"), cl::init("04:00:00"), cl::value_desc("HH:MM:SS"),
                                cl::sub(LaunchCmd));
cl::opt<std::string> LaunchPartition("partition", cl::desc("sbatch partition"), cl::value_desc("name"),
                                     cl::sub(LaunchCmd));
cl::opt<std::string> LaunchAccount("account", cl::desc("sbatch account"), cl::value_desc("name"), cl::sub(LaunchCmd));
cl::list<std::string> LaunchIncludes("I", cl::Prefix, cl::desc("Add a directory to the import search path"),
                                     cl::value_desc("dir"), cl::sub(LaunchCmd));
cl::opt<std::string> LaunchTarget("target", cl::desc("The Megatron release to launch for (moec targets lists them)"),
                                  cl::value_desc("name"), cl::sub(LaunchCmd));
cl::list<std::string> LaunchWarnings("W", cl::Prefix, cl::desc("-Werror: warnings are errors; -Wno-ID: silence ID"),
                                     cl::value_desc("error|no-ID"), cl::sub(LaunchCmd));

std::string absolute(llvm::StringRef Path) {
  llvm::SmallString<256> P(Path);
  llvm::sys::fs::make_absolute(P);
  llvm::sys::path::remove_dots(P, /*remove_dot_dot=*/true);
  return std::string(P);
}
} // namespace

int runLaunch() {
  if (LaunchSlurm == LaunchMpirun) {
    llvm::errs() << "moec launch: choose one of --slurm (an sbatch script) and --mpirun (the mpirun line)\n";
    return ExitUsage;
  }
  OnePoint P = compileOnePoint("launch", LaunchFile, LaunchRecipe, LaunchIncludes, LaunchWarnings, LaunchTarget);
  if (P.Status)
    return P.Status;
  const Recipe &R = *P.R;
  // Unless told, the engine is the one that trains fast on the cluster's
  // GPUs: moerun's CUDA backend has not been measured on a GPU, and the
  // operations still in host code move activations through host memory (docs/runtime.md), so a GPU recipe under a
  // Megatron-Bridge target runs Bridge's entry point.
  bool OnGpus = R.Gpu.Arch != GpuArch::Cpu;
  bool BridgeTarget = getTargetInfo(R.Tgt).Kind == Framework::Bridge;
  bridge::Engine Chosen = LaunchEngine;
  if (!LaunchEngine.getNumOccurrences())
    Chosen = OnGpus && BridgeTarget ? bridge::Engine::Bridge : bridge::Engine::Moerun;
  if (Chosen == bridge::Engine::Bridge && !refuseNonBridgeTarget(P, "launch --engine bridge"))
    return ExitErrors;
  if (Chosen == bridge::Engine::Moerun && OnGpus)
    llvm::errs() << fmt::format("moec launch: warning: engine moerun trains on the {} {} GPUs with its CUDA backend, "
                                "which has not been measured on a GPU and moves what host code computes through "
                                "host memory: a step may take far longer than the plan predicts{}\n",
                                R.WorldSize, R.Gpu.Name,
                                BridgeTarget ? " (--engine bridge runs Megatron-Bridge on them)" : "");
  else
    llvm::errs() << fmt::format("moec launch: engine {} ({})\n", Chosen == bridge::Engine::Bridge ? "bridge" : "moerun",
                                Chosen == bridge::Engine::Bridge
                                    ? "Megatron-Bridge's entry point with the exported overrides"
                                    : "moec's runtime on the compiled plan");
  bool Write = !LaunchOutput.empty() && !LaunchDryRun;

  bridge::LaunchOptions O;
  O.E = Chosen;
  O.Steps = LaunchSteps;
  O.StepLog = LaunchLog;
  O.Moerun = LaunchMoerun;
  O.BridgeEntry = LaunchEntry;
  O.BridgeRecipe = LaunchBridgeRecipe;
  O.Python = LaunchPython;
  O.JobName = LaunchJob;
  O.Time = LaunchTime;
  O.Partition = LaunchPartition;
  O.Account = LaunchAccount;
  O.SourceFile = P.File;

  std::string PlanText;
  if (O.E == bridge::Engine::Moerun) {
    llvm::Expected<Plan> Pl = buildPlan(R, P.File);
    if (!Pl) {
      llvm::errs() << "moec launch: " << R.PointName << ": " << llvm::toString(Pl.takeError()) << "\n";
      return ExitErrors;
    }
    PlanText = planToTOML(*Pl);
    if (!LaunchPlan.empty())
      O.PlanPath = LaunchPlan;
    else if (!LaunchOutput.empty()) {
      llvm::SmallString<256> Path(LaunchOutput.getValue());
      llvm::sys::path::replace_extension(Path, "plan.toml");
      O.PlanPath = std::string(Path);
    } else
      O.PlanPath = R.Name + ".plan.toml";
    // Every rank opens it from its own working directory.
    O.PlanPath = absolute(O.PlanPath);
  }

  bridge::BridgeExport E = bridge::exportOverrides(R);
  if (O.E == bridge::Engine::Bridge)
    reportDropped(P, E);
  std::string Script =
      LaunchSlurm ? bridge::renderSbatch(R, E, O) : "#!/bin/bash\nset -euo pipefail\n" + bridge::renderMpirun(R, E, O);

  if (!Write) {
    llvm::outs() << (LaunchSlurm ? Script : bridge::renderMpirun(R, E, O));
    if (O.E == bridge::Engine::Moerun)
      llvm::errs() << fmt::format("moec launch: dry run: nothing written; the {} reads the plan {} (write it with "
                                  "`moec plan {} -o {}`, or give -o)\n",
                                  LaunchSlurm ? "script" : "line", O.PlanPath, P.File, O.PlanPath);
    return ExitOK;
  }
  if (O.E == bridge::Engine::Moerun) {
    if (llvm::Error Err = writeFileAtomically(O.PlanPath, PlanText)) {
      llvm::errs() << "moec launch: " << llvm::toString(std::move(Err)) << "\n";
      return ExitUsage;
    }
  }
  if (llvm::Error Err = writeFileAtomically(LaunchOutput, Script)) {
    llvm::errs() << "moec launch: " << llvm::toString(std::move(Err)) << "\n";
    return ExitUsage;
  }
  llvm::sys::fs::setPermissions(LaunchOutput, llvm::sys::fs::perms(0755));
  llvm::errs() << "moec launch: wrote " << LaunchOutput
               << (O.E == bridge::Engine::Moerun ? " and the plan " + O.PlanPath : std::string()) << "\n";
  return ExitOK;
}

} // namespace moec::driver
