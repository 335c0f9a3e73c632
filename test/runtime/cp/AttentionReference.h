//===- AttentionReference.h - Naive causal GQA attention in double --------===//
//
// The textbook definition, one score at a time, for tests to compare against:
// same layouts as ContextParallelAttention.h with the whole sequence local.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TEST_CP_ATTENTIONREFERENCE_H
#define MOERT_TEST_CP_ATTENTIONREFERENCE_H

#include "parallel/cp/ContextParallelAttention.h"

#include <cmath>
#include <vector>

namespace moert::test {

struct ReferenceAttention {
  std::vector<double> Out, Lse, DQ, DK, DV;
};

/// Forward and (with DOut) backward of causal attention over the full sequence.
inline ReferenceAttention referenceAttention(const AttentionDims &D, const std::vector<float> &Q,
                                             const std::vector<float> &K, const std::vector<float> &V,
                                             const std::vector<float> &DOut) {
  int64_t S = D.SeqLen, Hq = D.QHeads, Hk = D.KvHeads, Hd = D.HeadDim, Vd = D.vHeadDim();
  int64_t Group = Hq / Hk;
  double Scale = 1.0 / std::sqrt(double(Hd));
  ReferenceAttention R;
  R.Out.assign(size_t(D.Batch * S * Hq * Vd), 0.0);
  R.DQ.assign(Q.size(), 0.0);
  R.DK.assign(K.size(), 0.0);
  R.DV.assign(V.size(), 0.0);
  R.Lse.assign(size_t(D.Batch * Hq * S), 0.0);
  auto QAt = [&](int64_t B, int64_t T, int64_t H) { return ((B * S + T) * Hq + H) * Hd; };
  auto KAt = [&](int64_t B, int64_t T, int64_t G) { return ((B * S + T) * Hk + G) * Hd; };
  auto VAt = [&](int64_t B, int64_t T, int64_t G) { return ((B * S + T) * Hk + G) * Vd; };
  auto OAt = [&](int64_t B, int64_t T, int64_t H) { return ((B * S + T) * Hq + H) * Vd; };
  std::vector<double> P(static_cast<size_t>(S));
  for (int64_t B = 0; B < D.Batch; ++B)
    for (int64_t H = 0; H < Hq; ++H) {
      int64_t G = H / Group;
      for (int64_t I = 0; I < S; ++I) {
        double Max = -INFINITY;
        for (int64_t J = 0; J <= I; ++J) {
          double Dot = 0;
          for (int64_t C = 0; C < Hd; ++C)
            Dot += double(Q[QAt(B, I, H) + C]) * K[KAt(B, J, G) + C];
          P[J] = Dot * Scale;
          Max = std::max(Max, P[J]);
        }
        double Sum = 0;
        for (int64_t J = 0; J <= I; ++J)
          Sum += std::exp(P[J] - Max);
        double Lse = Max + std::log(Sum);
        R.Lse[(B * Hq + H) * S + I] = Lse;
        for (int64_t J = 0; J <= I; ++J) {
          P[J] = std::exp(P[J] - Lse);
          for (int64_t C = 0; C < Vd; ++C)
            R.Out[OAt(B, I, H) + C] += P[J] * V[VAt(B, J, G) + C];
        }
        if (DOut.empty())
          continue;
        double Delta = 0;
        for (int64_t C = 0; C < Vd; ++C)
          Delta += DOut[OAt(B, I, H) + C] * R.Out[OAt(B, I, H) + C];
        for (int64_t J = 0; J <= I; ++J) {
          double Dp = 0;
          for (int64_t C = 0; C < Vd; ++C) {
            Dp += double(DOut[OAt(B, I, H) + C]) * V[VAt(B, J, G) + C];
            R.DV[VAt(B, J, G) + C] += P[J] * DOut[OAt(B, I, H) + C];
          }
          double Ds = P[J] * (Dp - Delta) * Scale;
          for (int64_t C = 0; C < Hd; ++C) {
            R.DQ[QAt(B, I, H) + C] += Ds * K[KAt(B, J, G) + C];
            R.DK[KAt(B, J, G) + C] += Ds * Q[QAt(B, I, H) + C];
          }
        }
      }
    }
  return R;
}

} // namespace moert::test

#endif
