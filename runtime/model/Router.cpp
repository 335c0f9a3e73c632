//===- model/Router.cpp ---------------------------------------------------===//
#include "model/Router.h"
#include "model/ModelOps.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace moert {

RouterSpec routerSpec(const ModelConfig &Config) {
  RouterSpec S;
  S.Experts = Config.Experts;
  S.TopK = Config.TopK;
  S.Groups = Config.RouterGroups;
  S.GroupTopK = Config.RouterGroupTopK;
  S.Sigmoid = Config.SigmoidRouter;
  S.PreSoftmax = Config.PreSoftmax;
  S.Scaling = Config.TopKScaling;
  return S;
}

bool Router::grouped() const { return Config.RouterGroups > 1 && Config.RouterGroupTopK < Config.RouterGroups; }

bool Router::normalisedWeights() const {
  // Megatron-Core moe_utils.py topk_routing_with_score_function: sigmoid
  // scores are divided by their sum over the chosen when top_k > 1, and a
  // softmax after the top-k is one over the chosen; a softmax before it is
  // kept as it is.
  return Config.SigmoidRouter ? Config.TopK > 1 : !Config.PreSoftmax;
}

int64_t Router::selectGroups(const float *Selection, std::vector<int32_t> &Order) const {
  int64_t E = Config.Experts, G = Config.RouterGroups, GK = Config.RouterGroupTopK;
  // A group scores the sum of its best top_k / group_top_k experts
  // (Megatron moe/moe_utils.py group_limited_topk); the best GK groups, the
  // lower group id on ties, keep their experts, in expert order.
  int64_t PerGroup = E / G, Best = std::max<int64_t>(Config.TopK / GK, 1);
  std::vector<double> GroupScore(G);
  std::vector<float> Member(PerGroup);
  for (int64_t Gr = 0; Gr < G; ++Gr) {
    std::copy(Selection + Gr * PerGroup, Selection + (Gr + 1) * PerGroup, Member.begin());
    std::partial_sort(Member.begin(), Member.begin() + Best, Member.end(), std::greater<float>());
    GroupScore[Gr] = std::accumulate(Member.begin(), Member.begin() + Best, 0.0);
  }
  std::vector<int32_t> Groups(G);
  std::iota(Groups.begin(), Groups.end(), 0);
  std::partial_sort(Groups.begin(), Groups.begin() + GK, Groups.end(), [&](int32_t A, int32_t B) {
    return GroupScore[A] > GroupScore[B] || (GroupScore[A] == GroupScore[B] && A < B);
  });
  std::sort(Groups.begin(), Groups.begin() + GK);
  int64_t Kept = 0;
  for (int64_t Gi = 0; Gi < GK; ++Gi)
    for (int64_t X = 0; X < PerGroup; ++X)
      Order[Kept++] = int32_t(Groups[Gi] * PerGroup + X);
  return Kept;
}

void Router::forceBalancedLogits(float *Rows, int64_t N, int64_t Experts, const uint64_t *Keys) {
  for (int64_t I = 0; I < N; ++I)
    for (int64_t J = 0; J < Experts; ++J)
      Rows[I * Experts + J] = float(normalOfKey(mix64(Keys[I]) + uint64_t(J)));
}

void Router::updateBias(float *Bias, const float *Tokens, int64_t Experts, double Rate) {
  double Total = 0;
  for (int64_t J = 0; J < Experts; ++J)
    Total += Tokens[J];
  float Mean = float(Total / double(Experts));
  for (int64_t J = 0; J < Experts; ++J) {
    float Offset = Mean - Tokens[J];
    float Sign = Offset > 0 ? 1.0f : Offset < 0 ? -1.0f : 0.0f;
    Bias[J] = Bias[J] + Sign * float(Rate);
  }
}

void Router::route(float *Rows, int64_t N, std::vector<int32_t> &TopIdx, std::vector<float> &TopW,
                   const float *Bias) const {
  int64_t E = Config.Experts, K = Config.TopK;
  for (int64_t I = 0; I < N; ++I) {
    float *Row = Rows + I * E;
    if (Config.SigmoidRouter) {
      for (int64_t J = 0; J < E; ++J)
        Row[J] = 1.0f / (1.0f + std::exp(-Row[J]));
    } else {
      float M = *std::max_element(Row, Row + E);
      double Sum = 0;
      for (int64_t J = 0; J < E; ++J) {
        Row[J] = std::exp(Row[J] - M);
        Sum += Row[J];
      }
      for (int64_t J = 0; J < E; ++J)
        Row[J] = float(Row[J] / Sum);
    }
  }
  // Top-k: higher score first, the lower expert id on ties; under group-
  // limited routing only among the experts of the token's best groups.
  TopIdx.assign(N * K, 0);
  TopW.assign(N * K, 0.0f);
  std::vector<int32_t> Order(E);
  // Megatron ranks by the scores its top-k sees: the probabilities, or, for
  // a softmax after the top-k, the logits. The logits rank as the
  // probabilities do, but a group's sum of them ranks as the sum of their
  // logs, so only group-limited routing needs those.
  bool LogScores = grouped() && !Config.SigmoidRouter && !Config.PreSoftmax;
  bool Biased = Bias && Config.SigmoidRouter;
  std::vector<float> Ranked(LogScores || Biased ? E : 0);
  bool Normalised = normalisedWeights();
  const float Scaling = float(Config.TopKScaling);
  for (int64_t I = 0; I < N; ++I) {
    const float *Row = Rows + I * E;
    const float *Selection = Row;
    if (LogScores) {
      for (int64_t J = 0; J < E; ++J)
        Ranked[J] = std::log(Row[J]);
      Selection = Ranked.data();
    } else if (Biased) {
      for (int64_t J = 0; J < E; ++J)
        Ranked[J] = Row[J] + Bias[J];
      Selection = Ranked.data();
    }
    std::iota(Order.begin(), Order.end(), 0);
    int64_t Candidates = grouped() ? selectGroups(Selection, Order) : E;
    std::partial_sort(Order.begin(), Order.begin() + K, Order.begin() + Candidates, [&](int32_t A, int32_t B) {
      return Selection[A] > Selection[B] || (Selection[A] == Selection[B] && A < B);
    });
    double Sum = 0;
    for (int64_t J = 0; J < K; ++J)
      Sum += Row[Order[J]];
    for (int64_t J = 0; J < K; ++J) {
      TopIdx[I * K + J] = Order[J];
      TopW[I * K + J] = (Normalised ? float(Row[Order[J]] / Sum) : Row[Order[J]]) * Scaling;
    }
  }
}

void Router::stats(const float *Scores, int64_t N, float *Stats) const {
  const int64_t E = Config.Experts, K = Config.TopK;
  std::fill(Stats, Stats + 2 * E + 1, 0.0f);
  std::vector<int32_t> Order(static_cast<size_t>(E));
  for (int64_t I = 0; I < N; ++I) {
    const float *Sc = Scores + I * E;
    double Div = 1;
    if (Config.SigmoidRouter)
      Div = std::accumulate(Sc, Sc + E, 0.0) + AuxScoreEpsilon;
    for (int64_t J = 0; J < E; ++J)
      Stats[E + J] += float(Sc[J] / Div);
    std::iota(Order.begin(), Order.end(), 0);
    std::partial_sort(Order.begin(), Order.begin() + K, Order.end(),
                      [&](int32_t A, int32_t B) { return Sc[A] > Sc[B] || (Sc[A] == Sc[B] && A < B); });
    for (int64_t J = 0; J < K; ++J)
      Stats[Order[size_t(J)]] += 1.0f;
  }
  Stats[2 * E] = float(N);
}

void Router::backward(const float *Scores, int64_t N, const int32_t *TopIdx, const float *TopW, const float *DTopW,
                      const float *Fraction, double AuxPerScore, float *DLogits) const {
  const int64_t E = Config.Experts, K = Config.TopK;
  const double Scaling = Config.TopKScaling;
  const bool Normalised = normalisedWeights();
  std::vector<double> DScore(static_cast<size_t>(E));
  for (int64_t I = 0; I < N; ++I) {
    const float *Sc = Scores + I * E;
    if (Config.SigmoidRouter) {
      // The aux loss reads a_j = s_j / (sum s + eps): ds_i = (g_i - sum_j g_j a_j) / (sum s + eps).
      double Div = std::accumulate(Sc, Sc + E, 0.0) + AuxScoreEpsilon, Dot = 0;
      for (int64_t J = 0; J < E; ++J)
        Dot += AuxPerScore * Fraction[J] * (Sc[J] / Div);
      for (int64_t J = 0; J < E; ++J)
        DScore[J] = (AuxPerScore * Fraction[J] - Dot) / Div;
    } else {
      for (int64_t J = 0; J < E; ++J)
        DScore[J] = AuxPerScore * Fraction[J];
    }
    const float *Wt = TopW + I * K, *Dw = DTopW + I * K;
    const int32_t *Idx = TopIdx + I * K;
    if (Normalised) {
      // w_k = c s_k / sum_j s_j: ds_j = (c dw_j - sum_k dw_k w_k) / sum.
      double Sum = 0, Dot = 0;
      for (int64_t J = 0; J < K; ++J) {
        Sum += Sc[Idx[J]];
        Dot += double(Dw[J]) * Wt[J];
      }
      for (int64_t J = 0; J < K; ++J)
        DScore[Idx[J]] += (Scaling * Dw[J] - Dot) / Sum;
    } else {
      for (int64_t J = 0; J < K; ++J)
        DScore[Idx[J]] += Scaling * Dw[J];
    }
    float *Out = DLogits + I * E;
    if (Config.SigmoidRouter) {
      for (int64_t J = 0; J < E; ++J)
        Out[J] = float(DScore[J] * Sc[J] * (1.0 - Sc[J]));
    } else {
      double Dot = 0;
      for (int64_t J = 0; J < E; ++J)
        Dot += DScore[J] * Sc[J];
      for (int64_t J = 0; J < E; ++J)
        Out[J] = float(Sc[J] * (DScore[J] - Dot));
    }
  }
}

} // namespace moert
