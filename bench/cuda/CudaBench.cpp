//===- bench/cuda/CudaBench.cpp - Kernel throughput of the CUDA backend ---===//
//
// Measures, on device 0:
//  * grouped expert GEMM (the MoE layer's expert projections: uneven rows per
//    expert, one weight matrix each) in both modes, against ONE cuBLAS dense
//    GEMM with the same M (all rows), N and K, i.e. the same FLOPs;
//  * causal attention forward and backward (this backend's flash-style
//    kernels) at training sequence lengths.
// Times are CUDA-event medians of several runs after a warm-up; TFLOP/s count
// 2 M N K per GEMM and 4 B H (T(T+1)/2) D for a causal forward (2.5x for the
// backward). Writes a Markdown table (GPU named) to --out, or stdout.
//
//===----------------------------------------------------------------------===//
#include "BenchFormat.h"
#include "kernels/cuda/Attention.h"
#include "kernels/cuda/DeltaRule.h"
#if MOERT_HAS_CUDNN
#include "kernels/cuda/CudnnAttention.h"
#endif
#include "kernels/cuda/Gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace moert::cuda;
using moert::bench::fixed;

namespace {

/// Median milliseconds of Runs launches of Body on the legacy stream.
double timeMs(const std::function<void()> &Body, int Runs) {
  Body(); // warm-up (cuBLAS heuristics, first-launch costs)
  MOERT_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t Start, Stop;
  MOERT_CUDA_CHECK(cudaEventCreate(&Start));
  MOERT_CUDA_CHECK(cudaEventCreate(&Stop));
  std::vector<float> Ms;
  for (int I = 0; I < Runs; ++I) {
    MOERT_CUDA_CHECK(cudaEventRecord(Start));
    Body();
    MOERT_CUDA_CHECK(cudaEventRecord(Stop));
    MOERT_CUDA_CHECK(cudaEventSynchronize(Stop));
    float T = 0;
    MOERT_CUDA_CHECK(cudaEventElapsedTime(&T, Start, Stop));
    Ms.push_back(T);
  }
  cudaEventDestroy(Start);
  cudaEventDestroy(Stop);
  std::sort(Ms.begin(), Ms.end());
  return Ms[Ms.size() / 2];
}

DeviceBuffer<bf16> randomDevice(size_t N, uint64_t Seed) {
  std::mt19937_64 Gen(Seed);
  std::normal_distribution<float> D(0.0f, 0.5f);
  std::vector<float> V(N);
  for (float &X : V)
    X = D(Gen);
  return uploadBf16(V);
}

struct Row {
  std::string Kernel, Shape;
  double Ms, Tflops;
  std::string Note;
};

/// Rows per expert: uneven (as a router produces), summing to Total.
std::vector<int64_t> unevenRows(int64_t Experts, int64_t Total, uint64_t Seed) {
  std::mt19937_64 Gen(Seed);
  std::uniform_real_distribution<double> U(0.5, 1.5);
  std::vector<double> W(Experts);
  for (double &X : W)
    X = U(Gen);
  double Sum = std::accumulate(W.begin(), W.end(), 0.0);
  std::vector<int64_t> Rows(Experts);
  int64_t Given = 0;
  for (int64_t E = 0; E < Experts; ++E) {
    Rows[E] = E + 1 == Experts ? Total - Given : int64_t(Total * W[E] / Sum);
    Given += Rows[E];
  }
  return Rows;
}

std::string groupedModeName(GroupedMode Mode) {
  switch (Mode) {
  case GroupedMode::Batched:
    return "grouped GEMM (cublasGemmGroupedBatchedEx)";
  case GroupedMode::Loop:
    return "grouped GEMM (loop of cublasGemmEx)";
  case GroupedMode::Streams:
    return "grouped GEMM (cublasGemmEx over " + std::to_string(GroupedGemmStreams) + " streams)";
  case GroupedMode::Auto:
    return "grouped GEMM (Auto: loop or streams by expert size)";
  }
  return "grouped GEMM";
}

void benchGemm(std::vector<Row> &Rows, int64_t Experts, int64_t Tokens, int64_t K, int64_t N, int Runs) {
  BlasHandle H;
  std::vector<int64_t> Counts = unevenRows(Experts, Tokens, 7);
  auto X = randomDevice(size_t(Tokens * K), 1);
  auto W = randomDevice(size_t(Experts * K * N), 2);
  DeviceBuffer<bf16> Y(size_t(Tokens * N));
  double Flops = 2.0 * double(Tokens) * double(N) * double(K);
  std::ostringstream Shape;
  Shape << Experts << " experts, " << Tokens << " rows (uneven) x " << K << " -> " << N;
  double Dense = timeMs(
      [&] { gemm(H, false, false, Tokens, N, K, 1.0f, X.data(), W.data(), 0.0f, Y.data(), OutType::BF16); }, Runs);
  Rows.push_back({"dense GEMM (cuBLAS, same M N K)", Shape.str(), Dense, Flops / Dense / 1e9, "reference"});
  for (GroupedMode Mode : {GroupedMode::Batched, GroupedMode::Loop, GroupedMode::Streams, GroupedMode::Auto}) {
    double T = timeMs(
        [&] { groupedGemm(H, Mode, Counts, N, K, X.data(), W.data(), false, 0.0f, Y.data(), OutType::BF16); }, Runs);
    std::string Note = fixed(T / Dense, 2) + "x dense time";
    if (Mode == GroupedMode::Batched && H.batchedUnsupported())
      Note += "; cublasGemmGroupedBatchedEx unsupported, ran as loop";
    Rows.push_back({groupedModeName(Mode), Shape.str(), T, Flops / T / 1e9, Note});
  }
}

/// VHeadDim 0: values as wide as keys.
void benchAttention(std::vector<Row> &Rows, int64_t Seq, int64_t QHeads, int64_t KvHeads, int64_t HeadDim,
                    int64_t VHeadDim, int Runs) {
  DeviceAttentionShape S{1, Seq, Seq, QHeads, KvHeads, HeadDim, float(1.0 / std::sqrt(double(HeadDim))), VHeadDim};
  size_t QN = size_t(Seq * QHeads * HeadDim), KN = size_t(Seq * KvHeads * HeadDim);
  size_t VN = size_t(Seq * KvHeads * S.vHeadDim()), ON = size_t(Seq * QHeads * S.vHeadDim());
  auto Q = randomDevice(QN, 3), K = randomDevice(KN, 4), V = randomDevice(VN, 5);
  auto DOut = randomDevice(ON, 6);
  std::vector<int32_t> P(Seq);
  std::iota(P.begin(), P.end(), 0);
  DeviceBuffer<int32_t> Pos;
  Pos.upload(P);
  DeviceBuffer<float> Out(ON), Lse(size_t(QHeads * Seq)), Delta(Lse.size()), DQ(QN), DK(KN), DV(VN);
  double Flops = causalAttentionFlops(S);
  std::ostringstream Shape;
  Shape << "seq " << Seq << ", " << QHeads << " q / " << KvHeads << " kv heads, head dim " << HeadDim;
  if (S.vHeadDim() != HeadDim)
    Shape << " (values " << S.vHeadDim() << ")";
  double F = timeMs(
      [&] { causalAttentionForward(S, Q.data(), K.data(), V.data(), Pos.data(), Out.data(), Lse.data(), nullptr); },
      Runs);
  Rows.push_back({"causal attention forward", Shape.str(), F, Flops / F / 1e9, "CUDA cores, fp32 accumulation"});
  double B = timeMs(
      [&] {
        causalAttentionBackward(S, Q.data(), K.data(), V.data(), Pos.data(), Out.data(), Lse.data(), DOut.data(),
                                Delta.data(), DQ.data(), DK.data(), DV.data(), nullptr);
      },
      Runs);
  Rows.push_back({"causal attention backward", Shape.str(), B, 2.5 * Flops / B / 1e9, "FLOPs counted as 2.5x forward"});
#if MOERT_HAS_CUDNN
  if (S.vHeadDim() != HeadDim)
    return; // CudnnAttention takes values as wide as keys only
  // A width cuDNN's SDPA does not take is a row of the table, not the end
  // of the benchmark.
  try {
    CudnnAttention Fused;
    DeviceBuffer<bf16> OutBf(QN), DQb(QN), DKb(KN), DVb(KN);
    std::string Version = "cuDNN " + std::to_string(CudnnAttention::version());
    double FF =
        timeMs([&] { Fused.forward(S, Q.data(), K.data(), V.data(), OutBf.data(), Lse.data(), nullptr); }, Runs);
    Rows.push_back({"causal attention forward (cuDNN SDPA)", Shape.str(), FF, Flops / FF / 1e9,
                    Version + ", " + fixed(F / FF, 1) + "x the CUDA-core kernel"});
    double FB = timeMs(
        [&] {
          Fused.backward(S, Q.data(), K.data(), V.data(), OutBf.data(), DOut.data(), Lse.data(), DQb.data(), DKb.data(),
                         DVb.data(), nullptr);
        },
        Runs);
    Rows.push_back({"causal attention backward (cuDNN SDPA)", Shape.str(), FB, 2.5 * Flops / FB / 1e9,
                    Version + ", " + fixed(B / FB, 1) + "x the CUDA-core kernel"});
  } catch (const std::exception &E) {
    Rows.push_back({"causal attention (cuDNN SDPA)", Shape.str(), NAN, NAN, std::string("not run: ") + E.what()});
  }
#endif
}

/// Gated DeltaNet's recurrence (kernels/cuda/DeltaRule.h) at Sequences x
/// SeqLen tokens; about 8 HeadDim^2 FLOPs a token and value head forward.
void benchDeltaRule(std::vector<Row> &Rows, int64_t SeqLen, int64_t KeyHeads, int64_t ValueHeads, int64_t HeadDim,
                    int Runs) {
  const DeltaRuleShape S{1, SeqLen, KeyHeads, ValueHeads, HeadDim};
  std::mt19937_64 Gen(7);
  std::normal_distribution<float> Normal(0.0f, float(1.0 / std::sqrt(double(HeadDim))));
  auto Upload = [&](int64_t N, float Fixed) {
    std::vector<float> H(static_cast<size_t>(N));
    for (float &X : H)
      X = Fixed != 0.0f ? Fixed : Normal(Gen);
    DeviceBuffer<float> D;
    D.upload(H);
    return D;
  };
  const int64_t QkN = SeqLen * KeyHeads * HeadDim, VN = SeqLen * ValueHeads * HeadDim, GN = SeqLen * ValueHeads;
  auto Q = Upload(QkN, 0), K = Upload(QkN, 0), V = Upload(VN, 0), DO = Upload(VN, 0);
  auto G = Upload(GN, -0.1f), Beta = Upload(GN, 0.5f);
  DeviceBuffer<float> O{size_t(VN)}, DQ{size_t(QkN)}, DK{size_t(QkN)}, DV{size_t(VN)}, DG{size_t(GN)},
      DBeta{size_t(GN)}, Scratch{size_t(deltaRuleScratch(S))};
  const double Flops = 8.0 * double(SeqLen) * double(ValueHeads) * double(HeadDim * HeadDim);
  std::ostringstream Shape;
  Shape << "seq " << SeqLen << ", " << KeyHeads << " key / " << ValueHeads << " value heads of " << HeadDim;
  double F = timeMs(
      [&] { gatedDeltaRuleForward(S, Q.data(), K.data(), V.data(), G.data(), Beta.data(), O.data(), nullptr); }, Runs);
  Rows.push_back({"gated delta rule forward", Shape.str(), F, Flops / F / 1e9,
                  "recurrent form, fp32, a state column per 1-4 threads"});
  double B = timeMs(
      [&] {
        gatedDeltaRuleBackward(S, Q.data(), K.data(), V.data(), G.data(), Beta.data(), DO.data(), DQ.data(), DK.data(),
                               DV.data(), DG.data(), DBeta.data(), Scratch.data(), nullptr);
      },
      Runs);
  Rows.push_back({"gated delta rule backward", Shape.str(), B, 3.0 * Flops / B / 1e9,
                  "FLOPs counted as 3x forward; scratch " + fixed(double(Scratch.bytes()) / (1 << 20), 0) + " MiB"});
}

} // namespace

int main(int Argc, char **Argv) {
  std::string OutPath;
  bool Quick = false;
  for (int I = 1; I < Argc; ++I) {
    if (!std::strcmp(Argv[I], "--out") && I + 1 < Argc)
      OutPath = Argv[++I];
    else if (!std::strcmp(Argv[I], "--quick"))
      Quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--out FILE.md] [--quick]\n", Argv[0]);
      return 2;
    }
  }
  if (deviceCount() == 0) {
    std::printf("SKIPPED: no CUDA device; no benchmark was run\n");
    return 0;
  }
  MOERT_CUDA_CHECK(cudaSetDevice(0));
  std::string Gpu = deviceDescription(0);
  int Runs = Quick ? 3 : 10;
  std::vector<Row> Rows;
  try {
    // A Mixtral/DeepSeek-like expert layer: hidden 4096, expert FFN 14336
    // (and a fine-grained one: 64 experts, FFN 2048).
    benchGemm(Rows, 8, Quick ? 8192 : 32768, 4096, 14336, Runs);
    benchGemm(Rows, 64, Quick ? 8192 : 32768, 4096, 2048, Runs);
    // Qwen3-30B-A3B's experts at EP16 (8 local, hidden 2048, expert FFN 768):
    // gate and up as one [2048, 1536] GEMM, then down with K = 768.
    benchGemm(Rows, 8, Quick ? 4096 : 16384, 2048, 1536, Runs);
    benchGemm(Rows, 8, Quick ? 4096 : 16384, 768, 2048, Runs);
    benchAttention(Rows, Quick ? 2048 : 8192, 32, 8, 128, 0, Runs);
    benchAttention(Rows, Quick ? 2048 : 4096, 16, 16, 64, 0, Runs);
    benchAttention(Rows, Quick ? 2048 : 4096, 16, 16, 192, 128, Runs); // latent attention (DeepSeek-V3)
    benchAttention(Rows, Quick ? 2048 : 4096, 16, 2, 256, 0, Runs);    // Qwen3-Next's attention layers
    benchAttention(Rows, Quick ? 1024 : 4096, 16, 16, 72, 0, Runs);    // Qwen3-VL's vision tower
    // Qwen3-Next-80B-A3B's linear attention (16 key, 32 value heads of 128).
    benchDeltaRule(Rows, Quick ? 1024 : 4096, 16, 32, 128, Runs);
  } catch (const std::exception &E) {
    std::fprintf(stderr, "benchmark failed: %s\n", E.what());
    return 1;
  }
  std::ostringstream MD;
  MD << "### CUDA kernels on " << Gpu << "\n\n"
     << "Measured by `bench/cuda/run.sh` (bf16 inputs, fp32 accumulation; "
        "median of "
     << Runs << " runs).\n\n"
     << "| kernel | shape | ms | TFLOP/s | note |\n"
     << "| --- | --- | ---: | ---: | --- |\n";
  MD.setf(std::ios::fixed);
  for (const Row &R : Rows) {
    MD.precision(3);
    MD << "| " << R.Kernel << " | " << R.Shape << " | " << R.Ms << " | ";
    MD.precision(1);
    MD << R.Tflops << " | " << R.Note << " |\n";
  }
  std::cout << MD.str();
  if (!OutPath.empty()) {
    std::ofstream F(OutPath);
    F << MD.str();
    if (!F) {
      std::fprintf(stderr, "cannot write %s\n", OutPath.c_str());
      return 1;
    }
  }
  return 0;
}
