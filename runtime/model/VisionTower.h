//===- model/VisionTower.h - Qwen3-VL's vision encoder ----------*- C++ -*-===//
//
// The vision tower of the Qwen3-VL catalog models, as transformers'
// Qwen3VLMoeVisionModel computes it (models/qwen3_vl_moe/modeling_qwen3_vl_moe.py):
//
//   X = patches W_patch + b           a patch is InChannels x TemporalPatch x
//                                     PatchSize^2 pixels (the Conv3d whose
//                                     stride is its kernel is this linear)
//   X += the learned position table, bilinearly interpolated from its
//        PositionGrid^2 grid to the image's rows x cols of patches
//   Depth blocks, each pre-LayerNorm (weight and bias, eps 1e-6):
//     X += proj(attention(rope2d(q), rope2d(k), v)) + b, q k v = LN1(X) W_qkv + b
//     X += fc2(gelu_tanh(fc1(LN2(X)))), with biases
//   attention is bidirectional within each frame of each image (no mask;
//   frames and images apart, as cu_seqlens splits them);
//   rope2d rotates dims (i, i + d/2) of a head of width d by angle a_i,
//   a = [row f_0 .. row f_{d/4-1}, col f_0 .. col f_{d/4-1}] for the patch's
//   row and column in its image, f_j = theta^(-4j/d) (rotate_half RoPE).
//   The merger: LayerNorm per patch, every MergeSize^2 consecutive patches
//   (a MergeSize x MergeSize block: patches arrive in merge order, block by
//   block) concatenated, fc1, GELU (erf), fc2 to OutHidden, the decoder's
//   width. After each block of DeepstackLayers, a merger of its own with the
//   LayerNorm after the concatenation gives a deepstack feature (the decoder
//   adds feature j to its visual tokens after layer j).
//
// Patches are in merge order: per image and frame, block row, block column,
// then the block's rows and columns. Every parameter is whole on every rank.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_VISIONTOWER_H
#define MOERT_MODEL_VISIONTOWER_H

#include "model/Model.h"

#include <memory>
#include <string>
#include <vector>

namespace moert {

/// What the backward needs, per block and merger.
struct VisionSaved {
  struct LayerNormSaved {
    Tensor X;
    std::vector<float> Mean, Rstd;
  };
  struct Block {
    LayerNormSaved Ln1, Ln2;
    Tensor Xn1, Q, K, V, Attn, Lse, Xn2, H1, Act;
  };
  struct Merger {
    LayerNormSaved Ln;
    Tensor Xn, H1, Act;
  };
  std::vector<ImageGrid> Grids;
  Tensor Patches;
  std::vector<float> Cos, Sin;   ///< [patches, HeadDim / 2]
  std::vector<int64_t> PosIndex; ///< 4 table rows per patch
  std::vector<float> PosWeight;  ///< and their bilinear weights
  std::vector<Block> Blocks;
  Merger Final;
  std::vector<Merger> Deepstack;
  int64_t bytes() const;
};

struct VisionOutput {
  Tensor Tokens;                 ///< [patches / MergeSize^2, OutHidden]
  std::vector<Tensor> Deepstack; ///< one per DeepstackLayers entry, shaped as Tokens
  int64_t bytes() const;
};

class VisionTower {
public:
  /// Parameters "vision.*", initialised from Seed as the decoder's are.
  VisionTower(const VisionConfig &Config, uint64_t Seed);
  ~VisionTower();

  const VisionConfig &config() const { return Config; }
  std::vector<Parameter *> parameters();
  /// The parameter of that name (without "vision."), or null.
  Parameter *find(const std::string &Name);

  /// Patches [sum of patches, patchDim] of Grids' images -> merged tokens.
  /// Where KeepFor is not null, what the backward reads of S stays on the
  /// compute backend, kept under it (ComputeBackend::keepArrays) until the
  /// caller releases it; else all of S is on the host. Where KeepOutputFor
  /// is not null, the output's arrays stay on the backend in fp32, kept
  /// under it, and their host values are unspecified until the caller asks
  /// (ComputeBackend::hostReads) or releases them.
  VisionOutput forward(const Tensor &Patches, const std::vector<ImageGrid> &Grids, VisionSaved &S,
                       const void *KeepFor = nullptr, const void *KeepOutputFor = nullptr);
  /// The output gradients (DDeepstack empty or one per feature) -> the
  /// patches' gradient (empty where not PatchesGradient: pixels have no
  /// parameter); accumulates every parameter's.
  Tensor backward(const VisionSaved &S, const Tensor &DTokens, const std::vector<Tensor> &DDeepstack,
                  bool PatchesGradient = true);

private:
  struct Weights;
  VisionConfig Config;
  std::vector<std::unique_ptr<Parameter>> Params;
  std::unique_ptr<Weights> W;
};

} // namespace moert

#endif
