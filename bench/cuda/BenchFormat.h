//===- BenchFormat.h - Numbers in the CUDA benchmarks' tables -------------===//
#ifndef MOERT_BENCH_CUDA_BENCHFORMAT_H
#define MOERT_BENCH_CUDA_BENCHFORMAT_H

#include <sstream>
#include <string>

namespace moert::bench {

/// V with Digits digits after the point.
inline std::string fixed(double V, int Digits) {
  std::ostringstream OS;
  OS.precision(Digits);
  OS << std::fixed << V;
  return OS.str();
}

} // namespace moert::bench

#endif
