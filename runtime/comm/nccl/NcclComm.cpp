//===- comm/nccl/NcclComm.cpp ---------------------------------------------===//
#include "comm/nccl/NcclComm.h"

#include "kernels/cuda/CudaCheck.h"

#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace moert {

namespace {
void checkNccl(ncclResult_t R, const char *Call, const char *File, int Line) {
  if (R == ncclSuccess)
    return;
  std::ostringstream OS;
  OS << File << ":" << Line << ": " << Call << " failed: " << ncclGetErrorString(R);
  const char *Last = ncclGetLastError(nullptr);
  if (Last && *Last)
    OS << " (" << Last << ")";
  throw std::runtime_error(OS.str());
}
#define MOERT_NCCL_CHECK(Call) checkNccl((Call), #Call, __FILE__, __LINE__)

ncclDataType_t ncclType(DType T) {
  switch (T) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  }
  return ncclChar;
}

/// Element Offset of a buffer of T.
const void *at(const void *Base, size_t Offset, DType T) {
  return static_cast<const char *>(Base) + Offset * dtypeSize(T);
}
void *at(void *Base, size_t Offset, DType T) { return static_cast<char *>(Base) + Offset * dtypeSize(T); }

/// The point-to-point operations posted since the last launch, launched
/// together as one NCCL group (so that they progress concurrently, as NCCL
/// requires of operations that wait on each other) at the first wait() of
/// any of them; Done fires when the group has completed.
struct P2pBatch {
  cudaEvent_t Done = nullptr;
  bool Launched = false;
  ~P2pBatch() {
    if (Done)
      cudaEventDestroy(Done);
  }
};

class NcclCommunicator;

/// A posted send or receive: wait() launches its batch if it is still
/// waiting and orders the compute stream after the batch (no host sync).
class P2pRequest : public Request {
public:
  P2pRequest(NcclCommunicator &Comm, std::shared_ptr<P2pBatch> Batch) : Comm(Comm), Batch(std::move(Batch)) {}
  void wait() override;

private:
  NcclCommunicator &Comm;
  std::shared_ptr<P2pBatch> Batch;
};

class NcclCommunicator : public DeviceCommunicator {
public:
  NcclCommunicator(std::unique_ptr<Communicator> MpiGroup, int Device) : Mpi(std::move(MpiGroup)), Device(Device) {
    MOERT_CUDA_CHECK(cudaSetDevice(Device));
    ncclUniqueId Id;
    if (Mpi->rank() == 0)
      MOERT_NCCL_CHECK(ncclGetUniqueId(&Id));
    Mpi->broadcast(&Id, sizeof(Id), 0);
    MOERT_NCCL_CHECK(ncclCommInitRank(&Comm, Mpi->size(), Id, Mpi->rank()));
    // Blocking streams: a plain cudaMemcpy on the legacy stream orders after
    // them, so host code reading a result needs no explicit sync.
    MOERT_CUDA_CHECK(cudaStreamCreate(&CollStream));
    MOERT_CUDA_CHECK(cudaStreamCreate(&P2pStream));
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&Ready, cudaEventDisableTiming));
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&Finished, cudaEventDisableTiming));
  }

  ~NcclCommunicator() override {
    cudaSetDevice(Device);
    // Destructors must not throw: launch and finish outstanding work, then
    // free.
    try {
      launchP2p();
    } catch (...) {
    }
    for (const Posted &P : Deferred)
      cudaEventDestroy(P.Ready);
    for (cudaStream_t S : {CollStream, P2pStream})
      if (S) {
        cudaStreamSynchronize(S);
        cudaStreamDestroy(S);
      }
    if (Ready)
      cudaEventDestroy(Ready);
    if (Finished)
      cudaEventDestroy(Finished);
    if (Comm)
      ncclCommDestroy(Comm);
  }

  int rank() const override { return Mpi->rank(); }
  int size() const override { return Mpi->size(); }
  const std::string &name() const override { return Mpi->name(); }

  void setComputeStream(cudaStream_t S) override { Compute = S; }
  void synchronize() override {
    launchP2p();
    for (cudaStream_t S : {CollStream, P2pStream})
      MOERT_CUDA_CHECK(cudaStreamSynchronize(S));
  }

  /// Launches the posted point-to-point operations as one group.
  void launchP2p() {
    if (Deferred.empty())
      return;
    MOERT_CUDA_CHECK(cudaSetDevice(Device));
    for (const Posted &P : Deferred)
      MOERT_CUDA_CHECK(cudaStreamWaitEvent(P2pStream, P.Ready, 0));
    MOERT_NCCL_CHECK(ncclGroupStart());
    for (const Posted &P : Deferred)
      if (P.Send)
        MOERT_NCCL_CHECK(ncclSend(P.Data, P.Count, ncclType(P.Type), P.Peer, Comm, P2pStream));
      else
        MOERT_NCCL_CHECK(ncclRecv(P.Data, P.Count, ncclType(P.Type), P.Peer, Comm, P2pStream));
    MOERT_NCCL_CHECK(ncclGroupEnd());
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&Batch->Done, cudaEventDisableTiming));
    MOERT_CUDA_CHECK(cudaEventRecord(Batch->Done, P2pStream));
    Batch->Launched = true;
    for (const Posted &P : Deferred)
      MOERT_CUDA_CHECK(cudaEventDestroy(P.Ready));
    Deferred.clear();
    Batch = std::make_shared<P2pBatch>();
  }
  cudaStream_t computeStream() const { return Compute; }

  void broadcast(void *Bytes, size_t Size, int Root) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclBroadcast(Bytes, Bytes, Size, ncclChar, Root, Comm, CollStream));
    end(CollStream);
  }

  void barrier() override {
    MOERT_CUDA_CHECK(cudaStreamSynchronize(Compute));
    synchronize();
    Mpi->barrier();
  }

  void abortComm() {
    if (Comm)
      ncclCommAbort(Comm);
    Comm = nullptr;
  }

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclAllReduce(Data, Data, Count, ncclType(T), ncclSum, Comm, CollStream));
    end(CollStream);
  }

  void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclReduceScatter(In, Out, CountPerRank, ncclType(T), ncclSum, Comm, CollStream));
    end(CollStream);
  }

  void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclAllGather(In, Out, CountPerRank, ncclType(T), Comm, CollStream));
    end(CollStream);
  }

  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override {
    checkPeers(SendCounts.size(), "allToAllV send counts");
    checkPeers(RecvCounts.size(), "allToAllV receive counts");
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclGroupStart());
    for (int P = 0; P < size(); ++P) {
      // Zero-sized transfers are skipped on both sides alike (the counts
      // agree pairwise), so no empty message is ever matched.
      if (SendCounts[P])
        MOERT_NCCL_CHECK(ncclSend(at(Send, SendOffsets[P], T), SendCounts[P], ncclType(T), P, Comm, CollStream));
      if (RecvCounts[P])
        MOERT_NCCL_CHECK(ncclRecv(at(Recv, RecvOffsets[P], T), RecvCounts[P], ncclType(T), P, Comm, CollStream));
    }
    MOERT_NCCL_CHECK(ncclGroupEnd());
    end(CollStream);
  }

  void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclGroupStart());
    for (int P = 0; P < size(); ++P) {
      MOERT_NCCL_CHECK(ncclSend(at(Send, P * CountPerRank, T), CountPerRank, ncclType(T), P, Comm, CollStream));
      MOERT_NCCL_CHECK(ncclRecv(at(Recv, P * CountPerRank, T), CountPerRank, ncclType(T), P, Comm, CollStream));
    }
    MOERT_NCCL_CHECK(ncclGroupEnd());
    end(CollStream);
  }

  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override {
    begin(CollStream);
    MOERT_NCCL_CHECK(ncclGroupStart());
    if (Dest >= 0)
      MOERT_NCCL_CHECK(ncclSend(Send, SendCount, ncclType(T), Dest, Comm, CollStream));
    if (Source >= 0)
      MOERT_NCCL_CHECK(ncclRecv(Recv, RecvCount, ncclType(T), Source, Comm, CollStream));
    MOERT_NCCL_CHECK(ncclGroupEnd());
    end(CollStream);
  }

  void doSend(const void *Data, size_t Count, int Dest, DType T) override {
    doSendRecv(Data, Count, Dest, nullptr, 0, -1, T);
  }
  void doRecv(void *Data, size_t Count, int Source, DType T) override {
    doSendRecv(nullptr, 0, -1, Data, Count, Source, T);
  }

  std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int, DType T) override {
    return post(true, const_cast<void *>(Data), Count, Dest, T);
  }

  std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int, DType T) override {
    return post(false, Data, Count, Source, T);
  }

private:
  void checkPeers(size_t N, const char *What) const {
    if (N != size_t(size()))
      throw std::invalid_argument(std::string(What) + ": one per peer needed");
  }
  /// A send or receive, launched with the others posted before the first
  /// wait() of any of them (launchP2p); it starts after what the compute
  /// stream holds now.
  std::unique_ptr<Request> post(bool Send, void *Data, size_t Count, int Peer, DType T) {
    MOERT_CUDA_CHECK(cudaSetDevice(Device));
    Posted P{Send, Data, Count, Peer, T, nullptr};
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&P.Ready, cudaEventDisableTiming));
    MOERT_CUDA_CHECK(cudaEventRecord(P.Ready, Compute));
    Deferred.push_back(P);
    return std::make_unique<P2pRequest>(*this, Batch);
  }
  /// NCCL work on Stream starts after what the compute stream holds (and
  /// after the point-to-point operations posted so far, so that every
  /// operation reaches NCCL in the order it was issued).
  void begin(cudaStream_t Stream) {
    launchP2p();
    MOERT_CUDA_CHECK(cudaSetDevice(Device));
    MOERT_CUDA_CHECK(cudaEventRecord(Ready, Compute));
    MOERT_CUDA_CHECK(cudaStreamWaitEvent(Stream, Ready, 0));
  }
  /// Later compute work starts after the NCCL work on Stream.
  void end(cudaStream_t Stream) {
    MOERT_CUDA_CHECK(cudaEventRecord(Finished, Stream));
    MOERT_CUDA_CHECK(cudaStreamWaitEvent(Compute, Finished, 0));
  }

  /// A send or receive not launched yet; Ready marks the compute stream
  /// when it was posted.
  struct Posted {
    bool Send;
    void *Data;
    size_t Count;
    int Peer;
    DType Type;
    cudaEvent_t Ready;
  };

  std::unique_ptr<Communicator> Mpi;
  int Device;
  ncclComm_t Comm = nullptr;
  cudaStream_t Compute = nullptr; // the legacy default stream
  cudaStream_t CollStream = nullptr, P2pStream = nullptr;
  cudaEvent_t Ready = nullptr, Finished = nullptr;
  std::vector<Posted> Deferred;
  std::shared_ptr<P2pBatch> Batch = std::make_shared<P2pBatch>();
};

void P2pRequest::wait() {
  if (!Batch)
    return;
  if (!Batch->Launched)
    Comm.launchP2p();
  MOERT_CUDA_CHECK(cudaStreamWaitEvent(Comm.computeStream(), Batch->Done, 0));
  Batch.reset();
}

class NcclWorld : public CommWorld {
public:
  NcclWorld(CommWorld &Mpi, int Device) : Mpi(Mpi), Device(Device) {
    std::vector<int> All(Mpi.size());
    for (int I = 0; I < Mpi.size(); ++I)
      All[I] = I;
    World = createNcclCommunicator(Mpi.split("world", {All}), Device);
  }
  int rank() const override { return Mpi.rank(); }
  int size() const override { return Mpi.size(); }
  std::unique_ptr<Communicator> split(const std::string &Name, const std::vector<std::vector<int>> &Groups) override {
    return createNcclCommunicator(Mpi.split(Name, Groups), Device);
  }
  Communicator &world() override { return *World; }
  [[noreturn]] void abort(const std::string &Message, int ExitCode) override {
    // Abort NCCL first: a peer stuck in a collective is released instead of
    // hanging until MPI kills it.
    if (auto *C = dynamic_cast<NcclCommunicator *>(World.get()))
      C->abortComm();
    Mpi.abort(Message, ExitCode);
    std::abort(); // not reached; g++ does not see the override as noreturn
  }

private:
  CommWorld &Mpi;
  int Device;
  std::unique_ptr<DeviceCommunicator> World;
};

} // namespace

std::unique_ptr<DeviceCommunicator> createNcclCommunicator(std::unique_ptr<Communicator> MpiGroup, int Device) {
  return std::make_unique<NcclCommunicator>(std::move(MpiGroup), Device);
}

std::unique_ptr<CommWorld> createNcclWorld(CommWorld &Mpi, int Device) {
  return std::make_unique<NcclWorld>(Mpi, Device);
}

} // namespace moert
