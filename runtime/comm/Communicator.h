//===- comm/Communicator.h - Collective and point-to-point interface ------===//
//
// Every parallel algorithm of the runtime talks to its peers through this
// interface, never through MPI or NCCL directly. The CPU backend implements it
// over MPI (comm/mpi); the CUDA backend implements it over NCCL (comm/nccl).
// A Communicator is one process group of the plan (tp, cp, ep, dp, pp, ...):
// ranks are group-local, 0..size()-1, in the order the plan lists the group.
//
// All buffers are host float arrays on the CPU backend (device pointers on the
// CUDA backend); counts are in elements. Every call is blocking and collective
// calls must be made by all members in the same order.
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

  /// In place: Data[i] = sum over ranks of Data[i].
  virtual void allReduceSum(float *Data, size_t Count) = 0;
  /// In is size() * CountPerRank elements; Out receives this rank's summed
  /// slice [rank()*CountPerRank, (rank()+1)*CountPerRank).
  virtual void reduceScatterSum(const float *In, float *Out, size_t CountPerRank) = 0;
  /// Out (size() * CountPerRank elements) receives every rank's In, in rank order.
  virtual void allGather(const float *In, float *Out, size_t CountPerRank) = 0;
  /// Variable all-to-all: rank r sends SendCounts[p] elements starting at
  /// SendOffsets[p] to peer p and receives RecvCounts[p] elements at
  /// RecvOffsets[p] from peer p.
  virtual void allToAllV(const float *Send, const std::vector<size_t> &SendCounts,
                         const std::vector<size_t> &SendOffsets, float *Recv, const std::vector<size_t> &RecvCounts,
                         const std::vector<size_t> &RecvOffsets) = 0;
  /// Fixed-size all-to-all of integers (token counts before a dispatch):
  /// Send and Recv hold size() * CountPerRank values.
  virtual void allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) = 0;
  /// Sends to Dest and receives from Source at once (ring steps); either side
  /// may be skipped with a negative peer.
  virtual void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) = 0;
  virtual void send(const float *Data, size_t Count, int Dest) = 0;
  virtual void recv(float *Data, size_t Count, int Source) = 0;
  /// Non-blocking point-to-point (pipeline sends overlap with the opposite
  /// direction); Tag keeps concurrent messages between one pair apart.
  virtual std::unique_ptr<Request> isend(const float *Data, size_t Count, int Dest, int Tag) = 0;
  virtual std::unique_ptr<Request> irecv(float *Data, size_t Count, int Source, int Tag) = 0;
  /// Root's bytes are copied to every rank.
  virtual void broadcast(void *Bytes, size_t Size, int Root) = 0;
  virtual void barrier() = 0;
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
