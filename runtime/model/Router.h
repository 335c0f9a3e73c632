//===- model/Router.h - Scores and top-k routing of an MoE router -*- C++ -*-===//
//
// What a router does with its logits, as Megatron-Core's
// topk_routing_with_score_function (moe/moe_utils.py) does it: softmax or
// sigmoid scores, a softmax before the top-k (pre_softmax) or after it (over
// the chosen), group-limited top-k (the best group_top_k groups by the sum of
// their top_k / group_top_k scores), higher score first and the lower expert
// id on ties. The MoE block and the differential test against Megatron-Core
// (test/megatron/router.py) both call it.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_ROUTER_H
#define MOERT_MODEL_ROUTER_H

#include "kernels/RouterSpec.h"
#include "model/Model.h"

#include <cstdint>
#include <vector>

namespace moert {

/// The router's settings in Config, for the compute backend.
RouterSpec routerSpec(const ModelConfig &Config);

class Router {
public:
  explicit Router(const ModelConfig &Config) : Config(Config) {}

  /// Rows [N, Experts]: the logits in, the scores (softmax or sigmoid
  /// probabilities over every expert) out. TopIdx and TopW [N * TopK],
  /// token-major, get each token's experts and routing weights.
  /// Bias [Experts] (or null): added to sigmoid scores for the choice only,
  /// the weights stay the unbiased scores; a softmax router ignores it, as
  /// Megatron-Core 0.16.1 does.
  void route(float *Rows, int64_t N, std::vector<int32_t> &TopIdx, std::vector<float> &TopW,
             const float *Bias = nullptr) const;
  /// The update after a step (Megatron-Core get_updated_expert_bias): Tokens
  /// are the routed copies per expert summed over every rank of the stage;
  /// each bias moves by Rate towards the mean load (sign of mean - tokens).
  static void updateBias(float *Bias, const float *Tokens, int64_t Experts, double Rate);

  /// Megatron's moe_router_force_load_balancing: Rows [N, Experts] of
  /// logits replaced by standard-normal draws, row I's from Keys[I] (a
  /// token and layer) and the expert.
  static void forceBalancedLogits(float *Rows, int64_t N, int64_t Experts, const uint64_t *Keys);

  /// Whether the routing weights are the chosen scores over their sum.
  bool normalisedWeights() const;

  /// The load-balancing statistics of Scores [N, Experts] (route()'s):
  /// Stats [2 Experts + 1] = copies per expert of each token's top-k by
  /// score over every expert, the sums per expert of the scores (a sigmoid
  /// router's normalised to sum to one), and N. Megatron-Core's
  /// load-balancing loss sees neither the expert bias nor the groups
  /// (moe_utils.py compute_routing_scores_for_aux_loss, router.py
  /// _apply_aux_loss); for a softmax router without groups those are the
  /// routed experts.
  void stats(const float *Scores, int64_t N, float *Stats) const;

  /// The logits' gradients DLogits [N, Experts] from the routing weights'
  /// DTopW [N * TopK] and the aux loss (AuxPerScore * Fraction[e], f_e a
  /// constant), through softmax or sigmoid.
  void backward(const float *Scores, int64_t N, const int32_t *TopIdx, const float *TopW, const float *DTopW,
                const float *Fraction, double AuxPerScore, float *DLogits) const;

  /// The epsilon of a sigmoid router's score normalisation for the aux loss.
  static constexpr double AuxScoreEpsilon = 1e-20;

private:
  /// Whether routing is limited to the best of several expert groups.
  bool grouped() const;
  /// Group-limited routing: moves the experts of the token's best groups to
  /// the front of Order and returns how many they are.
  int64_t selectGroups(const float *Selection, std::vector<int32_t> &Order) const;

  const ModelConfig &Config;
};

} // namespace moert

#endif
