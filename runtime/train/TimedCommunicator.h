//===- train/TimedCommunicator.h - Communication time of a step
//------------===//
//
// A Communicator decorator that forwards every call to the communicator it
// wraps and adds the wall time spent inside the call (for non-blocking
// requests: inside wait()) to a clock shared by all the groups of a rank.
// The trainer wraps every process group with one, so a step's time splits
// into communication (time inside communicator calls, waiting for peers
// included) and the rest (compute).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TRAIN_TIMEDCOMMUNICATOR_H
#define MOERT_TRAIN_TIMEDCOMMUNICATOR_H

#include "comm/Communicator.h"

namespace moert {

/// Seconds accumulated by the TimedCommunicators that share it.
struct CommClock {
  double Seconds = 0;
  int64_t Calls = 0;
};

class TimedCommunicator final : public Communicator {
public:
  TimedCommunicator(Communicator &Inner, CommClock &Clock) : Inner(Inner), Clock(Clock) {}

  int rank() const override { return Inner.rank(); }
  int size() const override { return Inner.size(); }
  const std::string &name() const override { return Inner.name(); }

  void allReduceSum(float *Data, size_t Count) override;
  void reduceScatterSum(const float *In, float *Out, size_t CountPerRank) override;
  void allGather(const float *In, float *Out, size_t CountPerRank) override;
  void allToAllV(const float *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 float *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) override;
  void allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) override;
  void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) override;
  void send(const float *Data, size_t Count, int Dest) override;
  void recv(float *Data, size_t Count, int Source) override;
  std::unique_ptr<Request> isend(const float *Data, size_t Count, int Dest, int Tag) override;
  std::unique_ptr<Request> irecv(float *Data, size_t Count, int Source, int Tag) override;
  void broadcast(void *Bytes, size_t Size, int Root) override;
  void barrier() override;

private:
  Communicator &Inner;
  CommClock &Clock;
};

} // namespace moert

#endif
