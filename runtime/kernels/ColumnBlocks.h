//===- kernels/ColumnBlocks.h - Blocks of columns between two arrays ------===//
//
// Where latent attention's activations are split and assembled: its latent
// from its RoPE key, and each head's key and value from the up-projection
// and the key shared by every head (model/Model.cpp). The compute backend's
// copyColumns (Backend.h) and the CUDA kernel (kernels/cuda/Elementwise.h)
// take it.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_COLUMNBLOCKS_H
#define MOERT_KERNELS_COLUMNBLOCKS_H

#include <cstdint>

namespace moert {

/// For every row r < Rows, block b < Blocks and column c < Cols of
/// row-major arrays: Dst[r DstLd + b DstBlock + c] = Src[r SrcLd + b
/// SrcBlock + c], or += where Accumulate, the blocks in order (a DstBlock of
/// 0 sums the source's blocks into one).
struct ColumnBlocks {
  int64_t Rows = 0, Blocks = 1, Cols = 0;
  int64_t SrcLd = 0, SrcBlock = 0;
  int64_t DstLd = 0, DstBlock = 0;
  bool Accumulate = false;

  bool empty() const { return Rows == 0 || Blocks == 0 || Cols == 0; }
  /// The elements from the first to the last one read or written.
  int64_t srcExtent() const { return empty() ? 0 : (Rows - 1) * SrcLd + (Blocks - 1) * SrcBlock + Cols; }
  int64_t dstExtent() const { return empty() ? 0 : (Rows - 1) * DstLd + (Blocks - 1) * DstBlock + Cols; }
  /// Body(source offset, destination offset) for every element, blocks
  /// inner, in the order the sums run.
  template <typename Fn> void forEach(Fn Body) const {
    for (int64_t R = 0; R < Rows; ++R)
      for (int64_t C = 0; C < Cols; ++C)
        for (int64_t B = 0; B < Blocks; ++B)
          Body(R * SrcLd + B * SrcBlock + C, R * DstLd + B * DstBlock + C);
  }
};

} // namespace moert

#endif
