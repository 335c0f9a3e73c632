//===- model/MoeBlock.h - Router, aux loss and routed SwiGLU experts ------===//
//
// The routed part of an MoE layer on this rank's sequence shard: the router
// (Hidden x Experts, replicated), softmax or sigmoid scores, top-k with ties
// going to the lower expert id, routing weights, the load-balancing
// statistics summed over the TpCp group, and the local experts' SwiGLU over
// the rows the TokenDispatcher brings them.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_MODEL_MOEBLOCK_H
#define MOERT_MODEL_MOEBLOCK_H

#include "model/Model.h"
#include "parallel/ep/TokenDispatcher.h"

namespace moert {

/// The weights of one MoE layer's routed part on this rank.
struct MoeWeights {
  Parameter *Router = nullptr;             ///< [Hidden, Experts]
  ExpertBias *Bias = nullptr;              ///< with ModelConfig::ExpertBias
  std::vector<Parameter *> Gate, Up, Down; ///< per local expert
};

/// What the routed part keeps for backward. Act is the "moe_act" module;
/// everything else is "moe".
struct MoeSaved {
  Tensor Scores;               ///< [Ns, Experts] softmax or sigmoid scores
  std::vector<int32_t> TopIdx; ///< [Ns * TopK] token-major
  std::vector<float> TopW;     ///< routing weights, same layout
  std::vector<float> Fraction; ///< f_e over the TpCp group [Experts]
  double GroupTokens = 0;      ///< tokens of the micro batch (TpCp sum)
  DispatchState Dispatch;
  /// Under etp > 1: the rows each etp rank brought for each local expert
  /// ([rank * localExperts + expert]) and the padded rows per rank of the
  /// group's exchanges; ExpertIn then holds every etp rank's rows,
  /// expert-major (then rank), and G, U, Act this rank's columns of them.
  std::vector<int64_t> EtpCounts;
  int64_t EtpPaddedRows = 0;
  Tensor ExpertIn, G, U; ///< dispatched rows and their projections
  Tensor Act;            ///< silu(G) * U
  bool Valid = false;

  int64_t moeBytes() const;
  int64_t actBytes() const { return Act.bytes(); }
  void dropMoe();
};

class MoeBlock {
public:
  /// Etp: the group the experts' weights are split over (a group of one:
  /// whole experts).
  MoeBlock(const ModelConfig &Config, Communicator &TpCp, TokenDispatcher &Dispatcher, Communicator &Etp)
      : Config(Config), TpCp(TpCp), Dispatcher(Dispatcher), Etp(Etp) {}

  /// Xn [Ns, Hidden] -> routed output [Ns, Hidden]; returns the aux loss
  /// (already multiplied by AuxLossCoeff * Experts), the same on every rank
  /// of the TpCp group.
  /// CountTokens: add the routed copies to W.Bias->Tokens. BalanceKeys
  /// [Ns] (ModelConfig::ForceBalance; else null): each token's key for
  /// Router::forceBalancedLogits. KeepFor (else null): the experts' products
  /// stay on the backend (HeldArray::BackendOnly: their host values are
  /// unspecified), and what their backward reads (the rows, G and U, and the
  /// experts' outputs where the rows move on the backend: movesOnBackend())
  /// is kept under that key (ComputeBackend::keepArrays) until the caller
  /// releases it.
  /// Y is written, in its own storage where it has the output's shape
  /// already and the rows move on the backend (so that a hold on it keeps
  /// the output there).
  double forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, bool CountTokens = false,
                 const uint64_t *BalanceKeys = nullptr, const void *KeepFor = nullptr);
  /// Recomputes Act from G and U (selective "moe_act").
  void recomputeAct(MoeSaved &S);
  /// DY [Ns, Hidden] is the gradient of the routed output; AuxGradScale
  /// multiplies the aux loss in the objective. Writes dXn into DXn (in its
  /// own storage where it has Xn's shape already and the rows move on the
  /// backend, as forward's Y); accumulates the weights' gradients.
  void backward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, const Tensor &DY, double AuxGradScale, Tensor &DXn);

  /// Whether the rows move between the tokens and the experts on the
  /// backend (ComputeBackend::permuteRows and the others, and the ep
  /// group's exchanges: TokenDispatcher::toExperts): where the etp group has
  /// no other rank to gather them with.
  bool movesOnBackend() const;

private:
  /// The routed experts with the rows moved on the backend: Y from Xn, the
  /// rows and the experts' outputs (in send order) kept on the backend under
  /// KeepFor (where not null) for routedOnBackendBackward.
  void routedOnBackend(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, const void *KeepFor);
  /// dXn from the routed output's gradient DY, and the routing weights'
  /// gradients DW: on the backend, or through the host's ep and etp
  /// exchanges.
  void routedOnBackendBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW, Tensor &DXn);
  Tensor exchangedExpertsBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW);
  /// Under etp > 1: this rank's dispatched rows -> every etp rank's,
  /// expert-major (the first call of a micro batch fills S.EtpCounts and
  /// S.EtpPaddedRows; later ones, in backward, reuse them).
  Tensor gatherExpertRows(const Tensor &Mine, MoeSaved &S);
  /// The reverse: this rank's rows of the sum over the etp group of
  /// Partial (laid out as gatherExpertRows returns).
  Tensor reduceExpertRows(const Tensor &Partial, const MoeSaved &S);
  /// Where the rows of (etp rank R, local expert L) start in the gathered
  /// layout.
  int64_t gatheredBegin(const MoeSaved &S, int64_t R, int64_t L) const;

  const ModelConfig &Config;
  Communicator &TpCp;
  TokenDispatcher &Dispatcher;
  Communicator &Etp;
};

} // namespace moert

#endif
