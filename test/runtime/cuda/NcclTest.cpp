//===- NcclTest.cpp - The NCCL communicator on device buffers -------------===//
//
// Every Communicator operation through NCCL, one rank per GPU: run with one
// rank on any GPU machine (NCCL with a group of one still goes through its
// kernels and the stream ordering), and with more ranks where there are as
// many GPUs (skipped otherwise: NCCL refuses two ranks on one GPU).
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"
#include "MpiTestEnv.h"

#include "comm/nccl/NcclComm.h"
#include "kernels/cuda/CudaCheck.h"

#include <numeric>

using namespace moert;
using namespace moert::cuda;

namespace {

class Nccl : public ::testing::Test {
protected:
  void SetUp() override {
    CommWorld &W = test::world();
    if (deviceCount() < W.size())
      GTEST_SKIP() << "SKIPPED: NCCL needs one GPU per rank (" << W.size() << " ranks, " << deviceCount() << " GPUs)";
    std::vector<int> All(W.size());
    std::iota(All.begin(), All.end(), 0);
    Comm = createNcclCommunicator(W.split("nccl", {All}), W.rank());
    Rank = Comm->rank();
    Size = Comm->size();
  }
  std::unique_ptr<DeviceCommunicator> Comm;
  int Rank = 0, Size = 1;
};

template <typename T> DeviceBuffer<T> up(const std::vector<T> &V) {
  DeviceBuffer<T> B;
  B.upload(V);
  return B;
}

TEST_F(Nccl, AllReduceReduceScatterAndAllGather) {
  const size_t N = 1000;
  std::vector<float> Mine(Size * N);
  for (size_t I = 0; I < Mine.size(); ++I)
    Mine[I] = float(Rank + 1) * float(I % 97);
  auto D = up(Mine);
  Comm->allReduceSum(D.data(), D.size());
  float RankSum = float(Size * (Size + 1) / 2);
  std::vector<float> Got = D.download(); // blocking copy: ordered after NCCL
  for (size_t I = 0; I < Got.size(); ++I)
    ASSERT_EQ(Got[I], RankSum * float(I % 97)) << I;

  auto In = up(Mine);
  DeviceBuffer<float> Slice(N), All(Size * N);
  Comm->reduceScatterSum(In.data(), Slice.data(), N);
  Comm->allGather(Slice.data(), All.data(), N);
  EXPECT_EQ(All.download(), Got);
}

TEST_F(Nccl, AllToAllVWithUnevenAndEmptyCounts) {
  // Rank r sends (r + p) % 3 elements to peer p, valued 1000 r + p.
  std::vector<size_t> SendCounts(Size), SendOffsets(Size), RecvCounts(Size), RecvOffsets(Size);
  std::vector<float> Send;
  size_t Off = 0;
  for (int P = 0; P < Size; ++P) {
    SendCounts[P] = size_t((Rank + P) % 3);
    SendOffsets[P] = Send.size();
    Send.insert(Send.end(), SendCounts[P], float(1000 * Rank + P));
    RecvCounts[P] = size_t((P + Rank) % 3);
    RecvOffsets[P] = Off;
    Off += RecvCounts[P];
  }
  auto DS = up(Send.empty() ? std::vector<float>{0.0f} : Send);
  DeviceBuffer<float> DR(std::max<size_t>(Off, 1));
  Comm->allToAllV(DS.data(), SendCounts, SendOffsets, DR.data(), RecvCounts, RecvOffsets);
  std::vector<float> Got = DR.download();
  for (int P = 0; P < Size; ++P)
    for (size_t I = 0; I < RecvCounts[P]; ++I)
      ASSERT_EQ(Got[RecvOffsets[P] + I], float(1000 * P + Rank));

  std::vector<int64_t> Counts(Size * 2);
  for (int P = 0; P < Size; ++P) {
    Counts[2 * P] = 10 * Rank + P;
    Counts[2 * P + 1] = -1;
  }
  auto DC = up(Counts);
  DeviceBuffer<int64_t> DCR(Counts.size());
  Comm->allToAll(DC.data(), DCR.data(), 2);
  std::vector<int64_t> CR = DCR.download();
  for (int P = 0; P < Size; ++P) {
    EXPECT_EQ(CR[2 * P], 10 * P + Rank);
    EXPECT_EQ(CR[2 * P + 1], -1);
  }
}

TEST_F(Nccl, RingSendRecvNonBlockingPairsAndBroadcast) {
  const size_t N = 4096;
  int Next = (Rank + 1) % Size, Prev = (Rank + Size - 1) % Size;
  auto Mine = up(std::vector<float>(N, float(Rank)));
  DeviceBuffer<float> Got(N), Got2(N);
  Comm->sendRecv(Mine.data(), N, Next, Got.data(), N, Prev);
  EXPECT_EQ(Got.download(), std::vector<float>(N, float(Prev)));
  // Non-blocking: receive first, then send; wait() orders the default stream.
  // Only between distinct ranks: a send to oneself outside a group would
  // have to meet its receive on another stream, which NCCL does not promise.
  if (Size > 1) {
    auto R = Comm->irecv(Got2.data(), N, Prev, 7);
    auto S = Comm->isend(Mine.data(), N, Next, 7);
    R->wait();
    S->wait();
    EXPECT_EQ(Got2.download(), std::vector<float>(N, float(Prev)));
  }

  // A pipeline's steady state: each rank sends to its peer before it
  // receives from it (rank 0 forward, rank 1 backward), and waits on the
  // receive first; the posted sends and receives launch as one group.
  if (Size > 1) {
    DeviceBuffer<float> Got3(N);
    auto S = Comm->isend(Mine.data(), N, Next, 8);
    auto R = Comm->irecv(Got3.data(), N, Prev, 8);
    R->wait();
    S->wait();
    EXPECT_EQ(Got3.download(), std::vector<float>(N, float(Prev)));
  }

  std::vector<char> Bytes(100, char(Rank));
  auto DB = up(Bytes);
  Comm->broadcast(DB.data(), Bytes.size(), Size - 1);
  EXPECT_EQ(DB.download(), std::vector<char>(100, char(Size - 1)));
  Comm->barrier();
}

TEST_F(Nccl, TypedBuffersTravelAsTheirOwnType) {
  // bf16 sums in NCCL's own bf16 arithmetic, int32 and int64 moved whole:
  // the values are exact in each type, so the results are too.
  const size_t N = 64;
  std::vector<uint16_t> Half(N);
  for (size_t I = 0; I < N; ++I)
    Half[I] = bf16FromFloat(float(Rank + 1) * float(I % 8) / 4);
  auto D = up(Half);
  Comm->allReduceSum(D.data(), N, DType::BF16);
  std::vector<uint16_t> Got = D.download();
  for (size_t I = 0; I < N; ++I)
    ASSERT_EQ(floatFromBf16(Got[I]), float(Size * (Size + 1) / 2) * float(I % 8) / 4) << I;
  std::vector<int64_t> Big(Size, (int64_t(1) << 40) + Rank);
  auto B = up(Big);
  DeviceBuffer<int64_t> Gathered(Size * Size);
  Comm->allGather(B.data(), Gathered.data(), Size, DType::I64);
  std::vector<int64_t> All = Gathered.download();
  for (int P = 0; P < Size; ++P)
    EXPECT_EQ(All[P * Size], (int64_t(1) << 40) + P);
  std::vector<int32_t> Counts(Size);
  for (int P = 0; P < Size; ++P)
    Counts[P] = 10 * Rank + P;
  auto C = up(Counts);
  DeviceBuffer<int32_t> Back(Size);
  Comm->allToAll(C.data(), Back.data(), 1, DType::I32);
  std::vector<int32_t> Received = Back.download();
  for (int P = 0; P < Size; ++P)
    EXPECT_EQ(Received[P], 10 * P + Rank);
}

TEST_F(Nccl, ComputeStreamOrdering) {
  // Work queued on a created compute stream before the collective must be
  // seen by it, and work after it must see its result.
  cudaStream_t Stream;
  MOERT_CUDA_CHECK(cudaStreamCreateWithFlags(&Stream, cudaStreamNonBlocking));
  Comm->setComputeStream(Stream);
  const size_t N = 1 << 20;
  std::vector<float> Ones(N, 1.0f);
  DeviceBuffer<float> D(N), Out(N);
  MOERT_CUDA_CHECK(cudaMemcpyAsync(D.data(), Ones.data(), N * sizeof(float), cudaMemcpyHostToDevice, Stream));
  Comm->allReduceSum(D.data(), N);
  MOERT_CUDA_CHECK(cudaMemcpyAsync(Out.data(), D.data(), N * sizeof(float), cudaMemcpyDeviceToDevice, Stream));
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
  EXPECT_EQ(Out.download(), std::vector<float>(N, float(Size)));
  Comm->setComputeStream(nullptr);
  MOERT_CUDA_CHECK(cudaStreamDestroy(Stream));
}

} // namespace
