//===- PlanReaderTest.cpp - Reading launch plans back ---------------------===//
//
// Plans written by buildPlan + planToTOML read back into the same values
// (model, layout, schedule, stages, groups, coordinates), and every kind of
// damage to a plan is reported with the file and the field.
//
//===----------------------------------------------------------------------===//
#include "moec/PlanFormat/PlanReader.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Emit/Plan.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include <gtest/gtest.h>

using namespace moec;

namespace {

const char *TinyMoE = R"(
recipe tiny {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 4 }
  seq_len = 64
  batch { micro = 1; global = 8 }
  parallel { tp = 1; pp = 2; ep = 2; cp = 2 }
  precision = bf16
}
)";

const char *Interleaved = R"(
recipe inter {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 2 }
  seq_len = 32
  batch { micro = 2; global = 16 }
  parallel { tp = 1; pp = 2; vpp = 2; ep = 1; order = tp_cp_ep_pp_dp }
  recompute = selective(core_attn, moe_act)
}
)";

/// Builds the plan of the only recipe in Text; fails the test on any diagnostic.
Plan planOf(const char *Text) {
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "test.moe"));
  std::vector<Recipe> All = S.analyze();
  EXPECT_FALSE(Diags.hasErrors());
  EXPECT_EQ(All.size(), 1u);
  llvm::Expected<Plan> P = buildPlan(All.front(), "test.moe");
  EXPECT_TRUE(bool(P));
  if (!P) {
    llvm::consumeError(P.takeError());
    return Plan();
  }
  return std::move(*P);
}

LaunchPlan read(const std::string &Document) {
  llvm::Expected<LaunchPlan> L = parsePlan(Document, "plan.toml");
  if (!L) {
    ADD_FAILURE() << llvm::toString(L.takeError());
    return LaunchPlan();
  }
  return std::move(*L);
}

/// The error a damaged plan gets.
std::string errorOf(const std::string &Document) {
  llvm::Expected<LaunchPlan> L = parsePlan(Document, "plan.toml");
  if (L) {
    ADD_FAILURE() << "the damaged plan was accepted";
    return "";
  }
  return llvm::toString(L.takeError());
}

/// Document with the first occurrence of From replaced by To.
std::string replaced(std::string Document, const std::string &From, const std::string &To) {
  size_t At = Document.find(From);
  EXPECT_NE(At, std::string::npos) << From;
  if (At != std::string::npos)
    Document.replace(At, From.size(), To);
  return Document;
}

void expectSameAsPlan(const Plan &P, const LaunchPlan &L) {
  const Recipe &R = P.R;
  EXPECT_EQ(L.PlanVersion, PlanVersion);
  EXPECT_EQ(L.RecipeHash, P.RecipeHash);
  EXPECT_EQ(L.Recipe, R.PointName);
  EXPECT_EQ(L.WorldSize, R.WorldSize);
  EXPECT_EQ(L.Model.Layers, R.Model.Layers);
  EXPECT_EQ(L.Model.Hidden, R.Model.Hidden);
  EXPECT_EQ(L.Model.Heads, R.Model.Heads);
  EXPECT_EQ(L.Model.KvHeads, R.Model.KvHeads);
  EXPECT_EQ(L.Model.HeadDim, R.Model.HeadDim);
  EXPECT_EQ(L.Model.Vocab, R.Model.Vocab);
  ASSERT_TRUE(R.Model.MoE.hasValue());
  ASSERT_TRUE(L.Model.MoE.has_value());
  EXPECT_EQ(L.Model.MoE->Experts, R.Model.MoE->Experts);
  EXPECT_EQ(L.Model.MoE->TopK, R.Model.MoE->TopK);
  EXPECT_EQ(L.Model.MoE->FfnHidden, R.Model.MoE->FfnHidden);
  EXPECT_EQ(L.Model.MoE->DenseLayers, R.Model.MoE->DenseLayers);
  EXPECT_TRUE(L.Model.Unsupported.empty());
  EXPECT_EQ(L.Parallel.TP, R.Parallel.TP);
  EXPECT_EQ(L.Parallel.CP, R.Parallel.CP);
  EXPECT_EQ(L.Parallel.EP, R.Parallel.EP);
  EXPECT_EQ(L.Parallel.PP, R.Parallel.PP);
  EXPECT_EQ(L.Parallel.VPP, R.Parallel.VPP);
  EXPECT_EQ(L.Parallel.DP, R.Parallel.DP);
  EXPECT_EQ(L.Parallel.EDP, R.Parallel.EDP);
  EXPECT_EQ(L.MicroBatch, R.MicroBatch);
  EXPECT_EQ(L.GlobalBatch, R.GlobalBatch);
  EXPECT_EQ(L.SeqLen, R.SeqLen);
  EXPECT_TRUE(L.Data.Mock);
  EXPECT_EQ(L.Optimizer.Type, "adam");
  EXPECT_EQ(L.Optimizer.Distributed, R.Optimizer.Distributed);
  EXPECT_EQ(L.Optimizer.OffloadFraction, R.OffloadOptimizer);

  const PipelinePlan &PL = P.Pipeline;
  EXPECT_EQ(L.Microbatches, PL.Microbatches);
  ASSERT_EQ(L.Schedule.size(), PL.Schedule.size());
  for (size_t Rank = 0; Rank < PL.Schedule.size(); ++Rank) {
    ASSERT_EQ(L.Schedule[Rank].size(), PL.Schedule[Rank].size());
    for (size_t I = 0; I < PL.Schedule[Rank].size(); ++I) {
      const ScheduledOp &Want = PL.Schedule[Rank][I];
      const LaunchOp &Got = L.Schedule[Rank][I];
      EXPECT_EQ(Got.K == LaunchOp::Forward, Want.K == ScheduledOp::Forward);
      EXPECT_EQ(Got.Microbatch, Want.Microbatch);
      EXPECT_EQ(Got.Chunk, Want.Chunk);
    }
  }
  ASSERT_EQ(L.Stages.size(), PL.VirtualStages.size());
  for (int64_t Rank = 0; Rank < PL.PP; ++Rank)
    for (int64_t Chunk = 0; Chunk < PL.VPP; ++Chunk) {
      int64_t V = PL.virtualStage(Rank, Chunk);
      const LaunchStage &S = L.stage(Rank, Chunk);
      EXPECT_EQ(S.VirtualStage, V);
      EXPECT_EQ(S.FirstLayer, PL.FirstLayer[size_t(V)]);
      EXPECT_EQ(S.DecoderLayers, PL.VirtualStages[size_t(V)].DecoderLayers);
    }

  for (const char *Kind : {"tp", "cp", "dp", "dp-cp", "pp", "ep", "etp", "edp", "tp-cp"}) {
    std::vector<std::vector<int64_t>> Want = P.Grid->groups(Kind);
    ASSERT_EQ(L.Groups.at(Kind).size(), Want.size()) << Kind;
    for (size_t G = 0; G < Want.size(); ++G)
      EXPECT_EQ(std::vector<int64_t>(L.Groups.at(Kind)[G].begin(), L.Groups.at(Kind)[G].end()), Want[G]) << Kind;
  }
  ASSERT_EQ(int64_t(L.Ranks.size()), R.WorldSize);
  for (int64_t Rank = 0; Rank < R.WorldSize; ++Rank) {
    const LaunchRank &LR = L.Ranks[size_t(Rank)];
    EXPECT_EQ(LR.Dense.at("pp"), P.Grid->Dense.coordinate(Rank, "pp"));
    EXPECT_EQ(LR.Dense.at("dp"), P.Grid->Dense.coordinate(Rank, "dp"));
    EXPECT_EQ(LR.Expert.at("ep"), P.Grid->Expert.coordinate(Rank, "ep"));
    // The rank sits in the pp group its index names, at its pp coordinate.
    EXPECT_EQ(L.Groups.at("pp")[size_t(LR.Groups.at("pp"))][size_t(LR.Dense.at("pp"))], Rank);
  }
}

TEST(PlanReader, RoundTripsOneF1B) {
  Plan P = planOf(TinyMoE);
  LaunchPlan L = read(planToTOML(P));
  expectSameAsPlan(P, L);
  EXPECT_EQ(L.WorldSize, 8);
  EXPECT_EQ(L.Microbatches, 4);
  EXPECT_EQ(L.Recompute.Kind, "none");
}

TEST(PlanReader, RoundTripsInterleaved) {
  Plan P = planOf(Interleaved);
  LaunchPlan L = read(planToTOML(P));
  expectSameAsPlan(P, L);
  EXPECT_EQ(L.Parallel.VPP, 2);
  EXPECT_EQ(L.Parallel.Order, "tp-cp-ep-pp-dp");
  EXPECT_EQ(L.Recompute.Kind, "selective");
  EXPECT_EQ(L.Recompute.Modules, (std::vector<std::string>{"core_attn", "moe_act"}));
  EXPECT_TRUE(L.Stages.front().Embedding);
  EXPECT_TRUE(L.Stages.back().Loss);
}

// Plans are ASCII (the reader refuses raw non-ASCII bytes, see
// PlanReaderFuzzTest): a data path outside ASCII is written as \u escapes
// and reads back as the same UTF-8 path.
TEST(PlanReader, NonAsciiPathIsEscapedAndReadBack) {
  std::string Text = replaced(TinyMoE, "seq_len = 64",
                              "seq_len = 64\n  data { source = real(\"/data/donn\xc3\xa9"
                              "es/\xd1\xbb\") }");
  std::string Doc = planToTOML(planOf(Text.c_str()));
  EXPECT_TRUE(llvm::all_of(Doc, [](char C) { return (unsigned char)C < 0x80; }));
  EXPECT_NE(Doc.find("donn\\u00E9es/\\u047B"), std::string::npos) << Doc;
  LaunchPlan L = read(Doc);
  EXPECT_EQ(L.Data.Path, "/data/donn\xc3\xa9"
                         "es/\xd1\xbb");
}

class Damaged : public ::testing::Test {
protected:
  void SetUp() override { Good = planToTOML(planOf(TinyMoE)); }
  std::string Good;
};

TEST_F(Damaged, UnknownVersion) {
  std::string E = errorOf(replaced(Good, "plan_version = 1", "plan_version = 7"));
  EXPECT_NE(E.find("plan.toml: plan_version: version 7 is not supported"), std::string::npos) << E;
}

TEST_F(Damaged, MissingField) {
  std::string E = errorOf(replaced(Good, "seq_len = 64", ""));
  EXPECT_EQ(E, "plan.toml: config.seq_len: missing");
  E = errorOf(replaced(Good, "recipe_hash =", "recipe_hush ="));
  EXPECT_EQ(E, "plan.toml: recipe_hash: missing");
}

TEST_F(Damaged, Optimizer) {
  llvm::Expected<LaunchPlan> L = parsePlan(Good, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_TRUE(L->Optimizer.Distributed); // the recipe default
  // A plan written before [config.optimizer] existed: the replicated Adam.
  EXPECT_EQ(L->Optimizer.Decay, "constant"); // the recipe's default schedule
  EXPECT_FALSE(L->Optimizer.Lr);
  L = parsePlan(replaced(replaced(Good, "[config.optimizer]", "[config.optimizer_of_old]"),
                         "[config.optimizer.schedule]", "[config.optimizer_of_old.schedule]"),
                "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_FALSE(L->Optimizer.Distributed);
  EXPECT_EQ(L->Optimizer.Type, "adam");
  std::string E = errorOf(replaced(Good, "offload_fraction = 0", "offload_fraction = 1.5"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.offload_fraction: must be between 0 and 1, got 1.5");
  E = errorOf(replaced(Good, "type = 'adam'", "type = 'lion'"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.type: 'lion' is not one of 'adam', 'sgd', 'muon'");
  E = errorOf(replaced(Good, "decay = 'constant'", "decay = 'wsd'"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.schedule.decay: 'wsd' is not one of 'constant', 'linear', 'cosine'");
  E = errorOf(replaced(Good, "warmup_steps = 0", "warmup_steps = -2"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.schedule.warmup_steps: must be at least 0, got -2");
  E = errorOf(replaced(Good, "distributed = true", "distributed = 1"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.distributed: expected true or false");
}

TEST_F(Damaged, AdamWSettings) {
  // The recipe's defaults are Megatron-Core's; a plan without them (older)
  // trains without weight decay or clipping.
  llvm::Expected<LaunchPlan> L = parsePlan(Good, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Optimizer.WeightDecay, 0.01);
  EXPECT_EQ(L->Optimizer.AdamBeta2, 0.999);
  EXPECT_EQ(L->Optimizer.ClipGrad, 1.0);
  L = parsePlan(replaced(replaced(Good, "weight_decay = 0.01", ""), "clip_grad = 1", ""), "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Optimizer.WeightDecay, 0.0);
  EXPECT_EQ(L->Optimizer.ClipGrad, 0.0);
  std::string E = errorOf(replaced(Good, "adam_beta1 = 0.90000000000000002", "adam_beta1 = 1.0"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.adam_beta1: out of range: 1");
  E = errorOf(replaced(Good, "adam_eps = 1e-08", "adam_eps = 0.0"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.adam_eps: out of range: 0");
  E = errorOf(replaced(Good, "clip_grad = 1", "clip_grad = 'yes'"));
  EXPECT_EQ(E, "plan.toml: config.optimizer.clip_grad: expected a number");
}

TEST_F(Damaged, DataSplitAndEvaluation) {
  // Optional: a plan without them neither splits nor evaluates.
  llvm::Expected<LaunchPlan> L = parsePlan(Good, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_TRUE(L->Data.Split.empty());
  EXPECT_EQ(L->Data.EvalInterval, 0);
  std::string With =
      replaced(Good, "shuffle = false", "shuffle = false\nsplit = [ 8, 2 ]\neval_interval = 5\neval_iters = 3");
  L = parsePlan(With, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Data.Split, (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(L->Data.EvalInterval, 5);
  EXPECT_EQ(L->Data.EvalIters, 3);
  EXPECT_EQ(errorOf(replaced(With, "split = [ 8, 2 ]", "split = [ 0, 2 ]")),
            "plan.toml: config.data.split[0]: the training weight must be positive");
  EXPECT_EQ(errorOf(replaced(With, "split = [ 8, 2 ]", "split = [ 1, 1, 1, 1 ]")),
            "plan.toml: config.data.split: expected 1 to 3 weights, got 4");
  EXPECT_EQ(errorOf(replaced(With, "split = [ 8, 2 ]", "split = [ 8, -2 ]")),
            "plan.toml: config.data.split[1]: expected a non-negative integer");
  EXPECT_EQ(errorOf(replaced(With, "eval_iters = 3", "")), "plan.toml: config.data.eval_iters: missing");
}

TEST_F(Damaged, Routing) {
  llvm::Expected<LaunchPlan> L = parsePlan(Good, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  ASSERT_TRUE(L->Model.MoE);
  EXPECT_EQ(L->Model.MoE->Groups, 1);
  EXPECT_FALSE(L->Model.MoE->PreSoftmax);
  std::string Grouped = replaced(Good, "top_k = 2", "top_k = 2\ngroups = 2\ngroup_top_k = 1");
  L = parsePlan(Grouped, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Model.MoE->Groups, 2);
  EXPECT_EQ(L->Model.MoE->GroupTopK, 1);
  // Groups alone: no limit (every group may be chosen).
  L = parsePlan(replaced(Grouped, "group_top_k = 1", ""), "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Model.MoE->GroupTopK, 2);
  EXPECT_EQ(errorOf(replaced(Grouped, "groups = 2", "groups = 3")),
            "plan.toml: config.model.moe.groups: 3 groups do not divide the 8 experts");
  EXPECT_EQ(errorOf(replaced(Grouped, "group_top_k = 1", "group_top_k = 4")),
            "plan.toml: config.model.moe.group_top_k: 4 exceeds the 2 groups");
  EXPECT_EQ(errorOf(replaced(replaced(Grouped, "groups = 2", "groups = 8"), "top_k = 2\n", "top_k = 3\n")),
            "plan.toml: config.model.moe.group_top_k: top_k 3 exceeds the experts of 1 groups of 1");
  EXPECT_EQ(errorOf(replaced(Good, "pre_softmax = false", "pre_softmax = 1")),
            "plan.toml: config.model.moe.pre_softmax: expected true or false");
}

TEST_F(Damaged, GpuAndCudaGraphScopes) {
  // moerun computes on the host for a plan made for `cpu` and picks the
  // CUDA-graph notes from the scopes the recipe asked for.
  llvm::Expected<LaunchPlan> L = parsePlan(Good, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Gpu, "cpu");
  EXPECT_TRUE(L->CudaGraph.empty());
  std::string Scoped = replaced(Good, "cuda_graph = []", "cuda_graph = [ 'attn', 'moe_router' ]");
  L = parsePlan(Scoped, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->CudaGraph, (std::vector<std::string>{"attn", "moe_router"}));
  EXPECT_EQ(errorOf(replaced(Good, "cuda_graph = []", "cuda_graph = [ 3 ]")),
            "plan.toml: config.cuda_graph[0]: expected a string");
  EXPECT_EQ(errorOf(replaced(Good, "name = 'cpu'", "name = 7")), "plan.toml: config.gpu.name: expected a string");
  // Older plans that do not say keep working (and compute on the host).
  L = parsePlan(replaced(Good, "cuda_graph = []", ""), "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_TRUE(L->CudaGraph.empty());
}

TEST(PlanReader, VisionEncoderIsRead) {
  const char *Vl = R"(
recipe vl {
  model = qwen3_vl_30b_a3b
  cluster { gpu = h100_sxm; nodes = 2 }
  seq_len = 4K
  batch { micro = 1; global = 64 }
  parallel { ep = 8 }
  vision { frozen = true }
  data { images_per_sample = 2; image_size = 512 }
}
)";
  const std::string Doc = planToTOML(planOf(Vl));
  LaunchPlan L = read(Doc);
  ASSERT_TRUE(L.Model.Vision.has_value());
  EXPECT_EQ(L.Model.Vision->Layers, 27);
  EXPECT_EQ(L.Model.Vision->Hidden, 1152);
  EXPECT_EQ(L.Model.Vision->OutHidden, 2048);
  EXPECT_EQ(L.Model.Vision->TemporalPatch, 2);
  EXPECT_EQ(L.Model.Vision->PositionEmbeddings, 2304);
  EXPECT_EQ(L.Model.Vision->DeepstackLayers, (std::vector<int64_t>{8, 16, 24}));
  EXPECT_EQ(L.Model.Vision->StartToken, 151652);
  EXPECT_EQ(L.Model.Vision->ImageToken, 151655);
  EXPECT_EQ(L.Model.Vision->EndToken, 151653);
  EXPECT_TRUE(L.VisionFrozen);
  EXPECT_EQ(L.Data.ImagesPerSample, 2);
  EXPECT_EQ(L.Data.ImageSize, 512);
  EXPECT_TRUE(L.Model.Unsupported.empty());
  EXPECT_EQ(errorOf(replaced(Doc, "image_token = 151655", "image_token = 151936")),
            "plan.toml: config.model.vision.image_token: 151936 is not below the vocabulary of 151936");
  EXPECT_EQ(errorOf(replaced(Doc, "deepstack_layers = [ 8, 16, 24 ]", "deepstack_layers = [ 8, 27 ]")),
            "plan.toml: config.model.vision.deepstack_layers[1]: expected an encoder block, below 27");
  EXPECT_EQ(errorOf(replaced(Doc, "patch_size = 16", "patch_size = 0")),
            "plan.toml: config.model.vision.patch_size: must be at least 1, got 0");
  // Multimodal RoPE: three counts, half the rotated dimensions of a head of 128.
  EXPECT_EQ(L.Model.MropeSection, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_EQ(errorOf(replaced(Doc, "mrope_section = [ 24, 20, 20 ]", "mrope_section = [ 24, 20 ]")),
            "plan.toml: config.model.mrope_section: expected three counts summing to 64, half the dimensions RoPE "
            "rotates");
  EXPECT_EQ(errorOf(replaced(Doc, "mrope_section = [ 24, 20, 20 ]", "mrope_section = [ 24, -20, 60 ]")),
            "plan.toml: config.model.mrope_section[1]: expected a count of at most 128");
}

TEST_F(Damaged, ContextParallelExchange) {
  EXPECT_EQ(read(Good).Parallel.CpComm, "p2p");
  ASSERT_NE(Good.find("cp_comm = 'p2p'"), std::string::npos);
  EXPECT_EQ(read(replaced(Good, "cp_comm = 'p2p'", "cp_comm = 'a2a'")).Parallel.CpComm, "a2a");
  // A plan written before cp_comm was carried ran the ring.
  EXPECT_EQ(read(replaced(Good, "cp_comm = 'p2p'", "")).Parallel.CpComm, "p2p");
  EXPECT_EQ(errorOf(replaced(Good, "cp_comm = 'p2p'", "cp_comm = 'ulysses'")),
            "plan.toml: config.parallel.cp_comm: 'ulysses' is not one of 'p2p', 'a2a', 'allgather', 'a2a_p2p'");
}

TEST_F(Damaged, WrongType) {
  std::string E = errorOf(replaced(Good, "seq_len = 64", "seq_len = '64'"));
  EXPECT_EQ(E, "plan.toml: config.seq_len: expected an integer");
  E = errorOf(replaced(Good, "top_k = 2", "top_k = 2.5"));
  EXPECT_EQ(E, "plan.toml: config.model.moe.top_k: expected an integer");
  E = errorOf(replaced(Good, "fsdp = false", "fsdp = 0"));
  EXPECT_EQ(E, "plan.toml: config.parallel.fsdp: expected true or false");
}

TEST_F(Damaged, SyntaxErrorIsLocated) {
  std::string E = errorOf(replaced(Good, "world_size = 8", "world_size = = 8"));
  EXPECT_EQ(E.rfind("plan.toml:", 0), 0u) << E;
  // file:line:column: the line of the damaged key.
  size_t Line = 1;
  for (char C : Good.substr(0, Good.find("world_size = 8")))
    Line += C == '\n';
  EXPECT_NE(E.find("plan.toml:" + std::to_string(Line) + ":"), std::string::npos) << E;
}

TEST_F(Damaged, BadScheduleOps) {
  std::string E = errorOf(replaced(Good, "'F1.0'", "'X1.0'"));
  EXPECT_EQ(E, "plan.toml: pipeline.schedule[0].ops[1]: 'X1.0' is not F<microbatch>.<chunk> or "
               "B<microbatch>.<chunk>");
  E = errorOf(replaced(Good, "'F1.0'", "'F9.0'"));
  EXPECT_NE(E.find("pipeline.schedule[0].ops[1]: 'F9.0': micro batch 9 is past the 4 micro batches"), std::string::npos)
      << E;
  E = errorOf(replaced(Good, "'F1.0'", "'F0.0'"));
  EXPECT_NE(E.find("pipeline.schedule[0].ops[1]: 'F0.0' appears twice"), std::string::npos) << E;
  E = errorOf(replaced(Good, "'F0.0', 'F1.0', 'B0.0'", "'F0.0', 'B1.0', 'F1.0'"));
  EXPECT_NE(E.find("pipeline.schedule[0].ops[1]: 'B1.0' runs before its forward"), std::string::npos) << E;
  E = errorOf(replaced(Good, "'B3.0' ]", "'F3.1' ]"));
  EXPECT_NE(E.find("chunk 1 is past vpp = 1"), std::string::npos) << E;
}

TEST_F(Damaged, GroupsThatDoNotPartition) {
  std::string E = errorOf(replaced(Good, "pp = [ [ 0, 4 ], [ 1, 5 ]", "pp = [ [ 0, 4 ], [ 1, 4 ]"));
  EXPECT_EQ(E, "plan.toml: groups.pp[1][1]: rank 4 is in more than one 'pp' group");
  E = errorOf(replaced(Good, "\ntp = [ [ 0 ], [ 1 ],", "\ntp = [ [ 0 ], [ 9 ],"));
  EXPECT_EQ(E, "plan.toml: groups.tp[1][0]: rank 9 is outside the world of 8");
  E = errorOf(replaced(Good, "ep = [ [ 0, 1 ], [ 2, 3 ],", "ep = [ [ 0, 1, 2, 3 ],"));
  EXPECT_EQ(E, "plan.toml: groups.ep[0]: has 4 ranks, expected 2");
}

TEST_F(Damaged, InconsistentSizes) {
  std::string E = errorOf(replaced(Good, "world_size = 8", "world_size = 16"));
  EXPECT_NE(E.find("config.world_size: 8 differs from world_size 16"), std::string::npos) << E;
  E = errorOf(replaced(Good, "global_batch = 8", "global_batch = 6"));
  EXPECT_NE(E.find("pipeline.microbatches: micro_batch x microbatches x dp = 1 x 4 x 2 = 8, but global_batch is 6"),
            std::string::npos)
      << E;
  E = errorOf(replaced(Good, "first_layer = 2", "first_layer = 3"));
  EXPECT_NE(E.find("pipeline.stages[1].first_layer: expected 2"), std::string::npos) << E;
}

TEST_F(Damaged, MissingFile) {
  llvm::Expected<LaunchPlan> L = readPlan("/nonexistent/plan.toml");
  ASSERT_FALSE(bool(L));
  std::string E = llvm::toString(L.takeError());
  EXPECT_NE(E.find("cannot read plan '/nonexistent/plan.toml'"), std::string::npos) << E;
}

} // namespace
