//===- kernels/Backend.cpp - Reference compositions; the current backend --===//
#include "kernels/Backend.h"

#include "kernels/host/Blas.h"

#include <algorithm>

namespace moert {

ComputeBackend::~ComputeBackend() = default;

void ComputeBackend::mlpForward(const MlpArgs &A) {
  const int64_t Rows = A.rows(), H = A.Hidden, F = A.Ffn;
  A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
    gemmOn(*this, {false, false, M, F, H, 1.0f, A.X + Begin * H, H, A.Gate[E], F, 0.0f, A.G + Begin * F, F});
    gemmOn(*this, {false, false, M, F, H, 1.0f, A.X + Begin * H, H, A.Up[E], F, 0.0f, A.U + Begin * F, F});
  });
  swiGluForward(Rows * F, A.G, A.U, A.Act);
  if (A.Y)
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      gemmOn(*this, {false, false, M, H, F, 1.0f, A.Act + Begin * F, F, A.Down[E], H, 0.0f, A.Y + Begin * H, H});
    });
}

void ComputeBackend::mlpBackward(const MlpArgs &A) {
  const int64_t Rows = A.rows(), H = A.Hidden, F = A.Ffn;
  std::vector<float> Recomputed;
  const float *Act = A.Act;
  if (!Act) {
    Recomputed.resize(size_t(Rows * F));
    swiGluForward(Rows * F, A.G, A.U, Recomputed.data());
    Act = Recomputed.data();
  }
  // Down: DAct = DY Down^T, DDown += Act^T DY.
  std::vector<float> DAct(size_t(Rows * F)), DG(DAct.size()), DU(DAct.size());
  A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
    gemmOn(*this, {false, true, M, F, H, 1.0f, A.DY + Begin * H, H, A.Down[E], H, 0.0f, DAct.data() + Begin * F, F});
    gemmOn(*this, {true, false, F, H, M, 1.0f, Act + Begin * F, F, A.DY + Begin * H, H, 1.0f, A.DDown[E], H});
  });
  swiGluBackward(Rows * F, A.G, A.U, DAct.data(), DG.data(), DU.data());
  // Gate and up: DX = DG Gate^T + DU Up^T, DGate += X^T DG, DUp += X^T DU.
  A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
    gemmOn(*this, {false, true, M, H, F, 1.0f, DG.data() + Begin * F, F, A.Gate[E], F, 0.0f, A.DX + Begin * H, H});
    gemmOn(*this, {false, true, M, H, F, 1.0f, DU.data() + Begin * F, F, A.Up[E], F, 1.0f, A.DX + Begin * H, H});
    gemmOn(*this, {true, false, H, F, M, 1.0f, A.X + Begin * H, H, DG.data() + Begin * F, F, 1.0f, A.DGate[E], F});
    gemmOn(*this, {true, false, H, F, M, 1.0f, A.X + Begin * H, H, DU.data() + Begin * F, F, 1.0f, A.DUp[E], F});
  });
}

void ComputeBackend::attentionDelta(int64_t Batch, int64_t Tokens, int64_t QHeads, int64_t VDim, const float *Out,
                                    const float *DOut, float *Delta) {
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t I = 0; I < Tokens; ++I)
      for (int64_t H = 0; H < QHeads; ++H) {
        const int64_t Base = ((B * Tokens + I) * QHeads + H) * VDim;
        double Sum = 0;
        for (int64_t C = 0; C < VDim; ++C)
          Sum += double(DOut[Base + C]) * Out[Base + C];
        Delta[(B * QHeads + H) * Tokens + I] = float(Sum);
      }
}

void ComputeBackend::permuteRows(const PermuteArgs &A, const float *X, float *Rows) {
  const int64_t H = A.Hidden;
  for (int64_t J = 0; J < A.copies(); ++J)
    std::copy_n(X + A.Permutation[J] / A.TopK * H, H, Rows + J * H);
}

void ComputeBackend::permuteRowsBackward(const PermuteArgs &A, const float *DRows, float *DX) {
  const int64_t H = A.Hidden;
  std::fill_n(DX, A.Tokens * H, 0.0f);
  for (int64_t C = 0; C < A.copies(); ++C) {
    const float *In = DRows + A.RowOfCopy[C] * H;
    float *Out = DX + C / A.TopK * H;
    for (int64_t I = 0; I < H; ++I)
      Out[I] += In[I];
  }
}

void ComputeBackend::unpermuteRows(const PermuteArgs &A, const float *Rows, float *Y) {
  const int64_t H = A.Hidden;
  std::fill_n(Y, A.Tokens * H, 0.0f);
  for (int64_t C = 0; C < A.copies(); ++C) {
    const float W = A.Weights[C], *In = Rows + A.RowOfCopy[C] * H;
    float *Out = Y + C / A.TopK * H;
    for (int64_t I = 0; I < H; ++I)
      Out[I] += W * In[I];
  }
}

void ComputeBackend::unpermuteRowsBackward(const PermuteArgs &A, const float *DY, const float *Rows, float *DRows,
                                           float *DWeights) {
  const int64_t H = A.Hidden;
  for (int64_t C = 0; C < A.copies(); ++C) {
    const float *G = DY + C / A.TopK * H, *O = Rows + A.RowOfCopy[C] * H;
    double Dot = 0;
    for (int64_t I = 0; I < H; ++I)
      Dot += double(G[I]) * double(O[I]);
    DWeights[C] = float(Dot);
    float *Out = DRows + A.RowOfCopy[C] * H;
    for (int64_t I = 0; I < H; ++I)
      Out[I] = A.Weights[C] * G[I];
  }
}

namespace {
thread_local ComputeBackend *Current = nullptr;
} // namespace

ComputeBackend &currentBackend() { return Current ? *Current : hostBackend(); }

BackendScope::BackendScope(ComputeBackend &Backend) : Previous(Current) { Current = &Backend; }

BackendScope::~BackendScope() { Current = Previous; }

void mlpForwardKeeping(ComputeBackend &Backend, const MlpArgs &A, const void *KeepFor, bool KeepRows) {
  if (!KeepFor) {
    Backend.mlpForward(A);
    return;
  }
  const int64_t Products = A.rows() * A.Ffn;
  std::vector<HeldArray> Kept = {{A.G, Products, HeldArray::BackendOnly}, {A.U, Products, HeldArray::BackendOnly}};
  if (KeepRows) // written by the host, read by the products and their backward
    Kept.push_back({const_cast<float *>(A.X), A.rows() * A.Hidden, HeldArray::Read});
  std::vector<HeldArray> Held = Kept;
  if (A.Act) // remade by the backward, so not kept
    Held.push_back({A.Act, Products, HeldArray::BackendOnly});
  HeldArrays Hold(Backend, Held);
  Backend.mlpForward(A);
  Backend.keepArrays(KeepFor, Kept);
}

} // namespace moert
