//===- ModelTest.cpp - The stage model on one rank ------------------------===//
//
// Finite differences on every parameter, chunking, recompute and interleaved
// micro batches, all with groups of one.
//
//===----------------------------------------------------------------------===//
#include "ModelTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace moert;
using namespace moert::test;

namespace {

struct FdCase {
  bool Sigmoid;
  int64_t Shared;
  bool PreSoftmax = false;
  int64_t Groups = 1, GroupTopK = 1; ///< group-limited routing
  int64_t SharedWidth = 0;           ///< a shared width other than Shared x MoeFfnHidden
  /// The tokens' seed. A difference quotient whose step moves a token across
  /// a routing decision (top-k, a group's rank) is no derivative; a batch
  /// with no such token near the sampled entries is chosen per case.
  unsigned Seed = 7;
  int64_t TopK = 2; ///< 1: sigmoid weights are the score itself, not normalised
  bool QkNorm = false;
  int64_t Mtp = 0;     ///< multi-token-prediction blocks
  bool Linear = false; ///< Qwen3-Next: Gated DeltaNet on layer 0, gated full attention on layer 1
  bool Mrope = false;  ///< Qwen3-VL's multimodal RoPE over a 2 x 3 image's positions
  std::string name() const {
    return std::string(Sigmoid      ? "Sigmoid"
                       : PreSoftmax ? "PreSoftmax"
                                    : "Softmax") +
           (Shared ? "Shared" : "") + (Groups > 1 ? "Groups" : "") + (SharedWidth ? std::to_string(SharedWidth) : "") +
           (TopK != 2 ? "Top" + std::to_string(TopK) : "") + (QkNorm ? "QkNorm" : "") +
           (Mtp ? "Mtp" + std::to_string(Mtp) : "") + (Linear ? "GatedDeltaNet" : "") + (Mrope ? "Mrope" : "");
  }
};

ModelConfig caseConfig(const FdCase &Case) {
  ModelConfig C = tinyConfig(Case.Sigmoid, Case.Shared);
  C.PreSoftmax = Case.PreSoftmax;
  C.QkNorm = Case.QkNorm;
  C.RouterGroups = Case.Groups;
  C.RouterGroupTopK = Case.GroupTopK;
  if (Case.SharedWidth)
    C.SharedFfnHidden = Case.SharedWidth;
  C.TopK = Case.TopK;
  C.MtpLayers = Case.Mtp;
  if (Case.Linear) { // Qwen3-Next's layers: also partial RoPE and the shared experts' gate
    C.Linear = ModelConfig::LinearAttention{2, 2, 4, 4, 4};
    C.RotaryDim = C.HeadDim / 2;
    C.SharedExpertGate = true;
  }
  if (Case.Mrope) { // heads of 12: six frequencies, two per axis, interleaved
    C.HeadDim = 12;
    C.MropeSection = std::array<int64_t, 3>{2, 2, 2};
  }
  return C;
}

class FiniteDifferences : public ::testing::TestWithParam<FdCase> {};

/// Loss of one forward (the micro batch is then run backward to free it;
/// gradients are not looked at).
double evalLoss(StageModel &M, const ModelOptions &O, const MicroBatch &MB, const Tensor *Input = nullptr) {
  M.loss() = StageModel::LossTotals();
  Tensor In = Input ? *Input : Tensor(); // the chunk takes its input's storage
  M.forward(0, MB, Input ? &In : nullptr);
  double L = objective(M, O);
  M.backward(0, nullptr);
  return L;
}

/// |A - N| within a relative tolerance of the larger, plus an absolute floor
/// for entries whose gradient is near zero (there fp32 round-off of the loss,
/// about 1e-7 * L / Step, dominates the difference quotient).
void expectClose(double Analytic, double Numeric, double Rel, double Abs, const std::string &What) {
  double Tol = Rel * std::max(std::fabs(Analytic), std::fabs(Numeric)) + Abs;
  EXPECT_NEAR(Analytic, Numeric, Tol) << What;
}

TEST_P(FiniteDifferences, EveryParameterAndTheChunkInput) {
  FdCase Case = GetParam();
  ModelConfig C = caseConfig(Case);
  SelfGroups G;
  ModelOptions O;
  MicroBatch MB = randomBatch(2, 8, C.Vocab, Case.Seed);
  if (Case.Mrope)
    addImagePositions(MB, 1, 2, 3);
  O.CeScale = 1.0 / double(MB.Tokens.size()); // mean CE: the loss is O(1)
  if (C.MtpLayers) {
    addMtpTokens(MB, C.MtpLayers, C.Vocab, Case.Seed + 1);
    // Unequal weights, so that a block's loss reaching another's gradient shows.
    for (int64_t K = 0; K < C.MtpLayers; ++K)
      O.MtpCeScale.push_back(double(K + 1) * 0.3 / double(MB.Tokens.size()));
  }
  StageModel M(C, wholeModel(C), G.context(), O);
  // Weights of std 0.02 make most gradients tiny; scale them up so the
  // difference quotients stand well above fp32 round-off, and make the norm
  // weights differ from one.
  std::mt19937 Gen(3);
  std::uniform_real_distribution<float> Near1(0.5f, 1.5f);
  for (Parameter *P : M.parameters()) {
    bool Norm = P->Value.rank() == 1;
    // Gated DeltaNet's conv, decay and gate parameters stay at their working
    // scale: twenty times it saturates the decay, exp(A_log).
    bool Working = P->Name.find(".gdn.") != std::string::npos && P->Value.cols() <= 4;
    float Scale = Working ? 1.0f : 20.0f;
    for (float &V : P->Value.storage())
      V = Norm ? V * Near1(Gen) : V * Scale;
  }
  M.loss() = StageModel::LossTotals();
  M.forward(0, MB, nullptr);
  double L0 = objective(M, O);
  EXPECT_GT(M.loss().AuxSum, 0.0);
  M.backward(0, nullptr);
  auto Grads = gradients(M);

  // Gated DeltaNet's conv, silu and per-head l2norm curve within a step of
  // 1e-2 of these weights; a smaller step, with the floor its fp32 round-off
  // needs (test/megatron/gdn.py checks the block against Hugging Face's
  // within 3.5e-6).
  const double Step = Case.Linear ? 1e-3 : 1e-2, Rel = 0.01, Abs = Case.Linear ? 2e-4 : 2e-5;
  int Checked = 0;
  for (Parameter *P : M.parameters()) {
    int64_t Numel = P->Value.numel();
    // A sample: the first and last entries and a few spread over the tensor.
    std::vector<int64_t> Idx = {0, Numel - 1};
    std::mt19937 Pick{unsigned(Numel)};
    for (int I = 0; I < 6; ++I)
      Idx.push_back(int64_t(Pick() % uint64_t(Numel)));
    double MaxGrad = 0;
    for (float V : Grads[P->Name])
      MaxGrad = std::max(MaxGrad, double(std::fabs(V)));
    EXPECT_GT(MaxGrad, 0.0) << P->Name << " has an all-zero gradient";
    for (int64_t I : Idx) {
      float V0 = P->Value[I];
      P->Value[I] = V0 + float(Step);
      double Plus = evalLoss(M, O, MB);
      P->Value[I] = V0 - float(Step);
      double Minus = evalLoss(M, O, MB);
      P->Value[I] = V0;
      double Numeric = (Plus - Minus) / (2 * Step);
      expectClose(Grads[P->Name][I], Numeric, Rel, Abs, P->Name + "[" + std::to_string(I) + "]");
      ++Checked;
    }
  }
  EXPECT_GT(Checked, 100);
  EXPECT_NEAR(evalLoss(M, O, MB), L0, 1e-6 * L0);

  // The input gradient of a chunk: layer 0 (with the embedding) feeds layer 1
  // (with the loss); perturb the hidden states passed between them.
  // With MTP blocks the second chunk reads its own copy of the embedding.
  StageSpec First{0, 1, true, false}, Second{1, 1, false, true, C.MtpLayers > 0};
  StageModel A(C, First, G.context(), O), B(C, Second, G.context(), O);
  for (StageModel *Chunk : {&A, &B})
    for (Parameter *P : Chunk->parameters())
      for (Parameter *Q : M.parameters())
        if (Q->Name == P->Name)
          P->Value = Q->Value;
  Tensor Hidden = A.forward(0, MB, nullptr);
  B.loss() = StageModel::LossTotals();
  Tensor Input = Hidden; // the chunk takes its input's storage
  B.forward(0, MB, &Input);
  EXPECT_NEAR(objective(B, O), L0, 1e-5 * L0);
  Tensor DHidden = B.backward(0, nullptr);
  ASSERT_EQ(DHidden.shape(), Hidden.shape());
  Tensor OutputGrad = DHidden;
  A.backward(0, &OutputGrad);
  for (int64_t I = 0; I < Hidden.numel(); I += 7) {
    Tensor H = Hidden;
    H[I] += float(Step);
    double Plus = evalLoss(B, O, MB, &H);
    H[I] -= float(2 * Step);
    double Minus = evalLoss(B, O, MB, &H);
    expectClose(DHidden[I], (Plus - Minus) / (2 * Step), Rel, Abs, "hidden[" + std::to_string(I) + "]");
  }
}

INSTANTIATE_TEST_SUITE_P(Routers, FiniteDifferences,
                         ::testing::Values(FdCase{false, 0}, FdCase{true, 0}, FdCase{false, 1}, FdCase{true, 1},
                                           FdCase{false, 1, true}, FdCase{false, 0, false, 2, 1, 0, 15},
                                           FdCase{true, 1, false, 2, 1}, FdCase{false, 1, false, 1, 1, 12},
                                           FdCase{true, 1, false, 1, 1, 0, 9, 1},
                                           FdCase{false, 0, false, 1, 1, 0, 7, 2, true},
                                           FdCase{true, 1, false, 1, 1, 0, 7, 4, false, 2},
                                           FdCase{false, 1, false, 1, 1, 0, 7, 2, true, 0, true},
                                           FdCase{false, 0, false, 1, 1, 0, 7, 2, true, 0, false, true}),
                         [](const ::testing::TestParamInfo<FdCase> &I) { return I.param.name(); });

// Group-limited routing chooses every token's experts inside its best
// groups, and only there; without it the same tokens reach other groups.
TEST(Routing, GroupLimitedTopKStaysInTheBestGroups) {
  FdCase Limited{true, 0, false, 2, 1};
  ModelConfig C = caseConfig(Limited);
  SelfGroups G;
  ModelOptions O;
  MicroBatch MB = randomBatch(4, 8, C.Vocab, 11);
  for (bool Grouped : {true, false}) {
    ModelConfig Run = C;
    if (!Grouped)
      Run.RouterGroups = Run.RouterGroupTopK = 1;
    StageModel M(Run, wholeModel(Run), G.context(), O);
    M.forward(0, MB, nullptr);
    const std::vector<int32_t> *Routed = M.routedExperts(0, 1);
    ASSERT_NE(Routed, nullptr);
    const std::vector<int32_t> &Idx = *Routed;
    ASSERT_EQ(int64_t(Idx.size()), int64_t(MB.Tokens.size()) * C.TopK);
    int64_t Split = 0;
    for (size_t T = 0; T < Idx.size(); T += size_t(C.TopK))
      Split += (Idx[T] / 2) != (Idx[T + 1] / 2); // 4 experts in 2 groups of 2
    if (Grouped)
      EXPECT_EQ(Split, 0);
    else
      EXPECT_GT(Split, 0);
    M.backward(0, nullptr);
  }
}

// Forced routing (Megatron moe_router_force_load_balancing) ignores the
// router: two models whose router weights differ route every token alike,
// the routing changes with the token's sample (FirstSample), and over many
// tokens each expert gets close to its equal share.
TEST(Routing, ForcedBalanceIgnoresTheRouterAndBalances) {
  ModelConfig C = tinyConfig(false, 0);
  C.ForceBalance = true;
  SelfGroups G;
  MicroBatch MB = randomBatch(16, 32, C.Vocab, 5);
  auto Route = [&](uint64_t Seed, int64_t FirstSample) {
    ModelOptions O;
    O.Seed = Seed;
    MicroBatch B = MB;
    B.FirstSample = FirstSample;
    StageModel M(C, wholeModel(C), G.context(), O);
    M.forward(0, B, nullptr);
    std::vector<int32_t> Routed = *M.routedExperts(0, 1);
    M.backward(0, nullptr);
    return Routed;
  };
  std::vector<int32_t> A = Route(1, 0);
  // Unforced, the routing is the router's: other weights, other choices.
  ModelConfig Unforced = C;
  Unforced.ForceBalance = false;
  {
    ModelOptions O;
    StageModel M1(Unforced, wholeModel(Unforced), G.context(), O);
    O.Seed = 99;
    StageModel M2(Unforced, wholeModel(Unforced), G.context(), O);
    M1.forward(0, MB, nullptr);
    M2.forward(0, MB, nullptr);
    EXPECT_NE(*M1.routedExperts(0, 1), *M2.routedExperts(0, 1)) << "the router's weights choose unforced";
    M1.backward(0, nullptr);
    M2.backward(0, nullptr);
  }
  EXPECT_EQ(Route(1, 0), A);
  EXPECT_NE(Route(1, 16), A) << "the next samples draw other logits";
  {
    ModelOptions O;
    O.Seed = 1;
    StageModel M(C, wholeModel(C), G.context(), O);
    for (Parameter *P : M.parameters())
      if (P->Name.find("router") != std::string::npos)
        for (float &W : P->Value.storage())
          W = -3.0f * W + 0.5f;
    M.forward(0, MB, nullptr);
    EXPECT_EQ(*M.routedExperts(0, 1), A) << "forced routing must not read the router's weights";
    M.backward(0, nullptr);
  }
  std::vector<int64_t> Load(size_t(C.Experts), 0);
  for (int32_t E : A)
    ++Load[size_t(E)];
  // 512 tokens x top-2 over 4 experts: 256 each in expectation, a standard
  // deviation near 14; 60 is over four of them.
  for (int64_t L : Load)
    EXPECT_NEAR(double(L), double(A.size()) / double(C.Experts), 60.0);
}

/// Runs micro batches through chunks in order and backward in reverse;
/// returns the objective.
double runChunks(std::vector<StageModel *> Chunks, const ModelOptions &O, const MicroBatch &MB) {
  Tensor H;
  for (StageModel *C : Chunks) {
    C->loss() = StageModel::LossTotals();
    H = C->forward(0, MB, H.numel() ? &H : nullptr);
  }
  double L = objective(*Chunks.back(), O);
  for (StageModel *C : Chunks)
    L += O.AuxScale * C->loss().AuxSum * (C != Chunks.back());
  Tensor D;
  for (size_t I = Chunks.size(); I-- > 0;)
    D = Chunks[I]->backward(0, D.numel() ? &D : nullptr);
  return L;
}

void expectSameGradients(const std::map<std::string, std::vector<float>> &A,
                         const std::map<std::string, std::vector<float>> &B, double Rel) {
  ASSERT_EQ(A.size(), B.size());
  for (const auto &[Name, GA] : A) {
    auto It = B.find(Name);
    ASSERT_NE(It, B.end()) << Name;
    const std::vector<float> &GB = It->second;
    ASSERT_EQ(GA.size(), GB.size()) << Name;
    double Scale = 0, Diff = 0;
    for (size_t I = 0; I < GA.size(); ++I) {
      Scale = std::max(Scale, double(std::fabs(GB[I])));
      Diff = std::max(Diff, double(std::fabs(GA[I] - GB[I])));
    }
    EXPECT_LE(Diff, Rel * Scale) << Name;
    EXPECT_GT(Scale, 0.0) << Name;
  }
}

// Multimodal RoPE rotates by a token's time, row and column positions:
// where the three are equal (text) it is RoPE by that position, and an
// image's rows and columns change the loss.
TEST(StageModel, MultimodalRopeIsRopeOnTextAndMovesOnImages) {
  ModelConfig C = caseConfig(FdCase{false, 0, false, 1, 1, 0, 7, 2, true, 0, false, true});
  ModelConfig Plain = C;
  Plain.MropeSection.reset();
  SelfGroups G;
  ModelOptions O;
  MicroBatch Text = randomBatch(2, 8, C.Vocab, 5);
  O.CeScale = 1.0 / double(Text.Tokens.size());
  auto Loss = [&](const ModelConfig &Config, const MicroBatch &MB) {
    StageModel M(Config, wholeModel(Config), G.context(), O);
    return runChunks({&M}, O, MB);
  };
  const double Rope = Loss(Plain, Text);
  MicroBatch Equal = Text;
  addImagePositions(Equal, 8, 0, 0); // no image: every axis counts the place in the sequence
  ASSERT_EQ(Equal.RopePositions[0].size(), Text.Tokens.size());
  EXPECT_EQ(Equal.RopePositions[1], Equal.RopePositions[0]);
  EXPECT_NEAR(Loss(C, Equal), Rope, 1e-6 * Rope);
  MicroBatch Image = Text;
  addImagePositions(Image, 1, 2, 3);
  EXPECT_GT(std::fabs(Loss(C, Image) - Rope), 1e-4 * Rope);
  // Rows and columns exchanged: another image, another loss.
  MicroBatch Turned = Image;
  std::swap(Turned.RopePositions[1], Turned.RopePositions[2]);
  EXPECT_GT(std::fabs(Loss(C, Turned) - Loss(C, Image)), 1e-5 * Rope);
}

// The vision tower's saved activations and outputs count in the stage's
// peak while its micro batch is in flight, and only its outputs when it is
// frozen (no backward will need the rest).
TEST(StageModel, VisionTowerActivationsCountInThePeak) {
  ModelConfig C = tinyConfig(false, 0);
  VisionConfig V;
  V.Depth = 1;
  V.Hidden = 8;
  V.Heads = 2;
  V.FfnHidden = 16;
  V.OutHidden = C.Hidden;
  V.PatchSize = 2;
  V.MergeSize = 2;
  V.PositionGrid = 2;
  V.DeepstackLayers = {0};
  C.Vision = V;
  MicroBatch MB = randomBatch(1, 8, C.Vocab, 3);
  MB.Images = {ImageGrid{1, 2, 4}}; // 8 patches, 2 merged tokens at positions 1 and 2
  std::mt19937 Gen(4);
  std::uniform_real_distribution<float> Pixel(-1, 1);
  for (int64_t I = 0; I < 8 * V.patchDim(); ++I)
    MB.ImagePatches.push_back(Pixel(Gen));
  MB.VisionRows = {-1, 0, 1, -1, -1, -1, -1, -1};
  SelfGroups G;
  ModelOptions O;
  O.CeScale = 1.0 / 8;
  auto VisionPeak = [&](bool Frozen, int64_t &AfterBackward) {
    ModelConfig Config = C;
    Config.VisionFrozen = Frozen;
    StageModel M(Config, wholeModel(Config), G.context(), O);
    M.forward(0, MB, nullptr);
    M.backward(0, nullptr);
    const int64_t Peak = M.peakActivationBytes().at("vision");
    M.resetStepStats(); // the peaks restart from what is in flight: nothing
    AfterBackward = M.peakActivationBytes().at("vision");
    return Peak;
  };
  int64_t Left = -1;
  const int64_t Trained = VisionPeak(false, Left);
  EXPECT_EQ(Left, 0);
  const int64_t Frozen = VisionPeak(true, Left);
  EXPECT_EQ(Left, 0);
  // A frozen tower keeps its 2 tokens and 2 deepstack features of 16 floats.
  EXPECT_EQ(Frozen, int64_t(2 * 2 * C.Hidden * sizeof(float)));
  EXPECT_GT(Trained, 4 * Frozen);
}

TEST(StageModel, TwoChunksEqualOneChunk) {
  ModelConfig C = tinyConfig(false, 1, 4);
  SelfGroups G;
  ModelOptions O;
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 11);
  O.CeScale = 1.0 / double(MB.Tokens.size());
  StageModel Whole(C, wholeModel(C), G.context(), O);
  StageModel A(C, StageSpec{0, 2, true, false}, G.context(), O);
  StageModel B(C, StageSpec{2, 2, false, true}, G.context(), O);
  double LWhole = runChunks({&Whole}, O, MB);
  double LSplit = runChunks({&A, &B}, O, MB);
  EXPECT_NEAR(LSplit, LWhole, 1e-6 * LWhole);
  auto GA = gradients(A), GB = gradients(B);
  GA.insert(GB.begin(), GB.end());
  expectSameGradients(GA, gradients(Whole), 1e-6);
  EXPECT_EQ(A.parameters().size() + B.parameters().size(), Whole.parameters().size());
}

/// One micro batch through the whole model under recompute settings R: every
/// gradient and the loss ("loss"), and the peak activation bytes by module.
std::map<std::string, std::vector<float>> gradientsUnderRecompute(const ModelConfig &C, SelfGroups &G,
                                                                  const MicroBatch &MB, RecomputeOptions R,
                                                                  std::map<std::string, int64_t> &Peak) {
  ModelOptions O;
  O.CeScale = 1.0 / double(MB.Tokens.size());
  O.Recompute = R;
  StageModel M(C, wholeModel(C), G.context(), O);
  double L = runChunks({&M}, O, MB);
  Peak = M.peakActivationBytes();
  auto Grads = gradients(M);
  Grads["loss"] = {float(L)};
  return Grads;
}

TEST(StageModel, RecomputeIsExactAndSavesMemory) {
  ModelConfig C = tinyConfig(true, 1, 3);
  SelfGroups G;
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 5);
  auto Run = [&](RecomputeOptions R, std::map<std::string, int64_t> &Peak) {
    return gradientsUnderRecompute(C, G, MB, R, Peak);
  };
  std::map<std::string, int64_t> Base, Full, Sel, MoePeak;
  auto G0 = Run({}, Base);
  auto G1 = Run({true, {}}, Full);
  auto G2 = Run({false, {"core_attn", "layernorm", "mlp", "moe_act", "shared_experts"}}, Sel);
  auto G3 = Run({false, {"moe"}}, MoePeak);
  // Bit-identical: recompute reruns the same code on the same inputs.
  EXPECT_EQ(G0, G1);
  EXPECT_EQ(G0, G2);
  EXPECT_EQ(G0, G3);
  if (std::getenv("MOERT_MODEL_VERBOSE"))
    for (auto *P : {&Base, &Full, &Sel, &MoePeak}) {
      for (const auto &[K, V] : *P)
        std::printf("%s=%lld ", K.c_str(), (long long)V);
      std::printf("\n");
    }
  EXPECT_LT(Full["total"], Base["total"]);
  EXPECT_LT(Sel["total"], Base["total"]);
  EXPECT_LT(MoePeak["total"], Base["total"]);
  EXPECT_LT(Sel["core_attn"], Base["core_attn"]);
  EXPECT_LT(Sel["layernorm"], Base["layernorm"]);
  EXPECT_LT(Sel["moe_act"], Base["moe_act"]);
  EXPECT_LT(MoePeak["moe"], Base["moe"]);
  EXPECT_GT(Base["moe"], 0);
  EXPECT_GT(Base["mlp"], 0);
  EXPECT_GT(Base["shared_experts"], 0);
}

TEST(StageModel, GdnNormOutRecomputeIsExactAndSavesMemory) {
  FdCase Next{false, 1};
  Next.Linear = true;
  ModelConfig C = caseConfig(Next);
  SelfGroups G;
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 5);
  auto Run = [&](RecomputeOptions R, std::map<std::string, int64_t> &Peak) {
    return gradientsUnderRecompute(C, G, MB, R, Peak);
  };
  std::map<std::string, int64_t> Base, NormOut;
  auto G0 = Run({}, Base);
  auto G1 = Run({false, {"gdn_norm_out"}}, NormOut);
  EXPECT_EQ(G0, G1);
  // Layer 0's gated norm output, [tokens, value heads x head dim], and its
  // statistics per token and head.
  const int64_t Tokens = 16, Heads = C.Linear->ValueHeads, Dim = C.Linear->HeadDim;
  EXPECT_EQ(Base["attention"] - NormOut["attention"], int64_t(sizeof(float)) * (Tokens * Heads * Dim + Tokens * Heads));
}

TEST(StageModel, InterleavedMicroBatchesMatchSequentialOnes) {
  ModelConfig C = tinyConfig(false, 0);
  SelfGroups G;
  ModelOptions O;
  MicroBatch A = randomBatch(1, 8, C.Vocab, 1), B = randomBatch(1, 8, C.Vocab, 2);
  StageModel Seq(C, wholeModel(C), G.context(), O);
  StageModel Mix(C, wholeModel(C), G.context(), O);
  Seq.forward(0, A, nullptr);
  Seq.backward(0, nullptr);
  Seq.forward(1, B, nullptr);
  Seq.backward(1, nullptr);
  Mix.forward(0, A, nullptr);
  Mix.forward(1, B, nullptr);
  int64_t TwoInFlight = Mix.peakActivationBytes().at("total");
  Mix.backward(0, nullptr);
  Mix.backward(1, nullptr);
  EXPECT_GT(TwoInFlight, Seq.peakActivationBytes().at("total"));
  EXPECT_EQ(gradients(Seq), gradients(Mix));
  EXPECT_EQ(Seq.loss().CeSum, Mix.loss().CeSum);
  EXPECT_EQ(Seq.loss().Tokens, 16);
  // Everything saved was freed.
  Mix.resetStepStats();
  EXPECT_EQ(Mix.peakActivationBytes().at("total"), 0);
}

TEST(StageModel, InitDependsOnSeedAndNameOnly) {
  ModelConfig C = tinyConfig(false, 1, 4);
  SelfGroups G;
  ModelOptions O;
  StageModel Whole(C, wholeModel(C), G.context(), O);
  StageModel Tail(C, StageSpec{2, 2, false, true}, G.context(), O);
  std::map<std::string, std::vector<float>> W;
  for (Parameter *P : Whole.parameters())
    W[P->Name] = P->Value.storage();
  for (Parameter *P : Tail.parameters())
    EXPECT_EQ(P->Value.storage(), W.at(P->Name)) << P->Name;
  EXPECT_NE(W.at("layers.2.attn.q"), W.at("layers.3.attn.q"));
  EXPECT_EQ(W.at("layers.2.attn_norm"), std::vector<float>(C.Hidden, 1.0f));
  EXPECT_EQ(W.at("output").size(), size_t(C.Hidden * C.Vocab));
  EXPECT_EQ(W.at("layers.1.experts.3.down").size(), size_t(C.MoeFfnHidden * C.Hidden));
}

} // namespace
