//===- parallel/dp/AdamW.h - AdamW over data-parallel replicas ------------===//
//
// AdamW (Loshchilov & Hutter) with PyTorch's update order: decoupled weight
// decay p *= 1 - lr * wd, then p -= lr / (1 - b1^t) * m / (sqrt(v) /
// sqrt(1 - b2^t) + eps). Parameter::Value is the fp32 master weight; the
// moments m and v are fp32, and so is each element's update (as in torch's
// fused Adam). The update and the norm's sums of squares are operations of
// the compute backend (ComputeBackend::adamW, sumSquares), so that a GPU
// steps the parameters where they are resident.
//
// step() first sums the gradients (GradientReducer), then optionally clips
// them by the global norm, then updates. Two variants, equal within fp32
// rounding of the gradient sums:
//  * replicated (Distributed = false): gradients are all-reduced and every
//    replica updates its whole copy with its own moments;
//  * distributed (Distributed = true, ZeRO-1 / Megatron's distributed
//    optimizer): each group's bucket is reduce-scattered, every rank keeps the
//    moments of its shard only, updates that shard of the master weights and
//    all-gathers the updated values, so all replicas end equal.
//
// Global gradient norm: the square root of the sum of squares of every
// distinct gradient element of the model, across all pipeline stages, tp
// shards and experts, each counted once however many ranks replicate it. Each
// rank adds up the elements it owns and one all-reduce over the world (every
// rank of the job) sums them. Ownership of a reduced gradient element:
//  * replicated variant: a Dense element is owned by dp-cp rank 0, a
//    SequenceParallelReplicated one by tp rank 0 and dp-cp rank 0, an Expert
//    one by edp rank 0 (after reduction all members of those groups hold the
//    same value);
//  * distributed variant: the rank whose dp-cp or edp shard holds it, and for
//    SequenceParallelReplicated elements only on tp rank 0 (every tp rank
//    holds the same shard).
// So each element is counted exactly once on either variant provided the
// world is made of the stage x tp x dp-cp (and ep x edp) layout, as the plan's
// groups are. Clipping follows Megatron: gradients are multiplied by
// max_norm / (norm + 1e-6) when that is below 1.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_DP_ADAMW_H
#define MOERT_PARALLEL_DP_ADAMW_H

#include "parallel/dp/GradientReducer.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace moert {

struct AdamWOptions {
  double Lr = 1e-3;
  double Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8;
  double WeightDecay = 0.0;
  /// Megatron exempts 1-D parameters (norm weights, biases) from weight
  /// decay; true decays them too.
  bool DecayVectors = false;
  /// Clip the global gradient norm to this value; 0 disables clipping (the
  /// norm is still computed and returned).
  double ClipGradNorm = 0.0;
  /// Shard the moments and the update over each gradient group.
  bool Distributed = false;
};

/// Adam's two moments of one parameter, element for element of its Value
/// (this rank's tensor-parallel shard).
struct ParameterMoments {
  std::vector<float> ExpAvg, ExpAvgSq;
};

struct AdamWStepInfo {
  int64_t Step = 0;     ///< 1 for the first step
  double GradNorm = 0;  ///< global norm of the summed gradients, before clipping
  double ClipScale = 1; ///< factor the gradients were multiplied by
};

class AdamW {
public:
  /// Params: every parameter this rank updates (all its pipeline chunks).
  /// World: every rank of the job, for the global gradient norm.
  /// Compute: the backend that updates the elements and sums the norm's
  /// squares, where the state may be resident (stateArrays()).
  AdamW(std::vector<Parameter *> Params, const GradientGroups &Groups, Communicator &World, const AdamWOptions &Options,
        ComputeBackend &Compute = hostBackend());
  ~AdamW();
  AdamW(const AdamW &) = delete;
  AdamW &operator=(const AdamW &) = delete;

  /// Reduces this step's gradients and updates every parameter. Every rank of
  /// World calls it together. Afterwards Parameter::Grad holds the summed
  /// gradients in the replicated variant and is unspecified in the
  /// distributed one: call zeroGrads() before the next backward.
  AdamWStepInfo step();
  void zeroGrads();
  /// What the compute backend may keep from one step to the next
  /// (ComputeBackend::makeResident): the values, gradients and moments of
  /// every parameter whose gradient is summed where it lies (each of its
  /// kind's groups is of one rank, or has a device counterpart:
  /// GradientGroups) and that host code does not read
  /// (Parameter::ReadOnHost; a tied copy's gradient is summed on the host),
  /// and the buckets, shards and master values a device group sums and
  /// gathers. What a host communicator sums stays in host arrays.
  std::vector<HostArray> residentArrays();
  /// Adam's moments as the arrays they are (moments() and setMoments() ask
  /// the backend for them and give them back).
  std::vector<HostArray> stateArrays();

  /// The learning rate of the next steps (schedules change it per step).
  void setLr(double Lr) { Options.Lr = Lr; }
  const AdamWOptions &options() const { return Options; }
  int64_t steps() const { return Step; }
  /// Adam's t, the steps its bias correction counts (a resumed run's).
  void setSteps(int64_t T) { Step = T; }

  /// The moments of every parameter given to the constructor, in its order.
  /// In the distributed variant, each rank holds a shard of them: every rank
  /// of the dp-cp and edp groups calls this together and all get them whole.
  std::vector<ParameterMoments> moments();
  /// The inverse, without communication: each rank keeps its own part (all
  /// of it in the replicated variant). False when a size differs.
  bool setMoments(const std::vector<ParameterMoments> &Moments);
  /// Optimizer-state elements held by this rank (m and v), to show what the
  /// distributed variant saves.
  int64_t stateElements() const;

private:
  void setMomentsOnHost(const std::vector<ParameterMoments> &Moments);

  struct Impl;
  std::unique_ptr<Impl> P;
  AdamWOptions Options;
  int64_t Step = 0;
};

} // namespace moert

#endif
