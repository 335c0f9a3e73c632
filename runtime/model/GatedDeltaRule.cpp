//===- model/GatedDeltaRule.cpp - The gated delta rule ---------------------===//
#include "model/GatedDeltaRule.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace moert;

namespace {

/// Tokens between the states the backward keeps.
constexpr int64_t ChunkTokens = 64;

/// One token's step on the state S (Dk x Dv, row-major): S <- exp(g) S, then
/// S += k u^T with u = beta (v - S^T k). Leaves the decayed state's read
/// S^T k in P and u in U.
void step(const DeltaRuleHead &H, float *S, const float *K, const float *V, float G, float Beta, float *P, float *U) {
  const int64_t Dk = H.Dk, Dv = H.Dv;
  const float Decay = std::exp(G);
  for (int64_t I = 0; I < Dk * Dv; ++I)
    S[I] *= Decay;
  std::fill(P, P + Dv, 0.0f);
  for (int64_t I = 0; I < Dk; ++I)
    for (int64_t J = 0; J < Dv; ++J)
      P[J] += K[I] * S[I * Dv + J];
  for (int64_t J = 0; J < Dv; ++J)
    U[J] = Beta * (V[J] - P[J]);
  for (int64_t I = 0; I < Dk; ++I)
    for (int64_t J = 0; J < Dv; ++J)
      S[I * Dv + J] += K[I] * U[J];
}

} // namespace

void moert::gatedDeltaRuleForward(const DeltaRuleHead &H, const float *Q, const float *K, const float *V,
                                  const float *G, const float *Beta, float *O) {
  const int64_t Dk = H.Dk, Dv = H.Dv;
  const float Scale = 1.0f / std::sqrt(float(Dk));
  std::vector<float> S(size_t(Dk * Dv), 0.0f), P(static_cast<size_t>(Dv)), U(static_cast<size_t>(Dv));
  for (int64_t T = 0; T < H.Tokens; ++T) {
    const float *Qt = Q + T * H.QkStride, *Kt = K + T * H.QkStride;
    step(H, S.data(), Kt, V + T * H.VStride, G[T * H.GStride], Beta[T * H.GStride], P.data(), U.data());
    float *Ot = O + T * H.VStride;
    std::fill(Ot, Ot + Dv, 0.0f);
    for (int64_t I = 0; I < Dk; ++I)
      for (int64_t J = 0; J < Dv; ++J)
        Ot[J] += Qt[I] * S[size_t(I * Dv + J)];
    for (int64_t J = 0; J < Dv; ++J)
      Ot[J] *= Scale;
  }
}

void moert::gatedDeltaRuleBackward(const DeltaRuleHead &H, const float *Q, const float *K, const float *V,
                                   const float *G, const float *Beta, const float *DO, float *DQ, float *DK, float *DV,
                                   float *DG, float *DBeta) {
  const int64_t Dk = H.Dk, Dv = H.Dv, SN = Dk * Dv;
  const float Scale = 1.0f / std::sqrt(float(Dk));
  const int64_t Chunks = (H.Tokens + ChunkTokens - 1) / ChunkTokens;
  // The state before each chunk's first token.
  std::vector<float> Checkpoints(size_t(Chunks * SN), 0.0f), S(size_t(SN), 0.0f), P(static_cast<size_t>(Dv)),
      U(static_cast<size_t>(Dv));
  for (int64_t T = 0; T < H.Tokens; ++T) {
    if (T % ChunkTokens == 0)
      std::copy(S.begin(), S.end(), Checkpoints.begin() + (T / ChunkTokens) * SN);
    step(H, S.data(), K + T * H.QkStride, V + T * H.VStride, G[T * H.GStride], Beta[T * H.GStride], P.data(), U.data());
  }
  // States[I] = the state before token First + I (and after the chunk's last
  // token at the end); the reads and deltas of the chunk's tokens.
  std::vector<float> States(static_cast<size_t>((ChunkTokens + 1) * SN)), Reads(static_cast<size_t>(ChunkTokens * Dv)),
      Deltas(static_cast<size_t>(ChunkTokens * Dv));
  std::vector<float> DS(size_t(SN), 0.0f), DA(static_cast<size_t>(SN)), DU(static_cast<size_t>(Dv)),
      DP(static_cast<size_t>(Dv));
  for (int64_t C = Chunks; C-- > 0;) {
    const int64_t First = C * ChunkTokens, Last = std::min(H.Tokens, First + ChunkTokens);
    std::copy(Checkpoints.begin() + C * SN, Checkpoints.begin() + (C + 1) * SN, States.begin());
    for (int64_t T = First; T < Last; ++T) {
      float *Next = States.data() + (T - First + 1) * SN;
      std::copy(Next - SN, Next, Next);
      step(H, Next, K + T * H.QkStride, V + T * H.VStride, G[T * H.GStride], Beta[T * H.GStride],
           Reads.data() + (T - First) * Dv, Deltas.data() + (T - First) * Dv);
    }
    for (int64_t T = Last; T-- > First;) {
      const float *Qt = Q + T * H.QkStride, *Kt = K + T * H.QkStride, *Vt = V + T * H.VStride,
                  *DOt = DO + T * H.VStride;
      const float *Before = States.data() + (T - First) * SN, *After = Before + SN;
      const float *Pt = Reads.data() + (T - First) * Dv, *Ut = Deltas.data() + (T - First) * Dv;
      const float Decay = std::exp(G[T * H.GStride]), B = Beta[T * H.GStride];
      float *DQt = DQ + T * H.QkStride, *DKt = DK + T * H.QkStride, *DVt = DV + T * H.VStride;
      // o = Scale S_t^T q.
      for (int64_t I = 0; I < Dk; ++I) {
        double Dq = 0;
        for (int64_t J = 0; J < Dv; ++J) {
          DS[size_t(I * Dv + J)] += Scale * Qt[I] * DOt[J];
          Dq += double(After[I * Dv + J]) * DOt[J];
        }
        DQt[I] += float(Scale * Dq);
      }
      // S_t = A_t + k u^T.
      std::fill(DU.begin(), DU.end(), 0.0f);
      for (int64_t I = 0; I < Dk; ++I) {
        double Dk1 = 0;
        for (int64_t J = 0; J < Dv; ++J) {
          Dk1 += double(DS[size_t(I * Dv + J)]) * Ut[J];
          DU[size_t(J)] += DS[size_t(I * Dv + J)] * Kt[I];
        }
        DKt[I] += float(Dk1);
      }
      // u = beta (v - p), p = A_t^T k.
      double Db = 0;
      for (int64_t J = 0; J < Dv; ++J) {
        Db += double(DU[size_t(J)]) * (Vt[J] - Pt[J]);
        DVt[J] += B * DU[size_t(J)];
        DP[size_t(J)] = -B * DU[size_t(J)];
      }
      DBeta[T * H.GStride] += float(Db);
      // A_t = exp(g) S_{t-1}, read by p and carried into S_t.
      double Dg = 0;
      for (int64_t I = 0; I < Dk; ++I) {
        double Dk2 = 0;
        for (int64_t J = 0; J < Dv; ++J) {
          float A = Decay * Before[I * Dv + J];
          float D = DS[size_t(I * Dv + J)] + Kt[I] * DP[size_t(J)];
          Dk2 += double(A) * DP[size_t(J)];
          Dg += double(D) * A;
          DA[size_t(I * Dv + J)] = D;
        }
        DKt[I] += float(Dk2);
      }
      DG[T * H.GStride] += float(Dg);
      for (int64_t I = 0; I < SN; ++I)
        DS[size_t(I)] = Decay * DA[size_t(I)];
    }
  }
}
