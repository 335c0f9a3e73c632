//===- Timeline.cpp - Pipeline schedule laid out in time ------------------===//
#include "moec/Report/Timeline.h"

#include <algorithm>
#include <fmt/format.h>

using namespace moec;

OpDurations OpDurations::uniform(int64_t VirtualStages) {
  OpDurations D;
  D.Forward.assign(size_t(std::max<int64_t>(VirtualStages, 1)), 1.0);
  D.Backward.assign(size_t(std::max<int64_t>(VirtualStages, 1)), 2.0);
  return D;
}

llvm::Expected<Timeline> moec::layOutSchedule(const PipelinePlan &P, const OpDurations &D) {
  const int64_t PP = P.PP, V = P.PP * P.VPP, M = P.Microbatches;
  if (PP < 1 || P.VPP < 1 || M < 1 || int64_t(P.Schedule.size()) != PP)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "the plan has no schedule for its %lld ranks",
                                   (long long)PP);
  if (int64_t(D.Forward.size()) != V || int64_t(D.Backward.size()) != V)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "op durations for %zu virtual stages, the plan has %lld", D.Forward.size(),
                                   (long long)V);
  // Finish times of (micro batch, virtual stage); negative: not run yet.
  std::vector<double> FwdDone(size_t(M * V), -1), BwdDone(size_t(M * V), -1);
  auto Slot = [&](int64_t Mb, int64_t VS) { return size_t(Mb * V + VS); };

  Timeline T;
  T.PerRank.resize(size_t(PP));
  std::vector<size_t> Next(size_t(PP), 0);
  std::vector<double> Free(size_t(PP), 0);
  size_t Total = 0, Placed = 0;
  for (const auto &Ops : P.Schedule)
    Total += Ops.size();
  for (int64_t R = 0; R < PP; ++R)
    T.PerRank[size_t(R)].reserve(P.Schedule[size_t(R)].size());

  while (Placed < Total) {
    bool Progress = false;
    for (int64_t R = 0; R < PP; ++R) {
      const auto &Ops = P.Schedule[size_t(R)];
      size_t &I = Next[size_t(R)];
      for (; I < Ops.size(); ++I) {
        const ScheduledOp &Op = Ops[I];
        int64_t VS = P.virtualStage(R, Op.Chunk);
        if (Op.Microbatch < 0 || Op.Microbatch >= M || VS < 0 || VS >= V)
          return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "rank %lld runs micro batch %lld of chunk %lld, outside the plan",
                                         (long long)R, (long long)Op.Microbatch, (long long)Op.Chunk);
        double Ready = 0;
        if (Op.K == ScheduledOp::Forward) {
          if (VS > 0)
            Ready = FwdDone[Slot(Op.Microbatch, VS - 1)];
        } else {
          Ready = VS + 1 < V ? BwdDone[Slot(Op.Microbatch, VS + 1)] : FwdDone[Slot(Op.Microbatch, VS)];
        }
        if (Ready < 0)
          break; // waits for another rank
        double Start = std::max(Free[size_t(R)], Ready);
        double End = Start + (Op.K == ScheduledOp::Forward ? D.Forward[size_t(VS)] : D.Backward[size_t(VS)]);
        (Op.K == ScheduledOp::Forward ? FwdDone : BwdDone)[Slot(Op.Microbatch, VS)] = End;
        Free[size_t(R)] = End;
        T.PerRank[size_t(R)].push_back({Op, Start, End});
        ++Placed;
        Progress = true;
      }
    }
    if (!Progress)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "the schedule deadlocks after %zu of %zu ops",
                                     Placed, Total);
  }
  double Busy = 0;
  for (int64_t R = 0; R < PP; ++R) {
    T.Makespan = std::max(T.Makespan, Free[size_t(R)]);
    for (const TimedOp &O : T.PerRank[size_t(R)])
      Busy += O.End - O.Start;
  }
  if (T.Makespan > 0)
    T.IdleFraction = 1 - Busy / (double(PP) * T.Makespan);
  return T;
}
