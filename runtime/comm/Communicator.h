//===- comm/Communicator.h - Collective and point-to-point interface ------===//
//
// Every parallel algorithm of the runtime talks to its peers through this
// interface, never through MPI or NCCL directly. The CPU backend implements it
// over MPI (comm/mpi); the CUDA backend implements it over NCCL (comm/nccl).
// A Communicator is one process group of the plan (tp, cp, ep, dp, pp, ...):
// ranks are group-local, 0..size()-1, in the order the plan lists the group.
//
// Buffers hold elements of one DType: fp32 (activations and gradients of
// the CPU backend), bf16 (what the CUDA backend moves), int32 or int64
// (token counts, routing maps). They are host arrays on the CPU backend and
// device pointers on the CUDA backend; counts and offsets are in elements.
// The float and int64 overloads are shorthands for the typed calls. Every
// call is blocking and collective calls must be made by all members in the
// same order. Sums of bf16 round each partial sum to bf16, as NCCL's do.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_COMM_COMMUNICATOR_H
#define MOERT_COMM_COMMUNICATOR_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moert {

/// The element types a communicator moves. bf16 is the upper half of an
/// IEEE-754 float (1 sign, 8 exponent, 7 mantissa bits).
enum class DType : uint8_t { F32, BF16, I32, I64 };
size_t dtypeSize(DType T);
const char *dtypeName(DType T);
/// bf16 on the host: rounded to nearest, ties to even (NaN stays NaN).
uint16_t bf16FromFloat(float X);
float floatFromBf16(uint16_t X);

/// An outstanding non-blocking send or receive; wait() completes it. Must be
/// waited on before the buffer is reused or freed.
class Request {
public:
  virtual ~Request();
  virtual void wait() = 0;
};

class Communicator {
public:
  virtual ~Communicator();

  /// Group-local rank and size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The kind of group ("tp", "cp", "ep", ...), for messages.
  virtual const std::string &name() const = 0;

  /// The same group over a compute backend's device buffers (comm/nccl),
  /// where the job has one: a backend moves its own arrays over it, the
  /// host's over this group (as a PyTorch process group has a backend per
  /// device type). Not owned; null where there is none.
  Communicator *device() const { return Device; }
  void setDevice(Communicator *Group) { Device = Group; }

  /// In place: Data[i] = sum over ranks of Data[i].
  void allReduceSum(void *Data, size_t Count, DType T) { doAllReduceSum(Data, Count, T); }
  /// In is size() * CountPerRank elements; Out receives this rank's summed
  /// slice [rank()*CountPerRank, (rank()+1)*CountPerRank).
  void reduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) {
    doReduceScatterSum(In, Out, CountPerRank, T);
  }
  /// Out (size() * CountPerRank elements) receives every rank's In, in rank order.
  void allGather(const void *In, void *Out, size_t CountPerRank, DType T) { doAllGather(In, Out, CountPerRank, T); }
  /// Variable all-to-all: rank r sends SendCounts[p] elements starting at
  /// SendOffsets[p] to peer p and receives RecvCounts[p] elements at
  /// RecvOffsets[p] from peer p.
  void allToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets, DType T) {
    doAllToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets, T);
  }
  /// Fixed-size all-to-all (token counts before a dispatch): Send and Recv
  /// hold size() * CountPerRank elements.
  void allToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) { doAllToAll(Send, Recv, CountPerRank, T); }
  /// Sends to Dest and receives from Source at once (ring steps); either side
  /// may be skipped with a negative peer.
  void sendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source, DType T) {
    doSendRecv(Send, SendCount, Dest, Recv, RecvCount, Source, T);
  }
  void send(const void *Data, size_t Count, int Dest, DType T) { doSend(Data, Count, Dest, T); }
  void recv(void *Data, size_t Count, int Source, DType T) { doRecv(Data, Count, Source, T); }
  /// Non-blocking point-to-point (pipeline sends overlap with the opposite
  /// direction); Tag keeps concurrent messages between one pair apart.
  std::unique_ptr<Request> isend(const void *Data, size_t Count, int Dest, int Tag, DType T) {
    return doIsend(Data, Count, Dest, Tag, T);
  }
  std::unique_ptr<Request> irecv(void *Data, size_t Count, int Source, int Tag, DType T) {
    return doIrecv(Data, Count, Source, Tag, T);
  }
  /// Root's bytes are copied to every rank.
  virtual void broadcast(void *Bytes, size_t Size, int Root) = 0;
  virtual void barrier() = 0;

  /// fp32 and int64 shorthands.
  void allReduceSum(float *Data, size_t Count) { doAllReduceSum(Data, Count, DType::F32); }
  void reduceScatterSum(const float *In, float *Out, size_t CountPerRank) {
    doReduceScatterSum(In, Out, CountPerRank, DType::F32);
  }
  void allGather(const float *In, float *Out, size_t CountPerRank) { doAllGather(In, Out, CountPerRank, DType::F32); }
  void allToAllV(const float *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 float *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) {
    doAllToAllV(Send, SendCounts, SendOffsets, Recv, RecvCounts, RecvOffsets, DType::F32);
  }
  void allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) {
    doAllToAll(Send, Recv, CountPerRank, DType::I64);
  }
  void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) {
    doSendRecv(Send, SendCount, Dest, Recv, RecvCount, Source, DType::F32);
  }
  void send(const float *Data, size_t Count, int Dest) { doSend(Data, Count, Dest, DType::F32); }
  void recv(float *Data, size_t Count, int Source) { doRecv(Data, Count, Source, DType::F32); }
  std::unique_ptr<Request> isend(const float *Data, size_t Count, int Dest, int Tag) {
    return doIsend(Data, Count, Dest, Tag, DType::F32);
  }
  std::unique_ptr<Request> irecv(float *Data, size_t Count, int Source, int Tag) {
    return doIrecv(Data, Count, Source, Tag, DType::F32);
  }

protected:
  // What each backend implements: the typed calls above, one each.
  virtual void doAllReduceSum(void *Data, size_t Count, DType T) = 0;
  virtual void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) = 0;
  virtual void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) = 0;
  virtual void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts,
                           const std::vector<size_t> &SendOffsets, void *Recv, const std::vector<size_t> &RecvCounts,
                           const std::vector<size_t> &RecvOffsets, DType T) = 0;
  virtual void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) = 0;
  virtual void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                          DType T) = 0;
  virtual void doSend(const void *Data, size_t Count, int Dest, DType T) = 0;
  virtual void doRecv(void *Data, size_t Count, int Source, DType T) = 0;
  virtual std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) = 0;
  virtual std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) = 0;

private:
  Communicator *Device = nullptr;
};

/// A group of one: every collective is a copy or a no-op. Lets layers run
/// unchanged on one rank, and unit tests run without mpirun.
std::unique_ptr<Communicator> createSelfCommunicator(std::string Name);

/// The world communicator and the factory for the plan's groups.
class CommWorld {
public:
  virtual ~CommWorld();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// All ranks call this together with the full list of groups of one kind
  /// (every rank appears in exactly one of them); returns the group holding
  /// this rank, with group-local ranks in list order.
  virtual std::unique_ptr<Communicator> split(const std::string &Name, const std::vector<std::vector<int>> &Groups) = 0;
  /// The world itself as a Communicator (named "world").
  virtual Communicator &world() = 0;
  /// Ends every rank of the job with a message and exit code; never returns.
  [[noreturn]] virtual void abort(const std::string &Message, int ExitCode) = 0;
};

} // namespace moert

#endif
