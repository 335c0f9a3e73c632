//===- model/MoeBlock.cpp -------------------------------------------------===//
#include "model/MoeBlock.h"

#include "kernels/host/Blas.h"
#include "model/ModelOps.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert {

int64_t MoeSaved::moeBytes() const {
  int64_t B = Scores.bytes() + ExpertIn.bytes() + G.bytes() + U.bytes() + Dispatch.CombinedCopies.bytes();
  B += int64_t((TopIdx.size() + TopW.size() + Fraction.size()) * 4);
  B += int64_t(Dispatch.Permutation.size() * 8);
  return B;
}

void MoeSaved::dropMoe() { *this = MoeSaved(); }

namespace {
/// Rows [Begin, Begin + Rows) of a 2-D tensor as a pointer.
float *rowsAt(Tensor &T, int64_t Begin) { return T.data() + Begin * T.cols(); }
} // namespace

bool MoeBlock::grouped() const { return Config.RouterGroups > 1 && Config.RouterGroupTopK < Config.RouterGroups; }

bool MoeBlock::normalisedWeights() const {
  // Megatron-Core moe_utils.py topk_routing_with_score_function: sigmoid
  // scores are divided by their sum over the chosen when top_k > 1, and a
  // softmax after the top-k is one over the chosen; a softmax before it is
  // kept as it is.
  return Config.SigmoidRouter ? Config.TopK > 1 : !Config.PreSoftmax;
}

int64_t MoeBlock::selectGroups(const float *Selection, std::vector<int32_t> &Order) const {
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

double MoeBlock::forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y) {
  int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  // Router scores.
  S.Scores = matmul(Xn, W.Router->Value);
  for (int64_t I = 0; I < N; ++I) {
    float *Row = S.Scores.row(I);
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
  S.TopIdx.assign(N * K, 0);
  S.TopW.assign(N * K, 0.0f);
  std::vector<int32_t> Order(E);
  // Megatron ranks by the scores its top-k sees: the probabilities, or, for
  // a softmax after the top-k, the logits. The logits rank as the
  // probabilities do, but a group's sum of them ranks as the sum of their
  // logs, so only group-limited routing needs those.
  bool LogScores = grouped() && !Config.SigmoidRouter && !Config.PreSoftmax;
  std::vector<float> Logs(LogScores ? E : 0);
  bool Normalised = normalisedWeights();
  for (int64_t I = 0; I < N; ++I) {
    const float *Row = S.Scores.row(I);
    const float *Selection = Row;
    if (LogScores) {
      for (int64_t J = 0; J < E; ++J)
        Logs[J] = std::log(Row[J]);
      Selection = Logs.data();
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
      S.TopIdx[I * K + J] = Order[J];
      S.TopW[I * K + J] = Normalised ? float(Row[Order[J]] / Sum) : Row[Order[J]];
    }
  }
  // Load-balancing statistics over every token of the micro batch: copies
  // per expert, score sums per expert, and the token count.
  std::vector<float> Stats(2 * E + 1, 0.0f);
  for (int64_t I = 0; I < N * K; ++I)
    Stats[S.TopIdx[I]] += 1.0f;
  for (int64_t I = 0; I < N; ++I)
    for (int64_t J = 0; J < E; ++J)
      Stats[E + J] += S.Scores.row(I)[J];
  Stats[2 * E] = float(N);
  TpCp.allReduceSum(Stats.data(), Stats.size());
  S.GroupTokens = Stats[2 * E];
  S.Fraction.assign(E, 0.0f);
  double Aux = 0;
  for (int64_t J = 0; J < E; ++J) {
    S.Fraction[J] = float(Stats[J] / (S.GroupTokens * double(K)));
    Aux += double(S.Fraction[J]) * (Stats[E + J] / S.GroupTokens);
  }
  Aux *= Config.AuxLossCoeff * double(E);

  // Routed experts: SwiGLU over each local expert's rows.
  S.ExpertIn = Dispatcher.dispatch(Xn, S.TopIdx, S.Dispatch);
  int64_t Rows = S.ExpertIn.rows(), H = Config.Hidden, F = Config.MoeFfnHidden;
  S.G.resize({Rows, F});
  S.U.resize({Rows, F});
  Tensor Out({Rows, H});
  int64_t Begin = 0;
  std::vector<int64_t> Counts = S.Dispatch.TokensPerLocalExpert;
  for (size_t L = 0; L < Counts.size(); ++L) {
    int64_t M = Counts[L];
    if (M) {
      gemm(false, false, M, F, H, 1.0f, rowsAt(S.ExpertIn, Begin), W.Gate[L]->Value.data(), 0.0f, rowsAt(S.G, Begin));
      gemm(false, false, M, F, H, 1.0f, rowsAt(S.ExpertIn, Begin), W.Up[L]->Value.data(), 0.0f, rowsAt(S.U, Begin));
    }
    Begin += M;
  }
  S.Act = swiGlu(S.G, S.U);
  Begin = 0;
  for (size_t L = 0; L < Counts.size(); ++L) {
    int64_t M = Counts[L];
    if (M)
      gemm(false, false, M, H, F, 1.0f, rowsAt(S.Act, Begin), W.Down[L]->Value.data(), 0.0f, rowsAt(Out, Begin));
    Begin += M;
  }
  Y = Dispatcher.combine(Out, S.TopW, S.Dispatch);
  S.Valid = true;
  return Aux;
}

void MoeBlock::recomputeAct(MoeSaved &S) { S.Act = swiGlu(S.G, S.U); }

Tensor MoeBlock::backward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, const Tensor &DY, double AuxGradScale) {
  int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  int64_t H = Config.Hidden, F = Config.MoeFfnHidden;
  std::vector<float> DW;
  Tensor DOut = Dispatcher.combineBackward(DY, S.TopW, S.Dispatch, DW);
  int64_t Rows = DOut.rows();
  const std::vector<int64_t> &Counts = S.Dispatch.TokensPerLocalExpert;
  // Down projections: DAct = DOut Down^T, DDown += Act^T DOut.
  Tensor DAct({Rows, F});
  int64_t Begin = 0;
  for (size_t L = 0; L < Counts.size(); ++L) {
    int64_t M = Counts[L];
    if (M) {
      gemm(false, true, M, F, H, 1.0f, rowsAt(DOut, Begin), W.Down[L]->Value.data(), 0.0f, rowsAt(DAct, Begin));
      gemm(true, false, F, H, M, 1.0f, rowsAt(S.Act, Begin), rowsAt(DOut, Begin), 1.0f, W.Down[L]->Grad.data());
    }
    Begin += M;
  }
  Tensor DG, DU;
  swiGluBackward(S.G, S.U, DAct, DG, DU);
  Tensor DIn({Rows, H});
  Begin = 0;
  for (size_t L = 0; L < Counts.size(); ++L) {
    int64_t M = Counts[L];
    if (M) {
      gemm(false, true, M, H, F, 1.0f, rowsAt(DG, Begin), W.Gate[L]->Value.data(), 0.0f, rowsAt(DIn, Begin));
      gemm(false, true, M, H, F, 1.0f, rowsAt(DU, Begin), W.Up[L]->Value.data(), 1.0f, rowsAt(DIn, Begin));
      gemm(true, false, H, F, M, 1.0f, rowsAt(S.ExpertIn, Begin), rowsAt(DG, Begin), 1.0f, W.Gate[L]->Grad.data());
      gemm(true, false, H, F, M, 1.0f, rowsAt(S.ExpertIn, Begin), rowsAt(DU, Begin), 1.0f, W.Up[L]->Grad.data());
    }
    Begin += M;
  }
  Tensor DXn = Dispatcher.dispatchBackward(DIn, S.Dispatch);

  // Router: gradients of the scores from the routing weights and from the
  // aux loss (f_e is a constant), then through softmax or sigmoid.
  Tensor DLogits({N, E});
  std::vector<double> DScore(E);
  double AuxPerScore = AuxGradScale * Config.AuxLossCoeff * double(E) / S.GroupTokens;
  for (int64_t I = 0; I < N; ++I) {
    const float *Sc = S.Scores.row(I);
    for (int64_t J = 0; J < E; ++J)
      DScore[J] = AuxPerScore * S.Fraction[J];
    const float *Wt = &S.TopW[I * K];
    const float *Dw = &DW[I * K];
    const int32_t *Idx = &S.TopIdx[I * K];
    if (normalisedWeights()) {
      // w_k = s_k / sum_j s_j: ds_j = (dw_j - sum_k dw_k w_k) / sum.
      double Sum = 0, Dot = 0;
      for (int64_t J = 0; J < K; ++J) {
        Sum += Sc[Idx[J]];
        Dot += double(Dw[J]) * Wt[J];
      }
      for (int64_t J = 0; J < K; ++J)
        DScore[Idx[J]] += (Dw[J] - Dot) / Sum;
    } else {
      for (int64_t J = 0; J < K; ++J)
        DScore[Idx[J]] += Dw[J];
    }
    if (Config.SigmoidRouter) {
      for (int64_t J = 0; J < E; ++J)
        DLogits.row(I)[J] = float(DScore[J] * Sc[J] * (1.0 - Sc[J]));
    } else {
      double Dot = 0;
      for (int64_t J = 0; J < E; ++J)
        Dot += DScore[J] * Sc[J];
      for (int64_t J = 0; J < E; ++J)
        DLogits.row(I)[J] = float(Sc[J] * (DScore[J] - Dot));
    }
  }
  matmulBackward(Xn, W.Router->Value, DLogits, W.Router->Grad, DXn, 1.0f);
  return DXn;
}

} // namespace moert
