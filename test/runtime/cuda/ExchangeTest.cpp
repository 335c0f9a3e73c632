//===- ExchangeTest.cpp - The CUDA backend's row exchange over a device group ===//
//
// The expert-parallel exchange (ComputeBackend::allToAllV) between the
// backend's copies over a device group (the host-staged communicator, as when
// ranks share a GPU): the same rows as the host's exchange, and nothing staged
// for it where both sides are held on the backend.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"
#include "MpiTestEnv.h"

#include "comm/nccl/HostStagedComm.h"
#include "kernels/Backend.h"
#include "kernels/cuda/CudaBackend.h"
#include "kernels/host/Tensor.h"

#include <numeric>

using namespace moert;

namespace {

/// Rank R sends (R + P) % 3 rows of Hidden elements to peer P, random
/// values exact in bf16 (the device moves its operands' bf16).
struct Exchange {
  static constexpr int64_t Hidden = 8;
  std::vector<size_t> SendCounts, SendOffsets, RecvCounts, RecvOffsets;
  Tensor In, Want;

  Exchange(Communicator &Group) {
    const int Size = Group.size(), Rank = Group.rank();
    size_t Send = 0, Recv = 0;
    for (int P = 0; P < Size; ++P) {
      SendOffsets.push_back(Send);
      SendCounts.push_back(size_t(((Rank + P) % 3) * Hidden));
      Send += SendCounts.back();
      RecvOffsets.push_back(Recv);
      RecvCounts.push_back(size_t(((P + Rank) % 3) * Hidden));
      Recv += RecvCounts.back();
    }
    In = Tensor({int64_t(Send) / Hidden, Hidden});
    In.storage() = test::randomBf16(Send, 500 + uint64_t(Rank));
    Want = Tensor({int64_t(Recv) / Hidden, Hidden});
    Group.allToAllV(In.data(), SendCounts, SendOffsets, Want.data(), RecvCounts, RecvOffsets);
  }
  void run(ComputeBackend &Backend, Tensor &Out, Communicator &Group, Communicator *Device) const {
    Group.setDevice(Device);
    Backend.allToAllV(In.data(), SendCounts, SendOffsets, Out.data(), RecvCounts, RecvOffsets, Group);
  }
};

std::vector<HeldArray> held(Tensor &T, HeldArray::Use Use) {
  if (!T.numel())
    return {};
  return {{T.data(), T.numel(), Use}};
}

TEST(CudaBackendExchange, RowsTravelBetweenTheBackendsCopies) {
  CommWorld &W = test::world();
  std::vector<int> All(W.size());
  std::iota(All.begin(), All.end(), 0);
  auto Ep = W.split("ep", {All});
  auto DevEp = createHostStagedCommunicator(*Ep);
  const Exchange X(*Ep);
  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);

  // Plain host arrays either way: the same rows.
  Tensor OverHost(X.Want.shape()), OverDevice(X.Want.shape());
  X.run(*Backend, OverHost, *Ep, nullptr);
  X.run(*Backend, OverDevice, *Ep, DevEp.get());
  EXPECT_EQ(OverHost.storage(), X.Want.storage());
  EXPECT_EQ(OverDevice.storage(), X.Want.storage());

  // Held on the backend (the rows a permutation made there, the experts'
  // rows the products read there): nothing crosses for the exchange.
  Tensor Out(X.Want.shape());
  const BackendTraffic Before = Backend->traffic();
  {
    HeldArrays Rows(*Backend, held(const_cast<Tensor &>(X.In), HeldArray::Read));
    HeldArrays Result(*Backend, held(Out, HeldArray::BackendOnly));
    X.run(*Backend, Out, *Ep, DevEp.get());
    const BackendTraffic After = Backend->traffic();
    auto Moved = [&](const BackendTraffic &T) {
      auto It = T.ByOperation.find("exchange");
      return It == T.ByOperation.end() ? int64_t(0) : It->second.HostToDeviceBytes + It->second.DeviceToHostBytes;
    };
    EXPECT_EQ(Moved(After), Moved(Before));
    Backend->hostReads(Out.data(), Out.numel());
  }
  EXPECT_EQ(Out.storage(), X.Want.storage());
}

} // namespace
