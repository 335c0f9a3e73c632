//===- comm/nccl/HostStagedComm.cpp ---------------------------------------===//
#include "comm/nccl/HostStagedComm.h"

#include "kernels/cuda/CudaCheck.h"

#include <algorithm>

namespace moert {

namespace {

void toHost(void *Host, const void *Device, size_t Bytes) {
  if (Bytes)
    MOERT_CUDA_CHECK(cudaMemcpy(Host, Device, Bytes, cudaMemcpyDeviceToHost));
}
void toDevice(void *Device, const void *Host, size_t Bytes) {
  if (Bytes)
    MOERT_CUDA_CHECK(cudaMemcpy(Device, Host, Bytes, cudaMemcpyHostToDevice));
}

size_t extent(const std::vector<size_t> &Counts, const std::vector<size_t> &Offsets) {
  size_t E = 0;
  for (size_t I = 0; I < Counts.size(); ++I)
    if (Counts[I])
      E = std::max(E, Offsets[I] + Counts[I]);
  return E;
}

/// Host bytes of Count elements of T.
using Staging = std::vector<char>;

/// A host-side request; a receive copies its staging buffer to the device
/// when it completes. Owns the staging buffer.
class StagedRequest : public Request {
public:
  StagedRequest(std::unique_ptr<Request> Inner, Staging Buffer, void *DeviceDest)
      : Inner(std::move(Inner)), Buffer(std::move(Buffer)), DeviceDest(DeviceDest) {}
  void wait() override {
    if (!Inner)
      return;
    Inner->wait();
    Inner.reset();
    if (DeviceDest)
      toDevice(DeviceDest, Buffer.data(), Buffer.size());
  }

private:
  std::unique_ptr<Request> Inner;
  Staging Buffer;
  void *DeviceDest;
};

class HostStagedCommunicator : public DeviceCommunicator {
public:
  explicit HostStagedCommunicator(Communicator &Host) : Host(Host) {}

  int rank() const override { return Host.rank(); }
  int size() const override { return Host.size(); }
  const std::string &name() const override { return Host.name(); }
  void setComputeStream(cudaStream_t S) override { Compute = S; }
  void synchronize() override { MOERT_CUDA_CHECK(cudaStreamSynchronize(Compute)); }

  void broadcast(void *Bytes, size_t Size, int Root) override {
    Staging H(Size);
    sync();
    toHost(H.data(), Bytes, Size);
    Host.broadcast(H.data(), Size, Root);
    toDevice(Bytes, H.data(), Size);
  }
  void barrier() override {
    sync();
    Host.barrier();
  }

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override {
    Staging H = fetch(Data, Count, T);
    Host.allReduceSum(H.data(), Count, T);
    toDevice(Data, H.data(), H.size());
  }
  void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) override {
    Staging H = fetch(In, CountPerRank * size(), T);
    Staging R(CountPerRank * dtypeSize(T));
    Host.reduceScatterSum(H.data(), R.data(), CountPerRank, T);
    toDevice(Out, R.data(), R.size());
  }
  void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) override {
    Staging H = fetch(In, CountPerRank, T);
    Staging R(CountPerRank * size() * dtypeSize(T));
    Host.allGather(H.data(), R.data(), CountPerRank, T);
    toDevice(Out, R.data(), R.size());
  }
  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override {
    Staging S = fetch(Send, extent(SendCounts, SendOffsets), T);
    // Keep the device bytes between the received slices as they were.
    Staging R = fetch(Recv, extent(RecvCounts, RecvOffsets), T);
    Host.allToAllV(S.data(), SendCounts, SendOffsets, R.data(), RecvCounts, RecvOffsets, T);
    toDevice(Recv, R.data(), R.size());
  }
  void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) override {
    Staging S = fetch(Send, CountPerRank * size(), T);
    Staging R(S.size());
    Host.allToAll(S.data(), R.data(), CountPerRank, T);
    toDevice(Recv, R.data(), R.size());
  }
  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override {
    Staging S = Dest >= 0 ? fetch(Send, SendCount, T) : Staging();
    Staging R(Source >= 0 ? RecvCount * dtypeSize(T) : 0);
    Host.sendRecv(S.data(), SendCount, Dest, R.data(), RecvCount, Source, T);
    if (Source >= 0)
      toDevice(Recv, R.data(), R.size());
  }
  void doSend(const void *Data, size_t Count, int Dest, DType T) override {
    Staging S = fetch(Data, Count, T);
    Host.send(S.data(), Count, Dest, T);
  }
  void doRecv(void *Data, size_t Count, int Source, DType T) override {
    Staging R(Count * dtypeSize(T));
    Host.recv(R.data(), Count, Source, T);
    toDevice(Data, R.data(), R.size());
  }
  std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) override {
    Staging S = fetch(Data, Count, T);
    // The staging vector moves into the request: its heap buffer, which the
    // pending send reads, stays where it is.
    auto Inner = Host.isend(S.data(), Count, Dest, Tag, T);
    return std::make_unique<StagedRequest>(std::move(Inner), std::move(S), nullptr);
  }
  std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) override {
    Staging R(Count * dtypeSize(T));
    auto Inner = Host.irecv(R.data(), Count, Source, Tag, T);
    return std::make_unique<StagedRequest>(std::move(Inner), std::move(R), Data);
  }

private:
  void sync() { MOERT_CUDA_CHECK(cudaStreamSynchronize(Compute)); }
  Staging fetch(const void *Device, size_t Count, DType T) {
    sync();
    Staging H(Count * dtypeSize(T));
    toHost(H.data(), Device, H.size());
    return H;
  }

  Communicator &Host;
  cudaStream_t Compute = nullptr;
};

} // namespace

std::unique_ptr<DeviceCommunicator> createHostStagedCommunicator(Communicator &Host) {
  return std::make_unique<HostStagedCommunicator>(Host);
}

} // namespace moert
