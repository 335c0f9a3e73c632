//===- model/VisionTower.cpp - Qwen3-VL's vision encoder ------------------===//
#include "model/VisionTower.h"

#include "kernels/Backend.h"
#include "model/ModelOps.h"
#include "parallel/cp/AttentionBlock.h"
#include "parallel/tp/SequenceParallelLinear.h"

#include <cmath>
#include <limits>
#include <stdexcept>

using namespace moert;

namespace {

/// What the tower keeps of its activations for the backward: held on the
/// compute backend from their making and kept there under KeepFor
/// (ComputeBackend::keepArrays) until the caller releases it; without
/// KeepFor, on the host. LayerNorm inputs and linear outputs in fp32
/// (HeldArray::Wide: the biases add to them there), what products alone
/// read in the backend's precision.
class TowerArrays {
public:
  TowerArrays(const void *KeepFor) : KeepFor(KeepFor) {}
  static HeldArray wide(Tensor &T) { return HeldArray::wide(T.data(), T.numel()); }
  static HeldArray made(Tensor &T) { return {T.data(), T.numel(), HeldArray::BackendOnly, false, /*Unset=*/true}; }
  /// Holds Arrays for the scope's lifetime.
  HeldArrays hold(const std::vector<HeldArray> &Arrays) const {
    return HeldArrays(currentBackend(), KeepFor ? Arrays : std::vector<HeldArray>());
  }
  /// Keeps the held Arrays past their hold.
  void keep(const std::vector<HeldArray> &Arrays) const {
    if (KeepFor)
      currentBackend().keepArrays(KeepFor, Arrays);
  }

private:
  const void *KeepFor;
};

/// Y = X W + b, into Y (its storage kept where it has the product's shape
/// already: held on the backend).
void linear(const Tensor &X, const Parameter &W, const Parameter &B, Tensor &Y) {
  matmul(X, W.Value, Y);
  ComputeBackend &Backend = currentBackend();
  onBackendElseHost(
      Backend, {readsOf(Y), readsOf(B.Value)}, {writesOf(Y)},
      [&] { return Backend.addRowBias(Y.rows(), Y.cols(), B.Value.data(), Y.data()); },
      [&] { addRowBias(Y.rows(), Y.cols(), B.Value.data(), Y.data()); });
}

/// Backward of linear: accumulates DW and Db, DX written (shaped as
/// linear's X) where it is not null.
void linearBackward(const Tensor &X, Parameter &W, Parameter &B, const Tensor &DY, Tensor *DX) {
  if (DX)
    matmulBackward(X, W.Value, DY, W.Grad, *DX);
  else
    matmulWeightGradient(X, DY, W.Grad);
  ComputeBackend &Backend = currentBackend();
  onBackendElseHost(
      Backend, {readsOf(DY), readsOf(B.Grad)}, {writesOf(B.Grad)},
      [&] { return Backend.addColumnSums(DY.rows(), DY.cols(), DY.data(), B.Grad.data()); },
      [&] { addColumnSums(DY.rows(), DY.cols(), DY.data(), B.Grad.data()); });
}

/// LayerNorm over the last dimension (weight and bias) of its saved input
/// S.X into Y, saving the statistics (where the tower keeps its arrays,
/// where they are made, for the backward there).
void towerLayerNorm(const Parameter &W, const Parameter &B, double Eps, VisionSaved::LayerNormSaved &S, Tensor &Y,
                    const TowerArrays &Arrays) {
  const int64_t Rows = S.X.rows();
  S.Mean.resize(size_t(Rows));
  S.Rstd.resize(size_t(Rows));
  const std::vector<HeldArray> Statistics = {HeldArray::wide(S.Mean.data(), Rows),
                                             HeldArray::wide(S.Rstd.data(), Rows)};
  HeldArrays Hold = Arrays.hold(Statistics);
  layerNormForward(S.X, W.Value, B.Value, Eps, S.Mean, S.Rstd, Y);
  Arrays.keep(Statistics);
}

void towerLayerNormBackward(const VisionSaved::LayerNormSaved &S, Parameter &W, Parameter &B, const Tensor &DY,
                            Tensor &DX) {
  moert::layerNormBackward(S.X, W.Value, S.Mean, S.Rstd, DY, W.Grad, B.Grad, DX);
}

/// Rotates dims (i, i + d/2) of every head of X [N, Heads x d] by the
/// patch's angle i (Inverse: back).
void rotate(Tensor &X, int64_t HeadDim, const std::vector<float> &Cos, const std::vector<float> &Sin, bool Inverse) {
  const RopeColumns Columns = RopeColumns::halves(HeadDim, HeadDim);
  const int64_t Groups = X.cols() / HeadDim;
  ComputeBackend &Backend = currentBackend();
  onBackendElseHost(
      Backend, {readsOf(X), readsOf(Cos), readsOf(Sin)}, {writesOf(X)},
      [&] { return Backend.ropeByTable(X.rows(), Groups, Columns, X.data(), Cos.data(), Sin.data(), Inverse); },
      [&] { ropeByTable(X.rows(), Groups, Columns, X.data(), Cos.data(), Sin.data(), Inverse); });
}

/// torch.linspace(0, End, Steps) in float32, as the position interpolation
/// computes it (the first half from the start, the rest from the end).
float linspaceAt(int64_t I, int64_t Steps, float End) {
  if (Steps == 1)
    return 0;
  const float Step = End / float(Steps - 1);
  return I < Steps / 2 ? Step * float(I) : End - Step * float(Steps - 1 - I);
}

/// Calls Fn(patch index, row, col) for every patch of the grids, in merge order.
template <typename F> void forEachPatch(const std::vector<ImageGrid> &Grids, int64_t Merge, F Fn) {
  int64_t P = 0;
  for (const ImageGrid &G : Grids)
    for (int64_t T = 0; T < G.Frames; ++T)
      for (int64_t Br = 0; Br < G.Rows / Merge; ++Br)
        for (int64_t Bc = 0; Bc < G.Cols / Merge; ++Bc)
          for (int64_t Ir = 0; Ir < Merge; ++Ir)
            for (int64_t Ic = 0; Ic < Merge; ++Ic)
              Fn(P++, Br * Merge + Ir, Bc * Merge + Ic, G);
}

/// Bidirectional attention within each frame of each image (as cu_seqlens
/// splits them): Q, K, V [N, Heads x d]; Out, and Lse [Heads * N], written
/// where they lie (each frame's block is the first to reach its queries).
void attendImages(const std::vector<ImageGrid> &Grids, int64_t Heads, int64_t HeadDim, const Tensor &Q, const Tensor &K,
                  const Tensor &V, Tensor &Out, Tensor &Lse) {
  if (Out.shape() != Q.shape() || Lse.numel() != Heads * Q.rows())
    throw std::logic_error("vision tower: attention's output or statistics sized for other tokens");
  // Every frame's statistics are a part of Lse: made whole where they are
  // held (without the host's values), before the frames write their parts.
  currentBackend().zero(Lse.data(), Lse.numel());
  std::vector<float> Scratch;
  int64_t Begin = 0;
  for (const ImageGrid &G : Grids)
    for (int64_t F = 0; F < G.Frames; ++F) {
      const int64_t N = G.Rows * G.Cols, Off = Begin * Heads * HeadDim;
      BlockShape Shape{AttentionDims{1, N, Heads, Heads, HeadDim, 0}, N, float(1.0 / std::sqrt(double(HeadDim)))};
      // Queries placed after every key: the span pair is wholly visible.
      attendSpanForward(Shape, Q.data() + Off, TokenSpan{0, N, N}, K.data() + Off, V.data() + Off, TokenSpan{0, 0, N},
                        Out.data() + Off, Lse.data() + Begin * Heads, Scratch, /*Fresh=*/true);
      Begin += N;
    }
}

void attendImagesBackward(const std::vector<ImageGrid> &Grids, int64_t Heads, int64_t HeadDim, const Tensor &Q,
                          const Tensor &K, const Tensor &V, const Tensor &Out, const Tensor &Lse, const Tensor &DOut,
                          Tensor &DQ, Tensor &DK, Tensor &DV) {
  for (Tensor *D : {&DQ, &DK, &DV}) {
    D->ensureShape(Q.shape());
    currentBackend().zero(D->data(), D->numel());
  }
  // Delta = rowsum(DOut * Out), laid out like Lse (each frame's [Heads, N]
  // in its place): made and read where the backend computes.
  std::vector<float> Scratch, Delta(size_t(Lse.numel()));
  HeldArrays HoldDelta(currentBackend(), {HeldArray::wide(Delta.data(), int64_t(Delta.size()))});
  currentBackend().zero(Delta.data(), int64_t(Delta.size()));
  int64_t Begin = 0;
  for (const ImageGrid &G : Grids)
    for (int64_t F = 0; F < G.Frames; ++F) {
      const int64_t N = G.Rows * G.Cols, Off = Begin * Heads * HeadDim;
      float *FrameDelta = Delta.data() + Begin * Heads;
      currentBackend().attentionDelta(1, N, Heads, HeadDim, Out.data() + Off, DOut.data() + Off, FrameDelta);
      BlockShape Shape{AttentionDims{1, N, Heads, Heads, HeadDim, 0}, N, float(1.0 / std::sqrt(double(HeadDim)))};
      attendSpanBackward(Shape, Q.data() + Off, TokenSpan{0, N, N}, K.data() + Off, V.data() + Off, TokenSpan{0, 0, N},
                         Lse.data() + Begin * Heads, FrameDelta, DOut.data() + Off, DQ.data() + Off, DK.data() + Off,
                         DV.data() + Off, Scratch);
      Begin += N;
    }
}

/// Columns [Begin, Begin + Width) of X into Y (ComputeBackend::copyColumns),
/// or Y into them where Into.
void copyColumns(const Tensor &X, int64_t Begin, int64_t Width, Tensor &Y) {
  currentBackend().copyColumns({X.rows(), 1, Width, X.cols(), 0, Y.cols(), 0}, X.data() + Begin, Y.data());
}
void copyIntoColumns(const Tensor &Y, Tensor &X, int64_t Begin) {
  currentBackend().copyColumns({Y.rows(), 1, Y.cols(), Y.cols(), 0, X.cols(), 0}, Y.data(), X.data() + Begin);
}

} // namespace

struct VisionTower::Weights {
  Parameter *Patch = nullptr, *PatchBias = nullptr, *Pos = nullptr;
  struct Block {
    Parameter *Norm1 = nullptr, *Norm1Bias = nullptr, *Qkv = nullptr, *QkvBias = nullptr;
    Parameter *Proj = nullptr, *ProjBias = nullptr, *Norm2 = nullptr, *Norm2Bias = nullptr;
    Parameter *Fc1 = nullptr, *Fc1Bias = nullptr, *Fc2 = nullptr, *Fc2Bias = nullptr;
  };
  struct Merger {
    Parameter *Norm = nullptr, *NormBias = nullptr, *Fc1 = nullptr, *Fc1Bias = nullptr, *Fc2 = nullptr,
              *Fc2Bias = nullptr;
    bool NormAfterConcat = false;
  };
  std::vector<Block> Blocks;
  Merger Final;
  std::vector<Merger> Deepstack;
};

namespace {
template <typename T> int64_t vectorBytes(const std::vector<T> &V) { return int64_t(V.size() * sizeof(T)); }
int64_t layerNormBytes(const VisionSaved::LayerNormSaved &L) {
  return L.X.bytes() + vectorBytes(L.Mean) + vectorBytes(L.Rstd);
}
int64_t mergerBytes(const VisionSaved::Merger &M) {
  return layerNormBytes(M.Ln) + M.Xn.bytes() + M.H1.bytes() + M.Act.bytes();
}
} // namespace

int64_t VisionSaved::bytes() const {
  int64_t B = Patches.bytes() + vectorBytes(Cos) + vectorBytes(Sin) + vectorBytes(PosIndex) + vectorBytes(PosWeight) +
              mergerBytes(Final);
  for (const Block &K : Blocks)
    B += layerNormBytes(K.Ln1) + layerNormBytes(K.Ln2) + K.Xn1.bytes() + K.Q.bytes() + K.K.bytes() + K.V.bytes() +
         K.Attn.bytes() + K.Lse.bytes() + K.Xn2.bytes() + K.H1.bytes() + K.Act.bytes();
  for (const Merger &M : Deepstack)
    B += mergerBytes(M);
  return B;
}

int64_t VisionOutput::bytes() const {
  int64_t B = Tokens.bytes();
  for (const Tensor &F : Deepstack)
    B += F.bytes();
  return B;
}

VisionTower::VisionTower(const VisionConfig &C, uint64_t Seed) : Config(C), W(std::make_unique<Weights>()) {
  if (C.Depth <= 0 || C.Hidden <= 0 || C.Heads <= 0 || C.Hidden % C.Heads || C.headDim() % 4 || C.FfnHidden <= 0 ||
      C.OutHidden <= 0 || C.MergeSize <= 0 || C.PositionGrid <= 0)
    throw std::invalid_argument("vision tower: invalid dimensions (the head width must divide by 4)");
  for (int64_t L : C.DeepstackLayers)
    if (L < 0 || L >= C.Depth)
      throw std::invalid_argument("vision tower: deepstack layer " + std::to_string(L) + " is not a block");
  const double Std = 0.02;
  auto Add = [&](const std::string &Name, std::vector<int64_t> Shape, double InitStd, bool One = false) {
    auto P = std::make_unique<Parameter>();
    P->Name = "vision." + Name;
    P->Value = initParameter(Seed, P->Name, Shape, InitStd);
    if (One)
      for (int64_t I = 0; I < P->Value.numel(); ++I)
        P->Value[I] = 1.0f;
    P->Grad = Tensor(P->Value.shape());
    Params.push_back(std::move(P));
    return Params.back().get();
  };
  const int64_t H = C.Hidden, Wide = H * C.mergeUnit();
  W->Patch = Add("patch_embed", {C.patchDim(), H}, Std);
  W->PatchBias = Add("patch_embed_bias", {H}, 0.0);
  W->Pos = Add("pos_embed", {C.PositionGrid * C.PositionGrid, H}, Std);
  for (int64_t L = 0; L < C.Depth; ++L) {
    const std::string Pre = "blocks." + std::to_string(L) + ".";
    Weights::Block B;
    B.Norm1 = Add(Pre + "norm1", {H}, 0.0, true);
    B.Norm1Bias = Add(Pre + "norm1_bias", {H}, 0.0);
    B.Qkv = Add(Pre + "qkv", {H, 3 * H}, Std);
    B.QkvBias = Add(Pre + "qkv_bias", {3 * H}, 0.0);
    B.Proj = Add(Pre + "proj", {H, H}, Std);
    B.ProjBias = Add(Pre + "proj_bias", {H}, 0.0);
    B.Norm2 = Add(Pre + "norm2", {H}, 0.0, true);
    B.Norm2Bias = Add(Pre + "norm2_bias", {H}, 0.0);
    B.Fc1 = Add(Pre + "fc1", {H, C.FfnHidden}, Std);
    B.Fc1Bias = Add(Pre + "fc1_bias", {C.FfnHidden}, 0.0);
    B.Fc2 = Add(Pre + "fc2", {C.FfnHidden, H}, Std);
    B.Fc2Bias = Add(Pre + "fc2_bias", {H}, 0.0);
    W->Blocks.push_back(B);
  }
  auto Merger = [&](const std::string &Pre, bool AfterConcat) {
    Weights::Merger M;
    M.NormAfterConcat = AfterConcat;
    M.Norm = Add(Pre + "norm", {AfterConcat ? Wide : H}, 0.0, true);
    M.NormBias = Add(Pre + "norm_bias", {AfterConcat ? Wide : H}, 0.0);
    M.Fc1 = Add(Pre + "fc1", {Wide, Wide}, Std);
    M.Fc1Bias = Add(Pre + "fc1_bias", {Wide}, 0.0);
    M.Fc2 = Add(Pre + "fc2", {Wide, C.OutHidden}, Std);
    M.Fc2Bias = Add(Pre + "fc2_bias", {C.OutHidden}, 0.0);
    return M;
  };
  W->Final = Merger("merger.", false);
  for (size_t J = 0; J < C.DeepstackLayers.size(); ++J)
    W->Deepstack.push_back(Merger("deepstack." + std::to_string(J) + ".", true));
}

VisionTower::~VisionTower() = default;

std::vector<Parameter *> VisionTower::parameters() {
  std::vector<Parameter *> Out;
  for (auto &P : Params)
    Out.push_back(P.get());
  return Out;
}

Parameter *VisionTower::find(const std::string &Name) {
  for (auto &P : Params)
    if (P->Name == "vision." + Name)
      return P.get();
  return nullptr;
}

namespace {

/// The merger's forward: X [N, Hidden] -> Y [N / unit, OutHidden], kept on
/// the backend in fp32 under KeepOutputFor where it is not null (the
/// decoder's rows read it there), else on the host.
template <typename M>
void mergerForward(const M &W, const VisionConfig &C, const Tensor &X, VisionSaved::Merger &S, Tensor &Y,
                   const TowerArrays &Arrays, const void *KeepOutputFor) {
  const int64_t Wide = C.Hidden * C.mergeUnit(), Rows = X.rows() / C.mergeUnit();
  Y = Tensor({Rows, C.OutHidden});
  const std::vector<HeldArray> Output = {TowerArrays::wide(Y)};
  HeldArrays HoldOutput(currentBackend(), KeepOutputFor ? Output : std::vector<HeldArray>());
  S.Ln.X = W.NormAfterConcat ? Tensor({Rows, Wide}) : Tensor(X.shape());
  S.Xn = Tensor(S.Ln.X.shape());
  S.H1 = Tensor({Rows, Wide});
  S.Act = Tensor({Rows, Wide});
  const std::vector<HeldArray> Kept = {TowerArrays::wide(S.Ln.X), TowerArrays::made(S.Xn), TowerArrays::wide(S.H1),
                                       TowerArrays::made(S.Act)};
  HeldArrays Hold = Arrays.hold(Kept);
  currentBackend().copy(X.data(), S.Ln.X.data(), X.numel());
  towerLayerNorm(*W.Norm, *W.NormBias, C.Eps, S.Ln, S.Xn, Arrays);
  S.Xn.reshape({Rows, Wide});
  linear(S.Xn, *W.Fc1, *W.Fc1Bias, S.H1);
  gelu(GeluForm::Erf, S.H1, S.Act);
  linear(S.Act, *W.Fc2, *W.Fc2Bias, Y);
  Arrays.keep(Kept);
  if (KeepOutputFor)
    currentBackend().keepArrays(KeepOutputFor, Output);
}

/// Its backward from DY: the input's gradient added to DX.
template <typename M>
void mergerBackward(const M &W, const VisionConfig &C, const VisionSaved::Merger &S, const Tensor &DY, Tensor &DX) {
  Tensor DAct(S.Act.shape()), DH1(S.H1.shape()), DXn(S.Xn.shape()), DLn(S.Ln.X.shape());
  HeldArrays Hold(currentBackend(),
                  {TowerArrays::made(DAct), TowerArrays::made(DH1), TowerArrays::made(DXn), TowerArrays::wide(DLn)});
  linearBackward(S.Act, *W.Fc2, *W.Fc2Bias, DY, &DAct);
  geluBackward(GeluForm::Erf, S.H1, DAct, DH1);
  linearBackward(S.Xn, *W.Fc1, *W.Fc1Bias, DH1, &DXn);
  DXn.reshape(S.Ln.X.shape());
  towerLayerNormBackward(S.Ln, *W.Norm, *W.NormBias, DXn, DLn);
  currentBackend().add(DX.numel(), DX.data(), DLn.data(), DX.data());
}

} // namespace

VisionOutput VisionTower::forward(const Tensor &Patches, const std::vector<ImageGrid> &Grids, VisionSaved &S,
                                  const void *KeepFor, const void *KeepOutputFor) {
  const VisionConfig &C = Config;
  const int64_t H = C.Hidden, D = C.headDim(), Half = D / 2, Grid = C.PositionGrid;
  int64_t N = 0;
  for (const ImageGrid &G : Grids) {
    if (G.Frames <= 0 || G.Rows <= 0 || G.Cols <= 0 || G.Rows % C.MergeSize || G.Cols % C.MergeSize)
      throw std::invalid_argument("vision tower: an image's rows and columns of patches must divide by the merge size");
    N += G.patches();
  }
  if (Patches.rows() != N || Patches.cols() != C.patchDim())
    throw std::invalid_argument("vision tower: patches are not [" + std::to_string(N) + ", " +
                                std::to_string(C.patchDim()) + "]");
  ComputeBackend &Backend = currentBackend();
  const TowerArrays Arrays(KeepFor);
  S.Grids = Grids;
  S.Patches = Patches;
  // Position table interpolation and the 2-D RoPE angles, per patch.
  S.PosIndex.assign(size_t(4 * N), 0);
  S.PosWeight.assign(size_t(4 * N), 0);
  S.Cos.assign(size_t(N * Half), 0);
  S.Sin.assign(size_t(N * Half), 0);
  std::vector<double> Freq(size_t(D / 4));
  for (int64_t J = 0; J < D / 4; ++J)
    Freq[size_t(J)] = 1.0 / std::pow(C.RopeTheta, double(2 * J) / double(Half));
  forEachPatch(Grids, C.MergeSize, [&](int64_t P, int64_t Row, int64_t Col, const ImageGrid &G) {
    const float Hf = linspaceAt(Row, G.Rows, float(Grid - 1)), Wf = linspaceAt(Col, G.Cols, float(Grid - 1));
    const int64_t H0 = int64_t(Hf), W0 = int64_t(Wf), H1 = std::min(H0 + 1, Grid - 1), W1 = std::min(W0 + 1, Grid - 1);
    const float Dh = Hf - float(H0), Dw = Wf - float(W0);
    const int64_t Index[4] = {H0 * Grid + W0, H0 * Grid + W1, H1 * Grid + W0, H1 * Grid + W1};
    const float Weight[4] = {(1 - Dh) * (1 - Dw), (1 - Dh) * Dw, Dh * (1 - Dw), Dh * Dw};
    for (int K = 0; K < 4; ++K) {
      S.PosIndex[size_t(4 * P + K)] = Index[K];
      S.PosWeight[size_t(4 * P + K)] = Weight[K];
    }
    for (int64_t I = 0; I < Half; ++I) {
      const double Angle = float(double(I < D / 4 ? Row : Col) * Freq[size_t(I % (D / 4))]);
      S.Cos[size_t(P * Half + I)] = float(std::cos(Angle));
      S.Sin[size_t(P * Half + I)] = float(std::sin(Angle));
    }
  });
  // The residual stream, in fp32 where the backend keeps it; the patches,
  // angles and interpolation weights, which the backward reads again, kept.
  Tensor X({N, H});
  const std::vector<HeldArray> Inputs = {{S.Patches.data(), S.Patches.numel(), HeldArray::Read},
                                         HeldArray::wide(S.Cos.data(), int64_t(S.Cos.size())),
                                         HeldArray::wide(S.Sin.data(), int64_t(S.Sin.size())),
                                         HeldArray::wide(S.PosWeight.data(), int64_t(S.PosWeight.size()))};
  std::vector<HeldArray> Held = Inputs;
  Held.push_back(TowerArrays::wide(X));
  HeldArrays HoldStream = Arrays.hold(Held);
  linear(S.Patches, *W->Patch, *W->PatchBias, X);
  onBackendElseHost(
      Backend, {readsOf(X), readsOf(W->Pos->Value)}, {writesOf(X)},
      [&] {
        return Backend.interpolateRowsForward(N, H, S.PosIndex.data(), S.PosWeight.data(), W->Pos->Value.data(),
                                              X.data());
      },
      [&] { interpolateRowsForward(N, H, S.PosIndex.data(), S.PosWeight.data(), W->Pos->Value.data(), X.data()); });
  Arrays.keep(Inputs);
  VisionOutput Out;
  S.Blocks.assign(size_t(C.Depth), {});
  S.Deepstack.assign(W->Deepstack.size(), {});
  for (int64_t L = 0; L < C.Depth; ++L) {
    const Weights::Block &B = W->Blocks[size_t(L)];
    VisionSaved::Block &Sb = S.Blocks[size_t(L)];
    for (Tensor *T : {&Sb.Ln1.X, &Sb.Xn1, &Sb.Q, &Sb.K, &Sb.V, &Sb.Attn, &Sb.Ln2.X, &Sb.Xn2})
      *T = Tensor({N, H});
    Sb.Lse = Tensor({C.Heads * N});
    Sb.H1 = Tensor({N, C.FfnHidden});
    Sb.Act = Tensor({N, C.FfnHidden});
    Tensor Qkv({N, 3 * H}), Projected({N, H}), Fc2Out({N, H});
    using A = TowerArrays;
    const std::vector<HeldArray> Kept = {A::wide(Sb.Ln1.X), A::made(Sb.Xn1),  A::made(Sb.Q),   A::made(Sb.K),
                                         A::made(Sb.V),     A::made(Sb.Attn), A::wide(Sb.Lse), A::wide(Sb.Ln2.X),
                                         A::made(Sb.Xn2),   A::wide(Sb.H1),   A::made(Sb.Act)};
    std::vector<HeldArray> Block = Kept;
    for (Tensor *T : {&Qkv, &Projected, &Fc2Out})
      Block.push_back(A::wide(*T));
    HeldArrays Hold = Arrays.hold(Block);
    Backend.copy(X.data(), Sb.Ln1.X.data(), X.numel());
    towerLayerNorm(*B.Norm1, *B.Norm1Bias, C.Eps, Sb.Ln1, Sb.Xn1, Arrays);
    linear(Sb.Xn1, *B.Qkv, *B.QkvBias, Qkv);
    copyColumns(Qkv, 0, H, Sb.Q);
    copyColumns(Qkv, H, H, Sb.K);
    copyColumns(Qkv, 2 * H, H, Sb.V);
    rotate(Sb.Q, D, S.Cos, S.Sin, false);
    rotate(Sb.K, D, S.Cos, S.Sin, false);
    attendImages(Grids, C.Heads, D, Sb.Q, Sb.K, Sb.V, Sb.Attn, Sb.Lse);
    linear(Sb.Attn, *B.Proj, *B.ProjBias, Projected);
    Backend.add(X.numel(), X.data(), Projected.data(), X.data());
    Backend.copy(X.data(), Sb.Ln2.X.data(), X.numel());
    towerLayerNorm(*B.Norm2, *B.Norm2Bias, C.Eps, Sb.Ln2, Sb.Xn2, Arrays);
    linear(Sb.Xn2, *B.Fc1, *B.Fc1Bias, Sb.H1);
    gelu(GeluForm::Tanh, Sb.H1, Sb.Act);
    linear(Sb.Act, *B.Fc2, *B.Fc2Bias, Fc2Out);
    Backend.add(X.numel(), X.data(), Fc2Out.data(), X.data());
    Arrays.keep(Kept);
    for (size_t J = 0; J < C.DeepstackLayers.size(); ++J)
      if (C.DeepstackLayers[J] == L)
        mergerForward(W->Deepstack[J], C, X, S.Deepstack[J], Out.Deepstack.emplace_back(), Arrays, KeepOutputFor);
  }
  mergerForward(W->Final, C, X, S.Final, Out.Tokens, Arrays, KeepOutputFor);
  return Out;
}

Tensor VisionTower::backward(const VisionSaved &S, const Tensor &DTokens, const std::vector<Tensor> &DDeepstack,
                             bool PatchesGradient) {
  const VisionConfig &C = Config;
  const int64_t H = C.Hidden, D = C.headDim(), N = S.Patches.rows();
  if (!DDeepstack.empty() && DDeepstack.size() != C.DeepstackLayers.size())
    throw std::invalid_argument("vision tower: one deepstack gradient per feature, or none");
  ComputeBackend &Backend = currentBackend();
  using A = TowerArrays;
  // The residual stream's gradient, in fp32 where the backend keeps it.
  Tensor DX({N, H});
  HeldArrays HoldStream(Backend, {A::wide(DX)});
  Backend.zero(DX.data(), DX.numel());
  mergerBackward(W->Final, C, S.Final, DTokens, DX);
  for (int64_t L = C.Depth - 1; L >= 0; --L) {
    for (size_t J = 0; J < C.DeepstackLayers.size(); ++J)
      if (C.DeepstackLayers[J] == L && !DDeepstack.empty())
        mergerBackward(W->Deepstack[J], C, S.Deepstack[J], DDeepstack[J], DX);
    const Weights::Block &B = W->Blocks[size_t(L)];
    const VisionSaved::Block &Sb = S.Blocks[size_t(L)];
    Tensor DAct(Sb.Act.shape()), DH1(Sb.H1.shape()), DXn2({N, H}), DLn({N, H}), DAttn({N, H}), DQ({N, H}), DK({N, H}),
        DV({N, H}), DQkv({N, 3 * H}), DXn1({N, H});
    HeldArrays Hold(Backend, {A::made(DAct), A::made(DH1), A::made(DXn2), A::wide(DLn), A::made(DAttn), A::wide(DQ),
                              A::wide(DK), A::wide(DV), A::made(DQkv), A::made(DXn1)});
    linearBackward(Sb.Act, *B.Fc2, *B.Fc2Bias, DX, &DAct);
    geluBackward(GeluForm::Tanh, Sb.H1, DAct, DH1);
    linearBackward(Sb.Xn2, *B.Fc1, *B.Fc1Bias, DH1, &DXn2);
    towerLayerNormBackward(Sb.Ln2, *B.Norm2, *B.Norm2Bias, DXn2, DLn);
    Backend.add(DX.numel(), DX.data(), DLn.data(), DX.data());
    linearBackward(Sb.Attn, *B.Proj, *B.ProjBias, DX, &DAttn);
    attendImagesBackward(S.Grids, C.Heads, D, Sb.Q, Sb.K, Sb.V, Sb.Attn, Sb.Lse, DAttn, DQ, DK, DV);
    rotate(DQ, D, S.Cos, S.Sin, true);
    rotate(DK, D, S.Cos, S.Sin, true);
    copyIntoColumns(DQ, DQkv, 0);
    copyIntoColumns(DK, DQkv, H);
    copyIntoColumns(DV, DQkv, 2 * H);
    linearBackward(Sb.Xn1, *B.Qkv, *B.QkvBias, DQkv, &DXn1);
    towerLayerNormBackward(Sb.Ln1, *B.Norm1, *B.Norm1Bias, DXn1, DLn);
    Backend.add(DX.numel(), DX.data(), DLn.data(), DX.data());
  }
  // The interpolated position table and the patch embedding.
  onBackendElseHost(
      Backend, {readsOf(DX), readsOf(W->Pos->Grad)}, {writesOf(W->Pos->Grad)},
      [&] {
        return Backend.interpolateRowsBackward(N, H, S.PosIndex.data(), S.PosWeight.data(), DX.data(),
                                               W->Pos->Grad.data());
      },
      [&] { interpolateRowsBackward(N, H, S.PosIndex.data(), S.PosWeight.data(), DX.data(), W->Pos->Grad.data()); });
  Tensor DPatches;
  linearBackward(S.Patches, *W->Patch, *W->PatchBias, DX, PatchesGradient ? &DPatches : nullptr);
  return DPatches;
}
