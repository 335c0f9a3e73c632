//===- PlanReader.cpp - Reading and validating a launch plan --------------===//
//
// Every read names its field by its dotted TOML path, so that a plan edited
// by hand (or truncated by a crash) is reported as "plan.toml: config.seq_len:
// expected an integer" rather than as a hang or a wrong shape at step 1.
// Validation stops at the first problem: later checks assume earlier ones.
//
//===----------------------------------------------------------------------===//
#include "moec/PlanFormat/PlanReader.h"

#include "llvm/Support/MemoryBuffer.h"
#include <cmath>
#include <fmt/format.h>
#include <set>

// The reader reports parse errors as values: it is built like LLVM, whose
// code does not use exceptions.
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

using namespace moec;

namespace {

/// The product of Factors, or nullopt past int64_t: a plan edited by hand
/// may hold any integer, and a product that wraps would pass a check.
std::optional<int64_t> product(std::initializer_list<int64_t> Factors) {
  int64_t Result = 1;
  for (int64_t F : Factors)
    if (__builtin_mul_overflow(Result, F, &Result))
      return std::nullopt;
  return Result;
}

std::string showProduct(std::optional<int64_t> V) { return V ? std::to_string(*V) : std::string("more than 2^63"); }

/// Debian's toml++ 3.3.0 reaches __builtin_unreachable() on many non-ASCII
/// characters where it checks for whitespace (is_non_ascii_horizontal_
/// whitespace: U+00A1-U+0499 and U+FB26-U+FEFE; found by fuzz-planreader,
/// docs/reliability.md). Telling where toml++ will look would mean
/// predicting its reading of malformed documents, which the fuzzer showed a
/// scanner gets wrong, so plans are ASCII: moec writes non-ASCII characters
/// as \u escapes and the reader refuses any raw non-ASCII byte, before toml++
/// sees the document. Returns the 1-based line and column of the first one.
std::optional<std::pair<unsigned, unsigned>> findNonAscii(llvm::StringRef Doc) {
  unsigned Line = 1, Column = 1;
  for (char C : Doc) {
    if ((unsigned char)C >= 0x80)
      return std::make_pair(Line, Column);
    if (C == '\n') {
      ++Line;
      Column = 1;
    } else {
      ++Column;
    }
  }
  return std::nullopt;
}

class PlanParser {
public:
  explicit PlanParser(std::string File) : File(std::move(File)) {}

  llvm::Expected<LaunchPlan> parse(llvm::StringRef Document);

private:
  std::string File;
  std::string Error;
  LaunchPlan P;

  bool fail(const std::string &Field, const std::string &Message) {
    if (Error.empty())
      Error = Field.empty() ? fmt::format("{}: {}", File, Message) : fmt::format("{}: {}: {}", File, Field, Message);
    return false;
  }
  static std::string join(const std::string &Prefix, llvm::StringRef Key) {
    return Prefix.empty() ? Key.str() : Prefix + "." + Key.str();
  }
  static std::string index(const std::string &Prefix, size_t I) { return fmt::format("{}[{}]", Prefix, I); }

  const toml::node *field(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, bool Required) {
    const toml::node *N = T.get(std::string_view(Key.data(), Key.size()));
    if (!N && Required)
      fail(join(Prefix, Key), "missing");
    return N;
  }
  bool readInt(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, int64_t &Out, int64_t Min = 0,
               bool Required = true) {
    const toml::node *N = field(T, Prefix, Key, Required);
    if (!N)
      return !Required;
    std::optional<int64_t> V = N->value_exact<int64_t>();
    if (!N->is_integer() || !V)
      return fail(join(Prefix, Key), "expected an integer");
    if (*V < Min)
      return fail(join(Prefix, Key), fmt::format("must be at least {}, got {}", Min, *V));
    Out = *V;
    return true;
  }
  bool readBool(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, bool &Out, bool Required = true) {
    const toml::node *N = field(T, Prefix, Key, Required);
    if (!N)
      return !Required;
    if (!N->is_boolean())
      return fail(join(Prefix, Key), "expected true or false");
    Out = *N->value<bool>();
    return true;
  }
  bool readString(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, std::string &Out,
                  bool Required = true) {
    const toml::node *N = field(T, Prefix, Key, Required);
    if (!N)
      return !Required;
    if (!N->is_string())
      return fail(join(Prefix, Key), "expected a string");
    Out = *N->value<std::string>();
    return true;
  }
  bool readOneOf(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, std::string &Out,
                 std::initializer_list<const char *> Allowed) {
    if (!readString(T, Prefix, Key, Out))
      return false;
    std::string List;
    for (const char *A : Allowed) {
      if (Out == A)
        return true;
      List += List.empty() ? fmt::format("'{}'", A) : fmt::format(", '{}'", A);
    }
    return fail(join(Prefix, Key), fmt::format("'{}' is not one of {}", Out, List));
  }
  const toml::table *table(const toml::table &T, const std::string &Prefix, llvm::StringRef Key, bool Required = true) {
    const toml::node *N = field(T, Prefix, Key, Required);
    if (!N)
      return nullptr;
    if (!N->is_table()) {
      fail(join(Prefix, Key), "expected a table");
      return nullptr;
    }
    return N->as_table();
  }
  const toml::array *array(const toml::table &T, const std::string &Prefix, llvm::StringRef Key) {
    const toml::node *N = field(T, Prefix, Key, true);
    if (!N)
      return nullptr;
    if (!N->is_array()) {
      fail(join(Prefix, Key), "expected an array");
      return nullptr;
    }
    return N->as_array();
  }

  bool readModel(const toml::table &Config);
  bool readParallel(const toml::table &Config);
  bool readConfig(const toml::table &Root);
  bool readStages(const toml::table &Pipeline);
  void readPredictions(const toml::table &Root);
  bool readSchedule(const toml::table &Pipeline);
  bool readPipeline(const toml::table &Root);
  bool readGroups(const toml::table &Root);
  bool readRanks(const toml::table &Root);
};

bool PlanParser::readModel(const toml::table &Config) {
  const std::string Pre = "config.model";
  const toml::table *M = table(Config, "config", "model");
  if (!M)
    return false;
  LaunchModel &Model = P.Model;
  if (!readString(*M, Pre, "name", Model.Name) || !readInt(*M, Pre, "layers", Model.Layers, 1) ||
      !readInt(*M, Pre, "hidden", Model.Hidden, 1) || !readInt(*M, Pre, "heads", Model.Heads, 1) ||
      !readInt(*M, Pre, "kv_heads", Model.KvHeads, 1) || !readInt(*M, Pre, "head_dim", Model.HeadDim, 1) ||
      !readInt(*M, Pre, "vocab", Model.Vocab, 1) || !readInt(*M, Pre, "mtp_layers", Model.MtpLayers, 0) ||
      !readBool(*M, Pre, "qk_norm", Model.QkNorm, false))
    return false;
  if (const toml::node *N = M->get("rope_theta")) {
    std::optional<double> V = N->value<double>();
    if (!N->is_number() || !V || !(*V >= 1))
      return fail(Pre + ".rope_theta", "expected a number of at least 1");
    Model.RopeTheta = *V;
  }
  if (const toml::node *N = M->get("rope_fraction")) {
    std::optional<double> V = N->value<double>();
    if (!N->is_number() || !V || !(*V > 0 && *V <= 1))
      return fail(Pre + ".rope_fraction", "expected a number in (0, 1]");
    Model.RopeFraction = *V;
  }
  if (M->contains("mrope_section")) {
    const toml::array *L = array(*M, Pre, "mrope_section");
    if (!L)
      return false;
    const int64_t Rotated = int64_t(std::llround(double(Model.HeadDim) * Model.RopeFraction));
    int64_t Sum = 0;
    for (size_t I = 0; I < L->size(); ++I) {
      std::optional<int64_t> N = (*L)[I].value_exact<int64_t>();
      if (!(*L)[I].is_integer() || !N || *N < 0 || *N > Rotated)
        return fail(index(Pre + ".mrope_section", I), fmt::format("expected a count of at most {}", Rotated));
      Model.MropeSection.push_back(*N);
      Sum += *N;
    }
    if (L->size() != 3 || 2 * Sum != Rotated)
      return fail(Pre + ".mrope_section",
                  fmt::format("expected three counts summing to {}, half the dimensions RoPE rotates", Rotated / 2));
  }
  if (const toml::node *N = M->get("norm_epsilon")) {
    std::optional<double> V = N->value<double>();
    if (!N->is_number() || !V || !(*V > 0 && *V < 1))
      return fail(Pre + ".norm_epsilon", "expected a number in (0, 1)");
    Model.NormEpsilon = *V;
  }
  if (M->contains("ffn_hidden")) {
    int64_t F = 0;
    if (!readInt(*M, Pre, "ffn_hidden", F, 1))
      return false;
    Model.FfnHidden = F;
  }
  if (M->contains("moe")) {
    const std::string MPre = Pre + ".moe";
    const toml::table *T = table(*M, Pre, "moe");
    if (!T)
      return false;
    LaunchMoE MoE;
    std::string Router;
    if (!readInt(*T, MPre, "experts", MoE.Experts, 1) || !readInt(*T, MPre, "top_k", MoE.TopK, 1) ||
        !readInt(*T, MPre, "ffn_hidden", MoE.FfnHidden, 1) ||
        !readInt(*T, MPre, "shared_experts", MoE.SharedExperts, 0) ||
        !readInt(*T, MPre, "dense_layers", MoE.DenseLayers, 0) ||
        !readOneOf(*T, MPre, "router", Router, {"softmax", "sigmoid"}))
      return false;
    if (MoE.TopK > MoE.Experts)
      return fail(MPre + ".top_k", fmt::format("{} exceeds the {} experts", MoE.TopK, MoE.Experts));
    if (T->contains("shared_ffn_hidden")) {
      int64_t S = 0;
      if (!readInt(*T, MPre, "shared_ffn_hidden", S, 1))
        return false;
      MoE.SharedFfnHidden = S;
    }
    MoE.SigmoidRouter = Router == "sigmoid";
    if (const toml::node *N = T->get("topk_scaling")) {
      std::optional<double> V = N->value<double>();
      if (!N->is_number() || !V || !(*V > 0))
        return fail(MPre + ".topk_scaling", "expected a positive number");
      MoE.TopKScaling = *V;
    }
    if (!readBool(*T, MPre, "pre_softmax", MoE.PreSoftmax, false) ||
        !readBool(*T, MPre, "expert_bias", MoE.ExpertBias, false) ||
        !readBool(*T, MPre, "shared_expert_gate", MoE.SharedExpertGate, false) ||
        !readBool(*T, MPre, "force_balance", MoE.ForceBalance, false) ||
        !readInt(*T, MPre, "groups", MoE.Groups, 1, false) ||
        !readInt(*T, MPre, "group_top_k", MoE.GroupTopK, 1, false))
      return false;
    if (T->contains("groups") && !T->contains("group_top_k"))
      MoE.GroupTopK = MoE.Groups;
    if (MoE.Experts % MoE.Groups != 0)
      return fail(MPre + ".groups", fmt::format("{} groups do not divide the {} experts", MoE.Groups, MoE.Experts));
    if (MoE.GroupTopK > MoE.Groups)
      return fail(MPre + ".group_top_k", fmt::format("{} exceeds the {} groups", MoE.GroupTopK, MoE.Groups));
    if (MoE.TopK > MoE.GroupTopK * (MoE.Experts / MoE.Groups))
      return fail(MPre + ".group_top_k", fmt::format("top_k {} exceeds the experts of {} groups of {}", MoE.TopK,
                                                     MoE.GroupTopK, MoE.Experts / MoE.Groups));
    Model.MoE = MoE;
  }
  if (M->contains("mla")) {
    const std::string APre = Pre + ".mla";
    const toml::table *T = table(*M, Pre, "mla");
    if (!T)
      return false;
    LaunchMla A;
    if (!readInt(*T, APre, "q_lora_rank", A.QLoraRank, 0) || !readInt(*T, APre, "kv_lora_rank", A.KvLoraRank, 1) ||
        !readInt(*T, APre, "qk_head_dim", A.QkHeadDim, 0) ||
        !readInt(*T, APre, "qk_rope_head_dim", A.QkRopeHeadDim, 2) || !readInt(*T, APre, "v_head_dim", A.VHeadDim, 1))
      return false;
    if (A.QkRopeHeadDim % 2)
      return fail(APre + ".qk_rope_head_dim", fmt::format("{} is odd: RoPE rotates pairs", A.QkRopeHeadDim));
    Model.Mla = A;
  }
  if (M->contains("linear_attention")) {
    const std::string LPre = Pre + ".linear_attention";
    const toml::table *T = table(*M, Pre, "linear_attention");
    if (!T)
      return false;
    LaunchLinearAttention L;
    if (!readInt(*T, LPre, "interval", L.Interval, 1) || !readInt(*T, LPre, "key_heads", L.KeyHeads, 1) ||
        !readInt(*T, LPre, "value_heads", L.ValueHeads, 1) || !readInt(*T, LPre, "head_dim", L.HeadDim, 1))
      return false;
    if (L.ValueHeads % L.KeyHeads)
      return fail(LPre + ".value_heads",
                  fmt::format("{} is not a multiple of the {} key heads", L.ValueHeads, L.KeyHeads));
    Model.LinearAttention = L;
  }
  if (M->contains("vision")) {
    const std::string VPre = Pre + ".vision";
    const toml::table *T = table(*M, Pre, "vision");
    if (!T)
      return false;
    LaunchVision V;
    if (!readInt(*T, VPre, "layers", V.Layers, 1) || !readInt(*T, VPre, "hidden", V.Hidden, 1) ||
        !readInt(*T, VPre, "heads", V.Heads, 1) || !readInt(*T, VPre, "ffn_hidden", V.FfnHidden, 1) ||
        !readInt(*T, VPre, "patch_size", V.PatchSize, 1) || !readInt(*T, VPre, "spatial_merge", V.SpatialMerge, 1) ||
        !readInt(*T, VPre, "out_hidden", V.OutHidden, 1) ||
        (T->contains("temporal_patch") && !readInt(*T, VPre, "temporal_patch", V.TemporalPatch, 1)) ||
        (T->contains("position_embeddings") && !readInt(*T, VPre, "position_embeddings", V.PositionEmbeddings, 1)) ||
        !readInt(*T, VPre, "start_token", V.StartToken, 0) || !readInt(*T, VPre, "image_token", V.ImageToken, 0) ||
        !readInt(*T, VPre, "end_token", V.EndToken, 0))
      return false;
    for (auto [Key, Id] :
         {std::pair{"start_token", V.StartToken}, {"image_token", V.ImageToken}, {"end_token", V.EndToken}})
      if (Id >= Model.Vocab)
        return fail(VPre + "." + Key, fmt::format("{} is not below the vocabulary of {}", Id, Model.Vocab));
    if (T->contains("deepstack_layers")) {
      const toml::array *L = array(*T, VPre, "deepstack_layers");
      if (!L)
        return false;
      for (size_t I = 0; I < L->size(); ++I) {
        std::optional<int64_t> Layer = (*L)[I].value_exact<int64_t>();
        if (!(*L)[I].is_integer() || !Layer || *Layer < 0 || *Layer >= V.Layers)
          return fail(index(VPre + ".deepstack_layers", I),
                      fmt::format("expected an encoder block, below {}", V.Layers));
        V.DeepstackLayers.push_back(*Layer);
      }
    }
    Model.Vision = V;
  }
  return true;
}

bool PlanParser::readParallel(const toml::table &Config) {
  const std::string Pre = "config.parallel";
  const toml::table *T = table(Config, "config", "parallel");
  if (!T)
    return false;
  LaunchParallel &Par = P.Parallel;
  if (!readInt(*T, Pre, "tp", Par.TP, 1) || !readInt(*T, Pre, "cp", Par.CP, 1) || !readInt(*T, Pre, "ep", Par.EP, 1) ||
      !readInt(*T, Pre, "etp", Par.ETP, 1) || !readInt(*T, Pre, "pp", Par.PP, 1) ||
      !readInt(*T, Pre, "vpp", Par.VPP, 1) || !readInt(*T, Pre, "dp", Par.DP, 1) ||
      !readInt(*T, Pre, "edp", Par.EDP, 1) || !readBool(*T, Pre, "sp", Par.SequenceParallel) ||
      !readBool(*T, Pre, "fsdp", Par.FSDP) ||
      !readOneOf(*T, Pre, "order", Par.Order, {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}))
    return false;
  // Plans written before cp_comm was carried ran the ring.
  if (T->contains("cp_comm") && !readOneOf(*T, Pre, "cp_comm", Par.CpComm, {"p2p", "a2a", "allgather", "a2a_p2p"}))
    return false;
  std::optional<int64_t> Dense = product({Par.TP, Par.CP, Par.DP, Par.PP}),
                         Expert = product({Par.ETP, Par.EP, Par.EDP, Par.PP});
  if (Dense != P.WorldSize)
    return fail(Pre, fmt::format("tp x cp x dp x pp = {} x {} x {} x {} = {}, but world_size is {}", Par.TP, Par.CP,
                                 Par.DP, Par.PP, showProduct(Dense), P.WorldSize));
  if (Expert != P.WorldSize)
    return fail(Pre, fmt::format("etp x ep x edp x pp = {} x {} x {} x {} = {}, but world_size is {}", Par.ETP, Par.EP,
                                 Par.EDP, Par.PP, showProduct(Expert), P.WorldSize));
  return true;
}

bool PlanParser::readConfig(const toml::table &Root) {
  const toml::table *C = table(Root, "", "config");
  if (!C)
    return false;
  int64_t ConfigWorld = 0;
  if (!readInt(*C, "config", "world_size", ConfigWorld, 1))
    return false;
  if (ConfigWorld != P.WorldSize)
    return fail("config.world_size", fmt::format("{} differs from world_size {}", ConfigWorld, P.WorldSize));
  if (!readModel(*C) || !readParallel(*C) || !readInt(*C, "config", "micro_batch", P.MicroBatch, 1) ||
      !readInt(*C, "config", "global_batch", P.GlobalBatch, 1) || !readInt(*C, "config", "seq_len", P.SeqLen, 1) ||
      !readString(*C, "config", "precision", P.Precision) || !readString(*C, "config", "dispatcher", P.Dispatcher))
    return false;
  if (C->contains("vision_frozen") && !readBool(*C, "config", "vision_frozen", P.VisionFrozen))
    return false;
  if (C->contains("cuda_graph")) {
    const toml::array *Scopes = array(*C, "config", "cuda_graph");
    if (!Scopes)
      return false;
    for (size_t I = 0; I < Scopes->size(); ++I) {
      const toml::node &N = (*Scopes)[I];
      if (!N.is_string())
        return fail(index("config.cuda_graph", I), "expected a string");
      P.CudaGraph.push_back(*N.value<std::string>());
    }
  }
  if (C->contains("gpu")) {
    const toml::table *G = table(*C, "config", "gpu");
    if (!G || !readString(*G, "config.gpu", "name", P.Gpu))
      return false;
  }

  const toml::table *R = table(*C, "config", "recompute");
  if (!R || !readOneOf(*R, "config.recompute", "kind", P.Recompute.Kind, {"none", "full", "selective"}))
    return false;
  if (P.Recompute.Kind == "full" &&
      (!readOneOf(*R, "config.recompute", "method", P.Recompute.Method, {"block", "uniform"}) ||
       !readInt(*R, "config.recompute", "layers", P.Recompute.Layers, 1)))
    return false;
  const toml::array *Modules = array(*R, "config.recompute", "modules");
  if (!Modules)
    return false;
  for (size_t I = 0; I < Modules->size(); ++I) {
    std::optional<std::string> S = (*Modules)[I].value<std::string>();
    if (!(*Modules)[I].is_string() || !S)
      return fail(index("config.recompute.modules", I), "expected a string");
    P.Recompute.Modules.push_back(*S);
  }

  const toml::table *D = table(*C, "config", "data");
  std::string Source;
  if (!D || !readOneOf(*D, "config.data", "source", Source, {"mock", "real"}) ||
      !readBool(*D, "config.data", "variable_length", P.Data.VariableLength))
    return false;
  P.Data.Mock = Source == "mock";
  if (D->contains("shuffle") && !readBool(*D, "config.data", "shuffle", P.Data.Shuffle))
    return false;
  if (!P.Data.Mock && !readString(*D, "config.data", "path", P.Data.Path))
    return false;
  if (D->contains("split")) {
    const toml::array *Split = array(*D, "config.data", "split");
    if (!Split)
      return false;
    if (Split->empty() || Split->size() > 3)
      return fail("config.data.split", fmt::format("expected 1 to 3 weights, got {}", Split->size()));
    for (size_t I = 0; I < Split->size(); ++I) {
      std::optional<int64_t> W = (*Split)[I].value_exact<int64_t>();
      if (!(*Split)[I].is_integer() || !W || *W < 0)
        return fail(index("config.data.split", I), "expected a non-negative integer");
      P.Data.Split.push_back(*W);
    }
    if (P.Data.Split[0] <= 0)
      return fail("config.data.split[0]", "the training weight must be positive");
  }
  if (D->contains("eval_interval") && (!readInt(*D, "config.data", "eval_interval", P.Data.EvalInterval, 1) ||
                                       !readInt(*D, "config.data", "eval_iters", P.Data.EvalIters, 1)))
    return false;
  if (D->contains("images_per_sample") &&
      (!readInt(*D, "config.data", "images_per_sample", P.Data.ImagesPerSample, 0) ||
       !readInt(*D, "config.data", "image_size", P.Data.ImageSize, 1)))
    return false;

  // Optional: plans written before [config.optimizer] existed keep the
  // defaults (the replicated Adam).
  if (!C->contains("optimizer"))
    return true;
  const std::string OPre = "config.optimizer";
  const toml::table *O = table(*C, "config", "optimizer");
  if (!O || !readOneOf(*O, OPre, "type", P.Optimizer.Type, {"adam", "sgd", "muon"}) ||
      !readBool(*O, OPre, "distributed", P.Optimizer.Distributed))
    return false;
  const toml::node *F = field(*O, OPre, "offload_fraction", true);
  if (!F)
    return false;
  std::optional<double> Fraction = F->value<double>();
  if (!F->is_number() || !Fraction)
    return fail(OPre + ".offload_fraction", "expected a number");
  if (!(*Fraction >= 0 && *Fraction <= 1))
    return fail(OPre + ".offload_fraction", fmt::format("must be between 0 and 1, got {}", *Fraction));
  P.Optimizer.OffloadFraction = *Fraction;

  // AdamW's settings, each optional (older plans lack them).
  struct {
    const char *Key;
    double *Out;
    double Min, Max;
    bool MinExclusive, MaxExclusive;
  } AdamFields[] = {{"weight_decay", &P.Optimizer.WeightDecay, 0, 1e300, false, false},
                    {"adam_beta1", &P.Optimizer.AdamBeta1, 0, 1, false, true},
                    {"adam_beta2", &P.Optimizer.AdamBeta2, 0, 1, false, true},
                    {"adam_eps", &P.Optimizer.AdamEps, 0, 1e300, true, false},
                    {"clip_grad", &P.Optimizer.ClipGrad, 0, 1e300, false, false}};
  for (const auto &F : AdamFields) {
    if (!O->contains(F.Key))
      continue;
    const toml::node *N = field(*O, OPre, F.Key, true);
    std::optional<double> V = N ? N->value<double>() : std::nullopt;
    if (!N || !N->is_number() || !V)
      return fail(join(OPre, F.Key), "expected a number");
    if ((F.MinExclusive ? !(*V > F.Min) : !(*V >= F.Min)) || (F.MaxExclusive ? !(*V < F.Max) : !(*V <= F.Max)))
      return fail(join(OPre, F.Key), fmt::format("out of range: {}", *V));
    *F.Out = *V;
  }

  if (!O->contains("schedule"))
    return true;
  const std::string SPre = OPre + ".schedule";
  const toml::table *S = table(*O, OPre, "schedule");
  if (!S || !readInt(*S, SPre, "warmup_steps", P.Optimizer.WarmupSteps, 0) ||
      !readOneOf(*S, SPre, "decay", P.Optimizer.Decay, {"constant", "linear", "cosine"}))
    return false;
  auto Real = [&](llvm::StringRef Key, bool Required, double Min) -> std::optional<double> {
    const toml::node *N = field(*S, SPre, Key, Required);
    if (!N)
      return std::nullopt;
    std::optional<double> V = N->value<double>();
    if (!N->is_number() || !V) {
      fail(join(SPre, Key), "expected a number");
      return std::nullopt;
    }
    if (!(*V >= Min)) {
      fail(join(SPre, Key), fmt::format("must be at least {}, got {}", Min, *V));
      return std::nullopt;
    }
    return V;
  };
  std::optional<double> MinLr = Real("min_lr", true, 0);
  if (!MinLr)
    return false;
  P.Optimizer.MinLr = *MinLr;
  if (S->contains("lr")) {
    P.Optimizer.Lr = Real("lr", true, 0);
    if (!P.Optimizer.Lr || *P.Optimizer.Lr <= 0)
      return P.Optimizer.Lr ? fail(SPre + ".lr", "must be positive") : false;
  }
  if (S->contains("decay_steps")) {
    int64_t Steps = 0;
    if (!readInt(*S, SPre, "decay_steps", Steps, 1))
      return false;
    P.Optimizer.DecaySteps = Steps;
  }
  return true;
}

/// The predictions a run is measured against; each optional, and one that is
/// not a finite non-negative number is left unset (they are for the log, not
/// for running).
void PlanParser::readPredictions(const toml::table &Root) {
  auto Number = [](const toml::node *N) -> std::optional<double> {
    std::optional<double> V = N ? N->value<double>() : std::nullopt;
    if (V && std::isfinite(*V) && *V >= 0)
      return V;
    return std::nullopt;
  };
  if (const toml::table *Pred = Root["predicted"].as_table()) {
    P.Predicted.StepSeconds = Number(Pred->get("step_time_s"));
    P.Predicted.MFU = Number(Pred->get("mfu"));
  }
  if (const toml::table *Mem = Root["memory"].as_table()) {
    std::optional<double> Peak = Number(Mem->get("peak_bytes"));
    const toml::table *B = (*Mem)["breakdown"].as_table();
    std::optional<double> Reserve = B ? Number(B->get("reserve")) : std::optional<double>(0);
    if (Peak && Reserve && *Peak >= *Reserve)
      P.Predicted.PeakBytes = *Peak - *Reserve;
  }
}

bool PlanParser::readStages(const toml::table &Pipeline) {
  const toml::array *Stages = array(Pipeline, "pipeline", "stages");
  if (!Stages)
    return false;
  const int64_t PP = P.Parallel.PP, VPP = P.Parallel.VPP;
  if (product({PP, VPP}) != int64_t(Stages->size()))
    return fail("pipeline.stages", fmt::format("expected pp x vpp = {} stages, found {}",
                                               showProduct(product({PP, VPP})), Stages->size()));
  int64_t NextLayer = 0;
  for (size_t I = 0; I < Stages->size(); ++I) {
    std::string Pre = index("pipeline.stages", I);
    const toml::table *T = (*Stages)[I].as_table();
    if (!T)
      return fail(Pre, "expected a table");
    LaunchStage S;
    if (!readInt(*T, Pre, "virtual_stage", S.VirtualStage) || !readInt(*T, Pre, "rank", S.Rank) ||
        !readInt(*T, Pre, "chunk", S.Chunk) || !readInt(*T, Pre, "first_layer", S.FirstLayer) ||
        !readInt(*T, Pre, "decoder_layers", S.DecoderLayers) || !readInt(*T, Pre, "mtp_layers", S.MtpLayers) ||
        !readBool(*T, Pre, "embedding", S.Embedding) || !readBool(*T, Pre, "loss", S.Loss))
      return false;
    int64_t V = int64_t(I);
    if (S.VirtualStage != V)
      return fail(Pre + ".virtual_stage", fmt::format("expected {} (stages are listed in model order)", V));
    if (S.Rank != V % PP || S.Chunk != V / PP)
      return fail(Pre, fmt::format("virtual stage {} must be rank {} chunk {}, not rank {} chunk {}", V, V % PP, V / PP,
                                   S.Rank, S.Chunk));
    if (S.FirstLayer != NextLayer)
      return fail(Pre + ".first_layer", fmt::format("expected {} (the layers after the previous stage)", NextLayer));
    if (__builtin_add_overflow(NextLayer, S.DecoderLayers, &NextLayer))
      return fail(Pre + ".decoder_layers", "the layers of the stages add up past 2^63");
    if (S.Embedding != (V == 0))
      return fail(Pre + ".embedding",
                  V == 0 ? "the first stage must hold the embedding" : "only the first stage holds the embedding");
    if (S.Loss != (V == PP * VPP - 1))
      return fail(Pre + ".loss", S.Loss ? "only the last stage holds the loss" : "the last stage must hold the loss");
    P.Stages.push_back(S);
  }
  if (NextLayer != P.Model.Layers)
    return fail("pipeline.stages",
                fmt::format("the stages hold {} decoder layers, the model has {}", NextLayer, P.Model.Layers));
  return true;
}

/// "F3.1" -> {Forward, 3, 1}.
std::optional<LaunchOp> parseOp(llvm::StringRef Text) {
  LaunchOp Op;
  if (Text.consume_front("F"))
    Op.K = LaunchOp::Forward;
  else if (Text.consume_front("B"))
    Op.K = LaunchOp::Backward;
  else
    return std::nullopt;
  auto [Mb, Chunk] = Text.split('.');
  unsigned long long M = 0, C = 0;
  if (Mb.empty() || Chunk.empty() || Mb.getAsInteger(10, M) || Chunk.getAsInteger(10, C) || M > uint64_t(INT64_MAX) ||
      C > uint64_t(INT64_MAX))
    return std::nullopt;
  Op.Microbatch = int64_t(M);
  Op.Chunk = int64_t(C);
  return Op;
}

bool PlanParser::readSchedule(const toml::table &Pipeline) {
  const toml::array *Schedule = array(Pipeline, "pipeline", "schedule");
  if (!Schedule)
    return false;
  const int64_t PP = P.Parallel.PP, VPP = P.Parallel.VPP, M = P.Microbatches;
  if (int64_t(Schedule->size()) != PP)
    return fail("pipeline.schedule",
                fmt::format("expected one entry per pipeline rank ({}), found {}", PP, Schedule->size()));
  for (size_t R = 0; R < Schedule->size(); ++R) {
    std::string Pre = index("pipeline.schedule", R);
    const toml::table *T = (*Schedule)[R].as_table();
    if (!T)
      return fail(Pre, "expected a table");
    int64_t Rank = 0;
    if (!readInt(*T, Pre, "rank", Rank))
      return false;
    if (Rank != int64_t(R))
      return fail(Pre + ".rank", fmt::format("expected {} (entries are listed in rank order)", R));
    const toml::array *Ops = array(*T, Pre, "ops");
    if (!Ops)
      return false;
    // Each (direction, micro batch, chunk) exactly once, forward before backward.
    std::set<std::tuple<int, int64_t, int64_t>> Seen;
    std::vector<LaunchOp> Parsed;
    for (size_t I = 0; I < Ops->size(); ++I) {
      std::string OpField = index(Pre + ".ops", I);
      std::optional<std::string> Text = (*Ops)[I].value<std::string>();
      if (!(*Ops)[I].is_string() || !Text)
        return fail(OpField, "expected a string such as 'F3.1'");
      std::optional<LaunchOp> Op = parseOp(*Text);
      if (!Op)
        return fail(OpField, fmt::format("'{}' is not F<microbatch>.<chunk> or B<microbatch>.<chunk>", *Text));
      if (Op->Microbatch >= M)
        return fail(OpField,
                    fmt::format("'{}': micro batch {} is past the {} micro batches", *Text, Op->Microbatch, M));
      if (Op->Chunk >= VPP)
        return fail(OpField, fmt::format("'{}': chunk {} is past vpp = {}", *Text, Op->Chunk, VPP));
      if (!Seen.insert({Op->K, Op->Microbatch, Op->Chunk}).second)
        return fail(OpField, fmt::format("'{}' appears twice", *Text));
      if (Op->K == LaunchOp::Backward && !Seen.count({LaunchOp::Forward, Op->Microbatch, Op->Chunk}))
        return fail(OpField, fmt::format("'{}' runs before its forward", *Text));
      Parsed.push_back(*Op);
    }
    if (product({2, M, VPP}) != int64_t(Parsed.size()))
      return fail(Pre + ".ops", fmt::format("expected {} ops (a forward and a backward of {} micro batches on {} "
                                            "chunks), found {}",
                                            showProduct(product({2, M, VPP})), M, VPP, Parsed.size()));
    P.Schedule.push_back(std::move(Parsed));
  }
  return true;
}

bool PlanParser::readPipeline(const toml::table &Root) {
  const toml::table *T = table(Root, "", "pipeline");
  if (!T)
    return false;
  int64_t PP = 0, VPP = 0;
  if (!readInt(*T, "pipeline", "pp", PP, 1) || !readInt(*T, "pipeline", "vpp", VPP, 1) ||
      !readInt(*T, "pipeline", "microbatches", P.Microbatches, 1))
    return false;
  if (PP != P.Parallel.PP)
    return fail("pipeline.pp", fmt::format("{} differs from config.parallel.pp = {}", PP, P.Parallel.PP));
  if (VPP != P.Parallel.VPP)
    return fail("pipeline.vpp", fmt::format("{} differs from config.parallel.vpp = {}", VPP, P.Parallel.VPP));
  std::optional<int64_t> Expected = product({P.MicroBatch, P.Microbatches, P.Parallel.DP});
  if (Expected != P.GlobalBatch)
    return fail("pipeline.microbatches",
                fmt::format("micro_batch x microbatches x dp = {} x {} x {} = {}, but global_batch is {}", P.MicroBatch,
                            P.Microbatches, P.Parallel.DP, showProduct(Expected), P.GlobalBatch));
  return readStages(*T) && readSchedule(*T);
}

bool PlanParser::readGroups(const toml::table &Root) {
  const toml::table *T = table(Root, "", "groups");
  if (!T)
    return false;
  // One [[ranks]] entry per rank, checked before anything is allocated per
  // rank: the world size is then bounded by the document's own size.
  const toml::array *Ranks = array(Root, "", "ranks");
  if (!Ranks)
    return false;
  if (int64_t(Ranks->size()) != P.WorldSize)
    return fail("ranks", fmt::format("expected one entry per rank ({}), found {}", P.WorldSize, Ranks->size()));
  const LaunchParallel &Par = P.Parallel;
  // The kinds the runtime builds communicators for, with their group sizes.
  const std::map<std::string, int64_t> Required = {{"tp", Par.TP},
                                                   {"cp", Par.CP},
                                                   {"dp", Par.DP},
                                                   {"dp-cp", Par.DP * Par.CP},
                                                   {"tp-cp", Par.TP * Par.CP},
                                                   {"pp", Par.PP},
                                                   {"ep", Par.EP},
                                                   {"etp", Par.ETP},
                                                   {"edp", Par.EDP}};
  for (const auto &[Kind, Size] : Required)
    if (!T->contains(Kind))
      return fail("groups." + Kind, "missing");
  for (const auto &[Key, Node] : *T) {
    std::string Kind(Key.str());
    std::string Pre = "groups." + Kind;
    const toml::array *List = Node.as_array();
    if (!List)
      return fail(Pre, "expected an array of rank lists");
    std::vector<std::vector<int>> Groups;
    std::vector<int> Seen(size_t(P.WorldSize), 0);
    for (size_t G = 0; G < List->size(); ++G) {
      const toml::array *Members = (*List)[G].as_array();
      if (!Members)
        return fail(index(Pre, G), "expected an array of ranks");
      std::vector<int> Group;
      for (size_t I = 0; I < Members->size(); ++I) {
        std::optional<int64_t> R = (*Members)[I].value_exact<int64_t>();
        if (!(*Members)[I].is_integer() || !R)
          return fail(index(index(Pre, G), I), "expected a rank");
        if (*R < 0 || *R >= P.WorldSize)
          return fail(index(index(Pre, G), I), fmt::format("rank {} is outside the world of {}", *R, P.WorldSize));
        if (Seen[size_t(*R)]++)
          return fail(index(index(Pre, G), I), fmt::format("rank {} is in more than one '{}' group", *R, Kind));
        Group.push_back(int(*R));
      }
      auto It = Required.find(Kind);
      if (It != Required.end() && int64_t(Group.size()) != It->second)
        return fail(index(Pre, G), fmt::format("has {} ranks, expected {}", Group.size(), It->second));
      Groups.push_back(std::move(Group));
    }
    for (int64_t R = 0; R < P.WorldSize; ++R)
      if (!Seen[size_t(R)])
        return fail(Pre, fmt::format("rank {} is in no group", R));
    P.Groups[Kind] = std::move(Groups);
  }
  return true;
}

bool PlanParser::readRanks(const toml::table &Root) {
  const toml::array *Ranks = array(Root, "", "ranks");
  if (!Ranks)
    return false;
  if (int64_t(Ranks->size()) != P.WorldSize)
    return fail("ranks", fmt::format("expected one entry per rank ({}), found {}", P.WorldSize, Ranks->size()));
  // Which group kind a coordinate is the position in.
  const std::vector<std::pair<const char *, const char *>> DenseAxes = {
      {"tp", "tp"}, {"cp", "cp"}, {"dp", "dp"}, {"pp", "pp"}};
  const std::vector<std::pair<const char *, const char *>> ExpertAxes = {
      {"etp", "etp"}, {"ep", "ep"}, {"edp", "edp"}, {"pp", "pp"}};
  for (size_t I = 0; I < Ranks->size(); ++I) {
    std::string Pre = index("ranks", I);
    const toml::table *T = (*Ranks)[I].as_table();
    if (!T)
      return fail(Pre, "expected a table");
    LaunchRank R;
    if (!readInt(*T, Pre, "rank", R.Rank) || !readInt(*T, Pre, "node", R.Node) ||
        !readInt(*T, Pre, "local_rank", R.LocalRank))
      return false;
    if (R.Rank != int64_t(I))
      return fail(Pre + ".rank", fmt::format("expected {} (entries are listed in rank order)", I));
    const toml::table *Groups = table(*T, Pre, "groups");
    if (!Groups)
      return false;
    for (const auto &[Kind, List] : P.Groups) {
      int64_t G = 0;
      if (!readInt(*Groups, Pre + ".groups", Kind, G))
        return false;
      if (G >= int64_t(List.size()) || !llvm::is_contained(List[size_t(G)], int(R.Rank)))
        return fail(Pre + ".groups." + Kind, fmt::format("group {} does not hold rank {}", G, R.Rank));
      R.Groups[Kind] = G;
    }
    for (auto [Table, Axes, Into] :
         {std::make_tuple("dense", &DenseAxes, &R.Dense), std::make_tuple("expert", &ExpertAxes, &R.Expert)}) {
      std::string CPre = Pre + "." + Table;
      const toml::table *C = table(*T, Pre, Table);
      if (!C)
        return false;
      for (auto [Axis, Kind] : *Axes) {
        int64_t X = 0;
        if (!readInt(*C, CPre, Axis, X))
          return false;
        // A coordinate is the rank's position in its group of that kind:
        // pipeline stages are placed by it.
        const std::vector<int> &Group = P.Groups[Kind][size_t(R.Groups[Kind])];
        if (X >= int64_t(Group.size()) || Group[size_t(X)] != int(R.Rank))
          return fail(CPre + "." + Axis,
                      fmt::format("{} is not rank {}'s position in its '{}' group", X, R.Rank, Kind));
        (*Into)[Axis] = X;
      }
    }
    P.Ranks.push_back(std::move(R));
  }
  return true;
}

llvm::Expected<LaunchPlan> PlanParser::parse(llvm::StringRef Document) {
  if (auto At = findNonAscii(Document))
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s:%u:%u: non-ASCII character in a plan; plans are ASCII, "
                                   "write it as a \\uXXXX escape in a string",
                                   File.c_str(), At->first, At->second);
  toml::parse_result Result = toml::parse(std::string_view(Document.data(), Document.size()), File);
  if (!Result) {
    const toml::parse_error &E = Result.error();
    return llvm::createStringError(std::errc::invalid_argument, "%s:%u:%u: %s", File.c_str(),
                                   unsigned(E.source().begin.line), unsigned(E.source().begin.column),
                                   std::string(E.description()).c_str());
  }
  const toml::table &Root = Result.table();
  bool OK = readInt(Root, "", "plan_version", P.PlanVersion);
  if (OK && (P.PlanVersion < MinReadablePlanVersion || P.PlanVersion > MaxReadablePlanVersion))
    OK = fail("plan_version", fmt::format("version {} is not supported (this reader reads version {} to {}); "
                                          "regenerate the plan with a matching moec",
                                          P.PlanVersion, MinReadablePlanVersion, MaxReadablePlanVersion));
  OK = OK && readString(Root, "", "recipe", P.Recipe) && readString(Root, "", "recipe_hash", P.RecipeHash) &&
       readString(Root, "", "source", P.Source) && readInt(Root, "", "world_size", P.WorldSize, 1) &&
       readInt(Root, "", "nodes", P.Nodes, 1) && readConfig(Root) && readPipeline(Root) && readGroups(Root) &&
       readRanks(Root);
  if (OK && P.RecipeHash.empty())
    OK = fail("recipe_hash", "empty");
  if (OK)
    readPredictions(Root);
  if (!OK)
    return llvm::createStringError(std::errc::invalid_argument, "%s", Error.c_str());
  return std::move(P);
}

} // namespace

llvm::Expected<LaunchPlan> moec::parsePlan(llvm::StringRef Document, llvm::StringRef Name) {
  return PlanParser(Name.str()).parse(Document);
}

llvm::Expected<LaunchPlan> moec::readPlan(llvm::StringRef Path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/true);
  if (!Buffer)
    return llvm::createStringError(Buffer.getError(), "cannot read plan '%s': %s", Path.str().c_str(),
                                   Buffer.getError().message().c_str());
  return parsePlan((*Buffer)->getBuffer(), Path);
}
