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

/// Y = X W + b.
Tensor linear(const Tensor &X, const Parameter &W, const Parameter &B) {
  Tensor Y = matmul(X, W.Value);
  for (int64_t R = 0; R < Y.rows(); ++R)
    for (int64_t C = 0; C < Y.cols(); ++C)
      Y.row(R)[C] += B.Value[C];
  return Y;
}

/// Backward of linear: accumulates DW and Db, returns DX.
Tensor linearBackward(const Tensor &X, Parameter &W, Parameter &B, const Tensor &DY) {
  Tensor DX;
  matmulBackward(X, W.Value, DY, W.Grad, DX);
  for (int64_t R = 0; R < DY.rows(); ++R)
    for (int64_t C = 0; C < DY.cols(); ++C)
      B.Grad[C] += DY.row(R)[C];
  return DX;
}

/// LayerNorm over the last dimension (weight and bias), saving its input and
/// statistics.
Tensor towerLayerNorm(const Tensor &X, const Parameter &W, const Parameter &B, double Eps,
                      VisionSaved::LayerNormSaved &S) {
  S.X = X;
  return layerNormForward(X, W.Value, B.Value, Eps, S.Mean, S.Rstd);
}

Tensor towerLayerNormBackward(const VisionSaved::LayerNormSaved &S, Parameter &W, Parameter &B, const Tensor &DY) {
  return moert::layerNormBackward(S.X, W.Value, S.Mean, S.Rstd, DY, W.Grad, B.Grad);
}

/// Rotates dims (i, i + d/2) of every head of X [N, Heads x d] by the
/// patch's angle i (Inverse: back).
void rotate(Tensor &X, int64_t HeadDim, const std::vector<float> &Cos, const std::vector<float> &Sin, bool Inverse) {
  const int64_t Half = HeadDim / 2, Heads = X.cols() / HeadDim;
  for (int64_t R = 0; R < X.rows(); ++R)
    for (int64_t H = 0; H < Heads; ++H) {
      float *V = X.row(R) + H * HeadDim;
      for (int64_t I = 0; I < Half; ++I) {
        const float C = Cos[size_t(R * Half + I)], S = Inverse ? -Sin[size_t(R * Half + I)] : Sin[size_t(R * Half + I)];
        const float A = V[I], B = V[I + Half];
        V[I] = A * C - B * S;
        V[I + Half] = B * C + A * S;
      }
    }
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
/// splits them): Q, K, V [N, Heads x d].
void attendImages(const std::vector<ImageGrid> &Grids, int64_t Heads, int64_t HeadDim, const Tensor &Q, const Tensor &K,
                  const Tensor &V, Tensor &Out, Tensor &Lse) {
  Out = Tensor(Q.shape());
  Lse = Tensor({Heads * Q.rows()});
  for (int64_t I = 0; I < Lse.numel(); ++I)
    Lse[I] = -std::numeric_limits<float>::infinity();
  std::vector<float> Scratch;
  int64_t Begin = 0;
  for (const ImageGrid &G : Grids)
    for (int64_t F = 0; F < G.Frames; ++F) {
      const int64_t N = G.Rows * G.Cols, Off = Begin * Heads * HeadDim;
      BlockShape Shape{AttentionDims{1, N, Heads, Heads, HeadDim, 0}, N, float(1.0 / std::sqrt(double(HeadDim)))};
      // Queries placed after every key: the span pair is wholly visible.
      attendSpanForward(Shape, Q.data() + Off, TokenSpan{0, N, N}, K.data() + Off, V.data() + Off, TokenSpan{0, 0, N},
                        Out.data() + Off, Lse.data() + Begin * Heads, Scratch);
      Begin += N;
    }
}

void attendImagesBackward(const std::vector<ImageGrid> &Grids, int64_t Heads, int64_t HeadDim, const Tensor &Q,
                          const Tensor &K, const Tensor &V, const Tensor &Out, const Tensor &Lse, const Tensor &DOut,
                          Tensor &DQ, Tensor &DK, Tensor &DV) {
  DQ = Tensor(Q.shape());
  DK = Tensor(K.shape());
  DV = Tensor(V.shape());
  std::vector<float> Scratch, Delta;
  int64_t Begin = 0;
  for (const ImageGrid &G : Grids)
    for (int64_t F = 0; F < G.Frames; ++F) {
      const int64_t N = G.Rows * G.Cols, Off = Begin * Heads * HeadDim;
      // Delta [Heads, N] = rowsum(DOut * Out), laid out like Lse.
      Delta.assign(size_t(Heads * N), 0);
      for (int64_t T = 0; T < N; ++T)
        for (int64_t H = 0; H < Heads; ++H) {
          double Sum = 0;
          for (int64_t C = 0; C < HeadDim; ++C)
            Sum += double(DOut[Off + (T * Heads + H) * HeadDim + C]) * Out[Off + (T * Heads + H) * HeadDim + C];
          Delta[size_t(H * N + T)] = float(Sum);
        }
      BlockShape Shape{AttentionDims{1, N, Heads, Heads, HeadDim, 0}, N, float(1.0 / std::sqrt(double(HeadDim)))};
      attendSpanBackward(Shape, Q.data() + Off, TokenSpan{0, N, N}, K.data() + Off, V.data() + Off, TokenSpan{0, 0, N},
                         Lse.data() + Begin * Heads, Delta.data(), DOut.data() + Off, DQ.data() + Off, DK.data() + Off,
                         DV.data() + Off, Scratch);
      Begin += N;
    }
}

/// Columns [Begin, Begin + Width) of X.
Tensor columns(const Tensor &X, int64_t Begin, int64_t Width) {
  Tensor Y({X.rows(), Width});
  for (int64_t R = 0; R < X.rows(); ++R)
    std::copy(X.row(R) + Begin, X.row(R) + Begin + Width, Y.row(R));
  return Y;
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
    // Host loops add the biases and interpolate the position table, and run
    // the LayerNorms where the backend has no kernel for them; only the
    // matrices are the compute backend's alone.
    P->ReadOnHost = Shape.size() == 1 || Name == "pos_embed";
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

/// The merger's forward: X [N, Hidden] -> [N / unit, OutHidden].
template <typename M> Tensor mergerForward(const M &W, const VisionConfig &C, const Tensor &X, VisionSaved::Merger &S) {
  const int64_t Wide = C.Hidden * C.mergeUnit();
  Tensor Xn;
  if (W.NormAfterConcat) {
    Tensor Cat = X;
    Cat.reshape({X.rows() / C.mergeUnit(), Wide});
    Xn = towerLayerNorm(Cat, *W.Norm, *W.NormBias, C.Eps, S.Ln);
  } else {
    Xn = towerLayerNorm(X, *W.Norm, *W.NormBias, C.Eps, S.Ln);
    Xn.reshape({X.rows() / C.mergeUnit(), Wide});
  }
  S.Xn = Xn;
  S.H1 = linear(Xn, *W.Fc1, *W.Fc1Bias);
  S.Act = gelu(GeluForm::Erf, S.H1);
  return linear(S.Act, *W.Fc2, *W.Fc2Bias);
}

template <typename M>
Tensor mergerBackward(const M &W, const VisionConfig &C, const VisionSaved::Merger &S, const Tensor &DY) {
  Tensor DAct = linearBackward(S.Act, *W.Fc2, *W.Fc2Bias, DY);
  Tensor DXn = linearBackward(S.Xn, *W.Fc1, *W.Fc1Bias, geluBackward(GeluForm::Erf, S.H1, DAct));
  if (!W.NormAfterConcat)
    DXn.reshape({DXn.rows() * C.mergeUnit(), C.Hidden});
  Tensor DX = towerLayerNormBackward(S.Ln, *W.Norm, *W.NormBias, DXn);
  DX.reshape({DX.numel() / C.Hidden, C.Hidden});
  return DX;
}

} // namespace

VisionOutput VisionTower::forward(const Tensor &Patches, const std::vector<ImageGrid> &Grids, VisionSaved &S) {
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
  S.Grids = Grids;
  S.Patches = Patches;
  Tensor X = linear(Patches, *W->Patch, *W->PatchBias);
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
      for (int64_t I = 0; I < H; ++I)
        X.row(P)[I] += Weight[K] * W->Pos->Value.row(Index[K])[I];
    }
    for (int64_t I = 0; I < Half; ++I) {
      const double Angle = float(double(I < D / 4 ? Row : Col) * Freq[size_t(I % (D / 4))]);
      S.Cos[size_t(P * Half + I)] = float(std::cos(Angle));
      S.Sin[size_t(P * Half + I)] = float(std::sin(Angle));
    }
  });
  VisionOutput Out;
  S.Blocks.assign(size_t(C.Depth), {});
  S.Deepstack.assign(W->Deepstack.size(), {});
  for (int64_t L = 0; L < C.Depth; ++L) {
    const Weights::Block &B = W->Blocks[size_t(L)];
    VisionSaved::Block &Sb = S.Blocks[size_t(L)];
    Sb.Xn1 = towerLayerNorm(X, *B.Norm1, *B.Norm1Bias, C.Eps, Sb.Ln1);
    Tensor Qkv = linear(Sb.Xn1, *B.Qkv, *B.QkvBias);
    Sb.Q = columns(Qkv, 0, H);
    Sb.K = columns(Qkv, H, H);
    Sb.V = columns(Qkv, 2 * H, H);
    rotate(Sb.Q, D, S.Cos, S.Sin, false);
    rotate(Sb.K, D, S.Cos, S.Sin, false);
    attendImages(Grids, C.Heads, D, Sb.Q, Sb.K, Sb.V, Sb.Attn, Sb.Lse);
    addInto(X, linear(Sb.Attn, *B.Proj, *B.ProjBias));
    Sb.Xn2 = towerLayerNorm(X, *B.Norm2, *B.Norm2Bias, C.Eps, Sb.Ln2);
    Sb.H1 = linear(Sb.Xn2, *B.Fc1, *B.Fc1Bias);
    Sb.Act = gelu(GeluForm::Tanh, Sb.H1);
    addInto(X, linear(Sb.Act, *B.Fc2, *B.Fc2Bias));
    for (size_t J = 0; J < C.DeepstackLayers.size(); ++J)
      if (C.DeepstackLayers[J] == L)
        Out.Deepstack.push_back(mergerForward(W->Deepstack[J], C, X, S.Deepstack[J]));
  }
  Out.Tokens = mergerForward(W->Final, C, X, S.Final);
  return Out;
}

Tensor VisionTower::backward(const VisionSaved &S, const Tensor &DTokens, const std::vector<Tensor> &DDeepstack) {
  const VisionConfig &C = Config;
  const int64_t H = C.Hidden, D = C.headDim();
  if (!DDeepstack.empty() && DDeepstack.size() != C.DeepstackLayers.size())
    throw std::invalid_argument("vision tower: one deepstack gradient per feature, or none");
  Tensor DX = mergerBackward(W->Final, C, S.Final, DTokens);
  for (int64_t L = C.Depth - 1; L >= 0; --L) {
    for (size_t J = 0; J < C.DeepstackLayers.size(); ++J)
      if (C.DeepstackLayers[J] == L && !DDeepstack.empty())
        addInto(DX, mergerBackward(W->Deepstack[J], C, S.Deepstack[J], DDeepstack[J]));
    const Weights::Block &B = W->Blocks[size_t(L)];
    const VisionSaved::Block &Sb = S.Blocks[size_t(L)];
    Tensor DAct = linearBackward(Sb.Act, *B.Fc2, *B.Fc2Bias, DX);
    Tensor DXn2 = linearBackward(Sb.Xn2, *B.Fc1, *B.Fc1Bias, geluBackward(GeluForm::Tanh, Sb.H1, DAct));
    addInto(DX, towerLayerNormBackward(Sb.Ln2, *B.Norm2, *B.Norm2Bias, DXn2));
    Tensor DAttn = linearBackward(Sb.Attn, *B.Proj, *B.ProjBias, DX);
    Tensor DQ, DK, DV;
    attendImagesBackward(S.Grids, C.Heads, D, Sb.Q, Sb.K, Sb.V, Sb.Attn, Sb.Lse, DAttn, DQ, DK, DV);
    rotate(DQ, D, S.Cos, S.Sin, true);
    rotate(DK, D, S.Cos, S.Sin, true);
    Tensor DQkv({DX.rows(), 3 * H});
    for (int64_t R = 0; R < DX.rows(); ++R) {
      std::copy(DQ.row(R), DQ.row(R) + H, DQkv.row(R));
      std::copy(DK.row(R), DK.row(R) + H, DQkv.row(R) + H);
      std::copy(DV.row(R), DV.row(R) + H, DQkv.row(R) + 2 * H);
    }
    addInto(DX,
            towerLayerNormBackward(Sb.Ln1, *B.Norm1, *B.Norm1Bias, linearBackward(Sb.Xn1, *B.Qkv, *B.QkvBias, DQkv)));
  }
  // The interpolated position table and the patch embedding.
  for (int64_t P = 0; P < DX.rows(); ++P)
    for (int K = 0; K < 4; ++K) {
      float *G = W->Pos->Grad.row(S.PosIndex[size_t(4 * P + K)]);
      const float Weight = S.PosWeight[size_t(4 * P + K)];
      for (int64_t I = 0; I < H; ++I)
        G[I] += Weight * DX.row(P)[I];
    }
  return linearBackward(S.Patches, *W->Patch, *W->PatchBias, DX);
}
