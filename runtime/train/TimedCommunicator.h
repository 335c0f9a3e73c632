//===- train/TimedCommunicator.h - Communication time of a step
//------------===//
//
// A Communicator decorator that forwards every call to the communicator it
// wraps and adds the wall time spent inside the call (for non-blocking
// requests: inside wait()) to a clock shared by all the groups of a rank.
// The trainer wraps every process group with one, so a step's time splits
// into communication (time inside communicator calls, waiting for peers
// included) and the rest (compute), and the communication into the parallel
// dimensions the plan's predicted.breakdown_s prices (tp, cp, ep, dp, pp).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TRAIN_TIMEDCOMMUNICATOR_H
#define MOERT_TRAIN_TIMEDCOMMUNICATOR_H

#include "comm/Communicator.h"

#include <array>

namespace moert {

/// The parallel dimension whose traffic a process group carries.
enum class CommPart { Tensor, Context, Expert, Data, Pipeline };
constexpr size_t NumCommParts = 5;
/// The part of a plan's group kind: tp and etp carry a tensor-parallel
/// layer's activations; ep and tp-cp (the router's load statistics) the MoE
/// layer's routing; dp, dp-cp, edp, the embedding group and the world (the
/// gradient norm's reduction) synchronise gradients.
CommPart commPartOfGroup(const std::string &Kind);

/// Seconds accumulated by the TimedCommunicators that share it.
struct CommClock {
  double Seconds = 0;
  int64_t Calls = 0;
  std::array<double, NumCommParts> PartSeconds{}; ///< Seconds by CommPart
};

class TimedCommunicator final : public Communicator {
public:
  TimedCommunicator(Communicator &Inner, CommClock &Clock, CommPart Part) : Inner(Inner), Clock(Clock), Part(Part) {}

  int rank() const override { return Inner.rank(); }
  int size() const override { return Inner.size(); }
  const std::string &name() const override { return Inner.name(); }

  void broadcast(void *Bytes, size_t Size, int Root) override;
  void barrier() override;

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override;
  void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) override;
  void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) override;
  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override;
  void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) override;
  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override;
  void doSend(const void *Data, size_t Count, int Dest, DType T) override;
  void doRecv(void *Data, size_t Count, int Source, DType T) override;
  std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) override;
  std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) override;

private:
  Communicator &Inner;
  CommClock &Clock;
  CommPart Part;
};

} // namespace moert

#endif
