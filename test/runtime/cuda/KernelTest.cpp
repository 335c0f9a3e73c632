//===- KernelTest.cpp - CUDA kernels against the CPU backend --------------===//
//
// Every kernel runs on inputs already rounded to bf16, and is compared with
// the CPU backend's own function (model/ModelOps, parallel/cp, parallel/ep,
// parallel/tp, kernels/host/Blas) on the same values; tolerances are in
// GpuTestUtil.h.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"

#include "kernels/Backend.h"
#include "kernels/cuda/AdamW.h"
#include "kernels/cuda/Attention.h"
#include "kernels/cuda/CrossEntropy.h"
#if MOERT_HAS_CUDNN
#include "kernels/cuda/CudnnAttention.h"
#endif
#include "kernels/cuda/DeltaRule.h"
#include "kernels/cuda/Elementwise.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/LinearAttention.h"
#include "kernels/cuda/Moe.h"
#include "kernels/host/Blas.h"
#include "model/GatedDeltaRule.h"
#include "model/ModelOps.h"
#include "model/Router.h"
#include "parallel/cp/ContextParallelAttention.h"
#include "parallel/ep/TokenDispatcher.h"
#include "parallel/tp/VocabParallel.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <stdexcept>
#include <tuple>

using namespace moert;
using namespace moert::cuda;
using namespace moert::test;

namespace {

Tensor tensorOf(std::vector<int64_t> Shape, const std::vector<float> &V) {
  Tensor T(std::move(Shape));
  EXPECT_EQ(size_t(T.numel()), V.size());
  std::copy(V.begin(), V.end(), T.data());
  return T;
}

void sync() { MOERT_CUDA_CHECK(cudaDeviceSynchronize()); }

template <typename T> DeviceBuffer<T> uploadVec(const std::vector<T> &V) {
  DeviceBuffer<T> B;
  B.upload(V);
  return B;
}

//===--------------------------------------------------------------------===//
// GEMM
//===--------------------------------------------------------------------===//

TEST(CudaGemm, DenseMatchesHostGemmForEveryTransposeAndOutputType) {
  BlasHandle H;
  const int64_t M = 37, N = 53, K = 70;
  for (int TA = 0; TA < 2; ++TA)
    for (int TB = 0; TB < 2; ++TB) {
      std::vector<float> A = randomBf16(M * K, 1 + TA), B = randomBf16(K * N, 3 + TB);
      std::vector<float> C0 = randomBf16(M * N, 5);
      std::vector<float> Want = C0;
      gemm(TA, TB, M, N, K, 0.5f, A.data(), B.data(), 0.25f, Want.data());
      auto DA = uploadBf16(A), DB = uploadBf16(B);
      auto DC = uploadF32(C0);
      gemm(H, TA, TB, M, N, K, 0.5f, DA.data(), DB.data(), 0.25f, DC.data(), OutType::F32);
      sync();
      std::string Case = "TA=" + std::to_string(TA) + " TB=" + std::to_string(TB);
      EXPECT_TRUE(near(DC.download(), Want, 1e-4, "fp32 C, " + Case));
      // bf16 output, Beta = 0.
      std::vector<float> Want0(M * N, 0.0f);
      gemm(TA, TB, M, N, K, 1.0f, A.data(), B.data(), 0.0f, Want0.data());
      DeviceBuffer<bf16> DC16(M * N);
      gemm(H, TA, TB, M, N, K, 1.0f, DA.data(), DB.data(), 0.0f, DC16.data(), OutType::BF16);
      sync();
      EXPECT_TRUE(near(downloadBf16(DC16), Want0, Bf16Tol, "bf16 C, " + Case));
    }
}

class CudaGroupedGemm : public ::testing::TestWithParam<GroupedMode> {};

TEST_P(CudaGroupedGemm, ExpertForwardDataAndWeightGradientsMatchHostLoops) {
  BlasHandle H;
  const std::vector<int64_t> Rows = {5, 0, 17, 9}; // an expert with no rows
  const int64_t In = 48, Out = 40, G = int64_t(Rows.size());
  const int64_t Total = std::accumulate(Rows.begin(), Rows.end(), int64_t(0));
  std::vector<float> X = randomBf16(Total * In, 11), W = randomBf16(G * In * Out, 12);
  std::vector<float> DY = randomBf16(Total * Out, 13), DW0 = randomBf16(G * In * Out, 14);
  std::vector<float> WantY(Total * Out), WantDX(Total * In), WantDW = DW0;
  int64_t Begin = 0;
  for (int64_t E = 0; E < G; ++E) {
    int64_t M = Rows[E];
    if (M) {
      gemm(false, false, M, Out, In, 1.0f, &X[Begin * In], &W[E * In * Out], 0.0f, &WantY[Begin * Out]);
      gemm(false, true, M, In, Out, 1.0f, &DY[Begin * Out], &W[E * In * Out], 0.0f, &WantDX[Begin * In]);
      gemm(true, false, In, Out, M, 1.0f, &X[Begin * In], &DY[Begin * Out], 1.0f, &WantDW[E * In * Out]);
    }
    Begin += M;
  }
  auto DX = uploadBf16(X), DWt = uploadBf16(W), DDY = uploadBf16(DY);
  DeviceBuffer<bf16> Y(Total * Out), GotDX(Total * In);
  auto GotDW = uploadF32(DW0);
  groupedGemm(H, GetParam(), Rows, Out, In, DX.data(), DWt.data(), false, 0.0f, Y.data(), OutType::BF16);
  groupedGemm(H, GetParam(), Rows, In, Out, DDY.data(), DWt.data(), true, 0.0f, GotDX.data(), OutType::BF16);
  groupedWeightGradGemm(H, GetParam(), Rows, In, Out, DX.data(), DDY.data(), 1.0f, GotDW.data());
  sync();
  EXPECT_TRUE(near(downloadBf16(Y), WantY, Bf16Tol, "expert forward"));
  EXPECT_TRUE(near(downloadBf16(GotDX), WantDX, Bf16Tol, "expert dX"));
  std::vector<float> DWGot = GotDW.download();
  EXPECT_TRUE(near(DWGot, WantDW, 1e-4, "expert dW"));
  // The empty expert's gradient is untouched.
  for (int64_t I = 0; I < In * Out; ++I)
    ASSERT_EQ(DWGot[In * Out + I], DW0[In * Out + I]);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaGroupedGemm,
                         ::testing::Values(GroupedMode::Loop, GroupedMode::Streams, GroupedMode::Batched,
                                           GroupedMode::Auto));

TEST(CudaGroupedGemm, AutoSpreadsSmallExpertsOverStreams) {
  // The H200 shapes of docs/benchmarks.md (132 multiprocessors): 8 experts of
  // 4096 rows x 14336 fill the GPU (32 x 56 tiles each) and run as a loop;
  // 64 of 512 x 2048 (4 x 8) and 8 of 2048 x 1536 (16 x 6) do not.
  EXPECT_EQ(autoGroupedMode(std::vector<int64_t>(8, 4096), 14336, 132), GroupedMode::Loop);
  EXPECT_EQ(autoGroupedMode(std::vector<int64_t>(64, 512), 2048, 132), GroupedMode::Streams);
  EXPECT_EQ(autoGroupedMode(std::vector<int64_t>(8, 2048), 1536, 132), GroupedMode::Streams);
  // Empty experts do not count toward the mean; none at all is a loop.
  std::vector<int64_t> Skewed(8, 0);
  Skewed[0] = 32768;
  EXPECT_EQ(autoGroupedMode(Skewed, 2048, 132), GroupedMode::Loop);
  EXPECT_EQ(autoGroupedMode({}, 2048, 132), GroupedMode::Loop);
  // 17 x 8 = 136 tiles: a loop on 132 multiprocessors, streams on 148.
  EXPECT_EQ(autoGroupedMode(std::vector<int64_t>(8, 2176), 2048, 132), GroupedMode::Loop);
  EXPECT_EQ(autoGroupedMode(std::vector<int64_t>(8, 2176), 2048, 148), GroupedMode::Streams);
}

//===--------------------------------------------------------------------===//
// Attention
//===--------------------------------------------------------------------===//

struct AttnCase {
  int64_t Batch, SeqLen, QHeads, KvHeads, HeadDim, VHeadDim = 0; ///< 0: HeadDim
  int64_t vHeadDim() const { return VHeadDim ? VHeadDim : HeadDim; }
};

/// Random bf16 inputs of a case and the host's causal attention on them (the
/// CPU backend's context-parallel attention on one rank), forward and back.
struct HostAttention {
  int64_t QN, KN, VN, ON, LN;
  std::vector<float> Q, K, V, DOut, Out, Lse, DQ, DK, DV;
  DeviceAttentionShape Shape;

  HostAttention(const AttnCase &C, uint64_t Seed)
      : QN(C.Batch * C.SeqLen * C.QHeads * C.HeadDim), KN(C.Batch * C.SeqLen * C.KvHeads * C.HeadDim),
        VN(C.Batch * C.SeqLen * C.KvHeads * C.vHeadDim()), ON(C.Batch * C.SeqLen * C.QHeads * C.vHeadDim()),
        LN(C.Batch * C.QHeads * C.SeqLen), Q(randomBf16(QN, Seed)), K(randomBf16(KN, Seed + 1)),
        V(randomBf16(VN, Seed + 2)), DOut(randomBf16(ON, Seed + 3)), Out(ON), Lse(LN), DQ(QN), DK(KN), DV(VN),
        Shape{C.Batch,   C.SeqLen, C.SeqLen, C.QHeads, C.KvHeads, C.HeadDim, float(1.0 / std::sqrt(double(C.HeadDim))),
              C.VHeadDim} {
    AttentionDims D{C.Batch, C.SeqLen, C.QHeads, C.KvHeads, C.HeadDim, C.VHeadDim};
    auto Self = createSelfCommunicator("cp");
    contextParallelAttentionForward(*Self, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data());
    contextParallelAttentionBackward(*Self, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data(), DOut.data(),
                                     DQ.data(), DK.data(), DV.data());
  }
};

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttention, CausalForwardAndBackwardMatchHostAttention) {
  AttnCase C = GetParam();
  HostAttention Ref(C, 21);
  const auto &[QN, KN, VN, ON, LN, Q, K, V, DOut, Out, Lse, DQ, DK, DV, S] = Ref;
  std::vector<int32_t> Pos(C.SeqLen);
  std::iota(Pos.begin(), Pos.end(), 0);
  auto DQb = uploadBf16(Q), DKb = uploadBf16(K), DVb = uploadBf16(V);
  auto DDO = uploadBf16(DOut);
  auto DPos = uploadVec(Pos);
  DeviceBuffer<float> GOut(ON), GLse(LN), GDelta(LN), GDQ(QN), GDK(KN), GDV(VN);
  causalAttentionForward(S, DQb.data(), DKb.data(), DVb.data(), DPos.data(), GOut.data(), GLse.data(), nullptr);
  causalAttentionBackward(S, DQb.data(), DKb.data(), DVb.data(), DPos.data(), GOut.data(), GLse.data(), DDO.data(),
                          GDelta.data(), GDQ.data(), GDK.data(), GDV.data(), nullptr);
  sync();
  EXPECT_TRUE(near(GOut.download(), Out, AttnTol, "Out"));
  EXPECT_TRUE(near(GLse.download(), Lse, AttnTol, "Lse"));
  EXPECT_TRUE(near(GDQ.download(), DQ, 1e-3, "dQ"));
  EXPECT_TRUE(near(GDK.download(), DK, 1e-3, "dK"));
  EXPECT_TRUE(near(GDV.download(), DV, 1e-3, "dV"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttnCase{2, 100, 4, 2, 64}, // partial tiles, GQA
                                           AttnCase{1, 70, 2, 2, 32},
                                           AttnCase{1, 129, 4, 1, 128}, // one KV head for four
                                           AttnCase{1, 1, 1, 1, 64},
                                           // latent attention's widths (DeepSeek-V3), the
                                           // narrower tiles of wide heads, partial ones too
                                           AttnCase{1, 45, 2, 2, 192, 128}, AttnCase{2, 33, 2, 1, 192, 128},
                                           // the vision towers' heads of 72 (Qwen3-VL), and
                                           // heads of 256 (Qwen3-Next's and Qwen3.5's
                                           // attention layers) in blocks of 16 query rows
                                           AttnCase{1, 77, 2, 1, 72}, AttnCase{1, 37, 2, 1, 256}));

#if MOERT_HAS_CUDNN
// cuDNN's fused attention against the same host reference. Out and the
// gradients are bf16 there (one rounding of each, Bf16Tol), and the backward
// reads the bf16 Out, so the gradients get twice that.
class CudnnFusedAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudnnFusedAttention, CausalForwardAndBackwardMatchHostAttention) {
  HostAttention Ref(GetParam(), 31);
  const auto &[QN, KN, VN, ON, LN, Q, K, V, DOut, Out, Lse, DQ, DK, DV, S] = Ref;
  auto DQb = uploadBf16(Q), DKb = uploadBf16(K), DVb = uploadBf16(V), DDO = uploadBf16(DOut);
  // Outputs start as NaN: an element cuDNN does not write fails the check.
  auto GOut = uploadBf16(std::vector<float>(ON, NAN)), GDQ = uploadBf16(std::vector<float>(QN, NAN));
  auto GDK = uploadBf16(std::vector<float>(KN, NAN)), GDV = uploadBf16(std::vector<float>(VN, NAN));
  auto GLse = uploadVec(std::vector<float>(LN, NAN));
  CudnnAttention Attn;
  Attn.forward(S, DQb.data(), DKb.data(), DVb.data(), GOut.data(), GLse.data(), nullptr);
  Attn.backward(S, DQb.data(), DKb.data(), DVb.data(), GOut.data(), DDO.data(), GLse.data(), GDQ.data(), GDK.data(),
                GDV.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GOut), Out, Bf16Tol, "Out"));
  EXPECT_TRUE(near(GLse.download(), Lse, AttnTol, "Lse"));
  EXPECT_TRUE(near(downloadBf16(GDQ), DQ, 2 * Bf16Tol, "dQ"));
  EXPECT_TRUE(near(downloadBf16(GDK), DK, 2 * Bf16Tol, "dK"));
  EXPECT_TRUE(near(downloadBf16(GDV), DV, 2 * Bf16Tol, "dV"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnFusedAttention,
                         ::testing::Values(AttnCase{2, 100, 4, 2, 64}, // partial tiles, GQA
                                           AttnCase{1, 129, 4, 1, 128}, AttnCase{2, 512, 8, 2, 128}));
#endif // MOERT_HAS_CUDNN

/// Rows of [Batch, Seq, Width] at the given sequence positions.
std::vector<float> gatherRows(const std::vector<float> &Full, int64_t Batch, int64_t Seq, int64_t Width,
                              const std::vector<int64_t> &Positions) {
  std::vector<float> Out;
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t P : Positions)
      Out.insert(Out.end(), Full.begin() + (B * Seq + P) * Width, Full.begin() + (B * Seq + P + 1) * Width);
  return Out;
}

/// Lse [Batch, Heads, Seq] at the given positions.
std::vector<float> gatherLse(const std::vector<float> &Full, int64_t Batch, int64_t Heads, int64_t Seq,
                             const std::vector<int64_t> &Positions) {
  std::vector<float> Out;
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t H = 0; H < Heads; ++H)
      for (int64_t P : Positions)
        Out.push_back(Full[(B * Heads + H) * Seq + P]);
  return Out;
}

// The CP chunk masks: the blocks of a CP group of 2 and of 3, all held by this
// one process, merged block by block into each rank's (Out, Lse) must give
// that rank's rows of full causal attention; the backward blocks summed over
// every (query rank, key rank) pair give the full gradients.
TEST(CudaAttentionBlocks, CpChunkMasksMergeToFullCausalAttention) {
  for (int Cp : {2, 3}) {
    const int64_t B = 1, Seq = 96 * Cp / 2, QH = 4, KvH = 2, Hd = 64;
    AttentionDims D{B, Seq, QH, KvH, Hd};
    auto Q = randomBf16(B * Seq * QH * Hd, 31), K = randomBf16(B * Seq * KvH * Hd, 32);
    auto V = randomBf16(B * Seq * KvH * Hd, 33), DOut = randomBf16(B * Seq * QH * Hd, 34);
    auto Self = createSelfCommunicator("cp");
    std::vector<float> Out(Q.size()), Lse(B * QH * Seq), DQ(Q.size()), DK(K.size()), DV(V.size());
    contextParallelAttentionForward(*Self, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data());
    contextParallelAttentionBackward(*Self, D, Q.data(), K.data(), V.data(), Out.data(), Lse.data(), DOut.data(),
                                     DQ.data(), DK.data(), DV.data());
    int64_t Local = Seq / Cp;
    DeviceAttentionShape S{B, Local, Local, QH, KvH, Hd, float(1.0 / std::sqrt(double(Hd)))};
    struct RankData {
      std::vector<int64_t> Pos;
      DeviceBuffer<int32_t> DPos;
      DeviceBuffer<bf16> Q, K, V, DOut;
      DeviceBuffer<float> Out, Lse, Delta, DQ, DK, DV;
    };
    std::vector<RankData> R(Cp);
    for (int I = 0; I < Cp; ++I) {
      R[I].Pos = localPositions(I, Cp, Seq);
      R[I].DPos = uploadVec(std::vector<int32_t>(R[I].Pos.begin(), R[I].Pos.end()));
      R[I].Q = uploadBf16(gatherRows(Q, B, Seq, QH * Hd, R[I].Pos));
      R[I].K = uploadBf16(gatherRows(K, B, Seq, KvH * Hd, R[I].Pos));
      R[I].V = uploadBf16(gatherRows(V, B, Seq, KvH * Hd, R[I].Pos));
      R[I].DOut = uploadBf16(gatherRows(DOut, B, Seq, QH * Hd, R[I].Pos));
      R[I].Out.resize(B * Local * QH * Hd);
      R[I].Lse.resize(B * QH * Local);
      R[I].Delta.resize(B * QH * Local);
      R[I].DQ.resize(B * Local * QH * Hd);
      R[I].DK.resize(B * Local * KvH * Hd);
      R[I].DV.resize(B * Local * KvH * Hd);
      R[I].DQ.zero();
      R[I].DK.zero();
      R[I].DV.zero();
      attentionInit(S, R[I].Out.data(), R[I].Lse.data(), nullptr);
    }
    // Forward: key blocks in ring order, as the CP ring would bring them.
    for (int I = 0; I < Cp; ++I)
      for (int Step = 0; Step < Cp; ++Step) {
        int J = (I - Step + Cp) % Cp;
        attentionForwardBlock(S, R[I].Q.data(), R[I].DPos.data(), R[J].K.data(), R[J].V.data(), R[J].DPos.data(),
                              R[I].Out.data(), R[I].Lse.data(), nullptr);
      }
    for (int I = 0; I < Cp; ++I)
      attentionDelta(S, R[I].DOut.data(), R[I].Out.data(), R[I].Delta.data(), nullptr);
    for (int I = 0; I < Cp; ++I)
      for (int J = 0; J < Cp; ++J)
        attentionBackwardBlock(S, R[I].Q.data(), R[I].DPos.data(), R[J].K.data(), R[J].V.data(), R[J].DPos.data(),
                               R[I].Lse.data(), R[I].Delta.data(), R[I].DOut.data(), R[I].DQ.data(), R[J].DK.data(),
                               R[J].DV.data(), nullptr);
    sync();
    for (int I = 0; I < Cp; ++I) {
      std::string Rank = "cp " + std::to_string(Cp) + " rank " + std::to_string(I);
      EXPECT_TRUE(near(R[I].Out.download(), gatherRows(Out, B, Seq, QH * Hd, R[I].Pos), AttnTol, "Out, " + Rank));
      EXPECT_TRUE(near(R[I].Lse.download(), gatherLse(Lse, B, QH, Seq, R[I].Pos), AttnTol, "Lse, " + Rank));
      EXPECT_TRUE(near(R[I].DQ.download(), gatherRows(DQ, B, Seq, QH * Hd, R[I].Pos), 1e-3, "dQ, " + Rank));
      EXPECT_TRUE(near(R[I].DK.download(), gatherRows(DK, B, Seq, KvH * Hd, R[I].Pos), 1e-3, "dK, " + Rank));
      EXPECT_TRUE(near(R[I].DV.download(), gatherRows(DV, B, Seq, KvH * Hd, R[I].Pos), 1e-3, "dV, " + Rank));
    }
  }
}

TEST(CudaAttentionBlocks, BlockWithNoVisibleKeyLeavesStateUntouched) {
  // Queries at positions 0..31 against keys at 100..131: all hidden.
  DeviceAttentionShape S{1, 32, 32, 2, 2, 32, 0.25f};
  std::vector<int32_t> QPos(32), KPos(32);
  std::iota(QPos.begin(), QPos.end(), 0);
  std::iota(KPos.begin(), KPos.end(), 100);
  auto Q = uploadBf16(randomBf16(32 * 2 * 32, 41)), K = uploadBf16(randomBf16(32 * 2 * 32, 42));
  auto V = uploadBf16(randomBf16(32 * 2 * 32, 43));
  std::vector<float> Out0 = randomBf16(32 * 2 * 32, 44), Lse0(2 * 32, 1.5f);
  auto Out = uploadF32(Out0), Lse = uploadF32(Lse0);
  auto DQ = uploadVec(QPos), DK = uploadVec(KPos);
  attentionForwardBlock(S, Q.data(), DQ.data(), K.data(), V.data(), DK.data(), Out.data(), Lse.data(), nullptr);
  sync();
  EXPECT_EQ(Out.download(), Out0);
  EXPECT_EQ(Lse.download(), Lse0);
}

TEST(CudaAttentionBlocks, RejectsUnsupportedHeadDim) {
  DeviceAttentionShape S{1, 4, 4, 2, 2, 96, 0.1f};
  EXPECT_THROW(attentionForwardBlock(S, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  S.HeadDim = 128;
  S.VHeadDim = 64; // values narrower than keys, but no kernel for the pair
  EXPECT_THROW(attentionForwardBlock(S, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_FALSE(attentionKernelTakesWidths(128, 64));
  EXPECT_TRUE(attentionKernelTakesWidths(192, 128));
  EXPECT_TRUE(attentionKernelTakesWidths(72, 72));
  EXPECT_TRUE(attentionKernelTakesWidths(256, 256));
}

//===--------------------------------------------------------------------===//
// Gated DeltaNet's recurrence
//===--------------------------------------------------------------------===//

/// Inputs as Gated DeltaNet makes them: unit-norm q and k per head, decays
/// g = -exp(A) softplus(..) < 0, beta in (0, 1).
struct DeltaRuleInputs {
  std::vector<float> Q, K, V, G, Beta, DO;
  DeltaRuleInputs(const DeltaRuleShape &S, uint64_t Seed) {
    const int64_t Rows = S.Sequences * S.SeqLen, D = S.HeadDim;
    std::mt19937_64 Gen(Seed);
    std::normal_distribution<float> Normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> Unit(0.0f, 1.0f);
    auto Heads = [&](int64_t Count) {
      std::vector<float> X(size_t(Rows * Count * D));
      for (float &E : X)
        E = Normal(Gen);
      for (int64_t H = 0; H < Rows * Count; ++H) {
        double Norm = 0;
        for (int64_t I = 0; I < D; ++I)
          Norm += double(X[H * D + I]) * X[H * D + I];
        for (int64_t I = 0; I < D; ++I)
          X[H * D + I] = float(X[H * D + I] / std::sqrt(Norm));
      }
      return X;
    };
    Q = Heads(S.KeyHeads);
    K = Heads(S.KeyHeads);
    V = randomBf16(size_t(Rows * S.ValueHeads * D), Seed + 1);
    DO = randomBf16(V.size(), Seed + 2);
    for (int64_t I = 0; I < Rows * S.ValueHeads; ++I) {
      G.push_back(-0.02f - 0.5f * Unit(Gen));
      Beta.push_back(Unit(Gen));
    }
  }
};

class CudaDeltaRule : public ::testing::TestWithParam<DeltaRuleShape> {};

std::string deltaRuleCaseName(const ::testing::TestParamInfo<DeltaRuleShape> &I) {
  const DeltaRuleShape &S = I.param;
  return std::to_string(S.Sequences) + "x" + std::to_string(S.SeqLen) + "_heads" + std::to_string(S.KeyHeads) + "_" +
         std::to_string(S.ValueHeads) + "_of" + std::to_string(S.HeadDim);
}

// The kernels against model/GatedDeltaRule.cpp head by head: several chunks
// of the backward's checkpoints (a partial one last), grouped value heads
// whose key-head gradients sum, widths under and over a warp, columns held
// by one thread (up to 32 rows) and by two and four (64, 128).
TEST_P(CudaDeltaRule, ForwardAndBackwardMatchTheHost) {
  const DeltaRuleShape S = GetParam();
  const int64_t Rows = S.Sequences * S.SeqLen, D = S.HeadDim;
  const DeltaRuleInputs In(S, 51);
  std::vector<float> O(In.V.size()), DQ(In.Q.size()), DK(In.K.size()), DV(In.V.size()), DG(In.G.size()),
      DBeta(In.G.size());
  DeltaRuleHead Head;
  Head.Tokens = S.SeqLen;
  Head.Dk = Head.Dv = D;
  Head.QkStride = S.KeyHeads * D;
  Head.VStride = S.ValueHeads * D;
  Head.GStride = S.ValueHeads;
  for (int64_t Seq = 0; Seq < S.Sequences; ++Seq)
    for (int64_t H = 0; H < S.ValueHeads; ++H) {
      const int64_t Row = Seq * S.SeqLen, Kh = H / (S.ValueHeads / S.KeyHeads);
      const int64_t Qk = Row * Head.QkStride + Kh * D, Vo = Row * Head.VStride + H * D, Gi = Row * S.ValueHeads + H;
      gatedDeltaRuleForward(Head, &In.Q[Qk], &In.K[Qk], &In.V[Vo], &In.G[Gi], &In.Beta[Gi], &O[Vo]);
      gatedDeltaRuleBackward(Head, &In.Q[Qk], &In.K[Qk], &In.V[Vo], &In.G[Gi], &In.Beta[Gi], &In.DO[Vo], &DQ[Qk],
                             &DK[Qk], &DV[Vo], &DG[Gi], &DBeta[Gi]);
    }
  ASSERT_TRUE(deltaRuleKernelTakes(S));
  auto GQ = uploadF32(In.Q), GK = uploadF32(In.K), GV = uploadF32(In.V), GG = uploadF32(In.G);
  auto GB = uploadF32(In.Beta), GDO = uploadF32(In.DO);
  // Outputs start as NaN: an element the kernels do not write fails.
  auto GO = uploadF32(std::vector<float>(O.size(), NAN)), GDQ = uploadF32(std::vector<float>(DQ.size(), NAN));
  auto GDK = uploadF32(std::vector<float>(DK.size(), NAN)), GDV = uploadF32(std::vector<float>(DV.size(), NAN));
  auto GDG = uploadF32(std::vector<float>(DG.size(), NAN)), GDB = uploadF32(std::vector<float>(DBeta.size(), NAN));
  DeviceBuffer<float> Scratch(size_t(deltaRuleScratch(S)));
  gatedDeltaRuleForward(S, GQ.data(), GK.data(), GV.data(), GG.data(), GB.data(), GO.data(), nullptr);
  gatedDeltaRuleBackward(S, GQ.data(), GK.data(), GV.data(), GG.data(), GB.data(), GDO.data(), GDQ.data(), GDK.data(),
                         GDV.data(), GDG.data(), GDB.data(), Scratch.data(), nullptr);
  sync();
  const std::string Case = "rows " + std::to_string(Rows) + ", heads " + std::to_string(S.KeyHeads) + "/" +
                           std::to_string(S.ValueHeads) + " of " + std::to_string(D);
  // fp32 throughout; the sums over columns run in another order than the
  // host's (which sums them in double), and exp is the device's.
  const double Tol = 1e-4;
  EXPECT_TRUE(near(GO.download(), O, Tol, "O, " + Case));
  EXPECT_TRUE(near(GDQ.download(), DQ, Tol, "dQ, " + Case));
  EXPECT_TRUE(near(GDK.download(), DK, Tol, "dK, " + Case));
  EXPECT_TRUE(near(GDV.download(), DV, Tol, "dV, " + Case));
  EXPECT_TRUE(near(GDG.download(), DG, Tol, "dG, " + Case));
  EXPECT_TRUE(near(GDB.download(), DBeta, Tol, "dBeta, " + Case));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDeltaRule,
                         ::testing::Values(DeltaRuleShape{2, 70, 1, 2, 8}, DeltaRuleShape{1, 130, 2, 4, 32},
                                           DeltaRuleShape{1, 65, 1, 1, 64}, DeltaRuleShape{1, 3, 2, 2, 16},
                                           DeltaRuleShape{1, 70, 1, 2, 128}),
                         deltaRuleCaseName);

TEST(CudaDeltaRuleShapes, AreRefusedWithoutAKernel) {
  EXPECT_FALSE(deltaRuleKernelTakes({1, 8, 1, 1, 48})); // no kernel for heads of 48
  EXPECT_FALSE(deltaRuleKernelTakes({1, 8, 2, 3, 32})); // value heads not a multiple of key heads
  EXPECT_TRUE(deltaRuleKernelTakes({1, 8, 2, 4, 128})); // Qwen3-Next's widths
  EXPECT_THROW(gatedDeltaRuleForward({1, 8, 1, 1, 48}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

//===--------------------------------------------------------------------===//
// RMSNorm, RoPE, SwiGLU
//===--------------------------------------------------------------------===//

TEST(CudaElementwise, RmsNormForwardAndBackwardMatchHost) {
  const int64_t N = 33, H = 200;
  auto X = randomBf16(N * H, 51), DY = randomBf16(N * H, 53);
  std::vector<float> W = randomBf16(H, 52, 0.1f);
  for (float &Wi : W)
    Wi = float(__bfloat162float(__float2bfloat16_rn(Wi + 1.0f)));
  Tensor TX = tensorOf({N, H}, X), TW = tensorOf({H}, W), TDY = tensorOf({N, H}, DY);
  std::vector<float> Rstd;
  Tensor Y = rmsNormForward(TX, TW, 1e-5, Rstd);
  // The weight's gradient is added to an earlier micro batch's, so a kernel
  // that overwrote it would fail.
  const std::vector<float> Earlier = randomBf16(H, 54);
  Tensor DW = tensorOf({H}, Earlier);
  Tensor DX = rmsNormBackward(TX, TW, Rstd, TDY, DW);

  auto GX = uploadBf16(X), GW = uploadBf16(W), GDY = uploadBf16(DY);
  DeviceBuffer<bf16> GY(N * H), GDX(N * H);
  DeviceBuffer<float> GRstd(N), GDW = uploadF32(Earlier);
  cuda::rmsNormForward(N, H, GX.data(), GW.data(), 1e-5f, GY.data(), GRstd.data(), nullptr);
  cuda::rmsNormBackward(N, H, GX.data(), GW.data(), GRstd.data(), GDY.data(), GDX.data(), GDW.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GY), Y.storage(), Bf16Tol, "Y"));
  EXPECT_TRUE(near(GRstd.download(), Rstd, F32Tol, "Rstd"));
  EXPECT_TRUE(near(downloadBf16(GDX), DX.storage(), Bf16Tol, "dX"));
  EXPECT_TRUE(near(GDW.download(), DW.storage(), 1e-4, "dW"));
}

// The vision tower's LayerNorm (weight and bias) and both GELUs against the
// host's loops (model/ModelOps.h), which compute in double.
TEST(CudaElementwise, LayerNormForwardAndBackwardMatchHost) {
  const int64_t N = 33, H = 200;
  auto X = randomBf16(N * H, 71), DY = randomBf16(N * H, 73);
  for (float &Xi : X) // rows off zero mean, as a residual stream is
    Xi = float(__bfloat162float(__float2bfloat16_rn(Xi + 0.5f)));
  std::vector<float> W = randomBf16(H, 72, 0.1f), B = randomBf16(H, 74, 0.1f);
  for (float &Wi : W)
    Wi = float(__bfloat162float(__float2bfloat16_rn(Wi + 1.0f)));
  Tensor TX = tensorOf({N, H}, X), TW = tensorOf({H}, W), TB = tensorOf({H}, B), TDY = tensorOf({N, H}, DY);
  std::vector<float> Mean, Rstd;
  Tensor Y = layerNormForward(TX, TW, TB, 1e-6, Mean, Rstd);
  // The gradients accumulate: both start from an earlier micro batch's.
  const std::vector<float> DW0 = randomBf16(H, 75), DB0 = randomBf16(H, 76);
  Tensor DW = tensorOf({H}, DW0), DB = tensorOf({H}, DB0);
  Tensor DX = layerNormBackward(TX, TW, Mean, Rstd, TDY, DW, DB);

  auto GX = uploadBf16(X), GW = uploadBf16(W), GB = uploadBf16(B), GDY = uploadBf16(DY);
  DeviceBuffer<bf16> GY(N * H), GDX(N * H);
  DeviceBuffer<float> GMean(N), GRstd(N);
  auto GDW = uploadF32(DW0), GDB = uploadF32(DB0);
  cuda::layerNormForward(N, H, GX.data(), GW.data(), GB.data(), 1e-6f, GY.data(), GMean.data(), GRstd.data(), nullptr);
  cuda::layerNormBackward(N, H, GX.data(), GW.data(), GMean.data(), GRstd.data(), GDY.data(), GDX.data(), GDW.data(),
                          GDB.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GY), Y.storage(), Bf16Tol, "Y"));
  EXPECT_TRUE(near(GMean.download(), Mean, F32Tol, "Mean"));
  EXPECT_TRUE(near(GRstd.download(), Rstd, F32Tol, "Rstd"));
  EXPECT_TRUE(near(downloadBf16(GDX), DX.storage(), Bf16Tol, "dX"));
  EXPECT_TRUE(near(GDW.download(), DW.storage(), 1e-4, "dW"));
  EXPECT_TRUE(near(GDB.download(), DB.storage(), 1e-4, "dB"));
}

// Gated DeltaNet's output norm (RMSNorm over each head, times the weight
// and silu of the gate) against the host's loops (model/ModelOps.h).
TEST(CudaElementwise, GatedRmsNormForwardAndBackwardMatchHost) {
  const int64_t Rows = 37 * 4, Width = 128; // 37 tokens of 4 value heads, Qwen3-Next's head width
  auto O = randomBf16(Rows * Width, 91), Z = randomBf16(Rows * Width, 92, 3.0f), DY = randomBf16(Rows * Width, 93);
  std::vector<float> W = randomBf16(Width, 94, 0.1f);
  for (float &Wi : W)
    Wi = float(__bfloat162float(__float2bfloat16_rn(Wi + 1.0f)));
  std::vector<float> Y(O.size()), Rstd(Rows), DO(O.size()), DZ(O.size());
  // The weight's gradient is added to an earlier micro batch's.
  const std::vector<float> DW0 = randomBf16(Width, 95);
  std::vector<float> DW = DW0;
  gatedRmsNormForward(Rows, Width, O.data(), Z.data(), W.data(), 1e-6, Y.data(), Rstd.data());
  gatedRmsNormBackward(Rows, Width, O.data(), Z.data(), W.data(), Rstd.data(), DY.data(), DO.data(), DZ.data(),
                       DW.data());

  auto GO = uploadBf16(O), GZ = uploadBf16(Z), GW = uploadBf16(W), GDY = uploadBf16(DY);
  DeviceBuffer<bf16> GY(O.size()), GDO(O.size()), GDZ(O.size());
  DeviceBuffer<float> GRstd(Rows);
  auto GDW = uploadF32(DW0);
  cuda::gatedRmsNormForward(Rows, Width, GO.data(), GZ.data(), GW.data(), 1e-6f, GY.data(), GRstd.data(), nullptr);
  cuda::gatedRmsNormBackward(Rows, Width, GO.data(), GZ.data(), GW.data(), GRstd.data(), GDY.data(), GDO.data(),
                             GDZ.data(), GDW.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GY), Y, Bf16Tol, "Y"));
  EXPECT_TRUE(near(GRstd.download(), Rstd, F32Tol, "Rstd"));
  EXPECT_TRUE(near(downloadBf16(GDO), DO, Bf16Tol, "dO"));
  EXPECT_TRUE(near(downloadBf16(GDZ), DZ, Bf16Tol, "dZ"));
  EXPECT_TRUE(near(GDW.download(), DW, 1e-4, "dW"));
}

// Attention's output gate against the host's loops: the gated output, and
// the gradients of the output and of the gate.
TEST(CudaElementwise, SigmoidGateMatchesHost) {
  const int64_t N = 777;
  auto X = randomBf16(N, 201), Gate = randomBf16(N, 202, 3.0f), DY = randomBf16(N, 203);
  std::vector<float> Y(N), DX(N), DGate(N);
  sigmoidGateForward(N, X.data(), Gate.data(), Y.data());
  sigmoidGateBackward(N, X.data(), Gate.data(), DY.data(), DX.data(), DGate.data());
  auto GX = uploadBf16(X), GGate = uploadBf16(Gate), GDY = uploadBf16(DY);
  DeviceBuffer<bf16> GY(N), GDX(N), GDGate(N);
  cuda::sigmoidGateForward(N, GX.data(), GGate.data(), GY.data(), nullptr);
  cuda::sigmoidGateBackward(N, GX.data(), GGate.data(), GDY.data(), GDX.data(), GDGate.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GY), Y, Bf16Tol, "Y"));
  EXPECT_TRUE(near(downloadBf16(GDX), DX, Bf16Tol, "dX"));
  EXPECT_TRUE(near(downloadBf16(GDGate), DGate, Bf16Tol, "dGate"));
}

// Gated DeltaNet's input side against the host's loops (model/ModelOps.h):
// the causal convolution with silu over three sequences (so that a tap
// reaching into the previous sequence would show), the per-head L2 norms,
// and the gates; the weights' gradients add to an earlier micro batch's.
TEST(CudaLinearAttention, ConvolutionNormsAndGatesMatchHost) {
  const CausalConv C{/*Rows=*/3 * 13, /*Channels=*/96, /*SeqLen=*/13, /*Width=*/4};
  const int64_t N = C.elements(), Weights = C.Channels * C.Width;
  auto X = randomBf16(N, 211), W = randomBf16(Weights, 212, 0.5f), DAct = randomBf16(N, 213);
  const std::vector<float> DW0 = randomBf16(Weights, 214);
  std::vector<float> Pre(N), Act(N), DX(N), DW = DW0;
  causalConvSiluForward(C, X.data(), W.data(), Pre.data(), Act.data());
  causalConvSiluBackward(C, X.data(), W.data(), cuda::roundedToBf16(Pre).data(), DAct.data(), DX.data(), DW.data());
  auto GX = uploadBf16(X), GW = uploadBf16(W);
  DeviceBuffer<bf16> GPre(N), GDX(N);
  DeviceBuffer<float> GAct(N), Scratch(N);
  auto GDAct = uploadF32(DAct), GDW = uploadF32(DW0);
  cuda::causalConvSiluForward(C, GX.data(), GW.data(), GPre.data(), GAct.data(), nullptr);
  cuda::causalConvSiluBackward(C, GX.data(), GW.data(), GPre.data(), GDAct.data(), GDX.data(), GDW.data(),
                               Scratch.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GPre), Pre, Bf16Tol, "conv"));
  EXPECT_TRUE(near(GAct.download(), Act, 1e-4, "silu"));
  EXPECT_TRUE(near(downloadBf16(GDX), DX, Bf16Tol, "conv dX"));
  EXPECT_TRUE(near(GDW.download(), DW, 1e-4, "conv dW"));
  // Rows that are not whole sequences are refused, on either side.
  const CausalConv Partial{C.Rows - 1, C.Channels, C.SeqLen, C.Width};
  EXPECT_THROW(causalConvSiluForward(Partial, X.data(), W.data(), Pre.data(), Act.data()), std::invalid_argument);
  EXPECT_THROW(cuda::causalConvSiluForward(Partial, GX.data(), GW.data(), GPre.data(), GAct.data(), nullptr),
               std::invalid_argument);

  // Heads of Qwen3-Next's 128 and of a width that is not a multiple of a
  // warp; L2 norms in place, as the layer runs them.
  for (int64_t Width : {int64_t(128), int64_t(40)}) {
    const int64_t Rows = 37, Count = Rows * Width;
    const std::string What = std::to_string(Width) + " wide";
    auto In = randomBf16(Count, 215), DY = randomBf16(Count, 216);
    std::vector<float> Y = In, Inv(Rows), DIn = DY;
    l2NormHeadsForward(Rows, Width, 1e-6, Y.data(), Y.data(), Inv.data());
    l2NormHeadsBackward(Rows, Width, Y.data(), Inv.data(), DIn.data(), DIn.data());
    auto GIn = uploadF32(In), GDY = uploadF32(DY);
    DeviceBuffer<float> GY(Count), GInv(Rows), GDIn(Count);
    cuda::l2NormHeadsForward(Rows, Width, 1e-6f, GIn.data(), GY.data(), GInv.data(), nullptr);
    cuda::l2NormHeadsBackward(Rows, Width, GY.data(), GInv.data(), GDY.data(), GDIn.data(), nullptr);
    sync();
    EXPECT_TRUE(near(GY.download(), Y, 1e-4, "l2 norm, " + What));
    EXPECT_TRUE(near(GInv.download(), Inv, 1e-4, "l2 norm factor, " + What));
    EXPECT_TRUE(near(GDIn.download(), DIn, 1e-4, "l2 norm dX, " + What));
  }

  const DeltaGates Shape{/*Tokens=*/300, /*Heads=*/6};
  const int64_t G = Shape.elements();
  auto A = randomBf16(G, 217, 2.0f), B = randomBf16(G, 218, 2.0f), DtBias = randomBf16(Shape.Heads, 219),
       ALog = randomBf16(Shape.Heads, 220), DG = randomBf16(G, 221), DBeta = randomBf16(G, 222);
  A[0] = 30.0f; // softplus's linear branch
  const std::vector<float> DALog0 = randomBf16(Shape.Heads, 223), DDt0 = randomBf16(Shape.Heads, 224);
  std::vector<float> RawA(G), Decay(G), Beta(G), DA(G), DB(G), DALog = DALog0, DDt = DDt0;
  DeltaGates Host = Shape;
  Host.DtBias = DtBias.data();
  Host.ALog = ALog.data();
  deltaGatesForward(Host, A.data(), B.data(), RawA.data(), Decay.data(), Beta.data());
  deltaGatesBackward(Host, RawA.data(), Decay.data(), Beta.data(), DG.data(), DBeta.data(), DA.data(), DB.data(),
                     DALog.data(), DDt.data());
  auto GA = uploadF32(A), GB = uploadF32(B), GDt = uploadF32(DtBias), GALog = uploadF32(ALog), GDG = uploadF32(DG),
       GDBeta = uploadF32(DBeta), GDALog = uploadF32(DALog0), GDDt = uploadF32(DDt0);
  DeviceBuffer<float> GRawA(G), GDecay(G), GBeta(G);
  DeviceBuffer<bf16> GDA(G), GDB(G);
  DeltaGates Device = Shape;
  Device.DtBias = GDt.data();
  Device.ALog = GALog.data();
  cuda::deltaGatesForward(Device, GA.data(), GB.data(), GRawA.data(), GDecay.data(), GBeta.data(), nullptr);
  cuda::deltaGatesBackward(Device, GRawA.data(), GDecay.data(), GBeta.data(), GDG.data(), GDBeta.data(), GDA.data(),
                           GDB.data(), GDALog.data(), GDDt.data(), nullptr);
  sync();
  EXPECT_TRUE(near(GRawA.download(), RawA, F32Tol, "a + dt_bias"));
  EXPECT_TRUE(near(GDecay.download(), Decay, 1e-4, "g"));
  EXPECT_TRUE(near(GBeta.download(), Beta, 1e-4, "beta"));
  EXPECT_TRUE(near(downloadBf16(GDA), DA, Bf16Tol, "da"));
  EXPECT_TRUE(near(downloadBf16(GDB), DB, Bf16Tol, "db"));
  EXPECT_TRUE(near(GDALog.download(), DALog, 1e-4, "dA_log"));
  EXPECT_TRUE(near(GDDt.download(), DDt, 1e-4, "ddt_bias"));
}

TEST(CudaElementwise, GeluBothFormsMatchHost) {
  const int64_t N = 1000;
  auto X = randomBf16(N, 81), DY = randomBf16(N, 82);
  for (float &Xi : X) // past the tails of both forms
    Xi = float(__bfloat162float(__float2bfloat16_rn(Xi * 4.0f)));
  // Where the forms differ by more than bf16's rounding: x = -3 gives -4.05e-3
  // by erf, -3.63e-3 by tanh.
  const std::vector<float> Tail = {-3.0f, -2.5f, -3.5f};
  std::copy(Tail.begin(), Tail.end(), X.begin());
  Tensor TX = tensorOf({N}, X), TDY = tensorOf({N}, DY);
  auto GX = uploadBf16(X), GDY = uploadBf16(DY);
  for (GeluForm Form : {GeluForm::Erf, GeluForm::Tanh}) {
    const std::string Name = Form == GeluForm::Erf ? "erf" : "tanh";
    Tensor Y = gelu(Form, TX), DX = geluBackward(Form, TX, TDY);
    DeviceBuffer<bf16> GY(N), GDX(N);
    cuda::geluForward(N, Form == GeluForm::Tanh, GX.data(), GY.data(), nullptr);
    cuda::geluBackward(N, Form == GeluForm::Tanh, GX.data(), GDY.data(), GDX.data(), nullptr);
    sync();
    const std::vector<float> Got = downloadBf16(GY);
    EXPECT_TRUE(near(Got, Y.storage(), Bf16Tol, "gelu " + Name));
    for (size_t I = 0; I < Tail.size(); ++I)
      EXPECT_NEAR(Got[I], Y[int64_t(I)], 0.01 * std::abs(Y[int64_t(I)])) << Name << " at x = " << Tail[I];
    EXPECT_TRUE(near(downloadBf16(GDX), DX.storage(), Bf16Tol, "gelu' " + Name));
  }
}

TEST(CudaElementwise, RopeBothDirectionsMatchHostAtEveryLayout) {
  const int64_t N = 20, Heads = 3, Hd = 64;
  auto X = randomBf16(N * Heads * Hd, 61);
  std::vector<int64_t> Pos = localPositions(1, 2, 40); // a CP chunk pair
  std::vector<int32_t> Pos32(Pos.begin(), Pos.end());
  Pos32[3] = 4000; // a far position: the angle must be exact in double
  Pos[3] = 4000;
  auto DPos = uploadVec(Pos32);
  // Whole heads, a partial rotary width, and latent attention's interleaved
  // pairs in the last 32 columns of each 64.
  const std::vector<RopeColumns> Layouts = {RopeColumns::halves(Hd, Hd), RopeColumns::halves(Hd, Hd / 4),
                                            RopeColumns{Hd, 32, 32, /*Interleaved=*/true}};
  for (const RopeColumns &Columns : Layouts)
    for (bool Inverse : {false, true}) {
      Tensor T = tensorOf({N, Heads * Hd}, X);
      if (Columns.Interleaved)
        moert::applyInterleavedRope(T, Columns.Stride, Columns.Offset, Columns.RopeDim, Pos, 10000.0, Inverse);
      else
        moert::applyRope(T, Hd, Pos, 10000.0, Inverse, Columns.RopeDim);
      auto G = uploadBf16(X);
      cuda::applyRope(N, Heads, Columns, G.data(), DPos.data(), 10000.0, Inverse, nullptr);
      sync();
      const std::string What = std::string(Inverse ? "inverse rope " : "rope ") +
                               (Columns.Interleaved ? "interleaved " : "halves ") + std::to_string(Columns.RopeDim);
      const std::vector<float> Got = downloadBf16(G);
      EXPECT_TRUE(near(Got, T.storage(), Bf16Tol, What));
      // The columns outside the rotated ones are left as they were.
      for (int64_t R = 0; R < N; ++R)
        for (int64_t C = 0; C < Heads * Hd; ++C) {
          const int64_t InHead = C % Hd;
          if (InHead < Columns.Offset || InHead >= Columns.Offset + Columns.RopeDim) {
            ASSERT_EQ(Got[size_t(R * Heads * Hd + C)], X[size_t(R * Heads * Hd + C)]) << What << " column " << C;
          }
        }
    }
}

// Multimodal RoPE: the kernel turns each pair by the position its axis
// gives (pair j: time, row, column for j % 3, within the axes' sections),
// as the host does.
TEST(CudaElementwise, MultimodalRopeTurnsEachPairByItsAxis) {
  const int64_t N = 12, Heads = 2, Hd = 64, Half = Hd / 2;
  const std::array<int64_t, 3> Sections = {16, 8, 8};
  auto X = randomBf16(N * Heads * Hd, 62);
  MultimodalPositions Axes;
  for (int64_t I = 0; I < N; ++I) {
    Axes.Axes[0].push_back(3 + I);
    Axes.Axes[1].push_back(I % 4);
    Axes.Axes[2].push_back(100 + 7 * I);
  }
  RopeColumns Columns = RopeColumns::halves(Hd, Hd);
  Columns.Multimodal = true;
  Columns.RowSection = Sections[1];
  Columns.ColumnSection = Sections[2];
  // Qwen3-VL's interleaving: time, row, column, ... while the row and
  // column sections last (8 pairs each here: to pair 23), then time.
  for (auto [Pair, Axis] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 0}, {1, 1}, {2, 2}, {3, 0}, {22, 1}, {23, 2}, {24, 0}, {25, 0}, {26, 0}, {Half - 1, 0}})
    EXPECT_EQ(Columns.axisOf(Pair), Axis) << "pair " << Pair;
  std::vector<int32_t> RowPositions;
  for (int64_t I = 0; I < N; ++I)
    for (const std::vector<int64_t> &Axis : Axes.Axes)
      RowPositions.push_back(int32_t(Axis[size_t(I)]));
  auto DPos = uploadVec(RowPositions);
  for (bool Inverse : {false, true}) {
    Tensor T = tensorOf({N, Heads * Hd}, X);
    applyMultimodalRope(T, Hd, Axes, 5e6, Sections, Inverse, 0);
    auto G = uploadBf16(X);
    cuda::applyRope(N, Heads, Columns, G.data(), DPos.data(), 5e6, Inverse, nullptr);
    sync();
    EXPECT_TRUE(near(downloadBf16(G), T.storage(), Bf16Tol, Inverse ? "inverse" : "forward"));
  }
}

// The vision tower's pieces against the host's loops (model/ModelOps.h): row
// biases and their gradient, the position table's interpolation each way
// (rows sharing table rows, so that the backward's sums overlap), and rotary
// embedding by a table of angles.
TEST(CudaElementwise, VisionTowerPiecesMatchHost) {
  const int64_t Rows = 21, Cols = 40, TableRows = 9;
  auto Y = randomBf16(Rows * Cols, 231), Bias = randomBf16(Cols, 232), DY = randomBf16(Rows * Cols, 233);
  std::vector<float> WantY = Y, DBias = randomBf16(Cols, 234), WantDBias = DBias;
  addRowBias(Rows, Cols, Bias.data(), WantY.data());
  addColumnSums(Rows, Cols, DY.data(), WantDBias.data());
  auto GY = uploadF32(Y), GBias = uploadF32(Bias), GDBias = uploadF32(DBias), GDBias16 = uploadF32(DBias);
  auto GDY = uploadF32(DY);
  auto GDY16 = uploadBf16(DY);
  cuda::addRowBias(Rows, Cols, GBias.data(), GY.data(), nullptr);
  cuda::addColumnSums(Rows, Cols, GDY.data(), GDBias.data(), nullptr);
  cuda::addColumnSums(Rows, Cols, GDY16.data(), GDBias16.data(), nullptr);

  std::vector<int64_t> Index(size_t(4 * Rows));
  std::vector<float> Weight(size_t(4 * Rows));
  std::mt19937_64 Gen(235);
  for (size_t I = 0; I < Index.size(); ++I) {
    Index[I] = int64_t(Gen() % TableRows);
    Weight[I] = float(Gen() % 1000) / 1000.0f;
  }
  auto Table = randomBf16(TableRows * Cols, 236), X = randomBf16(Rows * Cols, 237);
  std::vector<float> WantX = X, DTable = randomBf16(TableRows * Cols, 238), WantDTable = DTable;
  interpolateRowsForward(Rows, Cols, Index.data(), Weight.data(), Table.data(), WantX.data());
  interpolateRowsBackward(Rows, Cols, Index.data(), Weight.data(), DY.data(), WantDTable.data());
  std::vector<int32_t> Index32(Index.begin(), Index.end());
  auto GIndex = uploadVec(Index32);
  auto GWeight = uploadF32(Weight), GTable = uploadF32(Table), GX = uploadF32(X), GDTable = uploadF32(DTable);
  cuda::interpolateRowsForward(Rows, Cols, GIndex.data(), GWeight.data(), GTable.data(), GX.data(), nullptr);
  cuda::interpolateRowsBackward(Rows, Cols, GIndex.data(), GWeight.data(), GDY.data(), GDTable.data(), nullptr);

  const int64_t Heads = 2, Hd = 20, Half = Hd / 2;
  auto Q = randomBf16(Rows * Heads * Hd, 239), Angles = randomBf16(Rows * Half, 240, 3.0f);
  std::vector<float> Cos(Angles.size()), Sin(Angles.size());
  for (size_t I = 0; I < Angles.size(); ++I) {
    Cos[I] = std::cos(Angles[I]);
    Sin[I] = std::sin(Angles[I]);
  }
  auto GCos = uploadF32(Cos), GSin = uploadF32(Sin);
  sync();
  EXPECT_TRUE(near(GY.download(), WantY, F32Tol, "bias"));
  EXPECT_TRUE(near(GDBias.download(), WantDBias, F32Tol, "bias gradient"));
  EXPECT_TRUE(near(GDBias16.download(), WantDBias, F32Tol, "bias gradient from bf16"));
  EXPECT_TRUE(near(GX.download(), WantX, F32Tol, "interpolation"));
  EXPECT_TRUE(near(GDTable.download(), WantDTable, F32Tol, "interpolation's backward"));
  for (bool Inverse : {false, true}) {
    std::vector<float> Want = Q;
    ropeByTable(Rows, Heads, RopeColumns::halves(Hd, Hd), Want.data(), Cos.data(), Sin.data(), Inverse);
    auto G = uploadBf16(Q);
    cuda::ropeByTable(Rows, Heads, RopeColumns::halves(Hd, Hd), G.data(), GCos.data(), GSin.data(), Inverse, nullptr);
    sync();
    EXPECT_TRUE(near(downloadBf16(G), Want, Bf16Tol, Inverse ? "rope by table, inverse" : "rope by table"));
  }
}

TEST(CudaElementwise, SwiGluForwardAndBackwardMatchHost) {
  const int64_t N = 1000;
  auto G = randomBf16(N, 71, 2.0f), U = randomBf16(N, 72), DA = randomBf16(N, 73);
  Tensor TG = tensorOf({N}, G), TU = tensorOf({N}, U), TDA = tensorOf({N}, DA);
  Tensor Act = swiGlu(TG, TU), DG, DU;
  moert::swiGluBackward(TG, TU, TDA, DG, DU);
  auto GG = uploadBf16(G), GU = uploadBf16(U), GDA = uploadBf16(DA);
  DeviceBuffer<bf16> GAct(N), GDG(N), GDU(N);
  swiGluForward(N, GG.data(), GU.data(), GAct.data(), nullptr);
  cuda::swiGluBackward(N, GG.data(), GU.data(), GDA.data(), GDG.data(), GDU.data(), nullptr);
  sync();
  EXPECT_TRUE(near(downloadBf16(GAct), Act.storage(), Bf16Tol, "act"));
  EXPECT_TRUE(near(downloadBf16(GDG), DG.storage(), Bf16Tol, "dG"));
  EXPECT_TRUE(near(downloadBf16(GDU), DU.storage(), Bf16Tol, "dU"));
}

TEST(CudaElementwise, CastsRoundTripAndFp32AddsAreTheHosts) {
  std::vector<float> X = {1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f}, Y = {1e-8f, 2.5f, -3.0f, 7.0e-4f, 1.0f};
  auto DX = uploadF32(X), DY = uploadF32(Y);
  DeviceBuffer<bf16> B(X.size());
  DeviceBuffer<float> Back(X.size()), Sum(X.size());
  castToBf16(int64_t(X.size()), DX.data(), B.data(), nullptr);
  castToF32(int64_t(X.size()), B.data(), Back.data(), nullptr);
  addF32(int64_t(X.size()), DX.data(), DY.data(), Sum.data(), nullptr);
  addF32(int64_t(X.size()), DX.data(), DX.data(), DX.data(), nullptr); // in place: X = 2X
  sync();
  EXPECT_EQ(Back.download(), roundedToBf16(X));
  std::vector<float> HostSum(X.size()), Twice(X.size());
  for (size_t I = 0; I < X.size(); ++I) {
    HostSum[I] = X[I] + Y[I]; // 1 + 1e-8 rounds to 1 in fp32, not in a wider sum
    Twice[I] = 2.0f * X[I];
  }
  EXPECT_EQ(Sum.download(), HostSum);
  EXPECT_EQ(DX.download(), Twice);
}

//===--------------------------------------------------------------------===//
// Router, permutation
//===--------------------------------------------------------------------===//

/// A router's settings (ModelConfig's), named for the test's output.
struct RouterCase {
  const char *Name;
  int64_t Experts, TopK;
  bool Sigmoid, PreSoftmax, Biased;
  int64_t Groups, GroupTopK;
  double Scaling;
};

class CudaRouter : public ::testing::TestWithParam<RouterCase> {};

// The kernels' library cannot read model/Router.h: its constant is checked here.
static_assert(AuxScoreEpsilon == Router::AuxScoreEpsilon);

// The kernels against model/Router.cpp's route, stats and backward (what
// the MoE block runs on the host) on the same logits, with a token whose
// logits all tie (the lower expert ids win).
TEST_P(CudaRouter, RouteStatsAndBackwardMatchTheHostRouter) {
  const RouterCase C = GetParam();
  ModelConfig Config;
  Config.Experts = C.Experts;
  Config.TopK = C.TopK;
  Config.SigmoidRouter = C.Sigmoid;
  Config.PreSoftmax = C.PreSoftmax;
  Config.RouterGroups = C.Groups;
  Config.RouterGroupTopK = C.GroupTopK;
  Config.TopKScaling = C.Scaling;
  const Router Host(Config);
  const int64_t N = 64, E = C.Experts, K = C.TopK;
  std::vector<float> Logits = randomBf16(N * E, 81);
  std::fill(Logits.begin(), Logits.begin() + E, 0.5f);
  std::vector<float> Bias = randomBf16(E, 84, 0.05f);
  const float *HostBias = C.Biased ? Bias.data() : nullptr;
  std::vector<float> Scores = Logits, TopW, Stats(2 * E + 1);
  std::vector<int32_t> TopIdx;
  Host.route(Scores.data(), N, TopIdx, TopW, HostBias);
  Host.stats(Scores.data(), N, Stats.data());

  const RouterSpec Spec = routerSpec(Config); // the MoE block's settings for the backend
  ASSERT_TRUE(routerKernelTakes(Spec));
  auto GL = uploadF32(Logits), GBias = uploadF32(Bias);
  DeviceBuffer<float> GS(N * E), GW(N * K), GStats(2 * E + 1), GDL(N * E);
  DeviceBuffer<int32_t> GI(N * K), Picks(N * K);
  DeviceBuffer<double> Div(N);
  routeTokens(Spec, N, GL.data(), C.Biased ? GBias.data() : nullptr, GS.data(), GI.data(), GW.data(), nullptr);
  routerStats(Spec, N, GS.data(), Picks.data(), Div.data(), GStats.data(), nullptr);
  sync();
  EXPECT_TRUE(near(GS.download(), Scores, 1e-5, "scores"));
  EXPECT_EQ(GI.download(), TopIdx);
  EXPECT_TRUE(near(GW.download(), TopW, 1e-5, "routing weights"));
  EXPECT_TRUE(near(GStats.download(), Stats, 1e-5, "router stats"));

  std::vector<float> DTopW = randomBf16(N * K, 82), Fraction = randomBf16(E, 83, 0.1f), Want(N * E);
  const double AuxPerScore = 0.01;
  Host.backward(Scores.data(), N, TopIdx.data(), TopW.data(), DTopW.data(), Fraction.data(), AuxPerScore, Want.data());
  auto GDTW = uploadF32(DTopW), GF = uploadF32(Fraction);
  routerBackward(Spec, N, GS.data(), GI.data(), GW.data(), GDTW.data(), GF.data(), AuxPerScore, GDL.data(), nullptr);
  sync();
  EXPECT_TRUE(near(GDL.download(), Want, 1e-4, "router dLogits"));
}

// Forced balance draws on the device what the host draws (the same hash;
// the device's double log and cos may move a float by its last bit).
TEST(CudaRouterBalance, DrawsTheHostsLogits) {
  const int64_t N = 37, E = 24;
  std::vector<uint64_t> Keys(N);
  for (int64_t I = 0; I < N; ++I)
    Keys[size_t(I)] = mix64(uint64_t(I) * 977 + 5);
  std::vector<float> Want(N * E);
  Router::forceBalancedLogits(Want.data(), N, E, Keys.data());
  auto GK = uploadVec(Keys);
  auto Got = uploadF32(std::vector<float>(N * E, NAN));
  balancedLogits(N, E, GK.data(), Got.data(), nullptr);
  sync();
  EXPECT_TRUE(near(Got.download(), Want, 1e-6, "forced logits"));
}

INSTANTIATE_TEST_SUITE_P(Routers, CudaRouter,
                         ::testing::Values(RouterCase{"softmax_after_topk", 16, 3, false, false, false, 1, 1, 1.0},
                                           RouterCase{"softmax_before_topk", 16, 3, false, true, false, 1, 1, 1.0},
                                           RouterCase{"sigmoid", 16, 3, true, false, false, 1, 1, 1.0},
                                           // DeepSeek-V3's: sigmoid with the expert bias, 4 of 8 groups, weights x 2.5
                                           RouterCase{"deepseek", 32, 4, true, false, true, 8, 4, 2.5},
                                           // group-limited after a softmax over the chosen: ranked by log scores
                                           RouterCase{"grouped_softmax", 16, 4, false, false, false, 4, 2, 1.0},
                                           RouterCase{"sigmoid_top1", 8, 1, true, false, true, 1, 1, 1.0}),
                         [](const ::testing::TestParamInfo<RouterCase> &I) { return std::string(I.param.Name); });

TEST(CudaPermute, StableCountingSortOverManyTiles) {
  // Copies spread over several 256-copy tiles, experts from a skewed draw
  // (some never chosen): rows sorted by expert, then copy number.
  for (auto [N, K, E] : {std::tuple<int64_t, int64_t, int64_t>{700, 4, 64}, {300, 8, 256}, {5, 1, 3}, {0, 2, 8}}) {
    SCOPED_TRACE("N " + std::to_string(N) + " K " + std::to_string(K) + " E " + std::to_string(E));
    std::mt19937 Gen(unsigned(N + E));
    std::vector<int32_t> TopIdx(size_t(N * K));
    for (int32_t &X : TopIdx)
      X = int32_t(std::min<int64_t>(E - 1, int64_t(Gen() % E) * int64_t(Gen() % E) / E + int64_t(Gen() % 2)));
    std::vector<int32_t> Expected(TopIdx.size());
    std::iota(Expected.begin(), Expected.end(), 0);
    std::stable_sort(Expected.begin(), Expected.end(), [&](int32_t A, int32_t B) { return TopIdx[A] < TopIdx[B]; });
    std::vector<int64_t> Counts(size_t(E), 0);
    for (int32_t X : TopIdx)
      ++Counts[size_t(X)];

    DeviceBuffer<int32_t> GIdx, Perm(TopIdx.size()), RowOf(TopIdx.size()), Scratch(permutationScratch(N * K, E));
    GIdx.upload(TopIdx);
    DeviceBuffer<int64_t> GCounts;
    GCounts.upload(std::vector<int64_t>(size_t(E), -1)); // overwritten, even with no copies
    buildPermutation(N, K, E, GIdx.data(), Perm.data(), RowOf.data(), GCounts.data(), Scratch.data(), nullptr);
    sync();
    EXPECT_EQ(Perm.download(), Expected);
    EXPECT_EQ(GCounts.download(), Counts);
    std::vector<int32_t> Rows = RowOf.download();
    for (size_t Row = 0; Row < Expected.size(); ++Row)
      ASSERT_EQ(Rows[size_t(Expected[Row])], int32_t(Row));
  }
  DeviceBuffer<int32_t> Any(1);
  DeviceBuffer<int64_t> Counts(1);
  EXPECT_THROW(buildPermutation(1, 1, MaxPermuteExperts + 1, Any.data(), Any.data(), Any.data(), Counts.data(),
                                Any.data(), nullptr),
               std::invalid_argument);
}

TEST(CudaPermute, MatchesTokenDispatcherOnOneRank) {
  const int64_t N = 40, E = 8, K = 2, H = 48;
  std::mt19937 Gen(91);
  std::vector<int32_t> TopIdx(N * K);
  for (int64_t I = 0; I < N; ++I) {
    int32_t A = int32_t(Gen() % E), B = int32_t(Gen() % (E - 1));
    TopIdx[I * K] = A;
    TopIdx[I * K + 1] = B >= A ? B + 1 : B; // two distinct experts
  }
  TopIdx[0] = 5; // expert 7 may still get nothing: fine
  TopIdx[1] = 6;
  auto X = randomBf16(N * H, 92);
  std::vector<float> W = randomBf16(N * K, 93);
  auto Self = createSelfCommunicator("ep");
  TokenDispatcher Disp(*Self, E, K, H);
  DispatchState S;
  Tensor Rows = Disp.dispatch(tensorOf({N, H}, X), TopIdx, S);
  auto ExpertOut = randomBf16(N * K * H, 94);
  Tensor Y = Disp.combine(tensorOf({N * K, H}, ExpertOut), W, S);
  auto DY = randomBf16(N * H, 95);
  std::vector<float> DW;
  Tensor DRows = Disp.combineBackward(tensorOf({N, H}, DY), W, S, DW);
  auto DIn = randomBf16(N * K * H, 96);
  Tensor DX = Disp.dispatchBackward(tensorOf({N * K, H}, DIn), S);

  auto GIdx = uploadVec(TopIdx);
  DeviceBuffer<int32_t> Perm(N * K), RowOf(N * K);
  DeviceBuffer<int64_t> Counts(E);
  DeviceBuffer<int32_t> Scratch(permutationScratch(N * K, E));
  buildPermutation(N, K, E, GIdx.data(), Perm.data(), RowOf.data(), Counts.data(), Scratch.data(), nullptr);
  auto GX = uploadBf16(X);
  DeviceBuffer<bf16> GRows(N * K * H), GY(N * H), GDRows(N * K * H), GDX(N * H);
  permuteTokens(N, K, H, GX.data(), Perm.data(), GRows.data(), nullptr);
  auto GEO = uploadBf16(ExpertOut), GDY = uploadBf16(DY);
  auto GWt = uploadF32(W);
  auto GDIn = uploadBf16(DIn);
  DeviceBuffer<float> GDW(N * K);
  unpermuteTokens(N, K, H, GEO.data(), RowOf.data(), GWt.data(), GY.data(), nullptr);
  unpermuteTokensBackward(N, K, H, GDY.data(), GEO.data(), RowOf.data(), GWt.data(), GDRows.data(), GDW.data(),
                          nullptr);
  permuteTokensBackward(N, K, H, GDIn.data(), RowOf.data(), GDX.data(), nullptr);
  sync();
  EXPECT_EQ(Counts.download(), S.TokensPerLocalExpert);
  EXPECT_EQ(downloadBf16(GRows), Rows.storage()); // pure copies: exact
  EXPECT_TRUE(near(downloadBf16(GY), Y.storage(), Bf16Tol, "combine"));
  EXPECT_TRUE(near(downloadBf16(GDRows), DRows.storage(), Bf16Tol, "dExpertOut"));
  EXPECT_TRUE(near(GDW.download(), DW, 1e-4, "dWeights"));
  EXPECT_TRUE(near(downloadBf16(GDX), DX.storage(), Bf16Tol, "dX"));
}

//===--------------------------------------------------------------------===//
// Cross entropy, AdamW
//===--------------------------------------------------------------------===//

// The three phases on the vocabulary split in two slices (as two tp ranks
// hold it), the statistics combined between them as the group would, give
// the host's cross entropy over the whole vocabulary: losses, and each
// slice's gradient (labels on either side, one ignored).
TEST(CudaCrossEntropy, PhasesOverTwoVocabularySlicesMatchTheWholeVocabulary) {
  const int64_t N = 17, V = 1000, Half = V / 2;
  std::vector<float> Logits = randomBf16(N * V, 101, 3.0f);
  std::vector<int32_t> Labels(N);
  for (int64_t I = 0; I < N; ++I)
    Labels[I] = int32_t((I * 37) % V);
  Labels[5] = -1; // ignored
  auto Self = createSelfCommunicator("tp");
  Tensor Probs = tensorOf({N, V}, Logits);
  std::vector<double> Losses;
  vocabParallelCrossEntropyForward(*Self, Probs, Labels, 0, Losses);
  Tensor DLogits = vocabParallelCrossEntropyBackward(Probs, Labels, 0, 0.5f);

  auto GLab = uploadVec(Labels);
  std::vector<DeviceBuffer<float>> Slices;
  for (int64_t S = 0; S < 2; ++S) {
    std::vector<float> Slice(N * Half);
    for (int64_t I = 0; I < N; ++I)
      std::copy_n(Logits.begin() + I * V + S * Half, Half, Slice.begin() + I * Half);
    Slices.push_back(uploadF32(Slice));
  }
  std::vector<float> Max(N, -INFINITY), Stats(2 * N, 0.0f);
  for (int64_t S = 0; S < 2; ++S) {
    DeviceBuffer<float> RowMax(N);
    crossEntropyRowMax(N, Half, Slices[S].data(), RowMax.data(), nullptr);
    std::vector<float> Mine = RowMax.download();
    for (int64_t I = 0; I < N; ++I)
      Max[I] = std::max(Max[I], Mine[I]);
  }
  auto GMax = uploadF32(Max);
  for (int64_t S = 0; S < 2; ++S) {
    DeviceBuffer<float> SliceStats(2 * N);
    crossEntropyExpSum(N, Half, Slices[S].data(), GMax.data(), GLab.data(), S * Half, SliceStats.data(), nullptr);
    std::vector<float> Mine = SliceStats.download();
    for (int64_t I = 0; I < 2 * N; ++I)
      Stats[I] += Mine[I];
  }
  for (int64_t I = 0; I < N; ++I) {
    double Loss = Labels[I] < 0 ? 0.0 : std::log(double(Stats[2 * I])) - double(Stats[2 * I + 1]);
    EXPECT_NEAR(Loss, Losses[I], 1e-5 * (1 + std::abs(Losses[I]))) << "row " << I;
  }
  auto GStats = uploadF32(Stats);
  for (int64_t S = 0; S < 2; ++S) {
    DeviceBuffer<bf16> GD(N * Half);
    crossEntropyGrad(N, Half, Slices[S].data(), GStats.data(), GLab.data(), S * Half, 0.5f, GD.data(), nullptr);
    sync();
    std::vector<float> Want(N * Half);
    for (int64_t I = 0; I < N; ++I)
      std::copy_n(DLogits.storage().begin() + I * V + S * Half, Half, Want.begin() + I * Half);
    EXPECT_TRUE(near(downloadBf16(GD), Want, Bf16Tol, "dLogits of slice " + std::to_string(S)));
  }
}

TEST(CudaAdamW, TwoStepsGiveTheHostBackendsBits) {
  const int64_t N = 5000;
  std::vector<float> P = randomBf16(N, 111), G1 = randomBf16(N, 112, 0.01f), G2 = randomBf16(N, 113, 0.01f);
  std::vector<float> M(N, 0.0f), V(N, 0.0f);
  auto GP = uploadF32(P), GM = uploadF32(M), GV = uploadF32(V);
  DeviceBuffer<bf16> GP16(N);
  std::vector<float> HP = P, HM = M, HV = V;
  int64_t Step = 0;
  for (const auto *Grad : {&G1, &G2}) {
    ++Step;
    AdamWArgs A;
    A.Count = N;
    A.Beta2 = 0.95f;
    A.StepSize = float(1e-3 / (1 - std::pow(0.9, double(Step))));
    A.Bc2Sqrt = float(std::sqrt(1 - std::pow(0.95, double(Step))));
    A.Scale = Step == 2 ? 0.5f : 1.0f;
    A.Decay = 1e-4f;
    A.Param = HP.data();
    A.M = HM.data();
    A.V = HV.data();
    A.Grad = Grad->data();
    hostBackend().adamW(A);
    AdamWConstants C{A.Beta1, A.Beta2, A.Eps, A.StepSize, A.Bc2Sqrt, A.Scale, A.Decay};
    auto GG = uploadF32(*Grad);
    adamWUpdate(N, C, GP.data(), GM.data(), GV.data(), GG.data(), GP16.data(), nullptr);
  }
  sync();
  EXPECT_EQ(GP.download(), HP);
  EXPECT_EQ(GM.download(), HM);
  EXPECT_EQ(GV.download(), HV);
  EXPECT_EQ(downloadBf16(GP16), roundedToBf16(GP.download()));
}

TEST(CudaAdamW, SumOfSquaresMatchesHostInDouble) {
  std::vector<float> X = randomBf16(100003, 121);
  double Want = 0;
  for (float V : X)
    Want += double(V) * V;
  auto GX = uploadF32(X);
  DeviceBuffer<double> Scratch(SumSquaresScratch), Result(1);
  sumSquares(int64_t(X.size()), GX.data(), Scratch.data(), Result.data(), false, nullptr);
  sync();
  EXPECT_NEAR(Result.download()[0], Want, 1e-9 * Want);
  // A second array of 3 elements (one block) added to the first's sum.
  sumSquares(3, GX.data(), Scratch.data(), Result.data(), true, nullptr);
  sync();
  const double Three = double(X[0]) * X[0] + double(X[1]) * X[1] + double(X[2]) * X[2];
  EXPECT_NEAR(Result.download()[0], Want + Three, 1e-9 * Want);
}

} // namespace
