//===- parallel/dp/GradientReducer.h - Bucketed gradient reduction --------===//
//
// After the backward passes of a step every rank holds gradients of its own
// micro batches only. Before the optimizer step each gradient is summed over
// the ranks that hold the same parameter shard but saw other tokens, by
// ParamKind (model/Model.h):
//
//   Dense                       summed over dp-cp
//   SequenceParallelReplicated  summed over tp (each tp rank saw a sequence
//                               shard), then over dp-cp
//   Expert                      summed over edp (the ranks holding the same
//                               experts)
//
// Gradients are packed into one flat buffer per group, a bucket, so a step
// costs one collective per group instead of one per tensor. Gradients are
// summed, not averaged: the loss scale (ModelOptions::CeScale, AuxScale)
// already makes the sum the gradient of the global-batch mean.
//
// Every member of a group must hold the same parameters of that group's
// kinds in the same order and shapes (true of replicas), so the buckets line
// up element for element.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_DP_GRADIENTREDUCER_H
#define MOERT_PARALLEL_DP_GRADIENTREDUCER_H

#include "comm/Communicator.h"
#include "kernels/Backend.h"
#include "model/Model.h"

#include <cstddef>
#include <vector>

namespace moert {

/// The groups gradients are summed over. Never null: unused dimensions are
/// groups of one.
struct GradientGroups {
  Communicator *DpCp = nullptr; ///< Dense and SequenceParallelReplicated
  Communicator *Tp = nullptr;   ///< SequenceParallelReplicated, before dp-cp
  Communicator *Edp = nullptr;  ///< Expert
};

/// Parameters packed back to back, in the order given, into one flat buffer
/// reduced over one group; padded with zeros to a multiple of the group size
/// so it splits into equal shards for reduce-scatter.
struct GradBucket {
  struct Slot {
    Parameter *Param;
    size_t Offset; ///< first element in the flat buffer
    size_t Numel;
  };
  Communicator *Group = nullptr;
  std::vector<Slot> Slots;
  size_t Numel = 0;  ///< elements of all slots
  size_t Padded = 0; ///< Numel rounded up to a multiple of Group->size()
  std::vector<float> Flat;
  /// What packs, unpacks and reduces, so that gradients, values and the
  /// bucket itself may be resident on it (ComputeBackend::makeResident).
  ComputeBackend *Compute = nullptr;

  bool empty() const { return Numel == 0; }
  size_t shardSize() const { return Padded / size_t(Group->size()); }
  /// This rank's shard is [shardBegin(), shardBegin() + shardSize()).
  size_t shardBegin() const { return size_t(Group->rank()) * shardSize(); }
  /// Gradients into Flat (padding zeroed), and back.
  void packGrads();
  void unpackGrads();
  /// Parameter values into Flat, and back.
  void packValues();
  void unpackValues();
};

class GradientReducer {
public:
  /// Params: every parameter this rank updates (all pipeline chunks it
  /// holds). Each Grad must have its Value's element count. Compute: the
  /// backend the gradients may be resident on.
  GradientReducer(std::vector<Parameter *> Params, const GradientGroups &Groups,
                  ComputeBackend &Compute = hostBackend());

  /// Sums every Parameter::Grad in place over its group(s): at most one
  /// all-reduce on tp, one on dp-cp and one on edp.
  void allReduce();

  /// For the distributed optimizer: SequenceParallelReplicated gradients are
  /// all-reduced over tp (in place in Parameter::Grad), then the dp-cp and edp
  /// buckets are reduce-scattered; afterwards dpCpShard() / edpShard() hold
  /// this rank's shard of the summed buckets (arrays sized once, so that
  /// they may be resident) and the other elements of Parameter::Grad are
  /// not reduced. A bucket whose group is of one rank
  /// (inPlace) is its own sum: its shard stays empty, and the gradients are
  /// read where they lie, in Parameter::Grad.
  void reduceScatter();
  static bool inPlace(const GradBucket &B) { return B.Group->size() == 1; }
  std::vector<float> &dpCpShard() { return DpCpShard; }
  std::vector<float> &edpShard() { return EdpShard; }

  /// Tp holds the SequenceParallelReplicated parameters; DpCp the Dense and
  /// SequenceParallelReplicated ones; Edp the Expert ones.
  GradBucket &tpBucket() { return Tp; }
  GradBucket &dpCpBucket() { return DpCp; }
  GradBucket &edpBucket() { return Edp; }
  const GradientGroups &groups() const { return Groups; }

private:
  GradientGroups Groups;
  GradBucket Tp, DpCp, Edp;
  std::vector<float> DpCpShard, EdpShard;
};

} // namespace moert

#endif
