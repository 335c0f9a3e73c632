//===- Pipeline.cpp -------------------------------------------------------===//
//
// Layer placement over virtual stages and Megatron-Core's 1F1B and
// interleaved 1F1B orders. See Pipeline.h for the schedule definitions and
// their sources.
//
//===----------------------------------------------------------------------===//
#include "moec/Layout/Pipeline.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

using namespace moec;

namespace {

llvm::Error makeError(std::string Message) { return llvm::createStringError(llvm::inconvertibleErrorCode(), Message); }

/// Fills P.VirtualStages (and P.VPP, where the layout decides it).
llvm::Error placeLayers(const PipelineInput &In, PipelinePlan &P) {
  if (In.Layout) {
    PipelineLayout Layout;
    LayoutError Err;
    if (!parsePipelineLayout(*In.Layout, Layout, Err))
      return makeError(Err.Message);
    int64_t Stages = int64_t(Layout.Stages.size());
    if (Stages % In.PP != 0)
      return makeError(fmt::format("pipeline layout has {} stages, not a multiple of PP = {}", Stages, In.PP));
    int64_t LayoutVPP = Stages / In.PP;
    if (In.VPP != 1 && In.VPP != LayoutVPP)
      return makeError(
          fmt::format("pipeline layout has {} stages, {} per pipeline rank, but VPP = {}", Stages, LayoutVPP, In.VPP));
    if (Layout.decoderLayers() != In.DecoderLayers)
      return makeError(fmt::format("pipeline layout places {} decoder layers, but the model has {}",
                                   Layout.decoderLayers(), In.DecoderLayers));
    if (Layout.mtpLayers() != In.MtpLayers)
      return makeError(
          fmt::format("pipeline layout places {} MTP layers, but the model has {}", Layout.mtpLayers(), In.MtpLayers));
    for (int64_t V = 0; V < Stages; ++V) {
      const LayoutStage &S = Layout.Stages[size_t(V)];
      if (S.Embedding != (V == 0))
        return makeError(V == 0 ? "pipeline layout must start with the embedding 'E'"
                                : "pipeline layout places the embedding 'E' past the first stage");
      if (S.Loss != (V == Stages - 1))
        return makeError(V == Stages - 1 ? "pipeline layout must end with the loss 'L'"
                                         : "pipeline layout places the loss 'L' before the last stage");
    }
    P.VPP = LayoutVPP;
    P.VirtualStages = std::move(Layout.Stages);
    return llvm::Error::success();
  }

  // Megatron-Core's even split: every virtual stage builds L / (PP x VPP)
  // decoder layers (transformer_block.py get_num_layers_to_build); the
  // embedding is pre-processing of the first virtual stage, the loss and the
  // MTP block post-processing of the last.
  int64_t Stages = In.PP * In.VPP;
  if (In.DecoderLayers % Stages != 0)
    return makeError(fmt::format("{} decoder layers do not split evenly over {} virtual pipeline stages "
                                 "(PP = {} x VPP = {})",
                                 In.DecoderLayers, Stages, In.PP, In.VPP));
  P.VPP = In.VPP;
  P.VirtualStages.assign(size_t(Stages), LayoutStage());
  for (LayoutStage &S : P.VirtualStages)
    S.DecoderLayers = In.DecoderLayers / Stages;
  P.VirtualStages.front().Embedding = true;
  P.VirtualStages.back().Loss = true;
  P.VirtualStages.back().MtpLayers = In.MtpLayers;
  return llvm::Error::success();
}

void pushOp(std::vector<ScheduledOp> &Ops, ScheduledOp::Kind K, int64_t Microbatch, int64_t Chunk) {
  Ops.push_back(ScheduledOp{K, Microbatch, Chunk});
}

/// Non-interleaved 1F1B (and PP = 1, where it is F, B per micro batch).
std::vector<ScheduledOp> schedule1F1B(int64_t PP, int64_t Rank, int64_t M, int64_t &Warmup) {
  Warmup = std::min(PP - Rank - 1, M);
  std::vector<ScheduledOp> Ops;
  Ops.reserve(size_t(2 * M));
  int64_t NextF = 0, NextB = 0;
  for (int64_t I = 0; I < Warmup; ++I)
    pushOp(Ops, ScheduledOp::Forward, NextF++, 0);
  for (int64_t I = 0; I < M - Warmup; ++I) {
    pushOp(Ops, ScheduledOp::Forward, NextF++, 0);
    pushOp(Ops, ScheduledOp::Backward, NextB++, 0);
  }
  while (NextB < M)
    pushOp(Ops, ScheduledOp::Backward, NextB++, 0);
  return Ops;
}

/// (micro batch, model chunk) of the k-th forward on every rank: groups of
/// G micro batches run chunk 0, then chunk 1, ...; the last group takes the
/// remaining micro batches (Megatron's get_schedule_table).
std::vector<std::pair<int64_t, int64_t>> scheduleTable(int64_t M, int64_t VPP, int64_t G) {
  std::vector<std::pair<int64_t, int64_t>> Table;
  Table.reserve(size_t(M * VPP));
  for (int64_t Start = 0; Start < M; Start += G) {
    int64_t End = Start + G >= M ? M : Start + G;
    for (int64_t Chunk = 0; Chunk < VPP; ++Chunk)
      for (int64_t Mb = Start; Mb < End; ++Mb)
        Table.emplace_back(Mb, Chunk);
  }
  return Table;
}

std::vector<ScheduledOp> scheduleInterleaved(const std::vector<std::pair<int64_t, int64_t>> &Table, int64_t VPP,
                                             int64_t Warmup) {
  int64_t Total = int64_t(Table.size());
  auto forward = [&](int64_t K) { return ScheduledOp{ScheduledOp::Forward, Table[K].first, Table[K].second}; };
  // Backwards visit the chunks in reverse, micro batches in the same order.
  auto backward = [&](int64_t K) {
    return ScheduledOp{ScheduledOp::Backward, Table[K].first, VPP - 1 - Table[K].second};
  };
  std::vector<ScheduledOp> Ops;
  Ops.reserve(size_t(2 * Total));
  for (int64_t K = 0; K < Warmup; ++K)
    Ops.push_back(forward(K));
  for (int64_t K = 0; K < Total - Warmup; ++K) {
    Ops.push_back(forward(Warmup + K));
    Ops.push_back(backward(K));
  }
  for (int64_t K = Total - Warmup; K < Total; ++K)
    Ops.push_back(backward(K));
  return Ops;
}

/// Whether 2 x PP x VPP x M ops would pass MaxScheduleOps (without overflow).
bool tooLarge(int64_t PP, int64_t VPP, int64_t M) {
  if (PP > MaxScheduleOps || VPP > MaxScheduleOps || M > MaxScheduleOps)
    return true;
  return PP * VPP > MaxScheduleOps / (2 * M);
}

llvm::Error tooLargeError(int64_t PP, int64_t VPP, int64_t M) {
  return makeError(fmt::format("the pipeline schedule would have more than {} ops (PP = {}, VPP = {}, M = {})",
                               MaxScheduleOps, PP, VPP, M));
}

int64_t peakInFlight(const std::vector<ScheduledOp> &Ops) {
  int64_t Held = 0, Peak = 0;
  for (const ScheduledOp &Op : Ops) {
    Held += Op.K == ScheduledOp::Forward ? 1 : -1;
    Peak = std::max(Peak, Held);
  }
  return Peak;
}

/// SplitMix64: well-spread 64-bit weights for the chunks.
uint64_t chunkWeight(uint64_t Chunk, uint64_t Seed) {
  uint64_t Z = Chunk * 0x9E3779B97F4A7C15ull + Seed;
  Z = (Z ^ (Z >> 30)) * 0xBF58476D1CE4E5B9ull;
  Z = (Z ^ (Z >> 27)) * 0x94D049BB133111EBull;
  return Z ^ (Z >> 31);
}

/// The distinct mixes of held chunks after each run of forwards, or none
/// when there are more than MaxMixes (the memory model then walks the
/// schedule). Two rolling hashes of the held counts, updated in O(1) per op,
/// tell mixes apart without comparing vectors, so the cost is linear in the
/// ops whatever VPP is (comparing vectors was quadratic: found by fuzz-plan
/// with VPP 254).
std::vector<std::vector<int64_t>> inFlightMixes(const std::vector<ScheduledOp> &Ops, int64_t VPP) {
  constexpr size_t MaxMixes = 64;
  std::vector<std::vector<int64_t>> Mixes;
  std::vector<int64_t> Held(size_t(VPP), 0);
  std::set<std::pair<uint64_t, uint64_t>> Seen;
  uint64_t H1 = 0, H2 = 0;
  for (size_t I = 0; I < Ops.size(); ++I) {
    const ScheduledOp &Op = Ops[I];
    if (Op.Chunk < 0 || Op.Chunk >= VPP)
      continue;
    bool Forward = Op.K == ScheduledOp::Forward;
    Held[size_t(Op.Chunk)] += Forward ? 1 : -1;
    uint64_t W1 = chunkWeight(uint64_t(Op.Chunk), 1), W2 = chunkWeight(uint64_t(Op.Chunk), 2);
    H1 = Forward ? H1 + W1 : H1 - W1;
    H2 = Forward ? H2 + W2 : H2 - W2;
    // Only the last forward of a run of forwards can be a peak.
    bool RunEnds = I + 1 == Ops.size() || Ops[I + 1].K != ScheduledOp::Forward;
    if (!Forward || !RunEnds || !Seen.insert({H1, H2}).second)
      continue;
    if (Mixes.size() == MaxMixes)
      return {};
    Mixes.push_back(Held);
  }
  return Mixes;
}

} // namespace

llvm::Expected<PipelinePlan> moec::planPipeline(const PipelineInput &In) {
  if (In.PP < 1 || In.VPP < 1)
    return makeError(fmt::format("pipeline sizes must be positive (PP = {}, VPP = {})", In.PP, In.VPP));
  if (In.Microbatches < 1)
    return makeError(fmt::format("need at least one micro batch per step, not {}", In.Microbatches));
  if (In.DecoderLayers < 0 || In.MtpLayers < 0)
    return makeError("layer counts must not be negative");

  if (tooLarge(In.PP, In.VPP, In.Microbatches))
    return tooLargeError(In.PP, In.VPP, In.Microbatches);

  PipelinePlan P;
  P.PP = In.PP;
  P.Microbatches = In.Microbatches;
  if (llvm::Error E = placeLayers(In, P))
    return E;

  P.FirstLayer.reserve(P.VirtualStages.size());
  int64_t Next = 0;
  for (const LayoutStage &S : P.VirtualStages) {
    P.FirstLayer.push_back(Next);
    Next += S.DecoderLayers;
  }

  const int64_t PP = P.PP, VPP = P.VPP, M = P.Microbatches;
  if (VPP > 1 && PP == 1)
    return makeError(fmt::format("an interleaved (virtual) pipeline needs PP > 1, but PP = 1 and VPP = {}", VPP));
  if (tooLarge(PP, VPP, M)) // the layout may have raised VPP
    return tooLargeError(PP, VPP, M);

  P.Schedule.resize(size_t(PP));
  P.WarmupForwards.resize(size_t(PP));
  if (VPP == 1) {
    for (int64_t R = 0; R < PP; ++R)
      P.Schedule[R] = schedule1F1B(PP, R, M, P.WarmupForwards[R]);
  } else {
    int64_t G = In.MicrobatchGroupSize ? In.MicrobatchGroupSize : PP;
    if (G < PP || G > M)
      return makeError(fmt::format("the interleaved schedule groups {} micro batches per virtual stage; "
                                   "need PP = {} <= group <= M = {}",
                                   G, PP, M));
    int64_t Last = M % G;
    if (Last > 0 && Last < PP)
      return makeError(fmt::format("the interleaved schedule needs M = {} micro batches to be a multiple of "
                                   "the group size {}, or to leave at least PP = {} in the last group",
                                   M, G, PP));
    std::vector<std::pair<int64_t, int64_t>> Table = scheduleTable(M, VPP, G);
    int64_t Total = M * VPP;
    for (int64_t R = 0; R < PP; ++R) {
      int64_t W = (PP - R - 1) * 2 + (VPP - 1) * G;
      if (In.LegacyAllWarmupWhenMEqualsPP && M == PP)
        W = Total;
      W = std::min(W, Total);
      P.WarmupForwards[R] = W;
      P.Schedule[R] = scheduleInterleaved(Table, VPP, W);
    }
  }

  P.PeakInFlight.reserve(size_t(PP));
  P.InFlightMixes.reserve(size_t(PP));
  for (const std::vector<ScheduledOp> &Ops : P.Schedule) {
    P.PeakInFlight.push_back(peakInFlight(Ops));
    P.InFlightMixes.push_back(inFlightMixes(Ops, VPP));
  }
  P.BubbleFraction = double(PP - 1) / double(VPP * M + PP - 1);
  return P;
}
