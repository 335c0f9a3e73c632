//===- model/GatedDeltaRule.h - The gated delta rule, forward and backward ===//
//
// The recurrence at the core of Gated DeltaNet (Yang, Kautz and Hatamizadeh,
// "Gated Delta Networks"; Qwen3-Next's linear-attention layers), as
// Megatron-Core 0.16.1's GatedDeltaNet runs it through fla's
// chunk_gated_delta_rule or, deterministically, torch_chunk_gated_delta_rule
// (megatron/core/ssm/gated_delta_net.py). For one sequence and one head, with
// a state S of Dk x Dv starting at zero, token by token:
//
//   A_t = exp(g_t) S_{t-1}              decay
//   u_t = beta_t (v_t - A_t^T k_t)      the delta: what the state misses of v_t
//   S_t = A_t + k_t u_t^T               write
//   o_t = S_t^T q_t / sqrt(Dk)          read, after the write
//
// The chunked form Megatron runs computes the same outputs in another order.
// The backward recomputes the states from checkpoints every ChunkTokens
// tokens, so it keeps Tokens / ChunkTokens states, not Tokens.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_GATEDDELTARULE_H
#define MOERT_MODEL_GATEDDELTARULE_H

#include <cstdint>

namespace moert {

/// One head of one sequence: Tokens rows, each row of Q and K Dk wide, of V
/// and O Dv wide, at the given row strides (in floats) so that a head can be
/// read in place from [tokens, heads x width] activations; G and Beta hold
/// one value per token at GStride.
struct DeltaRuleHead {
  int64_t Tokens = 0, Dk = 0, Dv = 0;
  int64_t QkStride = 0, VStride = 0, GStride = 1;
};

/// O = the head's outputs (rows at VStride).
void gatedDeltaRuleForward(const DeltaRuleHead &H, const float *Q, const float *K, const float *V, const float *G,
                           const float *Beta, float *O);

/// From DO (rows at VStride), adds the gradients to DQ, DK (rows at
/// QkStride), DV (VStride), DG and DBeta (GStride).
void gatedDeltaRuleBackward(const DeltaRuleHead &H, const float *Q, const float *K, const float *V, const float *G,
                            const float *Beta, const float *DO, float *DQ, float *DK, float *DV, float *DG,
                            float *DBeta);

} // namespace moert

#endif
