//===- Memory.h - Predicted memory per GPU ------------------------*- C++ -*-===//
#ifndef MOEC_MODEL_MEMORY_H
#define MOEC_MODEL_MEMORY_H

#include "moec/Layout/Pipeline.h"
#include "moec/Model/Calibration.h"
#include "moec/Sema/Recipe.h"
#include <string>
#include <utility>
#include <vector>

namespace moec {

/// Bytes by category on one GPU. Category names are stable: the plan's
/// memory.breakdown keys and the report's legend use them.
struct MemoryBreakdown {
  double Weights = 0, Gradients = 0, OptimizerState = 0, Activations = 0, DispatcherBuffers = 0, CudaGraphPools = 0,
         Reserve = 0;
  double total() const {
    return Weights + Gradients + OptimizerState + Activations + DispatcherBuffers + CudaGraphPools + Reserve;
  }
  /// (name, bytes) in a fixed order: weights, gradients, optimizer_state,
  /// activations, dispatcher_buffers, cuda_graph_pools, reserve.
  std::vector<std::pair<const char *, double>> items() const;
};

struct MemoryEstimate {
  std::vector<MemoryBreakdown> PerStage; // by pipeline rank
  int64_t PeakStage = 0;
  double PeakBytes = 0;
  double CapacityBytes = 0;
  bool fits() const { return PeakBytes <= CapacityBytes; }
  /// Activation bytes per layer of one micro batch on the peak stage, by
  /// module (attention, moe, mlp, norms, ...), for the runtime to compare.
  std::vector<std::pair<std::string, double>> ActivationPerLayerByModule;
  /// Bytes fine-grained activation offload moves to the host per micro
  /// batch (each way), by pipeline rank; zero without offload.activations
  /// = [modules].
  std::vector<double> OffloadedPerMicrobatch;
};

/// The pipeline placement and schedule of a recipe (micro batches per step
/// from its batch sizes and DP).
llvm::Expected<PipelinePlan> pipelineFor(const Recipe &R);

/// The same, shared: recipes with the same pipeline inputs (layers, PP, VPP,
/// micro batches, layout) get one plan, built once per process. The rules
/// evaluate memory for every recipe and sweep point, and most share a few
/// pipelines.
llvm::Expected<std::shared_ptr<const PipelinePlan>> sharedPipelineFor(const Recipe &R);

/// Memory per pipeline rank. Weights (bf16, plus a cached low-precision copy
/// of the layer GEMM weights under FP8/MXFP8/NVFP4, or FP8 parameters with
/// fp8_param_gather), gradients (the DDP buffer) and optimizer state (fp32
/// master + Adam moments, bf16 moments when precision-aware) of the
/// parameters the rank holds: dense ones split by TP and sharded over DP x CP,
/// expert ones split by EP x ETP and sharded over EDP (optimizer state under
/// the distributed optimizer; everything under FSDP); offload.optimizer moves
/// that fraction of the optimizer state to the host. Activations: the saved
/// tensors of the micro-batch chunks in flight at the rank's peak (simulated
/// from P.Schedule when present, else P.PeakInFlight chunk instances in
/// Megatron's interleaved order, else Megatron's 1F1B warm-up count) plus one
/// layer's working set. An empty plan is replaced by the recipe's layout (or
/// the balanced split) with Megatron's in-flight counts. Constants: C.
MemoryEstimate estimateMemory(const Recipe &R, const PipelinePlan &P, const Calibration &C = Calibration::defaults());

} // namespace moec

#endif
