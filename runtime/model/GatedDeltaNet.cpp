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

DeltaGates GatedDeltaNetBlock::gates(const GdnWeights &W, int64_t Tokens) const {
  return {Tokens, ValueHeads, W.DtBias->Value.data(), W.ALog->Value.data()};
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
  // RMSNorm over each head, times w and silu(z).
  const int64_t D = Config.Linear->HeadDim, Rows = S.O.rows() * ValueHeads;
  S.Gated.ensureShape(S.O.shape());
  S.RstdO.resize(size_t(Rows));
  const float *Norm = W.Norm->Value.data();
  onBackendElseHost(
      currentBackend(), {readsOf(S.O), readsOf(S.Z), readsOf(W.Norm->Value)}, {writesOf(S.Gated), writesOf(S.RstdO)},
      [&] {
        return currentBackend().gatedRmsNormForward(Rows, D, S.O.data(), S.Z.data(), Norm, Config.RmsNormEps,
                                                    S.Gated.data(), S.RstdO.data());
      },
      [&] {
        gatedRmsNormForward(Rows, D, S.O.data(), S.Z.data(), Norm, Config.RmsNormEps, S.Gated.data(), S.RstdO.data());
      });
}

void GatedDeltaNetBlock::recomputeNormOut(const GdnWeights &W, GdnSaved &S) const {
  if (!S.Gated.numel())
    gatedNorm(W, S);
}

void GatedDeltaNetBlock::forward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, GdnSaved &S, Tensor &Y,
                                 const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  const int64_t D = Config.Linear->HeadDim, N = Xn.rows() * Tp.size(), SeqLen = N / Sequences;
  const int64_t Kc = KeyHeads * D, Vc = ValueHeads * D;
  S.ConvQ = Tensor({N, Kc});
  S.ConvK = Tensor({N, Kc});
  S.ConvV = Tensor({N, Vc});
  S.PreQ = Tensor({N, Kc});
  S.PreK = Tensor({N, Kc});
  S.PreV = Tensor({N, Vc});
  S.Q = Tensor({N, Kc});
  S.K = Tensor({N, Kc});
  S.V = Tensor({N, Vc});
  S.InvQ.assign(size_t(N * KeyHeads), 0.0f);
  S.InvK.assign(size_t(N * KeyHeads), 0.0f);
  S.Z = Tensor({N, Vc});
  S.RawA = Tensor({N, ValueHeads});
  S.G = Tensor({N, ValueHeads});
  S.Beta = Tensor({N, ValueHeads});
  S.O = Tensor({N, Vc});
  S.Gated = Tensor({N, Vc});
  S.RstdO.assign(size_t(N * ValueHeads), 0.0f);
  Tensor B({N, ValueHeads}), A({N, ValueHeads});
  // Every array S keeps is read by the backend's operations alone (host
  // code reads them only where the backend declines an operation): where
  // they are kept for the backward they stay there, from the projections to
  // the output norm. The products and the conv's outputs in the backend's
  // precision; the rule's operands, its output and the gates in fp32, as the
  // rule reads and makes them.
  auto Product = [](Tensor &T) { return HeldArray{T.data(), T.numel(), HeldArray::BackendOnly, false, true}; };
  auto Wide = [](auto &T) { return HeldArray::wide(T.data(), int64_t(T.size())); };
  const std::vector<HeldArray> Kept = {
      Product(S.ConvQ),    Product(S.ConvK),    Product(S.ConvV),       Product(S.PreQ),     Product(S.PreK),
      Product(S.PreV),     Wide(S.Q.storage()), Wide(S.K.storage()),    Wide(S.V.storage()), Wide(S.InvQ),
      Wide(S.InvK),        Product(S.Z),        Wide(S.RawA.storage()), Wide(S.G.storage()), Wide(S.Beta.storage()),
      Wide(S.O.storage()), Product(S.Gated),    Wide(S.RstdO)};
  std::vector<HeldArray> Held;
  if (KeepFor) {
    Held = Kept;
    Held.push_back(Wide(A.storage()));
    Held.push_back(Wide(B.storage()));
  }
  HeldArrays Hold(Backend, Held);
  columnParallelForward(Tp, Xn, {&W.Q->Value, &W.K->Value, &W.V->Value, &W.Z->Value, &W.B->Value, &W.A->Value},
                        {&S.ConvQ, &S.ConvK, &S.ConvV, &S.Z, &B, &A});
  // q, k, v = silu(conv(.)); q and k normalised per head, in place.
  auto ConvSilu = [&](const Tensor &X, const Parameter &Conv, Tensor &Pre, Tensor &Act) {
    const CausalConv C{N, X.cols(), SeqLen, Conv.Value.cols()};
    onBackendElseHost(
        Backend, {readsOf(X), readsOf(Conv.Value)}, {writesOf(Pre), writesOf(Act)},
        [&] { return Backend.causalConvSiluForward(C, X.data(), Conv.Value.data(), Pre.data(), Act.data()); },
        [&] { causalConvSiluForward(C, X.data(), Conv.Value.data(), Pre.data(), Act.data()); });
  };
  auto L2Norm = [&](Tensor &X, std::vector<float> &Inv) {
    const int64_t Rows = N * KeyHeads;
    onBackendElseHost(
        Backend, {readsOf(X)}, {writesOf(X), writesOf(Inv)},
        [&] { return Backend.l2NormHeadsForward(Rows, D, L2NormEps, X.data(), X.data(), Inv.data()); },
        [&] { l2NormHeadsForward(Rows, D, L2NormEps, X.data(), X.data(), Inv.data()); });
  };
  ConvSilu(S.ConvQ, *W.ConvQ, S.PreQ, S.Q);
  ConvSilu(S.ConvK, *W.ConvK, S.PreK, S.K);
  ConvSilu(S.ConvV, *W.ConvV, S.PreV, S.V);
  L2Norm(S.Q, S.InvQ);
  L2Norm(S.K, S.InvK);
  const DeltaGates Gates = gates(W, N);
  onBackendElseHost(
      Backend, {readsOf(A), readsOf(B), readsOf(W.DtBias->Value), readsOf(W.ALog->Value)},
      {writesOf(S.RawA), writesOf(S.G), writesOf(S.Beta)},
      [&] { return Backend.deltaGatesForward(Gates, A.data(), B.data(), S.RawA.data(), S.G.data(), S.Beta.data()); },
      [&] { deltaGatesForward(Gates, A.data(), B.data(), S.RawA.data(), S.G.data(), S.Beta.data()); });
  DeltaRuleArgs Rule = ruleArgs(Sequences, SeqLen, S);
  Rule.O = S.O.data();
  onBackendElseHost(
      Backend, {readsOf(S.Q), readsOf(S.K), readsOf(S.V), readsOf(S.G), readsOf(S.Beta)}, {writesOf(S.O)},
      [&] { return Backend.gatedDeltaRuleForward(Rule); },
      [&] {
        forEachHead(Sequences, SeqLen, [&](const DeltaRuleHead &Head, int64_t Row, int64_t H, int64_t Kh) {
          gatedDeltaRuleForward(Head, S.Q.row(Row) + Kh * D, S.K.row(Row) + Kh * D, S.V.row(Row) + H * D,
                                S.G.row(Row) + H, S.Beta.row(Row) + H, S.O.row(Row) + H * D);
        });
      });
  gatedNorm(W, S);
  rowParallelForward(Tp, S.Gated, W.Out->Value, Y);
  if (KeepFor)
    Backend.keepArrays(KeepFor, Kept);
}

void GatedDeltaNetBlock::backward(const GdnWeights &W, const Tensor &Xn, int64_t Sequences, const GdnSaved &S,
                                  const Tensor &DY, Tensor &DXn) {
  const int64_t D = Config.Linear->HeadDim, N = S.O.rows(), SeqLen = N / Sequences;
  ComputeBackend &Backend = currentBackend();
  // Every gradient here passes between the backend's operations alone, from
  // the output projection's backward to the input projections': they stay
  // there, in the precision their readers take (fp32 where the rule writes
  // or reads them, the backend's where products alone read them).
  Tensor DGated(S.O.shape()), DO(S.O.shape()), DZ(S.O.shape());
  Tensor DQ(S.Q.shape()), DK(S.K.shape()), DV(S.V.shape()), DG(S.G.shape()), DBeta(S.Beta.shape());
  Tensor DCq(S.ConvQ.shape()), DCk(S.ConvK.shape()), DCv(S.ConvV.shape()), DA(S.G.shape()), DB(S.G.shape());
  auto Product = [](Tensor &T) { return HeldArray{T.data(), T.numel(), HeldArray::BackendOnly, false, true}; };
  auto Wide = [](Tensor &T) { return HeldArray::wide(T.data(), T.numel()); };
  HeldArrays Hold(Backend, {Product(DGated), Wide(DO), Product(DZ), Wide(DQ), Wide(DK), Wide(DV), Wide(DG), Wide(DBeta),
                            Product(DCq), Product(DCk), Product(DCv), Product(DA), Product(DB)});
  rowParallelBackward(Tp, S.Gated, W.Out->Value, DY, W.Out->Grad, DGated);
  // The gated norm.
  const int64_t Rows = N * ValueHeads;
  const float *Norm = W.Norm->Value.data();
  onBackendElseHost(
      Backend,
      {readsOf(S.O), readsOf(S.Z), readsOf(DGated), readsOf(W.Norm->Value), readsOf(W.Norm->Grad), readsOf(S.RstdO)},
      {writesOf(DO), writesOf(DZ), writesOf(W.Norm->Grad)},
      [&] {
        return Backend.gatedRmsNormBackward(Rows, D, S.O.data(), S.Z.data(), Norm, S.RstdO.data(), DGated.data(),
                                            DO.data(), DZ.data(), W.Norm->Grad.data());
      },
      [&] {
        gatedRmsNormBackward(Rows, D, S.O.data(), S.Z.data(), Norm, S.RstdO.data(), DGated.data(), DO.data(), DZ.data(),
                             W.Norm->Grad.data());
      });
  // The rule.
  DeltaRuleArgs Rule = ruleArgs(Sequences, SeqLen, S);
  Rule.DO = DO.data();
  Rule.DQ = DQ.data();
  Rule.DK = DK.data();
  Rule.DV = DV.data();
  Rule.DG = DG.data();
  Rule.DBeta = DBeta.data();
  onBackendElseHost(
      Backend, {readsOf(S.Q), readsOf(S.K), readsOf(S.V), readsOf(S.G), readsOf(S.Beta), readsOf(DO)},
      {writesOf(DQ), writesOf(DK), writesOf(DV), writesOf(DG), writesOf(DBeta)},
      [&] { return Backend.gatedDeltaRuleBackward(Rule); },
      [&] {
        forEachHead(Sequences, SeqLen, [&](const DeltaRuleHead &Head, int64_t Row, int64_t H, int64_t Kh) {
          gatedDeltaRuleBackward(Head, S.Q.row(Row) + Kh * D, S.K.row(Row) + Kh * D, S.V.row(Row) + H * D,
                                 S.G.row(Row) + H, S.Beta.row(Row) + H, DO.row(Row) + H * D, DQ.row(Row) + Kh * D,
                                 DK.row(Row) + Kh * D, DV.row(Row) + H * D, DG.row(Row) + H, DBeta.row(Row) + H);
        });
      });
  // The gates.
  const DeltaGates Gates = gates(W, N);
  float *DALog = W.ALog->Grad.data(), *DDtBias = W.DtBias->Grad.data();
  onBackendElseHost(
      Backend,
      {readsOf(S.RawA), readsOf(S.G), readsOf(S.Beta), readsOf(DG), readsOf(DBeta), readsOf(W.ALog->Value),
       readsOf(W.ALog->Grad), readsOf(W.DtBias->Grad)},
      {writesOf(DA), writesOf(DB), writesOf(W.ALog->Grad), writesOf(W.DtBias->Grad)},
      [&] {
        return Backend.deltaGatesBackward(Gates, S.RawA.data(), S.G.data(), S.Beta.data(), DG.data(), DBeta.data(),
                                          DA.data(), DB.data(), DALog, DDtBias);
      },
      [&] {
        deltaGatesBackward(Gates, S.RawA.data(), S.G.data(), S.Beta.data(), DG.data(), DBeta.data(), DA.data(),
                           DB.data(), DALog, DDtBias);
      });
  // l2norm (in place), silu and the conv.
  auto L2Norm = [&](const Tensor &Y, const std::vector<float> &Inv, Tensor &DX) {
    const int64_t Heads = N * KeyHeads;
    onBackendElseHost(
        Backend, {readsOf(Y), readsOf(Inv), readsOf(DX)}, {writesOf(DX)},
        [&] { return Backend.l2NormHeadsBackward(Heads, D, Y.data(), Inv.data(), DX.data(), DX.data()); },
        [&] { l2NormHeadsBackward(Heads, D, Y.data(), Inv.data(), DX.data(), DX.data()); });
  };
  auto ConvSilu = [&](const Tensor &X, Parameter &Conv, const Tensor &Pre, const Tensor &DAct, Tensor &DX) {
    const CausalConv C{N, X.cols(), SeqLen, Conv.Value.cols()};
    onBackendElseHost(
        Backend, {readsOf(X), readsOf(Pre), readsOf(DAct), readsOf(Conv.Value), readsOf(Conv.Grad)},
        {writesOf(DX), writesOf(Conv.Grad)},
        [&] {
          return Backend.causalConvSiluBackward(C, X.data(), Conv.Value.data(), Pre.data(), DAct.data(), DX.data(),
                                                Conv.Grad.data());
        },
        [&] {
          causalConvSiluBackward(C, X.data(), Conv.Value.data(), Pre.data(), DAct.data(), DX.data(), Conv.Grad.data());
        });
  };
  L2Norm(S.Q, S.InvQ, DQ);
  L2Norm(S.K, S.InvK, DK);
  ConvSilu(S.ConvQ, *W.ConvQ, S.PreQ, DQ, DCq);
  ConvSilu(S.ConvK, *W.ConvK, S.PreK, DK, DCk);
  ConvSilu(S.ConvV, *W.ConvV, S.PreV, DV, DCv);
  columnParallelBackward(
      Tp, Xn, nullptr, {&W.Q->Value, &W.K->Value, &W.V->Value, &W.Z->Value, &W.B->Value, &W.A->Value},
      {&DCq, &DCk, &DCv, &DZ, &DB, &DA}, {&W.Q->Grad, &W.K->Grad, &W.V->Grad, &W.Z->Grad, &W.B->Grad, &W.A->Grad}, DXn);
}
