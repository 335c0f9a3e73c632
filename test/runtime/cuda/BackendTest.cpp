//===- BackendTest.cpp - The CUDA compute backend against the host's ------===//
//
// Each operation of the table (kernels/Backend.h) on the CUDA backend gives
// the host backend's result on the same fp32 inputs, up to the bf16 rounding
// of its operands (and, for RMSNorm and SwiGLU, of its outputs); then one
// StageModel, the same code, runs a micro batch on each backend: the loss
// within 1% and every gradient within 5% (relative Frobenius error), and
// not equal, which would mean the backend was never called.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"

#include "comm/Communicator.h"
#include "comm/nccl/HostStagedComm.h"
#include "kernels/cuda/CudaBackend.h"
#include "model/Model.h"
#include "model/ModelOps.h"
#include "model/VisionTower.h"
#include "parallel/cp/AttentionBlock.h"
#include "parallel/tp/VocabParallel.h"

#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

using namespace moert;
using namespace moert::test;

namespace {

std::vector<float> randomF32(size_t N, uint64_t Seed) {
  std::mt19937_64 Gen(Seed);
  std::normal_distribution<float> Dist(0.0f, 1.0f);
  std::vector<float> V(N);
  for (float &X : V)
    X = Dist(Gen);
  return V;
}

std::unique_ptr<ComputeBackend> cudaBackend() { return cuda::createCudaBackend(0); }

/// Bytes an element crosses as: fp32, rounded to bf16 (or widened back) on
/// the device.
constexpr int64_t Crossing = sizeof(float);

TEST(CudaBackend, GemmMatchesTheHostOnStridedTransposedOperands) {
  auto Cuda = cudaBackend();
  const int64_t M = 5, N = 7, K = 9, Pad = 3;
  for (int TA = 0; TA < 2; ++TA)
    for (int TB = 0; TB < 2; ++TB)
      for (float Beta : {0.0f, 1.0f, 0.5f}) {
        // Stored with wider rows than the operand needs (a head's columns).
        int64_t ARows = TA ? K : M, ACols = TA ? M : K, BRows = TB ? N : K, BCols = TB ? K : N;
        int64_t LdA = ACols + Pad, LdB = BCols + Pad, LdC = N + Pad;
        std::vector<float> A = randomBf16(size_t(ARows * LdA), 1), B = randomBf16(size_t(BRows * LdB), 2);
        std::vector<float> C0 = randomF32(size_t(M * LdC), 3);
        std::vector<float> Want = C0, Got = C0;
        GemmArgs G{bool(TA), bool(TB), M, N, K, 0.75f, A.data(), LdA, B.data(), LdB, Beta, nullptr, LdC};
        G.C = Want.data();
        hostBackend().gemm(G);
        G.C = Got.data();
        Cuda->gemm(G);
        std::string What = "TA " + std::to_string(TA) + " TB " + std::to_string(TB) + " Beta " + std::to_string(Beta);
        // Inputs are bf16 already: only the summation order differs; the
        // padding between rows is left alone.
        EXPECT_TRUE(near(Got, Want, F32Tol, What));
        for (int64_t R = 0; R < M; ++R)
          for (int64_t Col = N; Col < LdC; ++Col)
            EXPECT_EQ(Got[size_t(R * LdC + Col)], C0[size_t(R * LdC + Col)]) << What;
      }
}

TEST(CudaBackend, GemmRoundsItsOperandsToBf16) {
  auto Cuda = cudaBackend();
  // 1 + 2^-10 is not a bf16 value: it rounds to 1.
  std::vector<float> A{1.0f + 0x1.0p-10f}, B{1.0f}, C{0.0f};
  Cuda->gemm({false, false, 1, 1, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f, C.data(), 1});
  EXPECT_EQ(C[0], 1.0f);
  hostBackend().gemm({false, false, 1, 1, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f, C.data(), 1});
  EXPECT_EQ(C[0], 1.0f + 0x1.0p-10f);
}

TEST(CudaBackend, GemmWithoutAnInnerDimensionScalesC) {
  auto Cuda = cudaBackend();
  std::vector<float> C{2.0f, -4.0f};
  Cuda->gemm({false, false, 1, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 0.5f, C.data(), 2});
  EXPECT_EQ(C, (std::vector<float>{1.0f, -2.0f}));
}

// A held weight moves to the device once, on its first use, and is read
// from there, also as a block of its columns (a head's); released, it is
// staged again, so a change made after the release is seen.
TEST(CudaBackend, HeldArraysMoveOnceAndAreReadInPlace) {
  auto Cuda = cudaBackend();
  const int64_t M = 4, K = 6, N = 8;
  std::vector<float> X = randomBf16(size_t(M * K), 4), W = randomBf16(size_t(K * N), 5);
  auto Product = [&](int64_t Cols, int64_t Offset) {
    std::vector<float> C(size_t(M * Cols));
    Cuda->gemm({false, false, M, Cols, K, 1.0f, X.data(), K, W.data() + Offset, N, 0.0f, C.data(), Cols});
    return C;
  };
  auto Reference = [&](int64_t Cols, int64_t Offset) {
    std::vector<float> C(size_t(M * Cols));
    hostBackend().gemm({false, false, M, Cols, K, 1.0f, X.data(), K, W.data() + Offset, N, 0.0f, C.data(), Cols});
    return C;
  };
  auto Uploaded = [&] { return Cuda->traffic().HostToDeviceBytes; };
  const int64_t XBytes = M * K * Crossing, WBytes = K * N * Crossing;

  int64_t Before = Uploaded();
  Product(N, 0);
  EXPECT_EQ(Uploaded() - Before, XBytes + WBytes) << "staged: both operands";
  {
    HeldArrays Held(*Cuda, {{W.data(), K * N}});
    Before = Uploaded();
    EXPECT_TRUE(near(Product(N, 0), Reference(N, 0), F32Tol, "held, whole"));
    EXPECT_EQ(Uploaded() - Before, XBytes + WBytes) << "the first use copies the held weight";
    Before = Uploaded();
    EXPECT_TRUE(near(Product(N, 0), Reference(N, 0), F32Tol, "held, again"));
    EXPECT_TRUE(near(Product(3, 2), Reference(3, 2), F32Tol, "held, columns 2-4"));
    EXPECT_EQ(Uploaded() - Before, 2 * XBytes) << "later uses read the device copy";
  }
  for (float &V : W)
    V = -V;
  Before = Uploaded();
  EXPECT_TRUE(near(Product(N, 0), Reference(N, 0), F32Tol, "released, changed"));
  EXPECT_EQ(Uploaded() - Before, XBytes + WBytes);
  EXPECT_GT(Cuda->traffic().DeviceToHostBytes, 0);
  EXPECT_GT(Cuda->traffic().DevicePeakBytes, 0);
}

// A held gradient is summed on the device and added to the host array on
// release: what host code added meanwhile is kept, nothing of it moves before
// the release but the final share, and an operation that overwrites it (Beta
// 0) or reads it sees the sum so far.
TEST(CudaBackend, HeldAccumulatorsSumOnTheDeviceUntilReleased) {
  auto Cuda = cudaBackend();
  const int64_t M = 3, K = 5, N = 4;
  std::vector<float> X = randomBf16(size_t(M * K), 6), DY = randomBf16(size_t(M * N), 7);
  std::vector<float> Grad = randomBf16(size_t(K * N), 8), Want = Grad;
  // dW += X^T dY, twice, as two micro batches would.
  GemmArgs G{true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 1.0f, nullptr, N};
  G.C = Want.data();
  hostBackend().gemm(G);
  hostBackend().gemm(G);
  for (float &V : Want)
    V += 0.25f;
  BackendTraffic Before = Cuda->traffic();
  {
    HeldArrays Held(*Cuda, {{Grad.data(), K * N, HeldArray::Accumulate}});
    G.C = Grad.data();
    Cuda->gemm(G);
    for (float &V : Grad) // host code's own contribution
      V += 0.25f;
    Cuda->gemm(G);
    BackendTraffic During = Cuda->traffic();
    EXPECT_EQ(During.HostToDeviceBytes - Before.HostToDeviceBytes, 2 * (M * K + M * N) * Crossing) << "operands only";
    EXPECT_EQ(During.DeviceToHostBytes, Before.DeviceToHostBytes) << "the sum stays on the device";
  }
  EXPECT_TRUE(near(Grad, Want, F32Tol, "released sum"));
  EXPECT_EQ(Cuda->traffic().DeviceToHostBytes - Before.DeviceToHostBytes, K * N * 4) << "one share, once";

  // Overwritten while held: the earlier share is not added on top.
  std::vector<float> Over = randomBf16(size_t(K * N), 9), Product(static_cast<size_t>(K * N));
  G.C = Product.data();
  G.Beta = 0.0f;
  hostBackend().gemm(G);
  {
    HeldArrays Held(*Cuda, {{Over.data(), K * N, HeldArray::Accumulate}});
    G.Beta = 1.0f;
    G.C = Over.data();
    Cuda->gemm(G);
    G.Beta = 0.0f;
    Cuda->gemm(G);
  }
  EXPECT_TRUE(near(Over, Product, F32Tol, "overwritten"));

  // An RMSNorm weight's gradient accumulates the same way.
  const int64_t Rows = 4, Hidden = 8;
  std::vector<float> In = randomBf16(size_t(Rows * Hidden), 10), W = randomBf16(size_t(Hidden), 11);
  std::vector<float> Dy = randomBf16(size_t(Rows * Hidden), 12), Rstd(static_cast<size_t>(Rows)),
                     Y(static_cast<size_t>(Rows * Hidden));
  hostBackend().rmsNormForward(Rows, Hidden, In.data(), W.data(), 1e-6, Y.data(), Rstd.data());
  std::vector<float> DxHost(static_cast<size_t>(Rows * Hidden)), DxCuda = DxHost;
  std::vector<float> DwHost(static_cast<size_t>(Hidden), 1.0f), DwCuda = DwHost;
  hostBackend().rmsNormBackward(Rows, Hidden, In.data(), W.data(), Rstd.data(), Dy.data(), DxHost.data(),
                                DwHost.data());
  {
    HeldArrays Held(*Cuda, {{DwCuda.data(), Hidden, HeldArray::Accumulate}});
    Cuda->rmsNormBackward(Rows, Hidden, In.data(), W.data(), Rstd.data(), Dy.data(), DxCuda.data(), DwCuda.data());
    EXPECT_EQ(DwCuda, std::vector<float>(size_t(Hidden), 1.0f)) << "not yet on the host";
  }
  EXPECT_TRUE(near(DwCuda, DwHost, Bf16Tol, "rmsnorm weight gradient"));
}

// Holds nest: an inner hold (an activation a product reads twice, a sum of
// products) ends with its scope, flushing its own sums only; the outer hold
// (the step's parameters and gradients) keeps its copies; an array that
// overlaps one already held is left to the outer hold.
TEST(CudaBackend, HoldsNestAndEndInnermostFirst) {
  auto Cuda = cudaBackend();
  const int64_t M = 3, K = 5, N = 4;
  std::vector<float> X = randomBf16(size_t(M * K), 13), W = randomBf16(size_t(K * N), 14);
  std::vector<float> OuterSum(size_t(M * N), 0.0f), InnerSum(size_t(M * N), 0.0f), Want(size_t(M * N), 0.0f);
  GemmArgs G{false, false, M, N, K, 1.0f, X.data(), K, W.data(), N, 1.0f, Want.data(), N};
  hostBackend().gemm(G);
  auto Uploaded = [&] { return Cuda->traffic().HostToDeviceBytes; };
  auto Downloaded = [&] { return Cuda->traffic().DeviceToHostBytes; };
  {
    HeldArrays Outer(*Cuda, {{W.data(), K * N}, {OuterSum.data(), M * N, HeldArray::Accumulate}});
    G.C = OuterSum.data();
    Cuda->gemm(G); // W's copy is made here
    for (int Pass = 0; Pass < 2; ++Pass) {
      int64_t Up = Uploaded(), Down = Downloaded();
      {
        // X read twice, InnerSum summed twice; W and OuterSum again (ignored).
        HeldArrays Inner(*Cuda, {{X.data(), M * K},
                                 {InnerSum.data(), M * N, HeldArray::Accumulate},
                                 {W.data() + 1, 2},
                                 {OuterSum.data(), M * N, HeldArray::Accumulate}});
        G.C = InnerSum.data();
        Cuda->gemm(G);
        Cuda->gemm(G);
        EXPECT_EQ(Uploaded() - Up, M * K * Crossing) << "X once, W from the outer hold";
        EXPECT_EQ(Downloaded(), Down) << "nothing comes back inside the inner hold";
      }
      EXPECT_EQ(Downloaded() - Down, M * N * 4) << "the inner sum, at the inner release";
      EXPECT_EQ(OuterSum, std::vector<float>(size_t(M * N), 0.0f)) << "the outer sum stays on the device";
      int64_t Up2 = Uploaded();
      G.C = OuterSum.data();
      Cuda->gemm(G);
      EXPECT_EQ(Uploaded() - Up2, M * K * Crossing) << "W still held after the inner release";
    }
  }
  std::vector<float> Thrice = Want, Four = Want;
  for (size_t I = 0; I < Want.size(); ++I) {
    Thrice[I] = 3 * Want[I];
    Four[I] = 4 * Want[I];
  }
  EXPECT_TRUE(near(InnerSum, Four, F32Tol, "inner sums of both passes"));
  EXPECT_TRUE(near(OuterSum, Thrice, F32Tol, "outer sum at the outer release"));
  int64_t Up = Uploaded();
  G.C = InnerSum.data();
  Cuda->gemm(G);
  EXPECT_EQ(Uploaded() - Up, (M * K + K * N + M * N) * Crossing) << "released: staged again";
}

// An operation's result that lands in a held Read array is copied into the
// held copy too, so later operations read it without an upload; a result
// the backend cannot follow there (strided rows), or a host write declared
// with hostWrote, drops the copy, and the next reader takes the host's
// values again. Every read gives what the same products give unheld.
TEST(CudaBackend, ResultsInHeldArraysStayInStepWithTheHost) {
  auto Cuda = cudaBackend();
  const int64_t M = 4, K = 6, N = 5, P = 3;
  std::vector<float> X = randomBf16(size_t(M * K), 21), W = randomBf16(size_t(K * N), 22);
  std::vector<float> V = randomBf16(size_t(N * P), 23);
  auto Uploaded = [&] { return Cuda->traffic().HostToDeviceBytes; };
  // Y = X W (rows [First, First + Rows), leading dimension LdY), then Z = Y V.
  auto Produce = [&](std::vector<float> &Y, int64_t First, int64_t Rows, int64_t Cols, int64_t LdY) {
    Cuda->gemm(
        {false, false, Rows, Cols, K, 1.0f, X.data() + First * K, K, W.data(), N, 0.0f, Y.data() + First * LdY, LdY});
  };
  auto Consume = [&](std::vector<float> &Y) {
    std::vector<float> Z(size_t(M * P));
    Cuda->gemm({false, false, M, P, N, 1.0f, Y.data(), N, V.data(), P, 0.0f, Z.data(), P});
    return Z;
  };
  std::vector<float> Unheld(size_t(M * N)), Y(size_t(M * N));
  Produce(Unheld, 0, M, N, N);
  const std::vector<float> Want = Consume(Unheld);
  {
    HeldArrays Keep(*Cuda, {{Y.data(), M * N}});
    Produce(Y, 0, M, N, N);
    EXPECT_EQ(Y, Unheld) << "the host has the result";
    int64_t Up = Uploaded();
    EXPECT_EQ(Consume(Y), Want);
    EXPECT_EQ(Uploaded() - Up, N * P * Crossing) << "V alone: Y is read from the device";

    // Rows 1 and 2 again, from other rows of X: written into the copy.
    Produce(Y, 1, 2, N, N);
    std::vector<float> Rows = Unheld;
    Produce(Rows, 1, 2, N, N);
    std::vector<float> WantRows = Consume(Rows);
    Up = Uploaded();
    EXPECT_EQ(Consume(Y), WantRows);
    EXPECT_EQ(Uploaded() - Up, N * P * Crossing) << "a dense part of the array stays in step";

    // Four of the five columns (strided rows): the copy is dropped.
    std::fill(Y.begin(), Y.end(), 0.0f);
    Cuda->hostWrote(Y.data(), M * N);
    Produce(Y, 0, M, N - 1, N);
    std::vector<float> Strided(size_t(M * N), 0.0f);
    Produce(Strided, 0, M, N - 1, N);
    Up = Uploaded();
    std::vector<float> Got = Consume(Y);
    EXPECT_EQ(Uploaded() - Up, (M * N + N * P) * Crossing) << "Y again from the host";
    EXPECT_EQ(Got, Consume(Strided));

    // A host write, declared.
    Y[0] += 1.0f;
    Cuda->hostWrote(Y.data() + 0, 1);
    Strided[0] += 1.0f;
    EXPECT_EQ(Consume(Y), Consume(Strided));
  }
}

// A copy kept by key outlives the hold that made it, until its key is
// released; an array without a copy is not kept.
TEST(CudaBackend, KeptCopiesOutliveTheirHoldUntilReleased) {
  auto Cuda = cudaBackend();
  const int64_t M = 3, K = 4, N = 5;
  std::vector<float> X = randomBf16(size_t(M * K), 41), W = randomBf16(size_t(K * N), 42), Y(size_t(M * N));
  std::vector<float> Other = randomBf16(size_t(M * K), 43);
  auto Uploaded = [&] { return Cuda->traffic().HostToDeviceBytes; };
  auto Product = [&](const std::vector<float> &A) {
    Cuda->gemm({false, false, M, N, K, 1.0f, A.data(), K, W.data(), N, 0.0f, Y.data(), N});
  };
  std::vector<float> Third = randomBf16(size_t(M * K), 44);
  int Key = 0;
  {
    HeldArrays Hold(*Cuda, {{X.data(), M * K}, {Other.data(), M * K}, {Third.data(), M * K}});
    Product(X); // X's and Third's copies are made; Other has none
    Product(Third);
    Cuda->keepArrays(&Key, {{X.data(), M * K}, {Other.data(), M * K}, {Third.data(), M * K}});
  }
  int64_t Up = Uploaded();
  Product(X);
  EXPECT_EQ(Uploaded() - Up, K * N * Crossing) << "W alone: X is kept";
  Up = Uploaded();
  Product(Other);
  EXPECT_EQ(Uploaded() - Up, (M * K + K * N) * Crossing) << "Other had no copy to keep";
  Cuda->releaseKept(&Key, Third.data());
  Up = Uploaded();
  Product(Third);
  EXPECT_EQ(Uploaded() - Up, (M * K + K * N) * Crossing) << "Third released alone";
  Up = Uploaded();
  Product(X);
  EXPECT_EQ(Uploaded() - Up, K * N * Crossing) << "X still kept";
  Cuda->releaseKept(&Key);
  Up = Uploaded();
  Product(X);
  EXPECT_EQ(Uploaded() - Up, (M * K + K * N) * Crossing) << "released";
}

// A BackendOnly array's results stay on the device: none comes back unless
// host code asks (hostReads), its readers (while held, and after while
// kept) take the device's values, and a write the backend cannot follow over
// values the host lacks is refused rather than left stale.
TEST(CudaBackend, BackendOnlyResultsComeBackOnlyWhenAskedFor) {
  auto Cuda = cudaBackend();
  const int64_t M = 4, K = 6, N = 5, P = 3;
  std::vector<float> X = randomBf16(size_t(M * K), 51), W = randomBf16(size_t(K * N), 52);
  std::vector<float> V = randomBf16(size_t(N * P), 53);
  auto Downloaded = [&] { return Cuda->traffic().DeviceToHostBytes; };
  auto Uploaded = [&] { return Cuda->traffic().HostToDeviceBytes; };
  auto Produce = [&](std::vector<float> &Y) {
    Cuda->gemm({false, false, M, N, K, 1.0f, X.data(), K, W.data(), N, 0.0f, Y.data(), N});
  };
  auto Consume = [&](std::vector<float> &Y) {
    std::vector<float> Z(size_t(M * P));
    Cuda->gemm({false, false, M, P, N, 1.0f, Y.data(), N, V.data(), P, 0.0f, Z.data(), P});
    return Z;
  };
  std::vector<float> OnHost(size_t(M * N)), Y(size_t(M * N));
  Produce(OnHost);
  const std::vector<float> Want = Consume(OnHost);
  int Key = 0;
  {
    HeldArrays Hold(*Cuda, {{Y.data(), M * N, HeldArray::BackendOnly}});
    int64_t Down = Downloaded();
    Produce(Y);
    EXPECT_EQ(Downloaded() - Down, 0) << "the product stays on the device";
#ifdef MOERT_CUDA_EMULATION
    EXPECT_TRUE(std::isnan(Y[0])) << "the emulation marks the host values unspecified";
#endif
    int64_t Up = Uploaded();
    EXPECT_EQ(Consume(Y), Want);
    EXPECT_EQ(Uploaded() - Up, N * P * Crossing) << "V alone: Y is read from the device";
    // Four of its five columns, over values the host lacks.
    EXPECT_THROW(Cuda->gemm({false, false, M, N - 1, K, 1.0f, X.data(), K, W.data(), N, 0.0f, Y.data(), N}),
                 std::logic_error);
    Produce(Y);

    Down = Downloaded();
    Cuda->hostReads(Y.data() + 1, 2);
    EXPECT_EQ(Downloaded() - Down, M * N * Crossing) << "asked for: the whole array comes back once";
    EXPECT_EQ(Y, cuda::roundedToBf16(OnHost)) << "as the device holds it";
    Cuda->hostReads(Y.data(), M * N);
    EXPECT_EQ(Downloaded() - Down, M * N * Crossing) << "the host has it already";
    // A host write after reading it back: the host's values are the
    // array's again.
    Y[0] += 1.0f;
    Cuda->hostWrote(Y.data(), 1);
    std::vector<float> Changed = Y;
    EXPECT_EQ(Consume(Y), Consume(Changed));

    Produce(Y);
    Cuda->keepArrays(&Key, {{Y.data(), M * N, HeldArray::BackendOnly}});
  }
  int64_t Up = Uploaded();
  EXPECT_EQ(Consume(Y), Want) << "kept past its hold";
  EXPECT_EQ(Uploaded() - Up, N * P * Crossing);
  Cuda->releaseKept(&Key);

  // Kept before any operation made its copy: still the holder's, with the
  // host's values, until released.
  std::vector<float> Unused = OnHost;
  {
    HeldArrays Hold(*Cuda, {{Unused.data(), M * N, HeldArray::BackendOnly}});
    Cuda->keepArrays(&Key, {{Unused.data(), M * N, HeldArray::BackendOnly}});
  }
  EXPECT_EQ(Consume(Unused), Want) << "kept without a copy";
  Cuda->releaseKept(&Key);
}

// The residual stream on the device: a product and a sum held wide stay
// there in fp32, the add gives the host's bits, an operation that reads the
// sum takes its bf16 copy made there, and it comes back, exact, when asked.
TEST(CudaBackend, WideArraysAddInFp32WhereTheyAre) {
  auto Cuda = cudaBackend();
  const int64_t M = 4, K = 6, N = 8, Count = M * N;
  std::vector<float> X = randomF32(size_t(Count), 81), A = randomBf16(size_t(M * K), 82);
  std::vector<float> W = randomBf16(size_t(K * N), 83), Norm = randomBf16(size_t(N), 84);
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  auto Product = [&](std::vector<float> &P) {
    Cuda->gemm({false, false, M, N, K, 1.0f, A.data(), K, W.data(), N, 0.0f, P.data(), N});
  };
  // What the host adds: the same product, brought back, plus X.
  std::vector<float> OnHost(static_cast<size_t>(Count)), Want(static_cast<size_t>(Count)),
      WantY(static_cast<size_t>(Count)), WantRstd(static_cast<size_t>(M));
  Product(OnHost);
  hostBackend().add(Count, X.data(), OnHost.data(), Want.data());
  Cuda->rmsNormForward(M, N, Want.data(), Norm.data(), 1e-6, WantY.data(), WantRstd.data());

  std::vector<float> P(static_cast<size_t>(Count)), H(static_cast<size_t>(Count)), Y(static_cast<size_t>(Count)),
      Rstd(static_cast<size_t>(M));
  int Key = 0;
  {
    HeldArrays Hold(*Cuda, {HeldArray::wide(P.data(), Count), HeldArray::wide(H.data(), Count)});
    int64_t Before = Moved();
    Product(P);
    EXPECT_EQ(Moved() - Before, (M * K + K * N) * Crossing) << "the operands in, the product stays";
    Before = Moved();
    Cuda->add(Count, X.data(), P.data(), H.data());
    EXPECT_EQ(Moved() - Before, Count * Crossing) << "X in, in fp32; the sum stays";
#ifdef MOERT_CUDA_EMULATION
    EXPECT_TRUE(std::isnan(H[0]) && std::isnan(P[0])) << "host values unspecified until asked for";
#endif
    Before = Moved();
    Cuda->rmsNormForward(M, N, H.data(), Norm.data(), 1e-6, Y.data(), Rstd.data());
    EXPECT_EQ(Moved() - Before, (N + Count + M) * Crossing) << "the weight in, Y and rstd out: H is read there";
    EXPECT_EQ(Y, WantY);
    EXPECT_EQ(Rstd, WantRstd);
    Cuda->add(Count, H.data(), H.data(), H.data()); // in place, and back
    Cuda->add(Count, H.data(), P.data(), H.data());
    Cuda->keepArrays(&Key, {HeldArray::wide(H.data(), Count)});
  }
  std::vector<float> Twice(static_cast<size_t>(Count));
  for (int64_t I = 0; I < Count; ++I)
    Twice[size_t(I)] = 2.0f * Want[size_t(I)] + OnHost[size_t(I)];
  int64_t Before = Moved();
  Cuda->hostReads(H.data(), Count);
  Cuda->hostReads(H.data() + 1, 1);
  EXPECT_EQ(Moved() - Before, Count * Crossing) << "kept past its hold; asked for, it comes back once";
  EXPECT_EQ(H, Twice) << "the host's fp32 sums, bit for bit";
  Cuda->releaseKept(&Key);

  // Zeroed and copied where they are: a sum before its first product, a
  // ring's buffer into the gradient it is for.
  std::vector<float> From(static_cast<size_t>(Count)), To(static_cast<size_t>(Count)), Out(static_cast<size_t>(Count));
  {
    HeldArrays Hold(*Cuda, {HeldArray::wide(From.data(), Count), HeldArray::wide(To.data(), Count)});
    Before = Moved();
    Cuda->zero(From.data(), Count);
    Cuda->gemm({false, false, M, N, K, 1.0f, A.data(), K, W.data(), N, 1.0f, From.data(), N});
    Cuda->copy(From.data(), To.data(), Count);
    EXPECT_EQ(Moved() - Before, (M * K + K * N) * Crossing) << "the product's operands alone";
    Cuda->copy(To.data(), Out.data(), Count);
    EXPECT_EQ(Moved() - Before, (M * K + K * N + Count) * Crossing) << "and the copy to the host";
  }
  EXPECT_EQ(Out, OnHost) << "zero plus the product, in fp32";

  // Where the sum is not held wide, the add is the host's.
  std::vector<float> Plain(static_cast<size_t>(Count));
  Before = Moved();
  Cuda->add(Count, X.data(), OnHost.data(), Plain.data());
  EXPECT_EQ(Moved() - Before, 0);
  EXPECT_EQ(Plain, Want);
  EXPECT_THROW(Cuda->holdArrays({{Plain.data(), Count, HeldArray::Read, true}}), std::logic_error);
}

// Latent attention's column blocks: into an array only the backend reads
// (bf16 values, exact), summed over blocks into a wide one (the host's fp32
// order, bit for bit, the columns between them kept), and on the host where
// the destination is the host's.
TEST(CudaBackend, ColumnBlocksMoveWhereTheirDestinationIs) {
  auto Cuda = cudaBackend();
  const int64_t Rows = 5, Heads = 3, Nope = 4, Rope = 2, VDim = 3, KvW = Nope + VDim, Qk = Nope + Rope;
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  const std::vector<float> KvU = randomBf16(size_t(Rows * Heads * KvW), 91), Pe = randomBf16(size_t(Rows * Rope), 92);
  // Each head's key: its no-RoPE columns, then the RoPE key every head shares.
  const ColumnBlocks NopePart{Rows, Heads, Nope, Heads * KvW, KvW, Heads * Qk, Qk};
  const ColumnBlocks PePart{Rows, Heads, Rope, Rope, 0, Heads * Qk, Qk};
  std::vector<float> Want(static_cast<size_t>(Rows * Heads * Qk));
  hostBackend().copyColumns(NopePart, KvU.data(), Want.data());
  hostBackend().copyColumns(PePart, Pe.data(), Want.data() + Nope);
  EXPECT_EQ(Want[size_t(Qk + Nope + 1)], Pe[1]) << "head 1's RoPE key is the shared one";
  EXPECT_EQ(Want[size_t(Heads * Qk + 2)], KvU[size_t(Heads * KvW + 2)]) << "row 1, head 0";

  std::vector<float> SrcHeld = KvU, K(Want.size(), 7.0f);
  int Key = 0;
  {
    HeldArrays Hold(*Cuda, {{SrcHeld.data(), int64_t(SrcHeld.size()), HeldArray::Read},
                            {K.data(), int64_t(K.size()), HeldArray::BackendOnly}});
    Cuda->copyColumns(NopePart, SrcHeld.data(), K.data());
    Cuda->copyColumns(PePart, Pe.data(), K.data() + Nope);
    Cuda->keepArrays(&Key, {{K.data(), int64_t(K.size()), HeldArray::BackendOnly}});
  }
#ifdef MOERT_CUDA_EMULATION
  EXPECT_TRUE(std::isnan(K[0])) << "the result is the backend's until asked for";
#endif
  int64_t Before = Moved();
  Cuda->hostReads(K.data(), int64_t(K.size()));
  EXPECT_EQ(Moved() - Before, int64_t(K.size() * sizeof(float))) << "asked for, it comes back once";
  EXPECT_EQ(K, Want) << "bf16 values move exactly";
  Cuda->releaseKept(&Key);

  // The backward: each head's RoPE-key gradient summed into the shared one
  // (DstBlock 0), in fp32 where both are wide, beside columns it leaves.
  const std::vector<float> DK = randomF32(size_t(Rows * Heads * Qk), 93);
  const ColumnBlocks SumPe{Rows, Heads, Rope, Heads * Qk, Qk, Rope + 1, 0, /*Accumulate=*/true};
  std::vector<float> WantSum(static_cast<size_t>(Rows * (Rope + 1)), 0.5f);
  hostBackend().copyColumns(SumPe, DK.data() + Nope, WantSum.data());
  std::vector<float> DKHeld = DK, Sum(WantSum.size(), 0.5f);
  {
    HeldArrays Hold(*Cuda, {HeldArray::wide(DKHeld.data(), int64_t(DKHeld.size())),
                            HeldArray::wide(Sum.data(), int64_t(Sum.size()))});
    Cuda->copyColumns(SumPe, DKHeld.data() + Nope, Sum.data());
    Cuda->keepArrays(&Key, {HeldArray::wide(Sum.data(), int64_t(Sum.size()))});
  }
  Cuda->hostReads(Sum.data(), int64_t(Sum.size()));
  EXPECT_EQ(Sum, WantSum) << "the host's fp32 sums, the column after them kept";
  EXPECT_NE(WantSum[0], 0.5f);
  EXPECT_EQ(WantSum[size_t(Rope)], 0.5f);
  Cuda->releaseKept(&Key);

  // Into the host's array: the host's loop, nothing crosses.
  std::vector<float> Plain(Want.size());
  Before = Moved();
  Cuda->copyColumns(NopePart, KvU.data(), Plain.data());
  Cuda->copyColumns(PePart, Pe.data(), Plain.data() + Nope);
  EXPECT_EQ(Moved() - Before, 0);
  EXPECT_EQ(Plain, Want);
}

// A vision tower's rows into the decoder's and back (kernels/RowPairs.h):
// where the destination is held wide the rows move between the backend's
// fp32 copies (the host's bits: copies and fp32 adds), only the pairs'
// indices crossing; into the host's array the host's loop runs and nothing
// crosses; pairs that reach past an array or name a row twice are refused.
TEST(CudaBackend, RowPairsMoveWhereTheirDestinationIs) {
  auto Cuda = cudaBackend();
  const int64_t Cols = 7, TowerRows = 3, SeqRows = 8;
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  const RowPairs Pairs{Cols, TowerRows, SeqRows, {0, 2, 1}, {6, 1, 2}};
  const std::vector<float> Tokens0 = randomBf16(size_t(TowerRows * Cols), 94),
                           Feature0 = randomF32(size_t(TowerRows * Cols), 95),
                           Seq0 = randomF32(size_t(SeqRows * Cols), 96);
  // The host's: the tokens replace their rows, the feature adds to them,
  // and the gradient's rows move back, zeroed where they were.
  std::vector<float> Want = Seq0, WantBack(Tokens0.size(), 3.0f), WantFrom = Seq0;
  hostBackend().copyRows(Pairs, Tokens0.data(), Want.data(), /*Accumulate=*/false);
  EXPECT_EQ(Want[size_t(6 * Cols + 3)], Tokens0[3]) << "tower row 0 into row 6";
  EXPECT_EQ(Want[size_t(3 * Cols)], Seq0[size_t(3 * Cols)]) << "a row no pair names keeps its values";
  hostBackend().copyRows(Pairs, Feature0.data(), Want.data(), /*Accumulate=*/true);
  EXPECT_EQ(Want[size_t(Cols + 4)], Tokens0[size_t(2 * Cols + 4)] + Feature0[size_t(2 * Cols + 4)]);
  hostBackend().moveRows(Pairs.reversed(), WantFrom.data(), WantBack.data());
  EXPECT_EQ(WantBack[size_t(Cols)], Seq0[size_t(2 * Cols)]) << "row 2 back to tower row 1";
  EXPECT_EQ(WantFrom[size_t(2 * Cols)], 0.0f) << "and zeroed where it was";
  EXPECT_EQ(WantFrom[size_t(3 * Cols)], Seq0[size_t(3 * Cols)]);

  std::vector<float> Tokens = Tokens0, Feature = Feature0, Seq = Seq0, Back(Tokens0.size(), 3.0f), From = Seq0;
  int Key = 0;
  const int64_t Indices = 2 * Pairs.count() * int64_t(sizeof(int32_t));
  int64_t Before;
  {
    HeldArrays Hold(*Cuda, {HeldArray::wide(Tokens.data(), int64_t(Tokens.size())),
                            HeldArray::wide(Seq.data(), int64_t(Seq.size())),
                            HeldArray::wide(Back.data(), int64_t(Back.size())),
                            HeldArray::wide(From.data(), int64_t(From.size()))});
    const int64_t F = int64_t(sizeof(float));
    Before = Moved();
    Cuda->copyRows(Pairs, Tokens.data(), Seq.data(), /*Accumulate=*/false);
    EXPECT_EQ(Moved() - Before, (TowerRows + SeqRows) * Cols * F + Indices)
        << "the arrays' first device copies (the rows no pair names keep their values), the indices";
    Before = Moved();
    Cuda->copyRows(Pairs, Feature.data(), Seq.data(), /*Accumulate=*/true);
    EXPECT_EQ(Moved() - Before, TowerRows * Cols * F) << "a host source staged; the indices are on the device";
    Before = Moved();
    Cuda->copyRows(Pairs, Tokens.data(), Seq.data(), /*Accumulate=*/true);
    Cuda->copyRows(Pairs, Tokens.data(), Seq.data(), /*Accumulate=*/false);
    EXPECT_EQ(Moved() - Before, 0) << "between the device's copies, by the indices there";
    Cuda->copyRows(Pairs, Feature.data(), Seq.data(), /*Accumulate=*/true);
    Before = Moved();
    Cuda->moveRows(Pairs.reversed(), From.data(), Back.data());
    EXPECT_EQ(Moved() - Before, (SeqRows + TowerRows) * Cols * F)
        << "the arrays' first device copies alone: the pairs reversed are the same indices";
    const RowPairs Others{Cols, TowerRows, SeqRows, {0, 2, 1}, {5, 1, 2}};
    std::vector<float> Elsewhere = Seq0;
    HeldArrays HoldElsewhere(*Cuda, {HeldArray::wide(Elsewhere.data(), int64_t(Elsewhere.size()))});
    Cuda->copyRows(Pairs, Tokens.data(), Elsewhere.data(), /*Accumulate=*/false);
    Before = Moved();
    Cuda->copyRows(Others, Tokens.data(), Elsewhere.data(), /*Accumulate=*/false);
    EXPECT_EQ(Moved() - Before, Indices / 2) << "other destination rows go up";
    // No pairs (a sequence shard no image reaches): nothing moves, and
    // nothing crosses.
    Before = Moved();
    const RowPairs None{Cols, TowerRows, SeqRows, {}, {}};
    Cuda->copyRows(None, Tokens.data(), Seq.data(), /*Accumulate=*/false);
    Cuda->moveRows(None.reversed(), From.data(), Back.data());
    EXPECT_EQ(Moved() - Before, 0);
    Cuda->keepArrays(&Key, {HeldArray::wide(Seq.data(), int64_t(Seq.size())),
                            HeldArray::wide(Back.data(), int64_t(Back.size())),
                            HeldArray::wide(From.data(), int64_t(From.size()))});
  }
#ifdef MOERT_CUDA_EMULATION
  EXPECT_TRUE(std::isnan(Seq[0])) << "the result is the backend's until asked for";
#endif
  for (std::vector<float> *Result : {&Seq, &Back, &From})
    Cuda->hostReads(Result->data(), int64_t(Result->size()));
  EXPECT_EQ(Seq, Want) << "the host's bits";
  EXPECT_EQ(Back, WantBack);
  EXPECT_EQ(From, WantFrom);
  Cuda->releaseKept(&Key);

  // Into the host's arrays: the host's loops, nothing crosses.
  std::vector<float> Plain = Seq0, PlainBack(Tokens0.size(), 3.0f), PlainFrom = Seq0;
  Before = Moved();
  Cuda->copyRows(Pairs, Tokens0.data(), Plain.data(), false);
  Cuda->copyRows(Pairs, Feature0.data(), Plain.data(), true);
  Cuda->moveRows(Pairs.reversed(), PlainFrom.data(), PlainBack.data());
  EXPECT_EQ(Moved() - Before, 0);
  EXPECT_EQ(Plain, Want);
  EXPECT_EQ(PlainBack, WantBack);
  EXPECT_EQ(PlainFrom, WantFrom);

  for (const RowPairs &Bad :
       {RowPairs{Cols, TowerRows, SeqRows, {0, 3}, {0, 1}}, RowPairs{Cols, TowerRows, SeqRows, {0, 1}, {5, 5}},
        RowPairs{Cols, TowerRows, SeqRows, {0}, {-1}}}) {
    EXPECT_THROW(hostBackend().copyRows(Bad, Tokens0.data(), Plain.data(), false), std::invalid_argument);
    EXPECT_THROW(Cuda->copyRows(Bad, Tokens0.data(), Plain.data(), false), std::invalid_argument);
  }
}

// A parameter's values, gradient and moments kept resident step to step:
// the gradient is zeroed and summed on the device, the norm's squares come
// back as one figure, the update runs where they are (the host backend's
// bits) and refreshes the operand copy, and nothing crosses until the host
// asks for them.
// The gradient norm's arrays may include empty ones (a parameter none of
// whose elements fall in this rank's shard of a bucket, under the
// distributed optimizer): they add nothing and bring nothing back, not the
// resident array their address lies in, which stays on the device.
TEST(CudaBackend, AnEmptyArrayInTheNormBringsNothingBack) {
  auto Cuda = cudaBackend();
  const int64_t Count = 64;
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  std::vector<float> Shard = randomBf16(size_t(Count), 71);
  std::vector<float> Doubled = Shard;
  for (float &X : Doubled)
    X += X;
  const double Want = hostBackend().sumSquares({{Doubled.data(), Count}});
  Cuda->makeResident({{Shard.data(), Count}});
  Cuda->add(Count, Shard.data(), Shard.data(), Shard.data()); // ahead of the host now
  const int64_t Before = Moved();
  const double Got = Cuda->sumSquares(
      {{Shard.data(), Count / 2}, {Shard.data() + Count / 2, 0}, {Shard.data() + Count / 2, Count / 2}});
  EXPECT_EQ(Moved() - Before, int64_t(sizeof(double))) << "the one figure";
  EXPECT_NEAR(Got, Want, 1e-6 * Want);
  Cuda->releaseResident();
  EXPECT_EQ(Shard, Doubled);
}

TEST(CudaBackend, ResidentArraysStepWhereTheyAreAndComeBackWhenAsked) {
  auto Cuda = cudaBackend();
  const int64_t M = 4, K = 6, N = 5, Count = K * N;
  std::vector<float> X = randomBf16(size_t(M * K), 61), DY = randomBf16(size_t(M * N), 62);
  std::vector<float> W = randomBf16(size_t(Count), 63), DW(size_t(Count), 7.0f);
  std::vector<float> Ms(static_cast<size_t>(Count)), Vs(static_cast<size_t>(Count));
  const std::vector<float> W0 = W;
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  auto Forward = [&] {
    std::vector<float> Y(size_t(M * N));
    Cuda->gemm({false, false, M, N, K, 1.0f, X.data(), K, W.data(), N, 0.0f, Y.data(), N});
    return Y;
  };
  AdamWArgs A;
  A.Count = Count;
  A.StepSize = 1e-2f;
  A.Decay = 1e-3f;
  A.Param = W.data();
  A.M = Ms.data();
  A.V = Vs.data();
  A.Grad = DW.data();
  AdamWArgs AdamW2 = A;
  AdamW2.StepSize = AdamW2.Decay = 0.0f;

  Cuda->makeResident({{W.data(), Count}, {DW.data(), Count}, {Ms.data(), Count}, {Vs.data(), Count}});
  int64_t Before = Moved();
  Cuda->zero(DW.data(), Count);
  EXPECT_EQ(Moved() - Before, 0) << "zeroed on the device";
  const std::vector<float> Y0 = Forward();
  EXPECT_EQ(Moved() - Before, (M * K + Count + M * N) * Crossing) << "X and W in (W once), Y out";
  Before = Moved();
  Cuda->gemm({true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 1.0f, DW.data(), N});
  EXPECT_EQ(Moved() - Before, (M * K + M * N) * Crossing) << "X and DY in; the gradient stays";
  std::vector<float> Want(static_cast<size_t>(Count));
  hostBackend().gemm({true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 0.0f, Want.data(), N});
  const double Squares = hostBackend().sumSquares({{Want.data(), Count}});
  Before = Moved();
  EXPECT_NEAR(Cuda->sumSquares({{DW.data(), Count}}), Squares, 1e-6 * Squares);
  EXPECT_EQ(Moved() - Before, int64_t(sizeof(double))) << "one figure back";
  Cuda->adamW(A);
  const int64_t Moments = 2 * Count * Crossing;
  EXPECT_EQ(Moved() - Before, int64_t(sizeof(double)) + Moments) << "the moments' first use alone moves them";
#ifdef MOERT_CUDA_EMULATION
  EXPECT_TRUE(std::isnan(W[0]) && std::isnan(Ms[0])) << "host values unspecified until asked for";
#endif
  const std::vector<float> Y1 = Forward();
  EXPECT_EQ(Moved() - Before, int64_t(sizeof(double)) + Moments + (M * K + M * N) * Crossing)
      << "X in, Y out: the updated weight is read where it is";
  Before = Moved();
  Cuda->zero(DW.data(), Count);
  Cuda->gemm({true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 1.0f, DW.data(), N});
  Cuda->adamW(AdamW2); // moments move; the values stay as they are
  EXPECT_EQ(Moved() - Before, (M * K + M * N) * Crossing) << "a second step: X and DY in, nothing else";

  // Asked for, each comes back once, as the host backend would have stepped it.
  Before = Moved();
  Cuda->hostReads(DW.data(), Count);
  Cuda->hostReads(DW.data(), Count);
  EXPECT_EQ(Moved() - Before, Count * Crossing);
  EXPECT_TRUE(near(DW, Want, F32Tol, "the summed gradient"));
  std::vector<float> HostW = W0, HostM(static_cast<size_t>(Count)), HostV(static_cast<size_t>(Count));
  AdamWArgs H = A;
  H.Param = HostW.data();
  H.M = HostM.data();
  H.V = HostV.data();
  hostBackend().adamW(H);
  H.StepSize = H.Decay = 0.0f;
  hostBackend().adamW(H);
  Cuda->releaseResident();
  EXPECT_EQ(W, HostW);
  EXPECT_EQ(Ms, HostM);
  EXPECT_EQ(Vs, HostV);
  EXPECT_NE(Y1, Y0);
  Before = Moved();
  EXPECT_EQ(Forward(), Y1) << "released: the host's values are the same";
  EXPECT_EQ(Moved() - Before, (M * K + Count + M * N) * Crossing) << "and staged again";

  // A host write after asking: the host's values are the array's again.
  Cuda->makeResident({{W.data(), Count}});
  Forward();
  Cuda->hostReads(W.data(), Count);
  W[0] += 1.0f;
  Cuda->hostWrote(W.data(), 1);
  std::vector<float> Changed = W;
  const std::vector<float> Y2 = Forward();
  Cuda->releaseResident();
  EXPECT_EQ(W, Changed);
  EXPECT_EQ(Y2, Forward());
  EXPECT_NE(Y2, Y1);
}

// The gradient reduction's moves and collectives on resident arrays run on
// the device over the group's device counterpart (here the host-staged one
// over a group of one), moving nothing between host and device; on host
// arrays, or without a device group, over the host communicator; a host
// array copied into a resident one crosses once.
TEST(CudaBackend, ResidentGradientsAreSummedOverDeviceGroupsWhereTheyLie) {
  auto Cuda = cudaBackend();
  std::unique_ptr<Communicator> Self = createSelfCommunicator("dp-cp");
  std::unique_ptr<Communicator> Device = createHostStagedCommunicator(*Self);
  Self->setDevice(Device.get());
  const int64_t M = 3, K = 4, N = 5, Count = K * N;
  std::vector<float> X = randomBf16(size_t(M * K), 71), DY = randomBf16(size_t(M * N), 72);
  std::vector<float> Grad(static_cast<size_t>(Count)), Flat(static_cast<size_t>(Count + 1));
  std::vector<float> Shard(static_cast<size_t>(Count + 1)), Gathered(static_cast<size_t>(Count + 1));
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };
  Cuda->makeResident(
      {{Grad.data(), Count}, {Flat.data(), Count + 1}, {Shard.data(), Count + 1}, {Gathered.data(), Count + 1}});
  int64_t Before = Moved();
  Cuda->zero(Grad.data(), Count);
  Cuda->gemm({true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 1.0f, Grad.data(), N});
  const int64_t Product = (M * K + M * N) * Crossing;
  EXPECT_EQ(Moved() - Before, Product);
  Before = Moved();
  Cuda->copy(Grad.data(), Flat.data(), Count);
  Cuda->zero(Flat.data() + Count, 1);
  Cuda->allReduceSum(Flat.data(), Count + 1, *Self);
  Cuda->reduceScatterSum(Flat.data(), Shard.data(), Count + 1, *Self);
  Cuda->allGather(Shard.data(), Gathered.data(), Count + 1, *Self);
  Cuda->copy(Gathered.data(), Grad.data(), Count);
  EXPECT_EQ(Moved() - Before, (Count + 1) * Crossing) << "the bucket's first partial write brings the rest of it";
  Before = Moved();
  Cuda->copy(Gathered.data(), Flat.data(), Count + 1);
  Cuda->allReduceSum(Flat.data(), Count + 1, *Self);
  Cuda->copy(Flat.data(), Grad.data(), Count);
  EXPECT_EQ(Moved() - Before, 0) << "every move and sum on the device";
  std::vector<float> Want(static_cast<size_t>(Count));
  hostBackend().gemm({true, false, K, N, M, 1.0f, X.data(), K, DY.data(), N, 0.0f, Want.data(), N});
  Cuda->releaseResident();
  EXPECT_TRUE(near(Grad, Want, F32Tol, "the gradient through the device group"));
  EXPECT_EQ(Gathered[size_t(Count)], 0.0f) << "the padding";

  // Host arrays: the host communicator, nothing moved.
  std::vector<float> OnHost = Want;
  Before = Moved();
  Cuda->allReduceSum(OnHost.data(), Count, *Self);
  EXPECT_EQ(OnHost, Want);
  // Resident, but no device group: asked for, summed on the host.
  Cuda->makeResident({{Flat.data(), Count}});
  Cuda->copy(OnHost.data(), Flat.data(), Count);
  EXPECT_EQ(Moved() - Before, Count * Crossing) << "a host array into a resident one crosses once";
  Self->setDevice(nullptr);
  Cuda->allReduceSum(Flat.data(), Count, *Self);
  EXPECT_EQ(Moved() - Before, 2 * Count * Crossing) << "and back to the host for a host group";
  std::fill(Shard.begin(), Shard.end(), 0.0f);
  std::fill(Gathered.begin(), Gathered.end(), 0.0f);
  Cuda->reduceScatterSum(Flat.data(), Shard.data(), Count, *Self);
  Cuda->allGather(Shard.data(), Gathered.data(), Count, *Self);
  Cuda->releaseResident();
  EXPECT_EQ(std::vector<float>(Flat.begin(), Flat.begin() + Count), Want);
  EXPECT_EQ(std::vector<float>(Gathered.begin(), Gathered.begin() + Count), Want) << "through the host group";
}

// The embedding lookup and its gradient's scatter run on a resident table
// where it is, with the host's values and sums bit for bit (ids this rank
// does not hold give zeros and add nothing; a repeated id adds in token
// order); a host table is looked up on the host, moving nothing.
TEST(CudaBackend, EmbeddingLookupAndScatterRunWhereTheTableIs) {
  auto Cuda = cudaBackend();
  const int64_t Rows = 6, Hidden = 5, Start = 10;
  const std::vector<int32_t> Ids = {12, 3, 15, 12, 10, 16, 11};
  const EmbeddingArgs A{int64_t(Ids.size()), Hidden, Start, Rows, Ids.data()};
  std::vector<float> Table = randomF32(size_t(Rows * Hidden), 81), D = randomF32(size_t(A.Tokens * Hidden), 82);
  std::vector<float> Want(size_t(A.Tokens * Hidden)), WantGrad(size_t(Rows * Hidden), 0.5f);
  hostBackend().embeddingForward(A, Table.data(), Want.data());
  hostBackend().embeddingBackward(A, D.data(), WantGrad.data());
  auto Moved = [&] { return Cuda->traffic().HostToDeviceBytes + Cuda->traffic().DeviceToHostBytes; };

  std::vector<float> Out(Want.size()), Grad(WantGrad.size(), 0.5f);
  int64_t Before = Moved();
  Cuda->embeddingForward(A, Table.data(), Out.data());
  Cuda->embeddingBackward(A, D.data(), Grad.data());
  EXPECT_EQ(Moved() - Before, 0) << "host arrays: looked up and summed on the host";
  EXPECT_EQ(Out, Want);
  EXPECT_EQ(Grad, WantGrad);

  std::fill(Out.begin(), Out.end(), -1.0f);
  std::fill(Grad.begin(), Grad.end(), 0.5f);
  Cuda->makeResident({{Table.data(), Rows * Hidden}, {Grad.data(), Rows * Hidden}});
  Cuda->embeddingForward(A, Table.data(), Out.data());
  const int64_t IdBytes = A.Tokens * int64_t(sizeof(int32_t)), RowBytes = A.Tokens * Hidden * Crossing;
  // The ids went to the device with the first lookup; the lookup and the
  // scatter of the same tokens find them there.
  Before = Moved();
  Cuda->embeddingForward(A, Table.data(), Out.data());
  EXPECT_EQ(Moved() - Before, RowBytes) << "the rows out: the table and the ids stay";
  Before = Moved();
  Cuda->embeddingBackward(A, D.data(), Grad.data());
  EXPECT_EQ(Moved() - Before, RowBytes + Rows * Hidden * Crossing)
      << "the gradient's rows in, and the first use of the table's gradient";
  const std::vector<int32_t> Others = {11, 3, 15, 12, 10, 16, 11};
  const EmbeddingArgs B{int64_t(Others.size()), Hidden, Start, Rows, Others.data()};
  Before = Moved();
  Cuda->embeddingForward(B, Table.data(), Out.data());
  EXPECT_EQ(Moved() - Before, IdBytes + RowBytes) << "other tokens' ids go up";
  Cuda->embeddingForward(A, Table.data(), Out.data());
  Cuda->releaseResident();
  EXPECT_EQ(Out, Want);
  EXPECT_EQ(Grad, WantGrad);
}

#ifdef MOERT_CUDA_EMULATION
// The emulation checks a Read hold's contract at its release: a host write
// the backend was not told of would leave later operations reading stale
// values on a GPU.
TEST(CudaBackendDeathTest, AnUndeclaredHostWriteToAHeldArrayIsCaughtAtItsRelease) {
  // Forked without a new exec: the child must not start MPI again.
  GTEST_FLAG_SET(death_test_style, "fast");
  auto Cuda = cudaBackend();
  std::vector<float> X = randomBf16(8, 31), W = randomBf16(8, 32), Y(4);
  EXPECT_DEATH(
      {
        HeldArrays Keep(*Cuda, {{Y.data(), 4}});
        Cuda->gemm({false, false, 2, 2, 4, 1.0f, X.data(), 4, W.data(), 2, 0.0f, Y.data(), 2});
        Y[3] = 42.0f;
      },
      "host code wrote an array of 4 elements while it was held");
}
#endif

// The fused loss head gives what the host's vocabulary-parallel cross
// entropy and the output head's two products give for a tp group of one,
// labels of -1 ignored, DW accumulated (held or not), DX overwritten.
TEST(CudaBackend, LossHeadMatchesTheHostsCrossEntropyAndProducts) {
  auto Cuda = cudaBackend();
  auto Tp = createSelfCommunicator("tp");
  const int64_t Rows = 6, Hidden = 16, Vocab = 40;
  const float Scale = 1.0f / 5;
  Tensor X({Rows, Hidden}), W({Hidden, Vocab});
  std::vector<float> XV = randomBf16(size_t(Rows * Hidden), 13), WV = randomBf16(size_t(Hidden * Vocab), 14);
  std::copy(XV.begin(), XV.end(), X.data());
  std::copy(WV.begin(), WV.end(), W.data());
  std::vector<int32_t> Labels{3, 39, -1, 0, 17, 17};

  // The host: logits, cross entropy, its backward, both products.
  Tensor Logits({Rows, Vocab});
  hostBackend().gemm(
      {false, false, Rows, Vocab, Hidden, 1.0f, X.data(), Hidden, W.data(), Vocab, 0.0f, Logits.data(), Vocab});
  std::vector<double> WantLosses;
  vocabParallelCrossEntropyForward(*Tp, Logits, Labels, 0, WantLosses);
  Tensor DLogits = vocabParallelCrossEntropyBackward(Logits, Labels, 0, Scale);
  std::vector<float> WantDX(size_t(Rows * Hidden)), WantDW = randomF32(size_t(Hidden * Vocab), 15);
  std::vector<float> DW0 = WantDW;
  hostBackend().gemm(
      {false, true, Rows, Hidden, Vocab, 1.0f, DLogits.data(), Vocab, W.data(), Vocab, 0.0f, WantDX.data(), Hidden});
  hostBackend().gemm(
      {true, false, Hidden, Vocab, Rows, 1.0f, X.data(), Hidden, DLogits.data(), Vocab, 1.0f, WantDW.data(), Vocab});

  // Staged or held, the losses at once; and the losses later: their
  // statistics come back behind the queued work, a copy the host does not
  // wait for, and the losses are written when asked for.
  int64_t StagedWaits = 0;
  for (auto [Hold, Later] : {std::pair{false, false}, {true, false}, {false, true}}) {
    std::vector<double> Losses;
    std::vector<float> DX(size_t(Rows * Hidden), NAN), DW = DW0;
    Losses.assign(size_t(Rows), NAN);
    LossHeadArgs A{Rows,  Hidden,        Vocab,     0,         X.data(), W.data(), Labels.data(),
                   Scale, Losses.data(), DX.data(), DW.data(), {},       {}};
    A.LossesLater = Later;
    const BackendTraffic::Copies Before = Cuda->traffic().ByOperation["loss head"];
    {
      std::optional<HeldArrays> Held;
      if (Hold)
        Held.emplace(*Cuda, std::vector<HeldArray>{{DW.data(), Hidden * Vocab, HeldArray::Accumulate}});
      Cuda->lossHead(A);
    }
    const BackendTraffic::Copies After = Cuda->traffic().ByOperation["loss head"];
    const int64_t Waits = (After.Transfers - After.Queued) - (Before.Transfers - Before.Queued);
    if (!Hold && !Later)
      StagedWaits = Waits;
    if (Later) {
      EXPECT_EQ(Waits, StagedWaits - 1) << "the statistics come back without a wait";
      EXPECT_TRUE(std::isnan(Losses[0])) << "written only when asked for";
      Cuda->lossesRead(Losses.data());
      Cuda->lossesRead(Losses.data()); // once read, nothing more to do
    }
    std::string What = Later ? "losses later" : Hold ? "held DW" : "staged DW";
    for (int64_t I = 0; I < Rows; ++I)
      EXPECT_NEAR(Losses[size_t(I)], WantLosses[size_t(I)], 1e-5 * (1 + std::abs(WantLosses[size_t(I)]))) << What;
    EXPECT_EQ(Losses[2], 0.0) << "an ignored label has no loss";
    // DLogits are bf16 on the device: the products see them rounded.
    EXPECT_TRUE(near(DX, WantDX, Bf16Tol, What + " DX"));
    EXPECT_TRUE(near(DW, WantDW, Bf16Tol, What + " DW"));
    EXPECT_NE(DW, WantDW) << What << ": bf16 gradients cannot equal the host's fp32 ones";
  }
  EXPECT_TRUE(Cuda->fusesLossHead());
  EXPECT_FALSE(hostBackend().fusesLossHead()) << "the host leaves it to the caller's code";
}

// The fused expert MLPs give what the host's per-expert products and SwiGLU
// give, an expert without rows included; their weight gradients accumulate,
// held or staged.
TEST(CudaBackend, MlpsMatchTheHostsProductsAndSwiGlu) {
  auto Cuda = cudaBackend();
  const int64_t H = 16, F = 24;
  const std::vector<int64_t> Counts{3, 0, 5};
  const int64_t Rows = 8;
  std::vector<float> X = randomBf16(size_t(Rows * H), 20), DY = randomBf16(size_t(Rows * H), 21);
  std::vector<std::vector<float>> Gate, Up, Down;
  for (int E = 0; E < 3; ++E) {
    Gate.push_back(randomBf16(size_t(H * F), 22 + E));
    Up.push_back(randomBf16(size_t(H * F), 32 + E));
    Down.push_back(randomBf16(size_t(F * H), 42 + E));
  }
  // The host: as MoeBlock runs it without a fused backend.
  std::vector<float> G(size_t(Rows * F)), U = G, Y(size_t(Rows * H)), DX = Y;
  std::vector<std::vector<float>> WantDGate(3, std::vector<float>(size_t(H * F), 0.5f)), WantDUp = WantDGate;
  std::vector<std::vector<float>> WantDDown(3, std::vector<float>(size_t(F * H), 0.5f));
  auto Rows0 = [&](std::vector<float> &V, int64_t Begin, int64_t Width) { return V.data() + Begin * Width; };
  int64_t Begin = 0;
  for (int E = 0; E < 3; ++E) {
    if (int64_t M = Counts[size_t(E)]) {
      hostBackend().gemm(
          {false, false, M, F, H, 1.0f, Rows0(X, Begin, H), H, Gate[E].data(), F, 0.0f, Rows0(G, Begin, F), F});
      hostBackend().gemm(
          {false, false, M, F, H, 1.0f, Rows0(X, Begin, H), H, Up[E].data(), F, 0.0f, Rows0(U, Begin, F), F});
    }
    Begin += Counts[size_t(E)];
  }
  std::vector<float> G16 = cuda::roundedToBf16(G), U16 = cuda::roundedToBf16(U), Act(size_t(Rows * F));
  hostBackend().swiGluForward(Rows * F, G16.data(), U16.data(), Act.data());
  std::vector<float> Act16 = cuda::roundedToBf16(Act), DAct(size_t(Rows * F)), DG = DAct, DU = DAct;
  Begin = 0;
  for (int E = 0; E < 3; ++E) {
    if (int64_t M = Counts[size_t(E)]) {
      hostBackend().gemm(
          {false, false, M, H, F, 1.0f, Rows0(Act16, Begin, F), F, Down[E].data(), H, 0.0f, Rows0(Y, Begin, H), H});
      hostBackend().gemm(
          {false, true, M, F, H, 1.0f, Rows0(DY, Begin, H), H, Down[E].data(), H, 0.0f, Rows0(DAct, Begin, F), F});
      hostBackend().gemm({true, false, F, H, M, 1.0f, Rows0(Act16, Begin, F), F, Rows0(DY, Begin, H), H, 1.0f,
                          WantDDown[E].data(), H});
    }
    Begin += Counts[size_t(E)];
  }
  std::vector<float> DAct16 = cuda::roundedToBf16(DAct);
  hostBackend().swiGluBackward(Rows * F, G16.data(), U16.data(), DAct16.data(), DG.data(), DU.data());
  std::vector<float> DG16 = cuda::roundedToBf16(DG), DU16 = cuda::roundedToBf16(DU);
  Begin = 0;
  for (int E = 0; E < 3; ++E) {
    if (int64_t M = Counts[size_t(E)]) {
      hostBackend().gemm(
          {false, true, M, H, F, 1.0f, Rows0(DG16, Begin, F), F, Gate[E].data(), F, 0.0f, Rows0(DX, Begin, H), H});
      hostBackend().gemm(
          {false, true, M, H, F, 1.0f, Rows0(DU16, Begin, F), F, Up[E].data(), F, 1.0f, Rows0(DX, Begin, H), H});
      hostBackend().gemm(
          {true, false, H, F, M, 1.0f, Rows0(X, Begin, H), H, Rows0(DG16, Begin, F), F, 1.0f, WantDGate[E].data(), F});
      hostBackend().gemm(
          {true, false, H, F, M, 1.0f, Rows0(X, Begin, H), H, Rows0(DU16, Begin, F), F, 1.0f, WantDUp[E].data(), F});
    }
    Begin += Counts[size_t(E)];
  }

  for (bool Hold : {false, true}) {
    std::string What = Hold ? "held " : "staged ";
    MlpArgs A;
    A.Counts = Counts;
    A.Hidden = H;
    A.Ffn = F;
    A.X = X.data();
    for (int E = 0; E < 3; ++E) {
      A.Gate.push_back(Gate[E].data());
      A.Up.push_back(Up[E].data());
      A.Down.push_back(Down[E].data());
    }
    std::vector<float> GotG(size_t(Rows * F), NAN), GotU = GotG, GotAct = GotG, GotY(size_t(Rows * H), NAN);
    std::vector<float> GotDX = GotY;
    std::vector<std::vector<float>> DGate(3, std::vector<float>(size_t(H * F), 0.5f)), DUp = DGate;
    std::vector<std::vector<float>> DDown(3, std::vector<float>(size_t(F * H), 0.5f));
    std::vector<HeldArray> Held;
    for (int E = 0; E < 3; ++E) {
      A.DGate.push_back(DGate[E].data());
      A.DUp.push_back(DUp[E].data());
      A.DDown.push_back(DDown[E].data());
      for (std::vector<float> *Grad : {&DGate[E], &DUp[E], &DDown[E]})
        Held.push_back({Grad->data(), int64_t(Grad->size()), HeldArray::Accumulate});
    }
    A.G = GotG.data();
    A.U = GotU.data();
    A.Act = GotAct.data();
    A.Y = GotY.data();
    A.DY = DY.data();
    A.DX = GotDX.data();
    {
      std::optional<HeldArrays> Holding;
      if (Hold)
        Holding.emplace(*Cuda, Held);
      Cuda->mlpForward(A);
      Cuda->mlpBackward(A);
    }
    EXPECT_TRUE(near(GotG, G, Bf16Tol, What + "G"));
    EXPECT_TRUE(near(GotU, U, Bf16Tol, What + "U"));
    EXPECT_TRUE(near(GotAct, Act, Bf16Tol, What + "Act"));
    EXPECT_TRUE(near(GotY, Y, Bf16Tol, What + "Y"));
    EXPECT_TRUE(near(GotDX, DX, Bf16Tol, What + "DX"));
    for (int E = 0; E < 3; ++E) {
      std::string Expert = What + "expert " + std::to_string(E);
      EXPECT_TRUE(near(DGate[E], WantDGate[E], Bf16Tol, Expert + " DGate"));
      EXPECT_TRUE(near(DUp[E], WantDUp[E], Bf16Tol, Expert + " DUp"));
      EXPECT_TRUE(near(DDown[E], WantDDown[E], Bf16Tol, Expert + " DDown"));
    }
    EXPECT_EQ(DGate[1], std::vector<float>(size_t(H * F), 0.5f)) << What << "an expert without rows";

    // A recompute asks for the products only: no down product comes back.
    std::vector<float> AgainG(GotG.size(), NAN), AgainU = AgainG, AgainAct = AgainG;
    A.G = AgainG.data();
    A.U = AgainU.data();
    A.Act = AgainAct.data();
    A.Y = nullptr;
    int64_t Before = Cuda->traffic().DeviceToHostBytes;
    Cuda->mlpForward(A);
    EXPECT_EQ(AgainG, GotG) << What;
    EXPECT_EQ(AgainAct, GotAct) << What;
    EXPECT_EQ(Cuda->traffic().DeviceToHostBytes - Before, 3 * Rows * F * Crossing) << What;
  }
}

TEST(CudaBackend, TokenPermutationMatchesTheHostAndKeepsTheRowsOnTheDevice) {
  auto Cuda = cudaBackend();
  const int64_t Tokens = 7, TopK = 2, Hidden = 24, Experts = 3, Copies = Tokens * TopK;
  // Each token's two experts, then the dispatcher's order: by expert, then
  // by copy.
  std::vector<int64_t> Expert(Copies), Permutation(Copies), RowOfCopy(Copies);
  for (int64_t N = 0; N < Tokens; ++N) {
    Expert[size_t(N * TopK)] = (N * 5) % Experts;
    Expert[size_t(N * TopK + 1)] = (N * 5 + 1 + N % 2) % Experts;
  }
  int64_t Row = 0;
  for (int64_t E = 0; E < Experts; ++E)
    for (int64_t C = 0; C < Copies; ++C)
      if (Expert[size_t(C)] == E) {
        Permutation[size_t(Row)] = C;
        RowOfCopy[size_t(C)] = Row++;
      }
  std::vector<float> X = randomBf16(size_t(Tokens * Hidden), 81), Weights = randomBf16(size_t(Copies), 82);
  std::vector<float> DY = randomBf16(size_t(Tokens * Hidden), 83), Out = randomBf16(size_t(Copies * Hidden), 84);
  const PermuteArgs A{Tokens, TopK, Hidden, Permutation.data(), RowOfCopy.data(), Weights.data()};

  std::vector<float> RowsW(size_t(Copies * Hidden)), RowsG(RowsW.size());
  hostBackend().permuteRows(A, X.data(), RowsW.data());
  Cuda->permuteRows(A, X.data(), RowsG.data());
  EXPECT_EQ(RowsG, RowsW) << "bf16 rows move unchanged";
  EXPECT_EQ(
      std::vector<float>(RowsW.begin(), RowsW.begin() + Hidden),
      std::vector<float>(X.begin() + Permutation[0] / TopK * Hidden, X.begin() + (Permutation[0] / TopK + 1) * Hidden));
  std::vector<float> YW(size_t(Tokens * Hidden), 9.0f), YG(YW);
  hostBackend().unpermuteRows(A, Out.data(), YW.data());
  Cuda->unpermuteRows(A, Out.data(), YG.data());
  EXPECT_TRUE(near(YG, YW, Bf16Tol, "unpermuted y"));
  std::vector<float> DRowsW(size_t(Copies * Hidden)), DRowsG(DRowsW.size()), DWW(Copies), DWG(Copies);
  hostBackend().unpermuteRowsBackward(A, DY.data(), Out.data(), DRowsW.data(), DWW.data());
  Cuda->unpermuteRowsBackward(A, DY.data(), Out.data(), DRowsG.data(), DWG.data());
  EXPECT_TRUE(near(DRowsG, DRowsW, Bf16Tol, "unpermuted d rows"));
  EXPECT_TRUE(near(DWG, DWW, F32Tol, "routing weights' gradients"));
  std::vector<float> DXW(size_t(Tokens * Hidden), 9.0f), DXG(DXW);
  hostBackend().permuteRowsBackward(A, Out.data(), DXW.data());
  Cuda->permuteRowsBackward(A, Out.data(), DXG.data());
  EXPECT_TRUE(near(DXG, DXW, Bf16Tol, "permuted dx"));

  // Held as the MoE layer holds them, the rows cross neither way: only the
  // tokens come in, and the routing weights with them (the row indices are
  // on the device already: the calls above uploaded the same ones).
  std::vector<float> Rows(size_t(Copies * Hidden)), Y(size_t(Tokens * Hidden));
  HeldArrays Hold(*Cuda, {{Rows.data(), Copies * Hidden, HeldArray::BackendOnly}});
  const BackendTraffic Before = Cuda->traffic();
  Cuda->permuteRows(A, X.data(), Rows.data());
  Cuda->unpermuteRows(A, Rows.data(), Y.data());
  const BackendTraffic After = Cuda->traffic();
  EXPECT_EQ(After.HostToDeviceBytes - Before.HostToDeviceBytes,
            Tokens * Hidden * Crossing + Copies * int64_t(sizeof(float)));
  EXPECT_EQ(After.DeviceToHostBytes - Before.DeviceToHostBytes, Tokens * Hidden * Crossing) << "Y alone";
  std::vector<float> Want(size_t(Tokens * Hidden));
  hostBackend().unpermuteRows(A, RowsW.data(), Want.data());
  EXPECT_TRUE(near(Y, Want, Bf16Tol, "y from rows kept on the device"));
}

TEST(CudaBackend, RmsNormAndSwiGluMatchTheHost) {
  auto Cuda = cudaBackend();
  const int64_t Rows = 6, Hidden = 40, Count = Rows * Hidden;
  std::vector<float> X = randomBf16(size_t(Count), 4), W = randomBf16(size_t(Hidden), 5);
  std::vector<float> DY = randomBf16(size_t(Count), 6);
  std::vector<float> YW(Count), YG(Count), RW(Rows), RG(Rows);
  hostBackend().rmsNormForward(Rows, Hidden, X.data(), W.data(), 1e-5, YW.data(), RW.data());
  Cuda->rmsNormForward(Rows, Hidden, X.data(), W.data(), 1e-5, YG.data(), RG.data());
  EXPECT_TRUE(near(YG, YW, Bf16Tol, "rmsnorm y"));
  EXPECT_TRUE(near(RG, RW, F32Tol, "rmsnorm rstd"));
  // The weight gradient accumulates onto what is there.
  std::vector<float> DXW(Count), DXG(Count), DWW(Hidden, 0.25f), DWG(Hidden, 0.25f);
  hostBackend().rmsNormBackward(Rows, Hidden, X.data(), W.data(), RW.data(), DY.data(), DXW.data(), DWW.data());
  Cuda->rmsNormBackward(Rows, Hidden, X.data(), W.data(), RW.data(), DY.data(), DXG.data(), DWG.data());
  EXPECT_TRUE(near(DXG, DXW, Bf16Tol, "rmsnorm dx"));
  EXPECT_TRUE(near(DWG, DWW, F32Tol * 10, "rmsnorm dw"));

  std::vector<float> U = randomBf16(size_t(Count), 7), AW(Count), AG(Count);
  hostBackend().swiGluForward(Count, X.data(), U.data(), AW.data());
  Cuda->swiGluForward(Count, X.data(), U.data(), AG.data());
  EXPECT_TRUE(near(AG, AW, Bf16Tol, "swiglu"));
  std::vector<float> DGW(Count), DUW(Count), DGG(Count), DUG(Count);
  hostBackend().swiGluBackward(Count, X.data(), U.data(), DY.data(), DGW.data(), DUW.data());
  Cuda->swiGluBackward(Count, X.data(), U.data(), DY.data(), DGG.data(), DUG.data());
  EXPECT_TRUE(near(DGG, DGW, Bf16Tol, "swiglu dg"));
  EXPECT_TRUE(near(DUG, DUW, Bf16Tol, "swiglu du"));
}

TEST(CudaBackend, RopeMatchesTheHostAtEveryLayout) {
  auto Cuda = cudaBackend();
  const int64_t Rows = 6, HeadDim = 16;
  Tensor X({Rows, 3 * HeadDim});
  X.storage() = randomBf16(size_t(X.numel()), 31);
  std::vector<int64_t> Positions{0, 1, 5, 9, 100, 4095};
  // Multimodal RoPE's time, row and column positions, each pair by its
  // axis (Qwen3-VL's sections for heads of 16).
  MultimodalPositions Multimodal;
  Multimodal.Axes = {Positions, {0, 2, 7, 3, 50, 4000}, {0, 3, 1, 8, 60, 2}};
  // Whole heads, a partial rotary width, latent attention's interleaved
  // pairs, multimodal positions.
  for (int Layout = 0; Layout < 4; ++Layout)
    for (bool Inverse : {false, true}) {
      Tensor Want = X, Got = X;
      for (ComputeBackend *Backend : {&hostBackend(), Cuda.get()}) {
        BackendScope Scope(*Backend);
        Tensor &T = Backend == Cuda.get() ? Got : Want;
        if (Layout == 3)
          applyMultimodalRope(T, HeadDim, Multimodal, 10000.0, {4, 2, 2}, Inverse, 0);
        else if (Layout == 2)
          applyInterleavedRope(T, HeadDim, HeadDim / 2, HeadDim / 2, Positions, 10000.0, Inverse);
        else
          applyRope(T, HeadDim, Positions, 10000.0, Inverse, Layout == 0 ? 0 : HeadDim / 2);
      }
      std::string What = std::string(Inverse ? "inverse" : "forward") + " layout " + std::to_string(Layout);
      EXPECT_TRUE(near(Got.storage(), Want.storage(), Bf16Tol, What));
      // The kernel's results are rounded to bf16: every layout ran on it.
      EXPECT_NE(Got.storage(), Want.storage()) << What;
      // Position 0 rotates by nothing: only bf16 rounding, which X's values
      // (already bf16) do not show.
      for (int64_t C = 0; C < X.cols(); ++C)
        EXPECT_EQ(Got[C], X[C]) << What;
    }
  // The kernel ran: a value that is not bf16 comes back rounded.
  Tensor Odd({1, HeadDim});
  Odd[0] = 1.0f + 0x1.0p-10f;
  EXPECT_TRUE(Cuda->rope(1, 1, RopeColumns::halves(HeadDim, HeadDim), Odd.data(), Positions.data(), 10000.0, false));
  EXPECT_EQ(Odd[0], 1.0f);
}

// The tokens' positions go to the device once for every call that reads
// the same ones (each layer's RoPE, forward and backward), and a call with
// positions the device has not had, or no longer has, uploads them: the
// results are the host's either way.
TEST(CudaBackend, PositionsGoToTheDeviceOnceForTheCallsThatReadThem) {
  auto Cuda = cudaBackend();
  const int64_t Rows = 4, HeadDim = 16;
  Tensor X({Rows, HeadDim});
  X.storage() = randomBf16(size_t(X.numel()), 33);
  int64_t Calls = 0;
  auto Rotate = [&](const std::vector<int64_t> &Positions) {
    Tensor Want = X, Got = X;
    for (ComputeBackend *Backend : {&hostBackend(), Cuda.get()}) {
      BackendScope Scope(*Backend);
      applyRope(Backend == Cuda.get() ? Got : Want, HeadDim, Positions, 10000.0, /*Inverse=*/false, 0);
    }
    EXPECT_TRUE(near(Got.storage(), Want.storage(), Bf16Tol, "rope"));
    ++Calls;
  };
  // Besides the positions, each call's X goes up and comes back (it is not
  // held here).
  auto PositionCopies = [&] { return Cuda->traffic().ByOperation["rope"].Transfers - 2 * Calls; };
  const std::vector<int64_t> First{0, 1, 2, 3};
  Rotate(First);
  Rotate(First);
  EXPECT_EQ(PositionCopies(), 1) << "the same positions again: no copy";
  // Many other micro batches' positions, each uploaded once, until the
  // first ones are no longer kept (past the 4096 arrays the backend keeps):
  // they are uploaded again.
  const int64_t Others = 4100;
  for (int64_t I = 1; I <= Others; ++I)
    Rotate({I, I + 1, I + 2, I + 3});
  EXPECT_EQ(PositionCopies(), 1 + Others);
  Rotate(First);
  EXPECT_EQ(PositionCopies(), 2 + Others) << "evicted, uploaded again";
  Rotate(First);
  EXPECT_EQ(PositionCopies(), 2 + Others);
}

/// Two key spans merged into one query span, then the backward of both, on
/// Backend: Out, Lse, DQ, DK, DV.
/// HoldSums: DQ, DK and DV held as sums across both blocks' backward (as
/// the ring holds them); BackwardDownloads: the bytes the backward brought
/// back.
std::vector<std::vector<float>> attendTwoSpans(ComputeBackend &Backend, int64_t HeadDim, bool HoldSums = false,
                                               int64_t *BackwardDownloads = nullptr) {
  BackendScope Scope(Backend);
  BlockShape Shape;
  Shape.Dims.Batch = 2;
  Shape.Dims.SeqLen = 32;
  Shape.Dims.QHeads = 4;
  Shape.Dims.KvHeads = 2;
  Shape.Dims.HeadDim = HeadDim;
  Shape.LocalTokens = 16;
  Shape.Scale = float(1.0 / std::sqrt(double(HeadDim)));
  const AttentionDims &D = Shape.Dims;
  int64_t Rows = D.Batch * Shape.LocalTokens;
  std::vector<float> Q = randomBf16(size_t(Rows * D.QHeads * HeadDim), 21);
  std::vector<float> K = randomBf16(size_t(Rows * D.KvHeads * HeadDim), 22);
  std::vector<float> V = randomBf16(size_t(Rows * D.KvHeads * HeadDim), 23);
  std::vector<float> DOut = randomBf16(size_t(Rows * D.QHeads * HeadDim), 24);
  std::vector<float> Out(Q.size(), 0.0f), Lse(size_t(D.Batch * D.QHeads * Shape.LocalTokens), -INFINITY);
  // Queries at positions 24..31; keys 0..7 all visible, keys 20..27 up to
  // the diagonal; the local rows 0..7 of the key tensor are reused for both.
  TokenSpan Queries{8, 24, 8}, Early{0, 0, 8}, Diagonal{0, 20, 8};
  std::vector<float> Scratch;
  for (const TokenSpan &Keys : {Early, Diagonal})
    attendSpanForward(Shape, Q.data(), Queries, K.data(), V.data(), Keys, Out.data(), Lse.data(), Scratch);
  std::vector<float> Delta(Lse.size(), 0.0f);
  for (int64_t B = 0; B < D.Batch; ++B)
    for (int64_t T = 0; T < Shape.LocalTokens; ++T)
      for (int64_t H = 0; H < D.QHeads; ++H) {
        double Sum = 0;
        for (int64_t C = 0; C < HeadDim; ++C) {
          size_t I = size_t(((B * Shape.LocalTokens + T) * D.QHeads + H) * HeadDim + C);
          Sum += double(DOut[I]) * Out[I];
        }
        Delta[size_t((B * D.QHeads + H) * Shape.LocalTokens + T)] = float(Sum);
      }
  std::vector<float> DQ(Q.size(), 0.5f), DK(K.size(), 0.25f), DV(V.size(), -0.25f);
  const int64_t Down = Backend.traffic().DeviceToHostBytes;
  {
    std::vector<HeldArray> Sums;
    if (HoldSums)
      for (std::vector<float> *Sum : {&DQ, &DK, &DV})
        Sums.push_back({Sum->data(), int64_t(Sum->size()), HeldArray::Accumulate});
    HeldArrays Held(Backend, Sums);
    for (const TokenSpan &Keys : {Early, Diagonal})
      attendSpanBackward(Shape, Q.data(), Queries, K.data(), V.data(), Keys, Lse.data(), Delta.data(), DOut.data(),
                         DQ.data(), DK.data(), DV.data(), Scratch);
  }
  if (BackwardDownloads)
    *BackwardDownloads = Backend.traffic().DeviceToHostBytes - Down;
  return {Out, Lse, DQ, DK, DV};
}

// Held as sums across the blocks, the gradients are added to on the device
// (spans of each batch row packed and put back there) and come back once.
TEST(CudaBackend, AttentionGradientsHeldAsSumsComeBackOnce) {
  auto Cuda = cudaBackend();
  int64_t Downloads = 0;
  std::vector<std::vector<float>> Want = attendTwoSpans(*Cuda, 32);
  std::vector<std::vector<float>> Got = attendTwoSpans(*Cuda, 32, /*HoldSums=*/true, &Downloads);
  const char *Names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t I = 0; I < Want.size(); ++I)
    EXPECT_TRUE(near(Got[I], Want[I], F32Tol, Names[I]));
  EXPECT_EQ(Downloads, int64_t(Want[2].size() + Want[3].size() + Want[4].size()) * 4) << "each sum once, in fp32";
}

/// Two batch rows of 16 local tokens each, heads of 32 the kernels take.
BlockShape twoBatchRows(int64_t SeqLen, int64_t QHeads, int64_t KvHeads) {
  BlockShape Shape;
  Shape.Dims.Batch = 2;
  Shape.Dims.SeqLen = SeqLen;
  Shape.Dims.QHeads = QHeads;
  Shape.Dims.KvHeads = KvHeads;
  Shape.Dims.HeadDim = 32;
  Shape.LocalTokens = 16;
  Shape.Scale = 0.25f;
  return Shape;
}

// A block the kernels take moves only its spans: the query span's rows of
// Q, the running output and statistics, the key span's rows of K and V, and
// both spans' positions where the device has not had them yet; not the
// whole local tensors.
TEST(CudaBackend, AnAttentionBlockMovesOnlyItsSpans) {
  auto Cuda = cudaBackend();
  BackendScope Scope(*Cuda);
  const BlockShape Shape = twoBatchRows(/*SeqLen=*/32, /*QHeads=*/4, /*KvHeads=*/2);
  const AttentionDims &D = Shape.Dims;
  const int64_t Rows = D.Batch * Shape.LocalTokens, Span = 8;
  std::vector<float> Q = randomBf16(size_t(Rows * D.QHeads * D.HeadDim), 51);
  std::vector<float> K = randomBf16(size_t(Rows * D.KvHeads * D.HeadDim), 52), V = K;
  std::vector<float> Out(Q.size(), 0.0f), Lse(size_t(D.Batch * D.QHeads * Shape.LocalTokens), -INFINITY);
  std::vector<float> Scratch;
  const int64_t Up = Cuda->traffic().HostToDeviceBytes;
  attendSpanForward(Shape, Q.data(), TokenSpan{Span, 24, Span}, K.data(), V.data(), TokenSpan{0, 0, Span}, Out.data(),
                    Lse.data(), Scratch);
  const int64_t QSpan = D.Batch * Span * D.QHeads * D.HeadDim, KSpan = D.Batch * Span * D.KvHeads * D.HeadDim;
  const int64_t Stats = D.Batch * D.QHeads * Span * 4, Positions = 2 * Span * 4;
  // No key has reached the query span yet: its running output starts on
  // the device, only its statistics cross.
  EXPECT_EQ(Cuda->traffic().HostToDeviceBytes - Up, (QSpan + 2 * KSpan) * Crossing + Stats + Positions);
  // The next block merges into what the first left: its output crosses,
  // and the new key span's positions (the query span's are there already).
  const int64_t Again = Cuda->traffic().HostToDeviceBytes;
  attendSpanForward(Shape, Q.data(), TokenSpan{Span, 24, Span}, K.data(), V.data(), TokenSpan{Span, 8, Span},
                    Out.data(), Lse.data(), Scratch);
  EXPECT_EQ(Cuda->traffic().HostToDeviceBytes - Again, (QSpan + 2 * KSpan) * Crossing + QSpan * 4 + Stats + Span * 4);
}

TEST(CudaBackend, AWholeOutputIsAttentionsResultInAHeldCopy) {
  auto Cuda = cudaBackend();
  BackendScope Scope(*Cuda);
  const BlockShape Shape = twoBatchRows(/*SeqLen=*/16, /*QHeads=*/2, /*KvHeads=*/2);
  const AttentionDims &D = Shape.Dims;
  const int64_t Rows = D.Batch * Shape.LocalTokens, Width = D.QHeads * D.HeadDim, N = 3;
  std::vector<float> Q = randomBf16(size_t(Rows * Width), 61), K = randomBf16(Q.size(), 62),
                     V = randomBf16(Q.size(), 63);
  std::vector<float> W = randomBf16(size_t(Width * N), 64), Scratch;
  auto Attend = [&](std::vector<float> &Out) {
    std::vector<float> Lse(size_t(D.Batch * D.QHeads * Shape.LocalTokens), -INFINITY);
    attendSpanForward(Shape, Q.data(), TokenSpan{0, 0, 16}, K.data(), V.data(), TokenSpan{0, 0, 16}, Out.data(),
                      Lse.data(), Scratch);
  };
  std::vector<float> Want(Q.size()), Out(Q.size()), YW(size_t(Rows * N)), YG(YW.size());
  Attend(Want);
  Cuda->gemm({false, false, Rows, N, Width, 1.0f, Want.data(), Width, W.data(), N, 0.0f, YW.data(), N});
  HeldArrays Hold(*Cuda, {{Out.data(), Rows * Width, HeldArray::Read}});
  Attend(Out);
  EXPECT_EQ(Out, Want) << "the host has the result too";
  const int64_t Up = Cuda->traffic().HostToDeviceBytes;
  Cuda->gemm({false, false, Rows, N, Width, 1.0f, Out.data(), Width, W.data(), N, 0.0f, YG.data(), N});
  EXPECT_EQ(Cuda->traffic().HostToDeviceBytes - Up, Width * N * Crossing) << "the weights alone";
  EXPECT_EQ(YG, YW);
}

TEST(CudaBackend, AttentionDeltaMatchesTheHostAndReadsHeldCopies) {
  auto Cuda = cudaBackend();
  const int64_t Batch = 2, Tokens = 5, Heads = 3, VDim = 24, Count = Batch * Tokens * Heads * VDim;
  std::vector<float> Out = randomBf16(size_t(Count), 71), DOut = randomBf16(size_t(Count), 72);
  std::vector<float> Want(size_t(Batch * Heads * Tokens)), Got(Want.size());
  hostBackend().attentionDelta(Batch, Tokens, Heads, VDim, Out.data(), DOut.data(), Want.data());
  EXPECT_FLOAT_EQ(Want[size_t((1 * Heads + 2) * Tokens + 3)],
                  float(std::inner_product(DOut.begin() + ((1 * Tokens + 3) * Heads + 2) * VDim,
                                           DOut.begin() + ((1 * Tokens + 3) * Heads + 3) * VDim,
                                           Out.begin() + ((1 * Tokens + 3) * Heads + 2) * VDim, 0.0)));
  HeldArrays Hold(*Cuda, {{Out.data(), Count, HeldArray::Read}, {DOut.data(), Count, HeldArray::Read}});
  std::vector<float> Scratch(Got.size());
  Cuda->attentionDelta(Batch, Tokens, Heads, VDim, Out.data(), DOut.data(), Scratch.data()); // makes the copies
  const BackendTraffic Before = Cuda->traffic();
  Cuda->attentionDelta(Batch, Tokens, Heads, VDim, Out.data(), DOut.data(), Got.data());
  const BackendTraffic After = Cuda->traffic();
  EXPECT_TRUE(near(Got, Want, F32Tol, "delta"));
  EXPECT_EQ(After.HostToDeviceBytes - Before.HostToDeviceBytes, 0) << "both operands are held";
  EXPECT_EQ(After.DeviceToHostBytes - Before.DeviceToHostBytes, int64_t(Got.size() * sizeof(float)));
}

TEST(CudaBackend, AttentionBlocksMatchTheHost) {
  auto Cuda = cudaBackend();
  std::vector<std::vector<float>> Want = attendTwoSpans(hostBackend(), 32), Got = attendTwoSpans(*Cuda, 32);
  const char *Names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t I = 0; I < Want.size(); ++I)
    EXPECT_TRUE(near(Got[I], Want[I], I < 2 ? AttnTol : 1e-3, Names[I]));
  // Rows outside the query span keep their initial values.
  EXPECT_EQ(Got[0][0], 0.0f);
  EXPECT_EQ(Got[2][0], 0.5f);
  // And the kernel, not the host code, computed them: one query seeing one
  // key of zeros has log-sum-exp log(1).
  std::vector<float> Zeros(32, 0.0f), Out(32, 0.0f), Lse(1, -INFINITY);
  AttentionBlockArgs A;
  A.LocalTokens = A.QHeads = A.KvHeads = A.QLen = A.KLen = 1;
  A.HeadDim = A.VHeadDim = 32;
  A.Q = A.K = A.V = Zeros.data();
  A.Out = Out.data();
  A.Lse = Lse.data();
  EXPECT_TRUE(Cuda->attentionBlockForward(A));
  EXPECT_EQ(Lse[0], 0.0f);
}

TEST(CudaBackend, AttentionLeavesShapesWithoutAKernelToTheHost) {
  auto Cuda = cudaBackend();
  AttentionBlockArgs A;
  A.QHeads = 4;
  A.KvHeads = 2;
  A.HeadDim = 16; // the kernels take 32, 64 or 128
  A.VHeadDim = 16;
  EXPECT_FALSE(Cuda->attentionBlockForward(A));
  EXPECT_FALSE(Cuda->attentionBlockBackward(A));
  A.HeadDim = 32; // multi-head latent attention: values narrower than keys
  EXPECT_FALSE(Cuda->attentionBlockForward(A));
  // The host code then runs with the backend's GEMMs: the same as the host's
  // within bf16 rounding of the products' operands.
  std::vector<std::vector<float>> Want = attendTwoSpans(hostBackend(), 16), Got = attendTwoSpans(*Cuda, 16);
  EXPECT_TRUE(near(Got[0], Want[0], 2e-2, "out"));
}

MicroBatch batch(int64_t Vocab) {
  MicroBatch MB;
  MB.Sequences = 2;
  MB.SeqLen = 32;
  std::mt19937_64 Gen(11);
  for (int64_t I = 0; I < MB.Sequences * MB.SeqLen; ++I) {
    MB.Tokens.push_back(int32_t(Gen() % Vocab));
    MB.Labels.push_back(int32_t(Gen() % Vocab));
  }
  return MB;
}

/// A stage's groups on one rank.
struct OneRankGroups {
  std::unique_ptr<Communicator> Tp = createSelfCommunicator("tp"), Cp = createSelfCommunicator("cp"),
                                TpCp = createSelfCommunicator("tpcp"), Ep = createSelfCommunicator("ep");
  ParallelContext Ctx{Tp.get(), Cp.get(), TpCp.get(), Ep.get()};
};

TEST(CudaBackend, OneStageModelRunsOnEitherBackend) {
  auto Cuda = cudaBackend();
  OneRankGroups Groups;
  const ParallelContext &Ctx = Groups.Ctx;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  StageSpec Stage{0, C.Layers, true, true};
  ModelOptions Host;
  Host.Seed = 7;
  Host.CeScale = 1.0 / 64;
  ModelOptions OnCuda = Host;
  OnCuda.Compute = Cuda.get();
  StageModel Want(C, Stage, Ctx, Host), Got(C, Stage, Ctx, OnCuda);
  MicroBatch MB = batch(C.Vocab);
  for (StageModel *M : {&Want, &Got}) {
    M->forward(0, MB, nullptr);
    M->backward(0, nullptr);
  }
  EXPECT_EQ(Got.loss().Tokens, Want.loss().Tokens);
  EXPECT_NEAR(Got.loss().CeSum, Want.loss().CeSum, 1e-2 * Want.loss().CeSum);
  EXPECT_NEAR(Got.loss().AuxSum, Want.loss().AuxSum, 2e-2 * std::fabs(Want.loss().AuxSum) + 1e-6);
  EXPECT_NE(Got.loss().CeSum, Want.loss().CeSum);
  std::vector<Parameter *> WantParams = Want.parameters(), GotParams = Got.parameters();
  ASSERT_EQ(GotParams.size(), WantParams.size());
  for (size_t I = 0; I < WantParams.size(); ++I) {
    ASSERT_EQ(GotParams[I]->Name, WantParams[I]->Name);
    EXPECT_LT(relativeError(GotParams[I]->Grad.storage(), WantParams[I]->Grad.storage()), 5e-2) << WantParams[I]->Name;
  }
  // The stage installs its backend for its own calls only.
  EXPECT_STREQ(currentBackend().name(), "cpu");
}

// The stage holds the queries and keys from their projections through
// RoPE to attention, and their gradients from attention's backward through
// RoPE to their products: RoPE rotates the held copies, so the only bytes
// it sends to the device are the tokens' positions, once for the four calls
// of every layer, and as only the backend reads what it rotates
// (BackendOnly), none come back.
TEST(CudaBackend, AStageKeepsWhatOnlyTheBackendReadsOnTheDevice) {
  auto Cuda = cudaBackend();
  OneRankGroups Groups;
  const ParallelContext &Ctx = Groups.Ctx;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  ModelOptions OnCuda;
  OnCuda.Compute = Cuda.get();
  StageModel Model(C, StageSpec{0, C.Layers, true, true}, Ctx, OnCuda);
  MicroBatch MB = batch(C.Vocab);
  Model.forward(0, MB, nullptr);
  Model.backward(0, nullptr);
  const BackendTraffic::Copies Rope = Cuda->traffic().ByOperation["rope"];
  const int64_t Rows = MB.Sequences * MB.SeqLen;
  EXPECT_EQ(Rope.HostToDeviceBytes, Rows * int64_t(sizeof(int32_t)));
  EXPECT_EQ(Rope.Transfers, 1);
  EXPECT_EQ(Rope.DeviceToHostBytes, 0) << "the rotated values stay on the device";
  // Attention's output and its gradient stay too, and its statistics (the
  // log-sum-exp from the forward to the backward, Delta from where it is
  // made to the blocks that read it): of attention, only the sequence's
  // positions go up, once for every layer, and nothing comes back.
  const BackendTraffic::Copies Attention = Cuda->traffic().ByOperation["attention"];
  EXPECT_EQ(Attention.Transfers, 1);
  EXPECT_EQ(Attention.HostToDeviceBytes, MB.SeqLen * int64_t(sizeof(int32_t)));
  EXPECT_EQ(Attention.DeviceToHostBytes, 0);
  // The residual stream and its gradient stay on the device from the
  // embedding's rows to the final norm and back: none of the adds' operands
  // or sums crosses, and no norm's result comes back (the input gradients
  // join the stream there; the final norm's output is the loss head's input
  // there). The one host read is the first layer's input gradient, which
  // the embedding's scatter reads on the host because its table is not
  // resident here (the trainer's is).
  const int64_t Stream = Rows * C.Hidden * int64_t(sizeof(float));
  const BackendTraffic::Copies Adds = Cuda->traffic().ByOperation["add"];
  EXPECT_EQ(Adds.HostToDeviceBytes + Adds.DeviceToHostBytes, 0);
  EXPECT_EQ(Cuda->traffic().ByOperation["host reads"].DeviceToHostBytes, Stream);
  // The loss head's input gradient is the final norm's backward's operand
  // there: of the head, only each row's statistics (and the output weight's
  // gradient, not held here) come back.
  EXPECT_EQ(Cuda->traffic().ByOperation["loss head"].DeviceToHostBytes,
            (2 * Rows + C.Hidden * C.Vocab) * int64_t(sizeof(float)));
  // Attention's gradients and the projections' input gradients are summed
  // where their readers are: no held sum comes back.
  EXPECT_EQ(Cuda->traffic().ByOperation["nested holds"].DeviceToHostBytes, 0);
  // Each norm's statistics stay on the device from its forward to its
  // backward; its weight's gradient comes back (no parameter is held here).
  const BackendTraffic::Copies Norms = Cuda->traffic().ByOperation["rmsnorm"];
  EXPECT_EQ(Norms.DeviceToHostBytes, (C.Layers * 2 + 1) * C.Hidden * int64_t(sizeof(float)));
  // The routing weights stay where the router makes them, for the combine
  // and its backward, and their gradients where the combine's backward
  // makes them, for the router's; the experts the router chose stay too,
  // for its backward. Of an MoE layer's routing, the experts and the
  // statistics come back for the dispatcher and the all-reduce (one copy),
  // the experts' fractions go up for the backward (one). The permutation is
  // made from the experts where they are: nothing of it crosses.
  const int64_t MoeLayers = C.Layers - C.DenseLayers;
  const BackendTraffic::Copies Router = Cuda->traffic().ByOperation["router"];
  EXPECT_EQ(Router.Transfers, 2 * MoeLayers);
  EXPECT_EQ(Router.HostToDeviceBytes, MoeLayers * C.Experts * int64_t(sizeof(float)));
  // The fractions are staged through pinned memory and only queued; the
  // host waits for what comes back.
  EXPECT_EQ(Router.Queued, MoeLayers);
  EXPECT_EQ(Cuda->traffic().ByOperation["permute"].Transfers, 0);
}

/// One micro batch of a whole stage of C, forward and backward, on the
/// host backend and on Cuda: the same loss within 1% and every gradient
/// within 5% of its scale. Where HoldParameters, Cuda holds the parameters
/// and their gradients for the micro batch, as the trainer does for a step.
/// The micro batch is Batch, or batch()'s; both models recompute as
/// Recompute says. Returns Cuda's gradients by parameter name.
std::map<std::string, std::vector<float>> expectAMicroBatchAsOnTheHost(const ModelConfig &C, const ParallelContext &Ctx,
                                                                       ComputeBackend &Cuda, const std::string &What,
                                                                       bool HoldParameters = false,
                                                                       const MicroBatch *Batch = nullptr,
                                                                       const RecomputeOptions &Recompute = {}) {
  ModelOptions Host;
  Host.Seed = 7;
  Host.CeScale = 1.0 / 64;
  Host.MtpCeScale.assign(size_t(C.MtpLayers), 0.3 / 64);
  Host.Recompute = Recompute;
  ModelOptions OnCuda = Host;
  OnCuda.Compute = &Cuda;
  const StageSpec Whole{0, C.Layers, true, true, C.MtpLayers > 0};
  StageModel Want(C, Whole, Ctx, Host), Got(C, Whole, Ctx, OnCuda);
  const MicroBatch MB = Batch ? *Batch : batch(C.Vocab);
  std::vector<HeldArray> Parameters;
  if (HoldParameters)
    for (Parameter *P : Got.parameters()) {
      Parameters.push_back({P->Value.data(), P->Value.numel(), HeldArray::Read});
      Parameters.push_back({P->Grad.data(), P->Grad.numel(), HeldArray::Accumulate});
    }
  for (StageModel *M : {&Want, &Got}) {
    std::optional<HeldArrays> Hold; // none at all without: holds nest
    if (M == &Got && HoldParameters)
      Hold.emplace(Cuda, Parameters);
    M->forward(0, MB, nullptr);
    M->backward(0, nullptr);
  }
  EXPECT_NEAR(Got.loss().CeSum, Want.loss().CeSum, 1e-2 * Want.loss().CeSum) << What;
  std::vector<Parameter *> WantParams = Want.parameters(), GotParams = Got.parameters();
  EXPECT_EQ(GotParams.size(), WantParams.size()) << What;
  if (GotParams.size() != WantParams.size())
    return {};
  std::map<std::string, std::vector<float>> Gradients;
  for (size_t I = 0; I < WantParams.size(); ++I) {
    EXPECT_LT(relativeError(GotParams[I]->Grad.storage(), WantParams[I]->Grad.storage()), 5e-2)
        << What << ": " << WantParams[I]->Name;
    Gradients[GotParams[I]->Name] = GotParams[I]->Grad.storage();
  }
  return Gradients;
}

// Latent attention at DeepSeek-V3's head widths runs whole on the device:
// the same loss and gradients as the host's within bf16, and of what passes
// between its operations nothing crosses: the column splits and assemblies
// move between the backend's copies, the arrays they make start on the
// device (no upload of the host's zeros), and RoPE's results stay there.
TEST(CudaBackend, LatentAttentionRunsWholeOnTheDevice) {
  auto Cuda = cudaBackend();
  OneRankGroups Groups;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  C.KvHeads = C.Heads;
  for (int64_t QLatent : {int64_t(24), int64_t(0)}) {
    C.Mla = ModelConfig::LatentAttention{QLatent, 16, 128, 64, 128};
    const std::string What = QLatent ? "with a query latent" : "without";
    BackendTraffic Before = Cuda->traffic();
    expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Cuda, What);
    const MicroBatch MB = batch(C.Vocab);
    auto Moved = [&](const char *Operation, bool ToDevice) {
      BackendTraffic Now = Cuda->traffic();
      BackendTraffic::Copies A = Now.ByOperation[Operation], B = Before.ByOperation[Operation];
      return ToDevice ? A.HostToDeviceBytes - B.HostToDeviceBytes : A.DeviceToHostBytes - B.DeviceToHostBytes;
    };
    for (bool ToDevice : {true, false}) {
      EXPECT_EQ(Moved("copy columns", ToDevice), 0) << What;
      EXPECT_EQ(Moved("nested holds", ToDevice), 0) << What;
    }
    EXPECT_EQ(Moved("rope", false), 0) << What << ": the rotated values stay on the device";
    // Of the norms, the weights' gradients alone come back (no parameter
    // is held here): every norm's statistics stay where they are made, the
    // latents' norms' too.
    const int64_t NormWidths = C.Layers * (2 * C.Hidden + C.Mla->KvLoraRank + QLatent) + C.Hidden;
    EXPECT_EQ(Moved("rmsnorm", false), NormWidths * int64_t(sizeof(float))) << What;
    const int64_t Rows = MB.Sequences * MB.SeqLen;
    // The positions alone, once (the second model's are on the device
    // already: the same tokens).
    EXPECT_EQ(Moved("rope", true), QLatent ? Rows * int64_t(sizeof(int32_t)) : 0) << What << ": positions alone";
    // Nor do attention's results or statistics; its positions go up once.
    EXPECT_EQ(Moved("attention", false), 0) << What;
    EXPECT_EQ(Moved("attention", true), QLatent ? MB.SeqLen * int64_t(sizeof(int32_t)) : 0) << What;
  }
}

// An array held to be made on the backend (HeldArray::Unset) that host code
// writes instead (an operation the backend declined, run on the host) is
// read with the host's values: its copy is made from them, not started
// empty.
TEST(CudaBackend, AHostWriteToAnArrayHeldUnsetIsWhatItsReadersSee) {
  auto Cuda = cudaBackend();
  const int64_t N = 64;
  std::vector<float> X(N), Gate(N, 1.0f), Y(N), Want(N);
  HeldArrays Hold(*Cuda, {{X.data(), N, HeldArray::BackendOnly, false, /*Unset=*/true}});
  for (int64_t I = 0; I < N; ++I)
    X[size_t(I)] = 0.25f * float(I - N / 2);
  Cuda->hostWrote(X.data(), N);
  ASSERT_TRUE(Cuda->sigmoidGateForward(N, X.data(), Gate.data(), Y.data()));
  sigmoidGateForward(N, X.data(), Gate.data(), Want.data());
  EXPECT_TRUE(near(Y, Want, Bf16Tol, "X sigmoid(1)"));
}

// Qwen3-Next's layers run whole on the device: Gated DeltaNet (its
// convolution, query and key norms, gates, recurrence and output norm) and
// the full attention beside it (its QK-norm and output gate). Of what passes
// between their operations nothing crosses: each operation's results stay
// where the next one reads them, and what comes back is statistics and the
// parameters' gradients that this test does not hold.
TEST(CudaBackend, QwenThreeNextLayersRunWholeOnTheDevice) {
  OneRankGroups Groups;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  // What crosses for the model without these layers, its parameters held
  // as the trainer holds them: the stage's input rows, the statistics.
  auto Plain = cudaBackend();
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Plain, "tiny_moe", /*HoldParameters=*/true);
  auto Cuda = cudaBackend();
  C.QkNorm = true;
  C.Linear = ModelConfig::LinearAttention{/*Interval=*/2, /*KeyHeads=*/2, /*ValueHeads=*/4, /*HeadDim=*/16};
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Cuda, "Qwen3-Next's layers", /*HoldParameters=*/true);
  BackendTraffic T = Cuda->traffic(), Base = Plain->traffic();
  const ModelConfig::LinearAttention &L = *C.Linear;
  const MicroBatch MB = batch(C.Vocab);
  const int64_t N = MB.Sequences * MB.SeqLen, F = int64_t(sizeof(float));
  const int64_t LinearLayers = C.Layers / L.Interval;
  auto Up = [&](const char *Operation) { return T.ByOperation[Operation].HostToDeviceBytes; };
  auto Down = [&](const char *Operation) { return T.ByOperation[Operation].DeviceToHostBytes; };
  for (const char *Operation : {"delta rule", "l2 norm", "output gate", "short conv", "copy", "gemm"}) {
    EXPECT_EQ(Up(Operation), 0) << Operation;
    EXPECT_EQ(Down(Operation), 0) << Operation;
  }
  for (const char *Operation : {"nested holds", "host reads"}) {
    EXPECT_EQ(Up(Operation), Base.ByOperation[Operation].HostToDeviceBytes) << Operation;
    EXPECT_EQ(Down(Operation), Base.ByOperation[Operation].DeviceToHostBytes) << Operation;
  }
  // dt_bias and A_log in fp32 forward, A_log backward (held in bf16 for
  // the products); their gradients add up on the device.
  EXPECT_EQ(Up("gates"), LinearLayers * 3 * L.ValueHeads * F);
  EXPECT_EQ(Down("gates"), 0);
  // The gated norm's per-head statistics stay on the device too, from its
  // forward to its backward.
  EXPECT_EQ(Up("gated norm"), 0);
  EXPECT_EQ(Down("gated norm"), 0);
  // Nothing of the norms crosses, their statistics included (the layers'
  // two, the final one, and the attention layers' query and key norms over
  // each head): they stay on the device from each forward to its backward.
  EXPECT_EQ(Up("rmsnorm"), 0);
  EXPECT_EQ(Down("rmsnorm"), 0);
  EXPECT_EQ(Down("rope"), 0) << "the rotated queries and keys stay";
  EXPECT_EQ(Up("rope"), N * int64_t(sizeof(int32_t))) << "the positions alone, once";
}

// Qwen3-VL's vision tower runs on the device, heads of 72 as Qwen3-VL's:
// the same tokens, deepstack feature and gradients as the host's within
// bf16, and of its activations only the merged tokens and features come back
// (the decoder's rows read them on the host); the biases, the position
// table's interpolation, the 2-D rotary, the LayerNorms and GELUs work on
// the backend's copies, their parameters held as the trainer holds them.
TEST(CudaBackend, TheVisionTowerRunsOnTheDevice) {
  VisionConfig C;
  C.Depth = 2;
  C.Hidden = 144;
  C.Heads = 2;
  C.FfnHidden = 96;
  C.OutHidden = 64;
  C.PatchSize = 2;
  C.PositionGrid = 6;
  C.DeepstackLayers = {0};
  const std::vector<ImageGrid> Grids = {{1, 4, 6}, {2, 2, 2}};
  int64_t N = 0;
  for (const ImageGrid &G : Grids)
    N += G.patches();
  Tensor Patches({N, C.patchDim()});
  Patches.storage() = randomBf16(size_t(Patches.numel()), 41);
  VisionTower OnHost(C, 5), OnDevice(C, 5);
  auto Cuda = cudaBackend();
  VisionSaved HostSaved, DeviceSaved;
  VisionOutput Want = OnHost.forward(Patches, Grids, HostSaved), Got;
  Tensor DTokens(Want.Tokens.shape()), DFeature(Want.Deepstack[0].shape());
  DTokens.storage() = randomBf16(size_t(DTokens.numel()), 42);
  DFeature.storage() = randomBf16(size_t(DFeature.numel()), 43);
  OnHost.backward(HostSaved, DTokens, {DFeature});
  {
    BackendScope Scope(*Cuda);
    std::vector<HeldArray> Parameters;
    for (Parameter *P : OnDevice.parameters()) {
      Parameters.push_back({P->Value.data(), P->Value.numel(), HeldArray::Read});
      Parameters.push_back({P->Grad.data(), P->Grad.numel(), HeldArray::Accumulate});
    }
    HeldArrays Hold(*Cuda, Parameters);
    Got = OnDevice.forward(Patches, Grids, DeviceSaved, &DeviceSaved);
    OnDevice.backward(DeviceSaved, DTokens, {DFeature});
    Cuda->releaseKept(&DeviceSaved);
  }
  EXPECT_LT(relativeError(Got.Tokens.storage(), Want.Tokens.storage()), 2e-2);
  EXPECT_LT(relativeError(Got.Deepstack[0].storage(), Want.Deepstack[0].storage()), 2e-2);
  std::vector<Parameter *> WantParams = OnHost.parameters(), GotParams = OnDevice.parameters();
  for (size_t I = 0; I < WantParams.size(); ++I)
    EXPECT_LT(relativeError(GotParams[I]->Grad.storage(), WantParams[I]->Grad.storage()), 5e-2) << WantParams[I]->Name;
  BackendTraffic T = Cuda->traffic();
  const int64_t F = int64_t(sizeof(float)), Rows = N / C.mergeUnit();
  auto Up = [&](const char *Operation) { return T.ByOperation[Operation].HostToDeviceBytes; };
  auto Down = [&](const char *Operation) { return T.ByOperation[Operation].DeviceToHostBytes; };
  for (const char *Operation : {"gelu", "bias", "copy", "copy columns", "interpolation", "nested holds"})
    EXPECT_EQ(Down(Operation), 0) << Operation;
  // The merged tokens and the deepstack feature, each from its product,
  // and the patches' gradient the backward returns.
  EXPECT_EQ(Down("gemm"), (2 * Rows * C.OutHidden + N * C.patchDim()) * F);
  // The LayerNorms' statistics stay where they are made, for their
  // backward (two a block's, the final merger's, the deepstack merger's),
  // and so do attention's (each frame's log-sum-exp and Delta in their
  // places): of attention, only the frames' positions go up, once for
  // every call with the same frame size (here 4 x 6 and 2 x 2: the queries
  // placed after the keys).
  EXPECT_EQ(Down("layernorm"), 0);
  EXPECT_EQ(Up("layernorm"), 0);
  EXPECT_EQ(Down("attention"), 0);
  EXPECT_EQ(Up("attention"), 2 * (24 + 4) * int64_t(sizeof(int32_t)));
  EXPECT_EQ(Down("rope"), 0);
  EXPECT_EQ(Up("gelu"), 0);
}

// Qwen3-VL's layers run whole on the device: the tower's merged tokens take
// their placeholders' rows of the embedded sequence, its deepstack features
// add to the first layers' outputs, and their gradients go back to the
// tower, all between the backend's copies. Beside what the same decoder
// without a tower moves, nothing of the residual stream crosses, and of
// the rows' moves only their pairs' indices; no patches' gradient is made.
TEST(CudaBackend, QwenThreeVlLayersRunWholeOnTheDevice) {
  OneRankGroups Groups;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  MicroBatch MB = batch(C.Vocab);
  auto Plain = cudaBackend();
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Plain, "tiny_moe", /*HoldParameters=*/true, &MB);
  VisionConfig V;
  V.Depth = 2;
  V.Hidden = 64; // heads of 32, which the attention kernels take
  V.Heads = 2;
  V.FfnHidden = 64;
  V.OutHidden = C.Hidden;
  V.PatchSize = 2;
  V.PositionGrid = 4;
  V.DeepstackLayers = {0, 1};
  C.Vision = V;
  // A 4 x 4 image (four merged tokens) at places 3 to 6 of the first
  // sequence, a 2 x 4 one (two) at places 10 and 11 of the second.
  MB.Images = {ImageGrid{1, 4, 4}, ImageGrid{1, 2, 4}};
  const int64_t Patches = 16 + 8, Tokens = Patches / V.mergeUnit();
  MB.ImagePatches = randomBf16(size_t(Patches * V.patchDim()), 44);
  MB.VisionRows.assign(MB.Tokens.size(), -1);
  for (int32_t T = 0; T < 4; ++T)
    MB.VisionRows[size_t(3 + T)] = T;
  for (int32_t T = 4; T < 6; ++T)
    MB.VisionRows[size_t(MB.SeqLen + 6 + T)] = T;
  // The placeholders carry an image token no text token is, whose
  // embedding's gradient the placeholders' rows do not reach.
  const int32_t ImageToken = int32_t(C.Vocab - 1);
  for (size_t I = 0; I < MB.Tokens.size(); ++I)
    MB.Tokens[I] = MB.VisionRows[I] >= 0 ? ImageToken : MB.Tokens[I] % ImageToken;
  auto Cuda = cudaBackend();
  const std::vector<float> DEmbedding = expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Cuda, "Qwen3-VL's layers",
                                                                     /*HoldParameters=*/true, &MB)["embedding"];
  ASSERT_EQ(int64_t(DEmbedding.size()), C.Vocab * C.Hidden);
  for (int64_t Col = 0; Col < C.Hidden; ++Col)
    ASSERT_EQ(DEmbedding[size_t(ImageToken * C.Hidden + Col)], 0.0f) << "column " << Col;
  BackendTraffic T = Cuda->traffic(), Base = Plain->traffic();
  auto Up = [&](const char *Operation) { return T.ByOperation[Operation].HostToDeviceBytes; };
  auto Down = [&](const char *Operation) { return T.ByOperation[Operation].DeviceToHostBytes; };
  for (const char *Operation : {"host reads", "nested holds", "add", "copy"}) {
    // The tower's inputs: the patches, their rotary angles' cosines and
    // sines, and their four interpolation weights.
    const int64_t Inputs = std::string(Operation) == "nested holds"
                               ? (Patches * V.patchDim() + Patches * V.headDim() + 4 * Patches) * 4
                               : 0;
    EXPECT_EQ(Up(Operation), Base.ByOperation[Operation].HostToDeviceBytes + Inputs) << Operation;
    EXPECT_EQ(Down(Operation), Base.ByOperation[Operation].DeviceToHostBytes) << Operation;
  }
  // The tokens into their rows, a feature a deepstack layer each way, and
  // the tokens' gradient back: all by the same pairs, whose indices go up
  // once.
  EXPECT_EQ(Up("copy rows"), 2 * Tokens * int64_t(sizeof(int32_t)));
  EXPECT_EQ(T.ByOperation["copy rows"].Transfers, 2);
  EXPECT_EQ(Down("copy rows"), 0);
  EXPECT_EQ(Down("gemm"), Base.ByOperation["gemm"].DeviceToHostBytes) << "no tower output, no patches' gradient";

  // A frozen tower (no backward): its output still meets the decoder's rows
  // on the device, and the placeholders' gradients still miss the
  // embedding.
  C.VisionFrozen = true;
  auto Frozen = cudaBackend();
  const std::vector<float> DFrozen =
      expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Frozen, "a frozen tower", true, &MB)["embedding"];
  ASSERT_EQ(DFrozen.size(), DEmbedding.size());
  EXPECT_EQ(DFrozen[size_t(ImageToken * C.Hidden)], 0.0f);
  EXPECT_EQ(Frozen->traffic().ByOperation["copy rows"].DeviceToHostBytes, 0);
}

// A selective recompute remakes what it dropped where the forward made it:
// the normalised inputs from the residual stream, attention's output from
// the queries, keys and values, the routed experts' activation from their
// products, and the MoE block (its combined output, which nothing reads,
// made on the device and left there), each kept there again for the
// backward. Beside the same micro batch without recompute, what crosses more
// is the recompute's own statistics and routing.
TEST(CudaBackend, ASelectiveRecomputeRemakesWhatItDroppedWhereTheForwardDid) {
  OneRankGroups Groups;
  const ModelConfig C = tinyMoe(/*TopK=*/4);
  const MicroBatch MB = batch(C.Vocab);
  const int64_t N = MB.Sequences * MB.SeqLen, F = int64_t(sizeof(float)), MoeLayers = C.Layers - C.DenseLayers;
  auto Plain = cudaBackend();
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Plain, "no recompute", /*HoldParameters=*/true);
  const BackendTraffic Base = Plain->traffic();
  for (const std::vector<std::string> &Modules :
       {std::vector<std::string>{"layernorm", "core_attn", "moe_act"}, std::vector<std::string>{"moe"}}) {
    RecomputeOptions Recompute;
    Recompute.Modules = Modules;
    const std::string What = "selective(" + Modules[0] + ", ...)";
    auto Cuda = cudaBackend();
    expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Cuda, What, /*HoldParameters=*/true, nullptr, Recompute);
    BackendTraffic T = Cuda->traffic();
    auto Extra = [&](const char *Operation, bool ToDevice) {
      BackendTraffic::Copies A = T.ByOperation[Operation], B = Base.ByOperation.count(Operation)
                                                                   ? Base.ByOperation.at(Operation)
                                                                   : BackendTraffic::Copies();
      return ToDevice ? A.HostToDeviceBytes - B.HostToDeviceBytes : A.DeviceToHostBytes - B.DeviceToHostBytes;
    };
    for (const char *Operation : {"gemm", "nested holds", "host reads", "swiglu", "copy", "add"})
      for (bool ToDevice : {true, false})
        EXPECT_EQ(Extra(Operation, ToDevice), 0) << What << ": " << Operation << (ToDevice ? " up" : " down");
    if (Modules[0] == "layernorm") {
      // The norms' reciprocal deviations, remade on the device and kept
      // there again.
      EXPECT_EQ(Extra("rmsnorm", false), 0) << What;
      EXPECT_EQ(Extra("rmsnorm", true), 0) << What;
      // Attention's log-sum-exp, remade there and kept there again.
      EXPECT_EQ(Extra("attention", false), 0) << What;
      EXPECT_EQ(Extra("attention", true), 0) << What;
    } else {
      EXPECT_EQ(Extra("permute", false), 0) << What << ": the combined output stays on the device";
      // The experts and weights the router chose again come back for the
      // dispatcher, and its statistics.
      EXPECT_EQ(Extra("router", false), MoeLayers * (N * C.TopK * (4 + F) + (2 * C.Experts + 1) * F)) << What;
    }
  }
}

// A multi-token prediction block runs on the device as the decoder does: its
// layer keeps what its backward reads there from its forward (its MLPs'
// products and rows, queries, keys and values, attention's output), and the
// block's own norms, concatenation, projection, loss head and their
// gradients pass between the backend's copies, so that beside the decoder
// alone only the tokens and the loss head's statistics cross.
TEST(CudaBackend, AMultiTokenPredictionBlockRunsOnTheDevice) {
  OneRankGroups Groups;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  MicroBatch MB = batch(C.Vocab);
  auto Plain = cudaBackend();
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Plain, "the decoder alone", /*HoldParameters=*/true, &MB);
  C.MtpLayers = 1;
  std::mt19937 Gen(12);
  MB.MtpTokens.assign(1, {});
  MB.MtpLabels.assign(1, {});
  for (int64_t I = 0; I < int64_t(MB.Tokens.size()); ++I) {
    const bool Inside = I % MB.SeqLen + 1 < MB.SeqLen;
    MB.MtpTokens[0].push_back(Inside ? int32_t(Gen() % uint64_t(C.Vocab)) : 0);
    MB.MtpLabels[0].push_back(Inside ? int32_t(Gen() % uint64_t(C.Vocab)) : -1);
  }
  auto Cuda = cudaBackend();
  expectAMicroBatchAsOnTheHost(C, Groups.Ctx, *Cuda, "an MTP block", /*HoldParameters=*/true, &MB);
  BackendTraffic T = Cuda->traffic(), Base = Plain->traffic();
  auto Down = [](BackendTraffic &Of, const char *Operation) { return Of.ByOperation[Operation].DeviceToHostBytes; };
  auto Up = [](BackendTraffic &Of, const char *Operation) { return Of.ByOperation[Operation].HostToDeviceBytes; };
  for (const char *Operation : {"mlp", "swiglu", "copy", "host reads", "rope", "gemm", "add", "copy columns"})
    EXPECT_EQ(Down(T, Operation), Down(Base, Operation)) << Operation << ": nothing more comes back";
  for (const char *Operation : {"mlp", "swiglu", "copy", "gemm", "add", "copy columns"})
    EXPECT_EQ(Up(T, Operation), Up(Base, Operation)) << Operation << ": nothing more goes to the device";
  // No norm's statistics cross (the block's five: its layer's two, the
  // embeddings', the hidden states' and its final one); of each loss head,
  // its rows' statistics.
  EXPECT_EQ(Down(T, "rmsnorm") + Up(T, "rmsnorm"), 0);
  EXPECT_EQ(Down(T, "loss head"), 2 * Down(Base, "loss head"));
  EXPECT_EQ(Down(T, "nested holds"), Down(Base, "nested holds"));
  // Nothing of attention or of the routed experts' combine comes back, as
  // in the decoder's layers: not the statistics, not the routing weights'
  // gradients.
  EXPECT_EQ(Down(T, "attention"), 0);
  EXPECT_EQ(Down(T, "permute"), 0);
}

TEST(CudaBackend, AFullRecomputeRerunsEachLayerFromItsInputWhereItIs) {
  auto Cuda = cudaBackend();
  OneRankGroups Groups;
  ModelConfig C = tinyMoe(/*TopK=*/4);
  ModelOptions OnCuda;
  OnCuda.Compute = Cuda.get();
  OnCuda.Recompute.Full = true;
  StageModel Model(C, StageSpec{0, C.Layers, true, true}, Groups.Ctx, OnCuda);
  MicroBatch MB = batch(C.Vocab);
  Model.forward(0, MB, nullptr);
  Model.backward(0, nullptr);
  // Every layer's input stays on the device from the forward to its
  // recompute, as Megatron keeps a checkpointed input on the GPU: the one
  // host read is the embedding's, as without recompute.
  const int64_t Stream = MB.Sequences * MB.SeqLen * C.Hidden * int64_t(sizeof(float));
  EXPECT_EQ(Cuda->traffic().ByOperation["host reads"].DeviceToHostBytes, Stream);
}

} // namespace
