//===- ModelParallelTest.cpp - TP, CP and EP against one rank -------------===//
//
// Every rank also runs the single-rank model on the whole micro batch; the
// parallel run's loss and gradients (shards gathered, partial sums summed)
// must match it within 1e-5 relative (per tensor, against its largest entry).
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"
#include "ParallelCompare.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace moert;
using namespace moert::test;

namespace {

ModelConfig parallelConfig(bool Sigmoid) {
  ModelConfig C = tinyConfig(Sigmoid, 1, 3);
  // A shared expert 12 wide (not shared_experts x 8), split over tp = 2.
  C.SharedFfnHidden = 12;
  return C;
}

class TensorParallel : public ::testing::TestWithParam<bool> {};

TEST_P(TensorParallel, MatchesOneRank) {
  CommWorld &W = world();
  ModelConfig C = parallelConfig(GetParam());
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 21);
  ModelOptions O;
  O.CeScale = 1.0 / double(MB.Tokens.size());
  O.Recompute.Modules = {"core_attn", "moe_act"};
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, {MB}, Ref);

  std::vector<int> All(W.size());
  for (int I = 0; I < W.size(); ++I)
    All[I] = I;
  auto Tp = W.split("tp", {All});
  auto TpCp = W.split("tp-cp", {All});
  auto Cp = createSelfCommunicator("cp"), Ep = createSelfCommunicator("ep");
  StageModel M(C, wholeModel(C), {Tp.get(), Cp.get(), TpCp.get(), Ep.get()}, O);
  M.forward(0, MB, nullptr);
  M.backward(0, nullptr);
  std::vector<float> Parts = {float(M.loss().CeSum), float(M.loss().Tokens)};
  Tp->allReduceSum(Parts.data(), Parts.size());
  EXPECT_EQ(Parts[1], float(MB.Tokens.size()));
  double L = O.CeScale * Parts[0] + O.AuxScale * M.loss().AuxSum;
  EXPECT_NEAR(L, LRef, 1e-5 * LRef);
  std::map<std::string, std::vector<float>> Got;
  for (Parameter *P : M.parameters())
    Got[P->Name] = gatherTp(*Tp, *P);
  expectMatches(Got, Ref);
}

INSTANTIATE_TEST_SUITE_P(Routers, TensorParallel, ::testing::Bool());

TEST(TensorParallel, ChunksPassSequenceShards) {
  // Two pipeline chunks on the same tp group: the hidden states handed from
  // one to the other are [N / TP, Hidden] shards, and so are their gradients.
  CommWorld &W = world();
  ModelConfig C = parallelConfig(false);
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 23);
  ModelOptions O;
  O.CeScale = 1.0 / double(MB.Tokens.size());
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, {MB}, Ref);

  std::vector<int> All(W.size());
  for (int I = 0; I < W.size(); ++I)
    All[I] = I;
  auto Tp = W.split("tp", {All});
  auto Cp = createSelfCommunicator("cp"), Ep = createSelfCommunicator("ep");
  ParallelContext Ctx{Tp.get(), Cp.get(), Tp.get(), Ep.get()};
  StageModel A(C, StageSpec{0, 2, true, false}, Ctx, O);
  StageModel B(C, StageSpec{2, 1, false, true}, Ctx, O);
  Tensor H = A.forward(0, MB, nullptr);
  EXPECT_EQ(H.rows(), int64_t(MB.Tokens.size()) / Tp->size());
  const std::vector<int64_t> Shape = H.shape();
  B.forward(0, MB, &H);
  Tensor D = B.backward(0, nullptr);
  EXPECT_EQ(D.shape(), Shape);
  EXPECT_TRUE(A.backward(0, &D).numel() == 0);
  std::vector<float> Ce = {float(B.loss().CeSum)};
  Tp->allReduceSum(Ce.data(), 1);
  double L = O.CeScale * Ce[0] + O.AuxScale * (A.loss().AuxSum + B.loss().AuxSum);
  EXPECT_NEAR(L, LRef, 1e-5 * LRef);
  std::map<std::string, std::vector<float>> Got;
  for (StageModel *M : {&A, &B})
    for (Parameter *P : M->parameters())
      Got[P->Name] = gatherTp(*Tp, *P);
  expectMatches(Got, Ref);
}

TEST(ContextParallel, MatchesOneRank) {
  CommWorld &W = world();
  ModelConfig C = parallelConfig(false);
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 31);
  ModelOptions O;
  O.CeScale = 1.0 / double(MB.Tokens.size());
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, {MB}, Ref);

  std::vector<int> All(W.size());
  for (int I = 0; I < W.size(); ++I)
    All[I] = I;
  auto Cp = W.split("cp", {All});
  auto TpCp = W.split("tp-cp", {All});
  auto Tp = createSelfCommunicator("tp"), Ep = createSelfCommunicator("ep");
  StageModel M(C, wholeModel(C), {Tp.get(), Cp.get(), TpCp.get(), Ep.get()}, O);
  M.forward(0, cpShard(MB, Cp->rank(), Cp->size()), nullptr);
  M.backward(0, nullptr);
  std::vector<float> Parts = {float(M.loss().CeSum)};
  Cp->allReduceSum(Parts.data(), 1);
  double L = O.CeScale * Parts[0] + O.AuxScale * M.loss().AuxSum;
  EXPECT_NEAR(L, LRef, 1e-5 * LRef);
  // Every gradient is a partial sum over the cp ranks' tokens.
  std::map<std::string, std::vector<float>> Got;
  for (Parameter *P : M.parameters()) {
    std::vector<float> G = P->Grad.storage();
    Cp->allReduceSum(G.data(), G.size());
    Got[P->Name] = G;
  }
  expectMatches(Got, Ref);
}

TEST(ExpertParallel, MatchesOneRank) {
  // The ep ranks are data-parallel replicas, each with its own micro batch
  // and half of the experts; one rank runs both micro batches.
  CommWorld &W = world();
  ModelConfig C = parallelConfig(true);
  std::vector<MicroBatch> Batches;
  for (int R = 0; R < W.size(); ++R)
    Batches.push_back(randomBatch(2, 8, C.Vocab, 40 + unsigned(R)));
  ModelOptions O;
  O.CeScale = 1.0 / double(Batches.size() * Batches[0].Tokens.size());
  O.AuxScale = 1.0 / double(Batches.size());
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, Batches, Ref);

  std::vector<int> All(W.size());
  for (int I = 0; I < W.size(); ++I)
    All[I] = I;
  auto Ep = W.split("ep", {All});
  auto Tp = createSelfCommunicator("tp"), Cp = createSelfCommunicator("cp"), TpCp = createSelfCommunicator("tp-cp");
  StageModel M(C, wholeModel(C), {Tp.get(), Cp.get(), TpCp.get(), Ep.get()}, O);
  M.forward(0, Batches[Ep->rank()], nullptr);
  M.backward(0, nullptr);
  std::vector<float> Parts = {float(O.CeScale * M.loss().CeSum + O.AuxScale * M.loss().AuxSum)};
  Ep->allReduceSum(Parts.data(), 1);
  EXPECT_NEAR(Parts[0], LRef, 1e-5 * LRef);
  // Dense gradients are summed over the replicas (the dp reduction); each
  // expert's gradient is complete on its owner.
  std::map<std::string, std::vector<float>> Got, RefLocal;
  for (Parameter *P : M.parameters()) {
    std::vector<float> G = P->Grad.storage();
    if (P->Kind != ParamKind::Expert)
      Ep->allReduceSum(G.data(), G.size());
    Got[P->Name] = G;
    RefLocal[P->Name] = Ref.at(P->Name);
  }
  EXPECT_EQ(Ref.size() - RefLocal.size(),
            size_t((C.Experts - C.Experts / Ep->size()) * 3 * (C.Layers - C.DenseLayers)));
  expectMatches(Got, RefLocal);
}

} // namespace
