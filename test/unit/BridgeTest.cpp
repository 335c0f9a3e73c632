//===- BridgeTest.cpp - Megatron-Bridge export, import and launch ---------===//
#include "moec/Bridge/Export.h"
#include "moec/Bridge/Import.h"
#include "moec/Bridge/Launch.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Sema.h"
#include "moec/Syntax/Parser.h"

#include "llvm/Support/MemoryBuffer.h"
#include "gtest/gtest.h"

using namespace moec;
using namespace moec::bridge;
using llvm::StringRef;

namespace {
/// The recipes of an in-memory file, lowered by Sema (no rules).
std::vector<Recipe> lower(StringRef Text, std::string *Errors = nullptr) {
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "test.moe"));
  std::vector<Recipe> Out = S.analyze();
  if (Errors)
    for (const Diagnostic &D : Diags.finish())
      if (D.Sev == Severity::Error)
        *Errors += D.Message + "\n";
  return Out;
}

const Override *findKey(const BridgeExport &E, StringRef Key) {
  for (const Override &O : E.Overrides)
    if (O.Key == Key)
      return &O;
  return nullptr;
}

const EnvVar *findEnv(const BridgeExport &E, StringRef Name) {
  for (const EnvVar &V : E.Env)
    if (V.Name == Name)
      return &V;
  return nullptr;
}

const char *DSV3 = R"(
recipe dsv3 {
  model      = deepseek_v3
  cluster    { gpu = h100_sxm; gpus = 1024 }
  seq_len    = 4K
  batch      { micro = 1; global = 16384 }
  parallel   { tp = 2; ep = 64; pp = 8; vpp = 4; layout = "Et|(tt|)*30mL" }
  precision  = bf16
  dispatcher = hybridep
  recompute  = selective(mla_up_proj, mlp)
  optimizer  { precision_aware = true }
}
)";
} // namespace

TEST(BridgeValue, HydraQuotesWhatHydraWouldSplit) {
  EXPECT_EQ(renderHydra(Value::string("Et|(tt|)*30mL")), "\"Et|(tt|)*30mL\"");
  EXPECT_EQ(renderHydra(Value::string("a2a+p2p")), "a2a+p2p");
  EXPECT_EQ(renderHydra(Value::string("null")), "\"null\"");
  EXPECT_EQ(renderHydra(Value::strings({"attn", "moe_router"})), "[attn,moe_router]");
  EXPECT_EQ(renderHydra(Value::real(1)), "1.0");
  EXPECT_EQ(renderHydra(Value::null()), "null");
  EXPECT_EQ(shellQuote("model.x=[a,b]"), "'model.x=[a,b]'");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(shellQuote("train.micro_batch_size=1"), "train.micro_batch_size=1");
}

TEST(BridgeExport, PublishedDeepSeekV3OnH100) {
  std::string Errors;
  std::vector<Recipe> Rs = lower(DSV3, &Errors);
  ASSERT_EQ(Rs.size(), 1u) << Errors;
  BridgeExport E = exportOverrides(Rs.front());
  auto Is = [&](StringRef Key, const Value &V) {
    const Override *O = findKey(E, Key);
    ASSERT_NE(O, nullptr) << Key.str();
    EXPECT_EQ(O->V, V) << Key.str() << " = " << renderHydra(O->V);
  };
  Is("model.tensor_model_parallel_size", Value::integer(2));
  Is("model.pipeline_model_parallel_size", Value::integer(8));
  Is("model.virtual_pipeline_model_parallel_size", Value::integer(4));
  Is("model.pipeline_model_parallel_layout", Value::string("Et|(tt|)*30mL"));
  Is("model.context_parallel_size", Value::integer(1));
  Is("model.expert_model_parallel_size", Value::integer(64));
  Is("model.expert_tensor_parallel_size", Value::integer(1));
  Is("model.sequence_parallel", Value::boolean(true));
  Is("model.moe_token_dispatcher_type", Value::string("flex"));
  Is("model.moe_flex_dispatcher_backend", Value::string("hybridep"));
  Is("model.recompute_granularity", Value::string("selective"));
  Is("model.recompute_modules", Value::strings({"mla_up_proj", "mlp"}));
  Is("model.cuda_graph_impl", Value::string("none"));
  Is("train.micro_batch_size", Value::integer(1));
  Is("train.global_batch_size", Value::integer(16384));
  Is("model.seq_length", Value::integer(4096));
  Is("mixed_precision", Value::string("bf16_mixed"));
  Is("optimizer.optimizer_cpu_offload", Value::boolean(false));
  Is("optimizer.use_precision_aware_optimizer", Value::boolean(true));
  // No architecture unless asked: the Bridge recipe brings it.
  EXPECT_EQ(findKey(E, "model.num_layers"), nullptr);
  // H100 with TP 2 and no EP overlap: Megatron requires one connection.
  ASSERT_NE(findEnv(E, "CUDA_DEVICE_MAX_CONNECTIONS"), nullptr);
  EXPECT_EQ(findEnv(E, "CUDA_DEVICE_MAX_CONNECTIONS")->Value, "1");
  // HybridEP inside an 8-GPU NVLink domain.
  ASSERT_NE(findEnv(E, "NVLINK_DOMAIN_SIZE"), nullptr);
  EXPECT_EQ(findEnv(E, "NVLINK_DOMAIN_SIZE")->Value, "8");
  EXPECT_EQ(findEnv(E, "USE_MNNVL")->Value, "0");
  std::string Line = renderOverrideLine(E);
  EXPECT_NE(Line.find("'model.pipeline_model_parallel_layout=\"Et|(tt|)*30mL\"'"), std::string::npos) << Line;
  EXPECT_EQ(Line.find('\n'), std::string::npos);
}

TEST(BridgeExport, NVL72HybridEPAndGraphsAndOffload) {
  std::vector<Recipe> Rs = lower(R"(
recipe q {
  model      = qwen3_235b_a22b
  cluster    { gpu = gb200_nvl72; gpus = 256 }
  seq_len    = 4K
  batch      { micro = 1; global = 8192 }
  parallel   { ep = 32; pp = 8; vpp = 3 }
  precision  = mxfp8
  dispatcher = hybridep
  cuda_graph = [attn, moe_router, moe_preprocess]
  offload    { optimizer = 0.5 }
}
)");
  ASSERT_EQ(Rs.size(), 1u);
  BridgeExport E = exportOverrides(Rs.front());
  EXPECT_EQ(findEnv(E, "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN")->Value, "32");
  EXPECT_EQ(findEnv(E, "NVLINK_DOMAIN_SIZE")->Value, "72");
  EXPECT_EQ(findEnv(E, "USE_MNNVL")->Value, "1");
  EXPECT_EQ(findEnv(E, "CUDA_DEVICE_MAX_CONNECTIONS")->Value, "32");
  EXPECT_EQ(findKey(E, "model.cuda_graph_modules")->V, Value::strings({"attn", "moe_router", "moe_preprocess"}));
  EXPECT_EQ(findKey(E, "model.use_te_rng_tracker")->V, Value::boolean(true));
  EXPECT_EQ(findKey(E, "optimizer.optimizer_offload_fraction")->V, Value::real(0.5));
  // An unset fp8_param_gather means the target's preset: the preset's name.
  EXPECT_EQ(findKey(E, "mixed_precision")->V, Value::string("bf16_with_mxfp8_mixed"));
  EXPECT_EQ(findKey(E, "mixed_precision.fp8_param_gather"), nullptr);
}

TEST(BridgeExport, ParamGatherAwayFromThePresetIsWrittenFieldByField) {
  // DeepSeek-V3's Bridge recipe builds a MixedPrecisionConfig: its fields
  // take overrides.
  std::vector<Recipe> Rs = lower(R"(
recipe r {
  model = deepseek_v3; cluster { gpu = b200; nodes = 32 }
  seq_len = 4K; batch { micro = 1; global = 256 }
  parallel { ep = 32 }
  precision = mxfp8
  fp8_param_gather = false
}
)");
  ASSERT_EQ(Rs.size(), 1u);
  BridgeExport E = exportOverrides(Rs.front());
  EXPECT_EQ(findKey(E, "mixed_precision"), nullptr);
  EXPECT_EQ(findKey(E, "mixed_precision.fp8_recipe")->V, Value::string("mxfp8"));
  EXPECT_EQ(findKey(E, "mixed_precision.fp8_param_gather")->V, Value::boolean(false));
}

TEST(BridgeExport, ParamGatherAwayFromANamedPresetIsReportedNotExported) {
  // Qwen3's Bridge recipe names the preset "bf16_mixed": overrides cannot
  // edit a name field by field, so the export keeps the preset and says so.
  std::vector<Recipe> Rs = lower(R"(
recipe r {
  model = qwen3_30b_a3b; cluster { gpu = b200; nodes = 1 }
  seq_len = 4K; batch { micro = 1; global = 8 }
  parallel { ep = 8 }
  precision = mxfp8
  fp8_param_gather = false
}
)");
  ASSERT_EQ(Rs.size(), 1u);
  BridgeExport E = exportOverrides(Rs.front());
  ASSERT_NE(findKey(E, "mixed_precision"), nullptr);
  EXPECT_EQ(findKey(E, "mixed_precision")->V, Value::string("bf16_with_mxfp8_mixed"));
  EXPECT_EQ(findKey(E, "mixed_precision.fp8_param_gather"), nullptr);
  bool Reported = llvm::any_of(E.Dropped, [](const auto &D) { return D.Field == "fp8_param_gather"; });
  EXPECT_TRUE(Reported);
}

TEST(BridgeImport, ExportedYAMLComesBackEquivalent) {
  std::vector<Recipe> Rs = lower(DSV3);
  ASSERT_EQ(Rs.size(), 1u);
  ExportOptions Arch;
  Arch.Architecture = true;
  BridgeExport E = exportOverrides(Rs.front(), Arch);
  std::string Yaml = renderYAML(E);
  ImportResult I = importBridge(Yaml);
  ASSERT_FALSE(I.hasErrors()) << (I.Messages.empty() ? "" : I.Messages.front().Message);
  EXPECT_EQ(I.ModelName, "deepseek_v3");
  EXPECT_TRUE(I.ModelFromCatalog);
  EXPECT_TRUE(I.unmapped().empty()) << I.unmapped().front()->Message;
  std::string Errors;
  std::vector<Recipe> Back = lower(I.Source, &Errors);
  ASSERT_EQ(Back.size(), 1u) << Errors << I.Source;
  BridgeExport E2 = exportOverrides(Back.front(), Arch);
  EXPECT_EQ(renderOverrideLine(E2), renderOverrideLine(E));
  EXPECT_EQ(Back.front().WorldSize, 1024);
  EXPECT_EQ(Back.front().Gpu.Name, "h100_sxm");
}

TEST(BridgeImport, OverrideListWithUnmappedFields) {
  ImportOptions O;
  O.Gpu = "b200";
  O.Gpus = 64;
  O.Model = "qwen3_30b_a3b";
  ImportResult I = importBridge("train.micro_batch_size=2 train.global_batch_size=512 model.seq_length=4096 \\\n"
                                "  model.expert_model_parallel_size=8 model.moe_router_force_load_balancing=true \\\n"
                                "  'model.recompute_modules=[moe_act,layernorm]' model.recompute_granularity=selective "
                                "logger.log_interval=1",
                                O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  std::vector<const ImportMessage *> U = I.unmapped();
  ASSERT_EQ(U.size(), 1u);
  EXPECT_EQ(U[0]->Key, "logger.log_interval");
  EXPECT_EQ(U[0]->Line, 3u);
  EXPECT_NE(I.Source.find("force_balance = true"), std::string::npos) << I.Source;
  EXPECT_NE(I.Source.find("recompute = selective(moe_act, layernorm)"), std::string::npos) << I.Source;
  EXPECT_NE(I.Source.find("etp = 1"), std::string::npos) << I.Source; // Megatron: unset ETP is TP
  std::string Errors;
  ASSERT_EQ(lower(I.Source, &Errors).size(), 1u) << Errors << I.Source;
}

TEST(BridgeImport, ErrorsAreLocated) {
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 8;
  O.Model = "qwen3_30b_a3b";
  ImportResult I = importBridge("train:\n  micro_batch_size: 1\n  global_batch_size: 8\nmodel:\n  seq_length: 4096\n"
                                "  moe_token_dispatcher_type: teleport\n",
                                O);
  ASSERT_TRUE(I.hasErrors());
  EXPECT_EQ(I.Messages.back().Line, 6u);
  EXPECT_EQ(I.Messages.back().Column, 3u);
  EXPECT_TRUE(I.Source.empty());
  ImportResult Bad = importBridge("model: [unclosed\n", O);
  ASSERT_TRUE(Bad.hasErrors());
  EXPECT_EQ(Bad.Messages.front().Line, 2u);
  // No cluster: an error, not a guess.
  ImportResult NoCluster = importBridge("model:\n  num_layers: 48\n");
  ASSERT_TRUE(NoCluster.hasErrors());
}

TEST(BridgeImport, ArchitectureNamesTheCatalogModel) {
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 16;
  const char *Text = "model:\n  num_layers: 48\n  hidden_size: 2048\n  num_moe_experts: 128\n  moe_router_topk: 8\n"
                     "  seq_length: 4096\n  expert_model_parallel_size: 16\ntrain:\n  micro_batch_size: 1\n"
                     "  global_batch_size: 1024\n";
  ImportResult I = importBridge(Text, O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_EQ(I.ModelName, "qwen3_30b_a3b"); // not the VL model with the same decoder
  std::string WithVision = std::string(Text) + "  freeze_vision_model: true\n";
  WithVision.insert(WithVision.find("train:"), "  freeze_vision_model: true\n  freeze_vision_projection: true\n");
  ImportResult V = importBridge(WithVision.substr(0, WithVision.rfind("  freeze_vision_model")), O);
  ASSERT_FALSE(V.hasErrors()) << V.Messages.front().Message;
  EXPECT_EQ(V.ModelName, "qwen3_vl_30b_a3b");
  EXPECT_NE(V.Source.find("frozen = true"), std::string::npos) << V.Source;
}

TEST(BridgeImport, UnevenStagesBecomeALayout) {
  ImportOptions O;
  O.Gpu = "gb200_nvl72";
  O.Gpus = 64;
  O.Model = "qwen3_vl_235b_a22b";
  ImportResult I =
      importBridge("train.micro_batch_size=2 train.global_batch_size=1024 model.seq_length=4096 "
                   "model.pipeline_model_parallel_size=8 model.expert_model_parallel_size=8 "
                   "model.num_layers_in_first_pipeline_stage=10 model.num_layers_in_last_pipeline_stage=12",
                   O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_NE(I.Source.find("layout = \"Et*10|(t*12|)*6t*12L\""), std::string::npos) << I.Source;
}

TEST(BridgeLaunch, ScriptsNameTheJobAndTheEnvironment) {
  std::vector<Recipe> Rs = lower(DSV3);
  ASSERT_EQ(Rs.size(), 1u);
  BridgeExport E = exportOverrides(Rs.front());
  LaunchOptions O;
  O.E = Engine::Bridge;
  std::string S = renderSbatch(Rs.front(), E, O);
  EXPECT_NE(S.find("#SBATCH --nodes=128\n"), std::string::npos) << S;
  EXPECT_NE(S.find("#SBATCH --ntasks-per-node=8\n"), std::string::npos);
  EXPECT_NE(S.find("#SBATCH --gpus-per-node=8\n"), std::string::npos);
  EXPECT_NE(S.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n"), std::string::npos);
  // `dsv3` is not a Bridge recipe name: the model's pretrain recipe.
  EXPECT_NE(S.find("python scripts/training/run_recipe.py --recipe deepseek_v3_pretrain_config"), std::string::npos)
      << S;
  EXPECT_NE(S.find("  'model.pipeline_model_parallel_layout=\"Et|(tt|)*30mL\"'\n"), std::string::npos) << S;
  O.E = Engine::Moerun;
  O.PlanPath = "/shared/plan.toml";
  std::string M = renderMpirun(Rs.front(), E, O);
  EXPECT_NE(M.find("mpirun -np 1024 --map-by ppr:8:node -x OPENBLAS_NUM_THREADS"), std::string::npos) << M;
  EXPECT_NE(M.find("moerun /shared/plan.toml --steps 1"), std::string::npos) << M;
}

TEST(BridgeImport, LongerContextBecomesAModelThatExtendsTheCatalog) {
  std::vector<Recipe> Rs = lower(R"(
model q30_long extends qwen3_30b_a3b { max_seq_len = 128K }
recipe long {
  model      = q30_long
  cluster    { gpu = h100_sxm; nodes = 4 }
  seq_len    = 64K
  batch      { micro = 1; global = 16 }
  parallel   { cp = 8; ep = 4 }
}
)");
  ASSERT_EQ(Rs.size(), 1u);
  ExportOptions Arch;
  Arch.Architecture = true;
  BridgeExport E = exportOverrides(Rs.front(), Arch);
  ImportResult I = importBridge(renderYAML(E));
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_NE(I.Source.find("model q30_long extends qwen3_30b_a3b { max_seq_len = 131072 }"), std::string::npos)
      << I.Source;
  std::string Errors;
  std::vector<Recipe> Back = lower(I.Source, &Errors);
  ASSERT_EQ(Back.size(), 1u) << Errors << I.Source;
  EXPECT_EQ(Back.front().Model.MaxSeqLen.getValueOr(0), 131072);
  EXPECT_EQ(renderOverrideLine(exportOverrides(Back.front(), Arch)), renderOverrideLine(E));
}

TEST(BridgeImport, EmbeddingAndLossInTheSplitBecomeALayout) {
  ImportOptions O;
  O.Gpu = "gb300_nvl72";
  O.Gpus = 256;
  O.Model = "qwen3_235b_a22b";
  ImportResult I = importBridge("train.micro_batch_size=2 train.global_batch_size=8192 model.seq_length=4096 "
                                "model.pipeline_model_parallel_size=4 model.expert_model_parallel_size=32 "
                                "model.account_for_embedding_in_pipeline_split=true "
                                "model.account_for_loss_in_pipeline_split=true",
                                O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  // 94 layers + embedding + loss = 96 slots over 4 stages.
  EXPECT_NE(I.Source.find("layout = \"Et*23|(t*24|)*2t*23L\""), std::string::npos) << I.Source;
  std::string Errors;
  ASSERT_EQ(lower(I.Source, &Errors).size(), 1u) << Errors;
}

TEST(BridgeImport, MegatronDefaultsAreSpelledOut) {
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 16;
  O.Model = "qwen3_30b_a3b";
  // ETP unset means ETP = TP; flex without a backend runs alltoall;
  // selective without modules recomputes core_attn; the deprecated
  // cuda_graph_scope full_iteration is the full-iteration graph.
  ImportResult I = importBridge("train.micro_batch_size=1 train.global_batch_size=64 model.seq_length=4096 "
                                "model.tensor_model_parallel_size=2 model.expert_model_parallel_size=8 "
                                "model.expert_tensor_parallel_size=null model.moe_token_dispatcher_type=flex "
                                "model.recompute_granularity=selective model.cuda_graph_impl=local "
                                "model.cuda_graph_scope=[full_iteration]",
                                O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_NE(I.Source.find("etp = 2"), std::string::npos) << I.Source;
  EXPECT_NE(I.Source.find("dispatcher = alltoall"), std::string::npos) << I.Source;
  EXPECT_NE(I.Source.find("recompute  = selective(core_attn)"), std::string::npos) << I.Source;
  EXPECT_NE(I.Source.find("cuda_graph = full_iteration"), std::string::npos) << I.Source;
  EXPECT_TRUE(I.unmapped().empty());
}

// What Bridge 0.3.1's ConfigContainer.to_yaml() writes for DeepSeek-V3
// (recipes/deepseek/deepseek_v3.py): MLA's kv_channels of 64 (which MLA does
// not use), the layout as a list of stages, torch dtypes as `{_call_,
// _target_}` objects, and run bookkeeping that is only counted.
TEST(BridgeImport, ReadsWhatBridgeToYamlWrites) {
  std::string Yaml = R"(_target_: megatron.bridge.training.config.ConfigContainer
logger:
  _target_: megatron.bridge.training.config.LoggerConfig
  log_interval: 10
model:
  _target_: megatron.bridge.models.mla_provider.MLAModelProvider
  num_layers: 61
  hidden_size: 7168
  num_attention_heads: 128
  kv_channels: 64
  num_moe_experts: 256
  moe_router_topk: 8
  q_lora_rank: 1536
  kv_lora_rank: 512
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 4
  expert_model_parallel_size: 8
  seq_length: 4096
  params_dtype:
    _call_: false
    _target_: torch.bfloat16
  pipeline_model_parallel_layout:
  - - embedding
    - decoder
    - decoder
  - - decoder
    - decoder
    - decoder
  - - decoder
  - - decoder
    - mtp
    - loss
train:
  micro_batch_size: 1
  global_batch_size: 64
)";
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 32;
  ImportResult I = importBridge(Yaml, O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_EQ(I.ModelName, "deepseek_v3");
  EXPECT_NE(I.Source.find("layout = \"Et*2|t*3|t|tmL\""), std::string::npos) << I.Source;
  // The dtype is one value, not two unknown keys.
  for (const ImportMessage &M : I.Messages)
    EXPECT_FALSE(llvm::StringRef(M.Key).contains("params_dtype.")) << M.Message;
  // Bookkeeping is quiet and counted; nothing is dropped without a message.
  size_t Quiet = 0;
  for (const ImportMessage &M : I.Messages)
    Quiet += !M.QuietCategory.empty();
  EXPECT_EQ(Quiet, 4u); // _target_ x2, logger.log_interval, model.params_dtype
  EXPECT_TRUE(llvm::any_of(I.Messages, [](const ImportMessage &M) {
    return M.K == ImportMessage::Kind::Note && llvm::StringRef(M.Message).startswith("4 keys not translated");
  }));
}

// A `null` layout is no layout: account_for_embedding/loss still count.
TEST(BridgeImport, NullLayoutKeepsTheAccountForSwitches) {
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 8;
  O.Model = "qwen3_30b_a3b";
  ImportResult I = importBridge("model.pipeline_model_parallel_size=2 model.pipeline_model_parallel_layout=null "
                                "model.account_for_embedding_in_pipeline_split=true "
                                "model.account_for_loss_in_pipeline_split=true model.seq_length=4096 "
                                "train.micro_batch_size=1 train.global_batch_size=16",
                                O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_NE(I.Source.find("layout = \"Et*24|t*24L\""), std::string::npos) << I.Source;
  EXPECT_TRUE(I.unmapped().empty()) << I.unmapped().front()->Message;
}

// A layout with a quote and a line break comes out as a .moe string that
// parses (escaped), so that `moec check` can say what is wrong with it; a
// control character no .moe string can hold is an import error.
TEST(BridgeImport, StringsAreEscapedAndTheOutputParses) {
  ImportOptions O;
  O.Gpu = "h100_sxm";
  O.Gpus = 8;
  O.Model = "qwen3_30b_a3b";
  std::string Yaml = "model:\n  pipeline_model_parallel_size: 2\n  seq_length: 4096\n"
                     "  pipeline_model_parallel_layout: \"Et*24\\\"|t*24\\nL\"\n"
                     "train:\n  micro_batch_size: 1\n  global_batch_size: 16\n";
  ImportResult I = importBridge(Yaml, O);
  ASSERT_FALSE(I.hasErrors()) << I.Messages.front().Message;
  EXPECT_NE(I.Source.find("layout = \"Et*24\\\"|t*24\\nL\""), std::string::npos) << I.Source;
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(I.Source, "x.moe"), llvm::SMLoc());
  EXPECT_TRUE(parseBuffer(ID, Diags)) << I.Source;

  std::string Control = "model:\n  pipeline_model_parallel_size: 2\n  pipeline_model_parallel_layout: \"Et\\x01|tL\"\n";
  ImportResult Bad = importBridge(Control, O);
  EXPECT_TRUE(Bad.hasErrors());
  EXPECT_TRUE(Bad.Source.empty());
}
