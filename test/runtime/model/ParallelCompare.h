//===- ParallelCompare.h - Reassembling parallel gradients for tests ------===//
#ifndef MOERT_TEST_MODEL_PARALLELCOMPARE_H
#define MOERT_TEST_MODEL_PARALLELCOMPARE_H

#include "ModelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moert::test {

/// How a parameter is split over tp (by the layout documented in Model.h).
enum class Split { None, Rows, Cols };

inline Split tpSplit(const std::string &Name) {
  auto Ends = [&Name](const char *S) {
    std::string Suf(S);
    return Name.size() >= Suf.size() && Name.compare(Name.size() - Suf.size(), Suf.size(), Suf) == 0;
  };
  if (Name == "embedding" || Ends("attn.o") || Ends("mlp.down") || Ends("shared.down"))
    return Split::Rows;
  if (Name == "output" || Ends("attn.q") || Ends("attn.k") || Ends("attn.v") || Ends("mlp.gate") || Ends("mlp.up") ||
      Ends("shared.gate") || Ends("shared.up"))
    return Split::Cols;
  return Split::None;
}

/// The full gradient from the tp shards: split ones gathered, the rest summed.
inline std::vector<float> gatherTp(Communicator &Tp, const Parameter &P) {
  Split S = tpSplit(P.Name);
  // Parameter::Split (what tools gather by) must agree with the layout.
  EXPECT_EQ(int(S), int(P.Split)) << P.Name;
  std::vector<float> G = P.Grad.storage();
  if (S == Split::None) {
    Tp.allReduceSum(G.data(), G.size());
    return G;
  }
  int64_t T = Tp.size();
  std::vector<float> All(G.size() * T);
  Tp.allGather(G.data(), All.data(), G.size());
  if (S == Split::Rows)
    return All;
  int64_t R = P.Grad.rows(), C = P.Grad.cols();
  std::vector<float> Full(All.size());
  for (int64_t Rank = 0; Rank < T; ++Rank)
    for (int64_t I = 0; I < R; ++I)
      for (int64_t J = 0; J < C; ++J)
        Full[I * C * T + Rank * C + J] = All[Rank * R * C + I * C + J];
  return Full;
}

inline void expectMatches(const std::map<std::string, std::vector<float>> &Got,
                          const std::map<std::string, std::vector<float>> &Ref) {
  ASSERT_EQ(Got.size(), Ref.size());
  for (const auto &[Name, R] : Ref) {
    const std::vector<float> &G = Got.at(Name);
    ASSERT_EQ(G.size(), R.size()) << Name;
    double Scale = 0, Diff = 0;
    for (size_t I = 0; I < R.size(); ++I) {
      Scale = std::max(Scale, double(std::fabs(R[I])));
      Diff = std::max(Diff, double(std::fabs(G[I] - R[I])));
    }
    EXPECT_GT(Scale, 0.0) << Name;
    EXPECT_LE(Diff, 1e-5 * Scale) << Name << " differs by " << Diff;
  }
}

/// Single-rank reference over the given micro batches (Id = index).
inline double reference(const ModelConfig &C, const ModelOptions &O, const std::vector<MicroBatch> &Batches,
                        std::map<std::string, std::vector<float>> &Grads) {
  SelfGroups G;
  StageModel M(C, wholeModel(C), G.context(), O);
  for (size_t I = 0; I < Batches.size(); ++I) {
    M.forward(int64_t(I), Batches[I], nullptr);
    M.backward(int64_t(I), nullptr);
  }
  Grads = gradients(M);
  return objective(M, O);
}

} // namespace moert::test

#endif
