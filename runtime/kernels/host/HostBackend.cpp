//===- kernels/host/HostBackend.cpp - OpenBLAS and host loops in fp32 -----===//
#include "kernels/Backend.h"

#include <cblas.h>

#include <cmath>

namespace moert {

namespace {

float sigmoid(float X) { return 1.0f / (1.0f + std::exp(-X)); }

class HostBackend final : public ComputeBackend {
public:
  const char *name() const override { return "cpu"; }
  const char *precision() const override { return "in fp32"; }

  void gemm(const GemmArgs &G) override {
    cblas_sgemm(CblasRowMajor, G.TransA ? CblasTrans : CblasNoTrans, G.TransB ? CblasTrans : CblasNoTrans, G.M, G.N,
                G.K, G.Alpha, G.A, G.LdA, G.B, G.LdB, G.Beta, G.C, G.LdC);
  }

  void rmsNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, double Eps, float *Y,
                      float *Rstd) override {
    for (int64_t I = 0; I < Rows; ++I) {
      const float *In = X + I * Hidden;
      double Sq = 0;
      for (int64_t J = 0; J < Hidden; ++J)
        Sq += double(In[J]) * In[J];
      float R = float(1.0 / std::sqrt(Sq / double(Hidden) + Eps));
      Rstd[I] = R;
      float *Out = Y + I * Hidden;
      for (int64_t J = 0; J < Hidden; ++J)
        Out[J] = In[J] * R * W[J];
    }
  }

  void rmsNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Rstd, const float *DY,
                       float *DX, float *DW) override {
    for (int64_t I = 0; I < Rows; ++I) {
      const float *In = X + I * Hidden, *G = DY + I * Hidden;
      float R = Rstd[I];
      // dx = r * (g*w - x * r^2 * mean(g*w*x)).
      double Dot = 0;
      for (int64_t J = 0; J < Hidden; ++J) {
        Dot += double(G[J]) * W[J] * In[J];
        DW[J] += G[J] * In[J] * R;
      }
      float C = float(Dot / double(Hidden)) * R * R;
      float *Out = DX + I * Hidden;
      for (int64_t J = 0; J < Hidden; ++J)
        Out[J] = R * (G[J] * W[J] - In[J] * C);
    }
  }

  void swiGluForward(int64_t Count, const float *G, const float *U, float *Act) override {
    for (int64_t I = 0; I < Count; ++I)
      Act[I] = G[I] * sigmoid(G[I]) * U[I];
  }

  void swiGluBackward(int64_t Count, const float *G, const float *U, const float *DAct, float *DG, float *DU) override {
    for (int64_t I = 0; I < Count; ++I) {
      float S = sigmoid(G[I]), Silu = G[I] * S;
      DU[I] = DAct[I] * Silu;
      DG[I] = DAct[I] * U[I] * (S + G[I] * S * (1.0f - S));
    }
  }
};

} // namespace

ComputeBackend &hostBackend() {
  static HostBackend Host;
  return Host;
}

} // namespace moert
