//===- GraphTest.cpp - CUDA-graph capture of the plan's scopes ------------===//
//
// On a GPU: a captured attention scope replays to the same result as the
// direct launches, and a replay with other shapes is refused.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"

#include "kernels/cuda/Attention.h"
#include "kernels/cuda/CudaGraph.h"

#include <numeric>

using namespace moert;
using namespace moert::cuda;

namespace {

TEST(CudaGraph, AttentionScopeReplaysTheDirectResult) {
  const int64_t T = 128, H = 4, Hd = 64;
  DeviceAttentionShape S{1, T, T, H, H, Hd, 0.125f};
  auto Q = uploadBf16(test::randomBf16(T * H * Hd, 1));
  auto K = uploadBf16(test::randomBf16(T * H * Hd, 2));
  auto V = uploadBf16(test::randomBf16(T * H * Hd, 3));
  std::vector<int32_t> P(T);
  std::iota(P.begin(), P.end(), 0);
  DeviceBuffer<int32_t> Pos;
  Pos.upload(P);
  DeviceBuffer<float> Out(T * H * Hd), Lse(H * T), RefOut(T * H * Hd), RefLse(H * T);
  causalAttentionForward(S, Q.data(), K.data(), V.data(), Pos.data(), RefOut.data(), RefLse.data(), nullptr);
  MOERT_CUDA_CHECK(cudaDeviceSynchronize());

  cudaStream_t Stream;
  MOERT_CUDA_CHECK(cudaStreamCreateWithFlags(&Stream, cudaStreamNonBlocking));
  ScopeGraph G(GraphScope::Attn, GraphConditions{});
  int Captures = 0;
  auto Body = [&](cudaStream_t St) {
    ++Captures;
    causalAttentionForward(S, Q.data(), K.data(), V.data(), Pos.data(), Out.data(), Lse.data(), St);
  };
  for (int Step = 0; Step < 3; ++Step) {
    // Cleared on the graph's stream, so the replay below must refill it.
    MOERT_CUDA_CHECK(cudaMemsetAsync(Out.data(), 0, Out.bytes(), Stream));
    G.run(Stream, {T, H, Hd}, Body);
    MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
    EXPECT_EQ(Out.download(), RefOut.download()) << "step " << Step;
    EXPECT_EQ(Lse.download(), RefLse.download()) << "step " << Step;
  }
  EXPECT_EQ(Captures, 1);
  EXPECT_EQ(G.replays(), 2);
  EXPECT_THROW(G.run(Stream, {T / 2, H, Hd}, Body), GraphRefused);
  EXPECT_THROW(ScopeGraph(GraphScope::Attn, GraphConditions{}).run(nullptr, {}, Body), GraphRefused);
  MOERT_CUDA_CHECK(cudaStreamDestroy(Stream));
}

} // namespace
