//===- SweepFigure.cpp - Sweep points: tokens/s against peak memory -------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

using namespace moec;
using namespace moec::report;

namespace {
constexpr size_t MaxLabelledPoints = 24;
} // namespace

void moec::writeSweepFigure(llvm::ArrayRef<SweepPoint> Points, llvm::StringRef Shown, llvm::raw_ostream &OS) {
  OS << "<figure id=\"sweep\">\n<h2>Sweep: predicted speed against peak memory</h2>\n";
  double MaxX = 0, MaxY = 0;
  std::set<double> Capacities;
  size_t Plotted = 0;
  for (const SweepPoint &S : Points) {
    if (!S.Predicted)
      continue;
    ++Plotted;
    MaxX = std::max({MaxX, S.PeakBytes / 1e9, S.CapacityBytes / 1e9});
    MaxY = std::max(MaxY, S.TokensPerSecPerGpu);
    if (S.CapacityBytes > 0)
      Capacities.insert(S.CapacityBytes);
  }
  if (Plotted > 0) {
    std::vector<double> XT = ticks(MaxX * 1.05, 8), YT = ticks(MaxY * 1.08, 6);
    const double XMax = XT.back() > 0 ? XT.back() : 1, YMax = YT.back() > 0 ? YT.back() : 1;
    const double Left = 72, TopPad = 16, PlotW = 640, PlotH = 320, Bottom = 44;
    auto PX = [&](double GB) { return Left + PlotW * GB / XMax; };
    auto PY = [&](double Tps) { return TopPad + PlotH * (1 - Tps / YMax); };
    OS << "<svg class=\"chart\" width=\"" << num(Left + PlotW + 120) << "\" height=\"" << num(TopPad + PlotH + Bottom)
       << "\" viewBox=\"0 0 " << num(Left + PlotW + 120) << " " << num(TopPad + PlotH + Bottom)
       << "\" role=\"img\" aria-label=\"sweep scatter\">\n";
    for (double T : YT) {
      OS << "<line class=\"gridline\" x1=\"" << num(Left) << "\" x2=\"" << num(Left + PlotW) << "\" y1=\"" << num(PY(T))
         << "\" y2=\"" << num(PY(T)) << "\"/>";
      text(OS, Left - 6, PY(T) + 4, fmt::format("{:g}", T), "tick", "end");
    }
    for (double T : XT)
      text(OS, PX(T), TopPad + PlotH + 16, fmt::format("{:g}", T), "tick", "middle");
    text(OS, Left + PlotW / 2, TopPad + PlotH + 36, "predicted peak memory per GPU (GB)", "axis-label", "middle");
    OS << "<text class=\"axis-label\" transform=\"translate(16," << num(TopPad + PlotH / 2)
       << ") rotate(-90)\" text-anchor=\"middle\">tokens/s per GPU</text>\n";
    for (double C : Capacities) {
      OS << "<line class=\"hbm\" x1=\"" << num(PX(C / 1e9)) << "\" x2=\"" << num(PX(C / 1e9)) << "\" y1=\""
         << num(TopPad) << "\" y2=\"" << num(TopPad + PlotH) << "\"/>";
      text(OS, PX(C / 1e9) + 4, TopPad + 12, "HBM " + gigabytes(C), "hbm-label");
    }
    for (const SweepPoint &S : Points) {
      if (!S.Predicted)
        continue;
      double X = PX(S.PeakBytes / 1e9), Y = PY(S.TokensPerSecPerGpu);
      std::string Title = fmt::format("{}: {:.0f} tokens/s/GPU, peak {} of {}", S.Name, S.TokensPerSecPerGpu,
                                      gigabytes(S.PeakBytes), gigabytes(S.CapacityBytes)) +
                          (S.Feasible ? fmt::format(" (rank {})", S.Rank) : " — infeasible: " + S.Reason);
      std::string Classes = std::string("pt ") + (S.Feasible ? "feasible" : "infeasible") +
                            (S.Rank == 1 ? " best" : "") + (S.Name == Shown ? " shown" : "");
      OS << "<g class=\"" << Classes << "\"><title>" << escapeHtml(Title) << "</title>";
      if (S.Feasible)
        OS << "<circle cx=\"" << num(X) << "\" cy=\"" << num(Y) << "\" r=\"" << (S.Rank == 1 ? 7 : 5) << "\"/>";
      else
        OS << "<path d=\"M" << num(X - 5) << " " << num(Y - 5) << "L" << num(X + 5) << " " << num(Y + 5) << "M"
           << num(X - 5) << " " << num(Y + 5) << "L" << num(X + 5) << " " << num(Y - 5) << "\"/>";
      if (S.Name == Shown)
        OS << "<circle class=\"ring\" cx=\"" << num(X) << "\" cy=\"" << num(Y) << "\" r=\"11\"/>";
      // A few points get their swept values as a label; many would overlap.
      if (Plotted <= MaxLabelledPoints) {
        llvm::StringRef Label(S.Name);
        if (size_t Open = Label.find('['); Open != llvm::StringRef::npos && Label.endswith("]"))
          Label = Label.slice(Open + 1, Label.size() - 1);
        text(OS, X + 10, Y + 4, Label, "pt-label");
      }
      OS << "</g>\n";
    }
    OS << "</svg>\n";
    legend(OS, {{"#4e79a7", "feasible (largest: fastest)"},
                {"#d62728", "infeasible (×)"},
                {"#ffffff", "ringed: the point the figures above draw"}});
  } else {
    OS << "<p class=\"note\">No point has a prediction to plot.</p>\n";
  }

  OS << "<table class=\"points\"><thead><tr><th>rank</th><th>point</th><th>tokens/s/GPU</th><th>step s</th>"
        "<th>MFU</th><th>peak / HBM GB</th><th>status</th></tr></thead><tbody>\n";
  for (const SweepPoint &S : Points) {
    OS << "<tr class=\"" << (S.Feasible ? "feasible" : "infeasible") << "\"><td>"
       << (S.Rank ? std::to_string(S.Rank) : "") << "</td><td>" << escapeHtml(S.Name) << "</td>";
    if (S.Predicted)
      OS << fmt::format("<td>{:.0f}</td><td>{:.2f}</td><td>{:.1f}%</td><td>{:.1f} / {:.1f}</td>", S.TokensPerSecPerGpu,
                        S.StepTime, 100 * S.MFU, S.PeakBytes / 1e9, S.CapacityBytes / 1e9);
    else
      OS << "<td></td><td></td><td></td><td></td>";
    OS << "<td>" << (S.Feasible ? std::string("feasible") : escapeHtml(S.Reason)) << "</td></tr>\n";
  }
  OS << "</tbody></table>\n<figcaption>"
     << escapeHtml(fmt::format(
            "{} points: {} feasible, {} infeasible; {} plotted (points with structural errors "
            "have no prediction and appear only in the table).",
            Points.size(), std::count_if(Points.begin(), Points.end(), [](const SweepPoint &S) { return S.Feasible; }),
            std::count_if(Points.begin(), Points.end(), [](const SweepPoint &S) { return !S.Feasible; }), Plotted))
     << "</figcaption>\n</figure>\n";
}
