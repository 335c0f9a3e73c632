//===- MemoryTest.cpp - The per-GPU memory model --------------------------===//
//
// Hand-computed values for a tiny dense and a tiny MoE model, the direction
// of every knob, and sanity on real recipes (the long-context seeds and
// published Bridge configurations ran, so they must fit).
//
//===----------------------------------------------------------------------===//
#include "moec/Model/Memory.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Layout/PipelineLayout.h"
#include "moec/Model/LayerShape.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include <cstdio>
#include <gtest/gtest.h>
#include <map>

using namespace moec;

namespace {

constexpr double GB = 1e9;

/// A pipeline plan built by hand the way Megatron-Core places layers (the
/// explicit layout or the balanced split) with 1F1B / interleaved in-flight
/// counts; the schedule itself is left empty.
PipelinePlan planFor(const Recipe &R) {
  PipelinePlan P;
  P.PP = std::max<int64_t>(R.Parallel.PP, 1);
  P.VPP = std::max<int64_t>(R.Parallel.VPP, 1);
  int64_t DP = std::max<int64_t>(R.Parallel.DP, 1);
  P.Microbatches = std::max<int64_t>(R.GlobalBatch / std::max<int64_t>(R.MicroBatch * DP, 1), 1);
  std::string Text =
      R.Parallel.Layout ? *R.Parallel.Layout : balancedPipelineLayout(R.Model.Layers, R.Model.MtpLayers, P.PP * P.VPP);
  PipelineLayout L;
  LayoutError E;
  EXPECT_TRUE(parsePipelineLayout(Text, L, E)) << Text << ": " << E.Message;
  P.VirtualStages = L.Stages;
  int64_t Next = 0;
  for (const LayoutStage &S : P.VirtualStages) {
    P.FirstLayer.push_back(Next);
    Next += S.DecoderLayers;
  }
  for (int64_t Rank = 0; Rank < P.PP; ++Rank)
    P.PeakInFlight.push_back(P.VPP == 1
                                 ? std::min(P.PP - Rank, P.Microbatches)
                                 : std::min((P.PP - Rank - 1) * 2 + (P.VPP - 1) * P.PP + 1, P.Microbatches * P.VPP));
  return P;
}

/// Recipes from .moe text or files, through Sema as `moec check` does.
class Recipes {
public:
  Recipes() : Diags(SM), S(Diags) {}
  bool loadText(llvm::StringRef Text) {
    S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "test.moe"));
    All = S.analyze();
    return !All.empty();
  }
  bool loadFile(llvm::StringRef Path) {
    S.loadFile(Path);
    All = S.analyze();
    return !All.empty();
  }
  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  Sema S;
  std::vector<Recipe> All;
};

std::string repoRoot() {
  llvm::SmallString<256> P(__FILE__);
  llvm::sys::path::remove_filename(P); // test/unit
  llvm::sys::path::remove_filename(P); // test
  llvm::sys::path::remove_filename(P); // root
  return std::string(P);
}

std::vector<std::string> moeFiles(llvm::StringRef Dir) {
  std::vector<std::string> Files;
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC; It.increment(EC))
    if (llvm::sys::path::extension(It->path()) == ".moe")
      Files.push_back(It->path());
  std::sort(Files.begin(), Files.end());
  return Files;
}

std::string describe(const MemoryEstimate &E) {
  std::string S;
  char Buf[128];
  std::snprintf(Buf, sizeof Buf, "peak %.1f GB of %.1f GB on stage %lld:", E.PeakBytes / GB, E.CapacityBytes / GB,
                (long long)E.PeakStage);
  S += Buf;
  for (auto &[Name, Bytes] : E.PerStage[size_t(E.PeakStage)].items()) {
    std::snprintf(Buf, sizeof Buf, " %s %.1f", Name, Bytes / GB);
    S += Buf;
  }
  return S;
}

} // namespace

namespace {

/// The tiny dense model of the hand-computed test: 2 layers, hidden 64,
/// 4 heads of 16 (no GQA), SwiGLU FFN 128, vocabulary 1000; one GPU with
/// 80 GB, sequence 32, micro batch 1, bf16, Adam with the distributed
/// optimizer, no recompute, no graphs.
Recipe tinyDense() {
  Recipe R;
  R.Name = R.PointName = "tiny_dense";
  ModelSpec &M = R.Model;
  M.Name = "tiny";
  M.Layers = 2;
  M.Hidden = 64;
  M.Heads = 4;
  M.KvHeads = 4;
  M.HeadDim = 16;
  M.FfnHidden = 128;
  M.Vocab = 1000;
  R.Gpu.Name = "test_gpu";
  R.Gpu.MemoryBytes = 80e9;
  R.Gpu.GpusPerNode = R.Gpu.NVLinkDomain = 8;
  R.Nodes = 1;
  R.WorldSize = 1;
  R.SeqLen = 32;
  R.MicroBatch = 1;
  R.GlobalBatch = 1;
  R.Parallel.DP = R.Parallel.EDP = 1;
  return R;
}

/// The tiny MoE model: layer 0 dense (FFN 128), layer 1 MoE with 8 experts
/// of FFN 32, top-2, one shared expert of 32, GQA with 2 query groups; four
/// GPUs: EP 4, DP 4, EDP 1.
Recipe tinyMoE() {
  Recipe R = tinyDense();
  R.Name = R.PointName = "tiny_moe";
  R.Model.KvHeads = 2;
  MoESpec E;
  E.Experts = 8;
  E.TopK = 2;
  E.FfnHidden = 32;
  E.SharedExperts = 1;
  E.SharedFfnHidden = 32;
  E.DenseLayers = 1;
  R.Model.MoE = E;
  R.WorldSize = 4;
  R.GlobalBatch = 4;
  R.Parallel.EP = 4;
  R.Parallel.DP = 4;
  R.Parallel.EDP = 1;
  return R;
}

/// A bigger MoE model for the knobs (4 layers, so pipeline stages differ).
Recipe knobMoE() {
  Recipe R = tinyMoE();
  R.Model.Layers = 4;
  R.Model.Hidden = 256;
  R.Model.Heads = 8;
  R.Model.KvHeads = 2;
  R.Model.HeadDim = 32;
  R.Model.FfnHidden = 512;
  R.Model.Vocab = 4096;
  R.Model.MoE->Experts = 16;
  R.Model.MoE->TopK = 4;
  R.Model.MoE->FfnHidden = 128;
  R.Model.MoE->SharedFfnHidden = 128;
  R.SeqLen = 1024;
  R.MicroBatch = 2;
  R.WorldSize = 8;
  R.GlobalBatch = 64;
  R.Parallel.EP = 4;
  R.Parallel.DP = 8;
  R.Parallel.EDP = 2;
  return R;
}

MemoryEstimate estimate(const Recipe &R) { return estimateMemory(R, planFor(R)); }
const MemoryBreakdown &peak(const MemoryEstimate &E) { return E.PerStage[size_t(E.PeakStage)]; }

} // namespace

TEST(MemoryModel, TinyDenseByHand) {
  const Calibration &C = Calibration::defaults();
  Recipe R = tinyDense();
  MemoryEstimate E = estimate(R);
  ASSERT_EQ(E.PerStage.size(), 1u);
  const MemoryBreakdown &B = E.PerStage[0];
  // Parameters, all dense:
  //   attention  q, k, v, o: 2*64*(4*16) + 2*64*(4*16)          = 16384
  //   SwiGLU     3*64*128                                       = 24576
  //   norms      2*64                                           =   128
  //   one layer                                                 = 41088, x2 = 82176
  //   embedding 1000*64 + untied output 1000*64 + final norm 64 = 128064
  //   total                                                     = 210240
  double Params = 210240;
  EXPECT_DOUBLE_EQ(B.Weights, C.WeightBytes * Params); // 2 B
  EXPECT_DOUBLE_EQ(B.Gradients, C.GradBytes * Params); // bf16 grad buffer
  // fp32 master + two fp32 moments, DP*CP = 1: nothing to shard.
  EXPECT_DOUBLE_EQ(B.OptimizerState, (C.MasterWeightBytes + C.AdamMomentBytes) * Params);
  // Activations, 32 tokens, one micro batch, bf16:
  //   norms      input norm in + out, pre-MLP norm in + out: 4 * 2*64*32 = 16384
  //   attention  q, k, v 2*(4+4+4)*16*32 = 12288; O 2*64*32 = 4096;
  //              logsumexp 4*4*32 = 512                               = 16896
  //   MLP        fc1 out 2*256*32 = 16384; SwiGLU out 2*128*32 = 8192  = 24576
  //   one layer                                                       = 57856
  //   loss       final norm in + out 2*2*64*32 = 8192; logits 2*1000*32 = 64000
  //   in flight  one micro batch (PP 1): 2*57856 + 72192              = 187904
  //   working    half a layer of gradient temporaries: 0.5*57856      = 28928
  double Layer = 57856;
  EXPECT_DOUBLE_EQ(B.Activations, 2 * Layer + 72192 + C.GradTemporaryLayers * Layer);
  EXPECT_DOUBLE_EQ(B.Activations, 216832);
  EXPECT_EQ(B.DispatcherBuffers, 0);
  EXPECT_EQ(B.CudaGraphPools, 0);
  EXPECT_DOUBLE_EQ(B.Reserve, C.FragmentationFraction * B.Activations + C.FixedReserveBytes);
  EXPECT_DOUBLE_EQ(E.PeakBytes, B.total());
  EXPECT_EQ(E.PeakStage, 0);
  EXPECT_DOUBLE_EQ(E.CapacityBytes, 80e9);
  EXPECT_TRUE(E.fits());

  // Per-module activations of one layer, one micro batch.
  std::map<std::string, double> Mod(E.ActivationPerLayerByModule.begin(), E.ActivationPerLayerByModule.end());
  EXPECT_DOUBLE_EQ(Mod["norms"], 16384);
  EXPECT_DOUBLE_EQ(Mod["attention"], 16896);
  EXPECT_DOUBLE_EQ(Mod["mlp"], 24576);
  EXPECT_EQ(Mod.count("moe"), 0u);
}

TEST(MemoryModel, TinyMoEByHand) {
  const Calibration &C = Calibration::defaults();
  Recipe R = tinyMoE();
  MemoryEstimate E = estimate(R);
  ASSERT_EQ(E.PerStage.size(), 1u);
  const MemoryBreakdown &B = E.PerStage[0];
  // Parameters:
  //   layer 0 (dense): attention 2*64*64 + 2*64*(2*16) = 12288, SwiGLU 24576,
  //                    norms 128                                   = 36992
  //   layer 1 (MoE):   attention 12288, norms 128, router 64*8 = 512,
  //                    shared expert 3*64*32 = 6144                = 19072 dense
  //                    8 experts / EP 4 = 2 local x 3*64*32        = 12288 expert
  //   embedding + output + final norm                             = 128064
  double Dense = 36992 + 19072 + 128064, Expert = 12288;
  EXPECT_DOUBLE_EQ(B.Weights, C.WeightBytes * (Dense + Expert));
  EXPECT_DOUBLE_EQ(B.Gradients, C.GradBytes * (Dense + Expert));
  // Distributed optimizer: dense state over DP*CP = 4, expert state over EDP = 1.
  //   12 * (184128/4 + 12288) = 12 * 58320 = 699840
  EXPECT_DOUBLE_EQ(B.OptimizerState, (C.MasterWeightBytes + C.AdamMomentBytes) * (Dense / 4 + Expert));
  EXPECT_DOUBLE_EQ(B.OptimizerState, 699840);
  // Activations (32 tokens):
  //   layer 0: norms 16384; attention q,k,v 2*(4+2+2)*16*32 = 8192, O 4096,
  //            logsumexp 512 -> 12800; MLP 24576                   = 53760
  //   layer 1: norms 16384 (the MoE norm output feeds the bf16 router);
  //            attention 12800; router 12 B * 8 experts * 32       =  3072
  //            routed copies 32 tokens * top-2 = 64, each: fc1 in 2*64,
  //            fc1 out 2*2*32, SwiGLU out 2*32, metadata 8:
  //            64 * (128 + 128 + 64 + 8)                           = 20992
  //            shared expert: fc1 out 2*2*32*32 + out 2*32*32      =  6144
  //                                                                = 59392
  //   loss 72192; working 0.5 * 59392 = 29696
  EXPECT_DOUBLE_EQ(B.Activations, 53760 + 59392 + 72192 + 29696);
  // alltoall: permuted tokens and expert output, 2 * 64 copies * 64 * 2 B.
  EXPECT_DOUBLE_EQ(B.DispatcherBuffers, 16384);
  std::map<std::string, double> Mod(E.ActivationPerLayerByModule.begin(), E.ActivationPerLayerByModule.end());
  EXPECT_DOUBLE_EQ(Mod["router"], 3072);
  EXPECT_DOUBLE_EQ(Mod["moe"], 20992);
  EXPECT_DOUBLE_EQ(Mod["shared_experts"], 6144);
  EXPECT_DOUBLE_EQ(Mod["attention"], 12800);
}

TEST(MemoryModel, ItemsAreInLegendOrder) {
  MemoryBreakdown B;
  B.Weights = 1;
  B.Reserve = 7;
  auto Items = B.items();
  ASSERT_EQ(Items.size(), 7u);
  EXPECT_STREQ(Items[0].first, "weights");
  EXPECT_STREQ(Items[3].first, "activations");
  EXPECT_STREQ(Items[6].first, "reserve");
  EXPECT_EQ(Items[6].second, 7);
  EXPECT_EQ(B.total(), 8);
}

TEST(MemoryKnobs, DistributedOptimizerShardsOverDpTimesCp) {
  Recipe R = tinyDense();
  R.WorldSize = 4;
  R.GlobalBatch = 4;
  R.Parallel.DP = 2;
  R.Parallel.CP = 2;
  R.Optimizer.Distributed = false;
  double Replicated = peak(estimate(R)).OptimizerState;
  R.Optimizer.Distributed = true;
  double Sharded = peak(estimate(R)).OptimizerState;
  EXPECT_DOUBLE_EQ(Sharded * 4, Replicated); // DP 2 x CP 2
  // Weights and gradients stay whole without FSDP...
  EXPECT_DOUBLE_EQ(peak(estimate(R)).Weights, peak(estimate(tinyDense())).Weights);
  // ...and FSDP shards them too.
  R.Parallel.FSDP = true;
  EXPECT_LT(peak(estimate(R)).Weights, peak(estimate(tinyDense())).Weights);
}

TEST(MemoryKnobs, ExpertParallelDividesExpertWeights) {
  Recipe R = knobMoE();
  R.Model.MoE->SharedExperts = 0;
  R.Model.MoE->SharedFfnHidden = llvm::None;
  R.Model.MoE->DenseLayers = 0;
  auto weights = [&](int64_t EP) {
    Recipe X = R;
    X.Parallel.EP = EP;
    X.Parallel.EDP = X.WorldSize / EP;
    return peak(estimate(X)).Weights;
  };
  // 4 layers x 16 experts x 3*256*128 params x 2 B over EP.
  double Experts = 4 * 16 * 3 * 256 * 128 * 2.0;
  EXPECT_NEAR(weights(2) - weights(4), Experts / 2 - Experts / 4, 1);
  EXPECT_NEAR(weights(4) - weights(8), Experts / 4 - Experts / 8, 1);
}

TEST(MemoryKnobs, OptimizerOffload) {
  Recipe R = knobMoE();
  double Full = peak(estimate(R)).OptimizerState;
  R.OffloadOptimizer = 0.5;
  EXPECT_DOUBLE_EQ(peak(estimate(R)).OptimizerState, Full / 2);
  R.OffloadOptimizer = 1.0;
  EXPECT_EQ(peak(estimate(R)).OptimizerState, 0);
  // Precision-aware: bf16 moments, 8 instead of 12 bytes.
  R.OffloadOptimizer = 0;
  R.Optimizer.PrecisionAware = true;
  EXPECT_DOUBLE_EQ(peak(estimate(R)).OptimizerState, Full * 8 / 12);
}

TEST(MemoryKnobs, RecomputeOrder) {
  Recipe R = knobMoE();
  double None = peak(estimate(R)).Activations;
  R.Recompute.Kind = RecomputeKind::Selective;
  R.Recompute.Modules = {RecomputeModule::MoeAct, RecomputeModule::LayerNorm};
  double Selective = peak(estimate(R)).Activations;
  R.Recompute.Modules = {RecomputeModule::Moe};
  double SelectiveMoe = peak(estimate(R)).Activations;
  R.Recompute.Modules.clear();
  R.Recompute.Kind = RecomputeKind::Full;
  R.Recompute.Layers = 1;
  double Full = peak(estimate(R)).Activations;
  EXPECT_LT(Full, Selective);
  EXPECT_LT(Selective, None);
  EXPECT_LT(SelectiveMoe, Selective); // the whole MoE block beats its activation
  // Uniform with more layers per checkpoint stores fewer inputs but
  // recomputes more at once; block keeps the layers past N.
  R.Recompute.Method = RecomputeMethod::Block;
  R.Recompute.Layers = 2;
  double Block2 = peak(estimate(R)).Activations;
  EXPECT_GT(Block2, Full);
  EXPECT_LT(Block2, None);
  // An empty selective list is a valid "none".
  R.Recompute = RecomputeConfig();
  R.Recompute.Kind = RecomputeKind::Selective;
  EXPECT_DOUBLE_EQ(peak(estimate(R)).Activations, None);
}

TEST(MemoryKnobs, SelectiveModulesDropTheirTensors) {
  Recipe R = knobMoE();
  R.Model.MoE->DenseLayers = 0; // the reported (largest) layer is then MoE
  R.Model.MLA = MLASpec{64, 32, 32, 16, 32};
  auto module = [&](std::initializer_list<RecomputeModule> Mods, const char *Name) {
    Recipe X = R;
    if (Mods.size()) {
      X.Recompute.Kind = RecomputeKind::Selective;
      X.Recompute.Modules.assign(Mods.begin(), Mods.end());
    }
    for (auto &[N, Bytes] : estimate(X).ActivationPerLayerByModule)
      if (N == Name)
        return Bytes;
    return -1.0;
  };
  EXPECT_LT(module({RecomputeModule::MlaUpProj}, "attention"), module({}, "attention"));
  EXPECT_LT(module({RecomputeModule::CoreAttn}, "attention"), module({}, "attention"));
  EXPECT_LT(module({RecomputeModule::LayerNorm}, "norms"), module({}, "norms"));
  EXPECT_LT(module({RecomputeModule::MoeAct}, "moe"), module({}, "moe"));
  EXPECT_EQ(module({RecomputeModule::Moe}, "moe"), 0);
  EXPECT_EQ(module({RecomputeModule::Moe}, "router"), 0);
  EXPECT_EQ(module({RecomputeModule::SharedExperts}, "shared_experts"), 0);
  // mlp does nothing on MoE layers.
  EXPECT_EQ(module({RecomputeModule::Mlp}, "moe"), module({}, "moe"));
}

TEST(MemoryKnobs, ContextParallelHalvesActivations) {
  Recipe R = knobMoE();
  double Cp1 = peak(estimate(R)).Activations;
  R.Parallel.CP = 2;
  R.Parallel.DP = 4; // same world size
  double Cp2 = peak(estimate(R)).Activations;
  EXPECT_NEAR(Cp2 / Cp1, 0.5, 1e-9);
}

TEST(MemoryKnobs, SequenceParallelSplitsOutsideTpRegions) {
  Recipe R = knobMoE();
  R.Parallel.TP = 2;
  R.Parallel.DP = 4;
  R.Parallel.SequenceParallel = false;
  double NoSp = peak(estimate(R)).Activations;
  R.Parallel.SequenceParallel = true;
  double Sp = peak(estimate(R)).Activations;
  EXPECT_LT(Sp, NoSp);
  // TP splits the dense weights.
  Recipe T1 = knobMoE();
  EXPECT_LT(peak(estimate(R)).Weights, peak(estimate(T1)).Weights);
}

TEST(MemoryKnobs, PipelineInFlightFrontLoadsRankZero) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Model.MoE->DenseLayers = 0;
  R.Parallel.PP = 4;
  R.Parallel.DP = 2;
  R.Parallel.EDP = 1;
  R.Parallel.EP = 2;
  R.GlobalBatch = 16;
  std::string Layout = "Ett|tt|tt|ttL"; // two layers per stage
  R.Parallel.Layout = Layout;
  PipelinePlan P = planFor(R);
  ASSERT_EQ(P.PeakInFlight, (std::vector<int64_t>{4, 3, 2, 1}));
  MemoryEstimate E = estimateMemory(R, P);
  ASSERT_EQ(E.PerStage.size(), 4u);
  // Same layers everywhere: the in-flight count orders the ranks. The last
  // rank carries the logits but holds one micro batch; rank 0 holds four.
  EXPECT_GT(E.PerStage[0].Activations, E.PerStage[1].Activations);
  EXPECT_GT(E.PerStage[1].Activations, E.PerStage[2].Activations);
  EXPECT_GE(E.PerStage[0].Activations, E.PerStage[3].Activations);
  EXPECT_EQ(E.PeakStage, 0);
  // In-flight count scales the held part: doubling rank 0's count raises
  // its activations.
  PipelinePlan P2 = P;
  P2.PeakInFlight[0] = 8;
  EXPECT_GT(estimateMemory(R, P2).PerStage[0].Activations, E.PerStage[0].Activations);
  // A schedule, when given, is simulated instead: F F B B holds two.
  PipelinePlan P3 = P;
  P3.Schedule.assign(4, {});
  P3.Schedule[0] = {{ScheduledOp::Forward, 0, 0},
                    {ScheduledOp::Forward, 1, 0},
                    {ScheduledOp::Backward, 0, 0},
                    {ScheduledOp::Backward, 1, 0}};
  P3.PeakInFlight[0] = 2;
  PipelinePlan P4 = P;
  P4.PeakInFlight[0] = 2;
  EXPECT_DOUBLE_EQ(estimateMemory(R, P3).PerStage[0].Activations, estimateMemory(R, P4).PerStage[0].Activations);
}

TEST(MemoryKnobs, InterleavedChunksFollowMegatronOrder) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Model.MoE->DenseLayers = 0;
  R.Parallel.PP = 2;
  R.Parallel.VPP = 2;
  R.Parallel.DP = 4;
  R.Parallel.EDP = 1;
  R.GlobalBatch = 32;
  PipelinePlan P = planFor(R);
  // Megatron: rank 0 warms up (2-0-1)*2 + (2-1)*2 = 4 chunks, holds 5.
  ASSERT_EQ(P.PeakInFlight, (std::vector<int64_t>{5, 3}));
  MemoryEstimate E = estimateMemory(R, P);
  EXPECT_GT(E.PerStage[0].Activations, E.PerStage[1].Activations * 0.9);
}

TEST(MemoryKnobs, LowPrecisionWeightsAndActivations) {
  Recipe R = knobMoE();
  MemoryEstimate Bf16 = estimate(R);
  R.Prec = Precision::MXFP8;
  MemoryEstimate Fp8 = estimate(R);
  // A cached FP8 copy of the layer GEMM weights, FP8 saved GEMM inputs.
  EXPECT_GT(peak(Fp8).Weights, peak(Bf16).Weights);
  EXPECT_LT(peak(Fp8).Activations, peak(Bf16).Activations);
  // fp8_param_gather: FP8 parameters replace the bf16 ones.
  R.Fp8ParamGather = true;
  EXPECT_LT(peak(estimate(R)).Weights, peak(Bf16).Weights);
}

// offload.activations = [modules]: those inputs leave the GPU but for the
// layers Megatron keeps resident (Calibration::OffloadResidentLayers).
TEST(MemoryKnobs, FineGrainedOffloadMovesModuleInputsToTheHost) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  MemoryEstimate Base = estimate(R);
  EXPECT_EQ(Base.OffloadedPerMicrobatch.front(), 0);
  R.OffloadModules = {OffloadModule::CoreAttn, OffloadModule::AttnProj};
  MemoryEstimate Attn = estimate(R);
  EXPECT_LT(peak(Attn).Activations, peak(Base).Activations);
  EXPECT_GT(Attn.OffloadedPerMicrobatch.front(), 0);
  R.OffloadModules.push_back(OffloadModule::ExpertFc1);
  MemoryEstimate More = estimate(R);
  EXPECT_LT(peak(More).Activations, peak(Attn).Activations);
  EXPECT_GT(More.OffloadedPerMicrobatch.front(), Attn.OffloadedPerMicrobatch.front());
  // Weights, gradients and optimizer state do not move.
  EXPECT_DOUBLE_EQ(peak(More).Weights, peak(Base).Weights);
  EXPECT_DOUBLE_EQ(peak(More).OptimizerState, peak(Base).OptimizerState);
  // Recomputing the whole MoE block leaves nothing inside it to offload.
  R.Recompute.Kind = RecomputeKind::Selective;
  R.Recompute.Modules = {RecomputeModule::Moe};
  Recipe NoFc1 = R;
  NoFc1.OffloadModules = {OffloadModule::CoreAttn, OffloadModule::AttnProj};
  EXPECT_DOUBLE_EQ(estimate(R).OffloadedPerMicrobatch.front(), estimate(NoFc1).OffloadedPerMicrobatch.front());
}

TEST(MemoryKnobs, DispatchersAndGraphs) {
  Recipe R = knobMoE();
  R.Dispatch = Dispatcher::AllToAll;
  double A2A = peak(estimate(R)).DispatcherBuffers;
  R.Dispatch = Dispatcher::DeepEP;
  double DeepEP = peak(estimate(R)).DispatcherBuffers;
  R.Dispatch = Dispatcher::HybridEP;
  double HybridEP = peak(estimate(R)).DispatcherBuffers;
  EXPECT_GT(A2A, 0);
  EXPECT_GT(DeepEP, A2A);   // preallocated NVL rings
  EXPECT_GT(HybridEP, A2A); // worst-case preallocation
  // Dense models have no dispatcher.
  EXPECT_EQ(peak(estimate(tinyDense())).DispatcherBuffers, 0);

  R.CudaGraph = {GraphScope::Attn, GraphScope::MoeRouter, GraphScope::MoePreprocess};
  double Scoped = peak(estimate(R)).CudaGraphPools;
  R.CudaGraph = {GraphScope::FullIteration};
  double FullIter = peak(estimate(R)).CudaGraphPools;
  EXPECT_GT(Scoped, 0);
  EXPECT_GT(FullIter, Scoped);
}

TEST(MemoryKnobs, VisionEncoderOnFirstStage) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Parallel.PP = 2;
  R.Parallel.DP = 4;
  R.Parallel.EDP = 1;
  R.GlobalBatch = 32;
  MemoryEstimate Text = estimate(R);
  VisionSpec V;
  V.Layers = 4;
  V.Hidden = 128;
  V.Heads = 4;
  V.FfnHidden = 512;
  V.PatchSize = 16;
  V.SpatialMerge = 2;
  R.Model.Vision = V;
  // Mock data carries no images: the encoder's weights, no activations.
  MemoryEstimate Mock = estimate(R);
  EXPECT_GT(Mock.PerStage[0].Weights, Text.PerStage[0].Weights);
  EXPECT_DOUBLE_EQ(Mock.PerStage[0].Activations, Text.PerStage[0].Activations);
  R.Data = DataSourceKind::Real;
  MemoryEstimate Vlm = estimate(R);
  EXPECT_GT(Vlm.PerStage[0].Weights, Text.PerStage[0].Weights);
  EXPECT_GT(Vlm.PerStage[0].Activations, Text.PerStage[0].Activations);
  EXPECT_DOUBLE_EQ(Vlm.PerStage[1].Weights, Text.PerStage[1].Weights);
  // Frozen: bf16 weights only, nothing for backward.
  R.VisionFrozen = true;
  MemoryEstimate Frozen = estimate(R);
  EXPECT_DOUBLE_EQ(Frozen.PerStage[0].Gradients, Text.PerStage[0].Gradients);
  EXPECT_DOUBLE_EQ(Frozen.PerStage[0].Activations, Text.PerStage[0].Activations);
  EXPECT_GT(Frozen.PerStage[0].Weights, Text.PerStage[0].Weights);
}

TEST(MemoryKnobs, LinearAttentionAndMtp) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Model.MoE->DenseLayers = 0;
  R.Model.LinearAttention = LinearAttentionSpec{4, 4, 8, 32};
  MemoryEstimate Gdn = estimate(R);
  std::map<std::string, double> Mod(Gdn.ActivationPerLayerByModule.begin(), Gdn.ActivationPerLayerByModule.end());
  EXPECT_GT(Mod["linear_attention"], 0); // the largest layer is a GDN layer here
  R.Model.MtpLayers = 1;
  MemoryEstimate Mtp = estimate(R);
  EXPECT_GT(peak(Mtp).Weights, peak(Gdn).Weights);
  EXPECT_GT(peak(Mtp).Activations, peak(Gdn).Activations);
}

TEST(MemoryKnobs, EmptyPlanFallsBackToEvenSplit) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Parallel.PP = 2;
  R.Parallel.DP = 4;
  R.Parallel.EDP = 1;
  R.GlobalBatch = 32;
  MemoryEstimate Planned = estimate(R);
  MemoryEstimate Bare = estimateMemory(R, PipelinePlan());
  ASSERT_EQ(Bare.PerStage.size(), 2u);
  EXPECT_NEAR(Bare.PeakBytes, Planned.PeakBytes, 1e-6 * Planned.PeakBytes);
}

//===----------------------------------------------------------------------===//
// Real recipes: the long-context seeds and the published Bridge
// configurations ran, so they must fit.
//===----------------------------------------------------------------------===//

namespace {

void checkFiles(const std::vector<std::string> &Files, unsigned &Checked) {
  for (const std::string &Path : Files) {
    SCOPED_TRACE(Path);
    Recipes Rs;
    ASSERT_TRUE(Rs.loadFile(Path)) << "no recipe in " << Path;
    for (const Recipe &R : Rs.All) {
      MemoryEstimate E = estimate(R);
      ASSERT_FALSE(E.PerStage.empty());
      EXPECT_EQ(E.PerStage.size(), size_t(std::max<int64_t>(R.Parallel.PP, 1)));
      EXPECT_FALSE(E.ActivationPerLayerByModule.empty());
      EXPECT_TRUE(E.fits()) << R.PointName << ": " << describe(E);
      // Tuned recipes use their memory: a model that predicts a small
      // fraction of the GPU is missing something.
      EXPECT_GT(E.PeakBytes, 0.25 * E.CapacityBytes) << R.PointName << ": " << describe(E);
      ++Checked;
    }
  }
}

} // namespace

TEST(MemoryRecipes, LongContextSeedsFit) {
  std::vector<std::string> Files = moeFiles(repoRoot() + "/examples/long-context");
  ASSERT_GE(Files.size(), 3u);
  unsigned Checked = 0;
  checkFiles(Files, Checked);
  EXPECT_GE(Checked, 3u);
}

TEST(MemoryRecipes, PublishedConfigsFit) {
  std::vector<std::string> Files = moeFiles(repoRoot() + "/examples/published");
  ASSERT_FALSE(Files.empty());
  unsigned Checked = 0;
  checkFiles(Files, Checked);
  EXPECT_GE(Checked, 50u);
}

TEST(MemoryRecipes, VlmExamplesFit) {
  unsigned Checked = 0;
  checkFiles(moeFiles(repoRoot() + "/examples/vlm"), Checked);
  EXPECT_GE(Checked, 2u);
}

// The memory model, the step model and the FLOPs count read one layerShape.
TEST(LayerShape, MtpLayerRunsFullAttentionButMegatronCountsThePattern) {
  Recipes Rs;
  ASSERT_TRUE(Rs.loadText(R"(
recipe next {
  model = qwen3_next_80b_a3b; cluster { gpu = b200; nodes = 1 }
  seq_len = 4K; batch { micro = 1; global = 8 }
  parallel { ep = 8 }
  precision = mxfp8
  bf16_layers { first = 1; last = 1 }
}
)"));
  const Recipe &R = Rs.All.front();
  const ModelSpec &M = R.Model;
  ASSERT_EQ(M.MtpLayers, 1);
  // Every 4th layer (1-based) is full attention, with QK norm and the gate.
  EXPECT_EQ(layerShape(M, 0, &R).Mixer, MixerKind::GatedDeltaNet);
  LayerShape Full = layerShape(M, 3, &R);
  EXPECT_EQ(Full.Mixer, MixerKind::Attention);
  EXPECT_TRUE(Full.QkNorm);
  EXPECT_TRUE(Full.OutputGate);
  EXPECT_FALSE(layerShape(M, 0, &R).QkNorm); // no q/k norm in a DeltaNet layer
  // Index 48 is the MTP layer: (48 + 1) % 4 != 0, yet Megatron builds it
  // with standard attention, MoE like the last decoder layer, not in BF16.
  LayerShape Mtp = layerShape(M, M.Layers, &R);
  EXPECT_TRUE(Mtp.Mtp);
  EXPECT_EQ(Mtp.Mixer, MixerKind::Attention);
  EXPECT_TRUE(Mtp.MoE);
  EXPECT_FALSE(Mtp.Bf16);
  EXPECT_TRUE(layerShape(M, M.Layers - 1, &R).Bf16);
  EXPECT_EQ(layerShape(M, M.Layers, &R, LayerView::MegatronFlops).Mixer, MixerKind::GatedDeltaNet);
}

TEST(LayerShape, StageSplitIsThePlansOrMegatronsEvenSplit) {
  Recipe R = knobMoE();
  R.Model.Layers = 8;
  R.Model.MtpLayers = 1;
  R.Parallel.PP = 2;
  R.Parallel.DP = 4;
  R.GlobalBatch = 32;
  StageSplit S = stageSplitOf(R, PipelinePlan());
  ASSERT_EQ(S.Stages.size(), 2u);
  EXPECT_EQ(S.Stages[0].DecoderLayers, 4);
  EXPECT_EQ(S.Stages[1].MtpLayers, 1);
  EXPECT_EQ(S.FirstLayer[1], 4);
  // A split Megatron refuses (7 over 2) still gets an estimate.
  R.Model.Layers = 7;
  S = stageSplitOf(R, PipelinePlan());
  ASSERT_EQ(S.Stages.size(), 2u);
  EXPECT_EQ(S.Stages[0].DecoderLayers + S.Stages[1].DecoderLayers, 7);
}

// bridge-facts.md rule 39: TE-scoped graphs cost "a few GB" at PP = 1 and
// "over 10 GB with PP > 1".
TEST(MemoryRecipes, GraphPoolAnchors) {
  Recipes Rs;
  ASSERT_TRUE(Rs.loadText(R"(
recipe q30_pp1 {
  model      = qwen3_30b_a3b
  cluster    { gpu = h100_sxm; gpus = 16 }
  seq_len    = 4K
  batch      { micro = 1; global = 1024 }
  parallel   { tp = 1; cp = 1; ep = 16; etp = 1; pp = 1 }
  dispatcher = hybridep
  cuda_graph = [attn, moe_router, moe_preprocess]
  data       { source = mock }
}
recipe dsv3_pp4 {
  model      = deepseek_v3
  cluster    { gpu = b200; gpus = 256 }
  seq_len    = 4K
  batch      { micro = 1; global = 2048 }
  parallel   { tp = 1; cp = 1; ep = 32; etp = 1; pp = 4; vpp = 4; layout = "Et*4|(tttt|)*14tmL" }
  precision  = mxfp8
  dispatcher = deepep
  recompute  = selective(mla_up_proj, moe_act)
  cuda_graph = [attn, moe_router, moe_preprocess]
  data       { source = mock }
}
)"));
  ASSERT_EQ(Rs.All.size(), 2u);
  double Pp1 = peak(estimate(Rs.All[0])).CudaGraphPools, Pp4 = peak(estimate(Rs.All[1])).CudaGraphPools;
  EXPECT_GT(Pp1, 1e9);
  EXPECT_LT(Pp1, 6e9);
  EXPECT_GT(Pp4, 10e9);
}

TEST(MemoryRecipes, FromText) {
  // Sema from text, as `moec check` builds it; Qwen3-30B-A3B on 16 H100,
  // the Bridge verification card's "peak alloc < 65 GiB" configuration.
  Recipes Rs;
  ASSERT_TRUE(Rs.loadText(R"(
recipe q30 {
  model      = qwen3_30b_a3b
  cluster    { gpu = h100_sxm; gpus = 16 }
  seq_len    = 4K
  batch      { micro = 1; global = 1024 }
  parallel   { tp = 1; cp = 1; ep = 16; etp = 1; pp = 1 }
  precision  = bf16
  dispatcher = hybridep
  recompute  = none
  cuda_graph = [moe_router, moe_preprocess]
  optimizer  { precision_aware = true }
  data       { source = mock }
}
)"));
  const Recipe &R = Rs.All.front();
  MemoryEstimate E = estimate(R);
  EXPECT_TRUE(E.fits()) << describe(E);
  // Allocated memory (without the allocator reserve) under the card's gate.
  const MemoryBreakdown &B = peak(E);
  double Allocated = B.total() - B.Reserve;
  EXPECT_LT(Allocated, 65.0 * 1024 * 1024 * 1024) << describe(E);
  EXPECT_GT(Allocated, 30e9) << describe(E);
  // More micro-batch tokens need more memory.
  Recipe Big = R;
  Big.MicroBatch = 4;
  EXPECT_GT(estimate(Big).PeakBytes, E.PeakBytes);
}

TEST(MemoryRecipes, PlannedPipelinesAgree) {
  // With planPipeline's plan (its schedule is simulated) the published
  // configurations still fit, and the peak stays close to the hand-built
  // plan's (layouts and in-flight counts agree; chunk composition may not).
  unsigned Compared = 0;
  for (const std::string &Path : moeFiles(repoRoot() + "/examples/published")) {
    SCOPED_TRACE(Path);
    Recipes Rs;
    ASSERT_TRUE(Rs.loadFile(Path));
    for (const Recipe &R : Rs.All) {
      llvm::Expected<PipelinePlan> P = pipelineFor(R);
      if (!P) {
        ADD_FAILURE() << R.PointName << ": " << llvm::toString(P.takeError());
        continue;
      }
      MemoryEstimate Planned = estimateMemory(R, *P), Hand = estimate(R);
      EXPECT_NEAR(Planned.PeakBytes / Hand.PeakBytes, 1.0, 0.15) << R.PointName;
      EXPECT_TRUE(Planned.fits()) << R.PointName << ": " << describe(Planned);
      ++Compared;
    }
  }
  EXPECT_GE(Compared, 50u);
}

// Low-precision parameters replace the bf16 copy: FP8 (fp8_param_gather)
// weights take 1 B per parameter, FP4 (fp4_param_gather, NVFP4) 0.5625 B,
// against 2 B of bf16 plus the cached quantized copy.
TEST(MemoryKnobs, LowPrecisionParametersReplaceTheBf16Copy) {
  Recipe R = knobMoE();
  R.Prec = Precision::NVFP4;
  double Bf16Params = peak(estimate(R)).Weights;
  R.Fp4ParamGather = true;
  double Fp4Params = peak(estimate(R)).Weights;
  EXPECT_LT(Fp4Params, Bf16Params);
  EXPECT_NEAR(Fp4Params / Bf16Params, 0.5625 / (2.0 + 0.5625), 0.2);
  // FP4 parameters mean nothing under an FP8 recipe; FP8 ones do.
  R.Prec = Precision::MXFP8;
  double Mx = peak(estimate(R)).Weights;
  R.Fp8ParamGather = true;
  EXPECT_LT(peak(estimate(R)).Weights, Mx);
}

// A frozen language model keeps its weights but has no gradients and no
// optimizer state (Megatron-Bridge freeze_language_model).
TEST(MemoryKnobs, FrozenLanguageModelHasNoGradientsOrOptimizerState) {
  Recipe R = knobMoE();
  MemoryBreakdown Trained = peak(estimate(R));
  R.LanguageFrozen = true;
  MemoryBreakdown Frozen = peak(estimate(R));
  EXPECT_EQ(Frozen.Gradients, 0);
  EXPECT_EQ(Frozen.OptimizerState, 0);
  EXPECT_GT(Frozen.Weights, 0);
  EXPECT_LT(Frozen.total(), Trained.total());
}
