//===- kernels/Backend.cpp - Reference compositions; the current backend --===//
#include "kernels/Backend.h"

#include "comm/Communicator.h"
#include "kernels/host/Blas.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

namespace {

/// The AdamW update of N consecutive elements: the hot loop of a step on the
/// host (every parameter element, every step). The arithmetic is fp32, as in
/// torch's and Apex's fused Adam that Megatron-Core steps with (master
/// weights, moments and gradients are all fp32 there too), so a vector
/// register holds twice the elements that double arithmetic would. The
/// arrays never overlap, so the compiler may update several elements in one
/// vector register; each element's arithmetic is unchanged, operation for
/// operation (the file is built with -fno-math-errno, which lets sqrt
/// vectorize without changing its result, and -ffp-contract=off, so no FMA
/// changes a rounding): the same bits as one element at a time, and as the
/// CUDA kernel's. On x86-64 with GCC, target_clones adds AVX-512 and AVX2
/// versions chosen at load time (not under ASan, whose shadow memory is not
/// set up yet when the loader runs the clones' resolver).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void updateRange(float *__restrict Param, float *__restrict M, float *__restrict V, const float *__restrict Grad,
                 size_t N, const AdamWArgs C) {
  const float KeepM = 1.0f - C.Beta1, KeepV = 1.0f - C.Beta2, Shrink = 1.0f - C.Decay;
  for (size_t K = 0; K < N; ++K) {
    float G = Grad[K] * C.Scale;
    float NewM = C.Beta1 * M[K] + KeepM * G;
    float NewV = C.Beta2 * V[K] + KeepV * G * G;
    M[K] = NewM;
    V[K] = NewV;
    Param[K] = Param[K] * Shrink - C.StepSize * NewM / (std::sqrt(NewV) / C.Bc2Sqrt + C.Eps);
  }
}

/// Eight independent double accumulators, so that the loop is not one chain
/// of dependent additions; the order is fixed, so the sum is the same on
/// every run.
double sumOfSquares(const float *X, size_t N) {
  constexpr size_t Lanes = 8;
  double S[Lanes] = {};
  size_t I = 0;
  for (; I + Lanes <= N; I += Lanes)
    for (size_t L = 0; L < Lanes; ++L)
      S[L] += double(X[I + L]) * double(X[I + L]);
  for (; I < N; ++I)
    S[0] += double(X[I]) * double(X[I]);
  double Total = 0;
  for (double Part : S)
    Total += Part;
  return Total;
}

} // namespace

void ComputeBackend::adamW(const AdamWArgs &A) { updateRange(A.Param, A.M, A.V, A.Grad, size_t(A.Count), A); }

double ComputeBackend::sumSquares(const std::vector<ConstArray> &Arrays) {
  double Total = 0;
  for (const ConstArray &A : Arrays)
    Total += sumOfSquares(A.Data, size_t(A.Count));
  return Total;
}

void ComputeBackend::embeddingForward(const EmbeddingArgs &A, const float *Table, float *Out) {
  for (int64_t N = 0; N < A.Tokens; ++N) {
    float *Row = Out + N * A.Hidden;
    if (A.holds(A.Ids[N]))
      std::copy_n(Table + (A.Ids[N] - A.VocabStart) * A.Hidden, A.Hidden, Row);
    else
      std::fill_n(Row, A.Hidden, 0.0f);
  }
}

void ComputeBackend::embeddingBackward(const EmbeddingArgs &A, const float *D, float *DTable) {
  for (int64_t N = 0; N < A.Tokens; ++N) {
    if (!A.holds(A.Ids[N]))
      continue;
    float *Dst = DTable + (A.Ids[N] - A.VocabStart) * A.Hidden;
    const float *Src = D + N * A.Hidden;
    for (int64_t J = 0; J < A.Hidden; ++J)
      Dst[J] += Src[J];
  }
}

void ComputeBackend::zero(float *Data, int64_t Count) { std::fill_n(Data, Count, 0.0f); }

void ComputeBackend::copy(const float *Src, float *Dst, int64_t Count) { std::copy_n(Src, Count, Dst); }

void ComputeBackend::copyColumns(const ColumnBlocks &Blocks, const float *Src, float *Dst) {
  if (Blocks.Accumulate)
    Blocks.forEach([&](int64_t From, int64_t To) { Dst[To] += Src[From]; });
  else
    Blocks.forEach([&](int64_t From, int64_t To) { Dst[To] = Src[From]; });
}

void ComputeBackend::copyRows(const RowPairs &Pairs, const float *Src, float *Dst, bool Accumulate) {
  if (!Pairs.valid())
    throw std::invalid_argument("copyRows: a row outside its array, or one twice");
  for (int64_t I = 0; I < Pairs.count(); ++I) {
    const float *From = Src + Pairs.From[size_t(I)] * Pairs.Cols;
    float *To = Dst + Pairs.To[size_t(I)] * Pairs.Cols;
    for (int64_t C = 0; C < Pairs.Cols; ++C)
      To[C] = Accumulate ? To[C] + From[C] : From[C];
  }
}

void ComputeBackend::moveRows(const RowPairs &Pairs, float *Src, float *Dst) {
  ComputeBackend::copyRows(Pairs, Src, Dst, /*Accumulate=*/false);
  for (int32_t Row : Pairs.From)
    std::fill_n(Src + Row * Pairs.Cols, Pairs.Cols, 0.0f);
}

void ComputeBackend::add(int64_t Count, const float *A, const float *B, float *Out) {
  for (int64_t I = 0; I < Count; ++I)
    Out[I] = A[I] + B[I];
}

void ComputeBackend::allReduceSum(float *Data, int64_t Count, Communicator &Group) {
  Group.allReduceSum(Data, size_t(Count));
}

void ComputeBackend::reduceScatterSum(const float *In, float *Out, int64_t PerRank, Communicator &Group) {
  Group.reduceScatterSum(In, Out, size_t(PerRank));
}

void ComputeBackend::allGather(const float *In, float *Out, int64_t PerRank, Communicator &Group) {
  Group.allGather(In, Out, size_t(PerRank));
}

void ComputeBackend::gatherActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group, ReadBy) {
  Group.allGather(In, Out, size_t(PerRank));
}

void ComputeBackend::reduceScatterActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group) {
  Group.reduceScatterSum(In, Out, size_t(PerRank));
}

void ComputeBackend::allToAllV(const float *In, const std::vector<size_t> &InCounts,
                               const std::vector<size_t> &InOffsets, float *Out, const std::vector<size_t> &OutCounts,
                               const std::vector<size_t> &OutOffsets, Communicator &Group) {
  Group.allToAllV(In, InCounts, InOffsets, Out, OutCounts, OutOffsets);
}

std::unique_ptr<Request> ComputeBackend::sendActivations(const float *Data, int64_t Count, int Peer, int Tag,
                                                         Communicator &Group) {
  return Group.isend(Data, size_t(Count), Peer, Tag);
}

std::unique_ptr<Request> ComputeBackend::receiveActivations(float *Data, int64_t Count, int Peer, int Tag,
                                                            Communicator &Group) {
  return Group.irecv(Data, size_t(Count), Peer, Tag);
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
