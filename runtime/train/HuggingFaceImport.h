//===- train/HuggingFaceImport.h - Runtime parameters from HF tensors -*- C++ -*-===//
//
// Where each runtime parameter's full value lies in a Hugging Face checkpoint
// of its family (`moerun --init-from-hf`), and how it is cut from there:
//
//  - Llama-like names (model.layers.L.self_attn.q_proj, ...): Qwen3-MoE,
//    DeepSeek-V3 (latent attention, its MTP block stored as the layer after
//    the decoder's, model.layers.{Layers + k}), Qwen2-MoE's singular
//    shared_expert or DeepSeek's plural shared_experts, whichever the file has.
//  - Linear weights are stored [out, in]; the runtime keeps [in, out].
//  - Qwen3-Next (model_type qwen3_next; transformers' modeling_qwen3_next):
//    every RMSNorm but the Gated DeltaNet's is zero-centred, output = norm(x)
//    x (1 + w), so w + 1 is loaded; a gated full-attention layer's q_proj
//    holds each head's query and then its output gate ([q, gate] per head);
//    a linear layer's in_proj_qkvz holds per key head its q, k, its value
//    heads' v and z, in_proj_ba per key head its value heads' b then a;
//    conv1d.weight [channels, 1, kernel] runs over q, k, v concatenated;
//    mlp.shared_expert_gate.weight is the shared expert's sigmoid gate; its
//    one MTP block is mtp.* (mtp.fc = eh_proj, mtp.pre_fc_norm_embedding =
//    enorm, mtp.pre_fc_norm_hidden = hnorm, mtp.norm = the block's final
//    norm, mtp.layers.0 its decoder layer: Megatron-Bridge 0.3.1
//    models/qwen/qwen3_next_bridge.py mapping_registry).
//  - Qwen3-VL (model_type qwen3_vl_moe or qwen3_vl; transformers'
//    modeling_qwen3_vl_moe): the decoder under model.language_model., the
//    vision tower under model.visual. (patch_embed.proj as a Linear over the
//    flattened patch, pos_embed, blocks.N.{norm1, attn.qkv, attn.proj,
//    norm2, mlp.linear_fc1, mlp.linear_fc2}, merger, deepstack_merger_list.J,
//    with their biases); each MoE layer's experts fused in two tensors stored
//    [in, out]: mlp.experts.gate_up_proj [experts, hidden, 2 x ffn] (gate
//    columns, then up) and mlp.experts.down_proj [experts, ffn, hidden].
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TRAIN_HUGGINGFACEIMPORT_H
#define MOERT_TRAIN_HUGGINGFACEIMPORT_H

#include "checkpoint/HuggingFaceCheckpoint.h"
#include "model/Model.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace moert {

/// Where a runtime parameter's full value comes from.
struct HfSource {
  std::string Tensor;        ///< the checkpoint's tensor
  std::vector<int64_t> Rows; ///< its rows (first dimension) taken, in order; empty: all
  bool Transpose = false;    ///< the rows taken form an [out, in] Linear weight
  float Offset = 0;          ///< added to every value (zero-centred norms)
  /// A fused tensor of every expert, [experts, in, out]: this expert's [in,
  /// out] slice, of which columns [ColumnBegin, ColumnBegin + Columns) (0
  /// Columns: all), out being Slices blocks of Columns (gate_up: 2). -1: not
  /// fused.
  int64_t Slab = -1;
  int64_t ColumnBegin = 0, Columns = 0, Slices = 1;
};

class HuggingFaceImport {
public:
  HuggingFaceImport(const ModelConfig &Config, const HuggingFaceCheckpoint &Checkpoint);

  /// The source of a runtime parameter; nullopt when the family has none.
  std::optional<HfSource> source(llvm::StringRef Name) const;
  /// The full value of a runtime parameter of full shape Shape, or false
  /// with Error naming the tensor that is missing or of another shape.
  bool read(llvm::StringRef Name, const std::vector<int64_t> &Shape, std::vector<float> &Out, std::string &Error) const;
  /// The aux-loss-free expert bias of a router (DeepSeek-V3's
  /// e_score_correction_bias) into Out, Found false where the checkpoint has
  /// none (the bias then starts at zero, as in Megatron-Core); false with
  /// Error when it is of another shape or cannot be read.
  bool readExpertBias(llvm::StringRef Name, const std::vector<int64_t> &Shape, std::vector<float> &Out, bool &Found,
                      std::string &Error) const;

private:
  /// "layers.L." -> "model.layers.L.", "mtp.K." -> "model.layers.{Layers +
  /// K}." (Qwen3-Next: "mtp.layers.K." for the block's layer, "mtp." for its
  /// own tensors); Tail gets the rest of the name, MtpOwn whether it is one
  /// of the MTP block's own tensors rather than its decoder layer's.
  std::string layerPrefix(llvm::StringRef Name, llvm::StringRef &Tail, bool &MtpOwn, int64_t &Layer) const;
  std::optional<HfSource> linearAttention(const std::string &Pre, llvm::StringRef Tail) const;
  std::optional<HfSource> gatedQuery(const std::string &Pre, bool Gate) const;
  std::optional<HfSource> expert(const std::string &Pre, llvm::StringRef Tail) const;
  std::optional<HfSource> vision(llvm::StringRef Name) const;
  /// The stored tensor's values, read once while it serves the parameters
  /// that follow one another (a fused tensor's slices, an expert's
  /// alternating gate_up and down).
  const std::vector<float> *values(const std::string &Tensor, std::string &Error) const;

  const ModelConfig &Config;
  const HuggingFaceCheckpoint &Checkpoint;
  bool Qwen3Next = false; ///< config.json model_type qwen3_next
  /// Where the decoder's tensors are: "model." or Qwen3-VL's
  /// "model.language_model.".
  std::string Decoder = "model.";
  /// The two tensors read last and their values, the newer first.
  mutable std::vector<std::pair<std::string, std::vector<float>>> Recent;
};

} // namespace moert

#endif
