//===- parallel/cp/Exchanges.cpp - All-gather and all-to-all CP attention -===//
//
// All-gather: the rank's query spans meet every rank's key spans, visited in
// the ring's order (the block of rank - s at step s), from K and V gathered
// once; each block's dK/dV accumulate in a buffer of all blocks that a
// reduce-scatter returns to the owners.
//
// All-to-all: rank j receives, from every rank r, r's tokens of heads
// [j QHeads / CP, (j + 1) QHeads / CP) (and the matching key-value heads);
// it lays them out as one sequence of CP x LocalTokens tokens, rank by rank,
// whose spans are every rank's spans shifted by r x LocalTokens, so the span
// machinery of the ring attends over the whole sequence in one call.
//
//===----------------------------------------------------------------------===//
#include "parallel/cp/Exchanges.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>

namespace moert {

namespace {

/// Every rank's spans, as one sequence of the ranks' local tokens in rank
/// order (the all-to-all layout): rank r's tokens start at r x LocalTokens.
std::vector<TokenSpan> allRankSpans(int CpSize, int64_t SeqLen) {
  std::vector<TokenSpan> All;
  const int64_t Local = SeqLen / CpSize;
  for (int R = 0; R < CpSize; ++R)
    for (TokenSpan S : localSpans(R, CpSize, SeqLen)) {
      S.LocalBegin += R * Local;
      All.push_back(S);
    }
  return All;
}

/// Where the rows of Heads / CP heads x Width values lie in the three
/// layouts of an all-to-all exchange, for rank (or chunk) J, batch B and
/// token T: the sequence shard [Batch, Tokens, Heads, Width] (head block J),
/// the send or receive buffer (chunk J: [Batch, Tokens, Heads / CP, Width]),
/// and the head shard [Batch, CP x Tokens, Heads / CP, Width] (rank J's
/// tokens).
struct HeadShardLayout {
  int C;
  int64_t Batch, Tokens, Heads, Width;
  int64_t row() const { return Heads / C * Width; }
  size_t chunk() const { return size_t(Batch * Tokens * row()); }
  int64_t sequence(int J, int64_t B, int64_t T) const { return ((B * Tokens + T) * Heads + J * (Heads / C)) * Width; }
  int64_t buffer(int J, int64_t B, int64_t T) const { return int64_t(J) * int64_t(chunk()) + (B * Tokens + T) * row(); }
  int64_t shard(int J, int64_t B, int64_t T) const { return (B * C * Tokens + J * Tokens + T) * row(); }
  /// Dst[To(J, B, T)] = Src[From(J, B, T)], row by row.
  template <typename ToFn, typename FromFn> void move(float *Dst, ToFn To, const float *Src, FromFn From) const {
    for (int J = 0; J < C; ++J)
      for (int64_t B = 0; B < Batch; ++B)
        for (int64_t T = 0; T < Tokens; ++T)
          std::copy_n(Src + From(J, B, T), row(), Dst + To(J, B, T));
  }
};

/// [Batch, Tokens, Heads, Width] sequence shards -> [Batch, CP x Tokens,
/// Heads / CP, Width] head shards (the ranks' tokens in rank order).
std::vector<float> toHeadShards(Communicator &Cp, const float *Local, int64_t Batch, int64_t Tokens, int64_t Heads,
                                int64_t Width) {
  const HeadShardLayout L{Cp.size(), Batch, Tokens, Heads, Width};
  auto Sequence = [&](int J, int64_t B, int64_t T) { return L.sequence(J, B, T); };
  auto Buffer = [&](int J, int64_t B, int64_t T) { return L.buffer(J, B, T); };
  auto Shard = [&](int J, int64_t B, int64_t T) { return L.shard(J, B, T); };
  std::vector<float> Send(size_t(L.C) * L.chunk()), Recv(Send.size()), Out(Send.size());
  L.move(Send.data(), Buffer, Local, Sequence);
  Cp.allToAll(Send.data(), Recv.data(), L.chunk(), DType::F32);
  L.move(Out.data(), Shard, Recv.data(), Buffer);
  return Out;
}

/// The inverse of toHeadShards, into Local [Batch, Tokens, Heads, Width].
void toSequenceShards(Communicator &Cp, const float *Shards, int64_t Batch, int64_t Tokens, int64_t Heads,
                      int64_t Width, float *Local) {
  const HeadShardLayout L{Cp.size(), Batch, Tokens, Heads, Width};
  auto Sequence = [&](int J, int64_t B, int64_t T) { return L.sequence(J, B, T); };
  auto Buffer = [&](int J, int64_t B, int64_t T) { return L.buffer(J, B, T); };
  auto Shard = [&](int J, int64_t B, int64_t T) { return L.shard(J, B, T); };
  std::vector<float> Send(size_t(L.C) * L.chunk()), Recv(Send.size());
  L.move(Send.data(), Buffer, Shards, Shard);
  Cp.allToAll(Send.data(), Recv.data(), L.chunk(), DType::F32);
  L.move(Local, Sequence, Recv.data(), Buffer);
}

/// Lse [Batch, Heads, Tokens] <-> token-major [Batch, Tokens, Heads].
std::vector<float> tokenMajor(const float *Lse, int64_t Batch, int64_t Heads, int64_t Tokens) {
  std::vector<float> Out(size_t(Batch * Heads * Tokens));
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t H = 0; H < Heads; ++H)
      for (int64_t T = 0; T < Tokens; ++T)
        Out[size_t((B * Tokens + T) * Heads + H)] = Lse[(B * Heads + H) * Tokens + T];
  return Out;
}
void headMajor(const std::vector<float> &TokenMajor, int64_t Batch, int64_t Heads, int64_t Tokens, float *Lse) {
  for (int64_t B = 0; B < Batch; ++B)
    for (int64_t H = 0; H < Heads; ++H)
      for (int64_t T = 0; T < Tokens; ++T)
        Lse[(B * Heads + H) * Tokens + T] = TokenMajor[size_t((B * Tokens + T) * Heads + H)];
}

/// The head-sharded view of one all-to-all call: CP x LocalTokens tokens of
/// QHeads / CP query and KvHeads / CP key-value heads.
BlockShape headShardShape(const Communicator &Cp, const BlockShape &Shape) {
  const AttentionDims &D = Shape.Dims;
  const int C = Cp.size();
  if (D.QHeads % C || D.KvHeads % C)
    throw std::invalid_argument("attention: the all-to-all context exchange needs query heads (" +
                                std::to_string(D.QHeads) + ") and key/value heads (" + std::to_string(D.KvHeads) +
                                ") that divide by cp = " + std::to_string(C));
  BlockShape Sharded = Shape;
  Sharded.Dims.QHeads = D.QHeads / C;
  Sharded.Dims.KvHeads = D.KvHeads / C;
  Sharded.LocalTokens = Shape.LocalTokens * C;
  return Sharded;
}

} // namespace

std::vector<float> attentionDelta(ComputeBackend &Backend, int64_t Batch, int64_t Tokens, int64_t QHeads, int64_t VDim,
                                  const float *Out, const float *DOut) {
  std::vector<float> Delta(size_t(Batch * QHeads * Tokens));
  Backend.attentionDelta(Batch, Tokens, QHeads, VDim, Out, DOut, Delta.data());
  return Delta;
}

namespace {

/// Arrays only backend operations read and write while they are held: the
/// backend's own, in fp32 (HeldArray::Wide), so that over a group with a
/// device counterpart they never cross.
std::vector<HeldArray> backendSums(std::initializer_list<std::vector<float> *> Arrays) {
  std::vector<HeldArray> Held;
  for (std::vector<float> *A : Arrays)
    Held.push_back(HeldArray::wide(A->data(), int64_t(A->size())));
  return Held;
}

/// Every rank's K and V, gathered over Cp (ComputeBackend::gatherActivations:
/// between the backend's arrays where the group has a device counterpart),
/// and the owners' order of the ring (the block of rank - s at step s).
struct GatheredBlocks {
  size_t KCount, VCount;
  std::vector<float> K, V;
  HeldArrays OnBackend; // released before K and V are freed
  GatheredBlocks(Communicator &Cp, const BlockShape &Shape, const float *LocalK, const float *LocalV)
      : KCount(size_t(Shape.Dims.Batch * Shape.LocalTokens * Shape.Dims.KvHeads * Shape.Dims.HeadDim)),
        VCount(size_t(Shape.Dims.Batch * Shape.LocalTokens * Shape.Dims.KvHeads * Shape.Dims.vHeadDim())),
        K(size_t(Cp.size()) * KCount), V(size_t(Cp.size()) * VCount),
        OnBackend(currentBackend(), backendSums({&K, &V})) {
    currentBackend().gatherActivations(LocalK, K.data(), int64_t(KCount), Cp);
    currentBackend().gatherActivations(LocalV, V.data(), int64_t(VCount), Cp);
  }
  /// Attend(Owner, KeySpan, QuerySpan) for every pair, owners in ring order.
  template <typename F> static void visit(const Communicator &Cp, int64_t SeqLen, F Attend) {
    const int C = Cp.size(), Rank = Cp.rank();
    const std::vector<TokenSpan> Queries = localSpans(Rank, C, SeqLen);
    for (int Step = 0; Step < C; ++Step) {
      const int Owner = (Rank - Step + C) % C;
      for (const TokenSpan &Keys : localSpans(Owner, C, SeqLen))
        for (const TokenSpan &Query : Queries)
          Attend(size_t(Owner), Keys, Query);
    }
  }
};

} // namespace

void allGatherAttentionForward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                               const float *V, float *Out, float *Lse) {
  GatheredBlocks All(Cp, Shape, K, V);
  std::vector<float> Scratch;
  GatheredBlocks::visit(Cp, Shape.Dims.SeqLen, [&](size_t Owner, const TokenSpan &Keys, const TokenSpan &Query) {
    attendSpanForward(Shape, Q, Query, All.K.data() + Owner * All.KCount, All.V.data() + Owner * All.VCount, Keys, Out,
                      Lse, Scratch);
  });
}

void allGatherAttentionBackward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                                const float *V, const float *Lse, const float *Delta, const float *DOut, float *DQ,
                                float *DK, float *DV) {
  ComputeBackend &Backend = currentBackend();
  GatheredBlocks All(Cp, Shape, K, V);
  // Every block's key and value gradients, and the query gradient, summed
  // where the blocks run.
  std::vector<float> AllDK(All.K.size(), 0.0f), AllDV(All.V.size(), 0.0f), Scratch;
  HeldArrays Sums(Backend, backendSums({&AllDK, &AllDV}));
  Backend.zero(AllDK.data(), int64_t(AllDK.size()));
  Backend.zero(AllDV.data(), int64_t(AllDV.size()));
  {
    const int64_t QCount = Shape.Dims.Batch * Shape.LocalTokens * Shape.Dims.QHeads * Shape.Dims.HeadDim;
    HeldArrays QuerySum(Backend, {{DQ, QCount, HeldArray::Accumulate}});
    GatheredBlocks::visit(Cp, Shape.Dims.SeqLen, [&](size_t Owner, const TokenSpan &Keys, const TokenSpan &Query) {
      attendSpanBackward(Shape, Q, Query, All.K.data() + Owner * All.KCount, All.V.data() + Owner * All.VCount, Keys,
                         Lse, Delta, DOut, DQ, AllDK.data() + Owner * All.KCount, AllDV.data() + Owner * All.VCount,
                         Scratch);
    });
  }
  Backend.reduceScatterActivations(AllDK.data(), DK, int64_t(All.KCount), Cp);
  Backend.reduceScatterActivations(AllDV.data(), DV, int64_t(All.VCount), Cp);
}

void allToAllAttentionForward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K, const float *V,
                              float *Out, float *Lse) {
  const AttentionDims &D = Shape.Dims;
  const BlockShape Sharded = headShardShape(Cp, Shape);
  const int64_t T = Shape.LocalTokens, All = Sharded.LocalTokens, Vd = D.vHeadDim();
  std::vector<float> Qs = toHeadShards(Cp, Q, D.Batch, T, D.QHeads, D.HeadDim);
  std::vector<float> Ks = toHeadShards(Cp, K, D.Batch, T, D.KvHeads, D.HeadDim);
  std::vector<float> Vs = toHeadShards(Cp, V, D.Batch, T, D.KvHeads, Vd);
  const int64_t H = Sharded.Dims.QHeads;
  std::vector<float> Os(size_t(D.Batch * All * H * Vd), 0.0f);
  std::vector<float> Ls(size_t(D.Batch * H * All), -std::numeric_limits<float>::infinity()), Scratch;
  const std::vector<TokenSpan> Spans = allRankSpans(Cp.size(), D.SeqLen);
  for (const TokenSpan &Keys : Spans)
    for (const TokenSpan &Query : Spans)
      attendSpanForward(Sharded, Qs.data(), Query, Ks.data(), Vs.data(), Keys, Os.data(), Ls.data(), Scratch);
  toSequenceShards(Cp, Os.data(), D.Batch, T, D.QHeads, Vd, Out);
  std::vector<float> LseTokens(size_t(D.Batch * T * D.QHeads));
  toSequenceShards(Cp, tokenMajor(Ls.data(), D.Batch, H, All).data(), D.Batch, T, D.QHeads, 1, LseTokens.data());
  headMajor(LseTokens, D.Batch, D.QHeads, T, Lse);
}

void allToAllAttentionBackward(Communicator &Cp, const BlockShape &Shape, const float *Q, const float *K,
                               const float *V, const float *Out, const float *Lse, const float *DOut, float *DQ,
                               float *DK, float *DV) {
  const AttentionDims &D = Shape.Dims;
  const BlockShape Sharded = headShardShape(Cp, Shape);
  const int64_t T = Shape.LocalTokens, All = Sharded.LocalTokens, Vd = D.vHeadDim();
  const int64_t H = Sharded.Dims.QHeads;
  std::vector<float> Qs = toHeadShards(Cp, Q, D.Batch, T, D.QHeads, D.HeadDim);
  std::vector<float> Ks = toHeadShards(Cp, K, D.Batch, T, D.KvHeads, D.HeadDim);
  std::vector<float> Vs = toHeadShards(Cp, V, D.Batch, T, D.KvHeads, Vd);
  currentBackend().hostReads(Out, D.Batch * T * D.QHeads * Vd); // both exchanged from host memory
  currentBackend().hostReads(DOut, D.Batch * T * D.QHeads * Vd);
  std::vector<float> Os = toHeadShards(Cp, Out, D.Batch, T, D.QHeads, Vd);
  std::vector<float> DOs = toHeadShards(Cp, DOut, D.Batch, T, D.QHeads, Vd);
  std::vector<float> LsTokens = toHeadShards(Cp, tokenMajor(Lse, D.Batch, D.QHeads, T).data(), D.Batch, T, D.QHeads, 1);
  std::vector<float> Ls(LsTokens.size());
  headMajor(LsTokens, D.Batch, H, All, Ls.data());
  std::vector<float> Delta = attentionDelta(hostBackend(), D.Batch, All, H, Vd, Os.data(), DOs.data());
  std::vector<float> DQs(Qs.size(), 0.0f), DKs(Ks.size(), 0.0f), DVs(Vs.size(), 0.0f), Scratch;
  const std::vector<TokenSpan> Spans = allRankSpans(Cp.size(), D.SeqLen);
  for (const TokenSpan &Keys : Spans)
    for (const TokenSpan &Query : Spans)
      attendSpanBackward(Sharded, Qs.data(), Query, Ks.data(), Vs.data(), Keys, Ls.data(), Delta.data(), DOs.data(),
                         DQs.data(), DKs.data(), DVs.data(), Scratch);
  toSequenceShards(Cp, DQs.data(), D.Batch, T, D.QHeads, D.HeadDim, DQ);
  toSequenceShards(Cp, DKs.data(), D.Batch, T, D.KvHeads, D.HeadDim, DK);
  toSequenceShards(Cp, DVs.data(), D.Batch, T, D.KvHeads, Vd, DV);
}

} // namespace moert
