//===- kernels/LinearAttentionInput.h - Gated DeltaNet's input side -------===//
//
// The operands of what Gated DeltaNet (model/GatedDeltaNet.h) computes
// between its input projections and its recurrence: the causal depthwise
// convolution of the queries, keys and values, and the decay and write
// gates. The compute backend's operations (Backend.h), the host's loops
// (model/ModelOps.h) and the CUDA kernels (kernels/cuda/LinearAttention.h)
// take them, and the convolution's tap rule is declared once, here.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_LINEARATTENTIONINPUT_H
#define MOERT_KERNELS_LINEARATTENTIONINPUT_H

#include "kernels/HostDevice.h"

#include <cstdint>

namespace moert {

/// A causal depthwise convolution of Width taps over each sequence of
/// SeqLen tokens of a [Rows, Channels] array (sequence-major, whole
/// sequences): Y[t, c] = sum_j W[c, j] X[t - lag(j), c], zero before the
/// sequence's start (PyTorch's conv1d with padding Width - 1, its first
/// SeqLen outputs). W is [Channels, Width].
struct CausalConv {
  int64_t Rows = 0, Channels = 0, SeqLen = 0, Width = 0;

  /// How many tokens before the output's tap J reads.
  MOERT_HOST_DEVICE int64_t lag(int64_t J) const { return Width - 1 - J; }
  /// Whether tap J of output token T reads a token of T's own sequence.
  MOERT_HOST_DEVICE bool reads(int64_t T, int64_t J) const { return lag(J) <= T % SeqLen; }
  MOERT_HOST_DEVICE int64_t elements() const { return Rows * Channels; }
  bool valid() const { return Rows >= 0 && Channels >= 0 && SeqLen > 0 && Width > 0 && Rows % SeqLen == 0; }
};

/// Gated DeltaNet's gates over Tokens tokens of Heads value heads ([Tokens,
/// Heads] arrays), from their parameters DtBias and ALog [Heads]: RawA = A +
/// DtBias, the decay G = -exp(ALog) softplus(RawA) and the write strength
/// Beta = sigmoid(B). The backward reads RawA, G and Beta and the gradients
/// DG and DBeta, writes DA and DB, and adds to DALog and DDtBias (a sum over
/// the tokens in a fixed order: the host's loop in token order).
struct DeltaGates {
  int64_t Tokens = 0, Heads = 0;
  const float *DtBias = nullptr, *ALog = nullptr;
  MOERT_HOST_DEVICE int64_t elements() const { return Tokens * Heads; }
};

} // namespace moert

#endif
