//===- Launch.h - Launch scripts for a compiled recipe ------------*- C++ -*-===//
//
// Writes what a cluster runs for one recipe point: an sbatch script (nodes,
// tasks and GPUs per node, the environment the setting needs, and `srun` of
// moec's runtime on the compiled plan or of Megatron-Bridge's entry point
// with the exported overrides), or the equivalent `mpirun` line.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BRIDGE_LAUNCH_H
#define MOEC_BRIDGE_LAUNCH_H

#include "moec/Bridge/Export.h"
#include "moec/Sema/Recipe.h"
#include <string>

namespace moec {
namespace bridge {

enum class Engine { Moerun, Bridge };

struct LaunchOptions {
  Engine E = Engine::Moerun;
  /// moerun: the compiled plan every rank reads (on a shared file system).
  std::string PlanPath = "plan.toml";
  std::string Moerun = "moerun";
  unsigned Steps = 1;
  std::string StepLog; // moerun --log, when set
  /// bridge: the Python entry point and the Bridge recipe it starts from.
  std::string BridgeEntry = "scripts/training/run_recipe.py";
  std::string BridgeRecipe; // empty: defaultBridgeRecipe()
  std::string Python = "python";
  /// sbatch header.
  std::string JobName; // empty: the recipe name
  std::string Time = "04:00:00";
  std::string Partition, Account;
  /// Named in the script's comment.
  std::string SourceFile;
};

/// The Bridge recipe function the overrides apply to: the recipe's own name
/// when it is one (`..._config`), else `<model>_pretrain_config`.
std::string defaultBridgeRecipe(const Recipe &R);

/// The environment a launch sets: the export's for the bridge engine; for
/// moerun (the CPU backend) one BLAS thread per rank.
std::vector<EnvVar> launchEnvironment(const Recipe &R, const BridgeExport &E, const LaunchOptions &O);

std::string renderSbatch(const Recipe &R, const BridgeExport &E, const LaunchOptions &O);

/// One command line (`mpirun -np N ...`), with `-x` for each variable of the
/// environment, ready for a shell.
std::string renderMpirun(const Recipe &R, const BridgeExport &E, const LaunchOptions &O);

} // namespace bridge
} // namespace moec

#endif
