//===- parallel/tp/SequenceParallelLinear.h - TP linears with SP ----------===//
//
// Megatron-style tensor parallelism with sequence parallelism over the tp
// group. Between blocks every tp rank holds a contiguous sequence shard: rank t
// owns rows [t * N / TP, (t + 1) * N / TP) of the N local tokens (sequence
// major). A column-parallel linear all-gathers its input over tp and
// multiplies by this rank's column slice of W; a row-parallel linear multiplies
// its (feature-split) input by this rank's row slice of W and reduce-scatters
// the partial sums back to sequence shards. Backward swaps the two
// collectives: the column-parallel input gradient is reduce-scattered, the
// row-parallel output gradient is all-gathered.
//
// Weights are [in, out] row-major. A column-parallel shard is the column
// range [t * out / TP, (t + 1) * out / TP) of the full matrix; a row-parallel
// shard is the row range [t * in / TP, (t + 1) * in / TP).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_TP_SEQUENCEPARALLELLINEAR_H
#define MOERT_PARALLEL_TP_SEQUENCEPARALLELLINEAR_H

#include "comm/Communicator.h"
#include "kernels/Backend.h"
#include "kernels/host/Tensor.h"

#include <optional>
#include <vector>

namespace moert {

/// The whole sequence of a shard's group, for the operations that read it:
/// the shard itself on a group of one, so that they read the caller's array
/// (and whatever copy of it a backend holds), else gathered into storage
/// the current backend holds as its own, in fp32, while this lives
/// (HeldArray::BackendOnly, Wide): on a group with a device counterpart it
/// never crosses. Only backend operations may read it; where products alone
/// do (Readers), the gather moves their operands' precision.
class WholeSequence {
public:
  WholeSequence(Communicator &Tp, const Tensor &XShard, ReadBy Readers);
  const Tensor &get() const { return Gathered ? Storage : Shard; }

private:
  const Tensor &Shard;
  bool Gathered;
  Tensor Storage;
  std::optional<HeldArrays> Hold; // released before Storage is freed
};

/// Partial sums over the whole sequence of Shape, made by backend
/// operations and read only by the reduce-scatter that follows: the
/// current backend's own, in fp32, while this lives (HeldArray::Wide), so
/// that on a group with a device counterpart they never cross.
class PartialSums {
public:
  explicit PartialSums(std::vector<int64_t> Shape);
  Tensor &get() { return Sums; }

private:
  Tensor Sums;
  std::optional<HeldArrays> Hold; // released before Sums is freed
};

/// [N / TP, C] sequence shard -> [N, C], shards in tp rank order (on the
/// current backend: ComputeBackend::gatherActivations).
Tensor gatherSequence(Communicator &Tp, const Tensor &Shard);
/// [N, C] partial sums -> [N / TP, C]: the tp sum of this rank's row range
/// (Partial itself on a group of one).
Tensor reduceScatterSequence(Communicator &Tp, Tensor Partial);
/// The same into Shard, whose storage stays where it has the shard's shape
/// already (an array held on the backend before it is written).
void reduceScatterSequence(Communicator &Tp, const Tensor &Partial, Tensor &Shard);

/// Y = X W for X [M, in] and W [in, out].
Tensor matmul(const Tensor &X, const Tensor &W);
/// The same into Y, whose storage stays where it has the product's shape
/// already (an array held on the backend before it is written).
void matmul(const Tensor &X, const Tensor &W, Tensor &Y);
/// Backward of Y = X W: DW += X^T DY; DX = DY W^T (Beta = 1 accumulates into
/// DX, which must then have the right shape; with Beta = 0 its storage stays
/// where it has the right shape already, as matmul's does).
void matmulBackward(const Tensor &X, const Tensor &W, const Tensor &DY, Tensor &DW, Tensor &DX, float Beta = 0.0f);
/// matmulBackward's DW += X^T DY alone, where X's gradient has no reader (a
/// vision tower's pixels).
void matmulWeightGradient(const Tensor &X, const Tensor &DY, Tensor &DW);

/// Column-parallel linears sharing one input: gathers XShard over tp once and
/// returns X W_i for every weight.
std::vector<Tensor> columnParallelForward(Communicator &Tp, const Tensor &XShard,
                                          const std::vector<const Tensor *> &Ws);
/// The same into Ys, a product each (as matmul's Y).
void columnParallelForward(Communicator &Tp, const Tensor &XShard, const std::vector<const Tensor *> &Ws,
                           const std::vector<Tensor *> &Ys);
/// Backward: DW_i += X^T DY_i (X gathered again unless XFull is given) and
/// returns the input-gradient shard, reduce-scattered sum_i DY_i W_i^T.
Tensor columnParallelBackward(Communicator &Tp, const Tensor &XShard, const Tensor *XFull,
                              const std::vector<const Tensor *> &Ws, const std::vector<const Tensor *> &DYs,
                              const std::vector<Tensor *> &DWs);
/// The same into DXShard: on a group of one, into its own storage where it
/// has the input's shape already (so that a hold on it keeps the sum on the
/// backend; it is zeroed there first).
void columnParallelBackward(Communicator &Tp, const Tensor &XShard, const Tensor *XFull,
                            const std::vector<const Tensor *> &Ws, const std::vector<const Tensor *> &DYs,
                            const std::vector<Tensor *> &DWs, Tensor &DXShard);

/// Row-parallel linear: X [N, in / TP] times the row shard W [in / TP, out],
/// reduce-scattered to [N / TP, out].
Tensor rowParallelForward(Communicator &Tp, const Tensor &X, const Tensor &W);
/// The same into YShard (storage kept where it has the right shape).
void rowParallelForward(Communicator &Tp, const Tensor &X, const Tensor &W, Tensor &YShard);
/// Backward: gathers DYShard, DW += X^T DY, returns DX = DY W^T [N, in / TP].
Tensor rowParallelBackward(Communicator &Tp, const Tensor &X, const Tensor &W, const Tensor &DYShard, Tensor &DW);
/// The same into DX (storage kept where it has the right shape).
void rowParallelBackward(Communicator &Tp, const Tensor &X, const Tensor &W, const Tensor &DYShard, Tensor &DW,
                         Tensor &DX);

/// This rank's slices of a SwiGLU MLP split Megatron's way: Gate and Up
/// [in, ffn / TP] column-parallel, Down [ffn / TP, in] row-parallel.
struct ParallelMlpWeights {
  const Tensor *Gate = nullptr, *Up = nullptr, *Down = nullptr;
};

/// The MLP as one backend operation (ComputeBackend::mlpForward) on the
/// gathered sequence: writes G, U and Act [N, ffn / TP] and the
/// reduce-scattered output shard into Y, unless Y is null (a recompute needs
/// only the products); on a group of one, into Y's own storage where it has
/// the output's shape already (so that a hold on it keeps the output on the
/// backend). Where KeepFor is not null, the products stay on the backend
/// (HeldArray::BackendOnly: their host values are unspecified), G and U
/// (which the backward reads) kept under that key
/// (ComputeBackend::keepArrays) until the caller releases them.
void parallelMlpForward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, Tensor &G, Tensor &U,
                        Tensor &Act, Tensor *Y, const void *KeepFor = nullptr);
/// Backward: gathers DYShard and XShard again (Megatron keeps the shard),
/// adds the weight gradients (DWeights in Gate, Up, Down order) and returns
/// the reduce-scattered input-gradient shard.
Tensor parallelMlpBackward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, const Tensor &G,
                           const Tensor &U, const Tensor &Act, const Tensor &DYShard,
                           const std::vector<Tensor *> &DWeights);
/// The same into DXShard: on a group of one, into its own storage where it
/// has the input's shape already (so that a hold on it keeps the gradient
/// on the backend).
void parallelMlpBackward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, const Tensor &G,
                         const Tensor &U, const Tensor &Act, const Tensor &DYShard,
                         const std::vector<Tensor *> &DWeights, Tensor &DXShard);

} // namespace moert

#endif
