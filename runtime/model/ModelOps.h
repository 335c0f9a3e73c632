//===- model/ModelOps.h - Element-wise pieces of the transformer ----------===//
//
// RMSNorm, rotary embeddings, the SwiGLU activation and deterministic
// parameter initialisation. Activations are [tokens, features] row-major.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_MODELOPS_H
#define MOERT_MODEL_MODELOPS_H

#include "kernels/Backend.h"
#include "kernels/KeyedDraws.h"
#include "kernels/host/Tensor.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace moert {

/// Runs OnBackend (a compute backend's operation that may decline: false);
/// where it declines, OnHost on the host's values of Reads (what an
/// accumulation adds to included), telling the backend what it wrote.
template <class BackendOp, class HostOp>
void onBackendElseHost(ComputeBackend &Backend, std::initializer_list<ConstArray> Reads,
                       std::initializer_list<HostArray> Writes, BackendOp OnBackend, HostOp OnHost) {
  if (OnBackend())
    return;
  for (const ConstArray &A : Reads)
    Backend.hostReads(A.Data, A.Count);
  OnHost();
  for (const HostArray &A : Writes)
    Backend.hostWrote(A.Data, A.Count);
}
inline ConstArray readsOf(const Tensor &T) { return {T.data(), T.numel()}; }
inline ConstArray readsOf(const std::vector<float> &V) { return {V.data(), int64_t(V.size())}; }
inline HostArray writesOf(Tensor &T) { return {T.data(), T.numel()}; }
inline HostArray writesOf(std::vector<float> &V) { return {V.data(), int64_t(V.size())}; }

/// Y = X * rstd * W per row, rstd = 1 / sqrt(mean(X^2) + Eps); Rstd [rows].
Tensor rmsNormForward(const Tensor &X, const Tensor &W, double Eps, std::vector<float> &Rstd);
/// The same into Y, whose storage stays where it has X's shape already (an
/// array held on the backend before it is written).
void rmsNormForward(const Tensor &X, const Tensor &W, double Eps, std::vector<float> &Rstd, Tensor &Y);
/// Returns DX; DW += sum over rows of DY * X * rstd.
Tensor rmsNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW);
/// The same into DX, which has X's shape already (and may be held on the
/// backend).
void rmsNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW,
                     Tensor &DX);

/// Rotary embedding, rotate-half convention, in place on X [N, Heads *
/// HeadDim]: for pair i < HeadDim / 2 with angle Positions[n] * Theta^(-2i /
/// HeadDim), (x_i, x_{i+D/2}) -> (x_i c - x_{i+D/2} s, x_{i+D/2} c + x_i s).
/// Inverse = true applies the transposed rotation (the backward). RotaryDim
/// > 0 rotates only each head's first RotaryDim columns, as if the head were
/// that wide, and leaves the rest (Megatron's rotary_percent, Hugging Face's
/// partial_rotary_factor).
void applyRope(Tensor &X, int64_t HeadDim, const std::vector<int64_t> &Positions, double Theta, bool Inverse,
               int64_t RotaryDim = 0);

/// A sequence's positions along time, rows and columns (Qwen-VL's
/// multimodal RoPE): equal on text tokens, counting on; an image's tokens
/// (one per MergeSize x MergeSize block of patches) at the next position plus
/// their frame, block row and block column; the text after an image from one
/// past the largest position so far (transformers' Qwen3-VL get_rope_index).
struct MultimodalPositions {
  std::array<std::vector<int64_t>, 3> Axes; ///< time, rows, columns; one entry per token
};

/// The positions of Tokens, whose images are the runs of ImageToken, image i
/// Grids[i] = {frames, rows, cols} of patches; empty with Error when the
/// runs do not fit the grids.
MultimodalPositions multimodalPositions(const std::vector<int32_t> &Tokens, int32_t ImageToken,
                                        const std::vector<std::array<int64_t, 3>> &Grids, int64_t MergeSize,
                                        std::string &Error);

/// applyRope with three positions per token (Qwen3-VL's interleaved MRoPE):
/// frequency j of a head rotates by the row position when j % 3 == 1 and
/// j < 3 Sections[1], by the column position when j % 3 == 2 and j < 3
/// Sections[2], else by the time position (Sections: mrope_section, [24, 20,
/// 20] for a head of 128). On text tokens, applyRope itself; RotaryDim as
/// applyRope's (the sections then cover RotaryDim / 2 frequencies).
void applyMultimodalRope(Tensor &X, int64_t HeadDim, const MultimodalPositions &Positions, double Theta,
                         const std::array<int64_t, 3> &Sections, bool Inverse, int64_t RotaryDim = 0);

/// Rotary embedding of multi-head latent attention: in every Stride-wide
/// group of X's columns (a head), the RopeDim columns from Offset on, in
/// adjacent pairs (2i, 2i + 1) rotated by Positions[row] * Theta^(-2i /
/// RopeDim); Inverse rotates back (the backward). Megatron-Core and Hugging
/// Face's DeepSeek-V3 de-interleave those columns and rotate halves, which
/// rotates the same pairs by the same angles and only orders the results
/// differently; queries and keys are ordered alike, so the scores are equal.
void applyInterleavedRope(Tensor &X, int64_t Stride, int64_t Offset, int64_t RopeDim,
                          const std::vector<int64_t> &Positions, double Theta, bool Inverse);

/// A + B, elementwise (same element counts).
Tensor add(const Tensor &A, const Tensor &B);

/// Act = silu(G) * U.
Tensor swiGlu(const Tensor &G, const Tensor &U);
/// From DAct: DG and DU (overwritten).
void swiGluBackward(const Tensor &G, const Tensor &U, const Tensor &DAct, Tensor &DG, Tensor &DU);

/// LayerNorm over the last dimension with weight and bias (the vision
/// tower's): Y = (X - mean) rstd W + B per row, mean and variance in double;
/// Mean and Rstd (resized to the rows) are what the backward reads.
Tensor layerNormForward(const Tensor &X, const Tensor &W, const Tensor &B, double Eps, std::vector<float> &Mean,
                        std::vector<float> &Rstd);
/// The same into Y, whose storage stays where it has X's shape already (an
/// array held on the backend before it is written); likewise for the
/// backward's DX and GELU's Y and DX below.
void layerNormForward(const Tensor &X, const Tensor &W, const Tensor &B, double Eps, std::vector<float> &Mean,
                      std::vector<float> &Rstd, Tensor &Y);
/// DX; DW and DB are accumulated (+=).
Tensor layerNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Mean,
                         const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW, Tensor &DB);
void layerNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Mean, const std::vector<float> &Rstd,
                       const Tensor &DY, Tensor &DW, Tensor &DB, Tensor &DX);

/// gelu(X) (in double) and DX = DY gelu'(X).
Tensor gelu(GeluForm Kind, const Tensor &X);
Tensor geluBackward(GeluForm Kind, const Tensor &X, const Tensor &DY);
void gelu(GeluForm Kind, const Tensor &X, Tensor &Y);
void geluBackward(GeluForm Kind, const Tensor &X, const Tensor &DY, Tensor &DX);

/// silu(X) = X sigmoid(X), and its slope, in double (Gated DeltaNet's).
float siluOf(float X);
float siluSlope(float X);

/// Gated DeltaNet's output norm (model/GatedDeltaNet.h) over Rows heads of
/// Width: Y = O rstd W silu(Z) per head, rstd = 1 / sqrt(mean(O^2) + Eps)
/// (in double) into Rstd [Rows].
void gatedRmsNormForward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W, double Eps,
                         float *Y, float *Rstd);
/// Its backward from DY: DO and DZ written, DW += (the rows in order).
void gatedRmsNormBackward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W,
                          const float *Rstd, const float *DY, float *DO, float *DZ, float *DW);

/// Attention's output gate (Megatron-Core's attention_output_gate): Y = X
/// sigmoid(Gate) over Count elements; the backward DGate = DY X s (1 - s)
/// and DX = DY s (DX may be DY), s = sigmoid(Gate) in double.
void sigmoidGateForward(int64_t Count, const float *X, const float *Gate, float *Y);
void sigmoidGateBackward(int64_t Count, const float *X, const float *Gate, const float *DY, float *DX, float *DGate);

/// The vision tower's pieces (kernels/Backend.h's operations of the same
/// names): row biases, their gradient, the position table's interpolation
/// and its backward, and rotary embedding by a table of angles.
void addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y);
void addColumnSums(int64_t Rows, int64_t Cols, const float *DY, float *DBias);
void interpolateRowsForward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *Table,
                            float *X);
void interpolateRowsBackward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *DX,
                             float *DTable);
void ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const float *Cos, const float *Sin,
                 bool Inverse);

/// Gated DeltaNet's input side (kernels/LinearAttentionInput.h): the
/// causal convolution with silu, Pre = conv(X) and Act = silu(Pre); its
/// backward writes DX and adds to DW (the output tokens in order).
void causalConvSiluForward(const CausalConv &C, const float *X, const float *W, float *Pre, float *Act);
void causalConvSiluBackward(const CausalConv &C, const float *X, const float *W, const float *Pre, const float *DAct,
                            float *DX, float *DW);
/// Each of Rows heads of Width divided by its L2 norm (in double), Y may be
/// X; Inv [Rows] gets the factor. The backward DX = Inv (DY - Y (DY . Y)),
/// DX may be DY.
void l2NormHeadsForward(int64_t Rows, int64_t Width, double Eps, const float *X, float *Y, float *Inv);
void l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY, float *DX);
/// The decay and write gates (DeltaGates), each way.
void deltaGatesForward(const DeltaGates &Gates, const float *A, const float *B, float *RawA, float *G, float *Beta);
void deltaGatesBackward(const DeltaGates &Gates, const float *RawA, const float *G, const float *Beta, const float *DG,
                        const float *DBeta, float *DA, float *DB, float *DALog, float *DDtBias);

/// The full tensor of a parameter from (Seed, Name) alone: normal(0, Std)
/// entries drawn row-major from a mt19937_64 seeded by a hash of both
/// (Box-Muller, so the values do not depend on the standard library), or all
/// ones when Std is 0 (norm weights).
Tensor initParameter(uint64_t Seed, const std::string &Name, const std::vector<int64_t> &Shape, double Std);
/// Rows [Part * R / Parts, (Part + 1) * R / Parts) of a 2-D tensor.
Tensor rowShard(const Tensor &Full, int64_t Part, int64_t Parts);
/// Columns [Part * C / Parts, (Part + 1) * C / Parts) of a 2-D tensor.
Tensor colShard(const Tensor &Full, int64_t Part, int64_t Parts);

} // namespace moert

#endif
