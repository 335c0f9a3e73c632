//===- ProcessGrid.cpp ----------------------------------------------------===//
#include "moec/Layout/ProcessGrid.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"
#include <cassert>

using namespace moec;

RankGrid::RankGrid(std::vector<Axis> AxesIn) : Axes(std::move(AxesIn)) {
  for (const Axis &A : Axes) {
    Strides.push_back(World);
    World *= A.Size;
  }
}

int64_t RankGrid::axisIndex(llvm::StringRef Name) const {
  for (size_t I = 0; I < Axes.size(); ++I)
    if (Axes[I].Name == Name)
      return I;
  llvm::report_fatal_error(llvm::Twine("unknown process-grid axis '") + Name + "'");
}

int64_t RankGrid::coordinate(int64_t Rank, llvm::StringRef Axis) const {
  int64_t I = axisIndex(Axis);
  return (Rank / Strides[I]) % Axes[I].Size;
}

std::vector<std::vector<int64_t>> RankGrid::groups(llvm::StringRef Mask) const {
  llvm::SmallVector<llvm::StringRef, 4> Names;
  Mask.split(Names, '-');
  std::vector<bool> InMask(Axes.size(), false);
  for (llvm::StringRef N : Names)
    InMask[axisIndex(N)] = true;
  // Masked axes vary within a group, the others across groups; both
  // leftmost-fastest, as Megatron's generate_masked_orthogonal_rank_groups.
  std::vector<size_t> Inner, Outer;
  for (size_t I = 0; I < Axes.size(); ++I)
    (InMask[I] ? Inner : Outer).push_back(I);
  auto Count = [&](const std::vector<size_t> &Idx) {
    int64_t N = 1;
    for (size_t I : Idx)
      N *= Axes[I].Size;
    return N;
  };
  auto Offset = [&](const std::vector<size_t> &Idx, int64_t Linear) {
    int64_t Rank = 0;
    for (size_t I : Idx) {
      Rank += (Linear % Axes[I].Size) * Strides[I];
      Linear /= Axes[I].Size;
    }
    return Rank;
  };
  std::vector<std::vector<int64_t>> Out(Count(Outer));
  for (int64_t G = 0; G < int64_t(Out.size()); ++G) {
    int64_t Base = Offset(Outer, G);
    int64_t Members = Count(Inner);
    Out[G].reserve(Members);
    for (int64_t M = 0; M < Members; ++M)
      Out[G].push_back(Base + Offset(Inner, M));
  }
  return Out;
}

std::vector<int64_t> RankGrid::groupOf(int64_t Rank, llvm::StringRef Mask) const {
  for (std::vector<int64_t> &G : groups(Mask))
    if (llvm::is_contained(G, Rank))
      return G;
  return {};
}

static std::vector<RankGrid::Axis> orderAxes(std::vector<RankGrid::Axis> Prefix, int64_t DP, int64_t PP,
                                             bool PipelineLast) {
  if (PipelineLast) {
    Prefix.push_back({"dp", DP});
    Prefix.push_back({"pp", PP});
  } else {
    Prefix.push_back({"pp", PP});
    Prefix.push_back({"dp", DP});
  }
  return Prefix;
}

ProcessGrid::ProcessGrid(const ProcessGridSizes &S)
    : Dense(orderAxes({{"tp", S.TP}, {"cp", S.CP}, {"ep", 1}}, S.DP, S.PP, S.PipelineLast)),
      Expert(orderAxes({{"tp", S.ETP}, {"cp", 1}, {"ep", S.EP}}, S.EDP, S.PP, S.PipelineLast)) {}

llvm::ArrayRef<llvm::StringLiteral> ProcessGrid::denseGroupNames() {
  static const llvm::StringLiteral Names[] = {"tp", "cp", "dp", "dp-cp", "pp", "tp-pp", "tp-cp", "tp-dp-cp", "tp-dp"};
  return Names;
}

llvm::ArrayRef<llvm::StringLiteral> ProcessGrid::expertGroupNames() {
  static const llvm::StringLiteral Names[] = {"ep", "etp", "tp-ep", "tp-ep-pp", "edp"};
  return Names;
}

static std::pair<bool, std::string> expertMask(llvm::StringRef Name) {
  if (Name == "edp")
    return {true, "dp"};
  if (Name == "etp")
    return {true, "tp"};
  if (Name == "ep" || Name == "tp-ep" || Name == "tp-ep-pp")
    return {true, Name.str()};
  return {false, Name.str()};
}

std::vector<std::vector<int64_t>> ProcessGrid::groups(llvm::StringRef Name) const {
  auto [IsExpert, Mask] = expertMask(Name);
  return IsExpert ? Expert.groups(Mask) : Dense.groups(Mask);
}

std::vector<int64_t> ProcessGrid::groupOf(int64_t Rank, llvm::StringRef Name) const {
  auto [IsExpert, Mask] = expertMask(Name);
  return IsExpert ? Expert.groupOf(Rank, Mask) : Dense.groupOf(Rank, Mask);
}

std::vector<std::vector<std::vector<int64_t>>> moec::hierarchicalGroups(const std::vector<std::vector<int64_t>> &Groups,
                                                                        llvm::ArrayRef<int64_t> Sizes) {
  int64_t Product = 1;
  for (int64_t S : Sizes) {
    if (S < 1)
      return {};
    Product *= S;
  }
  for (const std::vector<int64_t> &G : Groups)
    if (int64_t(G.size()) != Product)
      return {};
  std::vector<std::vector<std::vector<int64_t>>> Levels(Sizes.size());
  int64_t Inner = 1; // members apart at this level
  for (size_t L = 0; L < Sizes.size(); ++L) {
    const int64_t Size = Sizes[L], Outer = Product / (Inner * Size);
    for (const std::vector<int64_t> &G : Groups)
      for (int64_t O = 0; O < Outer; ++O)
        for (int64_t U = 0; U < Inner; ++U) {
          std::vector<int64_t> Sub;
          for (int64_t S = 0; S < Size; ++S)
            Sub.push_back(G[size_t(O * Size * Inner + S * Inner + U)]);
          Levels[L].push_back(std::move(Sub));
        }
    Inner *= Size;
  }
  return Levels;
}
