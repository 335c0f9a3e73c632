//===- kernels/cuda/Elementwise.cu ----------------------------------------===//
#include "kernels/cuda/Elementwise.h"

#include "kernels/cuda/DeviceMath.cuh"

#include <algorithm>

namespace moert::cuda {

namespace {

unsigned gridFor(int64_t Count, int Threads) {
  return unsigned(std::min<int64_t>((Count + Threads - 1) / Threads, 65535));
}

/// A block per head row.
__global__ void gatedRmsNormForwardKernel(int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W, float Eps,
                                          bf16 *Y, float *Rstd) {
  const int64_t Off = int64_t(blockIdx.x) * Width;
  float Sq = 0.f;
  for (int64_t J = threadIdx.x; J < Width; J += blockDim.x) {
    const float V = toF(O[Off + J]);
    Sq += V * V;
  }
  Sq = blockSum(Sq);
  const float R = rsqrtf(Sq / float(Width) + Eps);
  if (threadIdx.x == 0)
    Rstd[blockIdx.x] = R;
  for (int64_t J = threadIdx.x; J < Width; J += blockDim.x)
    Y[Off + J] = toB(toF(O[Off + J]) * R * toF(W[J]) * siluF(toF(Z[Off + J])));
}

__global__ void gatedRmsNormBackwardKernel(int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W,
                                           const float *Rstd, const bf16 *DY, bf16 *DO, bf16 *DZ) {
  const int64_t Off = int64_t(blockIdx.x) * Width;
  const float R = Rstd[blockIdx.x];
  float Dot = 0.f;
  for (int64_t J = threadIdx.x; J < Width; J += blockDim.x) {
    const float Zv = toF(Z[Off + J]), Nrm = toF(O[Off + J]) * R, Dy = toF(DY[Off + J]), Wv = toF(W[J]);
    DZ[Off + J] = toB(Dy * Nrm * Wv * siluSlopeF(Zv));
    Dot += Dy * Wv * siluF(Zv) * Nrm;
  }
  Dot = blockSum(Dot);
  for (int64_t J = threadIdx.x; J < Width; J += blockDim.x) {
    const float Ov = toF(O[Off + J]), Dn = toF(DY[Off + J]) * toF(W[J]) * siluF(toF(Z[Off + J]));
    DO[Off + J] = toB(R * (Dn - Ov * R * Dot / float(Width)));
  }
}

/// One thread per column, rows in order: a deterministic weight gradient.
__global__ void gatedRmsNormBackwardDwKernel(int64_t Rows, int64_t Width, const bf16 *O, const bf16 *Z,
                                             const float *Rstd, const bf16 *DY, float *DW) {
  const int64_t J = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (J >= Width)
    return;
  float Sum = 0.f;
  for (int64_t I = 0; I < Rows; ++I)
    Sum += toF(DY[I * Width + J]) * toF(O[I * Width + J]) * Rstd[I] * siluF(toF(Z[I * Width + J]));
  DW[J] += Sum;
}

__global__ void rmsNormForwardKernel(int64_t Hidden, const bf16 *X, const bf16 *W, float Eps, bf16 *Y, float *Rstd) {
  const bf16 *Row = X + int64_t(blockIdx.x) * Hidden;
  float Sq = 0.f;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x) {
    float V = toF(Row[J]);
    Sq += V * V;
  }
  Sq = blockSum(Sq);
  float R = rsqrtf(Sq / float(Hidden) + Eps);
  if (threadIdx.x == 0)
    Rstd[blockIdx.x] = R;
  bf16 *Out = Y + int64_t(blockIdx.x) * Hidden;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    Out[J] = toB(toF(Row[J]) * R * toF(W[J]));
}

__global__ void rmsNormBackwardDxKernel(int64_t Hidden, const bf16 *X, const bf16 *W, const float *Rstd, const bf16 *DY,
                                        bf16 *DX) {
  int64_t Off = int64_t(blockIdx.x) * Hidden;
  float Dot = 0.f;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    Dot += toF(DY[Off + J]) * toF(W[J]) * toF(X[Off + J]);
  Dot = blockSum(Dot);
  float R = Rstd[blockIdx.x];
  float C = Dot / float(Hidden) * R * R;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    DX[Off + J] = toB(R * (toF(DY[Off + J]) * toF(W[J]) - toF(X[Off + J]) * C));
}

/// One thread per column, rows in order: a deterministic weight gradient.
__global__ void rmsNormBackwardDwKernel(int64_t Rows, int64_t Hidden, const bf16 *X, const float *Rstd, const bf16 *DY,
                                        float *DW) {
  int64_t J = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (J >= Hidden)
    return;
  float Sum = 0.f;
  for (int64_t I = 0; I < Rows; ++I)
    Sum += toF(DY[I * Hidden + J]) * toF(X[I * Hidden + J]) * Rstd[I];
  DW[J] += Sum;
}

__global__ void layerNormForwardKernel(int64_t Hidden, const bf16 *X, const bf16 *W, const bf16 *B, float Eps, bf16 *Y,
                                       float *Mean, float *Rstd) {
  const int64_t Off = int64_t(blockIdx.x) * Hidden;
  float Sum = 0.f;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    Sum += toF(X[Off + J]);
  const float M = blockSum(Sum) / float(Hidden);
  float Sq = 0.f;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x) {
    const float D = toF(X[Off + J]) - M;
    Sq += D * D;
  }
  const float R = rsqrtf(blockSum(Sq) / float(Hidden) + Eps);
  if (threadIdx.x == 0) {
    Mean[blockIdx.x] = M;
    Rstd[blockIdx.x] = R;
  }
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    Y[Off + J] = toB((toF(X[Off + J]) - M) * R * toF(W[J]) + toF(B[J]));
}

__global__ void layerNormBackwardDxKernel(int64_t Hidden, const bf16 *X, const bf16 *W, const float *Mean,
                                          const float *Rstd, const bf16 *DY, bf16 *DX) {
  const int64_t Off = int64_t(blockIdx.x) * Hidden;
  const float M = Mean[blockIdx.x], R = Rstd[blockIdx.x];
  float SumG = 0.f, SumGx = 0.f;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x) {
    const float G = toF(DY[Off + J]) * toF(W[J]);
    SumG += G;
    SumGx += G * (toF(X[Off + J]) - M) * R;
  }
  SumG = blockSum(SumG) / float(Hidden);
  SumGx = blockSum(SumGx) / float(Hidden);
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x) {
    const float Xhat = (toF(X[Off + J]) - M) * R;
    DX[Off + J] = toB(R * (toF(DY[Off + J]) * toF(W[J]) - SumG - Xhat * SumGx));
  }
}

/// One thread per column, rows in order: deterministic weight and bias
/// gradients.
__global__ void layerNormBackwardDwKernel(int64_t Rows, int64_t Hidden, const bf16 *X, const float *Mean,
                                          const float *Rstd, const bf16 *DY, float *DW, float *DB) {
  const int64_t J = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (J >= Hidden)
    return;
  float SumW = 0.f, SumB = 0.f;
  for (int64_t I = 0; I < Rows; ++I) {
    const float Dy = toF(DY[I * Hidden + J]);
    SumW += Dy * (toF(X[I * Hidden + J]) - Mean[I]) * Rstd[I];
    SumB += Dy;
  }
  DW[J] += SumW;
  DB[J] += SumB;
}

/// gelu(X) and, where Slope is given, gelu'(X), in fp32.
__device__ inline float geluOf(bool Tanh, float X, float *Slope) {
  if (!Tanh) {
    const float Phi = 0.5f * (1.f + erff(X * 0.70710678118654752f));
    if (Slope)
      *Slope = Phi + X * expf(-0.5f * X * X) * 0.39894228040143268f; // 1 / sqrt(2 pi)
    return X * Phi;
  }
  const float K = 0.79788456080286536f; // sqrt(2 / pi)
  const float T = tanhf(K * (X + 0.044715f * X * X * X));
  if (Slope)
    *Slope = 0.5f * (1.f + T) + 0.5f * X * (1.f - T * T) * K * (1.f + 3.f * 0.044715f * X * X);
  return 0.5f * X * (1.f + T);
}

__global__ void geluForwardKernel(int64_t Count, bool Tanh, const bf16 *X, bf16 *Y) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    Y[I] = toB(geluOf(Tanh, toF(X[I]), nullptr));
}

__global__ void geluBackwardKernel(int64_t Count, bool Tanh, const bf16 *X, const bf16 *DY, bf16 *DX) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    float Slope = 0.f;
    geluOf(Tanh, toF(X[I]), &Slope);
    DX[I] = toB(toF(DY[I]) * Slope);
  }
}

__global__ void embeddingGatherKernel(int64_t Tokens, int64_t Hidden, const float *Table, int64_t VocabStart,
                                      int64_t VocabRows, const int32_t *Ids, float *Out) {
  const int64_t N = blockIdx.x;
  if (N >= Tokens)
    return;
  const int64_t Row = int64_t(Ids[N]) - VocabStart;
  const bool Held = Row >= 0 && Row < VocabRows;
  for (int64_t J = threadIdx.x; J < Hidden; J += blockDim.x)
    Out[N * Hidden + J] = Held ? Table[Row * Hidden + J] : 0.0f;
}

/// One thread per column, tokens in order: the host's sums.
__global__ void embeddingScatterAddKernel(int64_t Tokens, int64_t Hidden, const float *D, int64_t VocabStart,
                                          int64_t VocabRows, const int32_t *Ids, float *DTable) {
  int64_t J = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (J >= Hidden)
    return;
  for (int64_t N = 0; N < Tokens; ++N) {
    const int64_t Row = int64_t(Ids[N]) - VocabStart;
    if (Row >= 0 && Row < VocabRows)
      DTable[Row * Hidden + J] += D[N * Hidden + J];
  }
}

/// One thread per (row, pair index); loops over the heads with one angle.
__global__ void ropeKernel(int64_t Rows, int64_t Groups, RopeColumns Columns, bf16 *X, const int32_t *Positions,
                           double Theta, bool Inverse) {
  const int64_t Half = Columns.RopeDim / 2;
  for (int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; T < Rows * Half;
       T += int64_t(gridDim.x) * blockDim.x) {
    int64_t N = T / Half, J = T % Half;
    double Freq = pow(Theta, -2.0 * double(J) / double(Columns.RopeDim));
    double Angle = double(Positions[Columns.positionIndex(N, J)]) * Freq;
    float C = float(cos(Angle)), S = float(sin(Angle));
    if (Inverse)
      S = -S;
    bf16 *Row = X + N * Groups * Columns.Stride;
    for (int64_t G = 0; G < Groups; ++G) {
      bf16 *A = Row + G * Columns.Stride + Columns.first(J), *B = Row + G * Columns.Stride + Columns.second(J);
      float X1 = toF(*A), X2 = toF(*B);
      *A = toB(X1 * C - X2 * S);
      *B = toB(X2 * C + X1 * S);
    }
  }
}

__global__ void swiGluForwardKernel(int64_t Count, const bf16 *G, const bf16 *U, bf16 *Act) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    float Gv = toF(G[I]);
    Act[I] = toB(Gv * sigmoidF(Gv) * toF(U[I]));
  }
}

__global__ void swiGluBackwardKernel(int64_t Count, const bf16 *G, const bf16 *U, const bf16 *DAct, bf16 *DG,
                                     bf16 *DU) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    float Gv = toF(G[I]), Uv = toF(U[I]), D = toF(DAct[I]);
    float S = sigmoidF(Gv);
    DU[I] = toB(D * Gv * S);
    DG[I] = toB(D * Uv * (S + Gv * S * (1.f - S)));
  }
}

__global__ void castToBf16Kernel(int64_t Count, const float *In, bf16 *Out) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    Out[I] = toB(In[I]);
}

__global__ void sigmoidGateForwardKernel(int64_t Count, const bf16 *X, const bf16 *Gate, bf16 *Y) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    Y[I] = toB(toF(X[I]) * sigmoidF(toF(Gate[I])));
}

__global__ void sigmoidGateBackwardKernel(int64_t Count, const bf16 *X, const bf16 *Gate, const bf16 *DY, bf16 *DX,
                                          bf16 *DGate) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x) {
    const float S = sigmoidF(toF(Gate[I])), Dy = toF(DY[I]);
    DGate[I] = toB(Dy * toF(X[I]) * S * (1.f - S));
    DX[I] = toB(Dy * S);
  }
}

__global__ void addRowBiasKernel(int64_t Rows, int64_t Cols, const float *Bias, float *Y) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Rows * Cols;
       I += int64_t(gridDim.x) * blockDim.x)
    Y[I] += Bias[I % Cols];
}

/// A thread per column, rows in order.
template <typename T> __global__ void columnSumsKernel(int64_t Rows, int64_t Cols, const T *DY, float *DBias) {
  const int64_t C = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (C >= Cols)
    return;
  float Sum = DBias[C];
  for (int64_t R = 0; R < Rows; ++R)
    Sum += toF(DY[R * Cols + C]);
  DBias[C] = Sum;
}

/// A thread per (row, column): its four terms in order.
__global__ void interpolateRowsKernel(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight,
                                      const float *Table, float *X) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < N * Cols; I += int64_t(gridDim.x) * blockDim.x) {
    const int64_t P = I / Cols, C = I % Cols;
    float V = X[I];
    for (int K = 0; K < 4; ++K)
      V += Weight[4 * P + K] * Table[int64_t(Index[4 * P + K]) * Cols + C];
    X[I] = V;
  }
}

/// A thread per column: every row's four terms in order (the host's).
__global__ void interpolateRowsBackwardKernel(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight,
                                              const float *DX, float *DTable) {
  const int64_t C = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (C >= Cols)
    return;
  for (int64_t P = 0; P < N; ++P)
    for (int K = 0; K < 4; ++K)
      DTable[int64_t(Index[4 * P + K]) * Cols + C] += Weight[4 * P + K] * DX[P * Cols + C];
}

__global__ void ropeByTableKernel(int64_t Rows, int64_t Groups, RopeColumns Columns, bf16 *X, const float *Cos,
                                  const float *Sin, bool Inverse) {
  const int64_t Half = Columns.RopeDim / 2;
  for (int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; T < Rows * Half;
       T += int64_t(gridDim.x) * blockDim.x) {
    const int64_t N = T / Half, J = T % Half;
    const float C = Cos[T], S = Inverse ? -Sin[T] : Sin[T];
    bf16 *Row = X + N * Groups * Columns.Stride;
    for (int64_t G = 0; G < Groups; ++G) {
      bf16 *A = Row + G * Columns.Stride + Columns.first(J), *B = Row + G * Columns.Stride + Columns.second(J);
      const float X1 = toF(*A), X2 = toF(*B);
      *A = toB(X1 * C - X2 * S);
      *B = toB(X2 * C + X1 * S);
    }
  }
}

__global__ void castToF32Kernel(int64_t Count, const bf16 *In, float *Out) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    Out[I] = toF(In[I]);
}

__global__ void addKernel(int64_t Count, const float *A, const float *B, float *Out) {
  for (int64_t I = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; I < Count; I += int64_t(gridDim.x) * blockDim.x)
    Out[I] = __fadd_rn(A[I], B[I]);
}

} // namespace

void rmsNormForward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, float Eps, bf16 *Y, float *Rstd,
                    cudaStream_t Stream) {
  if (Rows == 0)
    return;
  rmsNormForwardKernel<<<unsigned(Rows), 256, 0, Stream>>>(Hidden, X, W, Eps, Y, Rstd);
  MOERT_CUDA_CHECK_LAUNCH();
}

void gatedRmsNormForward(int64_t Rows, int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W, float Eps, bf16 *Y,
                         float *Rstd, cudaStream_t Stream) {
  if (Rows == 0)
    return;
  gatedRmsNormForwardKernel<<<unsigned(Rows), 128, 0, Stream>>>(Width, O, Z, W, Eps, Y, Rstd);
  MOERT_CUDA_CHECK_LAUNCH();
}

void gatedRmsNormBackward(int64_t Rows, int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W, const float *Rstd,
                          const bf16 *DY, bf16 *DO, bf16 *DZ, float *DW, cudaStream_t Stream) {
  if (Rows == 0)
    return;
  gatedRmsNormBackwardKernel<<<unsigned(Rows), 128, 0, Stream>>>(Width, O, Z, W, Rstd, DY, DO, DZ);
  MOERT_CUDA_CHECK_LAUNCH();
  gatedRmsNormBackwardDwKernel<<<unsigned((Width + 127) / 128), 128, 0, Stream>>>(Rows, Width, O, Z, Rstd, DY, DW);
  MOERT_CUDA_CHECK_LAUNCH();
}

void addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y, cudaStream_t Stream) {
  if (Rows * Cols == 0)
    return;
  addRowBiasKernel<<<gridFor(Rows * Cols, 256), 256, 0, Stream>>>(Rows, Cols, Bias, Y);
  MOERT_CUDA_CHECK_LAUNCH();
}

template <typename T> void addColumnSums(int64_t Rows, int64_t Cols, const T *DY, float *DBias, cudaStream_t Stream) {
  if (Cols == 0)
    return;
  columnSumsKernel<T><<<unsigned((Cols + 127) / 128), 128, 0, Stream>>>(Rows, Cols, DY, DBias);
  MOERT_CUDA_CHECK_LAUNCH();
}
template void addColumnSums<float>(int64_t, int64_t, const float *, float *, cudaStream_t);
template void addColumnSums<bf16>(int64_t, int64_t, const bf16 *, float *, cudaStream_t);

void interpolateRowsForward(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight, const float *Table,
                            float *X, cudaStream_t Stream) {
  if (N * Cols == 0)
    return;
  interpolateRowsKernel<<<gridFor(N * Cols, 256), 256, 0, Stream>>>(N, Cols, Index, Weight, Table, X);
  MOERT_CUDA_CHECK_LAUNCH();
}

void interpolateRowsBackward(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight, const float *DX,
                             float *DTable, cudaStream_t Stream) {
  if (N * Cols == 0)
    return;
  interpolateRowsBackwardKernel<<<unsigned((Cols + 127) / 128), 128, 0, Stream>>>(N, Cols, Index, Weight, DX, DTable);
  MOERT_CUDA_CHECK_LAUNCH();
}

void ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, bf16 *X, const float *Cos, const float *Sin,
                 bool Inverse, cudaStream_t Stream) {
  const int64_t Work = Rows * (Columns.RopeDim / 2);
  if (Work == 0)
    return;
  ropeByTableKernel<<<gridFor(Work, 256), 256, 0, Stream>>>(Rows, Groups, Columns, X, Cos, Sin, Inverse);
  MOERT_CUDA_CHECK_LAUNCH();
}

void sigmoidGateForward(int64_t Count, const bf16 *X, const bf16 *Gate, bf16 *Y, cudaStream_t Stream) {
  if (Count == 0)
    return;
  sigmoidGateForwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, X, Gate, Y);
  MOERT_CUDA_CHECK_LAUNCH();
}

void sigmoidGateBackward(int64_t Count, const bf16 *X, const bf16 *Gate, const bf16 *DY, bf16 *DX, bf16 *DGate,
                         cudaStream_t Stream) {
  if (Count == 0)
    return;
  sigmoidGateBackwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, X, Gate, DY, DX, DGate);
  MOERT_CUDA_CHECK_LAUNCH();
}

void rmsNormBackward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const float *Rstd, const bf16 *DY,
                     bf16 *DX, float *DW, cudaStream_t Stream) {
  if (Rows == 0)
    return;
  rmsNormBackwardDxKernel<<<unsigned(Rows), 256, 0, Stream>>>(Hidden, X, W, Rstd, DY, DX);
  MOERT_CUDA_CHECK_LAUNCH();
  rmsNormBackwardDwKernel<<<unsigned((Hidden + 127) / 128), 128, 0, Stream>>>(Rows, Hidden, X, Rstd, DY, DW);
  MOERT_CUDA_CHECK_LAUNCH();
}

void layerNormForward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const bf16 *B, float Eps, bf16 *Y,
                      float *Mean, float *Rstd, cudaStream_t Stream) {
  if (Rows == 0)
    return;
  layerNormForwardKernel<<<unsigned(Rows), 256, 0, Stream>>>(Hidden, X, W, B, Eps, Y, Mean, Rstd);
  MOERT_CUDA_CHECK_LAUNCH();
}

void layerNormBackward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const float *Mean, const float *Rstd,
                       const bf16 *DY, bf16 *DX, float *DW, float *DB, cudaStream_t Stream) {
  if (Rows == 0)
    return;
  layerNormBackwardDxKernel<<<unsigned(Rows), 256, 0, Stream>>>(Hidden, X, W, Mean, Rstd, DY, DX);
  MOERT_CUDA_CHECK_LAUNCH();
  layerNormBackwardDwKernel<<<unsigned((Hidden + 127) / 128), 128, 0, Stream>>>(Rows, Hidden, X, Mean, Rstd, DY, DW,
                                                                                DB);
  MOERT_CUDA_CHECK_LAUNCH();
}

void geluForward(int64_t Count, bool Tanh, const bf16 *X, bf16 *Y, cudaStream_t Stream) {
  if (Count == 0)
    return;
  geluForwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, Tanh, X, Y);
  MOERT_CUDA_CHECK_LAUNCH();
}

void geluBackward(int64_t Count, bool Tanh, const bf16 *X, const bf16 *DY, bf16 *DX, cudaStream_t Stream) {
  if (Count == 0)
    return;
  geluBackwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, Tanh, X, DY, DX);
  MOERT_CUDA_CHECK_LAUNCH();
}

void applyRope(int64_t Rows, int64_t Groups, const RopeColumns &Columns, bf16 *X, const int32_t *Positions,
               double Theta, bool Inverse, cudaStream_t Stream) {
  int64_t Work = Rows * (Columns.RopeDim / 2);
  if (Work == 0 || Groups == 0)
    return;
  ropeKernel<<<gridFor(Work, 256), 256, 0, Stream>>>(Rows, Groups, Columns, X, Positions, Theta, Inverse);
  MOERT_CUDA_CHECK_LAUNCH();
}

void swiGluForward(int64_t Count, const bf16 *G, const bf16 *U, bf16 *Act, cudaStream_t Stream) {
  if (Count == 0)
    return;
  swiGluForwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, G, U, Act);
  MOERT_CUDA_CHECK_LAUNCH();
}

void swiGluBackward(int64_t Count, const bf16 *G, const bf16 *U, const bf16 *DAct, bf16 *DG, bf16 *DU,
                    cudaStream_t Stream) {
  if (Count == 0)
    return;
  swiGluBackwardKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, G, U, DAct, DG, DU);
  MOERT_CUDA_CHECK_LAUNCH();
}

void castToBf16(int64_t Count, const float *In, bf16 *Out, cudaStream_t Stream) {
  if (Count == 0)
    return;
  castToBf16Kernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, In, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

namespace {
__device__ inline float loadF(const float *P) { return *P; }
__device__ inline float loadF(const bf16 *P) { return toF(*P); }
__device__ inline void storeF(float *P, float V) { *P = V; }
__device__ inline void storeF(bf16 *P, float V) { *P = toB(V); }

/// A thread per (row, column), the blocks in order.
template <typename From, typename To> __global__ void copyColumnsKernel(ColumnBlocks Shape, const From *Src, To *Dst) {
  for (int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; T < Shape.Rows * Shape.Cols;
       T += int64_t(gridDim.x) * blockDim.x) {
    const int64_t R = T / Shape.Cols, C = T % Shape.Cols;
    for (int64_t B = 0; B < Shape.Blocks; ++B) {
      To *Out = Dst + R * Shape.DstLd + B * Shape.DstBlock + C;
      float V = loadF(Src + R * Shape.SrcLd + B * Shape.SrcBlock + C);
      storeF(Out, Shape.Accumulate ? loadF(Out) + V : V);
    }
  }
}

template <typename From, typename To>
void launchCopyColumns(const ColumnBlocks &Shape, const void *Src, void *Dst, cudaStream_t Stream) {
  copyColumnsKernel<From, To><<<gridFor(Shape.Rows * Shape.Cols, 256), 256, 0, Stream>>>(
      Shape, static_cast<const From *>(Src), static_cast<To *>(Dst));
  MOERT_CUDA_CHECK_LAUNCH();
}
} // namespace

namespace {
/// A thread per (pair, column).
__global__ void copyRowsKernel(int64_t Count, int64_t Cols, const int32_t *From, const int32_t *To, float *Src,
                               float *Dst, bool Accumulate, bool ClearSource) {
  for (int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; T < Count * Cols;
       T += int64_t(gridDim.x) * blockDim.x) {
    const int64_t I = T / Cols, C = T % Cols;
    float *In = Src + int64_t(From[I]) * Cols + C, *Out = Dst + int64_t(To[I]) * Cols + C;
    *Out = Accumulate ? *Out + *In : *In;
    if (ClearSource)
      *In = 0.f;
  }
}
} // namespace

void copyRows(int64_t Count, int64_t Cols, const int32_t *From, const int32_t *To, float *Src, float *Dst,
              bool Accumulate, bool ClearSource, cudaStream_t Stream) {
  if (Count == 0 || Cols == 0)
    return;
  copyRowsKernel<<<gridFor(Count * Cols, 256), 256, 0, Stream>>>(Count, Cols, From, To, Src, Dst, Accumulate,
                                                                 ClearSource);
  MOERT_CUDA_CHECK_LAUNCH();
}

void copyColumns(const ColumnBlocks &Shape, const void *Src, bool SrcBf16, void *Dst, bool DstBf16,
                 cudaStream_t Stream) {
  if (Shape.empty())
    return;
  if (SrcBf16)
    DstBf16 ? launchCopyColumns<bf16, bf16>(Shape, Src, Dst, Stream)
            : launchCopyColumns<bf16, float>(Shape, Src, Dst, Stream);
  else
    DstBf16 ? launchCopyColumns<float, bf16>(Shape, Src, Dst, Stream)
            : launchCopyColumns<float, float>(Shape, Src, Dst, Stream);
}

void castToF32(int64_t Count, const bf16 *In, float *Out, cudaStream_t Stream) {
  if (Count == 0)
    return;
  castToF32Kernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, In, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

void addF32(int64_t Count, const float *A, const float *B, float *Out, cudaStream_t Stream) {
  if (Count == 0)
    return;
  addKernel<<<gridFor(Count, 256), 256, 0, Stream>>>(Count, A, B, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

void embeddingGather(int64_t Tokens, int64_t Hidden, const float *Table, int64_t VocabStart, int64_t VocabRows,
                     const int32_t *Ids, float *Out, cudaStream_t Stream) {
  if (Tokens == 0 || Hidden == 0)
    return;
  embeddingGatherKernel<<<unsigned(Tokens), 256, 0, Stream>>>(Tokens, Hidden, Table, VocabStart, VocabRows, Ids, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

void embeddingScatterAdd(int64_t Tokens, int64_t Hidden, const float *D, int64_t VocabStart, int64_t VocabRows,
                         const int32_t *Ids, float *DTable, cudaStream_t Stream) {
  if (Tokens == 0 || Hidden == 0)
    return;
  embeddingScatterAddKernel<<<gridFor(Hidden, 128), 128, 0, Stream>>>(Tokens, Hidden, D, VocabStart, VocabRows, Ids,
                                                                      DTable);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
