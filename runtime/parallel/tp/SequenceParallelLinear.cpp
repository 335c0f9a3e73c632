//===- parallel/tp/SequenceParallelLinear.cpp -----------------------------===//
#include "parallel/tp/SequenceParallelLinear.h"

#include "kernels/host/Blas.h"

#include <cstdio>
#include <cstdlib>

namespace moert {

namespace {
[[noreturn]] void fail(const char *What) {
  std::fprintf(stderr, "moerun: internal error in tp: %s\n", What);
  std::abort();
}
} // namespace

Tensor gatherSequence(Communicator &Tp, const Tensor &Shard) {
  Tensor Full({Shard.rows() * Tp.size(), Shard.cols()});
  Tp.allGather(Shard.data(), Full.data(), size_t(Shard.numel()));
  return Full;
}

Tensor reduceScatterSequence(Communicator &Tp, const Tensor &Partial) {
  if (Partial.rows() % Tp.size())
    fail("reduceScatterSequence: rows do not divide by the tp size");
  Tensor Shard({Partial.rows() / Tp.size(), Partial.cols()});
  Tp.reduceScatterSum(Partial.data(), Shard.data(), size_t(Shard.numel()));
  return Shard;
}

Tensor matmul(const Tensor &X, const Tensor &W) {
  if (X.cols() != W.rows())
    fail("matmul: inner dimensions differ");
  Tensor Y({X.rows(), W.cols()});
  if (Y.numel())
    gemm(false, false, X.rows(), W.cols(), X.cols(), 1.0f, X.data(), W.data(), 0.0f, Y.data());
  return Y;
}

void matmulBackward(const Tensor &X, const Tensor &W, const Tensor &DY, Tensor &DW, Tensor &DX, float Beta) {
  if (Beta == 0.0f)
    DX.resize({X.rows(), X.cols()});
  if (X.rows() == 0)
    return;
  // DW [in, out] += X^T [in, M] DY [M, out].
  gemm(true, false, W.rows(), W.cols(), X.rows(), 1.0f, X.data(), DY.data(), 1.0f, DW.data());
  // DX [M, in] = DY [M, out] W^T [out, in].
  gemm(false, true, X.rows(), X.cols(), W.cols(), 1.0f, DY.data(), W.data(), Beta, DX.data());
}

std::vector<Tensor> columnParallelForward(Communicator &Tp, const Tensor &XShard, const std::vector<const Tensor *> &Ws,
                                          Tensor *Full) {
  Tensor X = gatherSequence(Tp, XShard);
  std::vector<Tensor> Ys;
  for (const Tensor *W : Ws)
    Ys.push_back(matmul(X, *W));
  if (Full)
    *Full = std::move(X);
  return Ys;
}

Tensor columnParallelBackward(Communicator &Tp, const Tensor &XShard, const Tensor *XFull,
                              const std::vector<const Tensor *> &Ws, const std::vector<const Tensor *> &DYs,
                              const std::vector<Tensor *> &DWs) {
  Tensor Gathered;
  if (!XFull) {
    // Megatron keeps only the shard and gathers again: the saved activation
    // is 1/TP of the gathered one.
    Gathered = gatherSequence(Tp, XShard);
    XFull = &Gathered;
  }
  Tensor DX;
  for (size_t I = 0; I < Ws.size(); ++I)
    matmulBackward(*XFull, *Ws[I], *DYs[I], *DWs[I], DX, I ? 1.0f : 0.0f);
  return reduceScatterSequence(Tp, DX);
}

Tensor rowParallelForward(Communicator &Tp, const Tensor &X, const Tensor &W) {
  return reduceScatterSequence(Tp, matmul(X, W));
}

Tensor rowParallelBackward(Communicator &Tp, const Tensor &X, const Tensor &W, const Tensor &DYShard, Tensor &DW) {
  Tensor DY = gatherSequence(Tp, DYShard);
  Tensor DX;
  matmulBackward(X, W, DY, DW, DX);
  return DX;
}

} // namespace moert
