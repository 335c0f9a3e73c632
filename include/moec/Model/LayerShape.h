//===- LayerShape.h - What a layer is made of, and where it runs -*- C++ -*-===//
//
// The one definition the memory model, the step-time model and the FLOPs
// count share: the kind of each decoder and MTP layer, the parallel sizes
// normalised to at least one, and the placement of the layers over the
// virtual pipeline stages.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_MODEL_LAYERSHAPE_H
#define MOEC_MODEL_LAYERSHAPE_H

#include "moec/Layout/Pipeline.h"
#include "moec/Sema/Recipe.h"
#include <cstdint>
#include <vector>

namespace moec {

enum class MixerKind { Attention, MLA, GatedDeltaNet };

/// What one decoder or MTP layer is made of.
struct LayerShape {
  MixerKind Mixer = MixerKind::Attention;
  /// Sigmoid output gate on the attention (the Qwen3-Next / Qwen3.5 family:
  /// the models with Gated DeltaNet layers).
  bool OutputGate = false;
  bool QkNorm = false; // RMSNorm on queries and keys (attention layers)
  bool MoE = false;    // routed (+ shared) experts, else a dense SwiGLU MLP
  bool Mtp = false;    // an MTP layer: adds its norms, projection and logits
  bool Bf16 = false;   // GEMMs stay in BF16 under a low-precision recipe

  /// A dense index over the kinds a model can have, for per-kind caches
  /// (OutputGate and QkNorm are properties of the model, not the layer).
  unsigned index() const { return unsigned(Mixer) * 8 + unsigned(MoE) * 4 + unsigned(Mtp) * 2 + unsigned(Bf16); }
  static constexpr unsigned NumKinds = 24;
};

/// Whose view of the MTP layer: the layer Megatron builds, or the one its
/// FLOPs count assumes.
enum class LayerView {
  /// What runs: an MTP layer is a standard-attention (or MLA) transformer
  /// layer, MoE when the last decoder layer is, never kept in BF16
  /// (multi_token_prediction.py calls get_fp8_context without a layer
  /// number; the Qwen3-Next MTP layer maps self_attention.linear_qkv).
  Executed,
  /// Megatron-LM's num_floating_point_operations (training.py): the linear
  /// attention pattern runs over decoder + MTP layers.
  MegatronFlops,
};

/// Layer Index counts the decoder layers, then the MTP layers. R (optional)
/// brings the BF16 first/last layers of a low-precision recipe.
LayerShape layerShape(const ModelSpec &M, int64_t Index, const Recipe *R = nullptr,
                      LayerView View = LayerView::Executed);

/// What one sample brings to the vision encoder and the decoder: images,
/// encoder patches per image, and image tokens entering the decoder (after
/// the spatial merge), from data.images_per_sample and data.image_size.
/// Mock data carries no images (bridge-facts.md: mock VLM data without
/// images runs about 2x faster), so a mock-data run neither computes nor
/// stores anything for the encoder's inputs.
struct ImagePayload {
  double Images = 0, PatchesPerImage = 0, ImageTokens = 0;
};
ImagePayload imagePayloadOf(const Recipe &R);

/// A recipe's parallel sizes, each at least one; DP and EDP derived from the
/// world size where the recipe left them at 0 (a world-size error).
struct ParallelSizes {
  int64_t TP = 1, CP = 1, EP = 1, ETP = 1, PP = 1, VPP = 1, DP = 1, EDP = 1, World = 1;
  static ParallelSizes of(const Recipe &R);
};

/// The layers of each virtual stage (rank-major: stage V runs on pipeline
/// rank V mod PP as its chunk V / PP) and the index of its first decoder
/// layer.
struct StageSplit {
  std::vector<LayoutStage> Stages;
  std::vector<int64_t> FirstLayer;
  int64_t PP = 1, VPP = 1;
};

/// The placement the models price: the plan's when it has one; else the
/// recipe's own plan (its layout, or Megatron-Core's even split); else, for
/// a recipe Megatron refuses (layers-split and layout-invalid report it), an
/// even split with the remainder on the first stages, so that a refused
/// recipe still gets an estimate.
StageSplit stageSplitOf(const Recipe &R, const PipelinePlan &P);

} // namespace moec

#endif
