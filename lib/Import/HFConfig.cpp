//===- HFConfig.cpp -------------------------------------------------------===//
#include "moec/Import/HFConfig.h"
#include "moec/AST/Builder.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include <cmath>
#include <fmt/format.h>

using namespace moec;
namespace json = llvm::json;

namespace {
llvm::Error fail(const std::string &Message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), Message);
}

/// Reads integer keys, first match wins, remembering which keys were used.
class ConfigReader {
public:
  explicit ConfigReader(const json::Object &O) : O(O) {}

  llvm::Optional<int64_t> integer(std::initializer_list<llvm::StringRef> Keys) {
    for (llvm::StringRef K : Keys) {
      const json::Value *V = O.get(K);
      if (!V || V->kind() == json::Value::Null)
        continue;
      Used.insert(K);
      if (auto I = V->getAsInteger())
        return *I;
      // 8.0 counts as 8; a double outside int64_t's range is checked before
      // the conversion, which would be undefined (found by fuzz-hfconfig).
      if (auto D = V->getAsNumber(); D && *D >= -0x1p63 && *D < 0x1p63 && *D == std::trunc(*D))
        return int64_t(*D);
      BadKey = K.str();
    }
    return llvm::None;
  }
  llvm::Optional<llvm::StringRef> string(llvm::StringRef Key) {
    if (const json::Value *V = O.get(Key)) {
      Used.insert(Key);
      return V->getAsString();
    }
    return llvm::None;
  }
  llvm::Optional<double> number(llvm::StringRef Key) {
    if (const json::Value *V = O.get(Key)) {
      Used.insert(Key);
      return V->getAsNumber();
    }
    return llvm::None;
  }
  llvm::Optional<bool> boolean(llvm::StringRef Key) {
    if (const json::Value *V = O.get(Key)) {
      Used.insert(Key);
      return V->getAsBoolean();
    }
    return llvm::None;
  }
  /// A list of non-negative integers; None when absent or anything else
  /// (a list of other values is not used: it is reported as ignored).
  llvm::Optional<std::vector<int64_t>> integerList(llvm::StringRef Key) {
    const json::Array *A = O.getArray(Key);
    if (!A)
      return llvm::None;
    std::vector<int64_t> Out;
    for (const json::Value &V : *A) {
      auto I = V.getAsInteger();
      if (!I || *I < 0 || *I > (1 << 20))
        return llvm::None;
      Out.push_back(*I);
    }
    Used.insert(Key);
    return Out;
  }
  void markUsed(llvm::StringRef Key) { Used.insert(Key); }
  llvm::Expected<int64_t> required(std::initializer_list<llvm::StringRef> Keys) {
    if (auto V = integer(Keys))
      return *V;
    if (!BadKey.empty())
      return fail(fmt::format("config key '{}' is not an integer", BadKey));
    return fail(fmt::format("config has no '{}'", Keys.begin()->str()));
  }
  std::vector<std::string> unused(const llvm::StringSet<> &Known) const {
    std::vector<std::string> Out;
    for (const auto &KV : O)
      if (!Used.count(KV.first) && !Known.count(KV.first))
        Out.push_back(KV.first.str());
    std::sort(Out.begin(), Out.end());
    return Out;
  }

private:
  const json::Object &O;
  llvm::StringSet<> Used;
  std::string BadKey;
};

// Keys that describe training or tokenizer details rather than the shape the
// planner and rules need; they are not reported as ignored.
const llvm::StringSet<> Uninteresting = {"architectures",
                                         "model_type",
                                         "torch_dtype",
                                         "dtype",
                                         "transformers_version",
                                         "bos_token_id",
                                         "eos_token_id",
                                         "pad_token_id",
                                         "tie_word_embeddings",
                                         "use_cache",
                                         "initializer_range",
                                         "hidden_act",
                                         "attention_bias",
                                         "attention_dropout",
                                         "rope_theta",
                                         "rope_scaling",
                                         "output_router_logits",
                                         "router_aux_loss_coef",
                                         "norm_topk_prob",
                                         "auto_map",
                                         "quantization_config",
                                         "sliding_window",
                                         "use_sliding_window",
                                         "max_window_layers",
                                         "aux_loss_alpha",
                                         "seq_aux",
                                         "ep_size",
                                         "pretraining_tp",
                                         "moe_layer_freq",
                                         "router_jitter_noise",
                                         "image_token_id",
                                         "video_token_id",
                                         "vision_start_token_id",
                                         "vision_end_token_id",
                                         "text_config",
                                         "vision_config",
                                         "decoder_sparse_step",
                                         "mlp_only_layers",
                                         "layer_types",
                                         "head_dim"};
} // namespace

llvm::Expected<HFImport> moec::importHFConfig(llvm::StringRef JsonText, llvm::StringRef ModelName) {
  llvm::Expected<json::Value> Parsed = json::parse(JsonText);
  if (!Parsed)
    return fail("config.json is not valid JSON: " + llvm::toString(Parsed.takeError()));
  const json::Object *Root = Parsed->getAsObject();
  if (!Root)
    return fail("config.json must hold a JSON object");
  // Qwen3-VL nests the language model in text_config.
  const json::Object *Text = Root->getObject("text_config");
  const json::Object *Vision = Root->getObject("vision_config");
  ConfigReader C(Text ? *Text : *Root);

  if (!ast::isIdentifier(ModelName))
    return fail(fmt::format("'{}' is not a .moe model name", ModelName.str()));
  std::vector<ast::Entry> Model;
  auto Set = [](std::vector<ast::Entry> &In, llvm::StringRef Field, ast::ExprPtr V) {
    In.push_back(ast::makeAssignment(Field, std::move(V)));
  };
  auto Req = [&](const char *Field, std::initializer_list<llvm::StringRef> Keys) -> llvm::Error {
    llvm::Expected<int64_t> V = C.required(Keys);
    if (!V)
      return V.takeError();
    Set(Model, Field, ast::makeInt(*V));
    return llvm::Error::success();
  };
  auto Opt = [&](const char *Field, std::initializer_list<llvm::StringRef> Keys) {
    if (auto V = C.integer(Keys))
      Set(Model, Field, ast::makeInt(*V));
  };

  if (auto E = Req("layers", {"num_hidden_layers", "num_layers", "n_layers"}))
    return E;
  if (auto E = Req("hidden", {"hidden_size", "d_model"}))
    return E;
  if (auto E = Req("heads", {"num_attention_heads", "n_heads"}))
    return E;
  if (auto E = Req("vocab", {"vocab_size"}))
    return E;
  Opt("kv_heads", {"num_key_value_heads"});
  Opt("max_seq_len", {"max_position_embeddings"});
  if (auto Theta = C.number("rope_theta"); Theta && *Theta >= 1 && *Theta < 1e15)
    Set(Model, "rope_theta", ast::makeNumber(*Theta));
  // Qwen-VL's multimodal RoPE: rope_scaling (rope_parameters in newer
  // transformers) says how the frequencies split over time, rows, columns.
  for (llvm::StringRef Key : {"rope_scaling", "rope_parameters"})
    if (const json::Object *Rope = (Text ? *Text : *Root).getObject(Key))
      if (auto Section = ConfigReader(*Rope).integerList("mrope_section"); Section && !Section->empty()) {
        std::vector<ast::ExprPtr> Items;
        for (int64_t N : *Section)
          Items.push_back(ast::makeInt(N));
        Set(Model, "mrope_section", ast::makeList(std::move(Items)));
        break;
      }
  if (auto Eps = C.number("rms_norm_eps"); Eps && *Eps > 0 && *Eps < 0.1)
    Set(Model, "norm_epsilon", ast::makeNumber(*Eps));
  // DeepSeek-V3 says num_nextn_predict_layers, the Qwen3.5 family mtp_num_hidden_layers
  // (Megatron-Bridge main 067f987 models/conversion/model_bridge.py:498 maps both).
  Opt("mtp_layers", {"num_nextn_predict_layers", "mtp_num_hidden_layers", "mtp_num_layers"});

  // MoE: DeepSeek (n_routed_experts), Qwen (num_experts), Mixtral (num_local_experts).
  llvm::Optional<int64_t> Experts = C.integer({"n_routed_experts", "num_experts", "num_local_experts"});
  llvm::Optional<int64_t> MoeFfn = C.integer({"moe_intermediate_size"});
  llvm::Optional<int64_t> Ffn = C.integer({"intermediate_size", "ffn_hidden_size"});
  bool IsMixtral = C.integer({"num_local_experts"}).hasValue() && !MoeFfn;
  if (Ffn && !IsMixtral)
    Set(Model, "ffn_hidden", ast::makeInt(*Ffn));

  // MLA (DeepSeek-V3) or an explicit head_dim (Qwen3).
  if (auto KvLora = C.integer({"kv_lora_rank"})) {
    llvm::Optional<int64_t> QLora = C.integer({"q_lora_rank"});
    auto Nope = C.required({"qk_nope_head_dim"});
    if (!Nope)
      return Nope.takeError();
    auto Rope = C.required({"qk_rope_head_dim"});
    if (!Rope)
      return Rope.takeError();
    auto V = C.required({"v_head_dim"});
    if (!V)
      return V.takeError();
    Set(Model, "head_dim", ast::makeInt(*Nope));
    std::vector<ast::Argument> Mla;
    if (QLora)
      Mla.push_back(ast::makeArg("q_lora_rank", ast::makeInt(*QLora)));
    Mla.push_back(ast::makeArg("kv_lora_rank", ast::makeInt(*KvLora)));
    Mla.push_back(ast::makeArg("qk_head_dim", ast::makeInt(*Nope)));
    Mla.push_back(ast::makeArg("qk_rope_head_dim", ast::makeInt(*Rope)));
    Mla.push_back(ast::makeArg("v_head_dim", ast::makeInt(*V)));
    Set(Model, "attention", ast::makeCall("mla", std::move(Mla)));
  } else if (auto HeadDim = C.integer({"head_dim"})) {
    Set(Model, "head_dim", ast::makeInt(*HeadDim));
  }
  // HF configs carry no flag: the Qwen3 modeling code (qwen3, qwen3_moe,
  // qwen3_next, qwen3_vl*, qwen3_5*) always normalises q and k.
  llvm::Optional<llvm::StringRef> Type = Root->getString("model_type");
  if (Type && Type->startswith("qwen3"))
    Set(Model, "qk_norm", ast::makeBool(true));
  // Qwen3-Next rotates a quarter of each head (Megatron's rotary_percent).
  if (auto Fraction = C.number("partial_rotary_factor"); Fraction && *Fraction > 0 && *Fraction < 1)
    Set(Model, "rope_fraction", ast::makeNumber(*Fraction));

  if (Experts && *Experts > 0) {
    auto TopK = C.required({"num_experts_per_tok", "moe_top_k"});
    if (!TopK)
      return TopK.takeError();
    int64_t ExpertFfn = MoeFfn ? *MoeFfn : Ffn ? *Ffn : 0;
    if (!ExpertFfn)
      return fail("config has neither 'moe_intermediate_size' nor 'intermediate_size'");
    std::vector<ast::Entry> Moe;
    Set(Moe, "experts", ast::makeInt(*Experts));
    Set(Moe, "top_k", ast::makeInt(*TopK));
    Set(Moe, "ffn_hidden", ast::makeInt(ExpertFfn));
    llvm::Optional<int64_t> Shared = C.integer({"n_shared_experts"});
    llvm::Optional<int64_t> SharedFfn = C.integer({"shared_expert_intermediate_size"});
    if (Shared && *Shared > 0) {
      int64_t SharedHidden;
      if (llvm::MulOverflow(*Shared, ExpertFfn, SharedHidden))
        return fail(fmt::format("config's n_shared_experts x expert FFN size ({} x {}) overflows a 64-bit integer",
                                *Shared, ExpertFfn));
      Set(Moe, "shared_experts", ast::makeInt(*Shared));
      Set(Moe, "shared_ffn_hidden", ast::makeInt(SharedHidden));
    } else if (SharedFfn && *SharedFfn > 0) {
      Set(Moe, "shared_experts", ast::makeInt(1));
      Set(Moe, "shared_ffn_hidden", ast::makeInt(*SharedFfn));
    }
    if (auto Dense = C.integer({"first_k_dense_replace"}); Dense && *Dense > 0)
      Set(Moe, "dense_layers", ast::makeInt(*Dense));
    if (auto Scoring = C.string("scoring_func"); Scoring && *Scoring == "sigmoid")
      Set(Moe, "router", ast::makeName("sigmoid"));
    if (auto Method = C.string("topk_method"); Method && *Method == "noaux_tc")
      Set(Moe, "expert_bias", ast::makeBool(true));
    // DeepSeek's factor on the routing weights, Megatron's moe_router_topk_scaling_factor
    // (Megatron-Bridge 0.3.1 models/conversion/model_bridge.py:276 maps one to the other).
    if (auto Scaling = C.number("routed_scaling_factor"); Scaling && *Scaling > 0 && *Scaling < 1e6)
      Set(Moe, "topk_scaling", ast::makeNumber(*Scaling));
    if (auto Groups = C.integer({"n_group"}); Groups && *Groups > 1) {
      Set(Moe, "groups", ast::makeInt(*Groups));
      if (auto GroupTopK = C.integer({"topk_group"}))
        Set(Moe, "group_top_k", ast::makeInt(*GroupTopK));
    }
    // Qwen3-Next's modeling code always gates its shared expert with a
    // sigmoid (shared_expert_gate; Megatron's moe_shared_expert_gate).
    if (Type && *Type == "qwen3_next" && (Shared.getValueOr(0) > 0 || SharedFfn.getValueOr(0) > 0))
      Set(Moe, "shared_expert_gate", ast::makeBool(true));
    Model.push_back(ast::makeSection("moe", std::move(Moe)));
  }

  // Qwen3-Next: Gated DeltaNet layers between full-attention layers.
  if (auto Interval = C.integer({"full_attention_interval"})) {
    auto KeyHeads = C.required({"linear_num_key_heads"});
    if (!KeyHeads)
      return KeyHeads.takeError();
    auto ValueHeads = C.required({"linear_num_value_heads"});
    if (!ValueHeads)
      return ValueHeads.takeError();
    auto HeadDim = C.required({"linear_key_head_dim", "linear_value_head_dim"});
    if (!HeadDim)
      return HeadDim.takeError();
    C.integer({"linear_value_head_dim"});
    C.integer({"linear_conv_kernel_dim"});
    std::vector<ast::Entry> Linear;
    Set(Linear, "interval", ast::makeInt(*Interval));
    Set(Linear, "key_heads", ast::makeInt(*KeyHeads));
    Set(Linear, "value_heads", ast::makeInt(*ValueHeads));
    Set(Linear, "head_dim", ast::makeInt(*HeadDim));
    Model.push_back(ast::makeSection("linear_attention", std::move(Linear)));
  }

  std::vector<std::string> Ignored = C.unused(Uninteresting);
  if (Vision) {
    ConfigReader V(*Vision);
    std::vector<ast::Entry> Tower;
    auto VReq = [&](const char *Field, std::initializer_list<llvm::StringRef> Keys) -> llvm::Error {
      llvm::Expected<int64_t> X = V.required(Keys);
      if (!X)
        return fail("vision_config: " + llvm::toString(X.takeError()));
      Set(Tower, Field, ast::makeInt(*X));
      return llvm::Error::success();
    };
    if (auto E = VReq("layers", {"depth", "num_hidden_layers"}))
      return E;
    if (auto E = VReq("hidden", {"hidden_size", "embed_dim"}))
      return E;
    if (auto E = VReq("heads", {"num_heads", "num_attention_heads"}))
      return E;
    if (auto E = VReq("ffn_hidden", {"intermediate_size"}))
      return E;
    if (auto E = VReq("patch_size", {"patch_size"}))
      return E;
    if (auto M = V.integer({"spatial_merge_size"}))
      Set(Tower, "spatial_merge", ast::makeInt(*M));
    if (auto O = V.integer({"out_hidden_size"}))
      Set(Tower, "out_hidden", ast::makeInt(*O));
    if (auto T = V.integer({"temporal_patch_size"}))
      Set(Tower, "temporal_patch", ast::makeInt(*T));
    if (auto P = V.integer({"num_position_embeddings"}))
      Set(Tower, "position_embeddings", ast::makeInt(*P));
    if (auto Layers = V.integerList("deepstack_visual_indexes"); Layers && !Layers->empty()) {
      std::vector<ast::ExprPtr> Items;
      for (int64_t L : *Layers)
        Items.push_back(ast::makeInt(L));
      Set(Tower, "deepstack_layers", ast::makeList(std::move(Items)));
    }
    // An image's ids in the text sit beside vision_config, at the top.
    ConfigReader Top(*Root);
    for (auto [Field, Key] : {std::pair{"start_token", "vision_start_token_id"},
                              {"image_token", "image_token_id"},
                              {"end_token", "vision_end_token_id"}})
      if (auto Id = Top.integer({Key}))
        Set(Tower, Field, ast::makeInt(*Id));
    Model.push_back(ast::makeSection("vision", std::move(Tower)));
  }
  ast::File F;
  F.Definitions.push_back(ast::makeDefinition(ast::DefKind::Model, ModelName, std::move(Model)));
  return HFImport{ast::printed(F), std::move(Ignored)};
}
