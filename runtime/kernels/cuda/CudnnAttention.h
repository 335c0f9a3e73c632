//===- kernels/cuda/CudnnAttention.h - Causal attention through cuDNN -----===//
//
// Whole-sequence causal attention on the tensor cores: cuDNN's fused scaled
// dot-product attention (its SDPA forward and backward graphs, built with the
// cuDNN C++ frontend), for one rank's full sequences. The semantics are
// causalAttentionForward/Backward's (Attention.h) with these differences:
// Out and the gradients are bf16 (cuDNN's fused kernels write their I/O type),
// and positions are the tokens' order in each sequence (key j is visible to
// query i iff j <= i). Layouts: Q, Out, DOut, DQ [Batch, Tokens, QHeads,
// HeadDim]; K, V, DK, DV [Batch, Tokens, KvHeads, HeadDim]; Lse [Batch,
// QHeads, Tokens] fp32, the natural-log log-sum-exp of each query's scaled
// scores (cuDNN's softmax statistics), which the backward reads.
//
// Built graphs are kept per shape, so a training step builds each once; the
// workspace is one growing device buffer. The CP ring keeps the CUDA-core
// block kernels (masks by absolute positions, fp32 merge).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CUDNNATTENTION_H
#define MOERT_KERNELS_CUDA_CUDNNATTENTION_H

#include "kernels/cuda/Attention.h"
#include "kernels/cuda/DeviceBuffer.h"

#include <memory>

namespace moert::cuda {

class CudnnAttention {
public:
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Out = softmax(Scale Q K^T, causal) V; Lse as above. Throws
  /// std::runtime_error with cuDNN's message when it cannot run the shape.
  void forward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V, bf16 *Out, float *Lse,
               cudaStream_t Stream);
  /// DQ, DK, DV (overwritten) from the forward's Out and Lse and DOut.
  void backward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *Out,
                const bf16 *DOut, const float *Lse, bf16 *DQ, bf16 *DK, bf16 *DV, cudaStream_t Stream);

  /// The cuDNN library's version, e.g. 91900.
  static size_t version();

private:
  struct Impl;
  std::unique_ptr<Impl> P;
};

} // namespace moert::cuda

#endif
