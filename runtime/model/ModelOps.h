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
#include <string>
#include <vector>

namespace moert {

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

/// A + B, and A += B, elementwise (same element counts).
Tensor add(const Tensor &A, const Tensor &B);
void addInto(Tensor &A, const Tensor &B);

/// Act = silu(G) * U.
Tensor swiGlu(const Tensor &G, const Tensor &U);
/// From DAct: DG and DU (overwritten).
void swiGluBackward(const Tensor &G, const Tensor &U, const Tensor &DAct, Tensor &DG, Tensor &DU);

/// LayerNorm over the last dimension with weight and bias (the vision
/// tower's): Y = (X - mean) rstd W + B per row, mean and variance in double;
/// Mean and Rstd (resized to the rows) are what the backward reads.
Tensor layerNormForward(const Tensor &X, const Tensor &W, const Tensor &B, double Eps, std::vector<float> &Mean,
                        std::vector<float> &Rstd);
/// DX; DW and DB are accumulated (+=).
Tensor layerNormBackward(const Tensor &X, const Tensor &W, const std::vector<float> &Mean,
                         const std::vector<float> &Rstd, const Tensor &DY, Tensor &DW, Tensor &DB);

/// gelu(X) (in double) and DX = DY gelu'(X).
Tensor gelu(GeluForm Kind, const Tensor &X);
Tensor geluBackward(GeluForm Kind, const Tensor &X, const Tensor &DY);

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
