//===- train/HuggingFaceImport.cpp - Runtime parameters from HF tensors ---===//
#include "train/HuggingFaceImport.h"

#include "llvm/ADT/ArrayRef.h"

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

constexpr NameRule ModelRules[] = {
    {"embedding", "model.embed_tokens.weight", Stored::Plain},
    {"final_norm", "model.norm.weight", Stored::Norm},
    {"output", "lm_head.weight", Stored::Linear},
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
    : Config(Config), Checkpoint(Checkpoint), Qwen3Next(Checkpoint.modelType() == "qwen3_next") {}

std::string HuggingFaceImport::layerPrefix(llvm::StringRef Name, llvm::StringRef &Tail, bool &MtpOwn,
                                           int64_t &Layer) const {
  MtpOwn = false;
  if (Name.consume_front("layers.")) {
    if (Name.consumeInteger(10, Layer) || !Name.consume_front("."))
      return "";
    Tail = Name;
    return "model.layers." + std::to_string(Layer) + ".";
  }
  int64_t K = 0;
  if (!Name.consume_front("mtp.") || Name.consumeInteger(10, K) || !Name.consume_front("."))
    return "";
  MtpOwn = !Name.consume_front("layer.");
  Tail = Name;
  Layer = Config.Layers + K;
  if (Qwen3Next) // one block, its own tensors unnumbered
    return MtpOwn ? (K == 0 ? "mtp." : "") : "mtp.layers." + std::to_string(K) + ".";
  return "model.layers." + std::to_string(Layer) + ".";
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

std::optional<HfSource> HuggingFaceImport::source(llvm::StringRef Name) const {
  auto From = [&](const std::string &Tensor, Stored How) {
    HfSource S = tensor(Tensor, {}, How == Stored::Linear);
    // Qwen3-Next's RMSNorms are zero-centred: output = norm(x) x (1 + w).
    S.Offset = How == Stored::Norm && Qwen3Next ? 1.0f : 0.0f;
    return S;
  };
  for (const NameRule &R : ModelRules)
    if (Name == R.Runtime)
      return From(R.HuggingFace, R.How);
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
  llvm::StringRef Expert = Tail;
  if (Expert.consume_front("experts.")) {
    auto [Id, Kind] = Expert.split('.');
    return From(Pre + "mlp.experts." + Id.str() + "." + Kind.str() + "_proj.weight", Stored::Linear);
  }
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
  // The stored tensor is [Rows, RowWidth...]; the rows taken must form the
  // runtime's tensor, transposed for a Linear weight.
  const int64_t StoredRows = E->Shape.empty() ? 1 : E->Shape[0];
  int64_t RowWidth = 1;
  for (size_t I = 1; I < E->Shape.size(); ++I)
    RowWidth *= E->Shape[I];
  const int64_t Taken = S->Rows.empty() ? StoredRows : int64_t(S->Rows.size());
  int64_t Elements = 1;
  for (int64_t D : Shape)
    Elements *= D;
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
  // A fused tensor (in_proj_qkvz, conv1d, q_proj) serves the parameters
  // that follow one another: it is read once for all of them.
  if (S->Tensor != LastTensor) {
    LastTensor.clear();
    if (!Checkpoint.read(S->Tensor, Last, Error))
      return false;
    LastTensor = S->Tensor;
  }
  const std::vector<float> &Full = Last;
  Out.resize(size_t(Elements));
  for (int64_t I = 0; I < Taken; ++I) {
    const float *Row = Full.data() + (S->Rows.empty() ? I : S->Rows[size_t(I)]) * RowWidth;
    for (int64_t C = 0; C < RowWidth; ++C)
      Out[size_t(S->Transpose ? C * Taken + I : I * RowWidth + C)] = Row[C] + S->Offset;
  }
  return true;
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
