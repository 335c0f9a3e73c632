//===- comm/SelfComm.cpp - The group of one --------------------------------===//
#include "comm/Communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moert {

Communicator::~Communicator() = default;
Request::~Request() = default;
CommWorld::~CommWorld() = default;

size_t dtypeSize(DType T) {
  switch (T) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
    return 2;
  case DType::I64:
    return 8;
  }
  return 0;
}

const char *dtypeName(DType T) {
  switch (T) {
  case DType::F32:
    return "fp32";
  case DType::BF16:
    return "bf16";
  case DType::I32:
    return "int32";
  case DType::I64:
    return "int64";
  }
  return "?";
}

uint16_t bf16FromFloat(float X) {
  uint32_t Bits;
  std::memcpy(&Bits, &X, sizeof Bits);
  if ((Bits & 0x7f800000u) == 0x7f800000u && (Bits & 0x007fffffu))
    return uint16_t((Bits >> 16) | 0x0040u); // a quiet NaN
  Bits += 0x7fffu + ((Bits >> 16) & 1u);
  return uint16_t(Bits >> 16);
}

float floatFromBf16(uint16_t X) {
  uint32_t Bits = uint32_t(X) << 16;
  float F;
  std::memcpy(&F, &Bits, sizeof F);
  return F;
}

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
  void broadcast(void *, size_t, int) override {}
  void barrier() override {}

protected:
  void doAllReduceSum(void *, size_t, DType) override {}
  void doReduceScatterSum(const void *In, void *Out, size_t Count, DType T) override { copy(In, Out, Count, T); }
  void doAllGather(const void *In, void *Out, size_t Count, DType T) override { copy(In, Out, Count, T); }
  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override {
    if (SendCounts[0] != RecvCounts[0])
      fail("allToAllV: send and receive counts differ");
    size_t Size = dtypeSize(T);
    copy(static_cast<const char *>(Send) + SendOffsets[0] * Size, static_cast<char *>(Recv) + RecvOffsets[0] * Size,
         SendCounts[0], T);
  }
  void doAllToAll(const void *Send, void *Recv, size_t Count, DType T) override { copy(Send, Recv, Count, T); }
  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override {
    if (Dest < 0 && Source < 0)
      return;
    if (Dest != 0 || Source != 0 || SendCount != RecvCount)
      fail("sendRecv: a group of one can only exchange with itself");
    copy(Send, Recv, SendCount, T);
  }
  void doSend(const void *, size_t, int, DType) override { fail("send: a group of one has no peer"); }
  void doRecv(void *, size_t, int, DType) override { fail("recv: a group of one has no peer"); }
  std::unique_ptr<Request> doIsend(const void *, size_t, int, int, DType) override {
    fail("isend: a group of one has no peer");
  }
  std::unique_ptr<Request> doIrecv(void *, size_t, int, int, DType) override {
    fail("irecv: a group of one has no peer");
  }

private:
  static void copy(const void *In, void *Out, size_t Count, DType T) {
    if (In != Out && Count)
      std::memmove(Out, In, Count * dtypeSize(T));
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
