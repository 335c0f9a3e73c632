//===- SweepFigure.cpp - Sweep points: tokens/s against peak memory -------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <set>

using namespace moec;
using namespace moec::report;

namespace {
// Past this many points labels are not tried: hover gives every name.
constexpr size_t MaxLabelledPoints = 64;

/// A label's box in page coordinates, about 5.6 pixels a character of the
/// 10-pixel label font.
struct Box {
  double X0, Y0, X1, Y1;
  bool overlaps(const Box &O) const { return X0 < O.X1 && O.X0 < X1 && Y0 < O.Y1 && O.Y0 < Y1; }
};

/// The range an axis shows: the data with a margin, not from zero, so that
/// points a few percent apart are told apart.
std::pair<double, double> axisRange(double Lo, double Hi) {
  if (!(Hi > Lo)) {
    double Pad = std::max(std::abs(Lo) * 0.1, 1.0);
    return {std::max(0.0, Lo - Pad), Hi + Pad};
  }
  double Pad = (Hi - Lo) * 0.08;
  return {std::max(0.0, Lo - Pad), Hi + Pad};
}
} // namespace

void moec::writeSweepFigure(llvm::ArrayRef<SweepPoint> Points, llvm::StringRef Shown, llvm::raw_ostream &OS) {
  OS << "<figure id=\"sweep\">\n<h2>Sweep: predicted speed against peak memory</h2>\n";
  double MinX = HUGE_VAL, MaxX = 0, MinY = HUGE_VAL, MaxY = 0;
  std::set<double> Capacities;
  size_t Plotted = 0, Unlabelled = 0;
  for (const SweepPoint &S : Points) {
    if (!S.Predicted)
      continue;
    ++Plotted;
    MinX = std::min(MinX, S.PeakBytes / 1e9);
    MaxX = std::max(MaxX, S.PeakBytes / 1e9);
    MinY = std::min(MinY, S.TokensPerSecPerGpu);
    MaxY = std::max(MaxY, S.TokensPerSecPerGpu);
    if (S.CapacityBytes > 0) {
      Capacities.insert(S.CapacityBytes);
      MinX = std::min(MinX, S.CapacityBytes / 1e9);
      MaxX = std::max(MaxX, S.CapacityBytes / 1e9);
    }
  }
  if (Plotted > 0) {
    auto [XLo, XHi] = axisRange(MinX, MaxX);
    auto [YLo, YHi] = axisRange(MinY, MaxY);
    std::vector<double> XT = ticks(XLo, XHi, 8), YT = ticks(YLo, YHi, 6);
    const double X0 = XT.front(), X1 = XT.back() > X0 ? XT.back() : X0 + 1;
    const double Y0 = YT.front(), Y1 = YT.back() > Y0 ? YT.back() : Y0 + 1;
    const double Left = 72, TopPad = 16, PlotW = 640, PlotH = 320, Bottom = 44, Right = 160;
    auto PX = [&](double GB) { return Left + PlotW * (GB - X0) / (X1 - X0); };
    auto PY = [&](double Tps) { return TopPad + PlotH * (1 - (Tps - Y0) / (Y1 - Y0)); };
    OS << "<svg class=\"chart\" width=\"" << num(Left + PlotW + Right) << "\" height=\"" << num(TopPad + PlotH + Bottom)
       << "\" viewBox=\"0 0 " << num(Left + PlotW + Right) << " " << num(TopPad + PlotH + Bottom)
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
    // Placed labels and markers: a label goes where it covers neither.
    std::vector<Box> Taken;
    for (const SweepPoint &S : Points)
      if (S.Predicted)
        Taken.push_back({PX(S.PeakBytes / 1e9) - 6, PY(S.TokensPerSecPerGpu) - 6, PX(S.PeakBytes / 1e9) + 6,
                         PY(S.TokensPerSecPerGpu) + 6});
    for (double C : Capacities) {
      OS << "<line class=\"hbm\" x1=\"" << num(PX(C / 1e9)) << "\" x2=\"" << num(PX(C / 1e9)) << "\" y1=\""
         << num(TopPad) << "\" y2=\"" << num(TopPad + PlotH) << "\"/>";
      std::string Label = "HBM " + gigabytes(C);
      text(OS, PX(C / 1e9) + 4, TopPad + 12, Label, "hbm-label");
      Taken.push_back({PX(C / 1e9), TopPad, PX(C / 1e9) + 8 + 6.2 * double(Label.size()), TopPad + 16});
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
      // The swept values as a label, right, left, above or below the
      // marker, wherever it overlaps no other label or marker.
      llvm::StringRef Label(S.Name);
      if (size_t Open = Label.find('['); Open != llvm::StringRef::npos && Label.endswith("]"))
        Label = Label.slice(Open + 1, Label.size() - 1);
      double W = 5.6 * double(Label.size()), H = 12;
      bool Placed = false;
      if (Plotted <= MaxLabelledPoints) {
        struct Spot {
          double X, Y;
          const char *Anchor;
        };
        // Clear of the marker, or of its ring for the point drawn above.
        const double Off = S.Name == Shown ? 14 : 10;
        for (const Spot &At : {Spot{X + Off, Y + 4, "start"}, Spot{X - Off, Y + 4, "end"}, Spot{X, Y - Off, "middle"},
                               Spot{X, Y + Off + 8, "middle"}}) {
          double BX0 = llvm::StringRef(At.Anchor) == "start" ? At.X
                       : llvm::StringRef(At.Anchor) == "end" ? At.X - W
                                                             : At.X - W / 2;
          Box B{BX0, At.Y - H + 2, BX0 + W, At.Y + 2};
          if (B.X0 < 0 || B.X1 > Left + PlotW + Right || B.Y0 < 0 || B.Y1 > TopPad + PlotH + 4)
            continue;
          // The point's own marker is not in the way of its label.
          if (std::any_of(Taken.begin(), Taken.end(),
                          [&](const Box &O) { return B.overlaps(O) && !(O.X0 == X - 6 && O.Y0 == Y - 6); }))
            continue;
          text(OS, At.X, At.Y, Label, "pt-label", At.Anchor);
          Taken.push_back(B);
          Placed = true;
          break;
        }
      }
      Unlabelled += !Placed;
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
            "have no prediction and appear only in the table). The axes span the plotted values, not from "
            "zero.{}",
            Points.size(), std::count_if(Points.begin(), Points.end(), [](const SweepPoint &S) { return S.Feasible; }),
            std::count_if(Points.begin(), Points.end(), [](const SweepPoint &S) { return !S.Feasible; }), Plotted,
            Unlabelled ? fmt::format(" {} point{} without room for a label: hover to see {}.", Unlabelled,
                                     Unlabelled == 1 ? "" : "s", Unlabelled == 1 ? "it" : "them")
                       : std::string()))
     << "</figcaption>\n</figure>\n";
}
