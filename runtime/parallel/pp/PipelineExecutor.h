//===- parallel/pp/PipelineExecutor.h - Runs a pipeline rank's schedule ----===//
//
// One training step of one pipeline rank: the plan's schedule for this rank
// (forwards and backwards of micro batches on model chunks, 1F1B or
// interleaved 1F1B) executed in order, with activations flowing to the next
// virtual stage and gradients to the previous one over the pp group.
//
// Virtual stages: chunk c on pp rank r is virtual stage v = c * PP + r. The
// successor of v is v + 1, on pp rank (r + 1) mod PP as chunk c + (r == PP-1);
// its predecessor the reverse. Virtual stage 0 has no input (it embeds
// tokens); the last one has no output gradient to receive (its loss starts
// the backward).
//
// Communication is non-blocking: an op posts its receive and waits for it
// (the data is needed now), but its send is only waited on before the step
// ends, so a rank is never blocked in a rendezvous send while its peer is
// blocked in one the other way (1F1B's steady state sends forward and
// backward between the same pair at once).
//
// Matching: NCCL has no tags, so a receive is matched with the sender's
// sends to this rank in posting order. The executor therefore reads its
// neighbours' schedules, derives the order in which each of them sends to
// this rank, and posts its receives in that order: a message needed now is
// received after every message its sender posted before it, which are kept
// until their ops run. Tags still encode (micro batch, chunk of the receiver,
// direction), so over MPI a mistake in that order cannot go unnoticed.
//
// Where the tensors travel is the compute backend's to say
// (ComputeBackend::sendActivations): between its device copies over the pp
// group's device counterpart, or the host's arrays over the pp group.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_PP_PIPELINEEXECUTOR_H
#define MOERT_PARALLEL_PP_PIPELINEEXECUTOR_H

#include "comm/Communicator.h"
#include "kernels/Backend.h"
#include "kernels/host/Tensor.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace moert {

/// One entry of a schedule: the forward or backward of micro batch
/// Microbatch on this rank's model chunk Chunk.
struct PipelineOp {
  /// ForwardOnly: a forward whose backward never runs (evaluation).
  enum Kind { Forward, Backward, ForwardOnly } K = Forward;
  int64_t Microbatch = 0;
  int Chunk = 0;
};

/// What the executor runs: the model chunks of this pipeline rank.
class PipelineStage {
public:
  virtual ~PipelineStage();
  /// Forward of micro batch Mb through chunk Chunk. Input is the previous
  /// virtual stage's output, or null on virtual stage 0. Returns the output
  /// sent to the next virtual stage (ignored on the last virtual stage, which
  /// computes the loss and may return an empty tensor). The stage may take
  /// Input's storage.
  virtual Tensor forward(int64_t Mb, int Chunk, Tensor *Input) = 0;
  /// Backward of micro batch Mb through chunk Chunk. OutGrad is the gradient
  /// of the chunk's output received from the next virtual stage, or null on
  /// the last virtual stage. Returns the gradient of the chunk's input (sent
  /// to the previous virtual stage; ignored on virtual stage 0). The stage
  /// may take OutGrad's storage.
  virtual Tensor backward(int64_t Mb, int Chunk, Tensor *OutGrad) = 0;
  /// The shape of the tensor flowing into Chunk for micro batch Mb (the
  /// previous virtual stage's output, and the gradient this chunk sends
  /// back). Both sides of a link must agree; a shape is asked of a chunk only
  /// when it receives.
  virtual std::vector<int64_t> activationShape(int64_t Mb, int Chunk) = 0;
};

/// Every pipeline rank's ops of one step, indexed by pipeline rank.
using PipelineSchedule = std::vector<std::vector<PipelineOp>>;

/// Where time went in the last step, for the step log.
struct PipelineStepStats {
  double ComputeSeconds = 0; ///< inside forward() and backward()
  double CommSeconds = 0;    ///< waiting for receives and sends
  int64_t PeakInFlight = 0;  ///< most forwards whose backward had not run yet
};

class PipelineExecutor {
public:
  /// Pp is this rank's pp group (group-local rank = pipeline rank); Vpp the
  /// model chunks per rank; Compute the backend the stage computes on,
  /// which moves its tensors.
  PipelineExecutor(Communicator &Pp, int Vpp, PipelineStage &Stage, ComputeBackend &Compute = hostBackend());

  /// Runs this rank's ops of Schedules in order; the other ranks' tell in
  /// which order the neighbours send. Every rank of the pp group must run
  /// the same step's schedules; returns when all sends have completed. OnOp
  /// (optional) is called after each op: a watchdog's heartbeat.
  void runStep(const PipelineSchedule &Schedules, const std::function<void()> &OnOp = nullptr);

  const PipelineStepStats &lastStats() const { return Stats; }

  int pipelineRank() const { return Rank; }
  int pipelineSize() const { return Size; }
  int virtualStage(int Chunk) const { return virtualStageOf(Rank, Chunk); }
  bool isFirstVirtualStage(int Chunk) const { return virtualStage(Chunk) == 0; }
  bool isLastVirtualStage(int Chunk) const { return virtualStage(Chunk) == Size * Vpp - 1; }

  /// The tag of a message received by Chunk for micro batch Mb; exposed for
  /// tests. Wraps below MPI's guaranteed tag bound (32767): messages whose
  /// tags collide are a whole step's worth of ops apart, long received.
  static int tagFor(int64_t Mb, int Chunk, int Vpp, bool Backward);

private:
  enum Direction { Fwd = 0, Bwd = 1 };
  /// A message: (micro batch, chunk of the receiver, direction).
  using MessageKey = std::tuple<int64_t, int, int>;
  /// A posted send or receive and the tensor it reads or fills, kept alive
  /// until it completes (the storage does not move with the Transfer).
  struct Transfer {
    Tensor Data;
    std::unique_ptr<Request> Req;
  };
  /// The ring as pipeline rank R walks it: chunk C there is virtual stage
  /// C * PP + R; its output goes to chunk successorChunk(R, C) of rank R + 1,
  /// its input gradient to chunk predecessorChunk(R, C) of rank R - 1.
  int virtualStageOf(int R, int Chunk) const { return Chunk * Size + R; }
  int successorChunk(int R, int Chunk) const { return Chunk + (R == Size - 1 ? 1 : 0); }
  int predecessorChunk(int R, int Chunk) const { return Chunk - (R == 0 ? 1 : 0); }
  /// The messages Peer's ops send to this rank, in the order it sends them.
  std::deque<MessageKey> sendsToMe(int Peer, const std::vector<PipelineOp> &PeerOps) const;

  Tensor receive(int64_t Mb, int Chunk, Direction Dir, int Peer);
  void send(Tensor Data, int64_t Mb, int PeerChunk, Direction Dir, int Peer);
  void waitSends();

  Communicator &Pp;
  int Rank, Size, Vpp;
  PipelineStage &Stage;
  ComputeBackend &Compute;
  std::vector<Transfer> Pending;
  /// PP = 1: the successor is this rank; tensors are handed over here.
  std::map<MessageKey, Tensor> Local;
  /// Per peer: the messages it will send here that have no receive posted
  /// yet, in its sending order; and the receives posted ahead of their op.
  std::map<int, std::deque<MessageKey>> Unposted;
  std::map<MessageKey, Transfer> Posted;
  PipelineStepStats Stats;
};

} // namespace moert

#endif
