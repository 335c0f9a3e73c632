//===- parallel/cp/ContextParallelAttention.cpp - Ring attention ----------===//
//
// The host backend of the ring (parallel/cp/Ring.h): each rank owns one K/V
// block (its LocalTokens keys); every query span attends to every key span
// of the block in hand, in fp32.
//
//===----------------------------------------------------------------------===//
#include "parallel/cp/ContextParallelAttention.h"

#include "kernels/Backend.h"

#include "parallel/cp/AttentionBlock.h"
#include "parallel/cp/Exchanges.h"
#include "parallel/cp/Ring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace moert {

std::vector<int64_t> localPositions(int CpRank, int CpSize, int64_t SeqLen) {
  std::vector<int64_t> Positions;
  for (const TokenSpan &Span : localSpans(CpRank, CpSize, SeqLen))
    for (int64_t I = 0; I < Span.Len; ++I)
      Positions.push_back(Span.PosBegin + I);
  return Positions;
}

BlockShape blockShape(const Communicator &Cp, const AttentionDims &Dims) {
  if (Dims.Batch < 0 || Dims.SeqLen < 0 || Dims.QHeads <= 0 || Dims.KvHeads <= 0 || Dims.HeadDim <= 0 ||
      Dims.VHeadDim < 0 || Dims.QHeads % Dims.KvHeads != 0)
    throw std::invalid_argument("attention: query heads " + std::to_string(Dims.QHeads) +
                                " must be a positive multiple of kv heads " + std::to_string(Dims.KvHeads));
  // Validates the chunking (SeqLen divisible by 2*CP) as a side effect.
  localSpans(Cp.rank(), Cp.size(), Dims.SeqLen);
  BlockShape Shape;
  Shape.Dims = Dims;
  Shape.LocalTokens = Dims.SeqLen / Cp.size();
  Shape.Scale = float(1.0 / std::sqrt(double(Dims.HeadDim)));
  return Shape;
}

namespace {

/// The host's block in hand (parallel/cp/Ring.h): K then V of one rank, in
/// the backward followed by the dK and dV gathered for it so far; every
/// query span attends to every key span of the block's owner. A rank alone
/// in its group reads the caller's K and V where they are (and any copy of
/// them a backend holds); its block holds the gradients alone.
struct HostBlock {
  const BlockShape &Shape;
  int CpSize;
  size_t KCount, VCount;
  std::vector<TokenSpan> QuerySpans;
  std::vector<float> Cur, Next, Scratch;
  bool WithGrads;
  const float *K, *V;

  HostBlock(const Communicator &Cp, const BlockShape &S, const float *K, const float *V, bool WithGrads)
      : Shape(S), CpSize(Cp.size()), KCount(size_t(S.Dims.Batch * S.LocalTokens * S.Dims.KvHeads * S.Dims.HeadDim)),
        VCount(size_t(S.Dims.Batch * S.LocalTokens * S.Dims.KvHeads * S.Dims.vHeadDim())),
        QuerySpans(localSpans(Cp.rank(), Cp.size(), S.Dims.SeqLen)), WithGrads(WithGrads), K(K), V(V) {
    if (alone()) {
      Cur.assign(WithGrads ? kvCount() : 0, 0.0f);
      return;
    }
    Cur.assign((WithGrads ? 2 : 1) * kvCount(), 0.0f);
    std::copy(K, K + KCount, Cur.begin());
    std::copy(V, V + VCount, Cur.begin() + ptrdiff_t(KCount));
    Next.resize(Cur.size());
  }
  bool alone() const { return CpSize == 1; }
  size_t kvCount() const { return KCount + VCount; }
  const void *kv() const { return Cur.data(); }
  void *nextKv() { return Next.data(); }
  DType kvType() const { return DType::F32; }
  const void *grad() const { return Cur.data() + kvCount(); }
  void *nextGrad() { return Next.data() + kvCount(); }
  size_t gradCount() const { return kvCount(); }
  DType gradType() const { return DType::F32; }
  void swap() { Cur.swap(Next); }
  const float *blockK() const { return alone() ? K : Cur.data(); }
  const float *blockV() const { return alone() ? V : Cur.data() + KCount; }
  float *blockDK() { return Cur.data() + (alone() ? 0 : kvCount()); }
  float *blockDV() { return blockDK() + KCount; }
  std::vector<TokenSpan> keySpans(int Owner) const { return localSpans(Owner, CpSize, Shape.Dims.SeqLen); }
};

/// Every exchange between ranks sends the local queries, keys or values
/// from host memory: a backend that kept its results there to itself brings
/// them back (ComputeBackend::hostReads).
void readOnHost(const Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K, const float *V) {
  if (Cp.size() == 1)
    return;
  const AttentionDims &D = Shape.Dims;
  const int64_t Rows = D.Batch * Shape.LocalTokens;
  ComputeBackend &Backend = currentBackend();
  Backend.hostReads(Q, Rows * D.QHeads * D.HeadDim);
  Backend.hostReads(K, Rows * D.KvHeads * D.HeadDim);
  Backend.hostReads(V, Rows * D.KvHeads * D.vHeadDim());
}

/// The backend's context-parallel attention of these dimensions over the cp
/// group's device counterpart (a null Device where it has none).
CpAttentionArgs cpArgs(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange) {
  CpAttentionArgs A;
  A.Device = Cp.device();
  A.Kind = Exchange == CpExchange::AllGather  ? CpAttentionArgs::AllGather
           : Exchange == CpExchange::AllToAll ? CpAttentionArgs::AllToAll
                                              : CpAttentionArgs::Ring;
  A.Batch = Dims.Batch;
  A.SeqLen = Dims.SeqLen;
  A.QHeads = Dims.QHeads;
  A.KvHeads = Dims.KvHeads;
  A.HeadDim = Dims.HeadDim;
  A.VHeadDim = Dims.vHeadDim();
  return A;
}

/// Whether the whole of attention, its exchange included, is the current
/// backend's operation (ComputeBackend::cpAttentionForward).
bool backendAttends(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange) {
  return Cp.size() > 1 && Cp.device() && currentBackend().takesCpAttention(cpArgs(Cp, Dims, Exchange));
}

} // namespace

bool exchangeOnBackend(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange) {
  return backendAttends(Cp, Dims, Exchange) || (Cp.size() > 1 && Cp.device() && Exchange == CpExchange::AllGather);
}

bool statisticsOnBackend(const Communicator &Cp, const AttentionDims &Dims, CpExchange Exchange) {
  return Cp.size() == 1 || backendAttends(Cp, Dims, Exchange);
}

void contextParallelAttentionForward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                     const float *V, float *Out, float *Lse, CpExchange Exchange) {
  BlockShape Shape = blockShape(Cp, Dims);
  if (backendAttends(Cp, Dims, Exchange)) {
    CpAttentionArgs A = cpArgs(Cp, Dims, Exchange);
    A.Q = Q;
    A.K = K;
    A.V = V;
    A.Out = Out;
    A.Lse = Lse;
    return currentBackend().cpAttentionForward(A);
  }
  if (!exchangeOnBackend(Cp, Dims, Exchange))
    readOnHost(Cp, Shape, Q, K, V);
  if (Cp.size() > 1 && Exchange != CpExchange::Ring) {
    std::fill(Out, Out + Dims.Batch * Shape.LocalTokens * Dims.QHeads * Dims.vHeadDim(), 0.0f);
    std::fill(Lse, Lse + Dims.Batch * Dims.QHeads * Shape.LocalTokens, -std::numeric_limits<float>::infinity());
    if (Exchange == CpExchange::AllGather)
      return allGatherAttentionForward(Cp, Shape, Q, K, V, Out, Lse);
    return allToAllAttentionForward(Cp, Shape, Q, K, V, Out, Lse);
  }
  // The ring starts at the rank's own block, whose first key span reaches
  // every local query (the first chunk's diagonal, and all of it for the
  // mirrored chunk): those blocks write Out and Lse fresh, so that nothing
  // fills them first (on the host, where a backend keeps them).
  struct Forward : HostBlock {
    const float *Q;
    float *Out, *Lse;
    int Rank;
    Forward(const Communicator &Cp, const BlockShape &S, const float *Q, const float *K, const float *V, float *Out,
            float *Lse)
        : HostBlock(Cp, S, K, V, false), Q(Q), Out(Out), Lse(Lse), Rank(Cp.rank()) {}
    void attend(int Owner) {
      const std::vector<TokenSpan> Keys = keySpans(Owner);
      for (size_t KeyIndex = 0; KeyIndex < Keys.size(); ++KeyIndex)
        for (const TokenSpan &QuerySpan : QuerySpans)
          attendSpanForward(Shape, Q, QuerySpan, blockK(), blockV(), Keys[KeyIndex], Out, Lse, Scratch,
                            /*Fresh=*/Owner == Rank && KeyIndex == 0);
    }
  } B(Cp, Shape, Q, K, V, Out, Lse);
  ring::forward(Cp, B);
}

void contextParallelAttentionBackward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                      const float *V, const float *Out, const float *Lse, const float *DOut, float *DQ,
                                      float *DK, float *DV, CpExchange Exchange) {
  BlockShape Shape = blockShape(Cp, Dims);
  ComputeBackend &Backend = currentBackend();
  if (backendAttends(Cp, Dims, Exchange)) {
    CpAttentionArgs A = cpArgs(Cp, Dims, Exchange);
    A.Q = Q;
    A.K = K;
    A.V = V;
    A.Out = const_cast<float *>(Out);
    A.Lse = const_cast<float *>(Lse);
    A.DOut = DOut;
    A.DQ = DQ;
    A.DK = DK;
    A.DV = DV;
    return Backend.cpAttentionBackward(A);
  }
  if (!exchangeOnBackend(Cp, Dims, Exchange))
    readOnHost(Cp, Shape, Q, K, V);
  int64_t T = Shape.LocalTokens;
  size_t QCount = size_t(Dims.Batch * T * Dims.QHeads * Dims.HeadDim);
  Backend.zero(DQ, int64_t(QCount)); // where the caller keeps it, if on a backend
  if (Cp.size() > 1 && Exchange == CpExchange::AllToAll)
    return allToAllAttentionBackward(Cp, Shape, Q, K, V, Out, Lse, DOut, DQ, DK, DV);
  if (Cp.size() > 1 && Exchange == CpExchange::AllGather) {
    std::vector<float> Delta = attentionDelta(Backend, Dims.Batch, T, Dims.QHeads, Dims.vHeadDim(), Out, DOut);
    return allGatherAttentionBackward(Cp, Shape, Q, K, V, Lse, Delta.data(), DOut, DQ, DK, DV);
  }
  // On a rank alone every block reads the whole of Delta where the backend
  // made it: it stays there (in fp32). A ring's blocks read it by span.
  std::vector<float> Delta(size_t(Dims.Batch * Dims.QHeads * T));
  std::vector<HeldArray> DeltaHold;
  if (Cp.size() == 1)
    DeltaHold.push_back(HeldArray::wide(Delta.data(), int64_t(Delta.size())));
  HeldArrays DeltaWhereItIsMade(Backend, DeltaHold);
  Backend.attentionDelta(Dims.Batch, T, Dims.QHeads, Dims.vHeadDim(), Out, DOut, Delta.data());

  struct Backward : HostBlock {
    const float *Q, *Lse, *Delta, *DOut;
    float *DQ;
    Backward(const Communicator &Cp, const BlockShape &S, const float *Q, const float *K, const float *V,
             const float *Lse, const float *Delta, const float *DOut, float *DQ)
        : HostBlock(Cp, S, K, V, true), Q(Q), Lse(Lse), Delta(Delta), DOut(DOut), DQ(DQ) {}
    void attend(int Owner) {
      for (const TokenSpan &KeySpan : keySpans(Owner))
        for (const TokenSpan &QuerySpan : QuerySpans)
          attendSpanBackward(Shape, Q, QuerySpan, blockK(), blockV(), KeySpan, Lse, Delta, DOut, DQ, blockDK(),
                             blockDV(), Scratch);
    }
  } B(Cp, Shape, Q, K, V, Lse, Delta.data(), DOut, DQ);
  {
    // Only the blocks add to DQ (and, on a rank alone, to the block's
    // gradients, which then travel nowhere): a backend sums them where they
    // run, for every block, and they come back once, DQ to where the caller
    // keeps it; on a rank alone the block's gradients are the backend's
    // alone (in fp32, as a sum) and go from there to where the caller keeps
    // DK and DV.
    std::vector<HeldArray> Sums = {{DQ, int64_t(QCount), HeldArray::Accumulate}};
    if (B.alone())
      Sums.push_back(HeldArray::wide(B.blockDK(), int64_t(B.kvCount())));
    HeldArrays SummedWhereTheyRun(Backend, Sums);
    if (B.alone())
      Backend.zero(B.blockDK(), int64_t(B.kvCount()));
    ring::backward(Cp, B);
    Backend.copy(B.blockDK(), DK, int64_t(B.KCount));
    Backend.copy(B.blockDV(), DV, int64_t(B.VCount));
  }
}

} // namespace moert
