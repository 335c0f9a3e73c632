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
  /// The positions are a row's own (one per row), or each pair's
  /// (multimodal RoPE's: [rows, RopeDim / 2], pair j of row n reading
  /// element n * RopeDim / 2 + j).
  bool PairPositions = false;

  /// Rotate-half over each head's first Rotated columns.
  static RopeColumns halves(int64_t HeadDim, int64_t Rotated) { return {HeadDim, 0, Rotated, false, false}; }
  /// The two columns of pair J, from the group's first.
  MOERT_HOST_DEVICE int64_t first(int64_t J) const { return Offset + (Interleaved ? 2 * J : J); }
  MOERT_HOST_DEVICE int64_t second(int64_t J) const { return Offset + (Interleaved ? 2 * J + 1 : J + RopeDim / 2); }
  /// Where pair J of row N finds its position.
  MOERT_HOST_DEVICE int64_t positionIndex(int64_t N, int64_t J) const {
    return PairPositions ? N * (RopeDim / 2) + J : N;
  }
  /// How many positions Rows rows take.
  int64_t positions(int64_t Rows) const { return PairPositions ? Rows * (RopeDim / 2) : Rows; }
  bool valid() const {
    return Stride > 0 && RopeDim > 0 && RopeDim % 2 == 0 && Offset >= 0 && Offset + RopeDim <= Stride;
  }
};

} // namespace moert

#endif
