//===- model/MoeBlock.cpp -------------------------------------------------===//
#include "model/MoeBlock.h"

#include "model/ModelOps.h"
#include "model/Router.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert {

namespace {
/// Megatron-Core adds it to the sum of the sigmoid scores it normalises.
constexpr double AuxScoreEpsilon = 1e-20;
} // namespace

int64_t MoeSaved::moeBytes() const {
  int64_t B = Scores.bytes() + ExpertIn.bytes() + G.bytes() + U.bytes() + Dispatch.CombinedCopies.bytes();
  B += int64_t((TopIdx.size() + TopW.size() + Fraction.size()) * 4);
  B += int64_t((Dispatch.Permutation.size() + Dispatch.RowOfCopy.size()) * 8);
  return B;
}

void MoeSaved::dropMoe() { *this = MoeSaved(); }

namespace {
/// Rows [Begin, Begin + Rows) of a 2-D tensor as a pointer.
float *rowsAt(Tensor &T, int64_t Begin) { return T.data() + Begin * T.cols(); }

/// Rows per local expert of the tensors the expert GEMMs run on: this
/// rank's dispatched rows, or under etp > 1 the whole group's.
std::vector<int64_t> expertRows(const MoeSaved &S) {
  if (S.EtpCounts.empty())
    return S.Dispatch.TokensPerLocalExpert;
  size_t Local = S.Dispatch.TokensPerLocalExpert.size();
  std::vector<int64_t> Rows(Local, 0);
  for (size_t I = 0; I < S.EtpCounts.size(); ++I)
    Rows[I % Local] += S.EtpCounts[I];
  return Rows;
}

/// The experts' weights and the rows' saved products
/// (ComputeBackend::mlpForward/Backward).
MlpArgs expertMlpArgs(const MoeWeights &W, const std::vector<int64_t> &Counts, int64_t H, int64_t F, MoeSaved &S) {
  MlpArgs A;
  A.Counts = Counts;
  A.Hidden = H;
  A.Ffn = F;
  A.X = S.ExpertIn.data();
  for (size_t L = 0; L < Counts.size(); ++L) {
    A.Gate.push_back(W.Gate[L]->Value.data());
    A.Up.push_back(W.Up[L]->Value.data());
    A.Down.push_back(W.Down[L]->Value.data());
  }
  A.G = S.G.data();
  A.U = S.U.data();
  A.Act = S.Act.numel() ? S.Act.data() : nullptr;
  return A;
}

/// The experts' weight gradients the backward adds to.
void addGradients(MlpArgs &A, const MoeWeights &W) {
  for (size_t L = 0; L < W.Gate.size(); ++L) {
    A.DGate.push_back(W.Gate[L]->Grad.data());
    A.DUp.push_back(W.Up[L]->Grad.data());
    A.DDown.push_back(W.Down[L]->Grad.data());
  }
}
} // namespace

int64_t MoeBlock::gatheredBegin(const MoeSaved &S, int64_t R, int64_t L) const {
  int64_t Ranks = Etp.size(), Local = Dispatcher.localExperts(), Begin = 0;
  for (int64_t E = 0; E < Local; ++E)
    for (int64_t Q = 0; Q < Ranks; ++Q) {
      if (E == L && Q == R)
        return Begin;
      Begin += S.EtpCounts[size_t(Q * Local + E)];
    }
  return Begin;
}

Tensor MoeBlock::gatherExpertRows(const Tensor &Mine, MoeSaved &S) {
  int64_t Ranks = Etp.size(), Local = Dispatcher.localExperts(), H = Config.Hidden;
  if (S.EtpCounts.empty()) {
    // The forward learns every rank's rows per local expert (exact in
    // float: far below 2^24); the backward's gather reuses the layout.
    std::vector<float> Count(static_cast<size_t>(Local)), Counts(static_cast<size_t>(Ranks * Local));
    for (int64_t L = 0; L < Local; ++L)
      Count[size_t(L)] = float(S.Dispatch.TokensPerLocalExpert[size_t(L)]);
    Etp.allGather(Count.data(), Counts.data(), size_t(Local));
    S.EtpCounts.assign(Counts.begin(), Counts.end());
    S.EtpPaddedRows = 0;
    for (int64_t R = 0; R < Ranks; ++R)
      S.EtpPaddedRows = std::max(S.EtpPaddedRows, std::accumulate(S.EtpCounts.begin() + R * Local,
                                                                  S.EtpCounts.begin() + (R + 1) * Local, int64_t(0)));
  }
  int64_t Padded = S.EtpPaddedRows;
  int64_t Total = std::accumulate(S.EtpCounts.begin(), S.EtpCounts.end(), int64_t(0));
  std::vector<float> Send(size_t(Padded * H), 0.0f), Recv(size_t(Ranks * Padded * H));
  std::copy_n(Mine.data(), Mine.numel(), Send.begin());
  Etp.allGather(Send.data(), Recv.data(), Send.size());
  Tensor All({Total, H});
  for (int64_t R = 0; R < Ranks; ++R) {
    int64_t From = 0;
    for (int64_t L = 0; L < Local; ++L) {
      int64_t Rows = S.EtpCounts[size_t(R * Local + L)];
      std::copy_n(Recv.data() + (R * Padded + From) * H, Rows * H, rowsAt(All, gatheredBegin(S, R, L)));
      From += Rows;
    }
  }
  return All;
}

Tensor MoeBlock::reduceExpertRows(const Tensor &Partial, const MoeSaved &S) {
  int64_t Ranks = Etp.size(), Local = Dispatcher.localExperts(), H = Config.Hidden;
  int64_t Padded = S.EtpPaddedRows;
  std::vector<float> Send(size_t(Ranks * Padded * H), 0.0f), Recv(size_t(Padded * H));
  for (int64_t R = 0; R < Ranks; ++R) {
    int64_t To = 0;
    for (int64_t L = 0; L < Local; ++L) {
      int64_t Rows = S.EtpCounts[size_t(R * Local + L)];
      const float *From = Partial.data() + gatheredBegin(S, R, L) * H;
      std::copy_n(From, Rows * H, Send.data() + (R * Padded + To) * H);
      To += Rows;
    }
  }
  Etp.reduceScatterSum(Send.data(), Recv.data(), size_t(Padded * H));
  int64_t Me = Etp.rank(), Rows = 0;
  for (int64_t L = 0; L < Local; ++L)
    Rows += S.EtpCounts[size_t(Me * Local + L)];
  Tensor Out({Rows, H});
  std::copy_n(Recv.data(), Rows * H, Out.data());
  return Out;
}

double MoeBlock::forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, bool CountTokens,
                         const uint64_t *BalanceKeys, const void *KeepFor) {
  int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  // Router scores and each token's experts.
  S.Scores = matmul(Xn, W.Router->Value);
  if (BalanceKeys)
    Router::forceBalancedLogits(S.Scores.data(), N, E, BalanceKeys);
  Router(Config).route(S.Scores.data(), N, S.TopIdx, S.TopW, W.Bias ? W.Bias->State.Value.data() : nullptr);
  if (CountTokens && W.Bias)
    for (int32_t Expert : S.TopIdx)
      W.Bias->Tokens[size_t(Expert)] += 1.0f;
  // Load-balancing statistics over every token of the micro batch: copies
  // per expert, score sums per expert, and the token count. Megatron-Core's
  // load-balancing loss sees neither the expert bias nor the groups: it
  // counts each token's top-k by the scores over all experts, and normalises
  // sigmoid scores to sum to one (moe_utils.py
  // compute_routing_scores_for_aux_loss, router.py _apply_aux_loss). For a
  // softmax router without groups those are the routed experts.
  std::vector<float> Stats(2 * E + 1, 0.0f);
  std::vector<int32_t> Order(static_cast<size_t>(E));
  for (int64_t I = 0; I < N; ++I) {
    const float *Sc = S.Scores.row(I);
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
  if (movesOnBackend()) {
    routedOnBackend(W, Xn, S, Y, KeepFor);
    S.Valid = true;
    return Aux;
  }
  S.ExpertIn = Dispatcher.dispatch(Xn, S.TopIdx, S.Dispatch);
  // Under etp > 1 every rank of the group runs all of the group's rows
  // through its columns of the experts (Megatron's all-gather over the
  // expert tensor-parallel group after the all-to-all).
  bool Split = Etp.size() > 1;
  if (Split)
    S.ExpertIn = gatherExpertRows(S.ExpertIn, S);
  int64_t Rows = S.ExpertIn.rows(), H = Config.Hidden, F = Config.MoeFfnHidden / Etp.size();
  S.G.resize({Rows, F});
  S.U.resize({Rows, F});
  Tensor Out({Rows, H});
  std::vector<int64_t> Counts = expertRows(S);
  S.Act.resize({Rows, F});
  MlpArgs A = expertMlpArgs(W, Counts, H, F, S);
  A.Y = Out.data();
  mlpForwardKeeping(currentBackend(), A, KeepFor, /*KeepRows=*/true);
  if (Split)
    Out = reduceExpertRows(Out, S);
  Y = Dispatcher.combine(Out, S.TopW, S.Dispatch);
  S.Valid = true;
  return Aux;
}

void MoeBlock::recomputeAct(MoeSaved &S) { S.Act = swiGlu(S.G, S.U); }

bool MoeBlock::movesOnBackend() const { return Etp.size() == 1; }

void MoeBlock::routedOnBackend(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  const int64_t N = Xn.rows(), H = Config.Hidden, F = Config.MoeFfnHidden, Copies = N * Config.TopK;
  Dispatcher.route(N, S.TopIdx, S.Dispatch);
  // A rank alone in its ep group permutes its tokens straight into its
  // experts' rows and combines their outputs where they are.
  const bool Exchanged = !Dispatcher.local();
  const int64_t Rows = Exchanged ? int64_t(S.Dispatch.RecvExpertOrder.size()) : Copies;
  S.ExpertIn.resize({Rows, H});
  S.G.resize({Rows, F});
  S.U.resize({Rows, F});
  S.Act.resize({Rows, F});
  Tensor Out({Rows, H}), Sent, Combined;
  if (Exchanged) {
    Sent = Tensor({Copies, H});
    Combined = Tensor({Copies, H});
  }
  // The rows, the experts' outputs and what the exchanges move are the
  // backend's alone where they are kept for the backward (which reads the
  // experts' input rows and their outputs back in send order there).
  std::vector<HeldArray> Held;
  if (KeepFor)
    for (Tensor *T : {&S.ExpertIn, &Out, &Sent, &Combined})
      if (T->numel())
        Held.push_back({T->data(), T->numel(), HeldArray::BackendOnly});
  HeldArrays Hold(Backend, Held);
  Backend.permuteRows(S.Dispatch.moves(), Xn.data(), Exchanged ? Sent.data() : S.ExpertIn.data());
  if (Exchanged)
    Dispatcher.toExperts(Sent, S.Dispatch, S.ExpertIn);
  MlpArgs A = expertMlpArgs(W, S.Dispatch.TokensPerLocalExpert, H, F, S);
  A.Y = Out.data();
  mlpForwardKeeping(Backend, A, KeepFor, /*KeepRows=*/true);
  if (Exchanged)
    Dispatcher.toSenders(Out, S.Dispatch, Combined);
  else
    Combined = std::move(Out); // the same storage, which stays held
  if (Y.shape() != std::vector<int64_t>{N, H})
    Y = Tensor({N, H});
  Backend.unpermuteRows(S.Dispatch.moves(S.TopW.data()), Combined.data(), Y.data());
  if (KeepFor)
    Backend.keepArrays(KeepFor, {{Combined.data(), Combined.numel(), HeldArray::BackendOnly}});
  S.Dispatch.CombinedCopies = std::move(Combined);
}

void MoeBlock::routedOnBackendBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW,
                                       Tensor &DXn) {
  ComputeBackend &Backend = currentBackend();
  const int64_t N = S.Dispatch.Tokens, H = Config.Hidden, F = Config.MoeFfnHidden, Copies = N * Config.TopK;
  if (S.Dispatch.CombinedCopies.rows() != Copies)
    throw std::logic_error("the routed experts' backward runs before their forward");
  const bool Exchanged = !Dispatcher.local();
  const int64_t Rows = S.ExpertIn.rows();
  // What passes between the moves, the exchanges and the experts' products
  // stays on the backend.
  Tensor DOut({Rows, H}), DIn({Rows, H}), DCombined, DSent;
  if (Exchanged) {
    DCombined = Tensor({Copies, H});
    DSent = Tensor({Copies, H});
  }
  std::vector<HeldArray> Held;
  for (Tensor *T : {&DOut, &DIn, &DCombined, &DSent})
    if (T->numel())
      Held.push_back({T->data(), T->numel(), HeldArray::BackendOnly});
  HeldArrays Hold(Backend, Held);
  DW.assign(size_t(Copies), 0.0f);
  Backend.unpermuteRowsBackward(S.Dispatch.moves(S.TopW.data()), DY.data(), S.Dispatch.CombinedCopies.data(),
                                Exchanged ? DCombined.data() : DOut.data(), DW.data());
  if (Exchanged)
    Dispatcher.toExperts(DCombined, S.Dispatch, DOut);
  MlpArgs A = expertMlpArgs(W, S.Dispatch.TokensPerLocalExpert, H, F, S);
  A.DY = DOut.data();
  A.DX = DIn.data();
  addGradients(A, W);
  Backend.mlpBackward(A);
  if (Exchanged)
    Dispatcher.toSenders(DIn, S.Dispatch, DSent);
  if (DXn.shape() != std::vector<int64_t>{N, H})
    DXn = Tensor({N, H});
  Backend.permuteRowsBackward(S.Dispatch.moves(), Exchanged ? DSent.data() : DIn.data(), DXn.data());
}

Tensor MoeBlock::exchangedExpertsBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW) {
  const int64_t H = Config.Hidden, F = Config.MoeFfnHidden / Etp.size();
  Tensor DOut = Dispatcher.combineBackward(DY, S.TopW, S.Dispatch, DW);
  const bool Split = Etp.size() > 1;
  if (Split)
    DOut = gatherExpertRows(DOut, S);
  Tensor DIn({DOut.rows(), H});
  MlpArgs A = expertMlpArgs(W, expertRows(S), H, F, S);
  A.DY = DOut.data();
  A.DX = DIn.data();
  addGradients(A, W);
  currentBackend().mlpBackward(A);
  if (Split)
    DIn = reduceExpertRows(DIn, S);
  return Dispatcher.dispatchBackward(DIn, S.Dispatch);
}

void MoeBlock::backward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, const Tensor &DY, double AuxGradScale,
                        Tensor &DXn) {
  int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  std::vector<float> DW;
  if (movesOnBackend())
    routedOnBackendBackward(W, S, DY, DW, DXn);
  else
    DXn = exchangedExpertsBackward(W, S, DY, DW);

  // Router: gradients of the scores from the routing weights and from the
  // aux loss (f_e is a constant), then through softmax or sigmoid.
  Tensor DLogits({N, E});
  std::vector<double> DScore(E);
  double AuxPerScore = AuxGradScale * Config.AuxLossCoeff * double(E) / S.GroupTokens;
  for (int64_t I = 0; I < N; ++I) {
    const float *Sc = S.Scores.row(I);
    if (Config.SigmoidRouter) {
      // The aux loss reads a_j = s_j / (sum s + eps): ds_i = (g_i - sum_j g_j a_j) / (sum s + eps).
      double Div = std::accumulate(Sc, Sc + E, 0.0) + AuxScoreEpsilon, Dot = 0;
      for (int64_t J = 0; J < E; ++J)
        Dot += AuxPerScore * S.Fraction[J] * (Sc[J] / Div);
      for (int64_t J = 0; J < E; ++J)
        DScore[J] = (AuxPerScore * S.Fraction[J] - Dot) / Div;
    } else {
      for (int64_t J = 0; J < E; ++J)
        DScore[J] = AuxPerScore * S.Fraction[J];
    }
    const float *Wt = &S.TopW[I * K];
    const float *Dw = &DW[I * K];
    const int32_t *Idx = &S.TopIdx[I * K];
    const double Scaling = Config.TopKScaling;
    if (Router(Config).normalisedWeights()) {
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
}

} // namespace moert
