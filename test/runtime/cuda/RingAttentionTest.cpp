//===- RingAttentionTest.cpp - GPU ring attention against the CPU ring ----===//
//
// Several ranks share one GPU through the host-staged communicator (NCCL
// refuses that); each rank's GPU ring attention (forward and backward) must
// match the CPU backend's contextParallelAttention over MPI on the same
// bf16-rounded inputs, for CP groups of 1, 2 and 4; and so must the CUDA
// backend's, which the transformer's attention runs where it is given the cp
// group over device buffers.
//
//===----------------------------------------------------------------------===//
#include "EveryRankGroup.h"
#include "GpuTestUtil.h"
#include "MpiTestEnv.h"

#include "kernels/Backend.h"
#include "kernels/cuda/CudaBackend.h"
#include "kernels/cuda/RingAttention.h"

#include <numeric>

using namespace moert;
using namespace moert::cuda;

namespace {

TEST(CudaRingAttention, MatchesCpuRingOverMpi) {
  CommWorld &W = test::world();
  test::EveryRankGroup Group("cp");
  Communicator *Cp = Group.Host.get();
  DeviceCommunicator *DevCp = Group.Device.get();
  const int64_t B = 2, Seq = 64 * 2 * W.size(), QH = 4, KvH = 2, Hd = 64;
  AttentionDims D{B, Seq, QH, KvH, Hd};
  int64_t Local = Seq / W.size();
  size_t QN = size_t(B * Local * QH * Hd), KN = size_t(B * Local * KvH * Hd);
  uint64_t Seed = 1000 + 10 * uint64_t(W.rank());
  auto Q = test::randomBf16(QN, Seed), K = test::randomBf16(KN, Seed + 1);
  auto V = test::randomBf16(KN, Seed + 2), DOut = test::randomBf16(QN, Seed + 3);
  std::vector<float> Out(QN), Lse(size_t(B * QH * Local)), DQ(QN), DK(KN), DV(KN);
  contextParallelAttentionForward(*Cp, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data());
  contextParallelAttentionBackward(*Cp, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data(), DOut.data(), DQ.data(),
                                   DK.data(), DV.data());

  auto GQ = uploadBf16(Q), GK = uploadBf16(K), GV = uploadBf16(V);
  auto GDO = uploadBf16(DOut);
  DeviceBuffer<float> GOut(QN), GLse(Lse.size()), GDQ(QN), GDK(KN), GDV(KN);
  ringAttentionForward(*DevCp, D, GQ.data(), GK.data(), GV.data(), GOut.data(), GLse.data(), nullptr);
  ringAttentionBackward(*DevCp, D, GQ.data(), GK.data(), GV.data(), GOut.data(), GLse.data(), GDO.data(), GDQ.data(),
                        GDK.data(), GDV.data(), nullptr);
  std::string Rank = "rank " + std::to_string(W.rank());
  EXPECT_TRUE(test::near(GOut.download(), Out, test::AttnTol, "Out, " + Rank));
  EXPECT_TRUE(test::near(GLse.download(), Lse, test::AttnTol, "Lse, " + Rank));
  EXPECT_TRUE(test::near(GDQ.download(), DQ, 1e-3, "dQ, " + Rank));
  EXPECT_TRUE(test::near(GDK.download(), DK, 1e-3, "dK, " + Rank));
  EXPECT_TRUE(test::near(GDV.download(), DV, 1e-3, "dV, " + Rank));
}

int64_t attentionBytes(const ComputeBackend &Backend, bool ToDevice) {
  const BackendTraffic T = Backend.traffic();
  auto It = T.ByOperation.find("attention");
  return It == T.ByOperation.end() ? 0 : ToDevice ? It->second.HostToDeviceBytes : It->second.DeviceToHostBytes;
}

/// Every exchange of the CUDA backend's cp attention against the CPU ring
/// on the same bf16 inputs, and what crosses between host and device.
void checkBackendCpAttention(int64_t B, int64_t QH, int64_t KvH, int64_t Hd, int64_t VHd) {
  CommWorld &W = test::world();
  test::EveryRankGroup Group("cp");
  Communicator *Cp = Group.Host.get();
  DeviceCommunicator *DevCp = Group.Device.get();
  const int64_t Seq = 16 * 2 * W.size();
  AttentionDims D{B, Seq, QH, KvH, Hd, VHd};
  const int64_t Local = Seq / W.size();
  const size_t QN = size_t(B * Local * QH * Hd), KN = size_t(B * Local * KvH * Hd), VN = size_t(B * Local * KvH * VHd),
               ON = size_t(B * Local * QH * VHd), LseN = size_t(B * QH * Local);
  uint64_t Seed = 2000 + 10 * uint64_t(W.rank());
  auto Q = test::randomBf16(QN, Seed), K = test::randomBf16(KN, Seed + 1);
  auto V = test::randomBf16(VN, Seed + 2), DOut = test::randomBf16(ON, Seed + 3);
  std::vector<float> Out(ON), Lse(LseN), DQ(QN), DK(KN), DV(VN);
  contextParallelAttentionForward(*Cp, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data());
  // The backend reads the output in bf16 for the backward's Delta, as it
  // does its operands (and its one-rank attention).
  std::vector<float> Out16(ON);
  for (size_t I = 0; I < ON; ++I)
    Out16[I] = floatFromBf16(bf16FromFloat(Out[I]));
  contextParallelAttentionBackward(*Cp, D, Q.data(), K.data(), V.data(), Out16.data(), Lse.data(), DOut.data(),
                                   DQ.data(), DK.data(), DV.data());

  int Device = 0;
  ASSERT_EQ(cudaGetDevice(&Device), cudaSuccess);
  std::unique_ptr<ComputeBackend> Backend = createCudaBackend(Device);
  BackendScope OnCuda(*Backend);
  const bool Ringed = W.size() > 1;
  // Only a group with peers, with a counterpart over device buffers, where
  // the backend has a kernel for the heads (for the all-to-all, for each
  // rank's share of them); the all-gather exchanges there in any case.
  EXPECT_FALSE(exchangeOnBackend(*Cp, D, CpExchange::Ring));
  Cp->setDevice(Cp); // a host group is no device group
  EXPECT_FALSE(exchangeOnBackend(*Cp, D, CpExchange::Ring));
  Cp->setDevice(DevCp);
  EXPECT_EQ(exchangeOnBackend(*Cp, D, CpExchange::Ring), Ringed);
  EXPECT_EQ(exchangeOnBackend(*Cp, D, CpExchange::AllGather), Ringed);
  EXPECT_EQ(exchangeOnBackend(*Cp, D, CpExchange::AllToAll), Ringed);
  AttentionDims Narrow = D;
  Narrow.HeadDim = 16; // no kernel for heads of 16 columns
  EXPECT_FALSE(exchangeOnBackend(*Cp, Narrow, CpExchange::Ring));
  EXPECT_FALSE(exchangeOnBackend(*Cp, Narrow, CpExchange::AllToAll));

  // The ring; the all-gather, whose blocks meet in the ring's order; the
  // all-to-all, whose head shards attend over the whole sequence at once.
  bool PositionsUp = false;
  for (CpExchange Exchange : {CpExchange::Ring, CpExchange::AllGather, CpExchange::AllToAll}) {
    const std::string Where = std::string(Exchange == CpExchange::Ring        ? "ring"
                                          : Exchange == CpExchange::AllGather ? "all-gather"
                                                                              : "all-to-all") +
                              ", heads " + std::to_string(Hd) + "/" + std::to_string(VHd) + ", rank " +
                              std::to_string(W.rank());
    const int64_t Up = attentionBytes(*Backend, true), Down = attentionBytes(*Backend, false);
    std::vector<float> GOut(ON), GLse(LseN), GDQ(QN), GDK(KN), GDV(VN);
    contextParallelAttentionForward(*Cp, D, Q.data(), K.data(), V.data(), GOut.data(), GLse.data(), Exchange);
    contextParallelAttentionBackward(*Cp, D, Q.data(), K.data(), V.data(), GOut.data(), GLse.data(), DOut.data(),
                                     GDQ.data(), GDK.data(), GDV.data(), Exchange);
    EXPECT_TRUE(test::near(GOut, Out, test::AttnTol, "Out, " + Where));
    EXPECT_TRUE(test::near(GLse, Lse, test::AttnTol, "Lse, " + Where));
    EXPECT_TRUE(test::near(GDQ, DQ, 1e-3, "dQ, " + Where));
    EXPECT_TRUE(test::near(GDK, DK, 1e-3, "dK, " + Where));
    EXPECT_TRUE(test::near(GDV, DV, 1e-3, "dV, " + Where));
    if (!Ringed)
      continue;
    // Each tensor crosses once, in fp32: Q, K and V up and the output and
    // log-sum-exp back in the forward; Q, K, V, the output, its gradient
    // and the log-sum-exp up and dQ, dK and dV back in the backward. The
    // blocks travel between device buffers, whatever the group's size. The
    // group's positions go up once, for every exchange, forward and backward.
    const int64_t F = sizeof(float), Positions = PositionsUp ? 0 : D.SeqLen * int64_t(sizeof(int32_t));
    PositionsUp = true;
    EXPECT_EQ(attentionBytes(*Backend, true) - Up, F * int64_t(2 * (QN + KN + VN + ON) + LseN) + Positions) << Where;
    EXPECT_EQ(attentionBytes(*Backend, false) - Down, F * int64_t(QN + KN + VN + ON + LseN)) << Where;
  }
}

// Heads that divide by every group's size here, for the all-to-all.
TEST(CudaBackendCpAttention, RunsWhereTheBackendIsOverTheDeviceGroup) { checkBackendCpAttention(2, 8, 4, 32, 32); }

// Latent attention's widths (DeepSeek-V3: queries and keys 192 wide, values
// 128), which the kernels take in narrower tiles.
TEST(CudaBackendCpAttention, TakesValuesNarrowerThanKeys) { checkBackendCpAttention(1, 4, 4, 192, 128); }

TEST(CudaHostStaged, CollectivesOnDeviceBuffers) {
  test::EveryRankGroup Group("dp");
  DeviceCommunicator *Dev = Group.Device.get();
  int Size = Dev->size(), Rank = Dev->rank();
  std::vector<float> Mine(size_t(Size) * 8);
  std::iota(Mine.begin(), Mine.end(), float(Rank));
  DeviceBuffer<float> D;
  D.upload(Mine);
  Dev->allReduceSum(D.data(), D.size());
  std::vector<float> Got = D.download();
  for (size_t I = 0; I < Got.size(); ++I)
    ASSERT_EQ(Got[I], float(Size) * float(I) + float(Size * (Size - 1) / 2));
  DeviceBuffer<float> Slice(8), Gathered(size_t(Size) * 8);
  DeviceBuffer<float> In;
  In.upload(Mine);
  Dev->reduceScatterSum(In.data(), Slice.data(), 8);
  Dev->allGather(Slice.data(), Gathered.data(), 8);
  EXPECT_EQ(Gathered.download(), Got);
}

} // namespace
