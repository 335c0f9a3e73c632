//===- Memory.cpp - Predicted memory per GPU --------------------------------===//
//
// Per pipeline rank (the peak stage is the largest):
//
//   weights + gradients + optimizer state
//       from the parameters the rank holds: its decoder layers (attention,
//       MLA or Gated DeltaNet; dense SwiGLU MLP or MoE with local experts,
//       shared experts and router), MTP layers, embedding / output layer,
//       vision encoder. Dense parameters are split by TP and sharded by the
//       distributed optimizer over DP x CP, expert parameters are split by
//       EP x ETP and sharded over EDP (Megatron's estimator shards over DP
//       only: gap 1 of megatron-memory.md A.3). FSDP shards weights and
//       gradients too. offload.optimizer = f keeps 1 - f of the optimizer
//       state on the GPU.
//   activations
//       the saved tensors of every micro-batch chunk in flight at the rank's
//       peak (from the schedule, or PeakInFlight distributed over the rank's
//       chunks in Megatron's interleaved order), per layer by module with
//       the MoE terms Megatron's estimator lacks (routed token copies, expert
//       SwiGLU intermediates, router, shared experts), CP and SP splits,
//       low-precision saved GEMM inputs, and each recompute mode; plus one
//       layer's working set (gradient temporaries and recomputed tensors).
//   dispatcher buffers, CUDA-graph pools, and a reserve.
//
// Every constant is in Calibration.h with its source.
//
//===----------------------------------------------------------------------===//
#include "moec/Model/Memory.h"
#include "moec/Model/LayerShape.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include <algorithm>
#include <array>
#include <cmath>

using namespace moec;

std::vector<std::pair<const char *, double>> MemoryBreakdown::items() const {
  return {{"weights", Weights},
          {"gradients", Gradients},
          {"optimizer_state", OptimizerState},
          {"activations", Activations},
          {"dispatcher_buffers", DispatcherBuffers},
          {"cuda_graph_pools", CudaGraphPools},
          {"reserve", Reserve}};
}

namespace {

using LayerKind = LayerShape;
using Mixer = MixerKind;
constexpr unsigned NumLayerKinds = LayerShape::NumKinds;

/// Parameters of one layer (or component) as held by one rank: Dense is
/// already divided by TP where Megatron splits it, Expert by EP x ETP.
struct Params {
  double Dense = 0, Expert = 0;
  double Gemm = 0; // the part that TE casts to low precision (layer GEMMs)
  Params &operator+=(const Params &O) {
    Dense += O.Dense;
    Expert += O.Expert;
    Gemm += O.Gemm;
    return *this;
  }
  double total() const { return Dense + Expert; }
};

/// Saved bytes of one layer for one micro batch, by module.
struct Modules {
  double Norms = 0, Mixer = 0, Mlp = 0, Router = 0, Experts = 0, Shared = 0;
  double total() const { return Norms + Mixer + Mlp + Router + Experts + Shared; }
};

struct LayerActivation {
  Modules Full;            // nothing recomputed
  Modules Stored;          // under the recipe's selective recompute (or Full)
  double Recomputed = 0;   // Full - Stored: regenerated in backward
  double Input = 0;        // the layer input, all full recompute keeps
  double Captured = 0;     // bytes inside TE CUDA-graph scopes (of Stored)
  double GraphOutputs = 0; // static output buffers of the layer's TE graphs
  double Offloaded = 0;    // stored bytes of offload.activations' modules (on the host)
};

bool isFp8(Precision P) {
  return P == Precision::FP8Delayed || P == Precision::FP8Tensorwise || P == Precision::FP8Blockwise ||
         P == Precision::MXFP8;
}

class MemoryModel {
public:
  MemoryModel(const Recipe &R, const PipelinePlan &P, const Calibration &C) : R(R), M(R.Model), C(C) {
    const ParallelConfig &Par = R.Parallel;
    ParallelSizes Sizes = ParallelSizes::of(R);
    TP = Sizes.TP;
    CP = Sizes.CP;
    EP = Sizes.EP;
    ETP = Sizes.ETP;
    H = double(M.Hidden);
    V = double(M.Vocab);
    Heads = double(std::max<int64_t>(M.Heads, 1));
    Groups = double(M.KvHeads > 0 ? M.KvHeads : M.Heads);
    HeadDim = double(M.HeadDim > 0 ? M.HeadDim : (M.Heads > 0 ? M.Hidden / M.Heads : 0));
    Ffn = double(M.FfnHidden ? *M.FfnHidden : 4 * M.Hidden);
    if (M.MoE) {
      const MoESpec &E = *M.MoE;
      Experts = double(E.Experts);
      TopK = double(E.TopK);
      ExpertFfn = double(E.FfnHidden);
      SharedFfn = E.SharedFfnHidden ? double(*E.SharedFfnHidden) : double(E.SharedExperts * E.FfnHidden);
    }
    // Tokens of one micro batch on one rank: CP splits the sequence; SP
    // splits the tensors outside the TP regions once more.
    Tokens = double(R.SeqLen) * double(std::max<int64_t>(R.MicroBatch, 1)) / double(CP);
    SeqTokens = Par.SequenceParallel && TP > 1 ? Tokens / double(TP) : Tokens;
    Act = C.ActivationBytes;
    LowPrec = isFp8(R.Prec) || R.Prec == Precision::NVFP4;
    GemmIn = isFp8(R.Prec) ? C.Fp8SavedInputBytes : R.Prec == Precision::NVFP4 ? C.Fp4SavedInputBytes : Act;
    DenseShards = double(Sizes.DP * CP);
    ExpertShards = double(Sizes.EDP);
    buildPlan(P, Sizes);
  }

  MemoryEstimate run();

private:
  const Recipe &R;
  const ModelSpec &M;
  const Calibration &C;
  int64_t TP, CP, EP, ETP, PP, VPP;
  double H, V, Heads, Groups, HeadDim, Ffn;
  double Experts = 0, TopK = 0, ExpertFfn = 0, SharedFfn = 0;
  double Tokens, SeqTokens, Act, GemmIn;
  bool LowPrec;
  double DenseShards, ExpertShards;

  // The plan: the given one, or an even split when none was given.
  std::vector<LayoutStage> Stages;
  std::vector<int64_t> FirstLayer;
  // Borrowed from the plan (it outlives the model, which lives for one
  // estimateMemory call); schedules are large and copying them dominated.
  const std::vector<std::vector<ScheduledOp>> *Schedule = nullptr;
  const std::vector<std::vector<std::vector<int64_t>>> *Mixes = nullptr;
  std::vector<int64_t> PeakInFlight;
  int64_t Microbatches = 1;

  void buildPlan(const PipelinePlan &P, const ParallelSizes &Sizes);
  /// Layer counts decoder layers, then MTP layers.
  LayerKind kindOf(int64_t Layer) const;
  Params layerParams(const LayerKind &K) const;
  Params visionParams() const;
  double routedTokens() const;
  LayerActivation layerActivation(const LayerKind &K) const;
  double visionActivation() const;
  double lossActivation() const;
  double mtpExtraActivation() const;
  /// The chunk instances in flight at the rank's peak, weighted by Bytes
  /// (indexed by the rank's chunk).
  double peakInFlight(int64_t Rank, llvm::ArrayRef<double> Bytes) const;
  double dispatcherBuffers() const;
  bool recomputes(RecomputeModule Mod) const {
    return R.Recompute.Kind == RecomputeKind::Selective && llvm::is_contained(R.Recompute.Modules, Mod);
  }
  bool captures(GraphScope S) const { return llvm::is_contained(R.CudaGraph, S); }
  bool offloads(OffloadModule Mod) const { return llvm::is_contained(R.OffloadModules, Mod); }
};

void MemoryModel::buildPlan(const PipelinePlan &P, const ParallelSizes &Sizes) {
  StageSplit Split = stageSplitOf(R, P);
  Stages = std::move(Split.Stages);
  FirstLayer = std::move(Split.FirstLayer);
  PP = Split.PP;
  VPP = Split.VPP;
  if (!P.VirtualStages.empty()) {
    Schedule = &P.Schedule;
    Mixes = &P.InFlightMixes;
    PeakInFlight = P.PeakInFlight;
    Microbatches = std::max<int64_t>(P.Microbatches, 1);
  } else {
    Microbatches = std::max<int64_t>(R.GlobalBatch / std::max<int64_t>(R.MicroBatch * Sizes.DP, 1), 1);
  }
}

LayerKind MemoryModel::kindOf(int64_t Layer) const { return layerShape(M, Layer, &R); }

Params MemoryModel::layerParams(const LayerKind &K) const {
  double T = double(TP);
  double Split = 0, Replicated = H; // input norm
  switch (K.Mixer) {
  case Mixer::Attention:
    // q and o are H x (heads*d); k and v scale by the query groups; the
    // output gate doubles q's projection.
    Split += 2 * H * Heads * HeadDim + 2 * H * Groups * HeadDim + (K.OutputGate ? H * Heads * HeadDim : 0);
    if (K.QkNorm)
      Replicated += 2 * HeadDim;
    break;
  case Mixer::MLA: {
    const MLASpec &L = *M.MLA;
    double Rq = double(L.QLoraRank), Rkv = double(L.KvLoraRank), Dn = double(L.QkHeadDim), Dr = double(L.QkRopeHeadDim),
           Dv = double(L.VHeadDim);
    // Down projections and latent norms are replicated across TP
    // ("duplicated" linears); the up projections and o are split.
    if (Rq > 0) {
      Replicated += H * Rq + Rq;
      Split += Rq * Heads * (Dn + Dr);
    } else {
      Split += H * Heads * (Dn + Dr);
    }
    Replicated += H * (Rkv + Dr) + Rkv;
    Split += Rkv * Heads * (Dn + Dv) + Heads * Dv * H;
    break;
  }
  case Mixer::GatedDeltaNet: {
    const LinearAttentionSpec &G = *M.LinearAttention;
    double Kd = double(G.KeyHeads * G.HeadDim), Vd = double(G.ValueHeads * G.HeadDim), Vh = double(G.ValueHeads);
    // in_proj (q, k, v, z and the per-head b, a), depthwise conv over q/k/v,
    // A_log and dt_bias, out_proj; the gated output norm is per head dim.
    Split += H * (2 * Kd + 2 * Vd + 2 * Vh) + (2 * Kd + Vd) * double(C.GdnConvKernel) + 2 * Vh + Vd * H;
    Replicated += double(G.HeadDim);
    break;
  }
  }
  Params P;
  Replicated += H; // pre-MLP norm
  if (K.MoE) {
    Replicated += H * Experts + (M.MoE->ExpertBias ? Experts : 0); // router
    Split += 3 * H * SharedFfn;
    P.Expert = (Experts / double(EP)) * 3 * H * ExpertFfn / double(ETP);
  } else {
    Split += 3 * H * Ffn; // SwiGLU: gate, up, down
  }
  if (K.Mtp) {
    Replicated += 3 * H; // enorm, hnorm, final norm
    Split += 2 * H * H;  // eh_proj
  }
  P.Dense = Split / T + Replicated;
  P.Gemm = K.Bf16 ? 0 : Split / T + P.Expert;
  return P;
}

Params MemoryModel::visionParams() const {
  Params P;
  if (!M.Vision)
    return P;
  const VisionSpec &Vs = *M.Vision;
  double Hv = double(Vs.Hidden), Fv = double(Vs.FfnHidden), Mg = double(Vs.SpatialMerge);
  double Out = double(Vs.OutHidden ? *Vs.OutHidden : M.Hidden);
  double Hm = Hv * Mg * Mg;
  // ViT layer: qkv and proj with biases, GELU MLP with biases, two LayerNorms.
  double LayerSplit = 4 * Hv * Hv + 4 * Hv + 2 * Hv * Fv + Fv + Hv;
  double LayerRep = 4 * Hv;
  double Patch = 3 * double(C.VisionTemporalPatch) * double(Vs.PatchSize * Vs.PatchSize) * Hv + Hv;
  double MergerSplit = Hm * Hm + Hm + Hm * Out + Out;
  P.Dense = double(Vs.Layers) * (LayerSplit / double(TP) + LayerRep) + Patch + 2 * Hv + MergerSplit / double(TP);
  return P;
}

/// Routed token copies one rank's experts process per micro batch: its
/// tokens (after SP) times top-k, gathered over ETP, balanced over EP; a
/// capacity factor with padding processes exactly the capacity.
double MemoryModel::routedTokens() const {
  if (!M.MoE)
    return 0;
  double Copies = SeqTokens * double(ETP) * TopK * C.RoutedTokenImbalance;
  if (R.MoE.dropAndPad())
    Copies = SeqTokens * double(ETP) * TopK * *R.MoE.CapacityFactor;
  return Copies;
}

LayerActivation MemoryModel::layerActivation(const LayerKind &K) const {
  double T = double(TP);
  double HeadTokens = Tokens / T; // tensors split by heads / the FFN dimension
  LayerActivation L;
  Modules &F = L.Full;
  Modules Drop;
  // Norms: the input norm's input (the residual stream) and output (the
  // first GEMM's input), and the same for the pre-MLP norm. The MoE norm
  // output also feeds the router, which keeps it in bf16.
  double InNormIn = Act * H * SeqTokens, InNormOut = GemmIn * H * SeqTokens;
  double PreNormIn = Act * H * SeqTokens, PreNormOut = (K.MoE ? Act : GemmIn) * H * SeqTokens;
  F.Norms = InNormIn + InNormOut + PreNormIn + PreNormOut;
  if (recomputes(RecomputeModule::LayerNorm))
    Drop.Norms += InNormOut + PreNormOut;
  double OutCopy = LowPrec ? GemmIn : 0; // the proj GEMM's quantized copy of O
  // Inputs of the modules fine-grained activation offload can move to the
  // host (Megatron-Core attention.py, transformer_layer.py, moe/experts.py):
  // only what the layer stores. Gated DeltaNet layers offload none of the
  // attention ones.
  double CoreIn = 0, ProjIn = 0, Fc1In = 0, ActIn = 0, ActOutStored = 0;
  switch (K.Mixer) {
  case Mixer::Attention: {
    double Qkv = Act * (Heads + 2 * Groups) * HeadDim * HeadTokens;
    // QK norm saves its inputs (the normalised q and k are the core's).
    double QkNormIn = K.QkNorm ? Act * (Heads + Groups) * HeadDim * HeadTokens : 0;
    // The output gate saves sigmoid(gate); the ungated core output is O,
    // which flash attention keeps anyway.
    double Gate = K.OutputGate ? Act * Heads * HeadDim * HeadTokens : 0;
    double Out = (Act + OutCopy) * Heads * HeadDim * HeadTokens;
    double Lse = C.SoftmaxStatBytes * Heads * HeadTokens;
    F.Mixer = Qkv + QkNormIn + Gate + Out + Lse;
    CoreIn = Qkv;
    ProjIn = Out;
    // Flash attention keeps only O and the logsumexp inside core attention;
    // the checkpoint's inputs (q, k, v) stay saved.
    if (recomputes(RecomputeModule::CoreAttn))
      Drop.Mixer += Lse;
    break;
  }
  case Mixer::MLA: {
    const MLASpec &A = *M.MLA;
    double Rq = double(A.QLoraRank), Rkv = double(A.KvLoraRank), Dn = double(A.QkHeadDim), Dr = double(A.QkRopeHeadDim),
           Dv = double(A.VHeadDim);
    // Latents (down-projection outputs, replicated over TP): the latent
    // norms' inputs and outputs (the up projections' inputs), the rope key.
    double LatentIn = Act * (Rq + Rkv + Dr) * Tokens;
    double LatentOut = GemmIn * (Rq + Rkv) * Tokens;
    double Qkv = Act * Heads * (2 * (Dn + Dr) + Dv) * HeadTokens;
    double Out = (Act + OutCopy) * Heads * Dv * HeadTokens;
    double Lse = C.SoftmaxStatBytes * Heads * HeadTokens;
    F.Mixer = LatentIn + LatentOut + Qkv + Out + Lse;
    CoreIn = recomputes(RecomputeModule::MlaUpProj) ? 0 : Qkv;
    ProjIn = Out;
    if (recomputes(RecomputeModule::MlaUpProj))
      Drop.Mixer += LatentOut + Qkv;
    if (recomputes(RecomputeModule::CoreAttn))
      Drop.Mixer += Lse;
    break;
  }
  case Mixer::GatedDeltaNet: {
    const LinearAttentionSpec &G = *M.LinearAttention;
    double Kd = double(G.KeyHeads * G.HeadDim), Vd = double(G.ValueHeads * G.HeadDim), Vh = double(G.ValueHeads);
    // Conv input and output (q, k, v), the output gate z, fp32 decay and
    // beta per value head, the delta-rule output and the gated norm's
    // output (out_proj's input). Chunk states are recomputed by the kernel.
    double Conv = 2 * Act * (2 * Kd + Vd) * HeadTokens;
    double Gates = Act * Vd * HeadTokens + 4 * 2 * Vh * HeadTokens;
    double Core = Act * Vd * HeadTokens;
    double NormOut = GemmIn * Vd * HeadTokens;
    F.Mixer = Conv + Gates + Core + NormOut;
    if (recomputes(RecomputeModule::GdnNormOut))
      Drop.Mixer += NormOut;
    break;
  }
  }
  double AttnNorms = InNormIn + (recomputes(RecomputeModule::LayerNorm) ? 0 : InNormOut);

  double Routed = routedTokens();
  if (K.MoE) {
    double Fe = ExpertFfn / double(ETP);
    F.Router = C.RouterBytesPerExpert * Experts * SeqTokens;
    // Per routed copy: fc1 input (the dispatched token), fc1 output (the
    // SwiGLU input, 2 x F), SwiGLU output (fc2 input), routing metadata.
    double ActOut = GemmIn * Fe * Routed;
    F.Experts = (GemmIn * H + Act * 2 * Fe) * Routed + ActOut + C.RoutingMetadataBytes * Routed;
    Fc1In = GemmIn * H * Routed;
    ActIn = Act * 2 * Fe * Routed;
    ActOutStored = recomputes(RecomputeModule::MoeAct) ? 0 : ActOut;
    if (SharedFfn > 0) {
      double SharedAct = GemmIn * SharedFfn * HeadTokens;
      F.Shared = (LowPrec ? GemmIn * H * SeqTokens : 0) + Act * 2 * SharedFfn * HeadTokens + SharedAct;
      if (recomputes(RecomputeModule::SharedExperts))
        Drop.Shared = F.Shared; // its input (the norm output) is counted in Norms
    }
    if (recomputes(RecomputeModule::MoeAct))
      Drop.Experts += ActOut;
    if (recomputes(RecomputeModule::Moe)) {
      // The whole MoE block is checkpointed: only its input (the pre-MLP
      // norm output) stays.
      Drop.Router = F.Router;
      Drop.Experts = F.Experts;
      Drop.Shared = F.Shared;
    }
  } else {
    double FcOut = Act * 2 * Ffn * HeadTokens, ActOut = GemmIn * Ffn * HeadTokens;
    F.Mlp = FcOut + ActOut;
    if (recomputes(RecomputeModule::Mlp))
      Drop.Mlp += F.Mlp;
  }

  L.Stored = F;
  L.Stored.Norms -= Drop.Norms;
  L.Stored.Mixer -= Drop.Mixer;
  L.Stored.Mlp -= Drop.Mlp;
  L.Stored.Router -= Drop.Router;
  L.Stored.Experts -= Drop.Experts;
  L.Stored.Shared -= Drop.Shared;
  L.Recomputed = Drop.total();
  L.Input = Act * H * SeqTokens;

  // Modules inside TE CUDA-graph scopes (of what is stored).
  double Captured = 0;
  if (captures(GraphScope::Attn))
    Captured += AttnNorms + L.Stored.Mixer;
  if (!K.MoE && captures(GraphScope::Mlp))
    Captured += L.Stored.Mlp;
  if (K.MoE && captures(GraphScope::Moe))
    Captured += L.Stored.Router + L.Stored.Experts + L.Stored.Shared;
  else if (K.MoE && captures(GraphScope::MoeRouter))
    Captured += L.Stored.Router + (captures(GraphScope::MoePreprocess) ? C.RoutingMetadataBytes * Routed : 0);
  L.Captured = Captured;

  // Fine-grained activation offload moves these inputs to the host; a
  // module checkpointed whole (recompute moe) keeps only its input.
  bool MoeStored = K.MoE && !recomputes(RecomputeModule::Moe);
  double Off = 0;
  if (offloads(OffloadModule::AttnNorm))
    Off += InNormIn;
  if (offloads(OffloadModule::QkvLinear) && K.Mixer != Mixer::GatedDeltaNet && !recomputes(RecomputeModule::LayerNorm))
    Off += InNormOut;
  if (offloads(OffloadModule::CoreAttn))
    Off += CoreIn;
  if (offloads(OffloadModule::AttnProj))
    Off += ProjIn;
  if (offloads(OffloadModule::MlpNorm))
    Off += PreNormIn;
  if (MoeStored && (offloads(OffloadModule::ExpertFc1) || offloads(OffloadModule::FusedGroupMlp)))
    Off += Fc1In;
  if (MoeStored && (offloads(OffloadModule::MoeAct) || offloads(OffloadModule::FusedGroupMlp)))
    Off += ActIn;
  if (MoeStored && offloads(OffloadModule::FusedGroupMlp))
    Off += ActOutStored;
  L.Offloaded = std::min(Off, L.Stored.total());

  // Each captured graph returns its outputs in static buffers that stay
  // allocated until the graph's backward ran (TE make_graphed_callables, one
  // graph per layer and micro batch; _reuse_graph_input_output_buffers lets
  // the next graph reuse a buffer only once it is free).
  double Hidden = Act * H * SeqTokens;
  double Outputs = 0;
  if (captures(GraphScope::Attn))
    Outputs += Hidden;
  if (!K.MoE && captures(GraphScope::Mlp))
    Outputs += Hidden;
  if (K.MoE && captures(GraphScope::Moe))
    Outputs += Hidden;
  else if (K.MoE && captures(GraphScope::MoeRouter))
    Outputs += C.RouterGraphOutputBytesPerExpert * Experts * SeqTokens; // probabilities and routing map
  L.GraphOutputs = Outputs;
  return L;
}

double MemoryModel::visionActivation() const {
  if (!M.Vision || R.VisionFrozen)
    return 0; // a frozen encoder keeps nothing for backward
  const VisionSpec &Vs = *M.Vision;
  // Encoder patches of one micro batch (none on mock data, as the step
  // model prices it).
  ImagePayload Payload = imagePayloadOf(R);
  double Patches = Payload.Images * Payload.PatchesPerImage * double(std::max<int64_t>(R.MicroBatch, 1));
  if (Patches <= 0)
    return 0;
  double Hv = double(Vs.Hidden), Fv = double(Vs.FfnHidden), Hh = double(std::max<int64_t>(Vs.Heads, 1));
  double T = double(TP);
  double PerLayer;
  if (R.Recompute.Kind == RecomputeKind::Full) {
    PerLayer = Act * Hv * Patches;
  } else {
    double OutCopy = LowPrec ? GemmIn : 0;
    PerLayer = (2 * Act + 2 * GemmIn) * Hv * Patches          // two LayerNorms in/out
               + (3 * Act + Act + OutCopy) * Hv * Patches / T // q, k, v, O
               + C.SoftmaxStatBytes * Hh * Patches / T        // logsumexp
               + (Act + GemmIn) * Fv * Patches / T;           // fc1 out, GELU out
  }
  // Patch embedding input and the merger (norm, fc1, GELU, fc2 inputs).
  double Merger = (Act + 2 * GemmIn + Act) * Hv * Patches;
  return double(Vs.Layers) * PerLayer + Merger;
}

double MemoryModel::lossActivation() const {
  // Final norm input and output (the output layer's bf16 input), logits.
  return 2 * Act * H * SeqTokens + C.LogitsBytes * V / double(TP) * Tokens;
}

double MemoryModel::mtpExtraActivation() const {
  // enorm and hnorm inputs, eh_proj's input (both halves), the MTP block's
  // final norm and its own logits.
  return 2 * Act * H * SeqTokens + GemmIn * 2 * H * SeqTokens + lossActivation();
}

double MemoryModel::peakInFlight(int64_t Rank, llvm::ArrayRef<double> Bytes) const {
  auto chunkBytes = [&](int64_t Chunk) {
    return Chunk >= 0 && Chunk < int64_t(Bytes.size()) ? Bytes[size_t(Chunk)] : 0.0;
  };
  if (Mixes && size_t(Rank) < Mixes->size() && !(*Mixes)[size_t(Rank)].empty()) {
    double Peak = 0;
    for (const std::vector<int64_t> &Mix : (*Mixes)[size_t(Rank)]) {
      double Held = 0;
      for (size_t Chunk = 0; Chunk < Mix.size(); ++Chunk)
        Held += double(Mix[Chunk]) * chunkBytes(int64_t(Chunk));
      Peak = std::max(Peak, Held);
    }
    return Peak;
  }
  if (Schedule && size_t(Rank) < Schedule->size() && !(*Schedule)[size_t(Rank)].empty()) {
    double Held = 0, Peak = 0;
    for (const ScheduledOp &Op : (*Schedule)[size_t(Rank)]) {
      if (Op.K == ScheduledOp::Forward) {
        Held += chunkBytes(Op.Chunk);
        Peak = std::max(Peak, Held);
      } else {
        Held -= chunkBytes(Op.Chunk);
      }
    }
    return Peak;
  }
  int64_t N;
  if (size_t(Rank) < PeakInFlight.size() && PeakInFlight[size_t(Rank)] > 0) {
    N = PeakInFlight[size_t(Rank)];
  } else if (VPP == 1) {
    N = std::min<int64_t>(PP - Rank, Microbatches); // 1F1B warm-up + 1
  } else {
    N = std::min<int64_t>((PP - Rank - 1) * 2 + (VPP - 1) * PP + 1, Microbatches * VPP);
  }
  // Megatron's interleaved order: forward k runs chunk (k / PP) mod VPP.
  double Sum = 0;
  for (int64_t K = 0; K < N; ++K)
    Sum += chunkBytes(VPP == 1 ? 0 : (K / PP) % VPP);
  return Sum;
}

double MemoryModel::dispatcherBuffers() const {
  if (!M.MoE)
    return 0;
  double Routed = routedTokens();
  double HiddenBytes = Act * H;
  double Group = double(EP * ETP);
  double Transient = Routed * HiddenBytes; // one routed copy in flight
  switch (R.Dispatch) {
  case Dispatcher::AllToAll:
    return C.AllToAllTransientCopies * Transient;
  case Dispatcher::AllGather:
    return C.AllToAllTransientCopies * SeqTokens * Group * HiddenBytes;
  case Dispatcher::DeepEP: {
    double Nvl = std::min(Group, C.DeepEpNvlPeers);
    double Rdma = std::max(std::floor(Group / C.DeepEpNvlPeers), 1.0);
    double Slot = HiddenBytes + C.DeepEpMetaBytesPerToken;
    double Bytes = C.DeepEpChannels * Nvl * C.DeepEpNvlRecvTokens * Slot;
    if (Rdma > 1)
      Bytes += 2 * C.DeepEpChannels * Rdma * C.DeepEpRdmaRecvTokens * Slot;
    // The dispatched tokens land in the (activation) fc1 input; the expert
    // output waiting for the combine is the one transient copy.
    return Bytes + (C.AllToAllTransientCopies - 1) * Transient;
  }
  case Dispatcher::HybridEP: {
    double Domain = std::min(Group, double(std::max<int64_t>(R.Gpu.NVLinkDomain, 1)));
    double Nodes = std::ceil(Group / Domain);
    double MaxTokens = SeqTokens * Group; // worst case: every token to one rank
    double LocalExperts = Experts / double(EP);
    double Combine = MaxTokens * (HiddenBytes + C.HybridEpProbBytes * LocalExperts * Domain);
    double Bytes = Combine;
    if (Nodes > 1) {
      Bytes += Combine; // dispatch no longer shares the combine buffer
      Bytes += SeqTokens * (Nodes - 1) * (3 * HiddenBytes + 3 * C.HybridEpProbBytes * LocalExperts * Domain);
    }
    return Bytes + (C.AllToAllTransientCopies - 1) * Transient;
  }
  }
  return 0;
}

MemoryEstimate MemoryModel::run() {
  MemoryEstimate Est;
  Est.CapacityBytes = R.Gpu.MemoryBytes;

  // Bytes per parameter.
  bool Fsdp = R.Parallel.FSDP;
  bool LowPrecParams = (R.Fp8ParamGather && isFp8(R.Prec)) || (R.Fp4ParamGather && R.Prec == Precision::NVFP4);
  double WeightB = !LowPrecParams ? C.WeightBytes : R.Prec == Precision::NVFP4 ? C.Fp4ParamBytes : C.Fp8ParamBytes;
  double CopyB = 0;
  if (!Fsdp && !LowPrecParams)
    CopyB = isFp8(R.Prec) ? C.Fp8WeightCopyBytes : R.Prec == Precision::NVFP4 ? C.Fp4WeightCopyBytes : 0;
  double OptB = C.MasterWeightBytes;
  if (R.Optimizer.Kind == OptimizerKind::Adam)
    OptB += R.Optimizer.PrecisionAware ? C.PrecisionAwareMomentBytes : C.AdamMomentBytes;
  else
    OptB += C.MomentumBytes;
  double OnGpu = 1 - std::min(std::max(R.OffloadOptimizer, 0.0), 1.0);
  bool ShardOpt = R.Optimizer.Distributed || Fsdp;
  double DenseOptShard = ShardOpt ? DenseShards : 1, ExpertOptShard = ShardOpt ? ExpertShards : 1;
  double DenseShard = Fsdp ? DenseShards : 1, ExpertShard = Fsdp ? ExpertShards : 1;

  int64_t NumStages = int64_t(Stages.size());
  bool Full = R.Recompute.Kind == RecomputeKind::Full;
  int64_t RecomputeN = std::max<int64_t>(R.Recompute.Layers.getValueOr(1), 1);

  struct RankState {
    Params Trainable, Frozen;
    double MaxLayerParams = 0;
    double MaxLayerFull = 0, MaxRecomputed = 0, MaxLayerOffloaded = 0;
    bool HasMoE = false;
    int64_t Layers = 0;
    // The largest stored layer, for ActivationPerLayerByModule.
    double BestLayer = -1;
    LayerActivation Best;
    LayerKind BestKind;
  };
  struct KindTables {
    bool Computed = false;
    Params P;
    LayerActivation L;
  };
  std::array<KindTables, NumLayerKinds> ByKind;
  // A model may have 65536 pipeline ranks, and the rules evaluate memory
  // several times per sweep point: the per-chunk bytes of all ranks live in
  // two flat arrays (rank-major, VPP chunks each) and one buffer of layer
  // activations is reused across stages, so an evaluation allocates a fixed
  // number of times rather than a few times per rank.
  std::vector<RankState> Ranks(static_cast<size_t>(PP));
  std::vector<double> ChunkBytes(size_t(PP * VPP), 0.0), ChunkCaptured(size_t(PP * VPP), 0.0),
      ChunkGraphOutputs(size_t(PP * VPP), 0.0), ChunkOffloaded(size_t(PP * VPP), 0.0);
  auto chunksOf = [&](const std::vector<double> &All, int64_t Rank) {
    return llvm::ArrayRef<double>(All).slice(size_t(Rank * VPP), size_t(VPP));
  };
  std::vector<const LayerActivation *> Acts;

  for (int64_t VS = 0; VS < NumStages; ++VS) {
    const LayoutStage &S = Stages[size_t(VS)];
    int64_t Rank = VS % PP, Chunk = VS / PP;
    if (Chunk >= VPP)
      continue;
    RankState &RS = Ranks[size_t(Rank)];
    Acts.clear();
    auto addLayer = [&](const LayerKind &K) {
      // Layers of one kind are alike: compute each kind once (a model may
      // have 65536 layers, and the rules evaluate memory several times).
      KindTables &T = ByKind[K.index()];
      if (!T.Computed) {
        T.P = layerParams(K);
        T.L = layerActivation(K);
        T.Computed = true;
      }
      const Params &P = T.P;
      (R.LanguageFrozen ? RS.Frozen : RS.Trainable) += P;
      RS.MaxLayerParams = std::max(RS.MaxLayerParams, P.total());
      RS.HasMoE |= K.MoE;
      const LayerActivation &L = T.L;
      RS.MaxLayerFull = std::max(RS.MaxLayerFull, L.Full.total());
      RS.MaxRecomputed = std::max(RS.MaxRecomputed, L.Recomputed);
      if (L.Stored.total() > RS.BestLayer) {
        RS.BestLayer = L.Stored.total();
        RS.Best = L;
        RS.BestKind = K;
      }
      Acts.push_back(&L);
    };
    for (int64_t I = 0; I < S.DecoderLayers; ++I)
      addLayer(kindOf(FirstLayer[size_t(VS)] + I));
    for (int64_t I = 0; I < S.MtpLayers; ++I)
      addLayer(kindOf(M.Layers + I));
    RS.Layers += int64_t(Acts.size());

    // Saved bytes of one micro batch of this chunk.
    double Bytes = 0, Captured = 0, GraphOutputs = 0, Offloaded = 0;
    int64_t N = int64_t(Acts.size());
    for (int64_t I = 0; I < N; ++I) {
      const LayerActivation &L = *Acts[size_t(I)];
      if (Full) {
        bool Checkpointed = R.Recompute.Method == RecomputeMethod::Uniform || I < RecomputeN;
        if (!Checkpointed)
          Bytes += L.Full.total();
        else if (R.Recompute.Method == RecomputeMethod::Block || I % RecomputeN == 0)
          Bytes += L.Input; // one input per checkpointed group of N layers
      } else {
        Bytes += L.Stored.total() - L.Offloaded;
        Captured += L.Captured;
        GraphOutputs += L.GraphOutputs;
        Offloaded += L.Offloaded;
        RS.MaxLayerOffloaded = std::max(RS.MaxLayerOffloaded, L.Offloaded);
      }
    }
    Bytes += double(S.MtpLayers) * mtpExtraActivation();
    if (S.Loss)
      Bytes += lossActivation();
    if (S.Embedding) {
      Bytes += visionActivation();
      (R.LanguageFrozen ? RS.Frozen : RS.Trainable).Dense += V * H / double(TP);
      if (M.Vision)
        (R.VisionFrozen ? RS.Frozen : RS.Trainable) += visionParams();
    }
    if (S.Loss)
      (R.LanguageFrozen ? RS.Frozen : RS.Trainable).Dense += V * H / double(TP) + H; // untied output layer, final norm
    ChunkBytes[size_t(Rank * VPP + Chunk)] += Bytes;
    ChunkCaptured[size_t(Rank * VPP + Chunk)] += Captured;
    ChunkGraphOutputs[size_t(Rank * VPP + Chunk)] += GraphOutputs;
    ChunkOffloaded[size_t(Rank * VPP + Chunk)] += Offloaded;
  }
  // Megatron builds an embedding on the MTP stage too (its input).
  for (int64_t Rank = 0; Rank < PP; ++Rank) {
    bool HasMtp = false, HasEmb = false;
    for (int64_t VS = Rank; VS < NumStages; VS += PP) {
      HasMtp |= Stages[size_t(VS)].MtpLayers > 0;
      HasEmb |= Stages[size_t(VS)].Embedding;
    }
    if (HasMtp && !HasEmb)
      (R.LanguageFrozen ? Ranks[size_t(Rank)].Frozen : Ranks[size_t(Rank)].Trainable).Dense += V * H / double(TP);
  }

  double Dispatch = dispatcherBuffers();
  Est.PerStage.resize(size_t(PP));
  Est.OffloadedPerMicrobatch.assign(size_t(PP), 0.0);
  for (int64_t Rank = 0; Rank < PP; ++Rank)
    for (double B : chunksOf(ChunkOffloaded, Rank))
      Est.OffloadedPerMicrobatch[size_t(Rank)] += B;
  for (int64_t Rank = 0; Rank < PP; ++Rank) {
    RankState &RS = Ranks[size_t(Rank)];
    MemoryBreakdown &B = Est.PerStage[size_t(Rank)];
    const Params &P = RS.Trainable;
    B.Weights =
        WeightB * (P.Dense / DenseShard + P.Expert / ExpertShard) + CopyB * P.Gemm + C.WeightBytes * RS.Frozen.total();
    B.Gradients = C.GradBytes * (P.Dense / DenseShard + P.Expert / ExpertShard);
    B.OptimizerState = OnGpu * OptB * (P.Dense / DenseOptShard + P.Expert / ExpertOptShard);
    if (Fsdp) {
      // Unsharded parameters of the layers being computed, one layer's
      // gradients before the reduce-scatter.
      B.Weights += C.FsdpUnshardedLayers * RS.MaxLayerParams * WeightB;
      B.Gradients += RS.MaxLayerParams * C.GradBytes;
    }

    double Held = peakInFlight(Rank, chunksOf(ChunkBytes, Rank));
    if (R.OffloadActivations && RS.Layers > 0) {
      // cpu_offloading: the offloaded layers' activations leave the GPU,
      // one layer stays staged.
      double Off = double(R.OffloadActivationLayers.getValueOr(std::max<int64_t>(RS.Layers - 1, 0)));
      Off = std::min(Off, double(RS.Layers));
      Held *= 1 - std::max(Off - 1, 0.0) / double(RS.Layers);
    }
    // Fine-grained offload keeps the last layer's groups on the GPU (the
    // offload margin of fine_grained_activation_offload.py) and reloads
    // the next layer's while one is differentiated.
    if (!R.OffloadModules.empty() && !Full)
      Held += C.OffloadResidentLayers * RS.MaxLayerOffloaded;
    double Working = C.GradTemporaryLayers * RS.MaxLayerFull;
    if (Full)
      Working += double(R.Recompute.Method == RecomputeMethod::Uniform ? RecomputeN : 1) * RS.MaxLayerFull;
    else
      Working += RS.MaxRecomputed;
    B.Activations = Held + Working;
    B.DispatcherBuffers = RS.HasMoE ? Dispatch : 0;

    if (captures(GraphScope::FullIteration))
      B.CudaGraphPools = C.CudaGraphFullIterationFraction * (B.Activations + B.DispatcherBuffers);
    else if (!R.CudaGraph.empty())
      // One pool shared by all graphs (captured in execution order): the
      // captured modules' saved tensors live in it (counted in activations),
      // plus the graphs' static outputs in flight, plus the pool's own
      // fragmentation: eager allocations cannot reuse its free blocks.
      B.CudaGraphPools = peakInFlight(Rank, chunksOf(ChunkGraphOutputs, Rank)) +
                         C.CudaGraphPoolFragmentation * peakInFlight(Rank, chunksOf(ChunkCaptured, Rank));

    // Fragmentation scales with what is allocated and freed every step.
    B.Reserve =
        C.FragmentationFraction * (B.Activations + B.DispatcherBuffers + B.CudaGraphPools) + C.FixedReserveBytes;
    if (Rank == 0 || B.total() > Est.PeakBytes) {
      Est.PeakBytes = B.total();
      Est.PeakStage = Rank;
    }
  }

  // Per-module activations of the largest layer on the peak stage.
  const RankState &Peak = Ranks[size_t(Est.PeakStage)];
  if (Peak.BestLayer >= 0) {
    const LayerActivation &L = Peak.Best;
    auto &Out = Est.ActivationPerLayerByModule;
    if (Full) {
      Out.push_back({"layer_input", L.Input});
    } else {
      const Modules &S = L.Stored;
      Out.push_back({"norms", S.Norms});
      Out.push_back({Peak.BestKind.Mixer == Mixer::GatedDeltaNet ? "linear_attention" : "attention", S.Mixer});
      if (Peak.BestKind.MoE) {
        Out.push_back({"router", S.Router});
        Out.push_back({"moe", S.Experts});
        if (SharedFfn > 0)
          Out.push_back({"shared_experts", S.Shared});
      } else {
        Out.push_back({"mlp", S.Mlp});
      }
    }
  }
  return Est;
}

} // namespace

MemoryEstimate moec::estimateMemory(const Recipe &R, const PipelinePlan &P, const Calibration &C) {
  return MemoryModel(R, P, C).run();
}
