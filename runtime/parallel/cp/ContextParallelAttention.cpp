//===- parallel/cp/ContextParallelAttention.cpp - Ring attention ----------===//
//
// Each rank owns one K/V block (its LocalTokens keys). The blocks travel to
// the next rank of the ring at every step, so after CP steps every query has
// met every key; the transfer of the next block overlaps the compute on the
// current one (non-blocking send and receive). Backward sends the gradients of
// each block along with it and ends with one more hop that brings them home.
//
//===----------------------------------------------------------------------===//
#include "parallel/cp/ContextParallelAttention.h"

#include "parallel/cp/AttentionBlock.h"

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

namespace {

// Tags keep the early K/V hop and the late gradient hop of one step apart.
constexpr int KvTag = 11;
constexpr int GradTag = 12;

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

/// One hop of the ring: posts the receive of the previous rank's buffer and
/// the send of ours; wait() completes both.
class RingHop {
public:
  RingHop(Communicator &Cp, const float *Send, float *Recv, size_t Count, int Tag) {
    int Size = Cp.size(), Rank = Cp.rank();
    RecvReq = Cp.irecv(Recv, Count, (Rank + Size - 1) % Size, Tag);
    SendReq = Cp.isend(Send, Count, (Rank + 1) % Size, Tag);
  }
  void wait() {
    RecvReq->wait();
    SendReq->wait();
  }

private:
  std::unique_ptr<Request> RecvReq, SendReq;
};

} // namespace

void contextParallelAttentionForward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                     const float *V, float *Out, float *Lse) {
  BlockShape Shape = blockShape(Cp, Dims);
  int Size = Cp.size(), Rank = Cp.rank();
  size_t OutCount = size_t(Dims.Batch * Shape.LocalTokens * Dims.QHeads * Dims.vHeadDim());
  size_t KCount = size_t(Dims.Batch * Shape.LocalTokens * Dims.KvHeads * Dims.HeadDim);
  size_t VCount = size_t(Dims.Batch * Shape.LocalTokens * Dims.KvHeads * Dims.vHeadDim());
  std::fill(Out, Out + OutCount, 0.0f);
  std::fill(Lse, Lse + Dims.Batch * Dims.QHeads * Shape.LocalTokens, -std::numeric_limits<float>::infinity());

  std::vector<TokenSpan> QuerySpans = localSpans(Rank, Size, Dims.SeqLen);
  // The block in hand: K then V of one rank.
  std::vector<float> Cur(KCount + VCount), Next;
  std::copy(K, K + KCount, Cur.begin());
  std::copy(V, V + VCount, Cur.begin() + ptrdiff_t(KCount));
  if (Size > 1)
    Next.resize(Cur.size());
  std::vector<float> Scratch;
  for (int Step = 0; Step < Size; ++Step) {
    std::unique_ptr<RingHop> Hop;
    if (Step + 1 < Size)
      Hop = std::make_unique<RingHop>(Cp, Cur.data(), Next.data(), Cur.size(), KvTag);
    int Owner = (Rank - Step + Size) % Size;
    for (const TokenSpan &KeySpan : localSpans(Owner, Size, Dims.SeqLen))
      for (const TokenSpan &QuerySpan : QuerySpans)
        attendSpanForward(Shape, Q, QuerySpan, Cur.data(), Cur.data() + KCount, KeySpan, Out, Lse, Scratch);
    if (Hop) {
      Hop->wait();
      Cur.swap(Next);
    }
  }
}

void contextParallelAttentionBackward(Communicator &Cp, const AttentionDims &Dims, const float *Q, const float *K,
                                      const float *V, const float *Out, const float *Lse, const float *DOut, float *DQ,
                                      float *DK, float *DV) {
  BlockShape Shape = blockShape(Cp, Dims);
  int Size = Cp.size(), Rank = Cp.rank();
  int64_t T = Shape.LocalTokens, Vd = Dims.vHeadDim();
  size_t QCount = size_t(Dims.Batch * T * Dims.QHeads * Dims.HeadDim);
  size_t KCount = size_t(Dims.Batch * T * Dims.KvHeads * Dims.HeadDim);
  size_t VCount = size_t(Dims.Batch * T * Dims.KvHeads * Vd);
  size_t KvCount = KCount + VCount;
  std::fill(DQ, DQ + QCount, 0.0f);

  // Delta = rowsum(dO * O) per (batch, head, token), laid out like Lse.
  std::vector<float> Delta(size_t(Dims.Batch * Dims.QHeads * T));
  for (int64_t B = 0; B < Dims.Batch; ++B)
    for (int64_t I = 0; I < T; ++I)
      for (int64_t H = 0; H < Dims.QHeads; ++H) {
        size_t Base = size_t(((B * T + I) * Dims.QHeads + H) * Vd);
        double Sum = 0;
        for (int64_t C = 0; C < Vd; ++C)
          Sum += double(DOut[Base + C]) * Out[Base + C];
        Delta[size_t((B * Dims.QHeads + H) * T + I)] = float(Sum);
      }

  std::vector<TokenSpan> QuerySpans = localSpans(Rank, Size, Dims.SeqLen);
  // The block in hand: K, V, and the dK, dV gathered for it so far.
  std::vector<float> Cur(2 * KvCount, 0.0f), Next;
  std::copy(K, K + KCount, Cur.begin());
  std::copy(V, V + VCount, Cur.begin() + ptrdiff_t(KCount));
  if (Size > 1)
    Next.resize(Cur.size());
  std::vector<float> Scratch;
  for (int Step = 0; Step < Size; ++Step) {
    // K/V leave before the compute; their gradients only after it.
    std::unique_ptr<RingHop> KvHop, GradHop;
    if (Step + 1 < Size)
      KvHop = std::make_unique<RingHop>(Cp, Cur.data(), Next.data(), KvCount, KvTag);
    int Owner = (Rank - Step + Size) % Size;
    float *BlockK = Cur.data(), *BlockV = BlockK + KCount;
    float *BlockDK = BlockV + VCount, *BlockDV = BlockDK + KCount;
    for (const TokenSpan &KeySpan : localSpans(Owner, Size, Dims.SeqLen))
      for (const TokenSpan &QuerySpan : QuerySpans)
        attendSpanBackward(Shape, Q, QuerySpan, BlockK, BlockV, KeySpan, Lse, Delta.data(), DOut, DQ, BlockDK, BlockDV,
                           Scratch);
    // After the last step the block in hand belongs to the next rank, which
    // is exactly where this hop sends its gradients.
    if (Size > 1)
      GradHop = std::make_unique<RingHop>(Cp, BlockDK, Next.data() + KvCount, KvCount, GradTag);
    if (KvHop)
      KvHop->wait();
    if (GradHop) {
      GradHop->wait();
      Cur.swap(Next);
    }
  }
  std::copy_n(Cur.begin() + ptrdiff_t(KvCount), KCount, DK);
  std::copy_n(Cur.begin() + ptrdiff_t(KvCount + KCount), VCount, DV);
}

} // namespace moert
