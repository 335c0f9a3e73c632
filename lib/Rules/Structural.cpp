//===- Structural.cpp - What Megatron-Core refuses at start-up ------------===//
//
// The rules with fixed IDs in bench/reference/rules.md: divisibility of
// experts, heads, sequence, layers and batch by the parallel sizes, pipeline
// layouts, and what the hardware supports.
//
//===----------------------------------------------------------------------===//
#include "moec/Basic/Quantity.h"
#include "moec/Layout/PipelineLayout.h"
#include "moec/Rules/RuleEngine.h"
#include <fmt/format.h>

using namespace moec;

namespace moec::rules {

void check_experts_divisible(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && R.Model.MoE->Experts % R.Parallel.EP != 0)
    C.report(diag::experts_divisible, "parallel.ep", R.Model.MoE->Experts, R.Parallel.EP);
}

void check_heads_divisible(RuleContext &C) {
  const ModelSpec &M = C.R.Model;
  int64_t TP = C.R.Parallel.TP;
  if (M.Heads % TP != 0) {
    C.report(diag::heads_divisible, "parallel.tp",
             fmt::format("{} attention heads do not divide over tp = {}", M.Heads, TP));
    return;
  }
  int64_t Groups = M.KvHeads;
  if (!(Groups % TP == 0 || TP % Groups == 0))
    C.report(diag::heads_divisible, "parallel.tp",
             fmt::format("{} query groups (kv_heads) neither divide nor are divided by tp = {}", Groups, TP));
}

void check_seq_divisible(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (P.CP > 1 && R.SeqLen % (2 * P.CP) != 0) {
    C.report(
        diag::seq_divisible, "seq_len",
        fmt::format("seq_len {} is not a multiple of 2 x cp = {} (load-balanced causal chunks)", R.SeqLen, 2 * P.CP));
    return;
  }
  if (P.SequenceParallel && P.TP > 1 && (R.SeqLen / P.CP) % P.TP != 0)
    C.report(diag::seq_divisible, "seq_len",
             fmt::format("the {}-token context-parallel shard does not split over tp = {} (sequence parallel)",
                         R.SeqLen / P.CP, P.TP));
}

void check_layers_split(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  int64_t Stages = P.PP * P.VPP;
  if (P.Layout || Stages <= 1 || R.Model.Layers % Stages == 0)
    return;
  auto B = C.report(diag::layers_split, P.VPP > 1 ? "parallel.vpp" : "parallel.pp", R.Model.Layers, Stages);
  std::string Balanced = balancedPipelineLayout(R.Model.Layers, R.Model.MtpLayers, Stages);
  if (Balanced.empty())
    return;
  // Insert the layout after the entry that set pp (or vpp).
  const Provenance &Anchor = R.origin(P.VPP > 1 ? "parallel.vpp" : "parallel.pp");
  if (Anchor.IsDefault || !Anchor.EntryRange.Start.isValid())
    return;
  std::string Entry(Anchor.EntryRange.Start.getPointer(), Anchor.EntryRange.End.getPointer());
  bool Dotted = llvm::StringRef(Entry).startswith("parallel.");
  B.fixit(Anchor.EntryRange, Entry + "; " + (Dotted ? "parallel.layout" : "layout") + " = \"" + Balanced + "\"");
}

void check_layout_invalid(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  if (!P.Layout)
    return;
  const Provenance &Origin = R.origin("parallel.layout");
  PipelineLayout Layout;
  LayoutError Err;
  if (!parsePipelineLayout(*P.Layout, Layout, Err)) {
    // Point into the string literal when the text maps one to one.
    llvm::SMRange Range = Origin.Range;
    const char *Start = Range.Start.getPointer();
    if (Start && Range.End.getPointer() - Start == std::ptrdiff_t(P.Layout->size() + 2)) {
      const char *At = Start + 1 + Err.Offset;
      Range = llvm::SMRange(llvm::SMLoc::getFromPointer(At), llvm::SMLoc::getFromPointer(At + Err.Length));
    }
    C.reportAt(diag::layout_invalid, Range, "parallel.layout", Err.Message);
    return;
  }
  auto Bad = [&](const std::string &Message) {
    C.reportAt(diag::layout_invalid, Origin.Range, "parallel.layout", Message);
  };
  int64_t Stages = Layout.Stages.size();
  if (Stages % P.PP != 0)
    return Bad(fmt::format("the layout has {} stages, not a multiple of pp = {}", Stages, P.PP));
  if (Stages / P.PP != P.VPP)
    // Stated as a relation: a sweep of pp (or vpp) against one layout is
    // the usual way to get here, and either side may be the one to change.
    return Bad(fmt::format("the layout has {} stages, but pp x vpp = {} x {} = {}: each stage of a layout is one "
                           "virtual pipeline stage; change the layout or make pp x vpp = {}",
                           Stages, P.PP, P.VPP, P.PP * P.VPP, Stages));
  int64_t Embeddings = 0, Losses = 0;
  for (const LayoutStage &S : Layout.Stages) {
    Embeddings += S.Embedding;
    Losses += S.Loss;
  }
  if (Embeddings != 1 || !Layout.Stages.front().Embedding)
    return Bad("the layout must hold the embedding 'E' exactly once, in the first stage");
  if (Losses != 1 || !Layout.Stages.back().Loss)
    return Bad("the layout must hold the loss 'L' exactly once, in the last stage");
  if (Layout.decoderLayers() != R.Model.Layers)
    return Bad(fmt::format("the layout places {} decoder layers 't', but {} has {}", Layout.decoderLayers(),
                           R.Model.Name, R.Model.Layers));
  if (Layout.mtpLayers() != R.Model.MtpLayers)
    return Bad(fmt::format("the layout places {} MTP layers 'm', but {} has {}", Layout.mtpLayers(), R.Model.Name,
                           R.Model.MtpLayers));
}

void check_vpp_requires_pp(RuleContext &C) {
  if (C.R.Parallel.VPP > 1 && C.R.Parallel.PP == 1)
    C.report(diag::vpp_requires_pp, "parallel.vpp", C.R.Parallel.VPP);
}

void check_gbs_divisible(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t PerStep = R.MicroBatch * R.Parallel.DP;
  if (PerStep > 0 && R.GlobalBatch % PerStep != 0)
    C.report(diag::gbs_divisible, "batch.global", R.GlobalBatch, R.MicroBatch, R.Parallel.DP, PerStep);
}

void check_interleaved_microbatches(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t M = C.microbatches();
  if (R.Parallel.VPP > 1 && R.Parallel.PP > 1 && M > 0 && (M < R.Parallel.PP || M % R.Parallel.PP != 0))
    C.report(diag::interleaved_microbatches, "batch.global", M, R.Parallel.PP);
}

void check_precision_unsupported(RuleContext &C) {
  const Recipe &R = C.R;
  GpuArch A = R.Gpu.Arch;
  const char *Why = nullptr;
  switch (R.Prec) {
  case Precision::BF16:
    return;
  case Precision::MXFP8:
  case Precision::NVFP4:
    if (A != GpuArch::Blackwell)
      Why = "microscaling formats need Blackwell tensor cores";
    break;
  case Precision::FP8Blockwise:
    // Transformer Engine >= 2.10 runs blockwise scaling from SM 9.0 on,
    // Blackwell included (quantization.py check_fp8_block_scaling_support).
    if (A != GpuArch::Hopper && A != GpuArch::Blackwell)
      Why = "FP8 needs Hopper or newer";
    break;
  case Precision::FP8Delayed:
  case Precision::FP8Tensorwise:
    if (A != GpuArch::Hopper && A != GpuArch::Blackwell)
      Why = "FP8 needs Hopper or newer";
    break;
  }
  if (Why)
    C.report(diag::precision_unsupported, "precision", precisionName(R.Prec), R.Gpu.Name, Why);
}

void check_dispatcher_unsupported(RuleContext &C) {
  const Recipe &R = C.R;
  if (R.Dispatch != Dispatcher::DeepEP && R.Dispatch != Dispatcher::HybridEP)
    return;
  int64_t Major = R.Gpu.SM / 10;
  if (Major < 8 || Major > 10) {
    C.report(diag::dispatcher_unsupported, "dispatcher",
             fmt::format("{} needs an SM 8.x, 9.x or 10.x GPU; {} is SM {}", dispatcherName(R.Dispatch), R.Gpu.Name,
                         R.Gpu.SM));
    return;
  }
  if (R.Dispatch == Dispatcher::DeepEP && C.isNVL72())
    C.report(diag::dispatcher_unsupported, "dispatcher",
             fmt::format("deepep does not run on {}; use hybridep", R.Gpu.Name));
}

void check_moe_needs_sp(RuleContext &C) {
  const Recipe &R = C.R;
  if (C.isMoE() && R.Parallel.TP > 1 && !R.Parallel.SequenceParallel)
    C.report(diag::moe_needs_sp, "parallel.sp", R.Parallel.TP);
}

} // namespace moec::rules
