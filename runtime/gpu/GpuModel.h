//===- gpu/GpuModel.h - The MoE transformer on one GPU (training step) ----===//
//
// model/Model.h's transformer (embedding, layers of RMSNorm -> GQA attention
// with RoPE -> residual, RMSNorm -> dense SwiGLU MLP or routed MoE with
// optional shared experts -> residual, final RMSNorm, output head, cross
// entropy) on ONE GPU with the CUDA kernels: bf16 weights and activations,
// fp32 accumulation, fp32 master weights, gradients and AdamW moments.
//
// Scope of this first GPU path: a whole model on one rank (no TP, CP, EP or
// pipeline), one micro batch per forwardBackward(), no recompute. It starts
// from a CPU StageModel's parameters (same names, same values), so the two
// can be compared step for step; the MoE layer syncs with the host once per
// layer (aux-loss statistics and per-expert row counts for the grouped GEMM).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_GPU_GPUMODEL_H
#define MOERT_GPU_GPUMODEL_H

#include "kernels/cuda/DeviceBuffer.h"
#include "model/Model.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moert::cuda {

struct GpuStepLoss {
  double CeSum = 0;   ///< unscaled sum of per-token CE losses
  int64_t Tokens = 0; ///< tokens with a label >= 0
  double AuxSum = 0;  ///< unscaled aux losses summed over MoE layers
};

struct GpuAdamW {
  double Lr = 1e-3, Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8;
  double WeightDecay = 0;  ///< not applied to 1-D parameters (norm weights)
  double ClipGradNorm = 0; ///< 0: no clipping
};

class GpuModel {
public:
  /// Config must describe a whole model; Params are a CPU StageModel's
  /// parameters for all of it (one rank), copied to the GPU.
  GpuModel(const ModelConfig &Config, const std::vector<Parameter *> &Params);
  ~GpuModel();
  GpuModel(const GpuModel &) = delete;
  GpuModel &operator=(const GpuModel &) = delete;

  /// Forward and backward of one micro batch (Sequences x SeqLen tokens, in
  /// order); gradients accumulate (+=). CeScale multiplies the CE sum and
  /// AuxScale the aux losses in the objective, as in ModelOptions.
  GpuStepLoss forwardBackward(const MicroBatch &MB, double CeScale, double AuxScale);
  /// AdamW over every parameter (step counter kept here); returns the global
  /// gradient norm before clipping.
  double step(const GpuAdamW &Options);
  void zeroGrads();

  /// The fp32 gradient / master value of a parameter by name, on the host.
  std::vector<float> gradient(const std::string &Name) const;
  std::vector<float> value(const std::string &Name) const;
  std::vector<std::string> parameterNames() const;

private:
  struct Impl;
  std::unique_ptr<Impl> P;
};

} // namespace moert::cuda

#endif
