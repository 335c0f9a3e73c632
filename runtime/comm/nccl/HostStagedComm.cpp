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

/// A host-side request; a receive copies its staging buffer to the device
/// when it completes. Owns the staging buffer.
class StagedRequest : public Request {
public:
  StagedRequest(std::unique_ptr<Request> Inner, std::vector<float> Staging, float *DeviceDest)
      : Inner(std::move(Inner)), Staging(std::move(Staging)), DeviceDest(DeviceDest) {}
  void wait() override {
    if (!Inner)
      return;
    Inner->wait();
    Inner.reset();
    if (DeviceDest)
      toDevice(DeviceDest, Staging.data(), Staging.size() * sizeof(float));
  }

private:
  std::unique_ptr<Request> Inner;
  std::vector<float> Staging;
  float *DeviceDest;
};

class HostStagedCommunicator : public DeviceCommunicator {
public:
  explicit HostStagedCommunicator(Communicator &Host) : Host(Host) {}

  int rank() const override { return Host.rank(); }
  int size() const override { return Host.size(); }
  const std::string &name() const override { return Host.name(); }
  void setComputeStream(cudaStream_t S) override { Compute = S; }
  void synchronize() override { MOERT_CUDA_CHECK(cudaStreamSynchronize(Compute)); }

  void allReduceSum(float *Data, size_t Count) override {
    std::vector<float> H = fetch(Data, Count);
    Host.allReduceSum(H.data(), Count);
    toDevice(Data, H.data(), Count * sizeof(float));
  }
  void reduceScatterSum(const float *In, float *Out, size_t CountPerRank) override {
    std::vector<float> H = fetch(In, CountPerRank * size());
    std::vector<float> R(CountPerRank);
    Host.reduceScatterSum(H.data(), R.data(), CountPerRank);
    toDevice(Out, R.data(), CountPerRank * sizeof(float));
  }
  void allGather(const float *In, float *Out, size_t CountPerRank) override {
    std::vector<float> H = fetch(In, CountPerRank);
    std::vector<float> R(CountPerRank * size());
    Host.allGather(H.data(), R.data(), CountPerRank);
    toDevice(Out, R.data(), R.size() * sizeof(float));
  }
  void allToAllV(const float *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 float *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) override {
    std::vector<float> S = fetch(Send, extent(SendCounts, SendOffsets));
    size_t RecvExtent = extent(RecvCounts, RecvOffsets);
    // Keep the device bytes between the received slices as they were.
    std::vector<float> R = fetch(Recv, RecvExtent);
    Host.allToAllV(S.data(), SendCounts, SendOffsets, R.data(), RecvCounts, RecvOffsets);
    toDevice(Recv, R.data(), RecvExtent * sizeof(float));
  }
  void allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) override {
    size_t N = CountPerRank * size();
    std::vector<int64_t> S(N), R(N);
    sync();
    toHost(S.data(), Send, N * sizeof(int64_t));
    Host.allToAll(S.data(), R.data(), CountPerRank);
    toDevice(Recv, R.data(), N * sizeof(int64_t));
  }
  void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) override {
    std::vector<float> S = Dest >= 0 ? fetch(Send, SendCount) : std::vector<float>();
    std::vector<float> R(Source >= 0 ? RecvCount : 0);
    Host.sendRecv(S.data(), SendCount, Dest, R.data(), RecvCount, Source);
    if (Source >= 0)
      toDevice(Recv, R.data(), RecvCount * sizeof(float));
  }
  void send(const float *Data, size_t Count, int Dest) override {
    std::vector<float> S = fetch(Data, Count);
    Host.send(S.data(), Count, Dest);
  }
  void recv(float *Data, size_t Count, int Source) override {
    std::vector<float> R(Count);
    Host.recv(R.data(), Count, Source);
    toDevice(Data, R.data(), Count * sizeof(float));
  }
  std::unique_ptr<Request> isend(const float *Data, size_t Count, int Dest, int Tag) override {
    std::vector<float> S = fetch(Data, Count);
    // The staging vector moves into the request: its heap buffer, which the
    // pending send reads, stays where it is.
    auto Inner = Host.isend(S.data(), Count, Dest, Tag);
    return std::make_unique<StagedRequest>(std::move(Inner), std::move(S), nullptr);
  }
  std::unique_ptr<Request> irecv(float *Data, size_t Count, int Source, int Tag) override {
    std::vector<float> R(Count);
    auto Inner = Host.irecv(R.data(), Count, Source, Tag);
    return std::make_unique<StagedRequest>(std::move(Inner), std::move(R), Data);
  }
  void broadcast(void *Bytes, size_t Size, int Root) override {
    std::vector<char> H(Size);
    sync();
    toHost(H.data(), Bytes, Size);
    Host.broadcast(H.data(), Size, Root);
    toDevice(Bytes, H.data(), Size);
  }
  void barrier() override {
    sync();
    Host.barrier();
  }

private:
  void sync() { MOERT_CUDA_CHECK(cudaStreamSynchronize(Compute)); }
  std::vector<float> fetch(const float *Device, size_t Count) {
    sync();
    std::vector<float> H(Count);
    toHost(H.data(), Device, Count * sizeof(float));
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
