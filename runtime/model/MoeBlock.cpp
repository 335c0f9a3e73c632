//===- model/MoeBlock.cpp -------------------------------------------------===//
#include "model/MoeBlock.h"

#include "kernels/host/Blas.h"
#include "model/ModelOps.h"
#include "model/Router.h"
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

double MoeBlock::forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, bool CountTokens) {
  int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  // Router scores and each token's experts.
  S.Scores = matmul(Xn, W.Router->Value);
  Router(Config).route(S.Scores.data(), N, S.TopIdx, S.TopW, W.Bias ? W.Bias->State.Value.data() : nullptr);
  if (CountTokens && W.Bias)
    for (int32_t Expert : S.TopIdx)
      W.Bias->Tokens[size_t(Expert)] += 1.0f;
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
    if (Router(Config).normalisedWeights()) {
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
