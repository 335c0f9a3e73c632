//===- Svg.cpp - Small helpers the report's figures share -----------------===//
#include "Svg.h"
#include "moec/Report/HtmlReport.h"

#include <cmath>
#include <fmt/format.h>

using namespace moec;

std::string report::num(double V) {
  if (!std::isfinite(V))
    V = 0;
  std::string S = fmt::format("{:.1f}", V);
  if (S == "-0.0")
    S = "0.0";
  if (S.size() > 2 && S.compare(S.size() - 2, 2, ".0") == 0)
    S.resize(S.size() - 2);
  return S;
}

std::string report::gigabytes(double Bytes) { return fmt::format("{:.1f} GB", Bytes / 1e9); }

std::vector<double> report::ticks(double Max, int Count) { return ticks(0, Max, Count); }

std::vector<double> report::ticks(double Lo, double Hi, int Count) {
  if (!std::isfinite(Lo) || !std::isfinite(Hi) || !(Hi > Lo))
    return {std::isfinite(Lo) ? Lo : 0};
  double Raw = (Hi - Lo) / std::max(Count, 1);
  double Pow = std::pow(10.0, std::floor(std::log10(Raw)));
  double Step = Pow;
  for (double F : {1.0, 2.0, 5.0, 10.0})
    if (F * Pow >= Raw) {
      Step = F * Pow;
      break;
    }
  std::vector<double> Out;
  Out.push_back(std::floor(Lo / Step + 1e-9) * Step);
  while (Out.back() < Hi - (Hi - Lo) * 1e-9)
    Out.push_back(Out.back() + Step);
  return Out;
}

void report::rect(llvm::raw_ostream &OS, double X, double Y, double W, double H, llvm::StringRef Class,
                  llvm::StringRef Fill, llvm::StringRef Title, llvm::StringRef Extra) {
  OS << "<rect class=\"" << escapeHtml(Class) << "\" x=\"" << num(X) << "\" y=\"" << num(Y) << "\" width=\""
     << num(std::max(W, 0.0)) << "\" height=\"" << num(std::max(H, 0.0)) << "\" fill=\"" << escapeHtml(Fill) << "\"";
  if (!Extra.empty())
    OS << " " << Extra;
  if (Title.empty()) {
    OS << "/>";
    return;
  }
  OS << "><title>" << escapeHtml(Title) << "</title></rect>";
}

void report::text(llvm::raw_ostream &OS, double X, double Y, llvm::StringRef Content, llvm::StringRef Class,
                  llvm::StringRef Anchor) {
  OS << "<text x=\"" << num(X) << "\" y=\"" << num(Y) << "\"";
  if (!Class.empty())
    OS << " class=\"" << escapeHtml(Class) << "\"";
  if (Anchor != "start")
    OS << " text-anchor=\"" << escapeHtml(Anchor) << "\"";
  OS << ">" << escapeHtml(Content) << "</text>";
}

std::string report::groupColour(int64_t Index) {
  double Hue = std::fmod(double(Index) * 137.508, 360.0);
  int Light = Index % 2 ? 68 : 48;
  return fmt::format("hsl({:.0f},62%,{}%)", Hue, Light);
}

void report::legend(llvm::raw_ostream &OS, llvm::ArrayRef<std::pair<std::string, std::string>> Items) {
  OS << "<ul class=\"legend\">";
  for (const auto &[Colour, Label] : Items)
    OS << "<li><span class=\"swatch\" style=\"background:" << escapeHtml(Colour) << "\"></span>" << escapeHtml(Label)
       << "</li>";
  OS << "</ul>\n";
}
