//===- parallel/pp/PipelineExecutor.cpp - Runs a pipeline rank's schedule --===//
#include "parallel/pp/PipelineExecutor.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace moert {

PipelineStage::~PipelineStage() = default;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

[[noreturn]] void scheduleError(const Communicator &Pp, const char *What, int64_t Mb, int Chunk) {
  // A schedule that breaks these rules would hang or corrupt data: refuse it.
  std::fprintf(stderr, "moerun: pp rank %d: invalid pipeline schedule: %s (micro batch %lld, chunk %d)\n", Pp.rank(),
               What, static_cast<long long>(Mb), Chunk);
  std::abort();
}
} // namespace

PipelineExecutor::PipelineExecutor(Communicator &Pp, int Vpp, PipelineStage &Stage, ComputeBackend &Compute)
    : Pp(Pp), Rank(Pp.rank()), Size(Pp.size()), Vpp(Vpp), Stage(Stage), Compute(Compute) {}

int PipelineExecutor::tagFor(int64_t Mb, int Chunk, int Vpp, bool Backward) {
  constexpr int64_t TagBound = 32767; // MPI guarantees MPI_TAG_UB >= 32767
  int64_t Key = (Mb * Vpp + Chunk) * 2 + (Backward ? 1 : 0);
  return int(Key % TagBound);
}

Tensor PipelineExecutor::receive(int64_t Mb, int Chunk, Direction Dir, int Peer) {
  if (Peer == Rank) {
    auto It = Local.find({Mb, Chunk, Dir});
    if (It == Local.end())
      scheduleError(Pp,
                    Dir == Fwd ? "forward before its input was produced" : "backward before the next stage's backward",
                    Mb, Chunk);
    Tensor T = std::move(It->second);
    Local.erase(It);
    return T;
  }
  // Post the receives of everything Peer sends here before this message,
  // in its order, then this one's.
  const MessageKey Key{Mb, Chunk, Dir};
  std::deque<MessageKey> &Queue = Unposted[Peer];
  while (!Posted.count(Key)) {
    if (Queue.empty())
      scheduleError(Pp, "a receive that the neighbour's schedule never sends", Mb, Chunk);
    auto [QMb, QChunk, QDir] = Queue.front();
    Transfer R;
    R.Data = Tensor(Stage.activationShape(QMb, QChunk));
    R.Req = Compute.receiveActivations(R.Data.data(), R.Data.numel(), Peer, tagFor(QMb, QChunk, Vpp, QDir == Bwd), Pp);
    Posted.emplace(Queue.front(), std::move(R));
    Queue.pop_front();
  }
  auto It = Posted.find(Key);
  double Start = now();
  It->second.Req->wait();
  Stats.CommSeconds += now() - Start;
  Tensor T = std::move(It->second.Data);
  Posted.erase(It);
  return T;
}

std::deque<PipelineExecutor::MessageKey> PipelineExecutor::sendsToMe(int Peer,
                                                                     const std::vector<PipelineOp> &PeerOps) const {
  // What runStep sends, walked on the peer's side of the ring.
  const int PeerPrev = (Peer + Size - 1) % Size, PeerNext = (Peer + 1) % Size;
  std::deque<MessageKey> Order;
  for (const PipelineOp &Op : PeerOps) {
    const int C = Op.Chunk, V = virtualStageOf(Peer, C);
    if (Op.K != PipelineOp::Backward) {
      if (V != Size * Vpp - 1 && PeerNext == Rank)
        Order.emplace_back(Op.Microbatch, successorChunk(Peer, C), Fwd);
    } else if (V != 0 && PeerPrev == Rank) {
      Order.emplace_back(Op.Microbatch, predecessorChunk(Peer, C), Bwd);
    }
  }
  return Order;
}

void PipelineExecutor::send(Tensor Data, int64_t Mb, int PeerChunk, Direction Dir, int Peer) {
  if (Peer == Rank) {
    Local[{Mb, PeerChunk, Dir}] = std::move(Data);
    return;
  }
  Transfer S;
  S.Data = std::move(Data);
  S.Req = Compute.sendActivations(S.Data.data(), S.Data.numel(), Peer, tagFor(Mb, PeerChunk, Vpp, Dir == Bwd), Pp);
  Pending.push_back(std::move(S));
}

void PipelineExecutor::waitSends() {
  double Start = now();
  for (Transfer &S : Pending)
    S.Req->wait();
  Pending.clear();
  Stats.CommSeconds += now() - Start;
}

void PipelineExecutor::runStep(const PipelineSchedule &Schedules, const std::function<void()> &OnOp) {
  Stats = PipelineStepStats();
  const int Prev = (Rank + Size - 1) % Size, Next = (Rank + 1) % Size;
  if (Schedules.size() != size_t(Size))
    scheduleError(Pp, "the schedules are not one per pipeline rank", 0, 0);
  const std::vector<PipelineOp> &Ops = Schedules[size_t(Rank)];
  Unposted.clear();
  Posted.clear();
  if (Size > 1)
    for (int Peer : {Prev, Next})
      if (!Unposted.count(Peer))
        Unposted[Peer] = sendsToMe(Peer, Schedules[size_t(Peer)]);
  std::set<std::pair<int64_t, int>> InFlight;
  for (const PipelineOp &Op : Ops) {
    const int C = Op.Chunk;
    if (C < 0 || C >= Vpp)
      scheduleError(Pp, "chunk out of range", Op.Microbatch, C);
    // The neighbours' chunks: v - 1 and v + 1 in virtual-stage order.
    const int PrevChunk = predecessorChunk(Rank, C), NextChunk = successorChunk(Rank, C);
    if (Op.K != PipelineOp::Backward) {
      if (Op.K == PipelineOp::Forward && !InFlight.insert({Op.Microbatch, C}).second)
        scheduleError(Pp, "forward run twice", Op.Microbatch, C);
      Tensor Input;
      bool First = isFirstVirtualStage(C);
      if (!First)
        Input = receive(Op.Microbatch, C, Fwd, Prev);
      double Start = now();
      Tensor Output = Stage.forward(Op.Microbatch, C, First ? nullptr : &Input);
      Stats.ComputeSeconds += now() - Start;
      if (!isLastVirtualStage(C))
        send(std::move(Output), Op.Microbatch, NextChunk, Fwd, Next);
      Stats.PeakInFlight = std::max<int64_t>(Stats.PeakInFlight, int64_t(InFlight.size()));
    } else {
      if (!InFlight.erase({Op.Microbatch, C}))
        scheduleError(Pp, "backward without a forward", Op.Microbatch, C);
      Tensor OutGrad;
      bool Last = isLastVirtualStage(C);
      if (!Last)
        OutGrad = receive(Op.Microbatch, C, Bwd, Next);
      double Start = now();
      Tensor InGrad = Stage.backward(Op.Microbatch, C, Last ? nullptr : &OutGrad);
      Stats.ComputeSeconds += now() - Start;
      if (!isFirstVirtualStage(C))
        send(std::move(InGrad), Op.Microbatch, PrevChunk, Bwd, Prev);
    }
    if (OnOp)
      OnOp();
  }
  waitSends();
  for (const auto &[Peer, Queue] : Unposted)
    if (!Queue.empty())
      scheduleError(Pp, "the neighbour's schedule sends a message no op here receives", std::get<0>(Queue.front()),
                    std::get<1>(Queue.front()));
  if (!Posted.empty())
    scheduleError(Pp, "a message was received ahead that no op here used", std::get<0>(Posted.begin()->first),
                  std::get<1>(Posted.begin()->first));
  if (!InFlight.empty())
    scheduleError(Pp, "step ended with forwards whose backward never ran", InFlight.begin()->first,
                  InFlight.begin()->second);
  if (!Local.empty())
    scheduleError(Pp, "step ended with a tensor nobody received", std::get<0>(Local.begin()->first),
                  std::get<1>(Local.begin()->first));
}

} // namespace moert
