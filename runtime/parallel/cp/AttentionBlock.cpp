//===- parallel/cp/AttentionBlock.cpp - One query span against one key span
//===//
#include "parallel/cp/AttentionBlock.h"

#include "kernels/Backend.h"
#include "kernels/host/Blas.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace moert {

std::vector<TokenSpan> localSpans(int CpRank, int CpSize, int64_t SeqLen) {
  if (CpSize < 1 || CpRank < 0 || CpRank >= CpSize)
    throw std::invalid_argument("localSpans: bad cp rank " + std::to_string(CpRank) + " of " + std::to_string(CpSize));
  if (CpSize == 1)
    return {TokenSpan{0, 0, SeqLen}};
  if (SeqLen % (2 * int64_t(CpSize)) != 0)
    throw std::invalid_argument("context parallel attention: sequence length " + std::to_string(SeqLen) +
                                " does not divide by 2*cp = " + std::to_string(2 * CpSize));
  int64_t Chunk = SeqLen / (2 * int64_t(CpSize));
  return {TokenSpan{0, CpRank * Chunk, Chunk}, TokenSpan{Chunk, (2 * int64_t(CpSize) - 1 - CpRank) * Chunk, Chunk}};
}

SpanMask spanMask(const TokenSpan &QuerySpan, const TokenSpan &KeySpan) {
  int64_t QueryLast = QuerySpan.PosBegin + QuerySpan.Len - 1;
  int64_t KeyLast = KeySpan.PosBegin + KeySpan.Len - 1;
  if (QuerySpan.Len == 0 || KeySpan.Len == 0 || KeySpan.PosBegin > QueryLast)
    return SpanMask::Hidden;
  if (KeyLast <= QuerySpan.PosBegin)
    return SpanMask::Visible;
  return SpanMask::Causal;
}

namespace {

/// Keys 0..n-1 of KeySpan are visible to query I of QuerySpan; the mask is a
/// prefix because both spans hold increasing positions.
int64_t visibleKeys(SpanMask Mask, const TokenSpan &QuerySpan, const TokenSpan &KeySpan, int64_t I) {
  if (Mask == SpanMask::Visible)
    return KeySpan.Len;
  int64_t N = QuerySpan.PosBegin + I - KeySpan.PosBegin + 1;
  return std::clamp<int64_t>(N, 0, KeySpan.Len);
}

/// Pointers and leading dimensions of one (batch, head) slice of a span pair.
struct HeadBlock {
  int64_t QOffset, KOffset, VOffset, OOffset, LseOffset;
  int64_t LdQ, LdK, LdV, LdO;
};

HeadBlock headBlock(const BlockShape &Shape, const TokenSpan &QuerySpan, const TokenSpan &KeySpan, int64_t B,
                    int64_t H) {
  const AttentionDims &D = Shape.Dims;
  int64_t Group = D.QHeads / D.KvHeads;
  int64_t G = H / Group;
  HeadBlock Block;
  int64_t Vd = D.vHeadDim();
  Block.LdQ = D.QHeads * D.HeadDim;
  Block.LdK = D.KvHeads * D.HeadDim;
  Block.LdV = D.KvHeads * Vd;
  Block.LdO = D.QHeads * Vd;
  int64_t QRow = B * Shape.LocalTokens + QuerySpan.LocalBegin, KRow = B * Shape.LocalTokens + KeySpan.LocalBegin;
  Block.QOffset = QRow * Block.LdQ + H * D.HeadDim;
  Block.KOffset = KRow * Block.LdK + G * D.HeadDim;
  Block.VOffset = KRow * Block.LdV + G * Vd;
  Block.OOffset = QRow * Block.LdO + H * Vd;
  Block.LseOffset = (B * D.QHeads + H) * Shape.LocalTokens + QuerySpan.LocalBegin;
  return Block;
}

/// The span pair as the compute backend's table describes it.
AttentionBlockArgs blockArgs(const BlockShape &Shape, const float *Q, const TokenSpan &QuerySpan, const float *K,
                             const float *V, const TokenSpan &KeySpan) {
  const AttentionDims &D = Shape.Dims;
  AttentionBlockArgs A;
  A.Batch = D.Batch;
  A.LocalTokens = Shape.LocalTokens;
  A.QHeads = D.QHeads;
  A.KvHeads = D.KvHeads;
  A.HeadDim = D.HeadDim;
  A.VHeadDim = D.vHeadDim();
  A.Scale = Shape.Scale;
  A.QBegin = QuerySpan.LocalBegin;
  A.QLen = QuerySpan.Len;
  A.QPos = QuerySpan.PosBegin;
  A.KBegin = KeySpan.LocalBegin;
  A.KLen = KeySpan.Len;
  A.KPos = KeySpan.PosBegin;
  A.Q = Q;
  A.K = K;
  A.V = V;
  return A;
}

/// Elements of the block's whole local tensors, as AttentionBlockArgs
/// describes them.
struct BlockExtents {
  int64_t Q, K, V, Out;
  explicit BlockExtents(const BlockShape &Shape) {
    const AttentionDims &D = Shape.Dims;
    int64_t Rows = D.Batch * Shape.LocalTokens;
    Q = Rows * D.QHeads * D.HeadDim;
    K = Rows * D.KvHeads * D.HeadDim;
    V = Rows * D.KvHeads * D.vHeadDim();
    Out = Rows * D.QHeads * D.vHeadDim();
  }
};

HeldArray readOnly(const float *Data, int64_t Count) { return {const_cast<float *>(Data), Count, HeldArray::Read}; }

} // namespace

void attendSpanForward(const BlockShape &Shape, const float *Q, const TokenSpan &QuerySpan, const float *K,
                       const float *V, const TokenSpan &KeySpan, float *Out, float *Lse, std::vector<float> &Scratch,
                       bool Fresh) {
  SpanMask Mask = spanMask(QuerySpan, KeySpan);
  if (Mask == SpanMask::Hidden) {
    if (Fresh)
      throw std::logic_error("attention: a fresh block must reach its query span");
    return;
  }
  AttentionBlockArgs Args = blockArgs(Shape, Q, QuerySpan, K, V, KeySpan);
  Args.Out = Out;
  Args.Lse = Lse;
  Args.Fresh = Fresh;
  ComputeBackend &Backend = currentBackend();
  // A kernel reads only the block's spans (and any copy its callers hold).
  if (Backend.attentionBlockForward(Args))
    return;
  // Every head's products read the same Q, K and V: one copy of each.
  const BlockExtents Extent(Shape);
  HeldArrays Hold(Backend, {readOnly(Q, Extent.Q), readOnly(K, Extent.K), readOnly(V, Extent.V)});
  const AttentionDims &D = Shape.Dims;
  // The statistics are merged here on the host, from where a backend that
  // keeps them has them.
  const int64_t Statistics = D.Batch * D.QHeads * Shape.LocalTokens;
  Backend.hostReads(Lse, Statistics);
  int64_t Lq = QuerySpan.Len, Lk = KeySpan.Len;
  Scratch.resize(size_t(Lq * Lk));
  float *S = Scratch.data();
  const float NegInf = -std::numeric_limits<float>::infinity();
  for (int64_t B = 0; B < D.Batch; ++B) {
    for (int64_t H = 0; H < D.QHeads; ++H) {
      HeadBlock Blk = headBlock(Shape, QuerySpan, KeySpan, B, H);
      gemmStrided(false, true, Lq, Lk, D.HeadDim, Shape.Scale, Q + Blk.QOffset, Blk.LdQ, K + Blk.KOffset, Blk.LdK, 0.0f,
                  S, Lk);
      // Turn each score row into exp(S - NewLse): the block's probabilities
      // already scaled to the merged denominator, so P V adds straight onto
      // the rescaled running output.
      for (int64_t I = 0; I < Lq; ++I) {
        float *Row = S + I * Lk;
        float *OutRow = Out + Blk.OOffset + I * Blk.LdO;
        float &RowLse = Lse[Blk.LseOffset + I];
        if (Fresh) {
          std::fill(OutRow, OutRow + D.vHeadDim(), 0.0f);
          RowLse = NegInf;
        }
        int64_t N = visibleKeys(Mask, QuerySpan, KeySpan, I);
        if (N == 0) {
          std::fill(Row, Row + Lk, 0.0f);
          continue;
        }
        float Max = *std::max_element(Row, Row + N);
        double Sum = 0;
        for (int64_t J = 0; J < N; ++J)
          Sum += std::exp(double(Row[J]) - Max);
        double BlockLse = Max + std::log(Sum);
        double NewLse = BlockLse;
        if (RowLse != NegInf) {
          double Hi = std::max<double>(RowLse, BlockLse);
          NewLse = Hi + std::log(std::exp(RowLse - Hi) + std::exp(BlockLse - Hi));
        }
        float Keep = RowLse == NegInf ? 0.0f : float(std::exp(RowLse - NewLse));
        for (int64_t C = 0; C < D.vHeadDim(); ++C)
          OutRow[C] *= Keep;
        for (int64_t J = 0; J < N; ++J)
          Row[J] = float(std::exp(double(Row[J]) - NewLse));
        std::fill(Row + N, Row + Lk, 0.0f);
        RowLse = float(NewLse);
      }
      gemmStrided(false, false, Lq, D.vHeadDim(), Lk, 1.0f, S, Lk, V + Blk.VOffset, Blk.LdV, 1.0f, Out + Blk.OOffset,
                  Blk.LdO);
    }
  }
  Backend.hostWrote(Lse, Statistics);
}

void attendSpanBackward(const BlockShape &Shape, const float *Q, const TokenSpan &QuerySpan, const float *K,
                        const float *V, const TokenSpan &KeySpan, const float *Lse, const float *Delta,
                        const float *DOut, float *DQ, float *DK, float *DV, std::vector<float> &Scratch) {
  SpanMask Mask = spanMask(QuerySpan, KeySpan);
  if (Mask == SpanMask::Hidden)
    return;
  AttentionBlockArgs Args = blockArgs(Shape, Q, QuerySpan, K, V, KeySpan);
  Args.FinalLse = Lse;
  Args.Delta = Delta;
  Args.DOut = DOut;
  Args.DQ = DQ;
  Args.DK = DK;
  Args.DV = DV;
  // A kernel reads and adds to only the block's spans (and any copies and
  // sums its callers hold).
  if (currentBackend().attentionBlockBackward(Args))
    return;
  // Every head's products read the same Q, K, V and DOut, and add to the
  // same DQ, DK and DV: one copy of each, the sums kept where they run.
  const BlockExtents Extent(Shape);
  HeldArrays Hold(currentBackend(), {readOnly(Q, Extent.Q),
                                     readOnly(K, Extent.K),
                                     readOnly(V, Extent.V),
                                     readOnly(DOut, Extent.Out),
                                     {DQ, Extent.Q, HeldArray::Accumulate},
                                     {DK, Extent.K, HeldArray::Accumulate},
                                     {DV, Extent.V, HeldArray::Accumulate}});
  const AttentionDims &D = Shape.Dims;
  const int64_t Statistics = D.Batch * D.QHeads * Shape.LocalTokens;
  currentBackend().hostReads(Lse, Statistics);
  currentBackend().hostReads(Delta, Statistics);
  int64_t Lq = QuerySpan.Len, Lk = KeySpan.Len;
  Scratch.resize(size_t(2 * Lq * Lk));
  float *P = Scratch.data();
  float *DP = P + Lq * Lk;
  for (int64_t B = 0; B < D.Batch; ++B) {
    for (int64_t H = 0; H < D.QHeads; ++H) {
      HeadBlock Blk = headBlock(Shape, QuerySpan, KeySpan, B, H);
      const float *Qh = Q + Blk.QOffset, *Kh = K + Blk.KOffset;
      const float *Vh = V + Blk.VOffset, *DOh = DOut + Blk.OOffset;
      gemmStrided(false, true, Lq, Lk, D.HeadDim, Shape.Scale, Qh, Blk.LdQ, Kh, Blk.LdK, 0.0f, P, Lk);
      // The forward's probabilities, recomputed from the saved log-sum-exp.
      for (int64_t I = 0; I < Lq; ++I) {
        float *Row = P + I * Lk;
        double RowLse = Lse[Blk.LseOffset + I];
        int64_t N = visibleKeys(Mask, QuerySpan, KeySpan, I);
        for (int64_t J = 0; J < N; ++J)
          Row[J] = float(std::exp(double(Row[J]) - RowLse));
        std::fill(Row + N, Row + Lk, 0.0f);
      }
      // dV += P^T dO; dP = dO V^T.
      gemmStrided(true, false, Lk, D.vHeadDim(), Lq, 1.0f, P, Lk, DOh, Blk.LdO, 1.0f, DV + Blk.VOffset, Blk.LdV);
      gemmStrided(false, true, Lq, Lk, D.vHeadDim(), 1.0f, DOh, Blk.LdO, Vh, Blk.LdV, 0.0f, DP, Lk);
      // dS = P * (dP - rowsum(dO * O)); masked entries have P = 0.
      for (int64_t I = 0; I < Lq; ++I) {
        float Di = Delta[Blk.LseOffset + I];
        for (int64_t J = 0; J < Lk; ++J)
          DP[I * Lk + J] = P[I * Lk + J] * (DP[I * Lk + J] - Di);
      }
      // dQ += scale dS K; dK += scale dS^T Q.
      gemmStrided(false, false, Lq, D.HeadDim, Lk, Shape.Scale, DP, Lk, Kh, Blk.LdK, 1.0f, DQ + Blk.QOffset, Blk.LdQ);
      gemmStrided(true, false, Lk, D.HeadDim, Lq, Shape.Scale, DP, Lk, Qh, Blk.LdQ, 1.0f, DK + Blk.KOffset, Blk.LdK);
    }
  }
}

} // namespace moert
