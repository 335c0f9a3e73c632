//===- train/TimedCommunicator.cpp - Communication time of a step
//----------===//
#include "train/TimedCommunicator.h"

#include <chrono>

using namespace moert;

namespace {

/// Adds the lifetime of the scope to the clock, under the part.
class Timed {
public:
  Timed(CommClock &Clock, CommPart Part) : Clock(Clock), Part(Part), Start(std::chrono::steady_clock::now()) {}
  ~Timed() {
    double Seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - Start).count();
    Clock.Seconds += Seconds;
    Clock.PartSeconds[size_t(Part)] += Seconds;
    ++Clock.Calls;
  }

private:
  CommClock &Clock;
  CommPart Part;
  std::chrono::steady_clock::time_point Start;
};

class TimedRequest final : public Request {
public:
  TimedRequest(std::unique_ptr<Request> Inner, CommClock &Clock, CommPart Part)
      : Inner(std::move(Inner)), Clock(Clock), Part(Part) {}
  void wait() override {
    Timed T(Clock, Part);
    Inner->wait();
  }

private:
  std::unique_ptr<Request> Inner;
  CommClock &Clock;
  CommPart Part;
};

} // namespace

CommPart moert::commPartOfGroup(const std::string &Kind) {
  if (Kind == "tp" || Kind == "etp")
    return CommPart::Tensor;
  if (Kind == "cp")
    return CommPart::Context;
  if (Kind == "ep" || Kind == "tp-cp")
    return CommPart::Expert;
  if (Kind == "pp")
    return CommPart::Pipeline;
  return CommPart::Data;
}

void TimedCommunicator::doAllReduceSum(void *Data, size_t Count, DType T) {
  Timed Scope(Clock, Part);
  Inner.allReduceSum(Data, Count, T);
}
void TimedCommunicator::doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) {
  Timed Scope(Clock, Part);
  Inner.reduceScatterSum(In, Out, CountPerRank, T);
}
void TimedCommunicator::doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) {
  Timed Scope(Clock, Part);
  Inner.allGather(In, Out, CountPerRank, T);
}
void TimedCommunicator::doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts,
                                    const std::vector<size_t> &SendOffsets, void *Recv,
                                    const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                                    DType T) {
  Timed Scope(Clock, Part);
  Inner.allToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets, T);
}
void TimedCommunicator::doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) {
  Timed Scope(Clock, Part);
  Inner.allToAll(Send, Recv, CountPerRank, T);
}
void TimedCommunicator::doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount,
                                   int Source, DType T) {
  Timed Scope(Clock, Part);
  Inner.sendRecv(Send, SendCount, Dest, Recv, RecvCount, Source, T);
}
void TimedCommunicator::doSend(const void *Data, size_t Count, int Dest, DType T) {
  Timed Scope(Clock, Part);
  Inner.send(Data, Count, Dest, T);
}
void TimedCommunicator::doRecv(void *Data, size_t Count, int Source, DType T) {
  Timed Scope(Clock, Part);
  Inner.recv(Data, Count, Source, T);
}
std::unique_ptr<Request> TimedCommunicator::doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) {
  std::unique_ptr<Request> R;
  {
    Timed Scope(Clock, Part);
    R = Inner.isend(Data, Count, Dest, Tag, T);
  }
  return std::make_unique<TimedRequest>(std::move(R), Clock, Part);
}
std::unique_ptr<Request> TimedCommunicator::doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) {
  std::unique_ptr<Request> R;
  {
    Timed Scope(Clock, Part);
    R = Inner.irecv(Data, Count, Source, Tag, T);
  }
  return std::make_unique<TimedRequest>(std::move(R), Clock, Part);
}
void TimedCommunicator::broadcast(void *Bytes, size_t Size, int Root) {
  Timed T(Clock, Part);
  Inner.broadcast(Bytes, Size, Root);
}
void TimedCommunicator::barrier() {
  Timed T(Clock, Part);
  Inner.barrier();
}
