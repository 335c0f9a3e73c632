//===- Svg.h - Small helpers the report's figures share ----------*- C++ -*-===//
//
// Private to lib/Report. Coordinates are written with one decimal: enough
// for a screen and keeps pages small.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LIB_REPORT_SVG_H
#define MOEC_LIB_REPORT_SVG_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include <string>
#include <vector>

namespace moec::report {

/// A coordinate or length: one decimal, no "-0.0".
std::string num(double V);

/// "12.3 GB" (decimal units, as the planner prints them).
std::string gigabytes(double Bytes);

/// Tick values from 0 up to the first at or past Max, about Count of them,
/// at 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double Max, int Count);
/// The same from the last tick at or below Lo.
std::vector<double> ticks(double Lo, double Hi, int Count);

/// Writes <rect> with the given class and fill; Title (already plain text,
/// escaped here) becomes a <title> child when non-empty. Extra is written
/// verbatim inside the tag (data- attributes built by the caller from
/// numbers only).
void rect(llvm::raw_ostream &OS, double X, double Y, double W, double H, llvm::StringRef Class, llvm::StringRef Fill,
          llvm::StringRef Title = "", llvm::StringRef Extra = "");

/// Writes <text> at (X, Y) with escaped content.
void text(llvm::raw_ostream &OS, double X, double Y, llvm::StringRef Content, llvm::StringRef Class = "",
          llvm::StringRef Anchor = "start");

/// A distinct colour for group Index: hues a golden angle apart, lightness
/// alternating so that neighbours differ.
std::string groupColour(int64_t Index);

/// An HTML legend: one swatch and label per (colour, label) pair.
void legend(llvm::raw_ostream &OS, llvm::ArrayRef<std::pair<std::string, std::string>> Items);

} // namespace moec::report

#endif
