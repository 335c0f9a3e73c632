//===- parallel/cp/AttentionBlock.h - One query span against one key span -===//
//
// The compute of ring attention, free of communication: a rank's local tokens
// are one or two spans of consecutive absolute positions, and every step of
// the ring pairs each local query span with each span of the K/V block in
// hand. The causal mask between two spans depends only on their positions, so
// a pair is skipped, fully visible, or masked per element (the diagonal).
//
// Tensors use the layouts of ContextParallelAttention.h; every block pointer
// is the base of a full local tensor of LocalTokens tokens.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_CP_ATTENTIONBLOCK_H
#define MOERT_PARALLEL_CP_ATTENTIONBLOCK_H

#include "parallel/cp/ContextParallelAttention.h"

#include <cstdint>
#include <vector>

namespace moert {

/// Tokens [LocalBegin, LocalBegin + Len) of a rank hold absolute positions
/// [PosBegin, PosBegin + Len).
struct TokenSpan {
  int64_t LocalBegin = 0;
  int64_t PosBegin = 0;
  int64_t Len = 0;
};

/// The spans of CP rank CpRank: the whole sequence for a group of one, else
/// chunk CpRank then chunk 2*CpSize-1-CpRank of 2*CpSize chunks.
std::vector<TokenSpan> localSpans(int CpRank, int CpSize, int64_t SeqLen);

enum class SpanMask { Hidden, Visible, Causal };

/// How the causal mask (key position <= query position) treats a span pair.
SpanMask spanMask(const TokenSpan &QuerySpan, const TokenSpan &KeySpan);

/// Shapes shared by every block of one attention call.
struct BlockShape {
  AttentionDims Dims;
  int64_t LocalTokens = 0;
  float Scale = 1.0f; ///< 1 / sqrt(HeadDim)
};

/// Attends the queries of QuerySpan to the keys of KeySpan and merges the
/// result into Out and Lse by the log-sum-exp rule: Out holds the output
/// normalised over every key merged so far, Lse the log of that denominator
/// (-inf before the first visible key). Fresh: nothing was merged into the
/// query span before, so its Out and Lse are written whatever they hold (the
/// caller need not fill them first). Scratch is resized as needed.
void attendSpanForward(const BlockShape &Shape, const float *Q, const TokenSpan &QuerySpan, const float *K,
                       const float *V, const TokenSpan &KeySpan, float *Out, float *Lse, std::vector<float> &Scratch,
                       bool Fresh = false);

/// Backward of one span pair: recomputes the probabilities from the final Lse
/// and accumulates into DQ (query side) and DK, DV (the travelling key block).
/// Delta is rowsum(DOut * Out), laid out like Lse.
void attendSpanBackward(const BlockShape &Shape, const float *Q, const TokenSpan &QuerySpan, const float *K,
                        const float *V, const TokenSpan &KeySpan, const float *Lse, const float *Delta,
                        const float *DOut, float *DQ, float *DK, float *DV, std::vector<float> &Scratch);

} // namespace moert

#endif
