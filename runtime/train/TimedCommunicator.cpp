//===- train/TimedCommunicator.cpp - Communication time of a step
//----------===//
#include "train/TimedCommunicator.h"

#include <chrono>

using namespace moert;

namespace {

/// Adds the lifetime of the scope to the clock.
class Timed {
public:
  explicit Timed(CommClock &Clock) : Clock(Clock), Start(std::chrono::steady_clock::now()) {}
  ~Timed() {
    Clock.Seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - Start).count();
    ++Clock.Calls;
  }

private:
  CommClock &Clock;
  std::chrono::steady_clock::time_point Start;
};

class TimedRequest final : public Request {
public:
  TimedRequest(std::unique_ptr<Request> Inner, CommClock &Clock) : Inner(std::move(Inner)), Clock(Clock) {}
  void wait() override {
    Timed T(Clock);
    Inner->wait();
  }

private:
  std::unique_ptr<Request> Inner;
  CommClock &Clock;
};

} // namespace

void TimedCommunicator::doAllReduceSum(void *Data, size_t Count, DType T) {
  Timed Scope(Clock);
  Inner.allReduceSum(Data, Count, T);
}
void TimedCommunicator::doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) {
  Timed Scope(Clock);
  Inner.reduceScatterSum(In, Out, CountPerRank, T);
}
void TimedCommunicator::doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) {
  Timed Scope(Clock);
  Inner.allGather(In, Out, CountPerRank, T);
}
void TimedCommunicator::doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts,
                                    const std::vector<size_t> &SendOffsets, void *Recv,
                                    const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                                    DType T) {
  Timed Scope(Clock);
  Inner.allToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets, T);
}
void TimedCommunicator::doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) {
  Timed Scope(Clock);
  Inner.allToAll(Send, Recv, CountPerRank, T);
}
void TimedCommunicator::doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount,
                                   int Source, DType T) {
  Timed Scope(Clock);
  Inner.sendRecv(Send, SendCount, Dest, Recv, RecvCount, Source, T);
}
void TimedCommunicator::doSend(const void *Data, size_t Count, int Dest, DType T) {
  Timed Scope(Clock);
  Inner.send(Data, Count, Dest, T);
}
void TimedCommunicator::doRecv(void *Data, size_t Count, int Source, DType T) {
  Timed Scope(Clock);
  Inner.recv(Data, Count, Source, T);
}
std::unique_ptr<Request> TimedCommunicator::doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) {
  std::unique_ptr<Request> R;
  {
    Timed Scope(Clock);
    R = Inner.isend(Data, Count, Dest, Tag, T);
  }
  return std::make_unique<TimedRequest>(std::move(R), Clock);
}
std::unique_ptr<Request> TimedCommunicator::doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) {
  std::unique_ptr<Request> R;
  {
    Timed Scope(Clock);
    R = Inner.irecv(Data, Count, Source, Tag, T);
  }
  return std::make_unique<TimedRequest>(std::move(R), Clock);
}
void TimedCommunicator::broadcast(void *Bytes, size_t Size, int Root) {
  Timed T(Clock);
  Inner.broadcast(Bytes, Size, Root);
}
void TimedCommunicator::barrier() {
  Timed T(Clock);
  Inner.barrier();
}
