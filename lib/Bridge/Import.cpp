//===- Import.cpp - Megatron-Bridge configuration to a .moe recipe --------===//
//
// The inverse of Export.cpp's field map. The text is flattened to dotted keys
// with their positions; each translation consumes the keys it reads, and
// every key left unconsumed at the end is reported (with a known reason where
// there is one), so nothing is dropped silently. The recipe is built as a
// syntax tree and printed by ast::print; the text is then formatted and
// parsed back, and must give the same tree.
//
//===----------------------------------------------------------------------===//
#include "moec/Bridge/Import.h"
#include "moec/AST/Builder.h"
#include "moec/Bridge/BridgeValue.h"
#include "moec/Bridge/Export.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Format/Formatter.h"
#include "moec/Sema/Sema.h"
#include "moec/Sema/TargetDefaults.h"
#include "moec/Syntax/Parser.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <tuple>
#include <yaml-cpp/yaml.h>

using namespace moec;
using namespace moec::bridge;
using llvm::StringRef;

bool ImportResult::hasErrors() const {
  return llvm::any_of(Messages, [](const ImportMessage &M) { return M.K == ImportMessage::Kind::Error; });
}

std::vector<const ImportMessage *> ImportResult::unmapped() const {
  std::vector<const ImportMessage *> Out;
  for (const ImportMessage &M : Messages)
    if (M.K == ImportMessage::Kind::Warning && !M.Key.empty())
      Out.push_back(&M);
  return Out;
}

//===----------------------------------------------------------------------===//
// The catalog, lowered once through Sema.
//===----------------------------------------------------------------------===//

namespace {
const Sema::LoweredCatalog &catalog() {
  static const Sema::LoweredCatalog Lowered = [] {
    llvm::SourceMgr SM;
    DiagnosticEngine Diags(SM);
    return Sema(Diags).lowerCatalog();
  }();
  return Lowered;
}
} // namespace

const std::vector<ModelSpec> &bridge::catalogModels() { return catalog().Models; }
const std::vector<GpuSpec> &bridge::catalogGpus() { return catalog().Gpus; }

namespace {
/// Megatron-Core's rotary_base when a config does not set it (GPTModelProvider, transformer_config).
constexpr double DefaultRotaryBase = 10000;
/// Megatron-Core 0.16.1's layernorm_epsilon default (transformer/transformer_config.py:150).
constexpr double DefaultNormEpsilon = 1e-5;

/// Lowers the model definition the importer built (the one definition of
/// Model) exactly as Sema lowers a user's (defaults, derived fields, checks);
/// the messages when it fails.
llvm::Optional<ModelSpec> lowerModelDefinition(const ast::File &Model, std::string &Messages) {
  std::string Text = ast::printed(Model);
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "<imported model>"));
  S.analyze();
  for (const Diagnostic &D : Diags.finish())
    if (D.Sev == Severity::Error)
      Messages += (Messages.empty() ? "" : "; ") + D.Message;
  const ModelSpec *Lowered = nullptr;
  if (const ast::File *F = S.mainFile())
    for (const ast::Definition &D : F->Definitions)
      if (D.Kind == ast::DefKind::Model && D.Name == Model.Definitions.front().Name)
        Lowered = S.loweredModel(&D);
  if (!Messages.empty() || !Lowered)
    return llvm::None;
  return *Lowered;
}
} // namespace

//===----------------------------------------------------------------------===//
// Reading the text.
//===----------------------------------------------------------------------===//

namespace {
struct Entry {
  std::string Key;
  Value V;
  unsigned Line = 0, Column = 0;
  bool Used = false;
};

/// A YAML scalar as a Bridge value: plain scalars are typed, quoted ones are
/// strings.
Value scalarValue(const YAML::Node &N) {
  std::string S = N.Scalar();
  if (N.Tag() == "!")
    return Value::string(S);
  if (S.empty() || S == "~" || S == "null" || S == "Null" || S == "NULL" || S == "None")
    return Value::null();
  if (S == "true" || S == "True" || S == "TRUE")
    return Value::boolean(true);
  if (S == "false" || S == "False" || S == "FALSE")
    return Value::boolean(false);
  int64_t I;
  if (!StringRef(S).getAsInteger(10, I))
    return Value::integer(I);
  double D;
  if (!StringRef(S).getAsDouble(D))
    return Value::real(D);
  return Value::string(S);
}

llvm::Optional<Value> nodeValue(const YAML::Node &N) {
  if (N.IsNull())
    return Value::null();
  if (N.IsScalar())
    return scalarValue(N);
  if (N.IsSequence()) {
    std::vector<Value> Items;
    for (const YAML::Node &I : N) {
      llvm::Optional<Value> V = nodeValue(I);
      if (!V)
        return llvm::None;
      Items.push_back(*V);
    }
    return Value::list(std::move(Items));
  }
  return llvm::None; // a map inside a list
}

class Reader {
public:
  std::vector<Entry> Entries;
  std::vector<ImportMessage> Messages;
  /// From a `# moec: key=value ...` header comment.
  std::map<std::string, std::string> Header;

  void error(unsigned Line, unsigned Col, std::string Msg, std::string Key = "") {
    Messages.push_back({ImportMessage::Kind::Error, std::move(Key), std::move(Msg), Line, Col, ""});
  }

  void read(StringRef Text) {
    readHeader(Text);
    YAML::Node Root;
    try {
      Root = YAML::Load(Text.str());
    } catch (const YAML::Exception &Ex) {
      // Not YAML at all: it may still be an override list with quotes
      // YAML does not accept.
      if (looksLikeOverrides(Text)) {
        readOverrides(Text);
        return;
      }
      error(Ex.mark.line + 1, Ex.mark.column + 1, "not valid YAML: " + Ex.msg);
      return;
    }
    if (Root.IsMap()) {
      flatten(Root, "");
      return;
    }
    if (Root.IsNull()) {
      error(0, 0, "the file holds no configuration");
      return;
    }
    if (Root.IsSequence()) {
      // A YAML list of `key=value` strings.
      for (const YAML::Node &N : Root) {
        if (!N.IsScalar()) {
          error(N.Mark().line + 1, N.Mark().column + 1, "expected a `key=value` override in the list");
          continue;
        }
        override(N.Scalar(), N.Mark().line + 1, N.Mark().column + 1);
      }
      return;
    }
    readOverrides(Text);
  }

private:
  void readHeader(StringRef Text) {
    llvm::SmallVector<StringRef, 8> Lines;
    Text.split(Lines, '\n');
    for (StringRef L : Lines) {
      L = L.trim();
      if (!L.consume_front("# moec:"))
        continue;
      L = L.trim();
      // recipe= comes last and may hold spaces.
      while (!L.empty()) {
        auto [Word, Rest] = L.split(' ');
        auto [K, V] = Word.split('=');
        if (K == "recipe") {
          Header["recipe"] = L.drop_front(7).str();
          break;
        }
        Header[K.str()] = V.str();
        L = Rest.trim();
      }
    }
  }

  static bool looksLikeOverrides(StringRef Text) {
    StringRef T = Text.ltrim();
    while (T.startswith("#"))
      T = T.split('\n').second.ltrim();
    return T.contains('=');
  }

  void flatten(const YAML::Node &N, const std::string &Prefix) {
    for (auto It = N.begin(); It != N.end(); ++It) {
      // Copies: `It->second` lives in a proxy that ends with the statement.
      YAML::Node K = It->first, V = It->second;
      std::string Key = Prefix.empty() ? K.Scalar() : Prefix + "." + K.Scalar();
      YAML::Mark M = K.Mark();
      // What to_yaml() writes for a torch dtype or a function, `{_call_:
      // false, _target_: torch.bfloat16}`, is that name: one value.
      if (V.IsMap() && V.size() == 2 && V["_target_"] && V["_call_"] && V["_target_"].IsScalar() &&
          V["_call_"].IsScalar() && V["_call_"].Scalar() == "false") {
        Entries.push_back({Key, Value::string(V["_target_"].Scalar()), unsigned(M.line + 1), unsigned(M.column + 1)});
        continue;
      }
      if (V.IsMap()) {
        flatten(V, Key);
        continue;
      }
      llvm::Optional<Value> Val = nodeValue(V);
      if (!Val) {
        error(M.line + 1, M.column + 1, "'" + Key + "' holds a list of sections, which no .moe field takes", Key);
        continue;
      }
      Entries.push_back({Key, *Val, unsigned(M.line + 1), unsigned(M.column + 1)});
    }
  }

  /// Splits the text into shell words (quotes and backslashes as a POSIX
  /// shell reads them), remembering where each word starts.
  void readOverrides(StringRef Text) {
    unsigned Line = 1, Col = 1;
    size_t I = 0;
    auto Advance = [&]() {
      if (Text[I] == '\n')
        ++Line, Col = 1;
      else
        ++Col;
      ++I;
    };
    while (I < Text.size()) {
      char C = Text[I];
      if (C == '#') { // a comment to the end of the line
        while (I < Text.size() && Text[I] != '\n')
          Advance();
        continue;
      }
      if (isspace(static_cast<unsigned char>(C)) || (C == '\\' && I + 1 < Text.size() && Text[I + 1] == '\n')) {
        Advance();
        continue;
      }
      unsigned WLine = Line, WCol = Col;
      std::string Word;
      bool Open = false;
      char Quote = 0;
      while (I < Text.size()) {
        C = Text[I];
        if (!Quote && isspace(static_cast<unsigned char>(C)))
          break;
        if (!Quote && (C == '\'' || C == '"')) {
          Quote = C, Open = true;
          Advance();
          continue;
        }
        if (Quote && C == Quote) {
          Quote = 0, Open = false;
          Advance();
          continue;
        }
        if (C == '\\' && Quote != '\'' && I + 1 < Text.size()) {
          Advance();
          Word += Text[I];
          Advance();
          continue;
        }
        Word += C;
        Advance();
      }
      if (Open) {
        error(WLine, WCol, "unterminated quote in the override list");
        return;
      }
      override(Word, WLine, WCol);
    }
  }

  void override(StringRef Word, unsigned Line, unsigned Col) {
    // Hydra's `+key=` (add) and `++key=` (add or override) set the same field.
    StringRef W = Word;
    W.consume_front("++") || W.consume_front("+");
    if (W.startswith("~")) {
      error(Line, Col, "'" + Word.str() + "' deletes a field; moec cannot tell what the Bridge recipe had there");
      return;
    }
    auto [Key, Text] = W.split('=');
    if (!W.contains('=') || Key.empty()) {
      error(Line, Col, "expected `key=value`, found '" + Word.str() + "'");
      return;
    }
    Value V;
    try {
      YAML::Node N = YAML::Load(Text.empty() ? std::string("null") : Text.str());
      llvm::Optional<Value> Parsed = nodeValue(N);
      if (!Parsed) {
        error(Line, Col, "'" + Key.str() + "': cannot read the value '" + Text.str() + "'", Key.str());
        return;
      }
      V = *Parsed;
    } catch (const YAML::Exception &) {
      V = Value::string(Text); // Hydra reads an unparsable token as a string
    }
    Entries.push_back({Key.str(), V, Line, Col});
  }
};

/// Why a known Bridge field has no .moe equivalent.
StringRef knownReason(StringRef Key) {
  return llvm::StringSwitch<StringRef>(Key)
      .Cases("model.moe_flex_dispatcher_num_sms", "model.moe_hybridep_num_sms", "model.moe_deepep_num_sms",
             "SMs of a fused dispatcher backend the recipe does not use")
      .Cases("model.moe_paged_stash", "model.moe_expert_rank_capacity_factor",
             "paged stash and per-rank expert capacity have no .moe field")
      .Cases("model.moe_permute_fusion", "model.moe_router_fusion", "model.apply_rope_fusion",
             "a kernel-fusion switch moec does not model")
      .Case("model.cuda_graph_warmup_steps", "graph warm-up steps are not part of a .moe recipe")
      .Case("model._target_", "the provider class; moec names the model from the architecture fields")
      .Default("");
}

/// The category of a field that changes nothing moec checks or predicts
/// (logging, checkpoints, paths, the provider classes), or "" for one whose
/// absence from the recipe the user should see.
StringRef quietCategory(StringRef Key, const Value &V) {
  StringRef Section = Key.split('.').first;
  auto In = [&](std::initializer_list<StringRef> Sections) { return llvm::is_contained(Sections, Section); };
  if (Key == "_target_" || Key.endswith("._target_") || Key.endswith("._partial_") || Key.endswith("._call_") ||
      (!Key.contains('.') && V.K == Value::Kind::Null))
    return "structure (provider classes, empty sections)";
  if (In({"logger", "profiling", "tensor_inspect"}))
    return "logging and profiling";
  if (In({"checkpoint", "ft", "inprocess_restart", "nvrx_straggler", "straggler", "rerun_state_machine"}))
    return "checkpointing and fault tolerance";
  if (In({"dataset", "tokenizer"}))
    return "data paths and tokenizer";
  if (In({"scheduler", "train", "rng", "peft", "env_vars"}))
    return "training loop and learning-rate schedule";
  if (Section == "dist")
    return "process-group setup";
  if (In({"model", "optimizer", "ddp", "mixed_precision", "comm_overlap"}))
    return "model and optimizer settings moec does not model";
  return "";
}

/// How a ConfigContainer writes a model's mrope_section (null: none).
Value mropeSection(const std::vector<int64_t> &Section) {
  if (Section.empty())
    return Value::null();
  std::vector<Value> Items;
  for (int64_t N : Section)
    Items.push_back(Value::integer(N));
  return Value::list(std::move(Items));
}

/// The leading dense layers a moe_layer_freq describes (1: none; a list of
/// 0s then 1s over every layer: the 0s), or -1 for a pattern the schema
/// cannot say (MoE layers only after a dense prefix).
int64_t leadingDenseLayers(const Value &Freq, int64_t Layers) {
  if (Freq.K == Value::Kind::Int && Freq.I == 1)
    return 0;
  if (Freq.K != Value::Kind::List || int64_t(Freq.Items.size()) != Layers)
    return -1;
  int64_t Dense = 0;
  while (Dense < Layers && Freq.Items[Dense] == Value::integer(0))
    ++Dense;
  for (int64_t L = Dense; L < Layers; ++L)
    if (Freq.Items[L] != Value::integer(1))
      return -1;
  return Dense;
}

std::string sanitizeName(StringRef S) {
  std::string Out;
  for (char C : S)
    Out += llvm::isAlnum(C) || C == '_' ? C : '_';
  while (StringRef(Out).contains("__"))
    Out.replace(Out.find("__"), 2, "_");
  Out = StringRef(Out).trim('_').str();
  if (Out.empty() || llvm::isDigit(Out[0]))
    Out = "imported_" + Out;
  static const char *Reserved[] = {"import", "recipe", "model", "gpu", "cluster", "extends", "sweep", "true", "false"};
  if (llvm::is_contained(Reserved, Out))
    Out += "_recipe";
  return Out;
}

//===----------------------------------------------------------------------===//
// The translation.
//===----------------------------------------------------------------------===//

class Importer {
public:
  Importer(Reader &Rd, const ImportOptions &Opts, ImportResult &Res) : Rd(Rd), Opts(Opts), Res(Res) {
    for (Entry &E : Rd.Entries) {
      auto [It, New] = Index.insert({E.Key, &E});
      if (!New) {
        message(ImportMessage::Kind::Warning, E,
                fmt::format("'{}' is set twice; the later value ({}) wins, as in Hydra", E.Key, renderPlain(E.V)));
        It->second->Used = true;
        It->second = &E;
      }
    }
  }

  void run() {
    if (refuseHybridMamba())
      return;
    chooseModel();
    chooseCluster();
    parallelism();
    batch();
    evaluation();
    precision();
    dispatcher();
    moeSwitches();
    recompute();
    graphs();
    offload();
    optimizer();
    vision();
    reportLeftovers();
    if (Res.hasErrors())
      return;
    write();
  }

private:
  Reader &Rd;
  const ImportOptions &Opts;
  ImportResult &Res;
  std::map<std::string, Entry *> Index;
  const ModelSpec *Model = nullptr;
  std::string ModelName, GpuName, RecipeName;
  int64_t Gpus = 0, Nodes = 0;
  // The recipe's entries by section ("" for top level, "#first" for top-level
  // entries written before the sections), in output order.
  std::vector<std::pair<std::string, std::vector<ast::Entry>>> Out;
  std::vector<std::string> Comments;
  ast::File ModelFile;                // a model the recipe defines, when needed
  llvm::Optional<ModelSpec> OwnModel; // the model defineModel lowered

  void message(ImportMessage::Kind K, const Entry &E, std::string Msg) {
    Res.Messages.push_back({K, E.Key, std::move(Msg), E.Line, E.Column, ""});
  }
  void error(const Entry &E, std::string Msg) { message(ImportMessage::Kind::Error, E, std::move(Msg)); }
  /// A field that is translated, with a caveat (not counted as unmapped).
  void warning(const Entry &E, std::string Msg) {
    Res.Messages.push_back({ImportMessage::Kind::Warning, "", std::move(Msg), E.Line, E.Column, ""});
  }
  void globalError(std::string Msg) {
    Res.Messages.push_back({ImportMessage::Kind::Error, "", std::move(Msg), 0, 0, ""});
  }
  void note(std::string Msg) { Res.Messages.push_back({ImportMessage::Kind::Note, "", std::move(Msg), 0, 0, ""}); }
  /// A field read but not translated (implied, or without effect).
  void unmapped(Entry &E, StringRef Why) {
    E.Used = true;
    message(ImportMessage::Kind::Warning, E,
            fmt::format("'{}' = {} has no .moe equivalent: {}", E.Key, renderPlain(E.V), Why.str()));
    Comments.push_back(fmt::format("{} = {}: {}", E.Key, renderPlain(E.V), Why.str()));
  }

  Entry *get(StringRef Key) {
    auto It = Index.find(Key.str());
    if (It == Index.end())
      return nullptr;
    It->second->Used = true;
    return It->second;
  }
  Entry *peek(StringRef Key) {
    auto It = Index.find(Key.str());
    return It == Index.end() ? nullptr : It->second;
  }

  void emit(StringRef Section, StringRef Key, ast::ExprPtr Value) {
    ast::Entry E = ast::makeAssignment(Key, std::move(Value));
    for (auto &S : Out)
      if (S.first == Section) {
        S.second.push_back(std::move(E));
        return;
      }
    Out.emplace_back(Section.str(), std::vector<ast::Entry>());
    Out.back().second.push_back(std::move(E));
  }

  llvm::Optional<int64_t> count(StringRef Key, int64_t Min = 1) {
    Entry *E = get(Key);
    if (!E || E->V.K == Value::Kind::Null)
      return llvm::None;
    if (E->V.K != Value::Kind::Int || E->V.I < Min) {
      error(*E, fmt::format("'{}' must be an integer of at least {}, not {}", Key.str(), Min, renderPlain(E->V)));
      return llvm::None;
    }
    return E->V.I;
  }
  llvm::Optional<bool> flag(StringRef Key) {
    Entry *E = get(Key);
    if (!E || E->V.K == Value::Kind::Null)
      return llvm::None;
    if (E->V.K != Value::Kind::Bool) {
      error(*E, fmt::format("'{}' must be true or false, not {}", Key.str(), renderPlain(E->V)));
      return llvm::None;
    }
    return E->V.B;
  }
  llvm::Optional<double> number(StringRef Key) {
    Entry *E = get(Key);
    if (!E || E->V.K == Value::Kind::Null)
      return llvm::None;
    if (E->V.K == Value::Kind::Int)
      return double(E->V.I);
    if (E->V.K != Value::Kind::Float || !std::isfinite(E->V.F)) {
      error(*E, fmt::format("'{}' must be a finite number, not {}", Key.str(), renderPlain(E->V)));
      return llvm::None;
    }
    return E->V.F;
  }
  /// A string field; Null when unset or null.
  Entry *text(StringRef Key) {
    Entry *E = get(Key);
    if (!E || E->V.K == Value::Kind::Null)
      return nullptr;
    if (E->V.K != Value::Kind::String) {
      error(*E, fmt::format("'{}' must be a string, not {}", Key.str(), renderPlain(E->V)));
      return nullptr;
    }
    return E;
  }
  /// A list of names; a single name counts as a list of one.
  llvm::Optional<std::vector<std::string>> names(Entry *E) {
    std::vector<std::string> Out;
    if (E->V.K == Value::Kind::String) {
      Out.push_back(E->V.S);
      return Out;
    }
    if (E->V.K != Value::Kind::List) {
      error(*E, fmt::format("'{}' must be a list of names, not {}", E->Key, renderPlain(E->V)));
      return llvm::None;
    }
    for (const Value &V : E->V.Items) {
      if (V.K != Value::Kind::String) {
        error(*E, fmt::format("'{}' must be a list of names, not {}", E->Key, renderPlain(E->V)));
        return llvm::None;
      }
      Out.push_back(V.S);
    }
    return Out;
  }

  //--- model ---------------------------------------------------------------

  /// The architecture fields of the config that a catalog model must match.
  struct ArchField {
    StringRef Key;
    std::function<llvm::Optional<int64_t>(const ModelSpec &)> Of;
  };

  std::vector<ArchField> archFields() {
    auto MoE = [](auto F) {
      return [F](const ModelSpec &M) -> llvm::Optional<int64_t> {
        if (!M.MoE)
          return llvm::None;
        return F(*M.MoE);
      };
    };
    auto MLA = [](auto F) {
      return [F](const ModelSpec &M) -> llvm::Optional<int64_t> {
        if (!M.MLA)
          return llvm::None;
        return F(*M.MLA);
      };
    };
    return {
        {"model.num_layers", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.Layers; }},
        {"model.hidden_size", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.Hidden; }},
        {"model.ffn_hidden_size", [](const ModelSpec &M) { return M.FfnHidden; }},
        {"model.num_attention_heads", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.Heads; }},
        {"model.num_query_groups", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.KvHeads; }},
        {"model.kv_channels", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.HeadDim; }},
        {"model.vocab_size", [](const ModelSpec &M) -> llvm::Optional<int64_t> { return M.Vocab; }},
        {"model.num_moe_experts", MoE([](const MoESpec &X) { return X.Experts; })},
        {"model.moe_router_topk", MoE([](const MoESpec &X) { return X.TopK; })},
        {"model.moe_ffn_hidden_size", MoE([](const MoESpec &X) { return X.FfnHidden; })},
        {"model.moe_shared_expert_intermediate_size", MoE([](const MoESpec &X) -> llvm::Optional<int64_t> {
           if (!X.SharedExperts)
             return llvm::None;
           return X.SharedFfnHidden ? *X.SharedFfnHidden : X.SharedExperts * X.FfnHidden;
         })},
        {"model.moe_router_num_groups", MoE([](const MoESpec &X) { return X.Groups; })},
        {"model.moe_router_group_topk", MoE([](const MoESpec &X) { return X.GroupTopK; })},
        // 0: no query compression, which Bridge writes as null.
        {"model.q_lora_rank", MLA([](const MLASpec &X) -> llvm::Optional<int64_t> {
           if (!X.QLoraRank)
             return llvm::None;
           return X.QLoraRank;
         })},
        {"model.kv_lora_rank", MLA([](const MLASpec &X) { return X.KvLoraRank; })},
        {"model.qk_head_dim", MLA([](const MLASpec &X) { return X.QkHeadDim; })},
        {"model.qk_pos_emb_head_dim", MLA([](const MLASpec &X) { return X.QkRopeHeadDim; })},
        {"model.v_head_dim", MLA([](const MLASpec &X) { return X.VHeadDim; })},
    };
  }

  /// The other architecture fields export writes: read, and checked
  /// against the chosen model, but not used to choose it.
  /// Nemotron-H and Nemotron-3 interleave Mamba, attention, MLP and MoE
  /// layers by a pattern (Megatron-Core ssm/mamba_hybrid_layer_allocation.py,
  /// Symbols: M, *, -, E). A .moe model has attention layers only: say that
  /// once, instead of the errors and warnings of a model it cannot define.
  bool refuseHybridMamba() {
    Entry *E = peek("model.hybrid_override_pattern");
    if (!E || E->V.K != Value::Kind::String)
      return false;
    error(*E, fmt::format("'model.hybrid_override_pattern' = {} describes a hybrid Mamba model (Nemotron-H, "
                          "Nemotron-3: M Mamba, * attention, - MLP, E MoE layers); a .moe model has attention "
                          "layers only, so this recipe cannot be imported",
                          renderPlain(E->V)));
    return true;
  }

  void checkArchitectureExtras() {
    const MoESpec *X = Model->MoE ? &*Model->MoE : nullptr;
    auto Check = [&](StringRef Key, const Value &Expected) {
      Entry *E = get(Key);
      if (E && E->V != Expected)
        unmapped(*E, fmt::format("differs from the catalog model '{}' ({}); the recipe keeps the catalog's value",
                                 ModelName, renderPlain(Expected)));
    };
    Check("model.qk_layernorm", Value::boolean(Model->QkNorm));
    if (auto F = number("model.rotary_percent"); F && *F != Model->RopeFraction.getValueOr(1.0))
      unmapped(*get("model.rotary_percent"),
               fmt::format("differs from the catalog model '{}' ({}); the recipe keeps the catalog's value", ModelName,
                           Model->RopeFraction.getValueOr(1.0)));
    Check("model.mrope_section", mropeSection(Model->MropeSection));
    if (auto F = number("model.layernorm_epsilon"); F && *F != Model->NormEpsilon.getValueOr(DefaultNormEpsilon))
      unmapped(*get("model.layernorm_epsilon"),
               fmt::format("differs from the catalog model '{}' ({}); the recipe keeps the catalog's value", ModelName,
                           Model->NormEpsilon.getValueOr(DefaultNormEpsilon)));
    if (!X)
      return;
    Check("model.moe_shared_expert_gate", Value::boolean(X->SharedExpertGate));
    Check("model.moe_router_score_function", Value::string(enumName(X->RouterKind)));
    Check("model.moe_router_enable_expert_bias", Value::boolean(X->ExpertBias));
    Check("model.moe_router_pre_softmax", Value::boolean(X->PreSoftmax));
    Check("model.moe_router_topk_scaling_factor", X->TopKScaling ? Value::real(*X->TopKScaling) : Value::null());
    if (Entry *E = get("model.moe_layer_freq")) {
      if (leadingDenseLayers(E->V, Model->Layers) != X->DenseLayers)
        unmapped(*E, fmt::format("the catalog model '{}' has {} leading dense layers and MoE after; this pattern "
                                 "differs and the recipe keeps the catalog's",
                                 ModelName, X->DenseLayers));
    }
  }

  /// The one catalog model the architecture fields fit, or null (with
  /// Why set) when none or several do. The same decoder ships with and
  /// without a vision encoder: the freeze switches tell a VLM configuration.
  const ModelSpec *matchCatalog(std::string &Why) {
    bool VisionHints = peek("model.freeze_vision_model") || peek("model.freeze_vision_projection") ||
                       peek("model.freeze_language_model");
    std::vector<const ModelSpec *> Fit, Candidates;
    for (const ModelSpec &M : catalogModels()) {
      bool Ok = true;
      for (const ArchField &F : archFields())
        if (Entry *E = peek(F.Key); E && !(M.MLA && StringRef(F.Key) == "model.kv_channels")) {
          llvm::Optional<int64_t> Have = F.Of(M);
          // An unset num_query_groups is one group per head (Megatron-Core
          // 0.16.1 transformer_config.py:936: num_query_groups = num_attention_heads).
          if (E->V.K == Value::Kind::Null && StringRef(F.Key) == "model.num_query_groups")
            Ok &= M.KvHeads == M.Heads;
          else
            Ok &= E->V.K == Value::Kind::Null ? !Have : (E->V.K == Value::Kind::Int && Have && *Have == E->V.I);
        }
      if (Ok)
        Candidates.push_back(&M);
    }
    for (const ModelSpec *M : Candidates)
      if (M->isVLM() == VisionHints)
        Fit.push_back(M);
    if (Fit.empty())
      Fit = Candidates;
    if (Fit.size() == 1)
      return Fit.front();
    std::vector<std::string> Names;
    for (const ModelSpec *M : Fit)
      Names.push_back(M->Name);
    Why = Fit.empty() ? "no catalog model has this architecture"
                      : "the architecture matches several catalog models (" + llvm::join(Names, ", ") + ")";
    return nullptr;
  }

  void chooseModel() {
    const std::vector<ModelSpec> &Models = catalogModels();
    std::string Wanted = !Opts.Model.empty() ? Opts.Model : Rd.Header.count("model") ? Rd.Header["model"] : "";
    std::vector<ArchField> Fields = archFields();
    bool AnyArch = llvm::any_of(Fields, [&](const ArchField &F) { return peek(F.Key); });
    std::string Why;
    const ModelSpec *Match = AnyArch ? matchCatalog(Why) : nullptr;
    auto Named = llvm::find_if(Models, [&](const ModelSpec &M) { return M.Name == Wanted; });
    if (!Wanted.empty() && Named != Models.end()) {
      if (AnyArch && Match != &*Named) {
        globalError(fmt::format("the architecture fields do not match model '{}'{}", Wanted,
                                Opts.Model.empty() ? " named in the moec header" : " given with --model"));
        return;
      }
      Model = &*Named;
    } else if (!Wanted.empty() && !Match && AnyArch) {
      defineModel(sanitizeName(Wanted));
      return;
    } else if (!Wanted.empty() && !Match) {
      // A user model the catalog cannot rebuild: the recipe names it and
      // its definition has to come with it.
      ModelName = Wanted;
      note(
          fmt::format("model '{}' is not in the built-in catalog; import its definition into the recipe file", Wanted));
      for (StringRef K : architectureKeys())
        get(K);
      return;
    } else if (!Match && AnyArch && Why.rfind("no catalog model", 0) == 0) {
      std::string Stem = Rd.Header.count("recipe")  ? Rd.Header["recipe"]
                         : !Opts.SourceName.empty() ? llvm::sys::path::stem(Opts.SourceName).str()
                                                    : "imported";
      defineModel(sanitizeName(Stem + "_model"));
      return;
    } else if (!Match) {
      globalError(AnyArch ? Why + "; choose the model with --model NAME (a .moe model definition)"
                          : "the configuration names no architecture (model.num_layers, model.hidden_size, ...), "
                            "so the model is unknown; give it with --model NAME");
      return;
    } else {
      Model = Match;
    }
    ModelName = Model->Name;
    Res.ModelFromCatalog = true;
    for (ArchField &F : Fields)
      get(F.Key);
    checkArchitectureExtras();
    // What the catalog model does not say the same way becomes a model that
    // extends it (a user model exported under its own name comes back so).
    std::vector<ast::Entry> Changes;
    if (Entry *E = get("model.max_position_embeddings");
        E && E->V.K == Value::Kind::Int && (!Model->MaxSeqLen || *Model->MaxSeqLen != E->V.I))
      Changes.push_back(ast::makeAssignment("max_seq_len", ast::makeInt(E->V.I)));
    if (auto Theta = ropeBase(); Theta && *Theta != Model->RopeTheta.getValueOr(DefaultRotaryBase))
      Changes.push_back(ast::makeAssignment("rope_theta", ast::makeNumber(*Theta)));
    if (Entry *E = get("model.mtp_num_layers")) {
      int64_t Mtp = E->V.K == Value::Kind::Int ? E->V.I : 0;
      if (E->V.K != Value::Kind::Int && E->V.K != Value::Kind::Null)
        error(*E, "'model.mtp_num_layers' must be an integer or null");
      else if (Mtp != Model->MtpLayers)
        Changes.push_back(ast::makeAssignment("mtp_layers", ast::makeInt(Mtp)));
    }
    if (!Changes.empty() || (!Wanted.empty() && Named == Models.end())) {
      std::string Name = !Wanted.empty() && Named == Models.end() ? sanitizeName(Wanted) : Model->Name + "_imported";
      ModelFile.Definitions.push_back(ast::makeDefinition(ast::DefKind::Model, Name, std::move(Changes), Model->Name));
      ModelName = Name;
      Res.ModelFromCatalog = false;
    }
  }

  /// model.rotary_base as a number, or None (absent, null, or not a
  /// positive number, which is reported).
  llvm::Optional<double> ropeBase() {
    Entry *E = get("model.rotary_base");
    if (!E || E->V.K == Value::Kind::Null)
      return llvm::None;
    double F = E->V.K == Value::Kind::Float ? E->V.F : double(E->V.I);
    if ((E->V.K != Value::Kind::Float && E->V.K != Value::Kind::Int) || !(F >= 1) || !std::isfinite(F)) {
      unmapped(*E, "rope_theta is a number of at least 1");
      return llvm::None;
    }
    return F;
  }

  /// A model no catalog entry describes, written as a .moe model definition
  /// from the configuration's architecture fields and lowered by Sema like
  /// a user's; what the schema cannot say stays a warning.
  void defineModel(std::string Name) {
    std::vector<ast::Entry> Lines;
    auto Int = [&](StringRef Key) -> llvm::Optional<int64_t> {
      return count(Key, Key == "model.mtp_num_layers" ? 0 : 1);
    };
    auto Field = [&](StringRef Key, StringRef Moe) {
      if (auto V = Int(Key))
        Lines.push_back(ast::makeAssignment(Moe, ast::makeInt(*V)));
    };
    for (StringRef Key : {"model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.vocab_size"})
      if (!peek(Key) || peek(Key)->V.K != Value::Kind::Int) {
        globalError(fmt::format("no catalog model has this architecture, and '{}' is missing, so the importer "
                                "cannot define one; give the model with --model NAME",
                                Key.str()));
        return;
      }
    Field("model.num_layers", "layers");
    Field("model.hidden_size", "hidden");
    Field("model.ffn_hidden_size", "ffn_hidden");
    Field("model.num_attention_heads", "heads");
    Field("model.num_query_groups", "kv_heads");
    Field("model.vocab_size", "vocab");
    auto MlaFlag = flag("model.multi_latent_attention");
    bool Mla = (MlaFlag && *MlaFlag) || peek("model.kv_lora_rank");
    if (Mla) {
      // MLA's nominal head_dim; its real dimensions are in mla(...).
      if (auto Q = Int("model.qk_head_dim"))
        Lines.push_back(ast::makeAssignment("head_dim", ast::makeInt(*Q)));
      get("model.kv_channels");
      std::vector<ast::Argument> Args;
      for (auto [Key, Arg] : {std::pair<StringRef, StringRef>{"model.q_lora_rank", "q_lora_rank"},
                              {"model.kv_lora_rank", "kv_lora_rank"},
                              {"model.qk_head_dim", "qk_head_dim"},
                              {"model.qk_pos_emb_head_dim", "qk_rope_head_dim"},
                              {"model.v_head_dim", "v_head_dim"}})
        if (auto V = Int(Key))
          Args.push_back(ast::makeArg(Arg, ast::makeInt(*V)));
      Lines.push_back(ast::makeAssignment("attention", ast::makeCall("mla", std::move(Args))));
    } else {
      Field("model.kv_channels", "head_dim");
    }
    if (auto V = flag("model.qk_layernorm"); V && *V)
      Lines.push_back(ast::makeAssignment("qk_norm", ast::makeBool(true)));
    Field("model.mtp_num_layers", "mtp_layers");
    Field("model.max_position_embeddings", "max_seq_len");
    if (auto Theta = ropeBase())
      Lines.push_back(ast::makeAssignment("rope_theta", ast::makeNumber(*Theta)));
    if (auto F = number("model.rotary_percent")) {
      if (*F > 0 && *F < 1)
        Lines.push_back(ast::makeAssignment("rope_fraction", ast::makeNumber(*F)));
      else if (*F != 1)
        unmapped(*get("model.rotary_percent"), "rope_fraction is a number in (0, 1]");
    }
    if (Entry *E = get("model.mrope_section"); E && E->V.K != Value::Kind::Null) {
      std::vector<ast::ExprPtr> Items;
      for (const Value &N : E->V.K == Value::Kind::List ? E->V.Items : std::vector<Value>{})
        if (N.K == Value::Kind::Int && N.I >= 0)
          Items.push_back(ast::makeInt(N.I));
      if (E->V.K == Value::Kind::List && Items.size() == E->V.Items.size())
        Lines.push_back(ast::makeAssignment("mrope_section", ast::makeList(std::move(Items))));
      else
        unmapped(*E, "mrope_section is a list of counts");
    }
    if (auto F = number("model.layernorm_epsilon")) {
      if (*F > 0 && *F < 0.1) {
        if (*F != DefaultNormEpsilon)
          Lines.push_back(ast::makeAssignment("norm_epsilon", ast::makeNumber(*F)));
      } else
        unmapped(*get("model.layernorm_epsilon"), "norm_epsilon is a number in (0, 0.1)");
    }
    std::vector<ast::Entry> MoE;
    auto Set = [&](StringRef Field, ast::ExprPtr V) { MoE.push_back(ast::makeAssignment(Field, std::move(V))); };
    if (auto Experts = Int("model.num_moe_experts")) {
      Set("experts", ast::makeInt(*Experts));
      auto Sub = [&](StringRef Key, StringRef Moe) {
        if (auto V = Int(Key))
          Set(Moe, ast::makeInt(*V));
      };
      Sub("model.moe_router_topk", "top_k");
      Sub("model.moe_ffn_hidden_size", "ffn_hidden");
      if (auto Shared = Int("model.moe_shared_expert_intermediate_size")) {
        Set("shared_experts", ast::makeInt(1));
        Set("shared_ffn_hidden", ast::makeInt(*Shared));
      }
      if (Entry *E = get("model.moe_layer_freq")) {
        int64_t Dense = leadingDenseLayers(E->V, peek("model.num_layers")->V.I);
        if (Dense > 0)
          Set("dense_layers", ast::makeInt(Dense));
        else if (Dense < 0)
          unmapped(*E, "the schema has leading dense layers then MoE layers only; the model is defined with "
                       "MoE in every layer");
      }
      if (Entry *E = text("model.moe_router_score_function")) {
        if (E->V.S == "sigmoid" || E->V.S == "softmax") {
          if (E->V.S == "sigmoid")
            Set("router", ast::makeName("sigmoid"));
        } else
          unmapped(*E, "moe.router is softmax or sigmoid");
      }
      if (auto V = flag("model.moe_router_enable_expert_bias"); V && *V)
        Set("expert_bias", ast::makeBool(true));
      if (auto V = flag("model.moe_router_pre_softmax"); V && *V)
        Set("pre_softmax", ast::makeBool(true));
      if (auto V = flag("model.moe_shared_expert_gate"); V && *V)
        Set("shared_expert_gate", ast::makeBool(true));
      Sub("model.moe_router_num_groups", "groups");
      Sub("model.moe_router_group_topk", "group_top_k");
      if (Entry *E = get("model.moe_router_topk_scaling_factor"); E && E->V.K != Value::Kind::Null) {
        double F = E->V.K == Value::Kind::Float ? E->V.F : double(E->V.I);
        if ((E->V.K == Value::Kind::Float || E->V.K == Value::Kind::Int) && F > 0 && std::isfinite(F))
          Set("topk_scaling", ast::makeNumber(F));
        else
          unmapped(*E, "moe.topk_scaling is a positive number");
      }
    }
    if (!MoE.empty())
      Lines.push_back(ast::makeSection("moe", std::move(MoE)));
    ast::File Def;
    Def.Definitions.push_back(ast::makeDefinition(ast::DefKind::Model, Name, std::move(Lines)));
    std::string Messages;
    llvm::Optional<ModelSpec> Spec = lowerModelDefinition(Def, Messages);
    if (!Spec) {
      globalError(fmt::format("no catalog model has this architecture, and the model the importer defines from its "
                              "fields is not valid: {}; give the model with --model NAME",
                              Messages));
      return;
    }
    // Architecture the schema cannot say: the definition leaves it out.
    auto Unsaid = [&](StringRef Key, auto Active, StringRef Why) {
      if (Entry *E = get(Key); E && Active(E->V))
        unmapped(*E, ("the model schema has no " + Why + "; the defined model leaves it out").str());
    };
    auto NotNull = [](const Value &V) { return V.K != Value::Kind::Null; };
    auto True = [](const Value &V) { return V == Value::boolean(true); };
    Unsaid(
        "model.softmax_type", [](const Value &V) { return V != Value::string("vanilla"); },
        "attention sinks (learned or fixed softmax offsets)");
    Unsaid("model.window_size", NotNull, "sliding-window attention");
    Unsaid("model.window_attn_skip_freq", NotNull, "sliding-window attention");
    Unsaid("model.add_bias_linear", True, "linear-layer biases");
    Unsaid("model.add_qkv_bias", True, "query/key/value biases");
    OwnModel = std::move(*Spec);
    Model = &*OwnModel;
    ModelName = Name;
    ModelFile = std::move(Def);
    Res.ModelFromCatalog = false;
    for (StringRef K : architectureKeys())
      get(K);
    note(fmt::format("no catalog model has this architecture; the recipe defines model '{}' from the "
                     "configuration's architecture fields",
                     Name));
  }

  /// Every architecture field export writes.
  std::vector<StringRef> architectureKeys() {
    std::vector<StringRef> Keys;
    for (const ArchField &F : archFields())
      Keys.push_back(F.Key);
    for (StringRef K : {"model.mtp_num_layers", "model.max_position_embeddings", "model.moe_router_score_function",
                        "model.moe_router_enable_expert_bias", "model.moe_router_pre_softmax", "model.moe_layer_freq",
                        "model.moe_router_topk_scaling_factor", "model.rotary_base", "model.rotary_percent",
                        "model.moe_shared_expert_gate", "model.layernorm_epsilon", "model.mrope_section"})
      Keys.push_back(K);
    return Keys;
  }

  void chooseCluster() {
    GpuName = !Opts.Gpu.empty() ? Opts.Gpu : Rd.Header.count("gpu") ? Rd.Header["gpu"] : "";
    Gpus = Opts.Gpus;
    Nodes = Opts.Nodes;
    if (!Gpus && !Nodes && Rd.Header.count("gpus"))
      StringRef(Rd.Header["gpus"]).getAsInteger(10, Gpus);
    if (GpuName.empty() || (!Gpus && !Nodes)) {
      globalError("a Megatron-Bridge configuration does not say the cluster; give --gpu NAME and --gpus N (or "
                  "--nodes N)");
      return;
    }
    const std::vector<GpuSpec> &Known = catalogGpus();
    if (llvm::none_of(Known, [&](const GpuSpec &G) { return G.Name == GpuName; }))
      note(fmt::format("GPU system '{}' is not in the built-in catalog; import its definition into the recipe file",
                       GpuName));
    RecipeName = sanitizeName(!Opts.RecipeName.empty()    ? Opts.RecipeName
                              : Rd.Header.count("recipe") ? Rd.Header["recipe"]
                              : !Opts.SourceName.empty()  ? llvm::sys::path::stem(Opts.SourceName)
                                                          : "imported");
  }

  //--- parallelism and batch -------------------------------------------------

  void parallelism() {
    llvm::Optional<int64_t> TP = count("model.tensor_model_parallel_size");
    llvm::Optional<int64_t> PP = count("model.pipeline_model_parallel_size");
    llvm::Optional<int64_t> CP = count("model.context_parallel_size");
    llvm::Optional<int64_t> EP = count("model.expert_model_parallel_size");
    llvm::Optional<int64_t> VPP = count("model.virtual_pipeline_model_parallel_size");
    emit("parallel", "tp", ast::makeInt(TP.getValueOr(1)));
    emit("parallel", "cp", ast::makeInt(CP.getValueOr(1)));
    emit("parallel", "ep", ast::makeInt(EP.getValueOr(1)));
    // Megatron: ETP unset (None) means ETP = TP.
    Entry *ETPEntry = peek("model.expert_tensor_parallel_size");
    llvm::Optional<int64_t> ETP = count("model.expert_tensor_parallel_size");
    if (ETPEntry && !ETP && ETPEntry->V.K == Value::Kind::Null)
      ETP = TP.getValueOr(1);
    emit("parallel", "etp", ast::makeInt(ETP.getValueOr(TP.getValueOr(1))));
    emit("parallel", "pp", ast::makeInt(PP.getValueOr(1)));
    if (VPP && *VPP > 1)
      emit("parallel", "vpp", ast::makeInt(*VPP));
    if (auto SP = flag("model.sequence_parallel"))
      emit("parallel", "sp", ast::makeBool(*SP));
    if (Entry *L = get("model.pipeline_model_parallel_layout")) {
      std::string Layout;
      if (L->V.K == Value::Kind::String) {
        if (ast::isStringLiteralText(L->V.S))
          emit("parallel", "layout", ast::makeString(L->V.S));
        else
          error(*L, "'model.pipeline_model_parallel_layout' holds a control character, which a .moe string "
                    "cannot hold");
      } else if (layoutOfStages(L->V, Layout))
        emit("parallel", "layout", ast::makeString(Layout));
      else if (L->V.K != Value::Kind::Null)
        error(*L, "'model.pipeline_model_parallel_layout' must be a layout string or a list of stages, each a list "
                  "of embedding, decoder, mtp and loss");
    }
    stageLayers(PP.getValueOr(1), VPP.getValueOr(1));
    if (Entry *C = text("model.cp_comm_type")) {
      StringRef V = llvm::StringSwitch<StringRef>(C->V.S)
                        .Case("p2p", "p2p")
                        .Case("a2a", "a2a")
                        .Case("all_gather", "allgather")
                        .Case("a2a+p2p", "a2a_p2p")
                        .Default("");
      if (V.empty())
        error(*C, "'model.cp_comm_type' must be p2p, all_gather, a2a or a2a+p2p, not '" + C->V.S + "'");
      else if (V != "p2p")
        emit("parallel", "cp_comm", ast::makeName(V));
    } else if (Entry *C = peek("model.cp_comm_type"); C && C->V.K == Value::Kind::List) {
      unmapped(*C, "a per-layer list of CP communication types has no .moe equivalent");
    }
    if (Entry *H = get("model.hierarchical_context_parallel_sizes"); H && H->V.K != Value::Kind::Null) {
      std::vector<ast::ExprPtr> Sizes;
      bool Ok = H->V.K == Value::Kind::List;
      for (const Value &V : H->V.Items)
        Ok &= V.K == Value::Kind::Int, Sizes.push_back(ast::makeInt(V.I));
      if (!Ok)
        error(*H, "'model.hierarchical_context_parallel_sizes' must be a list of integers");
      else
        emit("parallel", "cp_hierarchy", ast::makeList(std::move(Sizes)));
    }
    if (flag("comm_overlap.tp_comm_overlap").getValueOr(false))
      emit("parallel", "tp_comm_overlap", ast::makeBool(true));
    bool MFSDP = flag("ddp.use_megatron_fsdp").getValueOr(false);
    bool TFSDP = flag("dist.use_torch_fsdp2").getValueOr(false);
    if (MFSDP || TFSDP) {
      emit("parallel", "fsdp", ast::makeBool(true));
      if (TFSDP && !MFSDP)
        emit("parallel", "fsdp_impl", ast::makeName("torch"));
    }
    if (Entry *S = get("ddp.data_parallel_sharding_strategy"); S && S->V.K != Value::Kind::Null) {
      if (!(MFSDP && S->V == Value::string("optim_grads_params")) && !(!MFSDP && S->V == Value::string("no_shard")))
        unmapped(*S, "moec's FSDP shards parameters, gradients and optimizer state (optim_grads_params) and has no "
                     "other strategy");
    }
    if (Entry *F = get("checkpoint.ckpt_format"); F && !(MFSDP && F->V == Value::string("fsdp_dtensor")))
      unmapped(*F, "the checkpoint format is not part of a .moe recipe");
  }

  /// The list form of a layout, as Megatron-Core's PipelineParallelLayerLayout
  /// and Bridge's recipes write it (a list per virtual stage of "embedding",
  /// "decoder", "mtp" and "loss"), in the string form parallel.layout takes:
  /// E, t, m and L, runs as `t*N`, stages joined by '|'.
  static bool layoutOfStages(const Value &V, std::string &Out) {
    if (V.K != Value::Kind::List || V.Items.empty())
      return false;
    std::vector<std::string> Stages;
    for (const Value &Stage : V.Items) {
      if (Stage.K != Value::Kind::List)
        return false;
      std::string S;
      char Last = 0;
      int64_t Run = 0;
      auto Flush = [&]() {
        if (Run)
          S += Run == 1 ? std::string(1, Last) : fmt::format("{}*{}", Last, Run);
        Run = 0;
      };
      for (const Value &Layer : Stage.Items) {
        if (Layer.K != Value::Kind::String)
          return false;
        char C = llvm::StringSwitch<char>(Layer.S)
                     .Case("embedding", 'E')
                     .Case("decoder", 't')
                     .Case("mtp", 'm')
                     .Case("loss", 'L')
                     .Default(0);
        if (!C)
          return false;
        if (C != Last)
          Flush();
        Last = C;
        ++Run;
      }
      Flush();
      Stages.push_back(S);
    }
    Out = llvm::join(Stages, "|");
    return true;
  }

  /// Uneven first/last stages, as a layout string (the two are equivalent
  /// ways to say it; parallel.layout is the one .moe has).
  void stageLayers(int64_t PP, int64_t VPP) {
    accountForEmbeddingAndLoss(PP, VPP);
    Entry *First = peek("model.num_layers_in_first_pipeline_stage");
    Entry *Last = peek("model.num_layers_in_last_pipeline_stage");
    if ((!First || First->V.K == Value::Kind::Null) && (!Last || Last->V.K == Value::Kind::Null)) {
      if (First)
        First->Used = true;
      if (Last)
        Last->Used = true;
      return;
    }
    llvm::Optional<int64_t> F = count("model.num_layers_in_first_pipeline_stage");
    llvm::Optional<int64_t> L = count("model.num_layers_in_last_pipeline_stage");
    Entry *Any = First ? First : Last;
    if (!Model || VPP > 1 || PP < 2) {
      unmapped(*Any, "uneven first/last stages translate to parallel.layout only with a catalog model, PP > 1 and "
                     "no VPP");
      if (First && Any != First)
        First->Used = true;
      if (Last && Any != Last)
        Last->Used = true;
      return;
    }
    int64_t Layers = Model->Layers;
    int64_t Middle = PP - 2;
    int64_t FirstN = F.getValueOr(-1), LastN = L.getValueOr(-1);
    // An unset side takes an even share of what the other leaves.
    if (FirstN < 0 || LastN < 0) {
      int64_t Known = FirstN < 0 ? LastN : FirstN;
      int64_t Rest = Layers - Known;
      if (Rest % (PP - 1)) {
        unmapped(*Any, "the other stages do not split evenly, so no layout states it");
        return;
      }
      (FirstN < 0 ? FirstN : LastN) = Rest / (PP - 1);
    }
    int64_t Rest = Layers - FirstN - LastN;
    if (Rest < 0 || (Middle == 0 ? Rest != 0 : Rest % Middle != 0)) {
      unmapped(*Any, "the middle stages do not split evenly, so no layout states it");
      return;
    }
    auto Run = [](int64_t N) { return N == 1 ? std::string("t") : fmt::format("t*{}", N); };
    std::string Layout = "E" + Run(FirstN) + "|";
    if (Middle)
      Layout += fmt::format("({}|)*{}", Run(Rest / Middle), Middle);
    Layout += Run(LastN) + std::string(Model->MtpLayers, 'm') + "L";
    emit("parallel", "layout", ast::makeString(Layout));
    note(fmt::format("num_layers_in_first/last_pipeline_stage = {}/{} written as parallel.layout \"{}\"", FirstN, LastN,
                     Layout));
  }

  /// Embedding and loss counted as a layer slot each in the split: the
  /// same stages as a layout with E and L in the first and last stage.
  void accountForEmbeddingAndLoss(int64_t PP, int64_t VPP) {
    Entry *Emb = peek("model.account_for_embedding_in_pipeline_split");
    Entry *Loss = peek("model.account_for_loss_in_pipeline_split");
    bool E = Emb && Emb->V == Value::boolean(true), L = Loss && Loss->V == Value::boolean(true);
    for (Entry *X : {Emb, Loss})
      if (X && X->V.K != Value::Kind::Bool && X->V.K != Value::Kind::Null)
        error(*X, "'" + X->Key + "' must be true or false");
    if (!E && !L) {
      if (Emb)
        Emb->Used = true;
      if (Loss)
        Loss->Used = true;
      return;
    }
    Entry *Any = E ? Emb : Loss;
    int64_t Stages = PP * VPP;
    Entry *Given = peek("model.pipeline_model_parallel_layout");
    if (!Model || Model->MtpLayers || (Given && Given->V.K != Value::Kind::Null) || Stages < 2 ||
        (Model->Layers + E + L) % Stages) {
      unmapped(*Any, "embedding/loss counted in the pipeline split translate to parallel.layout only for a catalog "
                     "model without MTP whose layers then divide evenly");
      if (E && L)
        Loss->Used = true;
      return;
    }
    for (Entry *X : {Emb, Loss})
      if (X)
        X->Used = true;
    int64_t Per = (Model->Layers + E + L) / Stages;
    auto Run = [](int64_t N) { return N == 1 ? std::string("t") : fmt::format("t*{}", N); };
    std::string Layout = "E" + Run(Per - E) + "|";
    if (Stages > 2)
      Layout += fmt::format("({}|)*{}", Run(Per), Stages - 2);
    Layout += Run(Per - L) + "L";
    emit("parallel", "layout", ast::makeString(Layout));
    note(fmt::format("account_for_embedding/loss_in_pipeline_split written as parallel.layout \"{}\"", Layout));
  }

  void batch() {
    llvm::Optional<int64_t> Seq = count("model.seq_length");
    Entry *DS = peek("dataset.seq_length");
    llvm::Optional<int64_t> DSeq = count("dataset.seq_length");
    if (Seq && DSeq && *Seq != *DSeq)
      error(*DS, fmt::format("dataset.seq_length ({}) differs from model.seq_length ({}); Bridge requires them equal",
                             *DSeq, *Seq));
    if (!Seq)
      Seq = DSeq;
    llvm::Optional<int64_t> Micro = count("train.micro_batch_size");
    llvm::Optional<int64_t> Global = count("train.global_batch_size");
    if (!Seq || !Micro || !Global) {
      std::vector<std::string> Missing;
      if (!Seq)
        Missing.push_back("model.seq_length");
      if (!Micro)
        Missing.push_back("train.micro_batch_size");
      if (!Global)
        Missing.push_back("train.global_batch_size");
      globalError("the configuration does not set " + llvm::join(Missing, ", ") +
                  ", which a .moe recipe requires (a Bridge recipe would bring them; add them as overrides)");
      return;
    }
    emit("#first", "seq_len", ast::makeInt(*Seq));
    emit("batch", "micro", ast::makeInt(*Micro));
    emit("batch", "global", ast::makeInt(*Global));
  }

  //--- precision, dispatcher, recompute, graphs --------------------------------

  void precision() {
    Entry *Preset = peek("mixed_precision");
    if (Preset) {
      Preset->Used = true;
      if (Preset->V.K == Value::Kind::Null)
        return;
      static const std::pair<StringRef, StringRef> Names[] = {
          {"bf16_mixed", "bf16"},
          {"bf16_with_fp8_delayed_scaling_mixed", "fp8.delayed"},
          {"bf16_with_fp8_current_scaling_mixed", "fp8.tensorwise"},
          {"bf16_with_fp8_subchannel_scaling_mixed", "fp8.blockwise"},
          {"bf16_with_mxfp8_mixed", "mxfp8"},
          {"bf16_with_nvfp4_mixed", "nvfp4"}};
      for (auto [Bridge, Moe] : Names)
        if (Preset->V == Value::string(Bridge)) {
          emit("", "precision", ast::makeName(Moe));
          // The MXFP8 preset gathers parameters in FP8 (rule 45).
          if (Moe == "mxfp8")
            emit("", "fp8_param_gather", ast::makeBool(true));
          return;
        }
      unmapped(*Preset, "a preset other than the BF16-based ones (bf16_mixed, bf16_with_*_mixed) has no .moe "
                        "precision; the recipe keeps bf16");
      return;
    }
    // The structured MixedPrecisionConfig.
    Entry *Fp8 = text("mixed_precision.fp8");
    Entry *Recipe = text("mixed_precision.fp8_recipe");
    Entry *Fp4 = text("mixed_precision.fp4");
    Entry *Fp4Recipe = text("mixed_precision.fp4_recipe");
    llvm::Optional<bool> Bf16 = flag("mixed_precision.bf16");
    llvm::Optional<bool> Fp16 = flag("mixed_precision.fp16");
    if (Fp16.getValueOr(false)) {
      unmapped(*peek("mixed_precision.fp16"), "FP16 training has no .moe precision (moec trains in BF16)");
    }
    std::string P;
    if (Fp4) {
      if (Fp4->V.S == "e2m1" && (!Fp4Recipe || Fp4Recipe->V.S == "nvfp4"))
        P = "nvfp4";
      else
        unmapped(*Fp4, "only e2m1 with the nvfp4 recipe has a .moe precision (nvfp4)");
    } else if (Fp8) {
      std::string R = Recipe ? Recipe->V.S : "delayed"; // MCore's default recipe
      P = llvm::StringSwitch<std::string>(R)
              .Case("delayed", "fp8.delayed")
              .Case("tensorwise", "fp8.tensorwise")
              .Case("blockwise", "fp8.blockwise")
              .Case("mxfp8", "mxfp8")
              .Default("");
      if (P.empty())
        unmapped(Recipe ? *Recipe : *Fp8, "the FP8 recipe '" + R + "' has no .moe precision");
    } else if (Bf16.hasValue() || Fp16.hasValue()) {
      P = "bf16";
    }
    if (!P.empty())
      emit("", "precision", ast::makeName(P));
    llvm::Optional<bool> Fp8Params = flag("mixed_precision.fp8_param_gather");
    if (Fp8Params.getValueOr(false))
      emit("", "fp8_param_gather", ast::makeBool(true));
    else if (Fp8Params && !P.empty() &&
             presetFp8ParamGather(DefaultTarget, parseEnum<Precision>(P).getValueOr(Precision::BF16)))
      emit("", "fp8_param_gather", ast::makeBool(false)); // the imported recipe's target would turn it on
    if (flag("mixed_precision.fp4_param_gather").getValueOr(false) || flag("model.fp4_param").getValueOr(false))
      emit("", "fp4_param_gather", ast::makeBool(true));
    bool Bf16Layers = flag("mixed_precision.first_last_layers_bf16").getValueOr(false);
    llvm::Optional<int64_t> Start = count("mixed_precision.num_layers_at_start_in_bf16", 0);
    llvm::Optional<int64_t> End = count("mixed_precision.num_layers_at_end_in_bf16", 0);
    if (Bf16Layers) {
      if (Start.getValueOr(0))
        emit("bf16_layers", "first", ast::makeInt(*Start));
      if (End.getValueOr(0))
        emit("bf16_layers", "last", ast::makeInt(*End));
    }
  }

  void dispatcher() {
    Entry *Type = text("model.moe_token_dispatcher_type");
    Entry *Backend = text("model.moe_flex_dispatcher_backend");
    if (!Type) {
      if (Backend)
        unmapped(*Backend, "a flex backend without moe_token_dispatcher_type = flex has no effect (Bridge rule 17)");
      return;
    }
    StringRef T = Type->V.S;
    if (T == "alltoall" || T == "allgather") {
      emit("", "dispatcher", ast::makeName(T));
      if (Backend)
        unmapped(*Backend, "a flex backend has no effect with the " + T.str() + " dispatcher (Bridge rule 17)");
    } else if (T == "flex") {
      StringRef B = Backend ? StringRef(Backend->V.S) : "";
      if (B == "deepep" || B == "hybridep") {
        emit("", "dispatcher", ast::makeName(B));
        dispatcherSms(B);
      } else if (!Backend) {
        // Flex with no backend falls back to alltoall (rule 18).
        emit("", "dispatcher", ast::makeName("alltoall"));
        note("moe_token_dispatcher_type = flex without a backend runs alltoall; written as dispatcher = alltoall");
      } else
        unmapped(*Backend,
                 "the " + B.str() + " backend has no .moe dispatcher (alltoall, allgather, deepep, hybridep)");
    } else {
      error(*Type, "'model.moe_token_dispatcher_type' must be allgather, alltoall or flex, not '" + T.str() + "'");
    }
  }

  /// The recipe's moe { ... } switches, whatever the dispatcher.
  void moeSwitches() {
    if (auto V = flag("model.moe_shared_expert_overlap"); V && *V)
      emit("moe", "shared_expert_overlap", ast::makeBool(true));
    if (auto V = flag("model.moe_grouped_gemm"); V && !*V)
      emit("moe", "grouped_gemm", ast::makeBool(false));
    if (auto V = flag("model.moe_router_force_load_balancing"); V && *V)
      emit("moe", "force_balance", ast::makeBool(true));
    if (Entry *D = get("model.moe_router_dtype")) {
      if (D->V.K == Value::Kind::Null)
        emit("moe", "router_dtype", ast::makeName("bf16"));
      else if (D->V == Value::string("fp64"))
        emit("moe", "router_dtype", ast::makeName("fp64"));
      else if (D->V != Value::string("fp32"))
        error(*D, "'model.moe_router_dtype' must be fp32, fp64 or null, not " + renderPlain(D->V));
    }
    if (auto CF = number("model.moe_expert_capacity_factor"))
      emit("moe", "capacity_factor", ast::makeReal(*CF));
    if (auto V = flag("model.moe_pad_expert_input_to_capacity"); V && *V)
      emit("moe", "pad_to_capacity", ast::makeBool(true));
    if (auto V = flag("comm_overlap.overlap_moe_expert_parallel_comm"); V && *V)
      emit("moe", "overlap_ep_comm", ast::makeBool(true));
    if (auto V = flag("comm_overlap.delay_wgrad_compute"); V && *V)
      emit("moe", "delay_wgrad", ast::makeBool(true));
  }

  /// The SMs of the fused backend in use: its own 0.16.1 field
  /// (transformer_config.py:722,725), else the unified
  /// moe_flex_dispatcher_num_sms of later releases.
  void dispatcherSms(StringRef Backend) {
    llvm::Optional<int64_t> Flex = count("model.moe_flex_dispatcher_num_sms");
    llvm::Optional<int64_t> Own = count(("model.moe_" + Backend + "_num_sms").str());
    if (llvm::Optional<int64_t> Sms = Own ? Own : Flex)
      emit("moe", "dispatcher_sms", ast::makeInt(*Sms));
  }

  void recompute() {
    Entry *G = peek("model.recompute_granularity");
    Entry *Modules = peek("model.recompute_modules");
    std::string Gran;
    if (G) {
      G->Used = true;
      if (G->V.K == Value::Kind::String)
        Gran = G->V.S;
      else if (G->V.K != Value::Kind::Null) {
        error(*G, "'model.recompute_granularity' must be null, selective or full");
        return;
      }
    }
    if (Gran.empty() || Gran == "none") {
      if (Modules && Modules->V.K != Value::Kind::Null)
        unmapped(*Modules, "recompute modules without recompute_granularity = selective are inactive (Bridge "
                           "rule 31); the recipe says recompute = none");
      for (StringRef K : {"model.recompute_method", "model.recompute_num_layers"})
        if (Entry *E = get(K); E && E->V.K != Value::Kind::Null)
          unmapped(*E, "inactive without recompute_granularity = full");
      if (G)
        emit("", "recompute", ast::makeName("none"));
      return;
    }
    if (Gran == "selective") {
      std::vector<std::string> Names = {"core_attn"}; // MCore fills None with core_attn
      if (Modules && Modules->V.K != Value::Kind::Null) {
        Modules->Used = true;
        auto N = names(Modules);
        if (!N)
          return;
        Names = *N;
      }
      for (std::string &M : Names) {
        if (M == "moe_layer_recompute") // deprecated spelling of moe
          M = "moe";
        static const char *Known[] = {"core_attn", "moe_act", "layernorm",      "mla_up_proj",
                                      "mlp",       "moe",     "shared_experts", "gdn_norm_out"};
        if (!llvm::is_contained(Known, M)) {
          error(*Modules, "'" + M +
                              "' is not a Megatron-Core recompute module (core_attn, moe_act, layernorm, "
                              "mla_up_proj, mlp, moe, shared_experts, gdn_norm_out)");
          return;
        }
      }
      // An empty list is a valid "nothing recomputed" control (rule 28).
      if (Names.empty()) {
        emit("", "recompute", ast::makeName("none"));
      } else {
        std::vector<ast::Argument> Args;
        for (const std::string &M : Names)
          Args.push_back(ast::makeArg("", ast::makeName(M)));
        emit("", "recompute", ast::makeCall("selective", std::move(Args)));
      }
      for (StringRef K : {"model.recompute_method", "model.recompute_num_layers"})
        if (Entry *E = get(K); E && E->V.K != Value::Kind::Null)
          unmapped(*E, "selective recompute takes no method or layer count");
      return;
    }
    if (Gran == "full") {
      Entry *M = text("model.recompute_method");
      llvm::Optional<int64_t> N = count("model.recompute_num_layers");
      std::string Method = M ? M->V.S : "uniform";
      if (Method != "uniform" && Method != "block") {
        error(*M, "'model.recompute_method' must be uniform or block, not '" + Method + "'");
        return;
      }
      if (Modules && Modules->V.K != Value::Kind::Null)
        unmapped(*Modules, "full recompute recomputes whole layers; the module list does not apply");
      if (Method == "uniform" && N.getValueOr(1) == 1)
        emit("", "recompute", ast::makeName("full"));
      else {
        std::vector<ast::Argument> Args;
        Args.push_back(ast::makeArg("method", ast::makeName(Method)));
        if (N)
          Args.push_back(ast::makeArg("layers", ast::makeInt(*N)));
        emit("", "recompute", ast::makeCall("full", std::move(Args)));
      }
      return;
    }
    error(*G, "'model.recompute_granularity' must be null, selective or full, not '" + Gran + "'");
  }

  void graphs() {
    Entry *Impl = text("model.cuda_graph_impl");
    Entry *Modules = get("model.cuda_graph_modules");
    Entry *Scope = get("model.cuda_graph_scope"); // the deprecated name
    if (Modules && Scope && Modules->V.K != Value::Kind::Null && Scope->V.K != Value::Kind::Null)
      error(*Scope, "cuda_graph_scope and cuda_graph_modules cannot both be set (cuda_graph_scope is the "
                    "deprecated name)");
    Entry *List = Modules && Modules->V.K != Value::Kind::Null ? Modules : Scope;
    std::vector<std::string> Scopes;
    if (List && List->V.K != Value::Kind::Null) {
      auto N = names(List);
      if (!N)
        return;
      Scopes = *N;
    }
    std::string I = Impl ? Impl->V.S : "none";
    // The deprecated scope `full_iteration` means impl = full_iteration, and
    // `full` means the whole layer (rule 32).
    if (llvm::is_contained(Scopes, "full_iteration")) {
      I = "full_iteration";
      Scopes.clear();
    }
    bool Graphs = I != "none";
    if (I == "none") {
      if (!Scopes.empty())
        unmapped(*List, "graph modules without a cuda_graph_impl are inactive");
      if (Impl)
        emit("", "cuda_graph", ast::makeName("none"));
    } else if (I == "full_iteration") {
      if (!Scopes.empty())
        error(*List, "a full-iteration graph takes an empty module list (Bridge rule 33)");
      emit("", "cuda_graph", ast::makeName("full_iteration"));
    } else if (I == "transformer_engine" || I == "local") {
      static const char *Known[] = {"attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"};
      for (const std::string &S : Scopes)
        if (!llvm::is_contained(Known, S)) {
          error(*List, "'" + S + "' is not a CUDA-graph module (attn, mlp, moe, moe_router, moe_preprocess, mamba)");
          return;
        }
      if (Scopes.empty()) {
        unmapped(List ? *List : *Impl, "a per-layer graph of the whole layer (empty module list) has no .moe scope");
      } else {
        emit("", "cuda_graph", ast::makeNameList(Scopes));
        if (I == "local")
          emit("", "cuda_graph_impl", ast::makeName("local"));
      }
    } else {
      error(*Impl,
            "'model.cuda_graph_impl' must be none, local, transformer_engine or full_iteration, not '" + I + "'");
    }
    // Prerequisites export writes (rule 35): read; reported only when they
    // contradict the graphs.
    for (StringRef K : {"model.use_te_rng_tracker", "rng.te_rng_tracker"})
      if (Entry *E = get(K); E && Graphs && E->V == Value::boolean(false))
        unmapped(*E, "CUDA graphs need the TE RNG tracker; Megatron-Bridge rejects this combination");
    for (StringRef K : {"rerun_state_machine.check_for_nan_in_loss", "ddp.check_for_nan_in_grad"})
      if (Entry *E = get(K); E && E->V == Value::boolean(true) && I == "full_iteration")
        unmapped(*E, "a full-iteration graph needs the NaN checks off; Megatron-Bridge rejects this combination");
  }

  //--- offload, optimizer, vision --------------------------------------------

  void offload() {
    bool Optim = flag("optimizer.optimizer_cpu_offload").getValueOr(false);
    llvm::Optional<double> Fraction = number("optimizer.optimizer_offload_fraction");
    if (Optim) {
      double F = Fraction.getValueOr(1.0);
      if (F < 0 || F > 1)
        error(*peek("optimizer.optimizer_offload_fraction"),
              "'optimizer.optimizer_offload_fraction' must be in [0, 1]");
      else
        emit("offload", "optimizer", ast::makeReal(F));
      if (!Fraction)
        note("optimizer_cpu_offload without optimizer_offload_fraction: written as offload.optimizer = 1.0 (the "
             "whole state)");
    } else if (Fraction && *Fraction > 0) {
      unmapped(*peek("optimizer.optimizer_offload_fraction"), "inactive without optimizer.optimizer_cpu_offload");
    }
    if (flag("optimizer.overlap_cpu_optimizer_d2h_h2d").getValueOr(false)) {
      if (Optim)
        emit("offload", "overlap_copies", ast::makeBool(true));
      else
        unmapped(*peek("optimizer.overlap_cpu_optimizer_d2h_h2d"), "inactive without optimizer.optimizer_cpu_offload");
    }
    if (flag("model.cpu_offloading").getValueOr(false)) {
      emit("offload", "activations", ast::makeBool(true));
      if (auto N = count("model.cpu_offloading_num_layers", 0))
        emit("offload", "activation_layers", ast::makeInt(*N));
    } else if (Entry *E = get("model.cpu_offloading_num_layers"); E && E->V.K != Value::Kind::Null) {
      unmapped(*E, "inactive without model.cpu_offloading");
    }
    bool FineGrained = flag("model.fine_grained_activation_offloading").getValueOr(false);
    Entry *Modules = get("model.offload_modules");
    if (Modules && Modules->V.K != Value::Kind::Null &&
        !(Modules->V.K == Value::Kind::List && Modules->V.Items.empty())) {
      auto N = names(Modules);
      if (!N)
        return;
      if (!FineGrained) {
        unmapped(*Modules, "inactive without model.fine_grained_activation_offloading");
        return;
      }
      for (const std::string &M : *N)
        if (!parseEnum<OffloadModule>(M)) {
          error(*Modules, "'" + M + "' is not an offload module (" +
                              llvm::join(enumNames<OffloadModule>().begin(), enumNames<OffloadModule>().end(), ", ") +
                              ")");
          return;
        }
      if (flag("model.cpu_offloading").getValueOr(false))
        error(*Modules, "fine-grained activation offloading cannot be enabled with cpu_offloading "
                        "(transformer_config.py)");
      else
        emit("offload", "activations", ast::makeNameList(*N));
    } else if (FineGrained) {
      error(*peek("model.fine_grained_activation_offloading"),
            "fine-grained activation offloading needs a non-empty model.offload_modules");
    }
  }

  void optimizer() {
    // dist_muon is Muon with its layer-wise distributed optimizer (0.3.1
    // training/optim.py:76): in a recipe, Muon with optimizer.distributed,
    // which moec export writes back as dist_muon.
    Entry *Type = text("optimizer.optimizer");
    bool LayerWiseMuon = Type && Type->V.S == "dist_muon";
    if (Type) {
      if (Type->V.S == "sgd" || Type->V.S == "muon" || LayerWiseMuon)
        emit("optimizer", "type", ast::makeName(LayerWiseMuon ? "muon" : Type->V.S));
      else if (Type->V.S != "adam")
        error(*Type, "'optimizer.optimizer' must be adam, sgd, muon or dist_muon, not '" + Type->V.S + "'");
    }
    llvm::Optional<bool> Dist = flag("ddp.use_distributed_optimizer");
    llvm::Optional<bool> Dist2 = flag("optimizer.use_distributed_optimizer");
    if (Dist && Dist2 && *Dist != *Dist2)
      error(*peek("optimizer.use_distributed_optimizer"),
            "optimizer.use_distributed_optimizer differs from ddp.use_distributed_optimizer");
    Entry *DistEntry = peek(Dist ? "ddp.use_distributed_optimizer" : "optimizer.use_distributed_optimizer");
    if (!Dist)
      Dist = Dist2;
    if (LayerWiseMuon) {
      if (Dist && *Dist)
        warning(*DistEntry, "dist_muon with use_distributed_optimizer = true is refused by megatron-core 0.16 "
                            "(optimizer/muon.py:192); the recipe states Muon with its layer-wise distributed "
                            "optimizer, which moec export writes with use_distributed_optimizer = false");
    } else if (Type && Type->V.S == "muon" && Dist && *Dist) {
      warning(*DistEntry, "muon with use_distributed_optimizer = true is refused by megatron-core 0.16 "
                          "(optimizer/muon.py:192); the recipe states Muon with a distributed optimizer, which moec "
                          "export writes as the layer-wise dist_muon");
    } else if (Dist && !*Dist) {
      emit("optimizer", "distributed", ast::makeBool(false));
    }
    llvm::Optional<bool> PA = flag("optimizer.use_precision_aware_optimizer");
    if (PA)
      emit("optimizer", "precision_aware", ast::makeBool(*PA));
    // The dtypes moec writes for its precision_aware choice (fp32 master,
    // bf16 or fp32 moments) come back as that choice; others have no field.
    bool Aware = PA.getValueOr(false);
    const std::pair<const char *, const char *> Dtypes[] = {
        {"optimizer.main_params_dtype", "float32"},
        {"optimizer.exp_avg_dtype", Aware ? "bfloat16" : "float32"},
        {"optimizer.exp_avg_sq_dtype", Aware ? "bfloat16" : "float32"},
        {"optimizer.main_grads_dtype", Aware ? nullptr : "float32"}};
    for (auto [Key, Expected] : Dtypes)
      if (Entry *D = text(Key)) {
        llvm::StringRef Name = llvm::StringRef(D->V.S).rsplit('.').second.empty()
                                   ? llvm::StringRef(D->V.S)
                                   : llvm::StringRef(D->V.S).rsplit('.').second;
        if (!Expected || Name != Expected)
          unmapped(*D, fmt::format("moec's optimizer keeps {} moments and fp32 master weights{}; other dtypes "
                                   "have no .moe field",
                                   Aware ? "bf16" : "fp32", Aware ? " under the precision-aware optimizer" : ""));
      }
    schedule();
    if (auto V = flag("ddp.overlap_grad_reduce"); V && !*V)
      emit("optimizer", "overlap_grad_reduce", ast::makeBool(false));
    if (auto V = flag("ddp.overlap_param_gather"); V && !*V)
      emit("optimizer", "overlap_param_gather", ast::makeBool(false));
  }

  /// The dataset split (GPTDatasetConfig.split, Megatron's "969,30,1") and
  /// the evaluation (TrainingConfig.eval_interval, eval_iters).
  void evaluation() {
    if (Entry *S = text("dataset.split")) {
      llvm::SmallVector<llvm::StringRef, 3> Parts;
      llvm::StringRef(S->V.S).split(Parts, ',');
      std::vector<ast::ExprPtr> Weights;
      for (llvm::StringRef P : Parts) {
        int64_t W = 0;
        if (P.trim().getAsInteger(10, W) || W < 0) {
          Weights.clear();
          break;
        }
        Weights.push_back(ast::makeInt(W));
      }
      if (Weights.empty() || Weights.size() > 3)
        unmapped(*S, "data.split takes one to three whole weights");
      else
        emit("data", "split", ast::makeList(std::move(Weights)));
    }
    if (auto Interval = count("train.eval_interval")) {
      emit("data", "eval_interval", ast::makeInt(*Interval));
      if (auto Iters = count("train.eval_iters"))
        emit("data", "eval_iters", ast::makeInt(*Iters));
    }
  }

  /// Megatron's iteration-based learning-rate schedule (SchedulerConfig,
  /// OptimizerParamScheduler): what moerun applies step by step.
  void schedule() {
    if (auto Lr = number("optimizer.lr"))
      emit("optimizer", "lr", ast::makeReal(*Lr));
    if (auto Min = number("optimizer.min_lr"))
      emit("optimizer", "min_lr", ast::makeReal(*Min));
    if (auto W = count("scheduler.lr_warmup_iters", 0); W && *W > 0)
      emit("optimizer", "warmup_steps", ast::makeInt(*W));
    if (Entry *D = text("scheduler.lr_decay_style")) {
      if (D->V.S == "constant" || D->V.S == "linear" || D->V.S == "cosine")
        emit("optimizer", "decay", ast::makeName(D->V.S));
      else
        unmapped(*D, "optimizer.decay is constant, linear or cosine");
    }
    if (auto Steps = count("scheduler.lr_decay_iters"))
      emit("optimizer", "decay_steps", ast::makeInt(*Steps));
    // AdamW's settings where they differ from the .moe defaults, which are
    // Megatron-Core's (AdamWConfig).
    const AdamWConfig Defaults;
    for (auto [Key, Field, Default] : {std::tuple{"optimizer.weight_decay", "weight_decay", Defaults.WeightDecay},
                                       {"optimizer.adam_beta1", "adam_beta1", Defaults.Beta1},
                                       {"optimizer.adam_beta2", "adam_beta2", Defaults.Beta2},
                                       {"optimizer.adam_eps", "adam_eps", Defaults.Eps},
                                       {"optimizer.clip_grad", "clip_grad", Defaults.ClipGrad}})
      if (auto V = number(Key); V && *V != Default)
        emit("optimizer", Field, ast::makeReal(*V));
    // The schedule in samples, as a fraction, or from a non-zero start has
    // no .moe field.
    if (Entry *E = get("scheduler.lr_warmup_fraction"); E && E->V.K != Value::Kind::Null)
      unmapped(*E, "the warm-up is optimizer.warmup_steps, a count of steps");
    for (const char *Key : {"scheduler.lr_warmup_samples", "scheduler.lr_decay_samples"})
      if (Entry *E = get(Key); E && E->V.K != Value::Kind::Null && E->V != Value::integer(0))
        unmapped(*E, "the schedule is counted in steps (optimizer.warmup_steps, optimizer.decay_steps)");
    if (Entry *E = get("scheduler.lr_warmup_init");
        E && E->V.K != Value::Kind::Null && E->V != Value::integer(0) && E->V != Value::real(0))
      unmapped(*E, "the warm-up starts from 0");
  }

  void vision() {
    if (flag("model.freeze_language_model").getValueOr(false)) {
      if (Model && !Model->isVLM())
        unmapped(*peek("model.freeze_language_model"), "language.frozen is for VLMs: nothing else would train");
      else
        emit("language", "frozen", ast::makeBool(true));
    }
    llvm::Optional<bool> VM = flag("model.freeze_vision_model");
    llvm::Optional<bool> VP = flag("model.freeze_vision_projection");
    if (!VM && !VP)
      return;
    if (Model && !Model->isVLM()) {
      if (VM.getValueOr(false) || VP.getValueOr(false))
        unmapped(*(VM ? peek("model.freeze_vision_model") : peek("model.freeze_vision_projection")),
                 "the model has no vision encoder");
      return;
    }
    if (VM.getValueOr(false) != VP.getValueOr(VM.getValueOr(false))) {
      unmapped(*peek("model.freeze_vision_projection"),
               "vision.frozen freezes the encoder and the projector together; they differ here");
      return;
    }
    if (VM.getValueOr(false))
      emit("vision", "frozen", ast::makeBool(true));
  }

  void reportLeftovers() {
    std::map<std::string, size_t> Quiet;
    for (Entry &E : Rd.Entries) {
      if (E.Used)
        continue;
      StringRef Why = knownReason(E.Key);
      StringRef Category = Why.empty() ? quietCategory(E.Key, E.V) : "";
      if (Category.empty()) {
        unmapped(E, Why.empty() ? "no .moe field corresponds to it" : Why);
        continue;
      }
      E.Used = true;
      ++Quiet[Category.str()];
      message(ImportMessage::Kind::Warning, E,
              fmt::format("'{}' = {} has no .moe equivalent: {}, which changes nothing moec checks or predicts", E.Key,
                          renderPlain(E.V), Category.str()));
      Res.Messages.back().QuietCategory = Category.str();
    }
    if (Quiet.empty())
      return;
    size_t Total = 0;
    std::vector<std::string> Parts;
    for (auto &[Category, N] : Quiet) {
      Total += N;
      Parts.push_back(fmt::format("{} {}", Category, N));
    }
    std::string Summary = fmt::format("{} key{} not translated, none of which changes what moec checks or "
                                      "predicts: {}",
                                      Total, Total == 1 ? "" : "s", llvm::join(Parts, "; "));
    note(Summary + " (moec import --verbose lists them)");
    Comments.push_back(Summary);
  }

  //--- output ------------------------------------------------------------------

  /// A line of the header comment: the configuration's values are shown as
  /// read, but a line break or control character would end the comment.
  static std::string commentLine(StringRef S) {
    std::string Out;
    for (char C : S)
      Out += C == '\n'                              ? std::string("\\n")
             : (unsigned char)C < 0x20 && C != '\t' ? std::string(" ")
                                                    : std::string(1, C);
    return Out;
  }

  ast::Definition recipeDefinition() {
    ast::Definition R;
    R.Kind = ast::DefKind::Recipe;
    R.Name = RecipeName;
    R.Entries.push_back(ast::makeAssignment("model", ast::makeName(ModelName)));
    std::vector<ast::Entry> Cluster;
    Cluster.push_back(ast::makeAssignment("gpu", ast::makeName(GpuName)));
    Cluster.push_back(ast::makeAssignment(Gpus ? "gpus" : "nodes", ast::makeInt(Gpus ? Gpus : Nodes)));
    R.Entries.push_back(ast::makeSection("cluster", std::move(Cluster)));
    // seq_len, batch and parallel first, as recipes are usually written.
    auto Rank = [](const std::pair<std::string, std::vector<ast::Entry>> &S) {
      return S.first == "#first" ? 0 : S.first == "batch" ? 1 : S.first == "parallel" ? 2 : 3;
    };
    std::stable_sort(Out.begin(), Out.end(), [&](const auto &A, const auto &B) { return Rank(A) < Rank(B); });
    for (auto &[Section, Entries] : Out) {
      if (Section.empty() || Section[0] == '#')
        for (ast::Entry &E : Entries)
          R.Entries.push_back(std::move(E));
      else
        R.Entries.push_back(ast::makeSection(Section, std::move(Entries)));
    }
    return R;
  }

  void write() {
    for (auto [What, Name] : {std::pair<StringRef, StringRef>{"model", ModelName}, {"GPU system", GpuName}})
      if (!ast::isIdentifier(Name)) {
        globalError(fmt::format("the {} name '{}' is not a .moe name (letters, digits and '_', not starting with a "
                                "digit, not a keyword); give another with --{}",
                                What.str(), commentLine(Name), What == "model" ? "model" : "gpu"));
        return;
      }
    ast::File F = std::move(ModelFile);
    F.Definitions.push_back(recipeDefinition());
    std::string S;
    S += fmt::format("# Imported from {} by `moec import --from megatron-bridge`.\n",
                     Opts.SourceName.empty() ? std::string("a Megatron-Bridge configuration")
                                             : commentLine(Opts.SourceName));
    if (!Comments.empty()) {
      S += "# Not translated (no .moe equivalent):\n";
      for (const std::string &C : Comments)
        S += "#   " + commentLine(C) + "\n";
    }
    S += "\n";
    {
      llvm::raw_string_ostream OS(S);
      ast::PrintOptions Print;
      Print.InlineWidth = 100;
      ast::print(F, OS, Print);
    }
    // What is written must mean the tree built: a recipe moec cannot read
    // back, or reads differently, is moec's error, and nothing is written.
    // It is written in moec fmt's layout.
    auto Internal = [&](StringRef Why) {
      globalError(
          ("internal error: the recipe moec import wrote " + Why + "; please report it with the configuration").str());
    };
    llvm::SourceMgr SM;
    DiagnosticEngine Check(SM);
    unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(S, "<import>"), llvm::SMLoc());
    FormatResult Formatted = formatBuffer(ID, Check);
    if (!Formatted.ok()) {
      std::vector<Diagnostic> Why = Check.finish();
      Internal(std::string(Formatted.St == FormatResult::Status::SyntaxError ? "does not parse" : "does not format") +
               " (" +
               (!Formatted.Message.empty() ? Formatted.Message
                : Why.empty()              ? std::string("no diagnostic")
                                           : Why.front().Message) +
               ")");
      return;
    }
    unsigned OutID =
        SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Formatted.Text, "<import>"), llvm::SMLoc());
    std::unique_ptr<ast::File> Back = parseBuffer(OutID, Check);
    auto Dump = [](const ast::File &X) {
      std::string D;
      llvm::raw_string_ostream OS(D);
      ast::dump(X, OS);
      return OS.str();
    };
    if (!Back || Check.errorCount() || Dump(*Back) != Dump(F)) {
      Internal("parses to another recipe than the one built");
      return;
    }
    Res.Source = std::move(Formatted.Text);
    Res.RecipeName = RecipeName;
    Res.ModelName = ModelName;
  }
};
} // namespace

ImportResult bridge::importBridge(StringRef Text, const ImportOptions &Opts) {
  ImportResult Res;
  Reader Rd;
  Rd.read(Text);
  Res.Messages = std::move(Rd.Messages);
  if (Res.hasErrors())
    return Res;
  Importer(Rd, Opts, Res).run();
  // Messages in text order, global ones first.
  std::stable_sort(Res.Messages.begin(), Res.Messages.end(), [](const ImportMessage &A, const ImportMessage &B) {
    return std::make_pair(A.Line, A.Column) < std::make_pair(B.Line, B.Column);
  });
  return Res;
}
