//===- LayerShape.cpp - What a layer is made of, and where it runs --------===//
#include "moec/Model/LayerShape.h"
#include "moec/Layout/PipelineLayout.h"
#include "moec/Model/Memory.h"
#include <algorithm>

using namespace moec;

LayerShape moec::layerShape(const ModelSpec &M, int64_t Index, const Recipe *R, LayerView View) {
  LayerShape S;
  int64_t L = M.Layers;
  S.Mtp = Index >= L;
  // Megatron's pattern (1-based): every Interval-th layer is standard
  // attention, the others Gated DeltaNet.
  bool PatternApplies = !S.Mtp || View == LayerView::MegatronFlops;
  if (PatternApplies && M.LinearAttention && M.LinearAttention->Interval > 0 &&
      (Index + 1) % M.LinearAttention->Interval != 0)
    S.Mixer = MixerKind::GatedDeltaNet;
  else
    S.Mixer = M.MLA ? MixerKind::MLA : MixerKind::Attention;
  S.OutputGate = M.LinearAttention.hasValue();
  S.QkNorm = M.QkNorm && S.Mixer == MixerKind::Attention;
  if (M.MoE)
    S.MoE = (S.Mtp ? L - 1 : Index) >= M.MoE->DenseLayers;
  if (R && R->Prec != Precision::BF16 && !S.Mtp)
    S.Bf16 = Index < R->Bf16FirstLayers || Index >= L - R->Bf16LastLayers;
  return S;
}

ImagePayload moec::imagePayloadOf(const Recipe &R) {
  ImagePayload P;
  if (!R.Model.Vision || R.Data != DataSourceKind::Real || R.ImagesPerSample <= 0)
    return P;
  const VisionSpec &V = *R.Model.Vision;
  int64_t Patch = std::max<int64_t>(V.PatchSize, 1), Merge = std::max<int64_t>(V.SpatialMerge, 1);
  double Side = double(R.ImageSize / Patch), MergedSide = double(R.ImageSize / (Patch * Merge));
  if (Side <= 0)
    return P;
  P.Images = double(R.ImagesPerSample);
  P.PatchesPerImage = Side * Side;
  P.ImageTokens = P.Images * MergedSide * MergedSide;
  return P;
}

ParallelSizes ParallelSizes::of(const Recipe &R) {
  const ParallelConfig &Par = R.Parallel;
  ParallelSizes S;
  S.TP = std::max<int64_t>(Par.TP, 1);
  S.CP = std::max<int64_t>(Par.CP, 1);
  S.EP = std::max<int64_t>(Par.EP, 1);
  S.ETP = std::max<int64_t>(Par.ETP, 1);
  S.PP = std::max<int64_t>(Par.PP, 1);
  S.VPP = std::max<int64_t>(Par.VPP, 1);
  S.World = std::max<int64_t>(R.WorldSize, 1);
  S.DP = Par.DP > 0 ? Par.DP : std::max<int64_t>(S.World / (S.TP * S.CP * S.PP), 1);
  S.EDP = Par.EDP > 0 ? Par.EDP : std::max<int64_t>(S.World / (S.ETP * S.EP * S.PP), 1);
  return S;
}

StageSplit moec::stageSplitOf(const Recipe &R, const PipelinePlan &P) {
  StageSplit Split;
  ParallelSizes Sizes = ParallelSizes::of(R);
  auto adopt = [&](const PipelinePlan &From) {
    Split.Stages = From.VirtualStages;
    Split.PP = std::max<int64_t>(From.PP, 1);
    Split.VPP = std::max<int64_t>(int64_t(From.VirtualStages.size()) / Split.PP, 1);
  };
  if (!P.VirtualStages.empty() && int64_t(P.VirtualStages.size()) % std::max<int64_t>(P.PP, 1) == 0) {
    adopt(P);
  } else if (llvm::Expected<PipelinePlan> Own = pipelineFor(R)) {
    adopt(*Own);
  } else {
    llvm::consumeError(Own.takeError());
    Split.PP = Sizes.PP;
    Split.VPP = Sizes.VPP;
    int64_t N = Split.PP * Split.VPP;
    Split.Stages.assign(size_t(N), LayoutStage());
    for (int64_t I = 0; I < N; ++I)
      Split.Stages[size_t(I)].DecoderLayers = R.Model.Layers / N + (I < R.Model.Layers % N ? 1 : 0);
    Split.Stages.front().Embedding = true;
    Split.Stages.back().Loss = true;
    Split.Stages.back().MtpLayers = R.Model.MtpLayers;
  }
  int64_t Next = 0;
  for (const LayoutStage &S : Split.Stages) {
    Split.FirstLayer.push_back(Next);
    Next += S.DecoderLayers;
  }
  return Split;
}
