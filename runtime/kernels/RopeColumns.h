//===- kernels/RopeColumns.h - Which columns rotary embedding turns -------===//
//
// The layouts of rotary embedding the transformer uses (model/ModelOps.h's
// applyRope and applyInterleavedRope), as the compute backend's rope
// operation (Backend.h) and the CUDA kernel (kernels/cuda/Elementwise.h)
// take them.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_ROPECOLUMNS_H
#define MOERT_KERNELS_ROPECOLUMNS_H

#include "kernels/HostDevice.h"

#include <cstdint>

namespace moert {

/// In each group of Stride columns of a row (a head), the RopeDim columns
/// from Offset on turn as RopeDim / 2 pairs: pair j is columns (j, j +
/// RopeDim / 2) (rotate-half), or (2j, 2j + 1) where Interleaved (latent
/// attention's), turned by the row's position times Theta^(-2j / RopeDim).
struct RopeColumns {
  int64_t Stride = 0, Offset = 0, RopeDim = 0;
  bool Interleaved = false;
  /// The positions are a row's own (one per row), or, for multimodal RoPE
  /// (Qwen3-VL's interleaved form), three a row ([rows, 3]: time, row and
  /// column), pair j turning by axis j % 3 while that axis's section lasts
  /// (j < 3 * RowSection for rows, 3 * ColumnSection for columns), else by
  /// time (transformers' apply_interleaved_mrope).
  bool Multimodal = false;
  int64_t RowSection = 0, ColumnSection = 0;

  /// Rotate-half over each head's first Rotated columns.
  static RopeColumns halves(int64_t HeadDim, int64_t Rotated) { return {HeadDim, 0, Rotated}; }
  /// The two columns of pair J, from the group's first.
  MOERT_HOST_DEVICE int64_t first(int64_t J) const { return Offset + (Interleaved ? 2 * J : J); }
  MOERT_HOST_DEVICE int64_t second(int64_t J) const { return Offset + (Interleaved ? 2 * J + 1 : J + RopeDim / 2); }
  /// The multimodal axis pair J turns by: 0 time, 1 row, 2 column.
  MOERT_HOST_DEVICE int64_t axisOf(int64_t J) const {
    const int64_t Axis = J % 3;
    return (Axis == 1 && J < 3 * RowSection) || (Axis == 2 && J < 3 * ColumnSection) ? Axis : 0;
  }
  /// Where pair J of row N finds its position.
  MOERT_HOST_DEVICE int64_t positionIndex(int64_t N, int64_t J) const { return Multimodal ? 3 * N + axisOf(J) : N; }
  /// How many positions Rows rows take.
  int64_t positions(int64_t Rows) const { return Multimodal ? 3 * Rows : Rows; }
  bool valid() const {
    return Stride > 0 && RopeDim > 0 && RopeDim % 2 == 0 && Offset >= 0 && Offset + RopeDim <= Stride;
  }
};

} // namespace moert

#endif
