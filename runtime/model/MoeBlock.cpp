//===- model/MoeBlock.cpp -------------------------------------------------===//
#include "model/MoeBlock.h"

#include "model/ModelOps.h"
#include "model/Router.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace moert {

int64_t MoeSaved::moeBytes() const {
  int64_t B = Scores.bytes() + ExpertIn.bytes() + G.bytes() + U.bytes() + Dispatch.CombinedCopies.bytes();
  B += int64_t((TopIdx.size() + TopW.size() + Fraction.size()) * 4);
  B += int64_t((Dispatch.Permutation.size() + Dispatch.RowOfCopy.size()) * 8);
  return B;
}

void MoeSaved::dropMoe() { *this = MoeSaved(); }

namespace {
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

/// Held while the block runs: the backend's alone, or wide (fp32, for sums).
HeldArray temporary(Tensor &T) { return {T.data(), T.numel(), HeldArray::BackendOnly}; }
HeldArray temporarySum(Tensor &T) { return HeldArray::wide(T.data(), T.numel()); }
} // namespace

RouterArgs MoeBlock::routerArgs(int64_t Tokens, const MoeWeights &W) const {
  RouterArgs R;
  R.Tokens = Tokens;
  R.Router = routerSpec(Config);
  R.Bias = W.Bias ? W.Bias->State.Value.data() : nullptr;
  return R;
}

MoeBlock::EtpLayout MoeBlock::etpLayout(MoeSaved &S) const {
  const int64_t Ranks = Etp.size(), Local = Dispatcher.localExperts();
  if (S.EtpCounts.empty()) {
    // The forward learns every rank's rows per local expert (exact in
    // float: far below 2^24); the backward reuses them.
    std::vector<float> Count(static_cast<size_t>(Local)), Counts(static_cast<size_t>(Ranks * Local));
    for (int64_t L = 0; L < Local; ++L)
      Count[size_t(L)] = float(S.Dispatch.TokensPerLocalExpert[size_t(L)]);
    Etp.allGather(Count.data(), Counts.data(), size_t(Local));
    S.EtpCounts.assign(Counts.begin(), Counts.end());
  }
  EtpLayout Y;
  Y.Mine = std::accumulate(S.Dispatch.TokensPerLocalExpert.begin(), S.Dispatch.TokensPerLocalExpert.end(), int64_t(0));
  std::vector<int64_t> RankBegin(size_t(Ranks) + 1, 0);
  for (int64_t Q = 0; Q < Ranks; ++Q) {
    int64_t Rows = 0;
    for (int64_t L = 0; L < Local; ++L)
      Rows += S.EtpCounts[size_t(Q * Local + L)];
    Y.RowsOf.push_back(Rows);
    RankBegin[size_t(Q) + 1] = RankBegin[size_t(Q)] + Rows;
  }
  // Expert-major, then rank: row j of the gathered rows is row
  // RankMajorRow[j] of the ranks' rows one after another.
  for (int64_t L = 0; L < Local; ++L)
    for (int64_t Q = 0; Q < Ranks; ++Q) {
      int64_t From = RankBegin[size_t(Q)];
      for (int64_t E = 0; E < L; ++E)
        From += S.EtpCounts[size_t(Q * Local + E)];
      for (int64_t R = 0; R < S.EtpCounts[size_t(Q * Local + L)]; ++R)
        Y.RankMajorRow.push_back(From + R);
    }
  Y.ExpertMajorRow.assign(Y.RankMajorRow.size(), 0);
  for (size_t J = 0; J < Y.RankMajorRow.size(); ++J)
    Y.ExpertMajorRow[size_t(Y.RankMajorRow[J])] = int64_t(J);
  return Y;
}

void MoeBlock::gatherExpertRows(const Tensor &Mine, const EtpLayout &Y, Tensor &All) {
  ComputeBackend &Backend = currentBackend();
  const int64_t H = Config.Hidden, Ranks = Etp.size();
  // Megatron's all-gather over the expert tensor-parallel group after the
  // all-to-all: each rank's rows to every rank (a rank's may differ in
  // number, so an all-to-all), then expert-major.
  Tensor RankMajor({int64_t(Y.RankMajorRow.size()), H});
  HeldArrays Hold(Backend, {temporary(RankMajor)});
  std::vector<size_t> SendCounts(static_cast<size_t>(Ranks), static_cast<size_t>(Y.Mine * H)),
      SendOffsets(static_cast<size_t>(Ranks), 0), RecvCounts, RecvOffsets;
  size_t Offset = 0;
  for (int64_t Rows : Y.RowsOf) {
    RecvCounts.push_back(size_t(Rows * H));
    RecvOffsets.push_back(Offset);
    Offset += size_t(Rows * H);
  }
  Backend.allToAllV(Mine.data(), SendCounts, SendOffsets, RankMajor.data(), RecvCounts, RecvOffsets, Etp);
  Backend.permuteRows(PermuteArgs::ofRows(Y.RankMajorRow, Y.ExpertMajorRow, H), RankMajor.data(), All.data());
}

void MoeBlock::reduceExpertRows(const Tensor &Partial, const EtpLayout &Y, Tensor &Mine) {
  ComputeBackend &Backend = currentBackend();
  const int64_t H = Config.Hidden, Ranks = Etp.size(), Count = Y.Mine * H;
  // Each rank's rows of every rank's partial sums to it (in the operands'
  // precision, as the rows travel), summed in rank order in fp32. Megatron
  // reduce-scatters them in the routing probabilities' dtype, which is the
  // activations' unless moe_router_dtype asks for fp32 (megatron-core
  // 0.16.1 transformer/moe/token_dispatcher.py:779, router.py:95).
  Tensor RankMajor({int64_t(Y.RankMajorRow.size()), H}), Partials({Ranks * Y.Mine, H});
  HeldArrays Hold(Backend, {temporary(RankMajor), temporarySum(Partials)});
  Backend.permuteRows(PermuteArgs::ofRows(Y.ExpertMajorRow, Y.RankMajorRow, H), Partial.data(), RankMajor.data());
  std::vector<size_t> SendCounts, SendOffsets, RecvCounts(static_cast<size_t>(Ranks), static_cast<size_t>(Count)),
      RecvOffsets;
  size_t Offset = 0;
  for (int64_t Q = 0; Q < Ranks; ++Q) {
    SendCounts.push_back(size_t(Y.RowsOf[size_t(Q)] * H));
    SendOffsets.push_back(Offset);
    Offset += SendCounts.back();
    RecvOffsets.push_back(size_t(Q * Count));
  }
  Backend.allToAllV(RankMajor.data(), SendCounts, SendOffsets, Partials.data(), RecvCounts, RecvOffsets, Etp);
  Backend.add(Count, Partials.data(), Partials.data() + Count, Mine.data());
  for (int64_t Q = 2; Q < Ranks; ++Q)
    Backend.add(Count, Mine.data(), Partials.data() + Q * Count, Mine.data());
}

double MoeBlock::forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, bool CountTokens,
                         const uint64_t *BalanceKeys, const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  const int64_t N = Xn.rows(), E = Config.Experts, K = Config.TopK;
  const Router Route(Config);
  // Router scores, each token's experts, and the load-balancing statistics
  // over every token of the micro batch.
  std::vector<float> Stats(2 * E + 1, 0.0f);
  RouterArgs R = routerArgs(N, W);
  if (Backend.takesRouting(R)) {
    // The logits, scores and routing weights stay on the backend (kept for
    // the combine and the backward); the experts and statistics come back
    // for the dispatcher and the all-reduce.
    S.Scores = Tensor({N, E});
    S.TopIdx.resize(size_t(N * K));
    S.TopW.resize(size_t(N * K));
    const std::vector<HeldArray> Routing = {temporarySum(S.Scores),
                                            HeldArray::wide(S.TopW.data(), int64_t(S.TopW.size()))};
    HeldArrays Hold(Backend, Routing);
    matmul(Xn, W.Router->Value, S.Scores);
    R.BalanceKeys = BalanceKeys;
    R.Scores = S.Scores.data();
    R.TopIdx = S.TopIdx.data();
    R.TopW = S.TopW.data();
    R.Stats = Stats.data();
    Backend.routeTokens(R);
    if (KeepFor)
      Backend.keepArrays(KeepFor, Routing);
    else
      for (const HeldArray &A : Routing)
        Backend.hostReads(A.Data, A.Count);
  } else {
    S.Scores = matmul(Xn, W.Router->Value);
    if (BalanceKeys)
      Router::forceBalancedLogits(S.Scores.data(), N, E, BalanceKeys);
    Route.route(S.Scores.data(), N, S.TopIdx, S.TopW, W.Bias ? W.Bias->State.Value.data() : nullptr);
    Route.stats(S.Scores.data(), N, Stats.data());
  }
  if (CountTokens && W.Bias)
    for (int32_t Expert : S.TopIdx)
      W.Bias->Tokens[size_t(Expert)] += 1.0f;
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
  routedExperts(W, Xn, S, Y, KeepFor);
  S.Valid = true;
  return Aux;
}

void MoeBlock::recomputeAct(MoeSaved &S, const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  S.Act = Tensor(S.G.shape());
  std::vector<HeldArray> Made;
  if (KeepFor)
    Made.push_back({S.Act.data(), S.Act.numel(), HeldArray::BackendOnly, false, /*Unset=*/true});
  HeldArrays Hold(Backend, Made);
  Backend.swiGluForward(S.G.numel(), S.G.data(), S.U.data(), S.Act.data());
  if (KeepFor)
    Backend.keepArrays(KeepFor, Made);
}

void MoeBlock::routedExperts(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, const void *KeepFor) {
  ComputeBackend &Backend = currentBackend();
  const int64_t N = Xn.rows(), H = Config.Hidden, F = Config.MoeFfnHidden / Etp.size(), Copies = N * Config.TopK;
  Dispatcher.route(N, S.TopIdx, S.Dispatch);
  Backend.permutationRouted(S.Dispatch.moves(), S.TopIdx.data(), Config.Experts);
  // A rank alone in its ep group permutes its tokens straight into its
  // experts' rows and combines their outputs where they are; under etp > 1
  // every rank of the group runs all of the group's rows through its
  // columns of the experts.
  const bool Exchanged = !Dispatcher.local(), Split = Etp.size() > 1;
  EtpLayout Layout;
  if (Split)
    Layout = etpLayout(S);
  const int64_t Mine = Exchanged ? int64_t(S.Dispatch.RecvExpertOrder.size()) : Copies;
  const int64_t Rows = Split ? int64_t(Layout.RankMajorRow.size()) : Mine;
  S.ExpertIn.resize({Rows, H});
  S.G.resize({Rows, F});
  S.U.resize({Rows, F});
  S.Act.resize({Rows, F});
  Tensor Out({Rows, H}), Sent, Combined, MineIn, MineOut;
  if (Exchanged) {
    Sent = Tensor({Copies, H});
    Combined = Tensor({Copies, H});
  }
  if (Split) {
    MineIn = Tensor({Mine, H});
    MineOut = Tensor({Mine, H});
  }
  // The rows, the experts' outputs and what the exchanges move are the
  // backend's alone where they are kept for the backward (which reads the
  // experts' input rows and their outputs back in send order there); what
  // passes between the etp exchanges is its own in any case (this rank's
  // share of the outputs in fp32, as it is summed).
  std::vector<HeldArray> Held;
  if (KeepFor)
    for (Tensor *T : {&S.ExpertIn, &Out, &Sent, &Combined})
      if (T->numel())
        Held.push_back(temporary(*T));
  if (Split)
    Held.insert(Held.end(), {temporary(MineIn), temporarySum(MineOut)});
  HeldArrays Hold(Backend, Held);
  Tensor &In = Split ? MineIn : S.ExpertIn;
  Backend.permuteRows(S.Dispatch.moves(), Xn.data(), Exchanged ? Sent.data() : In.data());
  if (Exchanged)
    Dispatcher.toExperts(Sent, S.Dispatch, In);
  if (Split)
    gatherExpertRows(MineIn, Layout, S.ExpertIn);
  MlpArgs A = expertMlpArgs(W, expertRows(S), H, F, S);
  A.Y = Out.data();
  mlpForwardKeeping(Backend, A, KeepFor, /*KeepRows=*/true);
  if (Split)
    reduceExpertRows(Out, Layout, MineOut);
  Tensor &Result = Split ? MineOut : Out;
  if (Exchanged)
    Dispatcher.toSenders(Result, S.Dispatch, Combined);
  else
    Combined = std::move(Result); // the same storage, which stays held
  if (Y.shape() != std::vector<int64_t>{N, H})
    Y = Tensor({N, H});
  Backend.unpermuteRows(S.Dispatch.moves(S.TopW.data()), Combined.data(), Y.data());
  if (KeepFor)
    Backend.keepArrays(KeepFor, {temporary(Combined)});
  else // the host's backward reads them
    Backend.hostReads(Combined.data(), Combined.numel());
  S.Dispatch.CombinedCopies = std::move(Combined);
}

void MoeBlock::routedExpertsBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW,
                                     Tensor &DXn) {
  ComputeBackend &Backend = currentBackend();
  const int64_t N = S.Dispatch.Tokens, H = Config.Hidden, F = Config.MoeFfnHidden / Etp.size(),
                Copies = N * Config.TopK;
  if (S.Dispatch.CombinedCopies.rows() != Copies)
    throw std::logic_error("the routed experts' backward runs before their forward");
  const bool Exchanged = !Dispatcher.local(), Split = Etp.size() > 1;
  EtpLayout Layout;
  if (Split)
    Layout = etpLayout(S);
  const int64_t Rows = S.ExpertIn.rows(), Mine = Split ? Layout.Mine : Rows;
  // What passes between the moves, the exchanges and the experts' products
  // stays on the backend.
  Tensor DOut({Rows, H}), DIn({Rows, H}), DCombined, DSent, MineDOut, MineDIn;
  if (Exchanged) {
    DCombined = Tensor({Copies, H});
    DSent = Tensor({Copies, H});
  }
  if (Split) {
    MineDOut = Tensor({Mine, H});
    MineDIn = Tensor({Mine, H});
  }
  std::vector<HeldArray> Held;
  for (Tensor *T : {&DOut, &DIn, &DCombined, &DSent, &MineDOut})
    if (T->numel())
      Held.push_back(temporary(*T));
  if (MineDIn.numel())
    Held.push_back(temporarySum(MineDIn));
  HeldArrays Hold(Backend, Held);
  Tensor &OutGrad = Split ? MineDOut : DOut;
  if (int64_t(DW.size()) != Copies)
    throw std::logic_error("the routing weights' gradients are sized for other tokens");
  Backend.unpermuteRowsBackward(S.Dispatch.moves(S.TopW.data()), DY.data(), S.Dispatch.CombinedCopies.data(),
                                Exchanged ? DCombined.data() : OutGrad.data(), DW.data());
  if (Exchanged)
    Dispatcher.toExperts(DCombined, S.Dispatch, OutGrad);
  if (Split)
    gatherExpertRows(MineDOut, Layout, DOut);
  MlpArgs A = expertMlpArgs(W, expertRows(S), H, F, S);
  A.DY = DOut.data();
  A.DX = DIn.data();
  addGradients(A, W);
  Backend.mlpBackward(A);
  if (Split)
    reduceExpertRows(DIn, Layout, MineDIn);
  Tensor &InGrad = Split ? MineDIn : DIn;
  if (Exchanged)
    Dispatcher.toSenders(InGrad, S.Dispatch, DSent);
  if (DXn.shape() != std::vector<int64_t>{N, H})
    DXn = Tensor({N, H});
  Backend.permuteRowsBackward(S.Dispatch.moves(), Exchanged ? DSent.data() : InGrad.data(), DXn.data());
}

void MoeBlock::backward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, const Tensor &DY, double AuxGradScale,
                        Tensor &DXn) {
  const int64_t N = Xn.rows(), E = Config.Experts;
  ComputeBackend &Backend = currentBackend();
  RouterArgs R = routerArgs(N, W);
  // The routing weights' gradients, made by the combine's backward and read
  // by the router's: where the backend routes, they stay there.
  std::vector<float> DW(size_t(N * Config.TopK));
  std::vector<HeldArray> Gradients;
  if (Backend.takesRouting(R))
    Gradients.push_back(HeldArray::wide(DW.data(), int64_t(DW.size())));
  HeldArrays KeepGradients(Backend, Gradients);
  routedExpertsBackward(W, S, DY, DW, DXn);

  // Router: gradients of the scores from the routing weights and from the
  // aux loss (f_e is a constant), then through softmax or sigmoid.
  Tensor DLogits({N, E});
  R.Scores = S.Scores.data();
  R.TopIdx = S.TopIdx.data();
  R.TopW = S.TopW.data();
  R.DTopW = DW.data();
  R.Fraction = S.Fraction.data();
  R.AuxPerScore = AuxGradScale * Config.AuxLossCoeff * double(E) / S.GroupTokens;
  R.DLogits = DLogits.data();
  if (Gradients.empty()) {
    Router(Config).backward(S.Scores.data(), N, S.TopIdx.data(), S.TopW.data(), DW.data(), S.Fraction.data(),
                            R.AuxPerScore, DLogits.data());
    matmulBackward(Xn, W.Router->Value, DLogits, W.Router->Grad, DXn, 1.0f);
    return;
  }
  HeldArrays Hold(Backend, {temporarySum(DLogits)});
  Backend.routeTokensBackward(R);
  matmulBackward(Xn, W.Router->Value, DLogits, W.Router->Grad, DXn, 1.0f);
}

} // namespace moert
