//===- Performance.cpp - FLOPs and predicted step time ----------------------===//
//
// FLOPs follow Megatron-LM's num_floating_point_operations (training.py):
// every GEMM x3 (forward, dgrad, wgrad) and x2 (multiply-add), SwiGLU MLPs,
// routed experts at top-k plus shared experts, dense first-k layers, MLA and
// Gated-DeltaNet (linear attention) terms, core attention at the causal half,
// MTP layers (each one an extra decoder layer of the kind of the last layer,
// plus its norms, projection and logits), logits over the vocabulary padded
// to a multiple of 128 x TP. The VLM vision encoder and projector are added
// per image.
//
// The step-time model prices one micro batch on every pipeline rank, layer
// by layer, then multiplies by the micro batches and adds the bubble and
// the per-step data-parallel and optimizer work:
//
//   layer pass = max(GPU time + exposed communication, host issue time)
//   GPU time   = GEMM FLOPs / (precision peak x efficiency)
//              + core-attention FLOPs / (BF16 peak x attention efficiency)
//              + memory-bound bytes / (HBM bandwidth x efficiency)
//
// with balanced routing (every published run is force-balanced), so each GPU
// of a stage does 1 / (TP x CP) of the stage's FLOPs per micro batch.
// Communication: TP collectives, the CP K/V ring (its excess over the
// attention it overlaps), EP dispatch/combine over NVLink or the network at
// the dispatcher's efficiency, PP sends, DP reduce-scatter/all-gather. The
// step is M x the slowest rank's micro batch / (1 - bubble) + exposed DP +
// the optimizer step.
//
// Assumptions the schema does not carry: SwiGLU MLPs; the attention output
// gate of the Qwen3-Next / Qwen3.5 family (models with linear attention);
// MCore's output layer in BF16 under every precision recipe; VLM payload
// from Calibration (mock data: no images).
//
//===----------------------------------------------------------------------===//
#include "moec/Model/Performance.h"

#include "moec/Layout/PipelineLayout.h"
#include "moec/Model/LayerShape.h"
#include "moec/Model/Memory.h"
#include "llvm/ADT/STLExtras.h"
#include <algorithm>
#include <cmath>

using namespace moec;

namespace {

/// Activations, gradients and dispatched tokens are BF16.
constexpr double ActBytes = 2.0;
/// Megatron pads the vocabulary to a multiple of this x TP
/// (make_vocab_size_divisible_by).
constexpr int64_t VocabPadding = 128;

double paddedVocab(const ModelSpec &M, int64_t TP) {
  int64_t Multiple = VocabPadding * std::max<int64_t>(TP, 1);
  return double((M.Vocab + Multiple - 1) / Multiple * Multiple);
}

/// Probability that none of Draws distinct items, drawn uniformly from
/// Total, falls among Marked of them (hypergeometric).
double missAll(double Total, double Marked, double Draws) {
  double P = 1;
  for (double I = 0; I < Draws; ++I)
    P *= std::max(0.0, Total - Marked - I) / (Total - I);
  return P;
}

using AttnKind = MixerKind;
/// Forward FLOPs per token of one layer, by module (Megatron's counting).
struct LayerFlops {
  double AttnProj = 0; // projections (MLA: down projections and norms)
  double MlaUp = 0;    // MLA up projections
  double AttnCore = 0; // softmax core at the causal half, or GDN conv + delta rule
  double DenseMlp = 0, Experts = 0, Shared = 0;
  double MtpProj = 0; // MTP norms and eh projection
  double Logits = 0;  // an MTP layer's own logits
  double gemm() const { return AttnProj + MlaUp + DenseMlp + Experts + Shared + MtpProj; }
  double total() const { return gemm() + AttnCore + Logits; }
};

/// Forward memory-bound elements (BF16 reads + writes) per token of a layer.
struct LayerMemory {
  double Norm = 0;     // RMSNorms (recompute module layernorm)
  double MoeAct = 0;   // SwiGLU of the routed experts (moe_act)
  double MoeOther = 0; // router, permutation, unpermutation, shared act
  double MlpAct = 0;   // SwiGLU of a dense MLP
  double GdnNorm = 0;  // GDN output norm (gdn_norm_out)
  double Other = 0;    // residuals, RoPE, gates, quantization casts
  double total() const { return Norm + MoeAct + MoeOther + MlpAct + GdnNorm + Other; }
};

int64_t routedFfn(const ModelSpec &M) { return M.MoE ? M.MoE->FfnHidden : 0; }
int64_t sharedFfn(const ModelSpec &M) {
  if (!M.MoE || M.MoE->SharedExperts == 0)
    return 0;
  return M.MoE->SharedFfnHidden ? *M.MoE->SharedFfnHidden : M.MoE->SharedExperts * M.MoE->FfnHidden;
}
int64_t denseFfn(const ModelSpec &M) { return M.FfnHidden ? *M.FfnHidden : 4 * M.Hidden; }

LayerFlops layerFlops(const ModelSpec &M, const LayerShape &S, double Seq, double Vocab, const Calibration &C) {
  LayerFlops F;
  double H = double(M.Hidden);
  switch (S.Mixer) {
  case AttnKind::Attention: {
    double Q = double(M.Heads * M.HeadDim), KV = double(M.KvHeads * M.HeadDim);
    double Gate = S.OutputGate ? Q : 0;
    F.AttnProj = 2 * (H * (Q + 2 * KV + Gate) + Q * H);
    F.AttnCore = 2 * (Q * Seq / 2 * 2);
    break;
  }
  case AttnKind::MLA: {
    const MLASpec &A = *M.MLA;
    double Heads = double(M.Heads), QK = double(A.QkHeadDim), Rope = double(A.QkRopeHeadDim), V = double(A.VHeadDim);
    double QTerm = A.QLoraRank ? double(A.QLoraRank) * (H + Heads * (QK + Rope) + 1) : H * Heads * (QK + Rope);
    double QUp = A.QLoraRank ? double(A.QLoraRank) * Heads * (QK + Rope) : 0;
    double KVTerm = double(A.KvLoraRank) * (H + Heads * (QK + V) + 1);
    double KVUp = double(A.KvLoraRank) * Heads * (QK + V);
    double Rest = H * Rope + Heads * V * H;
    F.MlaUp = 2 * (QUp + KVUp);
    F.AttnProj = 2 * (QTerm + KVTerm + Rest) - F.MlaUp;
    F.AttnCore = 2 * (Seq * Heads * (QK + Rope) / 2 + Seq * Heads * V / 2);
    break;
  }
  case AttnKind::GatedDeltaNet: {
    const LinearAttentionSpec &A = *M.LinearAttention;
    double QK = double(A.KeyHeads * A.HeadDim), V = double(A.ValueHeads * A.HeadDim), NV = double(A.ValueHeads);
    double Conv = double(C.GdnConvKernel);
    F.AttnProj = 2 * (H * (2 * QK + 2 * V + 2 * NV) + H * V);
    F.AttnCore = 2 * (Conv * (2 * QK + V) + NV * double(A.HeadDim) * double(A.HeadDim) * 4);
    break;
  }
  }
  if (S.MoE) {
    F.Experts = 2 * 3 * H * double(routedFfn(M)) * double(M.MoE->TopK);
    F.Shared = 2 * 3 * H * double(sharedFfn(M));
  } else {
    F.DenseMlp = 2 * 3 * H * double(denseFfn(M));
  }
  if (S.Mtp) {
    F.MtpProj = 2 * (3 * H + 2 * H * H);
    F.Logits = 2 * H * Vocab;
  }
  return F;
}

LayerMemory layerMemory(const ModelSpec &M, const LayerShape &S, const Recipe &R) {
  LayerMemory E;
  double H = double(M.Hidden);
  bool LowPrec = R.Prec != Precision::BF16 && !S.Bf16;
  double GemmInputs = 0; // elements quantized before a GEMM (low precision)
  E.Norm = 2 * 2 * H;    // two RMSNorms: read + write
  E.Other = 2 * 3 * H;   // two residual adds
  switch (S.Mixer) {
  case AttnKind::Attention: {
    double Q = double(M.Heads * M.HeadDim), KV = double(M.KvHeads * M.HeadDim);
    E.Other += 2 * (Q + KV); // RoPE on q and k
    if (S.QkNorm)
      E.Norm += 2 * (Q + KV); // RMSNorm on q and k: read + write
    if (S.OutputGate)
      E.Other += 3 * Q; // sigmoid output gate
    GemmInputs += H + Q;
    break;
  }
  case AttnKind::MLA: {
    const MLASpec &A = *M.MLA;
    E.Norm += 2 * double(A.QLoraRank + A.KvLoraRank);
    E.Other += 2 * double(M.Heads * A.QkRopeHeadDim + A.QkRopeHeadDim);
    GemmInputs += H + double(A.QLoraRank + A.KvLoraRank + M.Heads * A.VHeadDim);
    break;
  }
  case AttnKind::GatedDeltaNet: {
    const LinearAttentionSpec &A = *M.LinearAttention;
    double QK = double(A.KeyHeads * A.HeadDim), V = double(A.ValueHeads * A.HeadDim);
    E.Other += 2 * (2 * QK + V) + 3 * V; // conv activation, output gate
    E.GdnNorm = 2 * V;
    GemmInputs += H + V;
    break;
  }
  }
  if (S.MoE) {
    double K = double(M.MoE->TopK), Ffn = double(routedFfn(M)), Sh = double(sharedFfn(M));
    E.MoeAct = 3 * Ffn * K;
    E.MoeOther = H + 3 * double(M.MoE->Experts) + 2 * (1 + K) * H + 3 * Sh;
    // NCCL dispatchers permute before and sort after the exchange (and the
    // reverse on combine); DeepEP/HybridEP fuse the permutation.
    if (R.Parallel.EP > 1 && (R.Dispatch == Dispatcher::AllToAll || R.Dispatch == Dispatcher::AllGather))
      E.MoeOther += 2 * K * H;
    GemmInputs += K * (H + Ffn) + (Sh > 0 ? H + Sh : 0);
  } else {
    double Ffn = double(denseFfn(M));
    E.MlpAct = 3 * Ffn;
    GemmInputs += H + Ffn;
  }
  // Quantization: read BF16, write the row- and column-wise low-precision
  // copies: about two BF16 elements of traffic per input element.
  if (LowPrec)
    E.Other += 2 * GemmInputs;
  return E;
}

double peakFor(const GpuSpec &G, Precision P) {
  switch (P) {
  case Precision::BF16:
    return G.Bf16Flops;
  case Precision::NVFP4:
    return G.Fp4Flops ? *G.Fp4Flops : G.Fp8Flops ? *G.Fp8Flops : G.Bf16Flops;
  default:
    return G.Fp8Flops ? *G.Fp8Flops : G.Bf16Flops;
  }
}

double gemmEfficiency(const Calibration &C, Precision P) {
  switch (P) {
  case Precision::BF16:
    return C.Bf16GemmEfficiency;
  case Precision::NVFP4:
    return C.Fp4GemmEfficiency;
  default:
    return C.Fp8GemmEfficiency;
  }
}

/// Vision encoder + projector forward FLOPs for one image of Patches patches,
/// split into GEMM and attention-core parts (bidirectional attention).
struct VisionFlops {
  double EncoderGemm = 0, EncoderCore = 0, Projector = 0;
};
VisionFlops visionFlopsPerImage(const ModelSpec &M, double Patches, const Calibration &C) {
  VisionFlops F;
  if (!M.Vision || Patches <= 0)
    return F;
  const VisionSpec &V = *M.Vision;
  double Hv = double(V.Hidden), Fv = double(V.FfnHidden), L = double(V.Layers);
  double P = Patches, Merge = double(std::max<int64_t>(V.SpatialMerge, 1));
  double Out = double(V.OutHidden ? *V.OutHidden : M.Hidden);
  double PatchIn = 3.0 * double(C.VisionTemporalPatch) * double(V.PatchSize * V.PatchSize);
  F.EncoderGemm = L * 2 * P * (4 * Hv * Hv + 2 * Hv * Fv) + 2 * P * PatchIn * Hv;
  F.EncoderCore = L * 2 * 2 * P * P * Hv;
  double Merged = P / (Merge * Merge), In = Merge * Merge * Hv;
  F.Projector = 2 * Merged * (In * In + In * Out);
  return F;
}

//===----------------------------------------------------------------------===//
// Step time
//===----------------------------------------------------------------------===//

/// One MoE layer of the EP-overlap schedule (Megatron-Core 0.16.1
/// model_chunk_schedule_plan.py:190-252, TransformerLayerSchedulePlan.run):
/// the forward of one micro batch and the backward of another share the
/// layer, compute on one stream and the four EP exchanges on another,
///
///   comm:    combine_bwd | dispatch_fwd | dispatch_bwd        | combine_fwd
///   compute: attn_fwd    | mlp_bwd      | (mlp_wgrad) mlp_fwd | attn_bwd
///
/// each exchange waiting for the compute that produces its input and each
/// compute for the exchange that feeds it. Both streams are idle at the
/// layer boundary (the next layer's attn_fwd needs combine_fwd, its
/// combine_bwd needs attn_bwd), so a layer is its own makespan. Returns the
/// seconds the exchanges add to the compute.
struct OverlappedLayer {
  double AttnFwd = 0, MlpFwd = 0, MlpBwd = 0, MlpWgrad = 0, AttnBwd = 0, Exchange = 0;
  double exposed() const {
    double X = Exchange;
    double CombineBwd = X, AttnF = AttnFwd; // both start at the layer boundary
    double MlpB = std::max(AttnF, CombineBwd) + MlpBwd;
    double DispatchF = std::max(AttnF, CombineBwd) + X;
    double Wgrad = MlpB + MlpWgrad; // delay_wgrad_compute splits it out
    double DispatchB = std::max(DispatchF, MlpB) + X;
    double MlpF = std::max(Wgrad, DispatchF) + MlpFwd;
    double CombineF = std::max(DispatchB, MlpF) + X;
    double AttnB = std::max(MlpF, DispatchB) + AttnBwd;
    double Compute = AttnFwd + MlpBwd + MlpWgrad + MlpFwd + AttnBwd;
    return std::max(CombineF, AttnB) - Compute;
  }
};

/// Share of a pipeline rank's micro batches whose forward runs paired with
/// another's backward under EP overlap: the warm-up forwards and cool-down
/// backwards run alone (schedules.py get_pp_rank_microbatches: interleaved
/// warm-up (PP - rank - 1) x 2 + (VPP - 1) x PP, plus one under EP overlap;
/// combined_1f1b_schedule_for_no_pipelining pairs all but one without PP).
double pairedShare(int64_t Microbatches, int64_t PP, int64_t VPP, int64_t Rank) {
  double Total = double(std::max<int64_t>(Microbatches, 1) * std::max<int64_t>(VPP, 1));
  double Warmup = 1;
  if (PP > 1)
    Warmup = VPP > 1 ? double((PP - Rank - 1) * 2 + (VPP - 1) * PP + 1) : double(PP - Rank);
  return std::max(0.0, Total - std::min(Warmup, Total)) / Total;
}

/// Per-token costs of one layer, in seconds per token a GPU handles.
struct LayerTime {
  double GpuFwd = 0;          // forward GPU time (GEMM + core + memory-bound)
  double FwdPromotion = 0;    // the part of GpuFwd that split accumulation adds
  double BwdPromotion = 0;    // what it adds to each backward GEMM pass (dgrad, wgrad)
  double ExpertFwd = 0;       // the routed experts' part of it (between dispatch and combine)
  double Recompute = 0;       // forward work redone in the backward
  double RecomputeEpFrac = 0; // fraction of the forward EP exchanges redone
  double RecomputeHost = 0;   // fraction of the forward host time redone
};

FlopCount countFlopsWith(const Recipe &R, const Calibration &C);

class StepModel {
public:
  StepModel(const Recipe &R, const PipelinePlan &P, const Calibration &C, const MemoryEstimate *Memory)
      : R(R), P(P), C(C), M(R.Model), Memory(Memory) {
    ParallelSizes Sizes = ParallelSizes::of(R);
    TP = Sizes.TP;
    CP = Sizes.CP;
    EP = Sizes.EP;
    ETP = Sizes.ETP;
    PP = Sizes.PP;
    World = Sizes.World;
    DP = Sizes.DP;
    EDP = Sizes.EDP;
    Seq = double(std::max<int64_t>(R.SeqLen, 1));
    Mbs = double(std::max<int64_t>(R.MicroBatch, 1));
    Vocab = paddedVocab(M, TP);
    Domain = std::max<int64_t>(R.Gpu.NVLinkDomain, 1);
    PeakBf16 = std::max(R.Gpu.Bf16Flops, 1.0);
    PeakLow = std::max(peakFor(R.Gpu, R.Prec), 1.0);
    EffLow = gemmEfficiency(C, R.Prec);
    Hbm = std::max(R.Gpu.HbmBytesPerSec, 1.0) * C.HbmEfficiency;
    NVL = std::max(R.Gpu.NVLinkBytesPerSec, 1.0);
    Net = std::max(R.Gpu.NetworkBytesPerSec, 1.0);
    // Tokens one GPU handles per micro batch (balanced routing: also the
    // expert work per GPU, in token units).
    TokensPerGpu = Mbs * Seq / double(TP * CP);
    hostCapture();
  }

  StepTimeBreakdown run();

private:
  const Recipe &R;
  const PipelinePlan &P;
  const Calibration &C;
  const ModelSpec &M;
  const MemoryEstimate *Memory; // the plan's, when the caller has it
  int64_t TP, CP, EP, ETP, PP, World, DP, EDP, Domain;
  double Seq, Mbs, Vocab, PeakBf16, PeakLow, EffLow, Hbm, NVL, Net, TokensPerGpu;
  double HostUncapturedDense = 1, HostUncapturedMoE = 1;

  /// A group of Span consecutive ranks talks over NVLink when it fits in one
  /// NVLink domain, else over the network.
  double groupBandwidth(int64_t Span) const {
    return Span <= Domain ? NVL * C.NVLinkEfficiency : Net * C.NetworkEfficiency;
  }

  void hostCapture();
  bool recomputes(RecomputeModule Mod) const {
    return R.Recompute.Kind == RecomputeKind::Selective && llvm::is_contained(R.Recompute.Modules, Mod);
  }
  double gemmRate(const LayerShape &S) const {
    if (R.Prec == Precision::BF16 || S.Bf16)
      return PeakBf16 * C.Bf16GemmEfficiency;
    return PeakLow * EffLow;
  }
  /// How much slower the low-precision GEMMs of a pass run for their split
  /// accumulation (1 where the GPU or the recipe needs none).
  double splitAccumulationSlowdown(bool Backward) const {
    bool Fp8 =
        R.Prec == Precision::FP8Delayed || R.Prec == Precision::FP8Tensorwise || R.Prec == Precision::FP8Blockwise;
    if (!Fp8 || R.Gpu.Arch != GpuArch::Hopper)
      return 1;
    return Backward || R.Prec == Precision::FP8Blockwise ? C.HopperFp8SplitAccumulationSlowdown : 1;
  }
  /// Grouped expert GEMMs against a dense GEMM of the same precision: on
  /// Hopper, Transformer Engine's per-expert GEMMs over streams.
  double groupedGemmEfficiency() const {
    return R.Gpu.Arch == GpuArch::Hopper ? C.HopperGroupedGemmEfficiency : C.GroupedGemmEfficiency;
  }
  double attentionSecondsPerFlop(double FlopsPerScore) const;
  double coreSecondsPerFlop(const LayerShape &S) const;
  LayerTime layerTime(const LayerShape &S, const LayerFlops &F, const LayerMemory &E) const;
  double epExchangeSeconds() const;            // one dispatch (or combine), one micro batch
  double epSmShare() const;                    // share of the SMs the EP kernels occupy
  double tpSeconds(const LayerShape &S) const; // all TP traffic of a layer, one micro batch
  double cpSeconds(const LayerShape &S, double &Hideable) const;
  void paramsOf(const std::vector<LayoutStage> &Stages, const std::vector<int64_t> &First, int64_t Rank, double &Dense,
                double &Expert) const;
};

void StepModel::hostCapture() {
  // The host work of a layer, split evenly between attention, routing and
  // the MLP / experts; a captured scope issues its part as one graph launch.
  bool Full = false, Attn = false, Mlp = false, Moe = false, Router = false, Pre = false;
  for (GraphScope S : R.CudaGraph) {
    Full |= S == GraphScope::FullIteration;
    Attn |= S == GraphScope::Attn || S == GraphScope::Mamba;
    Mlp |= S == GraphScope::Mlp;
    Moe |= S == GraphScope::Moe;
    Router |= S == GraphScope::MoeRouter;
    Pre |= S == GraphScope::MoePreprocess;
  }
  if (Full) {
    HostUncapturedDense = HostUncapturedMoE = 0;
    return;
  }
  double Third = 1.0 / 3.0;
  HostUncapturedDense = 1 - (Attn ? Third : 0) - (Mlp ? 2 * Third : 0);
  double MoE = 1 - (Attn ? Third : 0);
  if (Moe)
    MoE -= 2 * Third;
  else
    MoE -= (Router ? Third / 2 : 0) + (Pre ? Third / 2 : 0);
  HostUncapturedMoE = std::max(MoE, 0.0);
  HostUncapturedDense = std::max(HostUncapturedDense, 0.0);
}

double StepModel::attentionSecondsPerFlop(double FlopsPerScore) const {
  double Measured = 1 / (PeakBf16 * C.AttentionEfficiency);
  const GpuSpec &G = R.Gpu;
  if (FlopsPerScore <= 0 || G.TensorFlopsPerClock <= 0 || G.ExpPerClock <= 0)
    return Measured;
  // Per score element a flash-attention kernel issues FlopsPerScore tensor
  // FLOPs and one exponential in the forward, one more in the backward
  // (P is recomputed), which the forward-units time below carries as 2/3 of
  // an exponential. The special function units do not speed up with the
  // tensor cores, so the tensor part runs at the efficiency that leaves room
  // for the anchor GPU's exponentials inside AttentionEfficiency, and the
  // exponentials at this GPU's own rate.
  auto expSeconds = [&](double ExpPerTensorFlop, double PerScore) {
    return 2.0 / 3.0 / (PerScore * PeakBf16 * ExpPerTensorFlop);
  };
  double Tensor = Measured - expSeconds(C.AttentionAnchorExpPerTensorFlop, 4.0 * double(C.AttentionAnchorHeadDim));
  return Tensor + expSeconds(double(G.ExpPerClock) / double(G.TensorFlopsPerClock), FlopsPerScore);
}

double StepModel::coreSecondsPerFlop(const LayerShape &S) const {
  switch (S.Mixer) {
  case AttnKind::Attention:
    return attentionSecondsPerFlop(4.0 * double(M.HeadDim));
  case AttnKind::MLA: {
    const MLASpec &A = *M.MLA;
    return attentionSecondsPerFlop(2.0 * double(A.QkHeadDim + A.QkRopeHeadDim + A.VHeadDim));
  }
  case AttnKind::GatedDeltaNet:
    break;
  }
  return 1 / (PeakBf16 * C.AttentionEfficiency);
}

LayerTime StepModel::layerTime(const LayerShape &S, const LayerFlops &F, const LayerMemory &E) const {
  double Rate = gemmRate(S), Bf16Rate = PeakBf16 * C.Bf16GemmEfficiency;
  double ExpertRate = Rate * groupedGemmEfficiency();
  auto mem = [&](double Elements) { return Elements * ActBytes / Hbm; };

  double TeGemm = (F.AttnProj + F.MlaUp + F.DenseMlp + F.Shared + F.MtpProj) / Rate + F.Experts / ExpertRate;
  double Gemm = TeGemm + F.Logits / Bf16Rate;
  double Core = F.AttnCore * coreSecondsPerFlop(S);
  double Mem = mem(E.total()) + (S.Mtp ? mem(3 * Vocab) : 0);
  LayerTime T;
  // The layer's Transformer Engine GEMMs run in the recipe's precision (the
  // output layer is BF16, not a TE module).
  double LowGemm = R.Prec == Precision::BF16 || S.Bf16 ? 0 : TeGemm;
  double FwdSlow = splitAccumulationSlowdown(false), BwdSlow = splitAccumulationSlowdown(true);
  T.FwdPromotion = (FwdSlow - 1) * LowGemm;
  T.BwdPromotion = (BwdSlow - 1) * LowGemm;
  T.GpuFwd = Gemm + Core + Mem + T.FwdPromotion;
  if (S.MoE)
    T.ExpertFwd = F.Experts / ExpertRate * (LowGemm > 0 ? FwdSlow : 1) + mem(E.MoeAct);

  switch (R.Recompute.Kind) {
  case RecomputeKind::None:
    break;
  case RecomputeKind::Full:
    T.Recompute = T.GpuFwd;
    T.RecomputeEpFrac = 1;
    T.RecomputeHost = 1;
    break;
  case RecomputeKind::Selective: {
    double X = 0, GemmSlow = LowGemm > 0 ? FwdSlow : 1;
    if (recomputes(RecomputeModule::CoreAttn))
      X += Core;
    if (recomputes(RecomputeModule::MlaUpProj))
      X += F.MlaUp / Rate * GemmSlow;
    if (recomputes(RecomputeModule::LayerNorm))
      X += mem(E.Norm);
    if (recomputes(RecomputeModule::Mlp) && !S.MoE)
      X += F.DenseMlp / Rate * GemmSlow + mem(E.MlpAct);
    if (recomputes(RecomputeModule::GdnNormOut))
      X += mem(E.GdnNorm);
    if (S.MoE) {
      if (recomputes(RecomputeModule::Moe)) {
        X += (F.Experts / ExpertRate + F.Shared / Rate) * GemmSlow + mem(E.MoeAct + E.MoeOther);
        T.RecomputeEpFrac = 1;
        T.RecomputeHost = 1.0 / 3.0;
      } else {
        if (recomputes(RecomputeModule::MoeAct))
          X += mem(E.MoeAct);
        if (recomputes(RecomputeModule::SharedExperts))
          X += F.Shared / Rate * GemmSlow;
      }
    }
    T.Recompute = X;
    break;
  }
  }
  return T;
}

double StepModel::epSmShare() const {
  int64_t Sms = C.NcclSms;
  if (R.Dispatch == Dispatcher::DeepEP || R.Dispatch == Dispatcher::HybridEP)
    Sms = R.MoE.DispatcherSms ? *R.MoE.DispatcherSms : (R.Dispatch == Dispatcher::DeepEP ? C.DeepEpSms : C.HybridEpSms);
  int64_t Total = R.Gpu.Multiprocessors > 0 ? R.Gpu.Multiprocessors : C.DefaultMultiprocessors;
  return std::min(1.0, double(Sms) / double(Total));
}

double StepModel::epExchangeSeconds() const {
  if (!M.MoE || EP <= 1)
    return 0;
  double H = double(M.Hidden), K = double(M.MoE->TopK);
  // EP peers are consecutive ranks (stride ETP); those in the GPU's NVLink
  // domain, and the number of domains the group spans.
  double Peers = double(EP);
  double Local = std::max(1.0, std::min(Peers, double(Domain / std::max<int64_t>(ETP, 1))));
  double Domains = std::ceil(Peers / Local);
  double Tokens = TokensPerGpu;
  double NvlBytes = 0, NetBytes = 0, NvlEff = C.AllToAllEfficiency;
  switch (R.Dispatch) {
  case Dispatcher::AllGather: {
    // Every rank gathers every token of the group (and reduce-scatters back).
    double All = Tokens * H * ActBytes * (Peers - 1);
    NvlBytes = All * (Local - 1) / std::max(Peers - 1, 1.0);
    NetBytes = All - NvlBytes;
    break;
  }
  case Dispatcher::AllToAll: {
    double All = Tokens * K * H * ActBytes;
    NvlBytes = All * (Local - 1) / Peers;
    NetBytes = All * (Peers - Local) / Peers;
    break;
  }
  case Dispatcher::HybridEP:
  case Dispatcher::DeepEP: {
    // Both fused dispatchers send a token once per remote NVLink domain that
    // holds one of its experts and fan it out over NVLink there; combine
    // reduces inside the domain before the copy goes back. DeepEP's
    // internode kernels (tests/test_internode.py counts RDMA bytes per
    // unique (token, node)) and HybridEP (tests/test_hybrid_ep.py,
    // count_rdma_send_from_routing_map) alike; A 4.1 reports both at the NIC
    // rate on those bytes. The fan-out loads NVLink with the copies for the
    // other GPUs of the receiving domain.
    NvlEff = R.Dispatch == Dispatcher::HybridEP ? C.HybridEpEfficiency : C.DeepEpEfficiency;
    double All = Tokens * K * H * ActBytes;
    NvlBytes = All * (Local - 1) / Peers;
    if (Domains > 1) {
      double RemoteHits = domainsReached(*M.MoE, int64_t(Domains)) * (Domains - 1) / Domains;
      NetBytes = Tokens * H * ActBytes * RemoteHits;
      NvlBytes += All * (Peers - Local) / Peers * (Local - 1) / Local;
    }
    break;
  }
  }
  return std::max(NvlBytes / (NVL * NvlEff), NetBytes / (Net * C.NetworkEfficiency));
}

double StepModel::tpSeconds(const LayerShape &S) const {
  double Bytes = 0;
  double Act = Mbs * (Seq / double(CP)) * double(M.Hidden) * ActBytes;
  if (TP > 1) {
    // Under SP, an all-gather before and a reduce-scatter after every
    // TP-sharded block, and their transposes in backward (without SP two
    // all-reduces of twice the volume: the same bytes).
    int Blocks = 1; // attention
    if (!S.MoE)
      ++Blocks;
    else if (sharedFfn(M) > 0)
      ++Blocks;
    Bytes += Blocks * 4 * double(TP - 1) / double(TP) * Act;
  }
  double Seconds = Bytes / groupBandwidth(TP);
  if (S.MoE && ETP > 1) {
    // Expert TP: dispatched tokens all-gathered / reduce-scattered over ETP.
    double Routed = TokensPerGpu * double(M.MoE->TopK) * double(M.Hidden) * ActBytes;
    Seconds += 4 * double(ETP - 1) / double(ETP) * Routed / groupBandwidth(ETP);
  }
  return Seconds;
}

double StepModel::cpSeconds(const LayerShape &S, double &Hideable) const {
  Hideable = 0;
  if (CP <= 1)
    return 0;
  double KV = 0, QO = 0;
  switch (S.Mixer) {
  case AttnKind::Attention:
    KV = 2.0 * double(M.KvHeads * M.HeadDim);
    QO = 2.0 * double(M.Heads * M.HeadDim);
    break;
  case AttnKind::MLA:
    KV = double(M.Heads * (M.MLA->QkHeadDim + M.MLA->QkRopeHeadDim + M.MLA->VHeadDim));
    QO = double(M.Heads * (M.MLA->QkHeadDim + M.MLA->QkRopeHeadDim + M.MLA->VHeadDim));
    break;
  case AttnKind::GatedDeltaNet: {
    // Gated DeltaNet under CP exchanges heads with all-to-alls.
    const LinearAttentionSpec &A = *M.LinearAttention;
    double Elems = double(2 * A.KeyHeads * A.HeadDim + 2 * A.ValueHeads * A.HeadDim);
    double Bytes = 3 * Mbs * (Seq / double(CP)) * Elems / double(TP) * ActBytes * double(CP - 1) / double(CP);
    return Bytes / groupBandwidth(TP * CP);
  }
  }
  double Chunk = Mbs * (Seq / double(CP)) * KV / double(TP) * ActBytes;
  double BW = groupBandwidth(TP * CP);
  switch (R.Parallel.CpCommKind) {
  case CpComm::P2P:
    // Ring: CP - 1 KV chunks forward, KV and dKV backward, overlapped with
    // the attention core. The ring advances in lock step, so a ring that
    // leaves the NVLink domain runs every step at the network hop's speed.
    Hideable = 1;
    return 3 * double(CP - 1) * Chunk / BW;
  case CpComm::A2AP2P: {
    // Hierarchical: an all-to-all inside the inner group turns sequence
    // shards into head shards, then a ring over the outer groups. A ring
    // step moves the same bytes as a flat ring step (Inner times the tokens,
    // 1/Inner of the heads) but there are only Outer - 1 of them, and every
    // GPU drives its own link. Only the ring hides behind the attention core.
    int64_t Inner = R.Parallel.CpHierarchy.empty() ? 1 : std::max<int64_t>(R.Parallel.CpHierarchy.front(), 1);
    Inner = std::min(Inner, CP);
    int64_t Outer = CP / Inner;
    double A2A = Inner > 1 ? 3 * Mbs * (Seq / double(CP)) * (KV + QO) / double(TP) * ActBytes * double(Inner - 1) /
                                 double(Inner) / groupBandwidth(TP * Inner)
                           : 0;
    double Ring = 3 * double(Outer - 1) * Chunk / BW;
    Hideable = Ring > 0 ? Ring / (Ring + A2A) : 0;
    return A2A + Ring;
  }
  case CpComm::AllGather:
    return 2 * double(CP - 1) * Chunk / BW;
  case CpComm::A2A: {
    double Elems = KV + QO;
    return 3 * Mbs * (Seq / double(CP)) * Elems / double(TP) * ActBytes * double(CP - 1) / double(CP) / BW;
  }
  }
  return 0;
}

void StepModel::paramsOf(const std::vector<LayoutStage> &Stages, const std::vector<int64_t> &First, int64_t Rank,
                         double &Dense, double &Expert) const {
  Dense = Expert = 0;
  double H = double(M.Hidden);
  auto layer = [&](int64_t Index) {
    LayerShape S = layerShape(M, Index, &R);
    LayerFlops F = layerFlops(M, S, 0, Vocab, C);
    // Forward FLOPs per token of a GEMM = 2 x its parameters.
    double Attn = (F.AttnProj + F.MlaUp) / 2;
    if (S.Mixer == AttnKind::GatedDeltaNet)
      Attn += double(C.GdnConvKernel) * double(2 * M.LinearAttention->KeyHeads * M.LinearAttention->HeadDim +
                                               M.LinearAttention->ValueHeads * M.LinearAttention->HeadDim);
    Dense += Attn + F.DenseMlp / 2 + F.Shared / 2 + F.MtpProj / 2 + 2 * H;
    if (S.MoE) {
      Dense += H * double(M.MoE->Experts); // router
      Expert += 3 * H * double(routedFfn(M)) * double(M.MoE->Experts);
    }
  };
  for (size_t V = 0; V < Stages.size(); ++V) {
    if (int64_t(V) % PP != Rank)
      continue;
    const LayoutStage &S = Stages[V];
    for (int64_t I = 0; I < S.DecoderLayers; ++I)
      layer(First[V] + I);
    for (int64_t I = 0; I < S.MtpLayers; ++I)
      layer(M.Layers + I);
    if (S.Embedding)
      Dense += Vocab * H;
    if (S.Loss)
      Dense += Vocab * H + H;
  }
  Dense /= double(TP);
  Expert /= double(EP * ETP);
}

StepTimeBreakdown StepModel::run() {
  StepTimeBreakdown B;
  int64_t PerStep = std::max<int64_t>(R.MicroBatch, 1) * DP;
  int64_t Mb = P.PP == PP && P.Microbatches > 0 ? P.Microbatches
                                                : std::max<int64_t>(R.GlobalBatch / std::max<int64_t>(PerStep, 1), 1);
  B.Microbatches = Mb;

  StageSplit Split = stageSplitOf(R, P);
  const std::vector<LayoutStage> &Stages = Split.Stages;
  const std::vector<int64_t> &First = Split.FirstLayer;
  const int64_t VPP = Split.VPP;

  const double Ep = epExchangeSeconds();
  const double EpSmShare = epSmShare();
  const double TpExposed = R.Parallel.TpCommOverlap ? 1 - C.CommOverlap : 1;

  // Per pipeline rank, one micro batch.
  struct RankTime {
    double Compute = 0, Recompute = 0, TP = 0, CP = 0, EP = 0, PP = 0, Host = 0, Offload = 0;
    double DeviceFwd = 0, DeviceBwd = 0; // what the offload copies can hide behind
    double total() const { return Compute + Recompute + TP + CP + EP + PP + Host + Offload; }
  };
  std::vector<RankTime> Ranks(static_cast<size_t>(PP));
  // The same seconds by virtual stage and pass, for the schedule's drawing:
  // per rank they add up to RankTime::total().
  std::vector<double> StageFwd(Stages.size()), StageBwd(Stages.size());
  double FlopsFactor = 3; // forward + backward in units of the forward

  auto addLayer = [&](RankTime &RT, size_t Virtual, int64_t Index) {
    LayerShape S = layerShape(M, Index, &R);
    LayerFlops F = layerFlops(M, S, Seq, Vocab, C);
    LayerMemory E = layerMemory(M, S, R);
    LayerTime T = layerTime(S, F, E);
    double N = TokensPerGpu;
    // Backward: data and weight gradients (2x the forward); a frozen
    // language model computes no weight gradients, so its GEMMs run once
    // more and its attention core twice.
    double Bwd = 2, BwdGemmPasses = 2;
    if (R.LanguageFrozen && F.gemm() + F.AttnCore > 0) {
      Bwd = (F.gemm() + 2 * F.AttnCore) / (F.gemm() + F.AttnCore);
      BwdGemmPasses = 1;
    }
    double GpuF = T.GpuFwd * N, Rec = T.Recompute * N;
    double GpuB = (Bwd * (T.GpuFwd - T.FwdPromotion) + BwdGemmPasses * T.BwdPromotion) * N;
    // Communication of the layer, one micro batch, and what stays exposed.
    double Tp = tpSeconds(S) * TpExposed;
    double Hide = 0;
    double CpRaw = cpSeconds(S, Hide);
    double CoreTrain = FlopsFactor * F.AttnCore * coreSecondsPerFlop(S) * N;
    // Only the ring part (Hide of CpRaw) overlaps with the attention core.
    double Cp = CpRaw * (1 - Hide) + std::max(0.0, CpRaw * Hide - CoreTrain);
    // Under EP overlap a micro batch's exchanges hide behind another's
    // compute of the same layer, as far as the schedule's dependencies let
    // them, on the micro batches that run paired.
    double EpRaw = S.MoE ? 4 * Ep : 0;
    double EpT = EpRaw;
    if (R.MoE.OverlapEpComm && S.MoE) {
      OverlappedLayer O;
      O.Exchange = Ep;
      O.MlpFwd = T.ExpertFwd * N;
      O.AttnFwd = GpuF - O.MlpFwd;
      double MlpBwd = Bwd * O.MlpFwd;
      O.MlpWgrad = R.MoE.DelayWgrad && Bwd > 1 ? (Bwd - 1) * O.MlpFwd : 0;
      O.MlpBwd = MlpBwd - O.MlpWgrad;
      O.AttnBwd = GpuB - MlpBwd;
      double Paired = pairedShare(Mb, PP, VPP, int64_t(Virtual % size_t(PP)));
      // While an exchange hides, the compute it hides behind runs on the
      // SMs the EP kernels leave: the hidden time costs that share again.
      double Exposed = O.exposed();
      Exposed += EpSmShare * (EpRaw - Exposed);
      EpT = Paired * Exposed + (1 - Paired) * EpRaw;
    }
    double EpRec = S.MoE ? 2 * Ep * (EpRaw > 0 ? EpT / EpRaw : 1) * T.RecomputeEpFrac : 0;
    double TpRec = R.Recompute.Kind == RecomputeKind::Full ? Tp / 2 : 0;
    // Host issue time of the layer's forward and backward.
    double U = S.MoE ? HostUncapturedMoE : HostUncapturedDense;
    double HostF = C.HostForwardPerLayerSec * U;
    double HostB = (C.HostBackwardPerLayerSec + T.RecomputeHost * C.HostForwardPerLayerSec) * U;
    double DevF = GpuF + Tp / 2 + Cp / 3 + EpT / 2;
    double DevB = GpuB + Rec + Tp / 2 + TpRec + 2 * Cp / 3 + EpT / 2 + EpRec;
    RT.Compute += GpuF + GpuB;
    RT.Recompute += Rec;
    RT.TP += Tp + TpRec;
    RT.CP += Cp;
    RT.EP += EpT + EpRec;
    RT.Host += std::max(0.0, HostF - DevF) + std::max(0.0, HostB - DevB);
    RT.DeviceFwd += DevF;
    RT.DeviceBwd += DevB;
    StageFwd[Virtual] += std::max(DevF, HostF);
    StageBwd[Virtual] += std::max(DevB, HostB);
  };

  // Vision encoder on the first stage, once per micro batch.
  ImagePayload Payload = imagePayloadOf(R);
  double Images = Payload.Images, Patches = Payload.PatchesPerImage;
  VisionFlops VF = visionFlopsPerImage(M, Patches, C);

  for (size_t V = 0; V < Stages.size(); ++V) {
    RankTime &RT = Ranks[V % size_t(PP)];
    const LayoutStage &S = Stages[V];
    for (int64_t I = 0; I < S.DecoderLayers; ++I)
      addLayer(RT, V, First[V] + I);
    for (int64_t I = 0; I < S.MtpLayers; ++I)
      addLayer(RT, V, M.Layers + I);
    if (S.Loss) {
      // Output layer (BF16 in Megatron: not a TE module) and cross entropy.
      double N = TokensPerGpu;
      double Logits = 2 * double(M.Hidden) * Vocab / (PeakBf16 * C.Bf16GemmEfficiency);
      double Passes = R.LanguageFrozen ? 2 : FlopsFactor, Loss = N * 3 * Vocab * ActBytes / Hbm;
      RT.Compute += Passes * N * Logits + Loss;
      StageFwd[V] += N * Logits + Loss / 3;
      StageBwd[V] += (Passes - 1) * N * Logits + 2 * Loss / 3;
    }
    if (S.Embedding && Images > 0) {
      double PerGpu = Mbs * Images / double(TP);
      double Enc = R.VisionFrozen ? 1 : FlopsFactor;
      double Rate = R.Prec == Precision::BF16 ? PeakBf16 * C.Bf16GemmEfficiency : PeakLow * EffLow;
      double CoreSeconds = attentionSecondsPerFlop(4.0 * double(M.Vision->Hidden) / double(M.Vision->Heads));
      double Vision = PerGpu * (Enc * VF.EncoderGemm / Rate + Enc * VF.EncoderCore * CoreSeconds +
                                FlopsFactor * VF.Projector / Rate);
      RT.Compute += Vision;
      double VisionFwd = PerGpu * (VF.EncoderGemm / Rate + VF.EncoderCore * CoreSeconds + VF.Projector / Rate);
      StageFwd[V] += VisionFwd;
      StageBwd[V] += Vision - VisionFwd;
    }
    // Pipeline sends: activations forward, gradients backward, per chunk.
    if (PP > 1) {
      double Bytes = Mbs * (Seq / double(CP)) * double(M.Hidden) * ActBytes / double(TP);
      double BW = World <= Domain ? NVL * C.NVLinkEfficiency : Net * C.NetworkEfficiency;
      double Exposed = VPP > 1 ? 1 - C.CommOverlap : 1;
      RT.PP += 2 * Bytes / BW * Exposed;
      StageFwd[V] += Bytes / BW * Exposed;
      StageBwd[V] += Bytes / BW * Exposed;
    }
  }
  // Per-rank costs below are shared by the rank's chunks alike.
  auto spreadOverChunks = [&](size_t Rank, double Fwd, double Bwd) {
    for (size_t V = Rank; V < Stages.size(); V += size_t(PP)) {
      StageFwd[V] += Fwd / double(VPP);
      StageBwd[V] += Bwd / double(VPP);
    }
  };

  // Fine-grained activation offload: the listed modules' inputs go to the
  // host during the forward and come back during the backward, on their
  // own streams (fine_grained_activation_offload.py); only what the copies
  // take beyond the pass they overlap is exposed.
  if (!R.OffloadModules.empty()) {
    llvm::Optional<MemoryEstimate> Own;
    if (!Memory)
      Own = estimateMemory(R, P, C);
    const MemoryEstimate &Mem = Memory ? *Memory : *Own;
    double LinkBw = (R.Gpu.HostLinkBytesPerSec > 0 ? R.Gpu.HostLinkBytesPerSec : C.DefaultHostLinkBytesPerSec) *
                    C.HostLinkEfficiency;
    for (size_t I = 0; I < Ranks.size() && I < Mem.OffloadedPerMicrobatch.size(); ++I) {
      double Copy = Mem.OffloadedPerMicrobatch[I] / LinkBw;
      double Out = std::max(0.0, Copy - Ranks[I].DeviceFwd), In = std::max(0.0, Copy - Ranks[I].DeviceBwd);
      Ranks[I].Offload = Out + In;
      spreadOverChunks(I, Out, In);
    }
  }

  // Weight traffic of every micro batch: each GEMM reads its weights in
  // forward and in dgrad, and wgrad accumulates into the fp32 main gradient.
  std::vector<double> DenseParams(Ranks.size()), ExpertParams(Ranks.size());
  for (size_t I = 0; I < Ranks.size(); ++I) {
    paramsOf(Stages, First, int64_t(I), DenseParams[I], ExpertParams[I]);
    double Traffic = (DenseParams[I] + ExpertParams[I]) * C.WeightBytesPerMicrobatch / Hbm;
    Ranks[I].Compute += Traffic;
    // The forward reads the weights once (2 of the 12 bytes); dgrad and
    // wgrad do the rest.
    spreadOverChunks(I, Traffic * 2 / C.WeightBytesPerMicrobatch, Traffic * (1 - 2 / C.WeightBytesPerMicrobatch));
  }
  B.StageForwardSec = std::move(StageFwd);
  B.StageBackwardSec = std::move(StageBwd);

  size_t Slowest = 0;
  for (size_t I = 1; I < Ranks.size(); ++I)
    if (Ranks[I].total() > Ranks[Slowest].total())
      Slowest = I;
  B.SlowestStage = int64_t(Slowest);
  const RankTime &RT = Ranks[Slowest];
  double Mbd = double(Mb);
  B.Compute = Mbd * RT.Compute;
  B.Recompute = Mbd * RT.Recompute;
  B.TensorParallel = Mbd * RT.TP;
  B.ContextParallel = Mbd * RT.CP;
  B.ExpertParallel = Mbd * RT.EP;
  B.PipelineP2P = Mbd * RT.PP;
  B.Host = Mbd * RT.Host;
  B.ActivationOffload = Mbd * RT.Offload;
  double Busy = Mbd * RT.total();
  double Bubble =
      PP > 1 ? (P.PP == PP && P.BubbleFraction > 0 ? P.BubbleFraction : double(PP - 1) / double(VPP * Mb + PP - 1)) : 0;
  Bubble = std::min(Bubble, 0.99);
  B.Bubble = Busy * Bubble / (1 - Bubble);

  // Data parallel: gradient reduce-scatter and parameter all-gather
  // (distributed optimizer) or all-reduce, on the slowest rank's parameters.
  double Dense = DenseParams[Slowest], Expert = ExpertParams[Slowest];
  double GradBytes = ActBytes, ParamBytes = R.Fp8ParamGather ? 1.0 : ActBytes;
  auto dpSeconds = [&](double Params, int64_t Group) {
    if (Group <= 1 || Params <= 0)
      return 0.0;
    double Frac = double(Group - 1) / double(Group);
    double Bytes = R.Optimizer.Distributed ? Params * (GradBytes + ParamBytes) * Frac : Params * 2 * GradBytes * Frac;
    if (R.Parallel.FSDP) // parameters gathered in forward and backward of every micro batch
      Bytes = Params * (2 * ParamBytes + GradBytes) * Frac * Mbd;
    return Bytes / groupBandwidth(World / PP);
  };
  double Dp = dpSeconds(Dense, DP) + dpSeconds(Expert, EDP);
  B.DataParallel = Dp * (R.Optimizer.OverlapGradReduce ? 1 - C.GradOverlap : 1);

  // Optimizer step: memory-bound over the locally owned shard on the GPU;
  // the CPU-offloaded share from the host's DRAM (shared by the node's GPUs)
  // and the CPU-GPU link, serial with the step (Calibration.h).
  double Owned =
      R.Optimizer.Distributed || R.Parallel.FSDP ? Dense / double(DP) + Expert / double(EDP) : Dense + Expert;
  double Offload = std::min(std::max(R.OffloadOptimizer, 0.0), 1.0);
  double OnHost = Offload * Owned;
  double HostBw = (R.Gpu.HostMemoryBytesPerSec > 0 ? R.Gpu.HostMemoryBytesPerSec : C.DefaultHostMemoryBytesPerSec) *
                  C.HostMemoryEfficiency / double(std::max<int64_t>(std::min(R.Gpu.GpusPerNode, World), 1));
  double LinkBw =
      (R.Gpu.HostLinkBytesPerSec > 0 ? R.Gpu.HostLinkBytesPerSec : C.DefaultHostLinkBytesPerSec) * C.HostLinkEfficiency;
  double HostStep = OnHost * C.HostAdamBytesPerParam / HostBw, Copies = OnHost * C.HostLinkBytesPerParam / LinkBw;
  B.Optimizer = (1 - Offload) * Owned * C.OptimizerBytesPerParam / (R.Gpu.HbmBytesPerSec * C.HbmEfficiency) +
                (R.OverlapOffloadCopies ? std::max(HostStep, Copies) : HostStep + Copies);

  B.StepTime = Busy + B.Bubble + B.DataParallel + B.Optimizer;

  FlopCount Flops = countFlopsWith(R, C);
  double Tokens = double(R.GlobalBatch) * Seq;
  if (B.StepTime > 0 && std::isfinite(B.StepTime)) {
    B.TokensPerSecPerGpu = Tokens / B.StepTime / double(World);
    B.UsefulTokensPerSecPerGpu = B.TokensPerSecPerGpu * Flops.TextTokenFraction;
    double PerGpu = Flops.PerStep / B.StepTime / double(World);
    B.ModelTflopsPerGpu = PerGpu / 1e12;
    B.MFU = PerGpu / PeakBf16;
    B.MFUNative = PerGpu / PeakLow;
  }
  return B;
}

} // namespace

namespace {
FlopCount countFlopsWith(const Recipe &R, const Calibration &C) {
  FlopCount F;
  const ModelSpec &M = R.Model;
  double Seq = double(std::max<int64_t>(R.SeqLen, 1));
  double Vocab = paddedVocab(M, R.Parallel.TP);
  double Forward = 2 * double(M.Hidden) * Vocab; // final logits
  for (int64_t I = 0; I < M.Layers + M.MtpLayers; ++I)
    Forward += layerFlops(M, layerShape(M, I, nullptr, LayerView::MegatronFlops), Seq, Vocab, C).total();
  // A frozen language model runs no weight-gradient GEMMs: forward and data
  // gradients only (its attention core's second backward pass is not counted).
  F.DecoderPerToken = (R.LanguageFrozen ? 2 : 3) * Forward;

  ImagePayload Payload = imagePayloadOf(R);
  double Images = Payload.Images, Patches = Payload.PatchesPerImage, ImageTokens = Payload.ImageTokens;
  if (Images > 0) {
    VisionFlops V = visionFlopsPerImage(M, Patches, C);
    double Encoder = (R.VisionFrozen ? 1 : 3) * (V.EncoderGemm + V.EncoderCore);
    F.VisionPerToken = Images * (Encoder + 3 * V.Projector) / Seq;
    F.TextTokenFraction = std::max(0.0, 1 - ImageTokens / Seq);
  }
  F.PerStep = double(R.GlobalBatch) * Seq * (F.DecoderPerToken + F.VisionPerToken);
  return F;
}
} // namespace

FlopCount moec::countFlops(const Recipe &R) { return countFlopsWith(R, Calibration::defaults()); }

StepTimeBreakdown moec::predictStepTime(const Recipe &R, const PipelinePlan &P, const Calibration &C,
                                        const MemoryEstimate *Memory) {
  return StepModel(R, P, C, Memory).run();
}

double moec::domainsReached(const MoESpec &MoE, int64_t Domains) {
  double D = double(std::max<int64_t>(Domains, 1)), E = double(MoE.Experts), K = double(MoE.TopK);
  if (D <= 1 || E <= 0)
    return 1;
  // Group-limited routing (Megatron-Core 0.16.1 moe_utils.py
  // group_limited_topk): a token's experts come from group_top_k of the
  // groups, each scored by its best top_k / group_top_k experts, so every
  // chosen group holds some. Groups are runs of consecutive experts, as EP
  // places them, so a domain holds whole groups or a group whole domains.
  if (MoE.Groups && MoE.GroupTopK && *MoE.Groups > 1) {
    double G = double(*MoE.Groups), Kg = double(*MoE.GroupTopK);
    if (*MoE.Groups % Domains == 0)
      return D * (1 - missAll(G, G / D, Kg));
    if (Domains % *MoE.Groups == 0)
      return Kg * (D / G) * (1 - missAll(Kg * E / G, E / D, K));
  }
  return D * (1 - missAll(E, E / D, K));
}
