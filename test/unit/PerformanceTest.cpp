//===- PerformanceTest.cpp - Model FLOPs and the step-time model ----------===//
//
// FLOPs goldens against the Megatron-Bridge tables (perf-anchors.md section
// 1.1: TFLOP/s / tokens/s of the published runs), a hand count for a tiny
// model, the direction of the step-time model's knobs, and sanity on every
// example recipe.
//
//===----------------------------------------------------------------------===//
#include "moec/Model/Performance.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include <cmath>
#include <gtest/gtest.h>

using namespace moec;

namespace {

constexpr double G = 1e9;

std::string repoRoot() {
  llvm::SmallString<256> P(__FILE__);
  llvm::sys::path::remove_filename(P); // test/unit
  llvm::sys::path::remove_filename(P); // test
  llvm::sys::path::remove_filename(P); // root
  return std::string(P);
}

/// Recipes of one in-memory file (Sema only: the rules do not run, so a
/// recipe that a rule would flag is still priced).
std::vector<Recipe> analyze(llvm::StringRef Text) {
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "perf.moe"));
  std::vector<Recipe> Recipes = S.analyze();
  for (const Diagnostic &D : Diags.finish())
    EXPECT_NE(D.Sev, Severity::Error) << D.Message << "\n" << Text.str();
  return Recipes;
}

Recipe one(llvm::StringRef Text) {
  std::vector<Recipe> Rs = analyze(Text);
  EXPECT_EQ(Rs.size(), 1u) << Text.str();
  return Rs.empty() ? Recipe() : Rs.front();
}

/// A recipe of Model on Gpus GPUs of Gpu with the given body lines.
std::string recipe(llvm::StringRef Model, llvm::StringRef Gpu, int Gpus, llvm::StringRef Body,
                   llvm::StringRef Prelude = "") {
  return (Prelude + "\nrecipe r {\n  model = " + Model + "\n  cluster { gpu = " + Gpu +
          "; gpus = " + std::to_string(Gpus) + " }\n" + Body + "\n}\n")
      .str();
}

/// The pipeline plan the step-time model reads, built by hand: PP, VPP, the
/// micro batches and 1F1B's bubble; no layer placement (the model then uses
/// the recipe's layout or Megatron's even split).
PipelinePlan handPlan(const Recipe &R) {
  PipelinePlan P;
  P.PP = std::max<int64_t>(R.Parallel.PP, 1);
  P.VPP = std::max<int64_t>(R.Parallel.VPP, 1);
  int64_t DP = std::max<int64_t>(R.Parallel.DP, 1);
  P.Microbatches = std::max<int64_t>(R.GlobalBatch / std::max<int64_t>(R.MicroBatch * DP, 1), 1);
  P.BubbleFraction = double(P.PP - 1) / double(P.VPP * P.Microbatches + P.PP - 1);
  return P;
}

StepTimeBreakdown predict(const Recipe &R) { return predictStepTime(R, handPlan(R)); }

double gflopsPerToken(llvm::StringRef Model, llvm::StringRef Prelude = "") {
  Recipe R = one(recipe(Model, "gb200_nvl72", 8, "  seq_len = 4K\n  batch { micro = 1; global = 8 }", Prelude));
  return countFlops(R).DecoderPerToken / G;
}

} // namespace

//===----------------------------------------------------------------------===//
// FLOPs
//===----------------------------------------------------------------------===//

// perf-anchors.md 1.1 (GFLOP per token = model TFLOP/s / tokens/s of the
// Bridge tables at sequence 4096). The rows of perf_calibration.csv give the
// same ratios to three digits: DeepSeek-V3 A001 1635e3 / 6288 = 260.0 (with
// MTP), A191 961e3 / 3848 = 249.7 (without); Qwen3-235B A008 1077e3 / 7280 =
// 147.9; Qwen3-30B A006 923e3 / 39936 = 23.11.
TEST(FlopGoldens, CatalogModelsMatchBridgeTables) {
  struct Golden {
    const char *Model;
    const char *Prelude;
    double Anchor; // GFLOP per token
  } Goldens[] = {
      {"deepseek_v3", "", 260.0},
      {"dsv3_mtp0", "model dsv3_mtp0 extends deepseek_v3 { mtp_layers = 0 }", 249.7},
      {"qwen3_235b_a22b", "", 147.9},
      {"qwen3_30b_a3b", "", 23.11},
  };
  for (const Golden &Gd : Goldens) {
    double Got = gflopsPerToken(Gd.Model, Gd.Prelude);
    EXPECT_NEAR(Got, Gd.Anchor, 0.02 * Gd.Anchor) << Gd.Model;
    // Tighter than the anchors' rounding: Megatron's formula exactly.
    EXPECT_NEAR(Got, Gd.Anchor, 0.005 * Gd.Anchor) << Gd.Model;
  }
  // The anchor table's ranges: 249-261 for DeepSeek-V3, 148, 23.
  EXPECT_GE(gflopsPerToken("deepseek_v3"), 249.0);
  EXPECT_LE(gflopsPerToken("deepseek_v3"), 261.0);
}

TEST(FlopGoldens, VlmDecoderIsItsTextModel) {
  // Qwen3-VL decoders are the Qwen3-MoE text models.
  EXPECT_DOUBLE_EQ(gflopsPerToken("qwen3_vl_30b_a3b"), gflopsPerToken("qwen3_30b_a3b"));
  EXPECT_DOUBLE_EQ(gflopsPerToken("qwen3_vl_235b_a22b"), gflopsPerToken("qwen3_235b_a22b"));
}

TEST(FlopGoldens, EveryCatalogModelIsPositive) {
  for (const char *M : {"deepseek_v3", "qwen3_235b_a22b", "qwen3_30b_a3b", "qwen3_next_80b_a3b", "qwen3_vl_235b_a22b",
                        "qwen3_vl_30b_a3b", "qwen35_vl_35b_a3b", "qwen35_vl_122b_a10b", "qwen35_vl_397b_a17b",
                        "mixtral_8x7b", "tiny_moe"}) {
    double F = gflopsPerToken(M);
    EXPECT_GT(F, 0) << M;
    EXPECT_TRUE(std::isfinite(F)) << M;
  }
  // Active parameters x 6 is a lower bound of sorts: Mixtral-8x7B has
  // ~12.9B active parameters, so ~77 GFLOP/token plus attention and logits.
  EXPECT_NEAR(gflopsPerToken("mixtral_8x7b"), 6 * 12.9 + 6 * 4096.0 * 32 * 128 * 32 / G, 8);
}

// Hand count for tiny_moe (4 layers: 1 dense + 3 MoE; hidden 64, heads 4 x 16,
// kv 2 x 16, ffn 128, 8 experts top-2 of 32, vocab 256) at sequence 256:
//   attention  2*(64*(64 + 2*32) + 64*64) + 2*64*256     = 57,344 per layer
//   dense MLP  2*3*64*128 (SwiGLU)                        = 49,152
//   MoE        2*3*64*32*2 (top-2)                        = 24,576 per layer
//   logits     2*64*256                                   = 32,768
//   forward    4*57,344 + 49,152 + 3*24,576 + 32,768      = 385,024
//   training   x3                                         = 1,155,072 per token
TEST(FlopCount, TinyModelByHand) {
  Recipe R = one(recipe("tiny_moe", "cpu", 2, "  seq_len = 256\n  batch { micro = 1; global = 4 }"));
  FlopCount F = countFlops(R);
  EXPECT_DOUBLE_EQ(F.DecoderPerToken, 1155072.0);
  EXPECT_DOUBLE_EQ(F.VisionPerToken, 0.0);
  EXPECT_DOUBLE_EQ(F.PerStep, 4 * 256 * 1155072.0);
  EXPECT_DOUBLE_EQ(F.TextTokenFraction, 1.0);

  // Twice the sequence doubles only the attention core (2*64*256 per layer
  // more): 4 layers x 32,768 x 3.
  Recipe Long = one(recipe("tiny_moe", "cpu", 2, "  seq_len = 512\n  batch { micro = 1; global = 4 }"));
  EXPECT_DOUBLE_EQ(countFlops(Long).DecoderPerToken - F.DecoderPerToken, 4 * 32768.0 * 3);

  // An MTP layer: one more layer of the last layer's kind (MoE), its norms
  // and projection 2*(3*64 + 2*64*64) and its own logits.
  Recipe Mtp = one(recipe("tiny_mtp", "cpu", 2, "  seq_len = 256\n  batch { micro = 1; global = 4 }",
                          "model tiny_mtp extends tiny_moe { mtp_layers = 1 }"));
  EXPECT_DOUBLE_EQ(countFlops(Mtp).DecoderPerToken - F.DecoderPerToken,
                   3 * (57344.0 + 24576.0 + 2 * (3 * 64 + 2 * 64 * 64) + 32768.0));
}

TEST(FlopCount, VisionEncoderOnlyWithImages) {
  const char *Body = "  seq_len = 4K\n  batch { micro = 1; global = 32 }\n  parallel { ep = 8 }";
  Recipe Mock = one(recipe("qwen3_vl_30b_a3b", "gb200_nvl72", 8, std::string(Body) + "\n  data { source = mock }"));
  Recipe Real =
      one(recipe("qwen3_vl_30b_a3b", "gb200_nvl72", 8, std::string(Body) + "\n  data { source = real(\"d/x\") }"));
  Recipe Frozen = one(recipe("qwen3_vl_30b_a3b", "gb200_nvl72", 8,
                             std::string(Body) + "\n  data { source = real(\"d/x\") }\n  vision { frozen = true }"));
  EXPECT_EQ(countFlops(Mock).VisionPerToken, 0.0);
  EXPECT_GT(countFlops(Real).VisionPerToken, 0.0);
  EXPECT_LT(countFlops(Real).TextTokenFraction, 1.0);
  // A frozen encoder runs forward only.
  EXPECT_LT(countFlops(Frozen).VisionPerToken, countFlops(Real).VisionPerToken);
  // Images cost time; useful (text) tokens are fewer than tokens.
  StepTimeBreakdown TM = predict(Mock), TR = predict(Real);
  EXPECT_GT(TR.StepTime, TM.StepTime);
  EXPECT_LT(TR.UsefulTokensPerSecPerGpu, TR.TokensPerSecPerGpu);
  EXPECT_DOUBLE_EQ(TM.UsefulTokensPerSecPerGpu, TM.TokensPerSecPerGpu);
}

TEST(FlopCount, LinearAttentionIsCheaperThanFullAttention) {
  // Qwen3-Next: 36 of 48 layers Gated DeltaNet. Without the linear layers
  // (every layer full attention) the long-sequence cost grows much faster.
  const char *Prelude = "model next_full extends qwen3_next_80b_a3b { linear_attention { interval = 1 } }";
  auto at = [&](const char *Model, const char *Seq) {
    Recipe R = one(recipe(Model, "gb200_nvl72", 8,
                          std::string("  seq_len = ") + Seq + "\n  batch { micro = 1; global = 8 }", Prelude));
    return countFlops(R).DecoderPerToken;
  };
  double HybridGrowth = at("qwen3_next_80b_a3b", "32K") - at("qwen3_next_80b_a3b", "4K");
  double FullGrowth = at("next_full", "32K") - at("next_full", "4K");
  EXPECT_GT(HybridGrowth, 0);
  EXPECT_NEAR(HybridGrowth / FullGrowth, 12.0 / 49.0, 0.01); // 12 standard of 48 + 1 MTP layers
}

//===----------------------------------------------------------------------===//
// Step time
//===----------------------------------------------------------------------===//

namespace {
const char *Qwen30 = "  seq_len = 4K\n  precision = mxfp8\n  dispatcher = hybridep\n";
}

TEST(PerfStepTime, OutputsAreConsistent) {
  Recipe R = one(recipe("qwen3_30b_a3b", "gb200_nvl72", 8,
                        std::string(Qwen30) + "  batch { micro = 4; global = 512 }\n  parallel { ep = 8 }"));
  StepTimeBreakdown T = predict(R);
  ASSERT_GT(T.StepTime, 0);
  EXPECT_EQ(T.Microbatches, 16);
  double Parts = T.Compute + T.Recompute + T.TensorParallel + T.ContextParallel + T.ExpertParallel + T.PipelineP2P +
                 T.DataParallel + T.Bubble + T.Host + T.Optimizer;
  EXPECT_NEAR(Parts, T.StepTime, 1e-9 * T.StepTime);
  // tokens/s/GPU = GBS x S / step / W; model TFLOP/s = FLOPs / step / W.
  EXPECT_NEAR(T.TokensPerSecPerGpu, 512.0 * 4096 / T.StepTime / 8, 1e-6);
  EXPECT_NEAR(T.ModelTflopsPerGpu * 1e12, countFlops(R).PerStep / T.StepTime / 8, 1);
  // MFU against the dense BF16 peak (perf_calibration.csv), the native one
  // against the FP8 peak.
  EXPECT_NEAR(T.MFU, T.ModelTflopsPerGpu * 1e12 / R.Gpu.Bf16Flops, 1e-12);
  EXPECT_NEAR(T.MFUNative, T.ModelTflopsPerGpu * 1e12 / *R.Gpu.Fp8Flops, 1e-12);
  // A plausible MFU for a dropless MoE: between 10% and 90% of BF16 peak.
  EXPECT_GT(T.MFU, 0.10);
  EXPECT_LT(T.MFU, 0.90);
}

TEST(PerfStepTime, DataParallelKeepsPerGpuThroughput) {
  // Qwen3-30B EP8 on 8, 32 and 64 GB200s with the global batch scaled: the
  // same micro batches per rank, so per-GPU throughput stays (DP traffic is
  // small and overlapped).
  double Base = 0;
  for (int Gpus : {8, 32, 64}) {
    Recipe R = one(recipe("qwen3_30b_a3b", "gb200_nvl72", Gpus,
                          std::string(Qwen30) + "  batch { micro = 4; global = " + std::to_string(64 * Gpus) +
                              " }\n  parallel { ep = 8 }"));
    double Tps = predict(R).TokensPerSecPerGpu;
    if (!Base)
      Base = Tps;
    EXPECT_NEAR(Tps / Base, 1.0, 0.05) << Gpus << " GPUs";
  }
}

TEST(PerfStepTime, ExpertParallelAcrossTheNetworkIsSlower) {
  // EP 16 on B200 (8-GPU NVLink domains: the exchange crosses the network)
  // against the same GPU with a 72-GPU NVLink domain.
  const char *Prelude = "gpu b200_rack extends b200 { nvlink_domain = 72; gpus_per_node = 4 }";
  std::string Body = std::string(Qwen30) + "  batch { micro = 1; global = 256 }\n  parallel { ep = 16 }";
  for (const char *D : {"hybridep", "deepep", "alltoall"}) {
    std::string B = Body;
    B.replace(B.find("hybridep"), 8, D);
    StepTimeBreakdown Net = predict(one(recipe("qwen3_30b_a3b", "b200", 16, B, Prelude)));
    StepTimeBreakdown Nvl = predict(one(recipe("qwen3_30b_a3b", "b200_rack", 16, B, Prelude)));
    EXPECT_GT(Net.ExpertParallel, Nvl.ExpertParallel) << D;
    if (llvm::StringRef(D) == "alltoall") { // the fused dispatchers send a token once per node
      EXPECT_GT(Net.ExpertParallel, 2 * Nvl.ExpertParallel) << D;
    }
    EXPECT_LT(Net.TokensPerSecPerGpu, Nvl.TokensPerSecPerGpu) << D;
  }
}

TEST(PerfStepTime, TokensReachFewerNodesUnderGroupLimitedRouting) {
  // DeepSeek-V3's 256 experts, top-8, over 8 nodes: uniform routing reaches
  // 8 x (1 - C(224, 8) / C(256, 8)) = 5.29 nodes; 4 of 8 groups, a group per
  // node, reach exactly 4; with 2 groups per node, 8 x (1 - C(14, 4) / C(16, 4)) = 4.57.
  MoESpec M;
  M.Experts = 256;
  M.TopK = 8;
  EXPECT_NEAR(domainsReached(M, 8), 5.29, 0.01);
  EXPECT_DOUBLE_EQ(domainsReached(M, 1), 1.0);
  M.Groups = 8;
  M.GroupTopK = 4;
  EXPECT_NEAR(domainsReached(M, 8), 4.0, 1e-9);
  EXPECT_NEAR(domainsReached(M, 4), 4 * (1 - 15.0 / 70.0), 1e-9);
  M.Groups = 16;
  EXPECT_NEAR(domainsReached(M, 8), 8 * (1 - 1001.0 / 1820.0), 1e-9);
  // Groups spanning two nodes each: 2 of 4 groups put a token's 8 experts
  // among 128 on 4 nodes, each hit as by 8 of 128 with 32 on the node.
  M.Groups = 4;
  M.GroupTopK = 2;
  EXPECT_NEAR(domainsReached(M, 8), 3.63, 0.01);
}

TEST(PerfStepTime, EpOverlapHidesWhatTheScheduleAllows) {
  // Qwen3-30B EP 16 across two B200 nodes: overlap hides part of the
  // exchange, never all of it (the unpaired first and last micro batches,
  // the SMs the kernels take), and a larger SM budget hides less.
  std::string Body = std::string(Qwen30) + "  batch { micro = 1; global = 256 }\n  parallel { ep = 16 }";
  StepTimeBreakdown Off = predict(one(recipe("qwen3_30b_a3b", "b200", 16, Body)));
  StepTimeBreakdown On = predict(one(recipe("qwen3_30b_a3b", "b200", 16, Body + "\n  moe { overlap_ep_comm = true }")));
  StepTimeBreakdown Greedy = predict(
      one(recipe("qwen3_30b_a3b", "b200", 16, Body + "\n  moe { overlap_ep_comm = true; dispatcher_sms = 64 }")));
  EXPECT_LT(On.ExpertParallel, 0.5 * Off.ExpertParallel);
  EXPECT_GT(On.ExpertParallel, 0.05 * Off.ExpertParallel);
  EXPECT_GT(Greedy.ExpertParallel, On.ExpertParallel);
  EXPECT_LT(On.StepTime, Off.StepTime);
}

TEST(PerfStepTime, FusedDispatchersBeatAllToAll) {
  std::string Body = "  seq_len = 4K\n  precision = bf16\n  batch { micro = 1; global = 256 }\n"
                     "  parallel { ep = 8 }\n  dispatcher = ";
  double A2A = predict(one(recipe("qwen3_30b_a3b", "b200", 8, Body + "alltoall"))).StepTime;
  double Deep = predict(one(recipe("qwen3_30b_a3b", "b200", 8, Body + "deepep"))).StepTime;
  double Hybrid = predict(one(recipe("qwen3_30b_a3b", "b200", 8, Body + "hybridep"))).StepTime;
  EXPECT_LT(Deep, A2A);
  EXPECT_LT(Hybrid, A2A);
}

TEST(PerfStepTime, BubbleGrowsWithPipelineAtFixedMicrobatches) {
  // DeepSeek-V3 without MTP on 256 GB200s: PP 2, 4, 8 with the global batch
  // chosen so that every rank runs 16 micro batches.
  const char *Prelude = "model dsv3_mtp0 extends deepseek_v3 { mtp_layers = 0; layers = 64 }";
  double Last = -1, LastFrac = -1;
  for (int PP : {2, 4, 8}) {
    int DP = 256 / PP;
    std::string Body = "  seq_len = 4K\n  precision = mxfp8\n  dispatcher = hybridep\n"
                       "  batch { micro = 1; global = " +
                       std::to_string(16 * DP) + " }\n  parallel { ep = 32; pp = " + std::to_string(PP) + " }";
    Recipe R = one(recipe("dsv3_mtp0", "gb200_nvl72", 256, Body, Prelude));
    StepTimeBreakdown T = predict(R);
    EXPECT_EQ(T.Microbatches, 16);
    double Frac = T.Bubble / T.StepTime;
    EXPECT_GT(T.Bubble, Last) << "PP " << PP;
    EXPECT_GT(Frac, LastFrac) << "PP " << PP;
    Last = T.Bubble;
    LastFrac = Frac;
  }
}

TEST(PerfStepTime, KnobsMoveTheRightWay) {
  std::string Base = std::string(Qwen30) + "  batch { micro = 2; global = 256 }\n  parallel { ep = 8 }\n";
  auto step = [&](const std::string &Extra, llvm::StringRef Gpu = "gb200_nvl72") {
    return predict(one(recipe("qwen3_30b_a3b", Gpu, 8, Base + Extra))).StepTime;
  };
  double Plain = step("");
  // Full recompute adds a forward; selective adds less.
  double Full = step("  recompute = full");
  double Sel = step("  recompute = selective(moe_act, layernorm)");
  EXPECT_GT(Full, Plain * 1.15);
  EXPECT_GT(Sel, Plain);
  EXPECT_LT(Sel, Full);
  // Overlapping the EP exchange helps; CUDA graphs never hurt.
  EXPECT_LT(step("  moe { overlap_ep_comm = true }"), Plain);
  EXPECT_LE(step("  cuda_graph = [full_iteration]"), Plain);
  // BF16 is slower than MXFP8; a faster GPU is faster.
  std::string Bf16 = Base;
  Bf16.replace(Bf16.find("mxfp8"), 5, "bf16");
  EXPECT_GT(predict(one(recipe("qwen3_30b_a3b", "gb200_nvl72", 8, Bf16))).StepTime, Plain);
  EXPECT_LT(step("", "vr200_nvl72"), Plain);
  // Offloading the optimizer to the CPU costs time.
  EXPECT_GT(step("  offload { optimizer = 1.0 }"), Plain);
}

TEST(PerfStepTime, ContextParallelRingHidesBehindAttention) {
  // Qwen3-235B at 128K on GB200 (the long-context seed's TP4 CP4): GQA's
  // small K/V (4 groups) inside the NVLink domain hides behind attention.
  const char *Body = "  seq_len = 128K\n  precision = bf16\n  dispatcher = hybridep\n"
                     "  batch { micro = 1; global = 16 }\n  parallel { tp = 4; cp = 4; ep = 32; pp = 4; vpp = 12 }\n"
                     "  recompute = selective(moe_act, layernorm)";
  const char *Prelude = "gpu gb200_islands extends gb200_nvl72 { nvlink_domain = 4 }";
  StepTimeBreakdown In = predict(one(recipe("qwen3_235b_a22b", "gb200_nvl72", 128, Body, Prelude)));
  EXPECT_GT(In.StepTime, 0);
  EXPECT_LT(In.ContextParallel, 0.02 * In.StepTime);
  // The same ring over the network (4-GPU NVLink islands) shows more.
  StepTimeBreakdown Out = predict(one(recipe("qwen3_235b_a22b", "gb200_islands", 128, Body, Prelude)));
  EXPECT_GE(Out.ContextParallel, In.ContextParallel);
  EXPECT_GT(Out.StepTime, In.StepTime);
  // MLA exchanges full-head K and V (128 x 320 per token): DeepSeek-V3's
  // ring over InfiniBand cannot hide behind attention.
  StepTimeBreakdown Mla = predict(one(recipe("deepseek_v3", "h100_sxm", 256,
                                             "  seq_len = 128K\n  precision = fp8.blockwise\n  dispatcher = deepep\n"
                                             "  batch { micro = 1; global = 8 }\n"
                                             "  parallel { tp = 1; cp = 32; ep = 32; pp = 8 }")));
  EXPECT_GT(Mla.ContextParallel, 0);
}

TEST(PerfStepTime, EveryExampleIsPositiveAndFinite) {
  std::string Examples = repoRoot() + "/examples";
  std::vector<std::string> Files;
  std::error_code EC;
  for (llvm::sys::fs::recursive_directory_iterator It(Examples, EC), End; It != End && !EC; It.increment(EC))
    if (llvm::sys::path::extension(It->path()) == ".moe")
      Files.push_back(It->path());
  std::sort(Files.begin(), Files.end());
  ASSERT_GT(Files.size(), 40u);
  size_t Priced = 0;
  for (const std::string &Path : Files) {
    SCOPED_TRACE(Path);
    llvm::SourceMgr SM;
    DiagnosticEngine Diags(SM);
    Sema S(Diags);
    if (S.loadFile(Path) != Sema::LoadResult::Loaded)
      continue; // examples with deliberate front-end errors
    for (const Recipe &R : S.analyze()) {
      if (R.WorldSize <= 0 || R.Parallel.DP <= 0 || R.Parallel.EDP <= 0)
        continue; // a layout that does not divide (the example's point)
      SCOPED_TRACE(R.PointName);
      StepTimeBreakdown T = predict(R);
      EXPECT_GT(T.StepTime, 0);
      EXPECT_TRUE(std::isfinite(T.StepTime));
      EXPECT_GT(T.TokensPerSecPerGpu, 0);
      EXPECT_TRUE(std::isfinite(T.ModelTflopsPerGpu));
      EXPECT_GT(T.MFU, 0);
      EXPECT_LT(T.MFU, 1.5); // FP8/FP4 can pass the BF16 peak, not by much
      EXPECT_GE(T.Bubble, 0);
      EXPECT_GE(T.ExpertParallel, 0);
      ++Priced;
    }
  }
  EXPECT_GT(Priced, 40u);
}

// The breakdown is complete: its parts add up to the step time, the
// CPU-offloaded optimizer included.
static const char *Shape = "  seq_len = 4K\n  batch { micro = 1; global = 64 }\n";

TEST(PerfStepTime, BreakdownAddsUpToTheStep) {
  const char *Bodies[] = {"", "  offload { optimizer = 1.0 }", "  offload { optimizer = 0.5; overlap_copies = true }",
                          "  parallel { ep = 4; pp = 2; vpp = 2 }\n  recompute = full",
                          "  offload { activations = [core_attn, attn_proj, expert_fc1, moe_act] }"};
  for (const char *Body : Bodies) {
    std::string Text = std::string(Shape) + Body;
    StepTimeBreakdown B = predict(one(recipe("qwen3_30b_a3b", "h100_sxm", 16, Text)));
    double Sum = B.Compute + B.Recompute + B.TensorParallel + B.ContextParallel + B.ExpertParallel + B.PipelineP2P +
                 B.DataParallel + B.Bubble + B.Host + B.ActivationOffload + B.Optimizer;
    EXPECT_GT(B.StepTime, 0) << Body;
    EXPECT_NEAR(Sum, B.StepTime, 1e-9 * B.StepTime) << Body;
  }
}

// The per-virtual-stage times the report draws are the slowest rank's busy
// time split by chunk and pass: over its chunks, times the micro batches,
// they are every part of the breakdown but the bubble, DP and optimizer.
TEST(PerfStepTime, StageTimesAddUpToTheBusyRank) {
  const char *Bodies[] = {"", "  parallel { ep = 4; pp = 2; vpp = 2 }\n  recompute = full",
                          "  parallel { pp = 4 }\n  offload { activations = [core_attn, attn_proj] }"};
  for (const char *Body : Bodies) {
    std::string Text = std::string(Shape) + Body;
    Recipe R = one(recipe("qwen3_30b_a3b", "h100_sxm", 16, Text));
    StepTimeBreakdown B = predict(R);
    int64_t PP = std::max<int64_t>(R.Parallel.PP, 1), VPP = std::max<int64_t>(R.Parallel.VPP, 1);
    ASSERT_EQ(B.StageForwardSec.size(), size_t(PP * VPP)) << Body;
    ASSERT_EQ(B.StageBackwardSec.size(), size_t(PP * VPP)) << Body;
    double Rank = 0;
    for (size_t V = size_t(B.SlowestStage); V < B.StageForwardSec.size(); V += size_t(PP)) {
      EXPECT_GT(B.StageBackwardSec[V], B.StageForwardSec[V]) << Body << " virtual stage " << V;
      Rank += B.StageForwardSec[V] + B.StageBackwardSec[V];
    }
    double Busy = B.Compute + B.Recompute + B.TensorParallel + B.ContextParallel + B.ExpertParallel + B.PipelineP2P +
                  B.Host + B.ActivationOffload;
    EXPECT_NEAR(Rank * double(B.Microbatches), Busy, 1e-9 * Busy) << Body;
  }
}

// The offloaded optimizer is priced from the host (Calibration.h): on the
// cpu-offloading card's layout (Qwen3-30B, TP2 PP2 EP4, 2x8 H100) 100%
// offload adds 3.19 s serially and 2.88 s with the copies overlapped; the
// model lands within 10% of both, and the overlap never costs time.
TEST(PerfStepTime, OffloadedOptimizerFromTheHost) {
  auto extra = [](const char *Offload) {
    std::string Base = std::string(Shape) + "  parallel { tp = 2; pp = 2; ep = 4 }\n";
    double Plain = predict(one(recipe("qwen3_30b_a3b", "h100_sxm", 16, Base))).Optimizer;
    return predict(one(recipe("qwen3_30b_a3b", "h100_sxm", 16, Base + Offload))).Optimizer - Plain;
  };
  double Serial = extra("  offload { optimizer = 1.0 }");
  double Overlapped = extra("  offload { optimizer = 1.0; overlap_copies = true }");
  EXPECT_NEAR(Serial, 3.193, 0.32);
  EXPECT_NEAR(Overlapped, 2.881, 0.29);
  EXPECT_LT(Overlapped, Serial);
  // A node's GPUs share its DRAM: the same shard on a 4-GPU tray with a
  // faster host and link steps faster.
  EXPECT_LT(
      predict(one(recipe("qwen3_30b_a3b", "gb200_nvl72", 16,
                         std::string(Shape) + "  parallel { tp = 2; pp = 2; ep = 4 }\n  offload { optimizer = 1.0 }")))
          .Optimizer,
      Serial);
}

// A frozen language model runs no weight-gradient GEMMs: a faster step, and
// fewer model FLOPs per token.
TEST(PerfStepTime, FrozenLanguageModelSkipsWeightGradients) {
  std::string Base = std::string(Shape) + "  parallel { ep = 8 }\n";
  Recipe Trained = one(recipe("qwen3_30b_a3b", "h100_sxm", 8, Base));
  Recipe Frozen = one(recipe("qwen3_30b_a3b", "h100_sxm", 8, Base + "  language { frozen = true }"));
  EXPECT_LT(predict(Frozen).Compute, predict(Trained).Compute);
  EXPECT_NEAR(countFlops(Frozen).DecoderPerToken / countFlops(Trained).DecoderPerToken, 2.0 / 3.0, 1e-9);
}

TEST(PerfStepTime, SoftmaxExponentialsRunAtTheSfuRate) {
  // The same GPUs with and without their per-SM rates: without them the
  // attention core runs at AttentionEfficiency, the H100 figure at head dim
  // 128 that already contains H100's exponentials.
  const char *Prelude = "gpu h100_rates_unknown {\n"
                        "  arch = hopper; sm = 90; memory = 80GB; hbm = 3.35TB/s; bf16 = 989TFLOPS; fp8 = 1979TFLOPS\n"
                        "  gpus_per_node = 8; nvlink_domain = 8; nvlink = 450GB/s; network = 50GB/s\n"
                        "  multiprocessors = 132; host_memory = 614GB/s; host_link = 64GB/s\n}\n"
                        "gpu b200_ultra_sfu extends b200 { exp_per_clock = 32 }\n";
  std::string Body = "  seq_len = 32K\n  precision = bf16\n  dispatcher = hybridep\n"
                     "  batch { micro = 1; global = 8 }\n  parallel { ep = 8 }";
  auto compute = [&](const char *Gpu, const char *Model = "qwen3_30b_a3b") {
    return predict(one(recipe(Model, Gpu, 8, Body, Prelude))).Compute;
  };
  // Qwen3-30B has head dim 128: on H100 the anchor is what it was.
  EXPECT_NEAR(compute("h100_sxm") / compute("h100_rates_unknown"), 1.0, 1e-12);
  // Blackwell doubled the tensor cores, not the SFUs: B200's attention is
  // exponential-bound; Blackwell Ultra's doubled SFUs restore Hopper's
  // balance of one exponential per 256 tensor FLOPs.
  double B200 = compute("b200"), Ultra = compute("b200_ultra_sfu");
  EXPECT_GT(B200, 1.05 * Ultra);
  // Per forward FLOP of attention, in units of 1 / peak: the tensor part
  // 1/0.46 - (2/3) / (512 / 256) = 1.8406, the exponentials (2/3) / (512 x
  // e), e = exponentials per tensor FLOP. B200 (e = 16/8192) takes 2.5072,
  // Blackwell Ultra (32/8192) 2.1739 = 1/0.46.
  Recipe R = one(recipe("qwen3_30b_a3b", "b200", 8, Body, Prelude));
  double AttnFlops = 0;
  for (int64_t L = 0; L < R.Model.Layers; ++L)
    AttnFlops += 2 * double(R.Model.Heads * R.Model.HeadDim) * 32768.0 / 2 * 2;
  double PerStep = 3 * AttnFlops * 32768.0 * 1 / 2250e12; // 3 passes, tokens per GPU, 1 / peak
  EXPECT_NEAR((B200 - Ultra) / PerStep, 2.5072 - 2.1739, 2e-3);
  // MLA's wider scores (2 x (192 + 128) FLOPs each) need fewer exponentials
  // per FLOP: on H100 DeepSeek-V3's core runs a little above the anchor.
  EXPECT_LT(compute("h100_sxm", "deepseek_v3"), compute("h100_rates_unknown", "deepseek_v3"));
}

TEST(PerfStepTime, HopperExpertGemmsRunAsPerExpertGemms) {
  // On Hopper, Transformer Engine's grouped expert GEMMs are per-expert cuBLAS
  // GEMMs over streams (HopperGroupedGemmEfficiency, measured on an H200);
  // elsewhere one grouped kernel (GroupedGemmEfficiency). The expert GEMMs'
  // time goes as the inverse of the efficiency; nothing else moves.
  std::string Base = std::string(Shape) + "  parallel { ep = 8 }\n  dispatcher = hybridep\n  precision = bf16\n";
  auto compute = [&](const char *Gpu, double HopperEfficiency) {
    Calibration C = Calibration::defaults();
    C.HopperGroupedGemmEfficiency = HopperEfficiency;
    Recipe R = one(recipe("qwen3_30b_a3b", Gpu, 8, Base));
    return predictStepTime(R, handPlan(R), C).Compute;
  };
  const Calibration &Real = Calibration::defaults();
  double Grouped = Real.GroupedGemmEfficiency;
  double AsGrouped = compute("h100_sxm", Grouped);
  double Measured = compute("h100_sxm", Real.HopperGroupedGemmEfficiency) - AsGrouped;
  double Halved = compute("h100_sxm", Grouped / 2) - AsGrouped; // expert GEMMs twice as long
  EXPECT_GT(Measured, 0);
  EXPECT_NEAR(Measured / Halved, Grouped / Real.HopperGroupedGemmEfficiency - 1, 1e-9);
  EXPECT_LT(Halved, AsGrouped); // the expert GEMMs are part of the compute
  // Blackwell keeps the grouped kernel's efficiency.
  EXPECT_EQ(compute("b200", Real.HopperGroupedGemmEfficiency), compute("b200", Grouped / 2));
}

TEST(PerfStepTime, HopperFp8GemmsPayForSplitAccumulation) {
  // Hopper's FP8 GEMMs under Transformer Engine's delayed and tensorwise
  // recipes promote partial sums in dgrad and wgrad, blockwise in all three;
  // Blackwell accumulates in FP32 and pays nothing. Priced against the same
  // recipe with the slowdown taken away.
  std::string Base = std::string(Shape) + "  parallel { ep = 8 }\n  dispatcher = hybridep\n";
  Calibration Fast = Calibration::defaults();
  Fast.HopperFp8SplitAccumulationSlowdown = 1;
  auto compute = [&](const char *Gpu, const char *Prec, const Calibration &C) {
    Recipe R = one(recipe("qwen3_30b_a3b", Gpu, 8, Base + "  precision = " + Prec));
    return predictStepTime(R, handPlan(R), C).Compute;
  };
  const Calibration &Real = Calibration::defaults();
  // Tensorwise: the backward's GEMMs (two passes of the forward's) run
  // 1.15x; the forward does not. Blockwise also the forward's.
  double Tensorwise = compute("h100_sxm", "fp8.tensorwise", Real) - compute("h100_sxm", "fp8.tensorwise", Fast);
  double Blockwise = compute("h100_sxm", "fp8.blockwise", Real) - compute("h100_sxm", "fp8.blockwise", Fast);
  EXPECT_GT(Tensorwise, 0);
  EXPECT_NEAR(Blockwise / Tensorwise, 3.0 / 2.0, 1e-9);
  EXPECT_NEAR(compute("h100_sxm", "fp8.delayed", Real) - compute("h100_sxm", "fp8.delayed", Fast), Tensorwise, 1e-12);
  // The extra time is 0.15 of the layers' low-precision GEMM time per
  // backward pass: the whole GEMM difference between FP8 and BF16 peaks
  // bounds it from above.
  double Bf16 = compute("h100_sxm", "bf16", Real);
  EXPECT_LT(Tensorwise, 2 * 0.15 * Bf16);
  // No cost in BF16, on Blackwell, or in MXFP8.
  EXPECT_EQ(compute("h100_sxm", "bf16", Real), compute("h100_sxm", "bf16", Fast));
  EXPECT_EQ(compute("b200", "fp8.tensorwise", Real), compute("b200", "fp8.tensorwise", Fast));
  EXPECT_EQ(compute("b200", "mxfp8", Real), compute("b200", "mxfp8", Fast));
  // A frozen language model computes no weight gradients: one promoted
  // backward pass instead of two.
  auto frozenExtra = [&](const Calibration &C) {
    Recipe R = one(
        recipe("qwen3_30b_a3b", "h100_sxm", 8, Base + "  precision = fp8.tensorwise\n  language { frozen = true }"));
    return predictStepTime(R, handPlan(R), C).Compute;
  };
  EXPECT_NEAR((frozenExtra(Real) - frozenExtra(Fast)) / Tensorwise, 0.5, 1e-9);
}
