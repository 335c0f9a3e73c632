//===- StepTimeFigure.cpp - The predicted step time by cause --------------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <fmt/format.h>

using namespace moec;
using namespace moec::report;

namespace {
struct Part {
  const char *Key, *Label, *Colour;
  double Seconds;
};

/// "1.23 s", "45 ms": three figures in the unit that suits.
std::string seconds(double S) {
  return S >= 1      ? fmt::format("{:.3g} s", S)
         : S >= 1e-3 ? fmt::format("{:.3g} ms", S * 1e3)
                     : fmt::format("{:.3g} us", S * 1e6);
}

std::vector<Part> partsOf(const StepTimeBreakdown &T) {
  return {{"compute", "compute", "#4e79a7", T.Compute},
          {"recompute", "recompute", "#a0cbe8", T.Recompute},
          {"tensor_parallel", "tensor-parallel comm.", "#f28e2b", T.TensorParallel},
          {"context_parallel", "context-parallel comm.", "#ffbe7d", T.ContextParallel},
          {"expert_parallel", "expert-parallel comm.", "#e15759", T.ExpertParallel},
          {"pipeline_p2p", "pipeline sends", "#ff9d9a", T.PipelineP2P},
          {"host", "host (kernel issue)", "#b07aa1", T.Host},
          {"activation_offload", "activation offload copies", "#9c755f", T.ActivationOffload},
          {"bubble", "pipeline bubble", "#bab0ac", T.Bubble},
          {"data_parallel", "data-parallel comm.", "#59a14f", T.DataParallel},
          {"optimizer", "optimizer step", "#edc948", T.Optimizer}};
}
} // namespace

void moec::writeStepTimeFigure(const Plan &P, llvm::raw_ostream &OS) {
  const StepTimeBreakdown &T = P.Time;
  std::vector<Part> Parts = partsOf(T);
  OS << "<figure id=\"time\">\n<h2>Predicted step time</h2>\n";
  const double Left = 8, Width = 960, BarH = 34;
  double Sum = 0;
  for (const Part &Pt : Parts)
    Sum += std::max(Pt.Seconds, 0.0);
  double Scale = Sum > 0 ? Width / Sum : 0;
  OS << "<svg class=\"chart\" width=\"" << num(Left * 2 + Width) << "\" height=\"" << num(BarH + 24)
     << "\" viewBox=\"0 0 " << num(Left * 2 + Width) << " " << num(BarH + 24)
     << "\" role=\"img\" aria-label=\"step time by cause\">\n";
  double X = Left;
  for (const Part &Pt : Parts) {
    if (!(Pt.Seconds > 0))
      continue;
    double W = Pt.Seconds * Scale;
    OS << "<g class=\"part\" data-part=\"" << Pt.Key << "\">";
    rect(OS, X, 4, W, BarH, "box", Pt.Colour,
         fmt::format("{}: {:.3f} s ({:.1f}%)", Pt.Label, Pt.Seconds, 100 * Pt.Seconds / Sum));
    // The value on the part when it fits, seconds and share, else the share.
    std::string Both = fmt::format("{} · {:.0f}%", seconds(Pt.Seconds), 100 * Pt.Seconds / Sum);
    std::string Share = fmt::format("{:.0f}%", 100 * Pt.Seconds / Sum);
    if (W >= 6.2 * double(Both.size()) + 8)
      text(OS, X + W / 2, 4 + BarH / 2 + 4, Both, "op-label", "middle");
    else if (W >= 6.2 * double(Share.size()) + 6)
      text(OS, X + W / 2, 4 + BarH / 2 + 4, Share, "op-label", "middle");
    OS << "</g>";
    X += W;
  }
  for (double Tick : ticks(Sum, 8))
    if (Tick <= Sum * (1 + 1e-9))
      text(OS, Left + Tick * Scale, BarH + 20, fmt::format("{:g} s", Tick), "tick", "middle");
  OS << "\n</svg>\n";

  OS << "<table class=\"parts\"><thead><tr><th></th><th>cause</th><th>seconds</th><th>share</th></tr></thead>"
        "<tbody>";
  for (const Part &Pt : Parts)
    OS << "<tr><td><span class=\"swatch\" style=\"background:" << Pt.Colour << "\"></span></td><td>"
       << escapeHtml(Pt.Label) << "</td><td>" << fmt::format("{:.4f}", Pt.Seconds) << "</td><td>"
       << fmt::format("{:.1f}%", Sum > 0 ? 100 * Pt.Seconds / Sum : 0.0) << "</td></tr>";
  OS << "</tbody></table>\n<figcaption>"
     << escapeHtml(fmt::format(
            "One optimizer step on the slowest pipeline stage ({}), {} micro batches: {:.3f} s; {:.0f} tokens/s "
            "per GPU, {:.0f} model TFLOP/s per GPU, MFU {:.1f}% of the dense BF16 peak ({:.1f}% of the "
            "recipe precision's).",
            T.SlowestStage, T.Microbatches, T.StepTime, T.TokensPerSecPerGpu, T.ModelTflopsPerGpu, 100 * T.MFU,
            100 * T.MFUNative))
     << "</figcaption>\n</figure>\n";
}
