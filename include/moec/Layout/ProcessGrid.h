//===- ProcessGrid.h - Megatron-Core rank layout and groups ------*- C++ -*-===//
//
// Megatron-Core lays W ranks out as two grids over the same ranks: a dense
// grid tp-cp-ep-dp-pp (EP = 1) and an expert grid with CP = 1 and TP
// replaced by ETP ("MoE parallel folding"). A rank's coordinates are its
// mixed-radix digits with the leftmost axis fastest; a group for a set of
// axes is the ranks that agree on every other axis, members ordered with
// the set's axes varying leftmost-fastest. This is the only code that does
// rank arithmetic; the planner and the runtime share it.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LAYOUT_PROCESSGRID_H
#define MOEC_LAYOUT_PROCESSGRID_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace moec {

/// One grid: ordered axes (name, size), leftmost fastest.
class RankGrid {
public:
  struct Axis {
    std::string Name;
    int64_t Size;
  };
  explicit RankGrid(std::vector<Axis> Axes);

  int64_t worldSize() const { return World; }
  /// The coordinate of Rank on the named axis.
  int64_t coordinate(int64_t Rank, llvm::StringRef Axis) const;
  /// Every group over the axes named in Mask ("dp-cp", "tp"), in Megatron's
  /// enumeration order.
  std::vector<std::vector<int64_t>> groups(llvm::StringRef Mask) const;
  /// The group over Mask that contains Rank.
  std::vector<int64_t> groupOf(int64_t Rank, llvm::StringRef Mask) const;
  const std::vector<Axis> &axes() const { return Axes; }

private:
  int64_t axisIndex(llvm::StringRef Name) const;
  std::vector<Axis> Axes;
  std::vector<int64_t> Strides;
  int64_t World = 1;
};

struct ProcessGridSizes {
  int64_t TP = 1, CP = 1, EP = 1, ETP = 1, PP = 1, DP = 1, EDP = 1;
  bool PipelineLast = true; // tp-cp-ep-dp-pp; false: tp-cp-ep-pp-dp
};

/// The dense and expert grids of a recipe's layout.
struct ProcessGrid {
  explicit ProcessGrid(const ProcessGridSizes &S);
  RankGrid Dense;
  RankGrid Expert;
  /// Groups by Megatron's names: tp, cp, dp, dp-cp, pp, tp-pp, tp-cp,
  /// tp-dp-cp, tp-dp (dense); ep, etp, tp-ep, tp-ep-pp, edp (expert).
  static llvm::ArrayRef<llvm::StringLiteral> denseGroupNames();
  static llvm::ArrayRef<llvm::StringLiteral> expertGroupNames();
  /// Groups of a named kind ("edp" is the expert grid's dp, "etp" its tp).
  std::vector<std::vector<int64_t>> groups(llvm::StringRef Name) const;
  std::vector<int64_t> groupOf(int64_t Rank, llvm::StringRef Name) const;
};

/// The levels of hierarchical groups inside each of Groups (Megatron-Core
/// 0.16.1 parallel_state.py:360 create_hierarchical_groups, used for
/// hierarchical_context_parallel_sizes): level L groups Sizes[L] members
/// of a group that are prod(Sizes[0..L)) apart. With Sizes [8, 4] over a
/// cp group of 32, level 0 is 4 groups of 8 consecutive members, level 1 is
/// 8 groups of members 8 apart. Empty when the product of Sizes is not the
/// groups' size.
std::vector<std::vector<std::vector<int64_t>>> hierarchicalGroups(const std::vector<std::vector<int64_t>> &Groups,
                                                                  llvm::ArrayRef<int64_t> Sizes);

} // namespace moec

#endif
