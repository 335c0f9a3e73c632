//===- comm/SelfComm.cpp - The group of one --------------------------------===//
#include "comm/Communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moert {

Communicator::~Communicator() = default;
Request::~Request() = default;
CommWorld::~CommWorld() = default;

namespace {

class DoneRequest final : public Request {
public:
  void wait() override {}
};

class SelfCommunicator final : public Communicator {
public:
  explicit SelfCommunicator(std::string Name) : Name(std::move(Name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string &name() const override { return Name; }
  void allReduceSum(float *, size_t) override {}
  void reduceScatterSum(const float *In, float *Out, size_t Count) override { copy(In, Out, Count); }
  void allGather(const float *In, float *Out, size_t Count) override { copy(In, Out, Count); }
  void allToAllV(const float *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 float *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) override {
    if (SendCounts[0] != RecvCounts[0])
      fail("allToAllV: send and receive counts differ");
    copy(Send + SendOffsets[0], Recv + RecvOffsets[0], SendCounts[0]);
  }
  void allToAll(const int64_t *Send, int64_t *Recv, size_t Count) override {
    if (Count)
      std::memmove(Recv, Send, Count * sizeof(int64_t));
  }
  void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) override {
    if (Dest < 0 && Source < 0)
      return;
    if (Dest != 0 || Source != 0 || SendCount != RecvCount)
      fail("sendRecv: a group of one can only exchange with itself");
    copy(Send, Recv, SendCount);
  }
  void send(const float *, size_t, int) override { fail("send: a group of one has no peer"); }
  void recv(float *, size_t, int) override { fail("recv: a group of one has no peer"); }
  std::unique_ptr<Request> isend(const float *, size_t, int, int) override {
    fail("isend: a group of one has no peer");
  }
  std::unique_ptr<Request> irecv(float *, size_t, int, int) override { fail("irecv: a group of one has no peer"); }
  void broadcast(void *, size_t, int) override {}
  void barrier() override {}

private:
  static void copy(const float *In, float *Out, size_t Count) {
    if (In != Out && Count)
      std::memmove(Out, In, Count * sizeof(float));
  }
  [[noreturn]] void fail(const char *What) {
    std::fprintf(stderr, "moerun: internal error in group '%s': %s\n", Name.c_str(), What);
    std::abort();
  }
  std::string Name;
};

} // namespace

std::unique_ptr<Communicator> createSelfCommunicator(std::string Name) {
  return std::make_unique<SelfCommunicator>(std::move(Name));
}

} // namespace moert
