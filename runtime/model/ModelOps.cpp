//===- model/ModelOps.cpp -------------------------------------------------===//
#include "model/ModelOps.h"

#include "kernels/Backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

namespace moert {

Tensor rmsNormForward(const Tensor &X, const Tensor &W, double Eps, std::vector<float> &Rstd) {
  Tensor Y;
  rmsNormForward(X, W, Eps, Rstd, Y);
  return Y;
}

void rmsNormForward(const Tensor &X, const Tensor &W, double Eps, std::vector<float> &Rstd, Tensor &Y) {
  const std::vector<int64_t> Shape = {X.rows(), X.cols()};
  if (Y.shape() != Shape)
    Y.resize(Shape);
  Rstd.resize(X.rows());
  currentBackend().rmsNormForward(X.rows(), X.cols(), X.data(), W.data(), Eps, Y.data(), Rstd.data());
}

Tensor rmsNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW) {
  Tensor DX({X.rows(), X.cols()});
  rmsNormBackward(X, W, Rstd, DY, DW, DX);
  return DX;
}

void rmsNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW,
                     Tensor &DX) {
  if (DX.shape() != X.shape())
    throw std::invalid_argument("rmsNormBackward: DX is not shaped as X");
  currentBackend().rmsNormBackward(X.rows(), X.cols(), X.data(), W.data(), Rstd.data(), DY.data(), DX.data(),
                                   DW.data());
}

namespace {

/// Turns pair j of Columns in every group of each row by PositionOf(row, j)
/// x Theta^(-2j / RopeDim) (backwards when Inverse), on the host.
template <typename PositionOf>
void rotatePairs(Tensor &X, const RopeColumns &Columns, double Theta, bool Inverse, PositionOf Position) {
  currentBackend().hostReads(X.data(), X.numel());
  const int64_t N = X.rows(), Groups = X.cols() / Columns.Stride, Half = Columns.RopeDim / 2;
  std::vector<float> Cos(Half), Sin(Half);
  std::vector<double> Freq(Half);
  for (int64_t J = 0; J < Half; ++J)
    Freq[J] = std::pow(Theta, -2.0 * double(J) / double(Columns.RopeDim));
  for (int64_t I = 0; I < N; ++I) {
    for (int64_t J = 0; J < Half; ++J) {
      double Angle = double(Position(I, J)) * Freq[J];
      Cos[J] = float(std::cos(Angle));
      Sin[J] = float(Inverse ? -std::sin(Angle) : std::sin(Angle));
    }
    float *Row = X.row(I);
    for (int64_t G = 0; G < Groups; ++G) {
      float *Group = Row + G * Columns.Stride;
      for (int64_t J = 0; J < Half; ++J) {
        float &A = Group[Columns.first(J)], &B = Group[Columns.second(J)];
        float X1 = A, X2 = B;
        A = X1 * Cos[J] - X2 * Sin[J];
        B = X2 * Cos[J] + X1 * Sin[J];
      }
    }
  }
  currentBackend().hostWrote(X.data(), X.numel());
}

/// Rotary embedding by each row's one position: the backend's kernel where
/// it has one, else the host's loop.
void rotateByPosition(Tensor &X, const RopeColumns &Columns, const std::vector<int64_t> &Positions, double Theta,
                      bool Inverse) {
  if (!Columns.valid() || X.cols() % Columns.Stride)
    throw std::invalid_argument("rotary embedding: columns outside the row's groups");
  if (Columns.positions(X.rows()) != int64_t(Positions.size()))
    throw std::invalid_argument(Columns.Multimodal ? "rotary embedding: three positions per row expected"
                                                   : "rotary embedding: a position per row expected");
  if (currentBackend().rope(X.rows(), X.cols() / Columns.Stride, Columns, X.data(), Positions.data(), Theta, Inverse))
    return;
  rotatePairs(X, Columns, Theta, Inverse,
              [&](int64_t I, int64_t J) { return Positions[size_t(Columns.positionIndex(I, J))]; });
}

} // namespace

void applyRope(Tensor &X, int64_t HeadDim, const std::vector<int64_t> &Positions, double Theta, bool Inverse,
               int64_t RotaryDim) {
  rotateByPosition(X, RopeColumns::halves(HeadDim, RotaryDim > 0 ? RotaryDim : HeadDim), Positions, Theta, Inverse);
}

void applyMultimodalRope(Tensor &X, int64_t HeadDim, const MultimodalPositions &Positions, double Theta,
                         const std::array<int64_t, 3> &Sections, bool Inverse, int64_t RotaryDim) {
  // Each pair turns by the axis RopeColumns::axisOf names (the sections'
  // rule, declared there); a row's three positions side by side.
  RopeColumns Columns = RopeColumns::halves(HeadDim, RotaryDim > 0 ? RotaryDim : HeadDim);
  Columns.Multimodal = true;
  Columns.RowSection = Sections[1];
  Columns.ColumnSection = Sections[2];
  std::vector<int64_t> RowPositions(size_t(Columns.positions(X.rows())));
  for (size_t Axis = 0; Axis < 3; ++Axis) {
    const std::vector<int64_t> &Along = Positions.Axes[Axis];
    if (int64_t(Along.size()) < X.rows())
      throw std::invalid_argument("multimodal rotary embedding: a position per row expected");
    for (int64_t I = 0; I < X.rows(); ++I)
      RowPositions[size_t(3 * I) + Axis] = Along[size_t(I)];
  }
  rotateByPosition(X, Columns, RowPositions, Theta, Inverse);
}

MultimodalPositions multimodalPositions(const std::vector<int32_t> &Tokens, int32_t ImageToken,
                                        const std::vector<std::array<int64_t, 3>> &Grids, int64_t MergeSize,
                                        std::string &Error) {
  MultimodalPositions P;
  for (auto &Axis : P.Axes)
    Axis.reserve(Tokens.size());
  int64_t Next = 0; // the position after the largest so far
  size_t Image = 0;
  auto Text = [&]() {
    for (auto &Axis : P.Axes)
      Axis.push_back(Next);
    ++Next;
  };
  for (size_t I = 0; I < Tokens.size();) {
    if (Tokens[I] != ImageToken) {
      Text();
      ++I;
      continue;
    }
    if (Image >= Grids.size()) {
      Error = "token " + std::to_string(I) + " starts image " + std::to_string(Image + 1) + " of a sequence with " +
              std::to_string(Grids.size());
      return {};
    }
    const auto [Frames, Rows, Cols] = Grids[Image++];
    const int64_t H = Rows / MergeSize, W = Cols / MergeSize, Count = Frames * H * W;
    if (I + size_t(Count) > Tokens.size()) {
      Error = "image " + std::to_string(Image) + " needs " + std::to_string(Count) + " tokens from token " +
              std::to_string(I) + ", past the sequence's end";
      return {};
    }
    int64_t Largest = Next;
    for (int64_t T = 0; T < Frames; ++T)
      for (int64_t Y = 0; Y < H; ++Y)
        for (int64_t X = 0; X < W; ++X) {
          if (Tokens[I] != ImageToken) {
            Error = "image " + std::to_string(Image) + " has " + std::to_string(Count) + " tokens, token " +
                    std::to_string(I) + " is not one of them";
            return {};
          }
          P.Axes[0].push_back(Next + T);
          P.Axes[1].push_back(Next + Y);
          P.Axes[2].push_back(Next + X);
          Largest = std::max({Largest, Next + T, Next + Y, Next + X});
          ++I;
        }
    Next = Largest + 1;
  }
  return P;
}

void applyInterleavedRope(Tensor &X, int64_t Stride, int64_t Offset, int64_t RopeDim,
                          const std::vector<int64_t> &Positions, double Theta, bool Inverse) {
  rotateByPosition(X, RopeColumns{Stride, Offset, RopeDim, /*Interleaved=*/true}, Positions, Theta, Inverse);
}

Tensor add(const Tensor &A, const Tensor &B) {
  Tensor C = A;
  for (int64_t I = 0; I < C.numel(); ++I)
    C[I] += B[I];
  return C;
}

Tensor swiGlu(const Tensor &G, const Tensor &U) {
  Tensor A(G.shape());
  currentBackend().swiGluForward(G.numel(), G.data(), U.data(), A.data());
  return A;
}

void swiGluBackward(const Tensor &G, const Tensor &U, const Tensor &DAct, Tensor &DG, Tensor &DU) {
  DG.resize(G.shape());
  DU.resize(G.shape());
  currentBackend().swiGluBackward(G.numel(), G.data(), U.data(), DAct.data(), DG.data(), DU.data());
}

Tensor layerNormForward(const Tensor &X, const Tensor &W, const Tensor &B, double Eps, std::vector<float> &Mean,
                        std::vector<float> &Rstd) {
  Tensor Y;
  layerNormForward(X, W, B, Eps, Mean, Rstd, Y);
  return Y;
}

void layerNormForward(const Tensor &X, const Tensor &W, const Tensor &B, double Eps, std::vector<float> &Mean,
                      std::vector<float> &Rstd, Tensor &Y) {
  const int64_t N = X.rows(), C = X.cols();
  Mean.resize(size_t(N));
  Rstd.resize(size_t(N));
  Y.ensureShape(X.shape());
  if (currentBackend().layerNormForward(N, C, X.data(), W.data(), B.data(), Eps, Y.data(), Mean.data(), Rstd.data()))
    return;
  for (int64_t R = 0; R < N; ++R) {
    const float *In = X.row(R);
    double M = 0, Var = 0;
    for (int64_t I = 0; I < C; ++I)
      M += In[I];
    M /= double(C);
    for (int64_t I = 0; I < C; ++I)
      Var += (In[I] - M) * (In[I] - M);
    const double Rs = 1.0 / std::sqrt(Var / double(C) + Eps);
    Mean[size_t(R)] = float(M);
    Rstd[size_t(R)] = float(Rs);
    for (int64_t I = 0; I < C; ++I)
      Y.row(R)[I] = float((In[I] - M) * Rs) * W[I] + B[I];
  }
}

Tensor layerNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Mean,
                         const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW, Tensor &DB) {
  Tensor DX;
  layerNormBackward(X, W, Mean, Rstd, DY, DW, DB, DX);
  return DX;
}

void layerNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Mean, const std::vector<float> &Rstd,
                       const Tensor &DY, Tensor &DW, Tensor &DB, Tensor &DX) {
  const int64_t N = DY.rows(), C = DY.cols();
  DX.ensureShape(DY.shape());
  if (currentBackend().layerNormBackward(N, C, X.data(), W.data(), Mean.data(), Rstd.data(), DY.data(), DX.data(),
                                         DW.data(), DB.data()))
    return;
  std::vector<double> G;
  G.resize(size_t(C));
  for (int64_t R = 0; R < N; ++R) {
    const float *In = X.row(R), *Dy = DY.row(R);
    const double M = Mean[size_t(R)], Rs = Rstd[size_t(R)];
    double SumG = 0, SumGx = 0;
    for (int64_t I = 0; I < C; ++I) {
      const double Xhat = (In[I] - M) * Rs;
      DW[I] += float(Dy[I] * Xhat);
      DB[I] += Dy[I];
      G[size_t(I)] = double(Dy[I]) * W[I];
      SumG += G[size_t(I)];
      SumGx += G[size_t(I)] * Xhat;
    }
    for (int64_t I = 0; I < C; ++I) {
      const double Xhat = (In[I] - M) * Rs;
      DX.row(R)[I] = float(Rs * (G[size_t(I)] - SumG / double(C) - Xhat * SumGx / double(C)));
    }
  }
}

namespace {

double geluOf(GeluForm Kind, double X, double *Slope) {
  if (Kind == GeluForm::Erf) {
    const double Phi = 0.5 * (1 + std::erf(X / std::sqrt(2.0)));
    if (Slope)
      *Slope = Phi + X * std::exp(-0.5 * X * X) / std::sqrt(2 * M_PI);
    return X * Phi;
  }
  const double K = std::sqrt(2 / M_PI), U = K * (X + 0.044715 * X * X * X), T = std::tanh(U);
  if (Slope)
    *Slope = 0.5 * (1 + T) + 0.5 * X * (1 - T * T) * K * (1 + 3 * 0.044715 * X * X);
  return 0.5 * X * (1 + T);
}

} // namespace

float siluOf(float X) { return float(X * (1.0 / (1.0 + std::exp(-double(X))))); }

float siluSlope(float X) {
  const double S = 1.0 / (1.0 + std::exp(-double(X)));
  return float(S * (1 + X * (1 - S)));
}

void gatedRmsNormForward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W, double Eps,
                         float *Y, float *Rstd) {
  for (int64_t I = 0; I < Rows; ++I) {
    const float *Oi = O + I * Width, *Zi = Z + I * Width;
    double Sum = 0;
    for (int64_t C = 0; C < Width; ++C)
      Sum += double(Oi[C]) * Oi[C];
    const float R = float(1.0 / std::sqrt(Sum / double(Width) + Eps));
    Rstd[I] = R;
    float *Yi = Y + I * Width;
    for (int64_t C = 0; C < Width; ++C)
      Yi[C] = Oi[C] * R * W[C] * siluOf(Zi[C]);
  }
}

void gatedRmsNormBackward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W,
                          const float *Rstd, const float *DY, float *DO, float *DZ, float *DW) {
  for (int64_t I = 0; I < Rows; ++I) {
    const float *Oi = O + I * Width, *Zi = Z + I * Width, *Dy = DY + I * Width;
    const float R = Rstd[I];
    float *Do = DO + I * Width, *Dz = DZ + I * Width;
    double Dot = 0;
    for (int64_t C = 0; C < Width; ++C) {
      const float Nrm = Oi[C] * R, Gate = siluOf(Zi[C]);
      Dz[C] = Dy[C] * Nrm * W[C] * siluSlope(Zi[C]);
      DW[C] += Dy[C] * Nrm * Gate;
      Do[C] = Dy[C] * W[C] * Gate; // d(normalised)
      Dot += double(Do[C]) * Nrm;
    }
    for (int64_t C = 0; C < Width; ++C)
      Do[C] = float(R * (Do[C] - Oi[C] * R * Dot / double(Width)));
  }
}

void addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y) {
  for (int64_t R = 0; R < Rows; ++R)
    for (int64_t C = 0; C < Cols; ++C)
      Y[R * Cols + C] += Bias[C];
}

void addColumnSums(int64_t Rows, int64_t Cols, const float *DY, float *DBias) {
  for (int64_t R = 0; R < Rows; ++R)
    for (int64_t C = 0; C < Cols; ++C)
      DBias[C] += DY[R * Cols + C];
}

void interpolateRowsForward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *Table,
                            float *X) {
  for (int64_t P = 0; P < N; ++P)
    for (int K = 0; K < 4; ++K) {
      const float *Row = Table + Index[4 * P + K] * Cols;
      for (int64_t I = 0; I < Cols; ++I)
        X[P * Cols + I] += Weight[4 * P + K] * Row[I];
    }
}

void interpolateRowsBackward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *DX,
                             float *DTable) {
  for (int64_t P = 0; P < N; ++P)
    for (int K = 0; K < 4; ++K) {
      float *G = DTable + Index[4 * P + K] * Cols;
      for (int64_t I = 0; I < Cols; ++I)
        G[I] += Weight[4 * P + K] * DX[P * Cols + I];
    }
}

void ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const float *Cos, const float *Sin,
                 bool Inverse) {
  const int64_t Half = Columns.RopeDim / 2;
  for (int64_t R = 0; R < Rows; ++R)
    for (int64_t G = 0; G < Groups; ++G) {
      float *V = X + (R * Groups + G) * Columns.Stride;
      for (int64_t J = 0; J < Half; ++J) {
        const float C = Cos[R * Half + J], S = Inverse ? -Sin[R * Half + J] : Sin[R * Half + J];
        float &A = V[Columns.first(J)], &B = V[Columns.second(J)];
        const float X1 = A, X2 = B;
        A = X1 * C - X2 * S;
        B = X2 * C + X1 * S;
      }
    }
}

namespace {
float sigmoidOfGate(float X) { return float(1.0 / (1.0 + std::exp(-double(X)))); }
} // namespace

void sigmoidGateForward(int64_t Count, const float *X, const float *Gate, float *Y) {
  for (int64_t I = 0; I < Count; ++I)
    Y[I] = X[I] * sigmoidOfGate(Gate[I]);
}

void sigmoidGateBackward(int64_t Count, const float *X, const float *Gate, const float *DY, float *DX, float *DGate) {
  for (int64_t I = 0; I < Count; ++I) {
    const float S = sigmoidOfGate(Gate[I]);
    DGate[I] = DY[I] * X[I] * S * (1 - S);
    DX[I] = DY[I] * S;
  }
}

namespace {
void checkConv(const CausalConv &C) {
  if (!C.valid())
    throw std::invalid_argument("causal convolution: whole sequences of a positive length and at least one tap");
}
} // namespace

void causalConvSiluForward(const CausalConv &C, const float *X, const float *W, float *Pre, float *Act) {
  checkConv(C);
  std::fill_n(Pre, C.elements(), 0.0f);
  for (int64_t T = 0; T < C.Rows; ++T)
    for (int64_t J = 0; J < C.Width; ++J) {
      if (!C.reads(T, J))
        continue;
      const float *In = X + (T - C.lag(J)) * C.Channels;
      float *Out = Pre + T * C.Channels;
      for (int64_t Ch = 0; Ch < C.Channels; ++Ch)
        Out[Ch] += W[Ch * C.Width + J] * In[Ch];
    }
  for (int64_t I = 0; I < C.elements(); ++I)
    Act[I] = siluOf(Pre[I]);
}

void causalConvSiluBackward(const CausalConv &C, const float *X, const float *W, const float *Pre, const float *DAct,
                            float *DX, float *DW) {
  checkConv(C);
  std::vector<float> DPre(size_t(C.elements()));
  for (int64_t I = 0; I < C.elements(); ++I)
    DPre[size_t(I)] = DAct[I] * siluSlope(Pre[I]);
  std::fill_n(DX, C.elements(), 0.0f);
  for (int64_t T = 0; T < C.Rows; ++T)
    for (int64_t J = 0; J < C.Width; ++J) {
      if (!C.reads(T, J))
        continue;
      const int64_t Src = T - C.lag(J);
      const float *In = X + Src * C.Channels, *D = DPre.data() + T * C.Channels;
      float *DIn = DX + Src * C.Channels;
      for (int64_t Ch = 0; Ch < C.Channels; ++Ch) {
        DIn[Ch] += W[Ch * C.Width + J] * D[Ch];
        DW[Ch * C.Width + J] += In[Ch] * D[Ch];
      }
    }
}

void l2NormHeadsForward(int64_t Rows, int64_t Width, double Eps, const float *X, float *Y, float *Inv) {
  for (int64_t H = 0; H < Rows; ++H) {
    const float *In = X + H * Width;
    float *Out = Y + H * Width;
    double Sum = 0;
    for (int64_t I = 0; I < Width; ++I)
      Sum += double(In[I]) * In[I];
    Inv[H] = float(1.0 / std::sqrt(Sum + Eps));
    for (int64_t I = 0; I < Width; ++I)
      Out[I] = In[I] * Inv[H];
  }
}

void l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY, float *DX) {
  for (int64_t H = 0; H < Rows; ++H) {
    const float *Yh = Y + H * Width, *Dy = DY + H * Width;
    float *Dx = DX + H * Width;
    double Dot = 0;
    for (int64_t I = 0; I < Width; ++I)
      Dot += double(Dy[I]) * Yh[I];
    for (int64_t I = 0; I < Width; ++I)
      Dx[I] = float(Inv[H] * (Dy[I] - Yh[I] * Dot));
  }
}

namespace {
double sigmoidOf(double X) { return 1.0 / (1.0 + std::exp(-X)); }
double softplusOf(double X) { return X > 20 ? X : std::log1p(std::exp(X)); }
} // namespace

void deltaGatesForward(const DeltaGates &Gates, const float *A, const float *B, float *RawA, float *G, float *Beta) {
  for (int64_t T = 0; T < Gates.Tokens; ++T)
    for (int64_t H = 0; H < Gates.Heads; ++H) {
      const int64_t I = T * Gates.Heads + H;
      const float U = A[I] + Gates.DtBias[H];
      RawA[I] = U;
      G[I] = float(-std::exp(double(Gates.ALog[H])) * softplusOf(U));
      Beta[I] = float(sigmoidOf(B[I]));
    }
}

void deltaGatesBackward(const DeltaGates &Gates, const float *RawA, const float *G, const float *Beta, const float *DG,
                        const float *DBeta, float *DA, float *DB, float *DALog, float *DDtBias) {
  for (int64_t T = 0; T < Gates.Tokens; ++T)
    for (int64_t H = 0; H < Gates.Heads; ++H) {
      const int64_t I = T * Gates.Heads + H;
      const float Dg = DG[I], B = Beta[I];
      DALog[H] += Dg * G[I];
      const float Du = float(Dg * -std::exp(double(Gates.ALog[H])) * sigmoidOf(RawA[I]));
      DA[I] = Du;
      DDtBias[H] += Du;
      DB[I] = DBeta[I] * B * (1 - B);
    }
}

Tensor gelu(GeluForm Kind, const Tensor &X) {
  Tensor Y;
  gelu(Kind, X, Y);
  return Y;
}

void gelu(GeluForm Kind, const Tensor &X, Tensor &Y) {
  Y.ensureShape(X.shape());
  if (currentBackend().gelu(Kind, X.numel(), X.data(), Y.data()))
    return;
  for (int64_t I = 0; I < X.numel(); ++I)
    Y[I] = float(geluOf(Kind, X[I], nullptr));
}

Tensor geluBackward(GeluForm Kind, const Tensor &X, const Tensor &DY) {
  Tensor DX;
  geluBackward(Kind, X, DY, DX);
  return DX;
}

void geluBackward(GeluForm Kind, const Tensor &X, const Tensor &DY, Tensor &DX) {
  DX.ensureShape(X.shape());
  if (currentBackend().geluBackward(Kind, X.numel(), X.data(), DY.data(), DX.data()))
    return;
  for (int64_t I = 0; I < X.numel(); ++I) {
    double Slope = 0;
    geluOf(Kind, X[I], &Slope);
    DX[I] = float(DY[I] * Slope);
  }
}

Tensor initParameter(uint64_t Seed, const std::string &Name, const std::vector<int64_t> &Shape, double Std) {
  Tensor T(Shape);
  if (Std == 0.0) {
    std::fill(T.storage().begin(), T.storage().end(), 1.0f);
    return T;
  }
  // FNV-1a over the name, mixed with the seed.
  uint64_t H = 1469598103934665603ull;
  for (unsigned char C : Name)
    H = (H ^ C) * 1099511628211ull;
  std::mt19937_64 Gen(mix64(H ^ (Seed + 0x9e3779b97f4a7c15ull)));
  auto Uniform = [&Gen] { return (double(Gen() >> 11) + 0.5) * 0x1.0p-53; };
  const double TwoPi = 6.283185307179586;
  for (int64_t I = 0; I < T.numel(); I += 2) {
    double R = std::sqrt(-2.0 * std::log(Uniform())), A = TwoPi * Uniform();
    T[I] = float(Std * R * std::cos(A));
    if (I + 1 < T.numel())
      T[I + 1] = float(Std * R * std::sin(A));
  }
  return T;
}

Tensor rowShard(const Tensor &Full, int64_t Part, int64_t Parts) {
  int64_t R = Full.rows() / Parts, C = Full.cols();
  std::vector<int64_t> Shape = Full.shape();
  Shape[0] = R;
  Tensor S(Shape);
  std::memcpy(S.data(), Full.row(Part * R), sizeof(float) * R * C);
  return S;
}

Tensor colShard(const Tensor &Full, int64_t Part, int64_t Parts) {
  int64_t R = Full.rows(), C = Full.cols() / Parts;
  Tensor S({R, C});
  for (int64_t I = 0; I < R; ++I)
    std::memcpy(S.row(I), Full.row(I) + Part * C, sizeof(float) * C);
  return S;
}

} // namespace moert
