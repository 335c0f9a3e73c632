//===- parallel/tp/SequenceParallelLinear.cpp -----------------------------===//
#include "parallel/tp/SequenceParallelLinear.h"

#include "kernels/Backend.h"
#include "kernels/host/Blas.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

namespace moert {

namespace {
[[noreturn]] void fail(const char *What) {
  std::fprintf(stderr, "moerun: internal error in tp: %s\n", What);
  std::abort();
}
} // namespace

WholeSequence::WholeSequence(Communicator &Tp, const Tensor &XShard, ReadBy Readers)
    : Shard(XShard), Gathered(Tp.size() > 1) {
  if (!Gathered)
    return;
  Storage = Tensor({XShard.rows() * Tp.size(), XShard.cols()});
  if (Storage.numel())
    Hold.emplace(currentBackend(), std::vector{HeldArray::wide(Storage.data(), Storage.numel())});
  currentBackend().gatherActivations(XShard.data(), Storage.data(), XShard.numel(), Tp, Readers);
}

PartialSums::PartialSums(std::vector<int64_t> Shape) : Sums(std::move(Shape)) {
  if (Sums.numel())
    Hold.emplace(currentBackend(), std::vector{HeldArray::wide(Sums.data(), Sums.numel())});
}

Tensor gatherSequence(Communicator &Tp, const Tensor &Shard) {
  Tensor Full({Shard.rows() * Tp.size(), Shard.cols()});
  currentBackend().gatherActivations(Shard.data(), Full.data(), Shard.numel(), Tp);
  return Full;
}

Tensor reduceScatterSequence(Communicator &Tp, Tensor Partial) {
  if (Tp.size() == 1)
    return Partial;
  Tensor Shard;
  reduceScatterSequence(Tp, Partial, Shard);
  return Shard;
}

void reduceScatterSequence(Communicator &Tp, const Tensor &Partial, Tensor &Shard) {
  if (Partial.rows() % Tp.size())
    fail("reduceScatterSequence: rows do not divide by the tp size");
  const std::vector<int64_t> Shape = {Partial.rows() / Tp.size(), Partial.cols()};
  if (Shard.shape() != Shape)
    Shard.resize(Shape);
  currentBackend().reduceScatterActivations(Partial.data(), Shard.data(), Shard.numel(), Tp);
}

Tensor matmul(const Tensor &X, const Tensor &W) {
  Tensor Y;
  matmul(X, W, Y);
  return Y;
}

void matmul(const Tensor &X, const Tensor &W, Tensor &Y) {
  if (X.cols() != W.rows())
    fail("matmul: inner dimensions differ");
  const std::vector<int64_t> Shape = {X.rows(), W.cols()};
  if (Y.shape() != Shape)
    Y.resize(Shape);
  if (Y.numel())
    gemm(false, false, X.rows(), W.cols(), X.cols(), 1.0f, X.data(), W.data(), 0.0f, Y.data());
}

namespace {

HeldArray readOnly(const Tensor &T) { return {const_cast<float *>(T.data()), T.numel(), HeldArray::Read}; }

HeldArray summedInto(Tensor &T) { return {T.data(), T.numel(), HeldArray::Accumulate}; }
} // namespace

void matmulBackward(const Tensor &X, const Tensor &W, const Tensor &DY, Tensor &DW, Tensor &DX, float Beta) {
  const std::vector<int64_t> Shape = {X.rows(), X.cols()};
  if (Beta == 0.0f && DX.shape() != Shape)
    DX.resize(Shape);
  if (X.rows() == 0)
    return;
  // DY is read twice; DX, where added to, is a sum (of this product and what
  // the caller adds); else the product's result.
  std::vector<HeldArray> Held = {readOnly(DY)};
  if (Beta != 0.0f)
    Held.push_back(summedInto(DX));
  HeldArrays Hold(currentBackend(), Held);
  // DW [in, out] += X^T [in, M] DY [M, out].
  gemm(true, false, W.rows(), W.cols(), X.rows(), 1.0f, X.data(), DY.data(), 1.0f, DW.data());
  // DX [M, in] = DY [M, out] W^T [out, in] (+ Beta DX).
  gemm(false, true, X.rows(), X.cols(), W.cols(), 1.0f, DY.data(), W.data(), Beta, DX.data());
}

void matmulWeightGradient(const Tensor &X, const Tensor &DY, Tensor &DW) {
  if (X.rows() != 0)
    gemm(true, false, DW.rows(), DW.cols(), X.rows(), 1.0f, X.data(), DY.data(), 1.0f, DW.data());
}

std::vector<Tensor> columnParallelForward(Communicator &Tp, const Tensor &XShard,
                                          const std::vector<const Tensor *> &Ws) {
  std::vector<Tensor> Ys(Ws.size());
  std::vector<Tensor *> Into;
  for (Tensor &Y : Ys)
    Into.push_back(&Y);
  columnParallelForward(Tp, XShard, Ws, Into);
  return Ys;
}

void columnParallelForward(Communicator &Tp, const Tensor &XShard, const std::vector<const Tensor *> &Ws,
                           const std::vector<Tensor *> &Ys) {
  if (Ys.size() != Ws.size())
    fail("columnParallelForward: a product each weight");
  WholeSequence Gathered(Tp, XShard, ReadBy::Products);
  const Tensor &X = Gathered.get();
  HeldArrays Hold(currentBackend(), {readOnly(X)}); // one copy for every product
  for (size_t I = 0; I < Ws.size(); ++I)
    matmul(X, *Ws[I], *Ys[I]);
}

Tensor columnParallelBackward(Communicator &Tp, const Tensor &XShard, const Tensor *XFull,
                              const std::vector<const Tensor *> &Ws, const std::vector<const Tensor *> &DYs,
                              const std::vector<Tensor *> &DWs) {
  Tensor DX;
  columnParallelBackward(Tp, XShard, XFull, Ws, DYs, DWs, DX);
  return DX;
}

void columnParallelBackward(Communicator &Tp, const Tensor &XShard, const Tensor *XFull,
                            const std::vector<const Tensor *> &Ws, const std::vector<const Tensor *> &DYs,
                            const std::vector<Tensor *> &DWs, Tensor &DXShard) {
  std::optional<WholeSequence> Gathered;
  if (!XFull) // Megatron keeps only the shard and gathers again: the saved
              // activation is 1/TP of the gathered one.
    XFull = &Gathered.emplace(Tp, XShard, ReadBy::Products).get();
  const std::vector<int64_t> Whole = {XFull->rows(), XFull->cols()};
  const bool InPlace = Tp.size() == 1 && DXShard.shape() == Whole;
  std::optional<PartialSums> Partial;
  Tensor &DX = InPlace ? DXShard : Partial.emplace(Whole).get();
  currentBackend().zero(DX.data(), DX.numel());
  {
    // One copy of the input for every weight's gradient; the input's
    // gradient summed over the products where they run.
    HeldArrays Hold(currentBackend(), {readOnly(*XFull), summedInto(DX)});
    for (size_t I = 0; I < Ws.size(); ++I)
      matmulBackward(*XFull, *Ws[I], *DYs[I], *DWs[I], DX, 1.0f);
  }
  if (!InPlace)
    reduceScatterSequence(Tp, DX, DXShard);
}

Tensor rowParallelForward(Communicator &Tp, const Tensor &X, const Tensor &W) {
  Tensor YShard;
  rowParallelForward(Tp, X, W, YShard);
  return YShard;
}

void rowParallelForward(Communicator &Tp, const Tensor &X, const Tensor &W, Tensor &YShard) {
  if (Tp.size() == 1)
    return matmul(X, W, YShard);
  PartialSums Partial({X.rows(), W.cols()});
  matmul(X, W, Partial.get());
  reduceScatterSequence(Tp, Partial.get(), YShard);
}

Tensor rowParallelBackward(Communicator &Tp, const Tensor &X, const Tensor &W, const Tensor &DYShard, Tensor &DW) {
  Tensor DX;
  rowParallelBackward(Tp, X, W, DYShard, DW, DX);
  return DX;
}

void rowParallelBackward(Communicator &Tp, const Tensor &X, const Tensor &W, const Tensor &DYShard, Tensor &DW,
                         Tensor &DX) {
  WholeSequence Gathered(Tp, DYShard, ReadBy::Products);
  matmulBackward(X, W, Gathered.get(), DW, DX);
}

namespace {
MlpArgs mlpArgs(const Tensor &X, const ParallelMlpWeights &W) {
  MlpArgs A;
  A.Counts = {X.rows()};
  A.Hidden = X.cols();
  A.Ffn = W.Gate->cols();
  A.X = X.data();
  A.Gate = {W.Gate->data()};
  A.Up = {W.Up->data()};
  A.Down = {W.Down->data()};
  return A;
}
} // namespace

void parallelMlpForward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, Tensor &G, Tensor &U,
                        Tensor &Act, Tensor *Y, const void *KeepFor) {
  WholeSequence Gathered(Tp, XShard, ReadBy::Products);
  const Tensor &X = Gathered.get();
  MlpArgs A = mlpArgs(X, W);
  G.resize({X.rows(), A.Ffn});
  U.resize({X.rows(), A.Ffn});
  Act.resize({X.rows(), A.Ffn});
  A.G = G.data();
  A.U = U.data();
  A.Act = Act.data();
  const std::vector<int64_t> Whole = {X.rows(), X.cols()};
  const bool InPlace = Tp.size() == 1 && Y && Y->shape() == Whole;
  std::optional<PartialSums> Partial;
  if (Y)
    A.Y = (InPlace ? *Y : Partial.emplace(Whole).get()).data();
  // The input rows are the caller's to keep (at tp 1 its own array).
  mlpForwardKeeping(currentBackend(), A, KeepFor, /*KeepRows=*/false);
  if (Partial)
    reduceScatterSequence(Tp, Partial->get(), *Y);
}

Tensor parallelMlpBackward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, const Tensor &G,
                           const Tensor &U, const Tensor &Act, const Tensor &DYShard,
                           const std::vector<Tensor *> &DWeights) {
  Tensor DX;
  parallelMlpBackward(Tp, XShard, W, G, U, Act, DYShard, DWeights, DX);
  return DX;
}

void parallelMlpBackward(Communicator &Tp, const Tensor &XShard, const ParallelMlpWeights &W, const Tensor &G,
                         const Tensor &U, const Tensor &Act, const Tensor &DYShard,
                         const std::vector<Tensor *> &DWeights, Tensor &DXShard) {
  if (DWeights.size() != 3)
    fail("parallelMlpBackward: expects the gate, up and down gradients");
  WholeSequence WholeDY(Tp, DYShard, ReadBy::Products), WholeX(Tp, XShard, ReadBy::Products);
  const Tensor &DY = WholeDY.get(), &X = WholeX.get();
  MlpArgs A = mlpArgs(X, W);
  A.G = const_cast<float *>(G.data());
  A.U = const_cast<float *>(U.data());
  A.Act = const_cast<float *>(Act.data());
  A.DY = DY.data();
  const std::vector<int64_t> Whole = {X.rows(), X.cols()};
  const bool InPlace = Tp.size() == 1 && DXShard.shape() == Whole;
  std::optional<PartialSums> Partial;
  Tensor &DX = InPlace ? DXShard : Partial.emplace(Whole).get();
  A.DX = DX.data();
  A.DGate = {DWeights[0]->data()};
  A.DUp = {DWeights[1]->data()};
  A.DDown = {DWeights[2]->data()};
  currentBackend().mlpBackward(A);
  if (!InPlace)
    reduceScatterSequence(Tp, DX, DXShard);
}

} // namespace moert
