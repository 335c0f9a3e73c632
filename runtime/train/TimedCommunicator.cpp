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

void TimedCommunicator::allReduceSum(float *Data, size_t Count) {
  Timed T(Clock);
  Inner.allReduceSum(Data, Count);
}
void TimedCommunicator::reduceScatterSum(const float *In, float *Out, size_t CountPerRank) {
  Timed T(Clock);
  Inner.reduceScatterSum(In, Out, CountPerRank);
}
void TimedCommunicator::allGather(const float *In, float *Out, size_t CountPerRank) {
  Timed T(Clock);
  Inner.allGather(In, Out, CountPerRank);
}
void TimedCommunicator::allToAllV(const float *Send, const std::vector<size_t> &SendCounts,
                                  const std::vector<size_t> &SendOffsets, float *Recv,
                                  const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) {
  Timed T(Clock);
  Inner.allToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets);
}
void TimedCommunicator::allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) {
  Timed T(Clock);
  Inner.allToAll(Send, Recv, CountPerRank);
}
void TimedCommunicator::sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount,
                                 int Source) {
  Timed T(Clock);
  Inner.sendRecv(Send, SendCount, Dest, Recv, RecvCount, Source);
}
void TimedCommunicator::send(const float *Data, size_t Count, int Dest) {
  Timed T(Clock);
  Inner.send(Data, Count, Dest);
}
void TimedCommunicator::recv(float *Data, size_t Count, int Source) {
  Timed T(Clock);
  Inner.recv(Data, Count, Source);
}
std::unique_ptr<Request> TimedCommunicator::isend(const float *Data, size_t Count, int Dest, int Tag) {
  std::unique_ptr<Request> R;
  {
    Timed T(Clock);
    R = Inner.isend(Data, Count, Dest, Tag);
  }
  return std::make_unique<TimedRequest>(std::move(R), Clock);
}
std::unique_ptr<Request> TimedCommunicator::irecv(float *Data, size_t Count, int Source, int Tag) {
  std::unique_ptr<Request> R;
  {
    Timed T(Clock);
    R = Inner.irecv(Data, Count, Source, Tag);
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
