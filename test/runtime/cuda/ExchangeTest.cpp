//===- ExchangeTest.cpp - The CUDA backend's row exchange over a device group ===//
//
// The exchanges of activations between the backend's copies over a device
// group (the host-staged communicator, as when ranks share a GPU): the
// expert-parallel rows (ComputeBackend::allToAllV) and tensor parallelism's
// sequence gather and reduce-scatter (gatherActivations,
// reduceScatterActivations), a pipeline stage's output to the next
// stage (sendActivations, receiveActivations), and the loss head's
// statistics over the vocabulary's slices: the same values as the
// host's exchange, and nothing staged for them where both sides are held on
// the backend.
//
//===----------------------------------------------------------------------===//
#include "EveryRankGroup.h"
#include "GpuTestUtil.h"
#include "MpiTestEnv.h"

#include "kernels/Backend.h"
#include "kernels/cuda/CudaBackend.h"
#include "kernels/host/Tensor.h"
#include "parallel/tp/VocabParallel.h"

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
  test::EveryRankGroup Group("ep");
  Communicator *Ep = Group.Host.get();
  DeviceCommunicator *DevEp = Group.Device.get();
  const Exchange X(*Ep);
  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);

  // Plain host arrays either way: the same rows.
  Tensor OverHost(X.Want.shape()), OverDevice(X.Want.shape());
  X.run(*Backend, OverHost, *Ep, nullptr);
  X.run(*Backend, OverDevice, *Ep, DevEp);
  EXPECT_EQ(OverHost.storage(), X.Want.storage());
  EXPECT_EQ(OverDevice.storage(), X.Want.storage());

  // Held on the backend (the rows a permutation made there, the experts'
  // rows the products read there): nothing crosses for the exchange.
  Tensor Out(X.Want.shape());
  const BackendTraffic Before = Backend->traffic();
  {
    HeldArrays Rows(*Backend, held(const_cast<Tensor &>(X.In), HeldArray::Read));
    HeldArrays Result(*Backend, held(Out, HeldArray::BackendOnly));
    X.run(*Backend, Out, *Ep, DevEp);
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

/// Bytes an operation's copies moved, both ways.
int64_t movedBy(const ComputeBackend &Backend, const char *Operation) {
  const BackendTraffic T = Backend.traffic();
  auto It = T.ByOperation.find(Operation);
  return It == T.ByOperation.end() ? 0 : It->second.HostToDeviceBytes + It->second.DeviceToHostBytes;
}

TEST(CudaBackendExchange, TheSequenceIsGatheredAndSummedWhereItIs) {
  CommWorld &W = test::world();
  test::EveryRankGroup Group("tp");
  Communicator *Tp = Group.Host.get();
  DeviceCommunicator *DevTp = Group.Device.get();
  const int64_t PerRank = 24, Whole = PerRank * W.size();
  Tensor Shard({PerRank}), Partial({Whole});
  Shard.storage() = test::randomBf16(size_t(PerRank), 600 + uint64_t(W.rank()));
  Partial.storage() = test::randomBf16(size_t(Whole), 700 + uint64_t(W.rank()));
  Tensor WantGathered({Whole}), WantSum({PerRank});
  Tp->allGather(Shard.data(), WantGathered.data(), size_t(PerRank));
  Tp->reduceScatterSum(Partial.data(), WantSum.data(), size_t(PerRank));

  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);
  // Without a device group: the host's exchange of the host's arrays.
  Tensor Gathered({Whole}), Sum({PerRank});
  Backend->gatherActivations(Shard.data(), Gathered.data(), PerRank, *Tp);
  Backend->reduceScatterActivations(Partial.data(), Sum.data(), PerRank, *Tp);
  EXPECT_EQ(Gathered.storage(), WantGathered.storage());
  EXPECT_EQ(Sum.storage(), WantSum.storage());

  // Held on the backend (a shard a norm made there, partial sums its
  // products made there, in fp32): the same values, nothing crossing for
  // the exchanges themselves.
  Tp->setDevice(DevTp);
  const auto Wide = [](Tensor &T) { return HeldArray::wide(T.data(), T.numel()); };
  Tensor DeviceGathered({Whole}), DeviceSum({PerRank});
  {
    HeldArrays Inputs(*Backend, {{Shard.data(), PerRank, HeldArray::Read}, Wide(Partial)});
    HeldArrays Results(*Backend, {{DeviceGathered.data(), Whole, HeldArray::BackendOnly}, Wide(DeviceSum)});
    const int64_t Before = movedBy(*Backend, "tp exchange");
    Backend->gatherActivations(Shard.data(), DeviceGathered.data(), PerRank, *Tp);
    Backend->reduceScatterActivations(Partial.data(), DeviceSum.data(), PerRank, *Tp);
    EXPECT_EQ(movedBy(*Backend, "tp exchange"), Before);
    Backend->hostReads(DeviceGathered.data(), Whole);
    Backend->hostReads(DeviceSum.data(), PerRank);
    EXPECT_EQ(DeviceGathered.storage(), WantGathered.storage());
    EXPECT_EQ(DeviceSum.storage(), WantSum.storage());
  }
}

// A gathered sequence that products alone read travels in their operands'
// precision: its device copy is the bf16 of every rank's shard, where a
// gather that any operation may read keeps fp32's bits.
TEST(CudaBackendExchange, ASequenceThatProductsAloneReadIsGatheredInTheirPrecision) {
  CommWorld &W = test::world();
  test::EveryRankGroup Group("tp");
  Communicator *Tp = Group.Host.get();
  Tp->setDevice(Group.Device.get());
  const int64_t PerRank = 24, Whole = PerRank * W.size();
  Tensor Shard({PerRank});
  for (int64_t I = 0; I < PerRank; ++I)
    Shard[I] = float(W.rank() + 1) + float(I) / 3.0f; // not exact in bf16
  Tensor Want({Whole});
  Tp->allGather(Shard.data(), Want.data(), size_t(PerRank));
  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);
  for (ReadBy Readers : {ReadBy::AnyOperation, ReadBy::Products}) {
    Tensor Gathered({Whole});
    HeldArrays Hold(*Backend, {HeldArray::wide(Gathered.data(), Whole)});
    Backend->gatherActivations(Shard.data(), Gathered.data(), PerRank, *Tp, Readers);
    Backend->hostReads(Gathered.data(), Whole);
    EXPECT_EQ(Gathered.storage(), Readers == ReadBy::Products ? cuda::roundedToBf16(Want.storage()) : Want.storage());
  }
}

/// Rank R's stage output: fp32 values that a bf16 wire would round.
std::vector<float> stageOutput(int Rank, int64_t Count) {
  std::vector<float> V(static_cast<size_t>(Count));
  for (int64_t I = 0; I < Count; ++I)
    V[size_t(I)] = float(Rank + 1) + float(I) / 3.0f;
  return V;
}

// Around a ring of pipeline stages: the output a stage's last layer made
// on the backend (kept there under the layer's key) reaches the next
// stage's backend exactly, kept there under the received array's address
// until its reader takes it over; where the pp group has no device
// counterpart, the host's values travel, what the backend had brought back.
TEST(CudaBackendExchange, AStagesOutputReachesTheNextStagesBackend) {
  if (test::world().size() < 2)
    GTEST_SKIP() << "a pipeline has two stages or more";
  test::EveryRankGroup Group("pp");
  Communicator &Pp = *Group.Host;
  const int Next = (Pp.rank() + 1) % Pp.size(), Prev = (Pp.rank() + Pp.size() - 1) % Pp.size();
  constexpr int64_t Count = 40;
  const std::vector<float> Mine = stageOutput(Pp.rank(), Count), Want = stageOutput(Prev, Count);
  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);
  const char LastLayer = 0, FirstLayer = 0; // the keys of the two layers

  for (Communicator *PpDevice :
       {static_cast<Communicator *>(nullptr), static_cast<Communicator *>(Group.Device.get())}) {
    SCOPED_TRACE(PpDevice ? "over the device group" : "over the host group");
    Pp.setDevice(PpDevice);
    Tensor Output({Count}), Input({Count});
    {
      Tensor Values({Count});
      Values.storage() = Mine;
      HeldArrays Hold(*Backend, {HeldArray::wide(Output.data(), Count)});
      Backend->copy(Values.data(), Output.data(), Count);
      Backend->keepArrays(&LastLayer, {HeldArray::wide(Output.data(), Count)});
    }
    const int64_t Before = movedBy(*Backend, "pp exchange");
    std::unique_ptr<Request> Received = Backend->receiveActivations(Input.data(), Count, Prev, 7, Pp);
    std::unique_ptr<Request> Sent = Backend->sendActivations(Output.data(), Count, Next, 7, Pp);
    Received->wait();
    Sent->wait();
    if (PpDevice) {
      EXPECT_EQ(movedBy(*Backend, "pp exchange"), Before) << "the transfer crossed host memory";
      // The send released the output's copy, which the host never had.
      Backend->hostReads(Output.data(), Count);
      EXPECT_NE(Output.storage(), Mine);
    }
    Backend->passKept(Input.data(), &FirstLayer);
    Backend->releaseKept(Input.data()); // no longer its key
    Backend->hostReads(Input.data(), Count);
    EXPECT_EQ(Input.storage(), Want);
    Backend->releaseKept(&FirstLayer);
    Backend->releaseKept(&LastLayer);
  }
}

// A vocabulary-parallel loss head combines its rows' statistics (the group's
// maxima, then the sums of exponentials and target logits) over the group's
// device communicator where they are: the losses and gradients of the
// host's combination, and of the copies only the labels' and the final
// statistics' remain (the host's way brings the maxima down and up and
// takes the sums up again).
TEST(CudaBackendExchange, TheLossHeadsStatisticsCombineWhereTheyAre) {
  CommWorld &W = test::world();
  test::EveryRankGroup Group("tp");
  Communicator *Tp = Group.Host.get();
  const int64_t Rows = 6, Hidden = 16, Slice = 24;
  Tensor X({Rows, Hidden}), Weights({Hidden, Slice});
  X.storage() = test::randomBf16(size_t(Rows * Hidden), 810);
  Weights.storage() = test::randomBf16(size_t(Hidden * Slice), 820 + uint64_t(W.rank()));
  std::vector<int32_t> Labels;
  for (int64_t I = 0; I < Rows; ++I)
    Labels.push_back(I == 2 ? -1 : int32_t((I * 37) % (Slice * W.size())));

  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = cuda::createCudaBackend(Device);
  struct Result {
    std::vector<double> Losses;
    std::vector<float> DX, DW;
    int64_t Copies = 0;
  };
  auto run = [&](Communicator *OnDevice) {
    Result R;
    R.Losses.assign(size_t(Rows), NAN);
    R.DX.assign(size_t(Rows * Hidden), NAN);
    R.DW.assign(size_t(Hidden * Slice), 0.0f);
    LossHeadArgs A{Rows,
                   Hidden,
                   Slice,
                   W.rank() * Slice,
                   X.data(),
                   Weights.data(),
                   Labels.data(),
                   0.25f,
                   R.Losses.data(),
                   R.DX.data(),
                   R.DW.data(),
                   {},
                   {}};
    A.MaxOverGroup = [&](float *Values, int64_t N) { maxOverGroup(*Tp, Values, N); };
    A.SumOverGroup = [&](float *Values, int64_t N) { Tp->allReduceSum(Values, size_t(N)); };
    A.Device = OnDevice;
    const int64_t Before = Backend->traffic().ByOperation["loss head"].Transfers;
    Backend->lossHead(A);
    R.Copies = Backend->traffic().ByOperation["loss head"].Transfers - Before;
    return R;
  };
  const Result ThroughHost = run(nullptr), WhereTheyAre = run(Group.Device.get());
  for (int64_t I = 0; I < Rows; ++I)
    EXPECT_NEAR(WhereTheyAre.Losses[size_t(I)], ThroughHost.Losses[size_t(I)],
                1e-6 * (1 + std::abs(ThroughHost.Losses[size_t(I)])));
  EXPECT_EQ(WhereTheyAre.Losses[2], 0.0) << "an ignored label has no loss";
  EXPECT_TRUE(test::near(WhereTheyAre.DX, ThroughHost.DX, 1e-6f, "DX"));
  EXPECT_TRUE(test::near(WhereTheyAre.DW, ThroughHost.DW, 1e-6f, "DW"));
  EXPECT_EQ(ThroughHost.Copies - WhereTheyAre.Copies, 3);
}

} // namespace
