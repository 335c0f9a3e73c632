//===- ModelLayoutTest.cpp - TP x CP x EP layouts on four ranks -----------===//
//
// Four ranks as 2 x 2 grids (world rank = tp + 2 * other): TP with CP and
// experts split over the cp ranks, and TP with two data-parallel replicas
// that split the experts. The loss and the reassembled gradients must match
// one rank within 1e-5 relative.
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"
#include "ParallelCompare.h"

#include <gtest/gtest.h>

using namespace moert;
using namespace moert::test;

namespace {

struct Grid {
  std::unique_ptr<Communicator> Tp, Other;
  Grid() {
    CommWorld &W = world();
    Tp = W.split("tp", {{0, 1}, {2, 3}});
    Other = W.split("other", {{0, 2}, {1, 3}});
  }
};

TEST(Layout, TensorContextAndExpertParallel) {
  if (world().size() != 4)
    GTEST_SKIP() << "needs 4 ranks";
  ModelConfig C = tinyConfig(false, 1, 3);
  // Group-limited routing (2 groups of 2 experts, one per token) and a shared
  // expert narrower than a routed one times the count, split over tp = 2.
  C.RouterGroups = 2;
  C.RouterGroupTopK = 1;
  C.SharedFfnHidden = 12;
  MicroBatch MB = randomBatch(2, 8, C.Vocab, 51);
  ModelOptions O;
  O.CeScale = 1.0 / double(MB.Tokens.size());
  O.Recompute.Full = true;
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, {MB}, Ref);

  Grid G;
  auto TpCp = world().split("tp-cp", {{0, 1, 2, 3}});
  auto Ep = world().split("ep", {{0, 2}, {1, 3}}); // experts over the cp ranks
  Communicator &Cp = *G.Other;
  StageModel M(C, wholeModel(C), {G.Tp.get(), &Cp, TpCp.get(), Ep.get()}, O);
  M.forward(0, cpShard(MB, Cp.rank(), Cp.size()), nullptr);
  M.backward(0, nullptr);
  std::vector<float> Ce = {float(M.loss().CeSum)};
  TpCp->allReduceSum(Ce.data(), 1);
  EXPECT_NEAR(O.CeScale * Ce[0] + O.AuxScale * M.loss().AuxSum, LRef, 1e-5 * LRef);
  std::map<std::string, std::vector<float>> Got, RefLocal;
  for (Parameter *P : M.parameters()) {
    std::vector<float> Grad = gatherTp(*G.Tp, *P);
    if (P->Kind != ParamKind::Expert) // experts: ep = cp, nothing to add
      Cp.allReduceSum(Grad.data(), Grad.size());
    Got[P->Name] = Grad;
    RefLocal[P->Name] = Ref.at(P->Name);
  }
  expectMatches(Got, RefLocal);
}

TEST(Layout, TensorAndExpertParallelOverReplicas) {
  if (world().size() != 4)
    GTEST_SKIP() << "needs 4 ranks";
  ModelConfig C = tinyConfig(true, 0, 3);
  C.RouterGroups = 2;
  C.RouterGroupTopK = 1;
  std::vector<MicroBatch> Batches = {randomBatch(2, 8, C.Vocab, 61), randomBatch(2, 8, C.Vocab, 62)};
  ModelOptions O;
  O.CeScale = 1.0 / double(2 * Batches[0].Tokens.size());
  O.AuxScale = 0.5;
  O.Recompute.Modules = {"moe", "layernorm", "mlp"};
  std::map<std::string, std::vector<float>> Ref;
  double LRef = reference(C, O, Batches, Ref);

  Grid G;
  Communicator &Dp = *G.Other;
  auto Cp = createSelfCommunicator("cp");
  // Each replica's micro batch: tp ranks share it, the ep group spans the
  // replicas.
  StageModel M(C, wholeModel(C), {G.Tp.get(), Cp.get(), G.Tp.get(), &Dp}, O);
  M.forward(0, Batches[Dp.rank()], nullptr);
  M.backward(0, nullptr);
  std::vector<float> L = {float(O.CeScale * M.loss().CeSum)};
  world().world().allReduceSum(L.data(), 1);
  std::vector<float> Aux = {float(O.AuxScale * M.loss().AuxSum)};
  Dp.allReduceSum(Aux.data(), 1); // the same on both tp ranks: count one
  EXPECT_NEAR(L[0] + Aux[0], LRef, 1e-5 * LRef);
  std::map<std::string, std::vector<float>> Got, RefLocal;
  for (Parameter *P : M.parameters()) {
    std::vector<float> Grad = gatherTp(*G.Tp, *P); // experts: summed over tp
    if (P->Kind != ParamKind::Expert)
      Dp.allReduceSum(Grad.data(), Grad.size());
    Got[P->Name] = Grad;
    RefLocal[P->Name] = Ref.at(P->Name);
  }
  expectMatches(Got, RefLocal);
}

} // namespace
