//===- GridFigure.cpp - The rank grid coloured by process group -----------===//
//
// Small multiples, one per group kind, so that all five are seen at once
// without script: ranks in rank order, whole nodes to a row (about 16 cells,
// more on large jobs so that the panel stays short), each cell coloured by
// the index of its group of that kind.
//
//===----------------------------------------------------------------------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace moec;
using namespace moec::report;

namespace {
constexpr int64_t MaxRows = 32;
const char *const AloneFill = "#d9d9d9";

/// One panel: Kind names the groups (data-group), Title heads the panel.
void writePanel(const Plan &P, llvm::StringRef Kind, llvm::StringRef Title,
                const std::vector<std::vector<int64_t>> &Groups, llvm::raw_ostream &OS) {
  const ProcessGrid &G = *P.Grid;
  const int64_t World = G.Dense.worldSize();
  std::vector<int64_t> GroupOf(size_t(World), -1);
  for (size_t I = 0; I < Groups.size(); ++I)
    for (int64_t Rank : Groups[I])
      if (Rank >= 0 && Rank < World)
        GroupOf[size_t(Rank)] = int64_t(I);
  int64_t Size = Groups.empty() ? 1 : int64_t(Groups.front().size());

  const int64_t PerNode = std::max<int64_t>(P.R.Gpu.GpusPerNode, 1);
  const int64_t Nodes = (World + PerNode - 1) / PerNode;
  // About 16 cells a row (whole nodes), more when the rows would pass MaxRows.
  const int64_t NodesPerRow =
      std::min(Nodes, std::max((Nodes + MaxRows - 1) / MaxRows, std::max<int64_t>(1, 16 / PerNode)));
  const int64_t Cols = std::min(PerNode * NodesPerRow, World);
  const int64_t Rows = (World + Cols - 1) / Cols;
  const double Cell = std::clamp(std::floor(256.0 / double(Cols)), 3.0, 22.0), NodeGap = Cell >= 6 ? 3 : 1;
  auto X = [&](int64_t Col) { return double(Col) * Cell + double(Col / PerNode) * NodeGap; };
  const double W = X(Cols - 1) + Cell, H = double(Rows) * Cell;

  OS << "<div class=\"panel\"><h3>" << escapeHtml(Title) << " = " << Size << "</h3>";
  OS << "<svg class=\"grid-panel\" data-group=\"" << escapeHtml(Kind) << "\" width=\"" << num(W) << "\" height=\""
     << num(H) << "\" viewBox=\"0 0 " << num(W) << " " << num(H) << "\">";
  for (int64_t Rank = 0; Rank < World; ++Rank) {
    int64_t Index = GroupOf[size_t(Rank)];
    const std::string Fill = Size <= 1 || Index < 0 ? AloneFill : groupColour(Index);
    double CX = X(Rank % Cols), CY = double(Rank / Cols) * Cell;
    rect(OS, CX, CY, Cell - (Cell >= 6 ? 1 : 0), Cell - (Cell >= 6 ? 1 : 0), "rank", Fill,
         World > MaxDetailedRanks
             ? std::string()
             : fmt::format("rank {} (node {}): {} group {}", Rank, Rank / PerNode, Kind.str(), Index),
         fmt::format("data-rank=\"{}\" data-group-index=\"{}\"", Rank, Index));
    if (Cell >= 20 && World <= 64)
      text(OS, CX + (Cell - 1) / 2, CY + Cell / 2 + 3, std::to_string(Rank), "rank-label", "middle");
  }
  OS << "</svg><p class=\"panel-note\">"
     << escapeHtml(Size <= 1
                       ? std::string("every rank alone")
                       : fmt::format("{} group{} of {} ranks", Groups.size(), Groups.size() == 1 ? "" : "s", Size))
     << "</p></div>\n";
}
} // namespace

void moec::writeGridFigure(const Plan &P, llvm::raw_ostream &OS) {
  OS << "<figure id=\"grid\">\n<h2>Rank grid by process group</h2>\n";
  if (!P.Grid) {
    OS << "<p class=\"note\">This plan was built without its rank layout.</p></figure>\n";
    return;
  }
  const int64_t World = P.Grid->Dense.worldSize();
  if (World > MaxDrawnRanks) {
    OS << "<p class=\"note\">"
       << escapeHtml(fmt::format("{} ranks: more than this page draws ({}).", World, MaxDrawnRanks))
       << "</p></figure>\n";
    return;
  }
  OS << "<div class=\"panels\">\n";
  for (llvm::StringRef Kind : {"tp", "cp", "ep", "dp", "pp"}) {
    writePanel(P, Kind, Kind, P.Grid->groups(Kind), OS);
    if (Kind != "cp")
      continue;
    // Hierarchical CP: a panel per level, next to the cp groups they split.
    const ParallelConfig &Par = P.R.Parallel;
    auto Levels = hierarchicalGroups(P.Grid->groups("cp"), Par.CpHierarchy);
    for (size_t L = 0; L < Levels.size(); ++L) {
      const char *How = Par.CpCommKind != CpComm::A2AP2P ? "" : L == 0 ? " (a2a)" : " (p2p ring)";
      writePanel(P, fmt::format("cp.{}", L), fmt::format("cp level {}{}", L, How), Levels[L], OS);
    }
  }
  OS << "</div>\n<figcaption>"
     << escapeHtml(fmt::format("{} ranks on {} node{} of {} GPUs, one cell per rank in rank order, whole nodes "
                               "to a row (a gap between nodes); ranks of one group share a colour (ep groups "
                               "are the expert grid's). Grey: groups of one rank.{} Order: {}.",
                               World, P.R.Nodes, P.R.Nodes == 1 ? "" : "s", P.R.Gpu.GpusPerNode,
                               P.R.Parallel.CpHierarchy.empty()
                                   ? std::string()
                                   : fmt::format(" The cp levels are the hierarchical context-parallel groups "
                                                 "(cp_hierarchy = [{}], innermost first).",
                                                 fmt::join(P.R.Parallel.CpHierarchy, ", ")),
                               P.R.Parallel.Order == RankOrder::TpCpEpDpPp ? "tp-cp-ep-dp-pp" : "tp-cp-ep-pp-dp"))
     << "</figcaption>\n</figure>\n";
}
