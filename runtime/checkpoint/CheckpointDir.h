//===- checkpoint/CheckpointDir.h - A checkpoint directory ------*- C++ -*-===//
//
// The directory that `moerun --save DIR` writes and `--load DIR` reads
// (docs/runtime.md, "Checkpoints"):
//
//   DIR/latest_checkpointed_iteration.txt   the step of the newest whole checkpoint
//   DIR/iter_0000010/manifest.json          written last: step, data position,
//                                           layout, optimizer, every tensor's file
//   DIR/iter_0000010/tensors-00003.safetensors   the full tensors world rank 3 owns
//
// (the names of Megatron-LM's checkpoints, megatron/training/checkpointing.py).
// Every tensor is stored whole (tensor-parallel shards gathered, the
// distributed optimizer's moment shards gathered), so a checkpoint loads
// under any layout of the same model.
//
// A save is atomic: the ranks write into DIR/iter_N.partial, the writer
// fsyncs each file, then rank 0 writes the manifest, fsyncs the directory,
// renames it to DIR/iter_N, fsyncs DIR, and only then replaces the latest
// file (write to a temporary, fsync, rename). A process killed at any moment
// leaves the latest file naming a checkpoint that is whole; a stale
// .partial directory is removed by the next save of that step.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_CHECKPOINT_CHECKPOINTDIR_H
#define MOERT_CHECKPOINT_CHECKPOINTDIR_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moert {

/// What a checkpoint says about itself (manifest.json).
struct CheckpointManifest {
  static constexpr int Version = 1;
  int64_t Step = 0;            ///< training steps done
  int64_t ConsumedSamples = 0; ///< the data position: samples trained on
  uint64_t Seed = 0;           ///< of the initial weights and the mock data
  std::string Recipe, RecipeHash;
  /// The layout it was saved under, by name (tp, cp, ep, etp, pp, vpp, dp),
  /// and whether the optimizer was distributed: for messages, not for loading.
  std::map<std::string, int64_t> Layout;
  bool DistributedOptimizer = false;
  int64_t OptimizerSteps = 0; ///< Adam's t (bias correction)
  /// Every tensor: its global name, full shape and the file that holds it.
  struct Tensor {
    std::vector<int64_t> Shape;
    std::string File;
  };
  std::map<std::string, Tensor> Tensors;

  std::string toJSON() const;
  /// False with Error set when Text is not a manifest of this version.
  static bool parse(const std::string &Text, CheckpointManifest &Out, std::string &Error);
};

/// The tensor names of a checkpoint: a parameter's value is stored under its
/// own name, Adam's moments under these prefixes (PyTorch's state names).
inline const char *const ExpAvgPrefix = "optimizer.exp_avg.";
inline const char *const ExpAvgSqPrefix = "optimizer.exp_avg_sq.";

/// "iter_0000010".
std::string checkpointDirName(int64_t Step);
/// "tensors-00003.safetensors".
std::string tensorFileName(int Rank);

/// DIR/iter_N.partial, where a save of step N is written.
std::string checkpointStagingPath(const std::string &Dir, int64_t Step);

/// Creates DIR (and parents) and an empty DIR/iter_N.partial in Staging,
/// removing a stale one. Rank 0 only, before any rank writes.
bool beginCheckpoint(const std::string &Dir, int64_t Step, std::string &Staging, std::string &Error);

/// Rank 0, after every rank's tensor file is in Staging: reads the files'
/// headers into M.Tensors, writes the manifest, and makes the checkpoint the
/// latest as described above; then removes the oldest checkpoints beyond
/// the newest Keep (Keep = 0: keep all).
bool commitCheckpoint(const std::string &Dir, const std::string &Staging, CheckpointManifest M, int Keep,
                      std::string &Error);

/// The latest whole checkpoint of Dir: Found = false (and true returned)
/// when Dir or its latest file does not exist; false with Error set when the
/// latest file or the manifest it points to is damaged.
bool findLatestCheckpoint(const std::string &Dir, bool &Found, std::string &Path, CheckpointManifest &M,
                          std::string &Error);

} // namespace moert

#endif
