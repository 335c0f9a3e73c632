//===- comm/ForwardingComm.h - A communicator that forwards every call ----===//
//
// The base of decorators that change a few operations of another group (a
// counter, a timer, a tag-dropping test double): every call goes to Inner
// unless a subclass overrides it.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_COMM_FORWARDINGCOMM_H
#define MOERT_COMM_FORWARDINGCOMM_H

#include "comm/Communicator.h"

namespace moert {

class ForwardingCommunicator : public Communicator {
public:
  /// Inner must outlive this.
  explicit ForwardingCommunicator(Communicator &Inner) : Inner(Inner) {}

  int rank() const override { return Inner.rank(); }
  int size() const override { return Inner.size(); }
  const std::string &name() const override { return Inner.name(); }
  void broadcast(void *Bytes, size_t Size, int Root) override { Inner.broadcast(Bytes, Size, Root); }
  void barrier() override { Inner.barrier(); }

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override { Inner.allReduceSum(Data, Count, T); }
  void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) override {
    Inner.reduceScatterSum(In, Out, CountPerRank, T);
  }
  void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) override {
    Inner.allGather(In, Out, CountPerRank, T);
  }
  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override {
    Inner.allToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets, T);
  }
  void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) override {
    Inner.allToAll(Send, Recv, CountPerRank, T);
  }
  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override {
    Inner.sendRecv(Send, SendCount, Dest, Recv, RecvCount, Source, T);
  }
  void doSend(const void *Data, size_t Count, int Dest, DType T) override { Inner.send(Data, Count, Dest, T); }
  void doRecv(void *Data, size_t Count, int Source, DType T) override { Inner.recv(Data, Count, Source, T); }
  std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) override {
    return Inner.isend(Data, Count, Dest, Tag, T);
  }
  std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) override {
    return Inner.irecv(Data, Count, Source, Tag, T);
  }

  Communicator &Inner;
};

} // namespace moert

#endif
