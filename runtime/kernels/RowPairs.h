//===- kernels/RowPairs.h - Whole rows from one array to another ----------===//
//
// Where a vision tower's output meets the decoder (model/Model.cpp): its
// merged tokens take the place of their placeholders' embedded rows, its
// deepstack features are added to those rows after the first layers, and
// the gradients go back along the same pairs. The compute backend's copyRows
// and moveRows (Backend.h) and the CUDA kernel (kernels/cuda/Elementwise.h)
// take it.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_ROWPAIRS_H
#define MOERT_KERNELS_ROWPAIRS_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moert {

/// Pairs (From[i], To[i]) of rows of Cols columns: row From[i] of a
/// [SrcRows, Cols] source goes to row To[i] of a [DstRows, Cols]
/// destination. The To rows are distinct, and so are the From rows, so
/// that the pairs may go in any order (a thread each on a GPU).
struct RowPairs {
  int64_t Cols = 0, SrcRows = 0, DstRows = 0;
  std::vector<int32_t> From, To;

  int64_t count() const { return int64_t(From.size()); }
  /// The pairs the other way: a destination row's gradient back to its
  /// source row.
  RowPairs reversed() const { return {Cols, DstRows, SrcRows, To, From}; }
  /// Every row within its array, each at most once a side.
  bool valid() const {
    if (From.size() != To.size() || Cols < 0)
      return false;
    std::vector<bool> SeenFrom(size_t(SrcRows > 0 ? SrcRows : 0)), SeenTo(size_t(DstRows > 0 ? DstRows : 0));
    for (size_t I = 0; I < From.size(); ++I) {
      if (From[I] < 0 || From[I] >= SrcRows || To[I] < 0 || To[I] >= DstRows || SeenFrom[size_t(From[I])] ||
          SeenTo[size_t(To[I])])
        return false;
      SeenFrom[size_t(From[I])] = SeenTo[size_t(To[I])] = true;
    }
    return true;
  }
};

} // namespace moert

#endif
