//===- GpuTestUtil.h - Inputs and comparisons for the GPU kernel tests ----===//
//
// Tolerances: inputs are rounded to bf16 on the host first, so the CPU
// reference and the GPU kernel see identical values; what remains is fp32
// summation order (about 1e-6 relative) and, for bf16 outputs, one rounding
// of the result (2^-9 relative, 0.2%). Checks are relative to the largest
// magnitude of the reference, so near-zero entries do not blow up.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TEST_CUDA_GPUTESTUTIL_H
#define MOERT_TEST_CUDA_GPUTESTUTIL_H

#include "kernels/cuda/DeviceBuffer.h"
#include "model/Model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moert::test {

/// fp32 result (only the summation order differs).
constexpr double F32Tol = 2e-5;
/// Attention: exp/log in fast intrinsics and online rescaling.
constexpr double AttnTol = 2e-4;
/// A bf16-rounded result: one rounding (2^-9) plus slack.
constexpr double Bf16Tol = 8e-3;

/// Normal(0, Std) values, already representable in bf16.
inline std::vector<float> randomBf16(size_t N, uint64_t Seed, float Std = 1.0f) {
  std::mt19937_64 Gen(Seed);
  std::normal_distribution<float> Dist(0.0f, Std);
  std::vector<float> V(N);
  for (float &X : V)
    X = Dist(Gen);
  return cuda::roundedToBf16(V);
}

/// Max |Got - Want| <= Tol * max(1e-3, max |Want|), with the worst index.
/// The floor keeps an all-but-zero reference (the attention gradients of a
/// single token vanish analytically) from demanding agreement in rounding
/// noise.
inline ::testing::AssertionResult near(const std::vector<float> &Got, const std::vector<float> &Want, double Tol,
                                       const std::string &What) {
  if (Got.size() != Want.size())
    return ::testing::AssertionFailure() << What << ": " << Got.size() << " values, want " << Want.size();
  double Scale = 1e-3;
  for (float W : Want)
    Scale = std::max(Scale, double(std::fabs(W)));
  double Worst = 0;
  size_t At = 0;
  for (size_t I = 0; I < Got.size(); ++I) {
    double D = std::fabs(double(Got[I]) - double(Want[I]));
    if (!(D <= Worst)) { // also catches NaN
      Worst = std::isnan(D) ? INFINITY : D;
      At = I;
    }
  }
  if (Worst <= Tol * Scale)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << What << ": |got - want| = " << Worst << " at " << At << " (got " << Got[At]
                                       << ", want " << Want[At] << "), allowed " << Tol * Scale;
}

inline std::vector<float> toFloat(const std::vector<double> &V) { return std::vector<float>(V.begin(), V.end()); }

/// ||Got - Want|| / ||Want|| (Frobenius): a whole gradient's error.
inline double relativeError(const std::vector<float> &Got, const std::vector<float> &Want) {
  double D = 0, W = 0;
  for (size_t I = 0; I < Want.size(); ++I) {
    D += (double(Got[I]) - Want[I]) * (double(Got[I]) - Want[I]);
    W += double(Want[I]) * Want[I];
  }
  return std::sqrt(D / std::max(W, 1e-30));
}

/// The models the whole-stage tests run: layer 0 dense, layer 1 MoE with a
/// shared expert. TopK = Experts routes every token to every expert, so bf16
/// rounding cannot flip a top-k choice.
inline ModelConfig tinyMoe(int64_t TopK) {
  ModelConfig C;
  C.Layers = 2;
  C.DenseLayers = 1;
  C.Hidden = 64;
  C.FfnHidden = 96;
  C.Heads = 4;
  C.KvHeads = 2;
  C.HeadDim = 32;
  C.Vocab = 128;
  C.Experts = 4;
  C.TopK = TopK;
  C.MoeFfnHidden = 32;
  C.SharedFfnHidden = 32;
  return C;
}

} // namespace moert::test

#endif
