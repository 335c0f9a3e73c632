//===- HtmlReport.cpp - The report page ------------------------------------===//
#include "moec/Report/HtmlReport.h"
#include "Svg.h"

#include <fmt/format.h>

using namespace moec;

std::string moec::escapeHtml(llvm::StringRef Text) {
  std::string Out;
  Out.reserve(Text.size());
  for (char C : Text) {
    switch (C) {
    case '&':
      Out += "&amp;";
      break;
    case '<':
      Out += "&lt;";
      break;
    case '>':
      Out += "&gt;";
      break;
    case '"':
      Out += "&quot;";
      break;
    case '\'':
      Out += "&#39;";
      break;
    default:
      Out += C;
    }
  }
  return Out;
}

namespace {
// Everything inline: the page opens from a file or an attachment alone.
const char *const Style = R"css(
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px; max-width: 1100px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 8px; }
h3 { font-size: 13px; margin: 0 0 4px; font-weight: 600; }
table.facts td { padding: 1px 12px 1px 0; vertical-align: top; }
table.facts td:first-child { color: #666; }
figure { margin: 20px 0; padding: 14px 16px; border: 1px solid #ddd; border-radius: 6px; overflow-x: auto; }
figcaption { color: #555; margin-top: 8px; }
.note { color: #8a4b08; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg text.axis-label { fill: #666; }
svg text.op-label { fill: #111; font-size: 10px; pointer-events: none; }
svg text.rank-label { font-size: 9px; pointer-events: none; }
svg text.hbm-label { fill: #d62728; }
svg text.bar-value { font-size: 10px; fill: #333; pointer-events: none; }
line.gridline { stroke: #eee; }
line.hbm { stroke: #d62728; stroke-width: 2; stroke-dasharray: 6 3; }
g.stage rect.over-outline { stroke: #d62728; stroke-width: 2; }
g.stage:hover rect.seg, g.op:hover rect, g.part:hover rect { opacity: 0.75; }
g.op rect { stroke: #fff; stroke-width: 0.5; }
g.pt.feasible circle { fill: #4e79a7; }
g.pt.infeasible path { stroke: #d62728; stroke-width: 2.5; fill: none; }
g.pt circle.ring { fill: none; stroke: #222; stroke-width: 1.5; }
ul.legend { list-style: none; padding: 0; margin: 6px 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 5px; vertical-align: -1px; border: 1px solid #bbb; }
.panels { display: flex; flex-wrap: wrap; gap: 16px 28px; }
.panel-note { margin: 2px 0 0; color: #666; font-size: 12px; }
table.parts, table.points { border-collapse: collapse; margin-top: 8px; }
table.parts td, table.parts th, table.points td, table.points th { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
table.points tr.infeasible { color: #a33; }
table.points td:nth-child(-n+6), table.points th { white-space: nowrap; }
table.points td:nth-child(7) { overflow-wrap: anywhere; min-width: 280px; }
path.axis-break { stroke: #444; stroke-width: 1.5; fill: none; }
g.steady rect { stroke: #fff; stroke-width: 0.5; }
svg text.pt-label { font-size: 10px; fill: #555; }
polyline.loss { fill: none; stroke: #4e79a7; stroke-width: 1.5; }
circle.valid { fill: #e15759; }
table.run td, table.run th { padding: 2px 10px; text-align: right; border-bottom: 1px solid #eee; }
table.run td:first-child, table.run th:first-child { text-align: left; }
)css";

void writeFacts(const Plan &P, llvm::ArrayRef<SweepPoint> Sweep, llvm::raw_ostream &OS) {
  const Recipe &R = P.R;
  const ParallelConfig &Par = R.Parallel;
  std::vector<std::pair<std::string, std::string>> Rows = {
      {"file", P.SourceFile},
      {"model", R.Model.Name},
      {"cluster", fmt::format("{} nodes x {} {} = {} GPUs", R.Nodes, R.Gpu.GpusPerNode, R.Gpu.Name, R.WorldSize)},
      {"layout", fmt::format("tp {}, cp {}, ep {}, etp {}, pp {}, vpp {}, dp {}, edp {}", Par.TP, Par.CP, Par.EP,
                             Par.ETP, Par.PP, Par.VPP, Par.DP, Par.EDP)},
      {"batch", fmt::format("seq_len {}, micro {}, global {} ({} micro batches per step and data-parallel rank)",
                            R.SeqLen, R.MicroBatch, R.GlobalBatch, P.Pipeline.Microbatches)},
      {"precision", precisionName(R.Prec).str()},
      {"recipe hash", P.RecipeHash}};
  if (!Sweep.empty()) {
    const SweepPoint *Best = nullptr;
    for (const SweepPoint &S : Sweep)
      if (S.Rank == 1)
        Best = &S;
    Rows.insert(Rows.begin(),
                {"sweep", fmt::format("{} points; the figures draw {}{}", Sweep.size(), R.PointName,
                                      Best && Best->Name == R.PointName ? " (the fastest feasible)" : "")});
  }
  OS << "<table class=\"facts\">";
  for (const auto &[Key, Value] : Rows)
    OS << "<tr><td>" << escapeHtml(Key) << "</td><td>" << escapeHtml(Value) << "</td></tr>";
  OS << "</table>\n";
}
} // namespace

namespace {
void writeDiagnostics(llvm::ArrayRef<ReportDiagnostic> Diagnostics, llvm::raw_ostream &OS) {
  OS << "<section id=\"diagnostics\">\n<h2>Diagnostics</h2>\n";
  if (Diagnostics.empty()) {
    OS << "<p>moec check reports nothing for this recipe.</p>\n</section>\n";
    return;
  }
  OS << "<table class=\"diagnostics\"><tr><th>severity</th><th>where</th><th>message</th><th>id</th></tr>";
  for (const ReportDiagnostic &D : Diagnostics)
    OS << "<tr class=\"" << escapeHtml(D.Severity) << "\" data-id=\"" << escapeHtml(D.Id) << "\"><td>"
       << escapeHtml(D.Severity) << "</td><td>" << escapeHtml(D.Where) << "</td><td>" << escapeHtml(D.Message)
       << (D.Point.empty() ? std::string() : " (" + escapeHtml(D.Point) + ")") << "</td><td>" << escapeHtml(D.Id)
       << "</td></tr>";
  OS << "</table>\n</section>\n";
}
} // namespace

std::string moec::renderHtmlReport(const Plan &P, llvm::ArrayRef<SweepPoint> Sweep,
                                   llvm::ArrayRef<ReportDiagnostic> Diagnostics, const ReportRun *Run) {
  std::string Page;
  llvm::raw_string_ostream OS(Page);
  std::string Title = "moec report: " + (P.R.PointName.empty() ? P.R.Name : P.R.PointName);
  OS << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     // No script, no fetches: the report is data, not a program.
     << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
     << "<meta name=\"generator\" content=\"moec\">\n<title>" << escapeHtml(Title) << "</title>\n<style>" << Style
     << "</style>\n</head>\n<body>\n<header><h1>" << escapeHtml(Title) << "</h1>\n";
  writeFacts(P, Sweep, OS);
  OS << "</header>\n";
  writeMemoryFigure(P, OS);
  writeScheduleFigure(P, OS);
  writeGridFigure(P, OS);
  writeStepTimeFigure(P, OS);
  if (!Sweep.empty())
    writeSweepFigure(Sweep, P.R.PointName, OS);
  if (Run)
    writeRunFigure(P, *Run, OS);
  writeDiagnostics(Diagnostics, OS);
  OS << "</body>\n</html>\n";
  return std::move(OS.str());
}
