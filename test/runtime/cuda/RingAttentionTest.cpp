//===- RingAttentionTest.cpp - GPU ring attention against the CPU ring ----===//
//
// Several ranks share one GPU through the host-staged communicator (NCCL
// refuses that); each rank's GPU ring attention (forward and backward) must
// match the CPU backend's contextParallelAttention over MPI on the same
// bf16-rounded inputs, for CP groups of 1, 2 and 4.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"
#include "MpiTestEnv.h"

#include "comm/nccl/HostStagedComm.h"
#include "kernels/cuda/RingAttention.h"

#include <numeric>

using namespace moert;
using namespace moert::cuda;

namespace {

TEST(CudaRingAttention, MatchesCpuRingOverMpi) {
  CommWorld &W = test::world();
  std::vector<int> All(W.size());
  std::iota(All.begin(), All.end(), 0);
  auto Cp = W.split("cp", {All});
  auto DevCp = createHostStagedCommunicator(*Cp);
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

TEST(CudaHostStaged, CollectivesOnDeviceBuffers) {
  CommWorld &W = test::world();
  std::vector<int> All(W.size());
  std::iota(All.begin(), All.end(), 0);
  auto Host = W.split("dp", {All});
  auto Dev = createHostStagedCommunicator(*Host);
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
