//===- model/GatedDeltaNet.cpp - Gated DeltaNet ----------------------------===//
#include "model/GatedDeltaNet.h"

#include "model/GatedDeltaRule.h"
#include "model/ModelOps.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <cmath>
#include <stdexcept>

using namespace moert;

namespace {

constexpr double L2NormEps = 1e-6; // fla's l2norm, as Megatron-Core calls it

double sigmoid(double X) { return 1.0 / (1.0 + std::exp(-X)); }
double softplus(double X) { return X > 20 ? X : std::log1p(std::exp(X)); }

/// Calls Tap(T, Src, J) for every output token T of a causal conv of Width
/// taps over sequences of SeqLen tokens and every tap J that reads token Src
/// = T - (Width - 1 - J) of the same sequence.
template <class Fn> void forEachTap(int64_t Tokens, int64_t Width, int64_t SeqLen, Fn Tap) {
  for (int64_t T = 0; T < Tokens; ++T)
    for (int64_t J = 0; J < Width; ++J) {
      const int64_t Back = Width - 1 - J;
      if (Back <= T % SeqLen)
        Tap(T, T - Back, J);
    }
}

/// Causal depthwise conv over each sequence's tokens: Y[t, c] = sum_j W[c, j]
/// X[t + j - (Width - 1), c], zero before the sequence's start (PyTorch's
/// conv1d with padding Width - 1, its first SeqLen outputs).
Tensor causalConv(const Tensor &X, const Tensor &W, int64_t SeqLen) {
  const int64_t Ch = X.cols();
  Tensor Y({X.rows(), Ch});
  forEachTap(X.rows(), W.cols(), SeqLen, [&](int64_t T, int64_t Src, int64_t J) {
    const float *In = X.row(Src);
    float *Out = Y.row(T);
    for (int64_t C = 0; C < Ch; ++C)
      Out[C] += W.row(C)[J] * In[C];
  });
  return Y;
}

/// Adds the conv's gradients: DX (returned) and DW.
Tensor causalConvBackward(const Tensor &X, const Tensor &W, const Tensor &DY, int64_t SeqLen, Tensor &DW) {
  const int64_t Ch = X.cols();
  Tensor DX({X.rows(), Ch});
  forEachTap(X.rows(), W.cols(), SeqLen, [&](int64_t T, int64_t Src, int64_t J) {
    const float *In = X.row(Src), *D = DY.row(T);
    float *DIn = DX.row(Src);
    for (int64_t C = 0; C < Ch; ++C) {
      DIn[C] += W.row(C)[J] * D[C];
      DW.row(C)[J] += In[C] * D[C];
    }
  });
  return DX;
}

Tensor silu(const Tensor &X) {
  Tensor Y = X;
  for (float &V : Y.storage())
    V = siluOf(V);
  return Y;
}

/// Each Width-wide head of X divided by its L2 norm; Inv gets 1 / norm.
Tensor l2normHeads(const Tensor &X, int64_t Width, std::vector<float> &Inv) {
  Tensor Y = X;
  const int64_t Heads = X.numel() / Width;
  Inv.resize(size_t(Heads));
  for (int64_t H = 0; H < Heads; ++H) {
    float *V = Y.data() + H * Width;
    double Sum = 0;
    for (int64_t I = 0; I < Width; ++I)
      Sum += double(V[I]) * V[I];
    Inv[size_t(H)] = float(1.0 / std::sqrt(Sum + L2NormEps));
    for (int64_t I = 0; I < Width; ++I)
      V[I] *= Inv[size_t(H)];
  }
  return Y;
}

/// dX = Inv (dY - Y (dY . Y)) per head, Y the normalised heads.
Tensor l2normHeadsBackward(const Tensor &Y, const std::vector<float> &Inv, const Tensor &DY, int64_t Width) {
  Tensor DX = DY;
  for (size_t H = 0; H < Inv.size(); ++H) {
    const float *Yh = Y.data() + H * size_t(Width);
    float *D = DX.data() + H * size_t(Width);
    double Dot = 0;
    for (int64_t I = 0; I < Width; ++I)
      Dot += double(D[I]) * Yh[I];
    for (int64_t I = 0; I < Width; ++I)
      D[I] = float(Inv[H] * (D[I] - Yh[I] * Dot));
  }
  return DX;
}

} // namespace

int64_t GdnSaved::bytes() const {
  int64_t B = 0;
  for (const Tensor *T : {&ConvQ, &ConvK, &ConvV, &PreQ, &PreK, &PreV, &Q, &K, &V, &Z, &RawA, &G, &Beta, &O, &Gated})
    B += T->bytes();
  return B + int64_t((InvQ.size() + InvK.size() + RstdO.size()) * sizeof(float));
}

GatedDeltaNetBlock::GatedDeltaNetBlock(const ModelConfig &Config, Communicator &Tp) : Config(Config), Tp(Tp) {
  const ModelConfig::LinearAttention &L = *Config.Linear;
  if (L.KeyHeads <= 0 || L.ValueHeads <= 0 || L.HeadDim <= 0 || L.ConvKernel <= 0 || L.ValueHeads % L.KeyHeads ||
      L.KeyHeads % Tp.size())
    throw std::invalid_argument("Gated DeltaNet: key heads must divide the value heads and split over tp");
  KeyHeads = L.KeyHeads / Tp.size();
  ValueHeads = L.ValueHeads / Tp.size();
}

void GatedDeltaNetBlock::forEachHead(
    int64_t Sequences, int64_t SeqLen,
    const std::function<void(const DeltaRuleHead &, int64_t Row, int64_t H, int64_t Kh)> &Fn) const {
  const int64_t D = Config.Linear->HeadDim;
  DeltaRuleHead Head;
  Head.Tokens = SeqLen;
  Head.Dk = Head.Dv = D;
  Head.QkStride = KeyHeads * D;
  Head.VStride = ValueHeads * D;
  Head.GStride = ValueHeads;
  for (int64_t Seq = 0; Seq < Sequences; ++Seq)
    for (int64_t H = 0; H < ValueHeads; ++H)
      Fn(Head, Seq * SeqLen, H, H / (ValueHeads / KeyHeads));
}

DeltaRuleArgs GatedDeltaNetBlock::ruleArgs(int64_t Sequences, int64_t SeqLen, const GdnSaved &S) const {
  DeltaRuleArgs A;
  A.Sequences = Sequences;
  A.SeqLen = SeqLen;
  A.KeyHeads = KeyHeads;
  A.ValueHeads = ValueHeads;
  A.HeadDim = Config.Linear->HeadDim;
  A.Q = S.Q.data();
  A.K = S.K.data();
  A.V = S.V.data();
  A.G = S.G.data();
  A.Beta = S.Beta.data();
  return A;
}

void GatedDeltaNetBlock::gatedNorm(const GdnWeights &W, GdnSaved &S) const {
  // RMSNorm over each head, times w and silu(z): on the backend where it
  // has a kernel, else the host's loop.
  const int64_t D = Config.Linear->HeadDim, Rows = S.O.rows() * ValueHeads;
  if (S.Gated.shape() != S.O.shape())
    S.Gated = Tensor(S.O.shape());
  S.RstdO.resize(size_t(Rows));
  ComputeBackend &Backend = currentBackend();
  if (Backend.gatedRmsNormForward(Rows, D, S.O.data(), S.Z.data(), W.Norm->Value.data(), Config.RmsNormEps,
                                  S.Gated.data(), S.RstdO.data()))
    return;
  for (const Tensor *T : {&S.O, &S.Z})
    Backend.hostReads(T->data(), T->numel());
  gatedRmsNormForward(Rows, D, S.O.data(), S.Z.data(), W.Norm->Value.data(), Config.RmsNormEps, S.Gated.data(),
                      S.RstdO.data());
  Backend.hostWrote(S.Gated.data(), S.Gated.numel());
}

void GatedDeltaNetBlock::recomputeNormOut(const GdnWeights &W, GdnSaved &S) const {
  if (!S.Gated.numel())
    gatedNorm(W, S);
}

Tensor GatedDeltaNetBlock::forward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, GdnSaved &S,
                                   const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  const int64_t D = Config.Linear->HeadDim, N = Xn.rows() * Tp.size(), SeqLen = N / Sequences;
  // The output gate's input, the rule's output and the gated norm's are
  // read by the backend's operations alone (the norm, the output
  // projection, and their backward): where they are kept for the backward
  // they stay there; the rule's output in fp32, as the rule makes it.
  S.Z = Tensor({N, ValueHeads * D});
  S.O = Tensor({N, ValueHeads * D});
  S.Gated = Tensor({N, ValueHeads * D});
  const std::vector<HeldArray> OnBackend = {{S.Z.data(), S.Z.numel(), HeldArray::BackendOnly, false, true},
                                            HeldArray::wide(S.O.data(), S.O.numel()),
                                            {S.Gated.data(), S.Gated.numel(), HeldArray::BackendOnly, false, true}};
  HeldArrays Hold(Backend, KeepFor ? OnBackend : std::vector<HeldArray>());
  std::vector<Tensor> P(6);
  columnParallelForward(Tp, Xn, {&W.Q->Value, &W.K->Value, &W.V->Value, &W.Z->Value, &W.B->Value, &W.A->Value},
                        {&P[0], &P[1], &P[2], &S.Z, &P[4], &P[5]});
  S.ConvQ = std::move(P[0]);
  S.ConvK = std::move(P[1]);
  S.ConvV = std::move(P[2]);
  S.PreQ = causalConv(S.ConvQ, W.ConvQ->Value, SeqLen);
  S.PreK = causalConv(S.ConvK, W.ConvK->Value, SeqLen);
  S.PreV = causalConv(S.ConvV, W.ConvV->Value, SeqLen);
  S.Q = l2normHeads(silu(S.PreQ), D, S.InvQ);
  S.K = l2normHeads(silu(S.PreK), D, S.InvK);
  S.V = silu(S.PreV);
  S.RawA = Tensor({N, ValueHeads});
  S.G = Tensor({N, ValueHeads});
  S.Beta = Tensor({N, ValueHeads});
  for (int64_t T = 0; T < N; ++T)
    for (int64_t H = 0; H < ValueHeads; ++H) {
      float U = P[5].row(T)[H] + W.DtBias->Value[H];
      S.RawA.row(T)[H] = U;
      S.G.row(T)[H] = float(-std::exp(double(W.ALog->Value[H])) * softplus(U));
      S.Beta.row(T)[H] = float(sigmoid(P[4].row(T)[H]));
    }
  DeltaRuleArgs Rule = ruleArgs(Sequences, SeqLen, S);
  Rule.O = S.O.data();
  if (!currentBackend().gatedDeltaRuleForward(Rule))
    forEachHead(Sequences, SeqLen, [&](const DeltaRuleHead &Head, int64_t Row, int64_t H, int64_t Kh) {
      gatedDeltaRuleForward(Head, S.Q.row(Row) + Kh * D, S.K.row(Row) + Kh * D, S.V.row(Row) + H * D, S.G.row(Row) + H,
                            S.Beta.row(Row) + H, S.O.row(Row) + H * D);
    });
  gatedNorm(W, S);
  Tensor Y = rowParallelForward(Tp, S.Gated, W.Out->Value);
  if (KeepFor)
    Backend.keepArrays(KeepFor, OnBackend);
  return Y;
}

Tensor GatedDeltaNetBlock::backward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, const GdnSaved &S,
                                    const Tensor &DY) {
  const int64_t D = Config.Linear->HeadDim, N = S.O.rows(), SeqLen = N / Sequences;
  ComputeBackend &Backend = currentBackend();
  // The norm's output gradient and its input gradients pass between the
  // backend's operations alone (the output projection's backward, the
  // norm's, the rule's and the output gate's products): they stay there,
  // the rule's output gradient in fp32, as the rule reads it.
  Tensor DGated({N, ValueHeads * D}), DO({N, ValueHeads * D}), DZ({N, ValueHeads * D});
  HeldArrays Hold(Backend, {{DGated.data(), DGated.numel(), HeldArray::BackendOnly, false, true},
                            HeldArray::wide(DO.data(), DO.numel()),
                            {DZ.data(), DZ.numel(), HeldArray::BackendOnly, false, true}});
  rowParallelBackward(Tp, S.Gated, W.Out->Value, DY, W.Out->Grad, DGated);
  // The gated norm.
  const int64_t Rows = N * ValueHeads;
  if (!Backend.gatedRmsNormBackward(Rows, D, S.O.data(), S.Z.data(), W.Norm->Value.data(), S.RstdO.data(),
                                    DGated.data(), DO.data(), DZ.data(), W.Norm->Grad.data())) {
    for (const Tensor *T : std::initializer_list<const Tensor *>{&S.O, &S.Z, &DGated})
      Backend.hostReads(T->data(), T->numel());
    gatedRmsNormBackward(Rows, D, S.O.data(), S.Z.data(), W.Norm->Value.data(), S.RstdO.data(), DGated.data(),
                         DO.data(), DZ.data(), W.Norm->Grad.data());
    for (Tensor *T : {&DO, &DZ})
      Backend.hostWrote(T->data(), T->numel());
  }
  // The rule.
  Tensor DQ(S.Q.shape()), DK(S.K.shape()), DV(S.V.shape()), DG(S.G.shape()), DBeta(S.Beta.shape());
  DeltaRuleArgs Rule = ruleArgs(Sequences, SeqLen, S);
  Rule.DO = DO.data();
  Rule.DQ = DQ.data();
  Rule.DK = DK.data();
  Rule.DV = DV.data();
  Rule.DG = DG.data();
  Rule.DBeta = DBeta.data();
  if (!currentBackend().gatedDeltaRuleBackward(Rule))
    forEachHead(Sequences, SeqLen, [&](const DeltaRuleHead &Head, int64_t Row, int64_t H, int64_t Kh) {
      gatedDeltaRuleBackward(Head, S.Q.row(Row) + Kh * D, S.K.row(Row) + Kh * D, S.V.row(Row) + H * D, S.G.row(Row) + H,
                             S.Beta.row(Row) + H, DO.row(Row) + H * D, DQ.row(Row) + Kh * D, DK.row(Row) + Kh * D,
                             DV.row(Row) + H * D, DG.row(Row) + H, DBeta.row(Row) + H);
    });
  // g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
  Tensor DA({N, ValueHeads}), DB({N, ValueHeads});
  for (int64_t T = 0; T < N; ++T)
    for (int64_t H = 0; H < ValueHeads; ++H) {
      float Dg = DG.row(T)[H], U = S.RawA.row(T)[H], Beta = S.Beta.row(T)[H];
      W.ALog->Grad[H] += Dg * S.G.row(T)[H];
      float Du = float(Dg * -std::exp(double(W.ALog->Value[H])) * sigmoid(U));
      DA.row(T)[H] = Du;
      W.DtBias->Grad[H] += Du;
      DB.row(T)[H] = DBeta.row(T)[H] * Beta * (1 - Beta);
    }
  // l2norm, silu, conv.
  auto Back = [&](const Tensor &DAct, const Tensor &Pre, const Tensor &In, Parameter &Conv) {
    Tensor DPre = DAct;
    for (int64_t I = 0; I < DPre.numel(); ++I)
      DPre[I] *= siluSlope(Pre[I]);
    return causalConvBackward(In, Conv.Value, DPre, SeqLen, Conv.Grad);
  };
  Tensor DCq = Back(l2normHeadsBackward(S.Q, S.InvQ, DQ, D), S.PreQ, S.ConvQ, *W.ConvQ);
  Tensor DCk = Back(l2normHeadsBackward(S.K, S.InvK, DK, D), S.PreK, S.ConvK, *W.ConvK);
  Tensor DCv = Back(DV, S.PreV, S.ConvV, *W.ConvV);
  return columnParallelBackward(
      Tp, Xn, nullptr, {&W.Q->Value, &W.K->Value, &W.V->Value, &W.Z->Value, &W.B->Value, &W.A->Value},
      {&DCq, &DCk, &DCv, &DZ, &DB, &DA}, {&W.Q->Grad, &W.K->Grad, &W.V->Grad, &W.Z->Grad, &W.B->Grad, &W.A->Grad});
}
