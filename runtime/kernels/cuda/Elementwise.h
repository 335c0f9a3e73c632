//===- kernels/cuda/Elementwise.h - Norms, RoPE, activations, casts, adds -===//
//
// The element-wise pieces of the transformer on the GPU (and the vision
// tower's LayerNorm and GELU), with the semantics of model/ModelOps.h:
// activations [tokens, features] row-major in bf16, every reduction and every
// intermediate in fp32, weight gradients accumulated (+=) into fp32.
// Reductions over rows (the norms' weight gradients) loop over rows in order
// within one thread per column, so results are deterministic.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_ELEMENTWISE_H
#define MOERT_KERNELS_CUDA_ELEMENTWISE_H

#include "kernels/ColumnBlocks.h"
#include "kernels/RopeColumns.h"
#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// Y = X * rstd * W per row, rstd = 1 / sqrt(mean(X^2) + Eps); Rstd [Rows].
void rmsNormForward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, float Eps, bf16 *Y, float *Rstd,
                    cudaStream_t Stream);
/// DX = rstd * (DY W - X rstd^2 mean(DY W X)); DW += sum_rows DY X rstd.
void rmsNormBackward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const float *Rstd, const bf16 *DY,
                     bf16 *DX, float *DW, cudaStream_t Stream);

/// LayerNorm with weight and bias: Y = (X - mean) rstd W + B per row, rstd =
/// 1 / sqrt(var + Eps) (the mean first, then the variance about it); Mean,
/// Rstd [Rows].
void layerNormForward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const bf16 *B, float Eps, bf16 *Y,
                      float *Mean, float *Rstd, cudaStream_t Stream);
/// DX = rstd (g - mean(g) - xhat mean(g xhat)), g = DY W; DW += sum_rows DY
/// xhat, DB += sum_rows DY.
void layerNormBackward(int64_t Rows, int64_t Hidden, const bf16 *X, const bf16 *W, const float *Mean, const float *Rstd,
                       const bf16 *DY, bf16 *DX, float *DW, float *DB, cudaStream_t Stream);

/// Y = gelu(X) over Count elements (Tanh: the tanh approximation); the
/// backward DX = DY gelu'(X).
void geluForward(int64_t Count, bool Tanh, const bf16 *X, bf16 *Y, cudaStream_t Stream);
void geluBackward(int64_t Count, bool Tanh, const bf16 *X, const bf16 *DY, bf16 *DX, cudaStream_t Stream);

/// Gated DeltaNet's output norm over Rows heads of Width: Y = O rstd W
/// silu(Z), Rstd [Rows]; the backward writes DO and DZ and adds to DW (a
/// thread per column, rows in order).
void gatedRmsNormForward(int64_t Rows, int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W, float Eps, bf16 *Y,
                         float *Rstd, cudaStream_t Stream);
void gatedRmsNormBackward(int64_t Rows, int64_t Width, const bf16 *O, const bf16 *Z, const bf16 *W, const float *Rstd,
                          const bf16 *DY, bf16 *DO, bf16 *DZ, float *DW, cudaStream_t Stream);

/// The vision tower's pieces: Y += Bias per row (fp32, in place); DBias
/// += the sum of DY's rows (a thread per column, rows in order); X[n] +=
/// the bilinear interpolation of Table's rows Index[4n..4n+3] and its
/// backward (a thread per column, rows and terms in order: the host's
/// bits); rotary embedding in place by a table of angles ([Rows, RopeDim /
/// 2] cosines and sines).
void addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y, cudaStream_t Stream);
template <typename T> void addColumnSums(int64_t Rows, int64_t Cols, const T *DY, float *DBias, cudaStream_t Stream);
void interpolateRowsForward(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight, const float *Table,
                            float *X, cudaStream_t Stream);
void interpolateRowsBackward(int64_t N, int64_t Cols, const int32_t *Index, const float *Weight, const float *DX,
                             float *DTable, cudaStream_t Stream);
void ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, bf16 *X, const float *Cos, const float *Sin,
                 bool Inverse, cudaStream_t Stream);

/// Attention's output gate: Y = X sigmoid(Gate); the backward DGate = DY X
/// s (1 - s), DX = DY s.
void sigmoidGateForward(int64_t Count, const bf16 *X, const bf16 *Gate, bf16 *Y, cudaStream_t Stream);
void sigmoidGateBackward(int64_t Count, const bf16 *X, const bf16 *Gate, const bf16 *DY, bf16 *DX, bf16 *DGate,
                         cudaStream_t Stream);

/// Rotary embedding in place on X [Rows, Groups * Columns.Stride]
/// (kernels/RopeColumns.h; angle Positions[n] * Theta^(-2j / RopeDim),
/// computed in double as on the host); Inverse applies the transposed
/// rotation (the backward).
void applyRope(int64_t Rows, int64_t Groups, const RopeColumns &Columns, bf16 *X, const int32_t *Positions,
               double Theta, bool Inverse, cudaStream_t Stream);

/// Act = silu(G) * U over Count elements.
void swiGluForward(int64_t Count, const bf16 *G, const bf16 *U, bf16 *Act, cudaStream_t Stream);
/// DG = DAct * U * silu'(G), DU = DAct * silu(G).
void swiGluBackward(int64_t Count, const bf16 *G, const bf16 *U, const bf16 *DAct, bf16 *DG, bf16 *DU,
                    cudaStream_t Stream);

/// Precision casts (fp32 GEMM outputs to bf16 activations and back).
void castToBf16(int64_t Count, const float *In, bf16 *Out, cudaStream_t Stream);
void castToF32(int64_t Count, const bf16 *In, float *Out, cudaStream_t Stream);
/// Out = A + B in fp32 (the residual stream's adds: the host's bits); Out
/// may be A or B.
void addF32(int64_t Count, const float *A, const float *B, float *Out, cudaStream_t Stream);

/// Blocks of columns from Src to Dst (kernels/ColumnBlocks.h), each either
/// bf16 or fp32 (SrcBf16, DstBf16); a sum runs in fp32, the blocks in order.
void copyColumns(const ColumnBlocks &Blocks, const void *Src, bool SrcBf16, void *Dst, bool DstBf16,
                 cudaStream_t Stream);

/// Whole rows of Cols fp32 columns by the pairs From[i] -> To[i] (Count of
/// them, device arrays, distinct on each side: kernels/RowPairs.h): Dst row
/// To[i] = Src row From[i], or += where Accumulate; where ClearSource the
/// source's rows are zeroed after (a thread reads and clears its own
/// element).
void copyRows(int64_t Count, int64_t Cols, const int32_t *From, const int32_t *To, float *Src, float *Dst,
              bool Accumulate, bool ClearSource, cudaStream_t Stream);

/// The embedding lookup of this rank's vocabulary rows [VocabStart,
/// VocabStart + VocabRows) of Table [VocabRows, Hidden] (fp32): Out[n] =
/// Table[Ids[n] - VocabStart] where this rank holds Ids[n], else zeros.
void embeddingGather(int64_t Tokens, int64_t Hidden, const float *Table, int64_t VocabStart, int64_t VocabRows,
                     const int32_t *Ids, float *Out, cudaStream_t Stream);
/// Its backward: DTable[Ids[n] - VocabStart] += D[n] for the ids this rank
/// holds; one thread per column adds the tokens in order, so the sums are
/// the host's, bit for bit.
void embeddingScatterAdd(int64_t Tokens, int64_t Hidden, const float *D, int64_t VocabStart, int64_t VocabRows,
                         const int32_t *Ids, float *DTable, cudaStream_t Stream);

} // namespace moert::cuda

#endif
