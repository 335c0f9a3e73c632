//===- train/HuggingFaceImport.cpp - Runtime parameters from HF tensors ---===//
#include "train/HuggingFaceImport.h"

#include "llvm/ADT/ArrayRef.h"

#include <algorithm>
#include <numeric>

using namespace moert;

namespace {

/// How a tensor is stored: a Linear weight [out, in], an RMSNorm weight, or
/// as the runtime keeps it.
enum class Stored { Linear, Norm, Plain };

struct NameRule {
  const char *Runtime;
  const char *HuggingFace;
  Stored How;
};

/// A decoder layer's tensors, by the runtime's name after "layers.L.".
constexpr NameRule LayerRules[] = {
    {"attn_norm", "input_layernorm.weight", Stored::Norm},
    {"attn.q", "self_attn.q_proj.weight", Stored::Linear},
    {"attn.k", "self_attn.k_proj.weight", Stored::Linear},
    {"attn.v", "self_attn.v_proj.weight", Stored::Linear},
    {"attn.o", "self_attn.o_proj.weight", Stored::Linear},
    {"attn.q_norm", "self_attn.q_norm.weight", Stored::Norm},
    {"attn.k_norm", "self_attn.k_norm.weight", Stored::Norm},
    // Multi-head latent attention (DeepSeek-V2/V3).
    {"attn.q_down", "self_attn.q_a_proj.weight", Stored::Linear},
    {"attn.q_down_norm", "self_attn.q_a_layernorm.weight", Stored::Norm},
    {"attn.q_up", "self_attn.q_b_proj.weight", Stored::Linear},
    {"attn.kv_down", "self_attn.kv_a_proj_with_mqa.weight", Stored::Linear},
    {"attn.kv_down_norm", "self_attn.kv_a_layernorm.weight", Stored::Norm},
    {"attn.kv_up", "self_attn.kv_b_proj.weight", Stored::Linear},
    {"mlp_norm", "post_attention_layernorm.weight", Stored::Norm},
    {"router", "mlp.gate.weight", Stored::Linear},
    {"mlp.gate", "mlp.gate_proj.weight", Stored::Linear},
    {"mlp.up", "mlp.up_proj.weight", Stored::Linear},
    {"mlp.down", "mlp.down_proj.weight", Stored::Linear},
    {"shared.gate", "mlp.shared_expert.gate_proj.weight", Stored::Linear},
    {"shared.up", "mlp.shared_expert.up_proj.weight", Stored::Linear},
    {"shared.down", "mlp.shared_expert.down_proj.weight", Stored::Linear},
    {"shared.gate_weight", "mlp.shared_expert_gate.weight", Stored::Linear},
};

/// An MTP block's own tensors, after "mtp.K.": DeepSeek-V3's, then Qwen3-Next's.
constexpr NameRule MtpRules[] = {
    {"enorm", "enorm.weight", Stored::Norm},
    {"hnorm", "hnorm.weight", Stored::Norm},
    {"eh_proj", "eh_proj.weight", Stored::Linear},
    {"final_norm", "shared_head.norm.weight", Stored::Norm},
};
constexpr NameRule Qwen3NextMtpRules[] = {
    {"enorm", "pre_fc_norm_embedding.weight", Stored::Norm},
    {"hnorm", "pre_fc_norm_hidden.weight", Stored::Norm},
    {"eh_proj", "fc.weight", Stored::Linear},
    {"final_norm", "norm.weight", Stored::Norm},
};

/// Tensors outside the layers, after the decoder's prefix (the output head
/// at the top).
constexpr NameRule ModelRules[] = {
    {"embedding", "embed_tokens.weight", Stored::Plain},
    {"final_norm", "norm.weight", Stored::Norm},
};

/// Qwen3-VL's vision tower (model/VisionTower.h names), after "vision." and
/// "model.visual.": a block's tensors after "blocks.N.", a merger's after
/// "merger." or "deepstack.J." ("deepstack_merger_list.J.").
constexpr NameRule VisionRules[] = {
    {"patch_embed", "patch_embed.proj.weight", Stored::Linear},
    {"patch_embed_bias", "patch_embed.proj.bias", Stored::Plain},
    {"pos_embed", "pos_embed.weight", Stored::Plain},
};
constexpr NameRule VisionBlockRules[] = {
    {"norm1", "norm1.weight", Stored::Plain},         {"norm1_bias", "norm1.bias", Stored::Plain},
    {"qkv", "attn.qkv.weight", Stored::Linear},       {"qkv_bias", "attn.qkv.bias", Stored::Plain},
    {"proj", "attn.proj.weight", Stored::Linear},     {"proj_bias", "attn.proj.bias", Stored::Plain},
    {"norm2", "norm2.weight", Stored::Plain},         {"norm2_bias", "norm2.bias", Stored::Plain},
    {"fc1", "mlp.linear_fc1.weight", Stored::Linear}, {"fc1_bias", "mlp.linear_fc1.bias", Stored::Plain},
    {"fc2", "mlp.linear_fc2.weight", Stored::Linear}, {"fc2_bias", "mlp.linear_fc2.bias", Stored::Plain},
};
constexpr NameRule VisionMergerRules[] = {
    {"norm", "norm.weight", Stored::Plain},       {"norm_bias", "norm.bias", Stored::Plain},
    {"fc1", "linear_fc1.weight", Stored::Linear}, {"fc1_bias", "linear_fc1.bias", Stored::Plain},
    {"fc2", "linear_fc2.weight", Stored::Linear}, {"fc2_bias", "linear_fc2.bias", Stored::Plain},
};

std::vector<int64_t> range(int64_t Begin, int64_t Count) {
  std::vector<int64_t> R;
  R.resize(size_t(Count));
  std::iota(R.begin(), R.end(), Begin);
  return R;
}

HfSource tensor(std::string Name, std::vector<int64_t> Rows = {}, bool Transpose = false) {
  HfSource S;
  S.Tensor = std::move(Name);
  S.Rows = std::move(Rows);
  S.Transpose = Transpose;
  return S;
}

std::string shapeText(const std::vector<int64_t> &S) {
  std::string Out = "[";
  for (size_t I = 0; I < S.size(); ++I)
    Out += (I ? ", " : "") + std::to_string(S[I]);
  return Out + "]";
}

} // namespace

HuggingFaceImport::HuggingFaceImport(const ModelConfig &Config, const HuggingFaceCheckpoint &Checkpoint)
    : Config(Config), Checkpoint(Checkpoint), Qwen3Next(Checkpoint.modelType() == "qwen3_next") {
  if (llvm::StringRef(Checkpoint.modelType()).startswith("qwen3_vl"))
    Decoder = "model.language_model.";
}

std::string HuggingFaceImport::layerPrefix(llvm::StringRef Name, llvm::StringRef &Tail, bool &MtpOwn,
                                           int64_t &Layer) const {
  MtpOwn = false;
  if (Name.consume_front("layers.")) {
    if (Name.consumeInteger(10, Layer) || !Name.consume_front("."))
      return "";
    Tail = Name;
    return Decoder + "layers." + std::to_string(Layer) + ".";
  }
  int64_t K = 0;
  if (!Name.consume_front("mtp.") || Name.consumeInteger(10, K) || !Name.consume_front("."))
    return "";
  MtpOwn = !Name.consume_front("layer.");
  Tail = Name;
  Layer = Config.Layers + K;
  if (Qwen3Next) // one block, its own tensors unnumbered
    return MtpOwn ? (K == 0 ? "mtp." : "") : "mtp.layers." + std::to_string(K) + ".";
  return Decoder + "layers." + std::to_string(Layer) + ".";
}

std::optional<HfSource> HuggingFaceImport::gatedQuery(const std::string &Pre, bool Gate) const {
  // q_proj [Heads x 2 x HeadDim, Hidden]: head h's query, then its gate.
  HfSource S = tensor(Pre + "self_attn.q_proj.weight", {}, true);
  for (int64_t H = 0; H < Config.Heads; ++H) {
    std::vector<int64_t> R = range((2 * H + (Gate ? 1 : 0)) * Config.HeadDim, Config.HeadDim);
    S.Rows.insert(S.Rows.end(), R.begin(), R.end());
  }
  return S;
}

std::optional<HfSource> HuggingFaceImport::linearAttention(const std::string &Pre, llvm::StringRef Tail) const {
  const ModelConfig::LinearAttention &A = *Config.Linear;
  const int64_t D = A.HeadDim, R = A.ValueHeads / A.KeyHeads, Group = 2 * D + 2 * R * D;
  const std::string At = Pre + "linear_attn.";
  // in_proj_qkvz per key head j: q_j, k_j, the v of its R value heads, their z.
  auto Qkvz = [&](int64_t Offset, int64_t Width) {
    HfSource S = tensor(At + "in_proj_qkvz.weight", {}, true);
    for (int64_t J = 0; J < A.KeyHeads; ++J) {
      std::vector<int64_t> Rows = range(J * Group + Offset, Width);
      S.Rows.insert(S.Rows.end(), Rows.begin(), Rows.end());
    }
    return S;
  };
  // in_proj_ba per key head j: the b of its R value heads, then their a.
  auto Ba = [&](int64_t Offset) {
    HfSource S = tensor(At + "in_proj_ba.weight", {}, true);
    for (int64_t J = 0; J < A.KeyHeads; ++J) {
      std::vector<int64_t> Rows = range(J * 2 * R + Offset, R);
      S.Rows.insert(S.Rows.end(), Rows.begin(), Rows.end());
    }
    return S;
  };
  const int64_t KeyChannels = A.KeyHeads * D, ValueChannels = A.ValueHeads * D;
  auto Conv = [&](int64_t Begin, int64_t Count) { return tensor(At + "conv1d.weight", range(Begin, Count)); };
  if (Tail == "q")
    return Qkvz(0, D);
  if (Tail == "k")
    return Qkvz(D, D);
  if (Tail == "v")
    return Qkvz(2 * D, R * D);
  if (Tail == "z")
    return Qkvz(2 * D + R * D, R * D);
  if (Tail == "b")
    return Ba(0);
  if (Tail == "a")
    return Ba(R);
  if (Tail == "conv_q")
    return Conv(0, KeyChannels);
  if (Tail == "conv_k")
    return Conv(KeyChannels, KeyChannels);
  if (Tail == "conv_v")
    return Conv(2 * KeyChannels, ValueChannels);
  if (Tail == "dt_bias")
    return tensor(At + "dt_bias");
  if (Tail == "a_log")
    return tensor(At + "A_log");
  if (Tail == "norm") // Qwen3NextRMSNormGated: w x norm(o) x silu(z), not zero-centred
    return tensor(At + "norm.weight");
  if (Tail == "out")
    return tensor(At + "out_proj.weight", {}, true);
  return std::nullopt;
}

std::optional<HfSource> HuggingFaceImport::expert(const std::string &Pre, llvm::StringRef Tail) const {
  auto [Id, Kind] = Tail.split('.');
  const std::string GateUp = Pre + "mlp.experts.gate_up_proj";
  if (!Checkpoint.has(GateUp))
    return tensor(Pre + "mlp.experts." + Id.str() + "." + Kind.str() + "_proj.weight", {}, true);
  // Fused: [experts, in, out], gate_up's gate columns then its up columns.
  HfSource S = tensor(Kind == "down" ? Pre + "mlp.experts.down_proj" : GateUp);
  if (Id.getAsInteger(10, S.Slab) || (Kind != "gate" && Kind != "up" && Kind != "down"))
    return std::nullopt;
  if (Kind != "down") {
    S.Columns = Config.MoeFfnHidden;
    S.ColumnBegin = Kind == "up" ? Config.MoeFfnHidden : 0;
    S.Slices = 2;
  }
  return S;
}

std::optional<HfSource> HuggingFaceImport::vision(llvm::StringRef Name) const {
  const std::string Visual = "model.visual.";
  auto Find = [](llvm::ArrayRef<NameRule> Rules, llvm::StringRef Tail,
                 const std::string &Pre) -> std::optional<HfSource> {
    for (const NameRule &R : Rules)
      if (Tail == R.Runtime)
        return tensor(Pre + R.HuggingFace, {}, R.How == Stored::Linear);
    return std::nullopt;
  };
  int64_t N = 0;
  if (Name.consume_front("blocks.")) {
    if (Name.consumeInteger(10, N) || !Name.consume_front("."))
      return std::nullopt;
    return Find(VisionBlockRules, Name, Visual + "blocks." + std::to_string(N) + ".");
  }
  if (Name.consume_front("merger."))
    return Find(VisionMergerRules, Name, Visual + "merger.");
  if (Name.consume_front("deepstack.")) {
    if (Name.consumeInteger(10, N) || !Name.consume_front("."))
      return std::nullopt;
    return Find(VisionMergerRules, Name, Visual + "deepstack_merger_list." + std::to_string(N) + ".");
  }
  return Find(VisionRules, Name, Visual);
}

std::optional<HfSource> HuggingFaceImport::source(llvm::StringRef Name) const {
  auto From = [&](const std::string &Tensor, Stored How) {
    HfSource S = tensor(Tensor, {}, How == Stored::Linear);
    // Qwen3-Next's RMSNorms are zero-centred: output = norm(x) x (1 + w).
    S.Offset = How == Stored::Norm && Qwen3Next ? 1.0f : 0.0f;
    return S;
  };
  for (const NameRule &R : ModelRules)
    if (Name == R.Runtime)
      return From(Decoder + R.HuggingFace, R.How);
  if (Name == "output")
    return From("lm_head.weight", Stored::Linear);
  if (llvm::StringRef Tower = Name; Tower.consume_front("vision."))
    return vision(Tower);
  llvm::StringRef Tail;
  bool MtpOwn = false;
  int64_t Layer = 0;
  std::string Pre = layerPrefix(Name, Tail, MtpOwn, Layer);
  if (Pre.empty())
    return std::nullopt;
  if (MtpOwn) {
    for (const NameRule &R : Qwen3Next ? llvm::makeArrayRef(Qwen3NextMtpRules) : llvm::makeArrayRef(MtpRules))
      if (Tail == R.Runtime)
        return From(Pre + R.HuggingFace, R.How);
    return std::nullopt;
  }
  if (llvm::StringRef Expert = Tail; Expert.consume_front("experts."))
    return expert(Pre, Expert);
  if (Tail.consume_front("gdn.")) {
    if (!Config.Linear)
      return std::nullopt;
    return linearAttention(Pre, Tail);
  }
  if (Config.Linear && (Tail == "attn.q" || Tail == "attn.gate"))
    return gatedQuery(Pre, Tail == "attn.gate");
  for (const NameRule &R : LayerRules)
    if (Tail == R.Runtime) {
      HfSource S = From(Pre + R.HuggingFace, R.How);
      // DeepSeek names its shared experts in the plural, Qwen2-MoE in the singular.
      llvm::StringRef Singular = ".shared_expert.";
      if (size_t At = S.Tensor.find(Singular.str()); At != std::string::npos && !Checkpoint.has(S.Tensor)) {
        std::string Plural = S.Tensor;
        Plural.replace(At, Singular.size(), ".shared_experts.");
        if (Checkpoint.has(Plural))
          S.Tensor = Plural;
      }
      return S;
    }
  return std::nullopt;
}

bool HuggingFaceImport::read(llvm::StringRef Name, const std::vector<int64_t> &Shape, std::vector<float> &Out,
                             std::string &Error) const {
  std::optional<HfSource> S = source(Name);
  const SafeTensorEntry *E = S ? Checkpoint.find(S->Tensor) : nullptr;
  if (!E) {
    Error = "the Hugging Face checkpoint has no tensor for '" + Name.str() + "'" +
            (S ? " ('" + S->Tensor + "')" : std::string());
    return false;
  }
  int64_t Elements = 1;
  for (int64_t D : Shape)
    Elements *= D;
  if (S->Slab >= 0) {
    // [experts, in, out]: the expert's [in, out], some of its columns.
    const bool Three = E->Shape.size() == 3;
    const int64_t In = Three ? E->Shape[1] : 0, Out3 = Three ? E->Shape[2] : 0;
    const int64_t Cols = S->Columns ? S->Columns : Out3;
    if (!Three || S->Slab >= E->Shape[0] || Cols * S->Slices != Out3 || S->ColumnBegin + Cols > Out3 ||
        Shape != std::vector<int64_t>{In, Cols}) {
      Error = "tensor '" + S->Tensor + "' is " + shapeText(E->Shape) + ", which does not hold '" + Name.str() + "' " +
              shapeText(Shape) + ": another model";
      return false;
    }
    const std::vector<float> *Full = values(S->Tensor, Error);
    if (!Full)
      return false;
    Out.resize(size_t(Elements));
    for (int64_t R = 0; R < In; ++R) {
      const float *Row = Full->data() + (S->Slab * In + R) * Out3 + S->ColumnBegin;
      std::copy(Row, Row + Cols, Out.data() + R * Cols);
    }
    return true;
  }
  // The stored tensor is [Rows, RowWidth...]; the rows taken must form the
  // runtime's tensor, transposed for a Linear weight.
  const int64_t StoredRows = E->Shape.empty() ? 1 : E->Shape[0];
  int64_t RowWidth = 1;
  for (size_t I = 1; I < E->Shape.size(); ++I)
    RowWidth *= E->Shape[I];
  const int64_t Taken = S->Rows.empty() ? StoredRows : int64_t(S->Rows.size());
  bool Fits = Taken * RowWidth == Elements && !Shape.empty();
  if (S->Transpose)
    Fits = Fits && Shape.size() == 2 && Shape[0] == RowWidth && Shape[1] == Taken;
  else if (!S->Rows.empty())
    Fits = Fits && Shape[0] == Taken;
  else
    Fits = Fits && (E->Shape == Shape || (E->Shape.size() == 1 && Shape[0] == StoredRows));
  for (int64_t R : S->Rows)
    Fits = Fits && R >= 0 && R < StoredRows;
  if (!Fits) {
    Error = "tensor '" + S->Tensor + "' is " + shapeText(E->Shape) + ", which does not hold '" + Name.str() + "' " +
            shapeText(Shape) + ": another model";
    return false;
  }
  const std::vector<float> *Stored = values(S->Tensor, Error);
  if (!Stored)
    return false;
  const std::vector<float> &Full = *Stored;
  Out.resize(size_t(Elements));
  for (int64_t I = 0; I < Taken; ++I) {
    const float *Row = Full.data() + (S->Rows.empty() ? I : S->Rows[size_t(I)]) * RowWidth;
    for (int64_t C = 0; C < RowWidth; ++C)
      Out[size_t(S->Transpose ? C * Taken + I : I * RowWidth + C)] = Row[C] + S->Offset;
  }
  return true;
}

const std::vector<float> *HuggingFaceImport::values(const std::string &Tensor, std::string &Error) const {
  for (size_t I = 0; I < Recent.size(); ++I)
    if (Recent[I].first == Tensor) {
      std::rotate(Recent.begin(), Recent.begin() + I, Recent.begin() + I + 1);
      return &Recent.front().second;
    }
  std::vector<float> Values;
  if (!Checkpoint.read(Tensor, Values, Error))
    return nullptr;
  if (Recent.size() == 2)
    Recent.pop_back();
  Recent.insert(Recent.begin(), {Tensor, std::move(Values)});
  return &Recent.front().second;
}

bool HuggingFaceImport::readExpertBias(llvm::StringRef Name, const std::vector<int64_t> &Shape, std::vector<float> &Out,
                                       bool &Found, std::string &Error) const {
  llvm::StringRef Tail;
  bool MtpOwn = false;
  int64_t Layer = 0;
  const std::string Tensor = layerPrefix(Name, Tail, MtpOwn, Layer) + "mlp.gate.e_score_correction_bias";
  const SafeTensorEntry *E = Checkpoint.find(Tensor);
  Found = E != nullptr;
  if (!E)
    return true;
  if (E->Shape != Shape) {
    Error = "tensor '" + Tensor + "' is not of the shape of '" + Name.str() + "': another model";
    return false;
  }
  return Checkpoint.read(Tensor, Out, Error);
}
