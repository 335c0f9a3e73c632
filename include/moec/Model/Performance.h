//===- Performance.h - FLOPs and predicted step time -------------*- C++ -*-===//
//
// countFlops: Megatron's model-FLOPs definition (megatron/training/
// training.py num_floating_point_operations), which Megatron and Bridge use
// for "Model TFLOP/s/GPU". predictStepTime: an analytical per-op model in the
// style of Calculon (perf-anchors.md section 1): compute at a fraction of the
// precision's peak, memory-bound kernels at a fraction of HBM bandwidth,
// exposed communication, host overhead, the pipeline bubble. Every constant
// is in Calibration.h; docs/accuracy.md compares the model with the
// measured runs of perf_calibration.csv.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_MODEL_PERFORMANCE_H
#define MOEC_MODEL_PERFORMANCE_H

#include "moec/Layout/Pipeline.h"
#include "moec/Model/Calibration.h"
#include "moec/Model/Memory.h"
#include "moec/Sema/Recipe.h"

namespace moec {

/// Megatron's model-FLOPs definition: forward + backward (3x forward) of the
/// decoder with active experts only (top-k routed plus shared experts, dense
/// first-k layers), causal attention counted at half, MLA and Gated-DeltaNet
/// projections, the logits, MTP layers, and for VLMs the vision encoder and
/// projector. Recompute is not counted.
struct FlopCount {
  double DecoderPerToken = 0; // training FLOPs per decoder token (fwd + bwd)
  double VisionPerToken = 0;  // vision encoder + projector, per decoder token
  double PerStep = 0;         // whole job, one optimizer step
  /// Fraction of the decoder tokens that are text (VLM with images: less
  /// than 1; the rest are image tokens).
  double TextTokenFraction = 1;
};
FlopCount countFlops(const Recipe &R);

/// Seconds per optimizer step on the slowest pipeline rank, by cause. The
/// parts add up to StepTime: Compute, Recompute and the exposed (not
/// overlapped) communication are summed over the micro batches of the step;
/// Host is the time the GPU waits for the CPU to issue kernels; Bubble the
/// pipeline's idle time; DataParallel and Optimizer are per step.
struct StepTimeBreakdown {
  double Compute = 0, TensorParallel = 0, ContextParallel = 0, ExpertParallel = 0, PipelineP2P = 0, DataParallel = 0,
         Bubble = 0, Recompute = 0;
  double Host = 0, Optimizer = 0;
  /// Exposed copies of fine-grained activation offload (offload.activations
  /// = [modules]): the time they take beyond the passes they overlap.
  double ActivationOffload = 0;
  double StepTime = 0; // seconds
  double TokensPerSecPerGpu = 0;
  double UsefulTokensPerSecPerGpu = 0; // text tokens (VLM: without image tokens)
  double ModelTflopsPerGpu = 0;
  /// Model FLOP/s per GPU over the GPU's dense BF16 peak, whatever the
  /// training precision: perf_calibration.csv's mfu_pct_vs_bf16_dense_peak
  /// (as a fraction, not a percentage).
  double MFU = 0;
  /// The same over the dense peak of the recipe's precision (FP8 or FP4 rate
  /// for low-precision recipes): mfu_pct_vs_native_dense_peak.
  double MFUNative = 0;
  int64_t Microbatches = 0; // per step per data-parallel rank
  int64_t SlowestStage = 0; // pipeline rank that sets the pace
  /// Seconds of one micro batch's forward and backward pass of each virtual
  /// stage (the layers of one model chunk on one pipeline rank, with their
  /// exposed communication and host time), in virtual-stage order. Over a
  /// rank's chunks they add up to its busy time per micro batch.
  std::vector<double> StageForwardSec, StageBackwardSec;
};
/// Expected number of NVLink domains of an EP group (domains holding equal
/// runs of consecutive experts) that one token's routed experts reach, its
/// own included, under uniform (force-balanced) routing and the model's
/// group-limited routing.
double domainsReached(const MoESpec &MoE, int64_t Domains);

/// Memory, when given, is the estimate for the same recipe and plan (the
/// step model reads the bytes fine-grained activation offload moves); when
/// null it is computed here if the recipe offloads modules.
StepTimeBreakdown predictStepTime(const Recipe &R, const PipelinePlan &P,
                                  const Calibration &C = Calibration::defaults(),
                                  const MemoryEstimate *Memory = nullptr);

} // namespace moec

#endif
