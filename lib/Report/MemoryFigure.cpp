//===- MemoryFigure.cpp - Memory per pipeline stage as stacked bars -------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <algorithm>
#include <fmt/format.h>

using namespace moec;
using namespace moec::report;

namespace {
/// Colours by MemoryBreakdown::items() order.
const char *const CategoryColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#bab0ac"};

std::string categoryLabel(llvm::StringRef Name) {
  std::string S = Name.str();
  std::replace(S.begin(), S.end(), '_', ' ');
  return S;
}
} // namespace

void moec::writeMemoryFigure(const Plan &P, llvm::raw_ostream &OS) {
  const MemoryEstimate &M = P.Memory;
  const size_t N = M.PerStage.size();
  OS << "<figure id=\"memory\">\n<h2>Memory per pipeline stage</h2>\n";
  if (N == 0) {
    OS << "<p class=\"note\">The planner estimated no stage.</p></figure>\n";
    return;
  }
  double Max = M.CapacityBytes;
  for (const MemoryBreakdown &B : M.PerStage)
    Max = std::max(Max, B.total());
  std::vector<double> Ticks = ticks(Max / 1e9 * 1.05, 5);
  const double Top = Ticks.back() > 0 ? Ticks.back() * 1e9 : 1;

  const double Left = 64, TopPad = 24, Height = 260, Bottom = 36;
  const double Slot = std::clamp(760.0 / double(N), 10.0, 72.0), BarW = Slot * 0.72;
  const double Width = Left + Slot * double(N) + 230;
  auto Y = [&](double Bytes) { return TopPad + Height * (1 - Bytes / Top); };

  OS << "<svg class=\"chart\" width=\"" << num(Width) << "\" height=\"" << num(TopPad + Height + Bottom)
     << "\" viewBox=\"0 0 " << num(Width) << " " << num(TopPad + Height + Bottom)
     << "\" role=\"img\" aria-label=\"memory per pipeline stage\">\n";
  for (double T : Ticks) {
    OS << "<line class=\"gridline\" x1=\"" << num(Left) << "\" x2=\"" << num(Left + Slot * double(N)) << "\" y1=\""
       << num(Y(T * 1e9)) << "\" y2=\"" << num(Y(T * 1e9)) << "\"/>";
    text(OS, Left - 6, Y(T * 1e9) + 4, fmt::format("{:g}", T), "tick", "end");
  }
  text(OS, 14, TopPad + Height / 2, "GB", "axis-label", "middle");
  size_t LabelEvery = std::max<size_t>(1, size_t(28.0 / Slot + 0.999));
  for (size_t S = 0; S < N; ++S) {
    const MemoryBreakdown &B = M.PerStage[S];
    double X = Left + Slot * double(S) + (Slot - BarW) / 2;
    bool Over = B.total() > M.CapacityBytes;
    std::string Summary = fmt::format("stage {}: {} of {}", S, gigabytes(B.total()), gigabytes(M.CapacityBytes));
    OS << "<g class=\"stage" << (Over ? " over" : "") << "\" data-stage=\"" << S << "\"><title>" << escapeHtml(Summary);
    for (const auto &[Name, Bytes] : B.items())
      if (Bytes > 0)
        OS << "\n" << escapeHtml(categoryLabel(Name)) << ": " << escapeHtml(gigabytes(Bytes));
    OS << "</title>";
    double Base = 0;
    size_t C = 0;
    for (const auto &[Name, Bytes] : B.items()) {
      const char *Colour = CategoryColours[C++ % std::size(CategoryColours)];
      if (Bytes <= 0)
        continue;
      rect(OS, X, Y(Base + Bytes), BarW, Y(Base) - Y(Base + Bytes), "seg", Colour, "",
           fmt::format("data-category=\"{}\"", Name));
      Base += Bytes;
    }
    if (Over)
      rect(OS, X, Y(Base), BarW, Y(0) - Y(Base), "over-outline", "none");
    // The total on the bar itself, so that a saved or printed page (no
    // hover) still says it, where the bars are wide enough to hold it.
    if (S % LabelEvery == 0)
      text(OS, X + BarW / 2, Y(Base) - 4, fmt::format("{:.1f}", B.total() / 1e9), "bar-value", "middle");
    OS << "</g>";
    if (S % LabelEvery == 0)
      text(OS, X + BarW / 2, TopPad + Height + 16, std::to_string(S), "tick", "middle");
  }
  text(OS, Left + Slot * double(N) / 2, TopPad + Height + 32, "pipeline stage", "axis-label", "middle");
  double HbmY = Y(M.CapacityBytes);
  OS << "\n<line class=\"hbm\" x1=\"" << num(Left) << "\" x2=\"" << num(Left + Slot * double(N) + 8) << "\" y1=\""
     << num(HbmY) << "\" y2=\"" << num(HbmY) << "\"/>";
  text(OS, Left + Slot * double(N) + 12, HbmY + 4, fmt::format("HBM {} ({})", gigabytes(M.CapacityBytes), P.R.Gpu.Name),
       "hbm-label");
  OS << "\n</svg>\n";

  std::vector<std::pair<std::string, std::string>> Items;
  size_t C = 0;
  for (const auto &Item : MemoryBreakdown().items())
    Items.push_back({CategoryColours[C++ % std::size(CategoryColours)], categoryLabel(Item.first)});
  legend(OS, Items);
  OS << "<figcaption>Predicted bytes per GPU on each pipeline stage by category; the line is the GPU's memory. "
     << escapeHtml(fmt::format("Peak: stage {} with {} of {} ({}).", M.PeakStage, gigabytes(M.PeakBytes),
                               gigabytes(M.CapacityBytes), M.fits() ? "fits" : "does not fit"))
     << "</figcaption>\n</figure>\n";
}
