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
  /// ([rank * localExperts + expert]); ExpertIn then holds every etp rank's rows,
  /// expert-major (then rank), and G, U, Act this rank's columns of them.
  std::vector<int64_t> EtpCounts;
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
  /// experts' outputs in send order) is kept under that key
  /// (ComputeBackend::keepArrays) until the caller releases it.
  /// Y is written, in its own storage where it has the output's shape
  /// already (so that a hold on it keeps the output on the backend).
  double forward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, bool CountTokens = false,
                 const uint64_t *BalanceKeys = nullptr, const void *KeepFor = nullptr);
  /// Recomputes Act from G and U (selective "moe_act"): on the compute
  /// backend where they are kept there, Act then kept beside them under
  /// KeepFor where it is not null (as forward's KeepFor).
  void recomputeAct(MoeSaved &S, const void *KeepFor = nullptr);
  /// DY [Ns, Hidden] is the gradient of the routed output; AuxGradScale
  /// multiplies the aux loss in the objective. Writes dXn into DXn (in its
  /// own storage where it has Xn's shape already and the rows move on the
  /// backend, as forward's Y); accumulates the weights' gradients.
  void backward(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, const Tensor &DY, double AuxGradScale, Tensor &DXn);

private:
  /// The rows of an etp group's exchanges (etp > 1): how many this rank
  /// brought, how many each rank brought, and the order of the gathered
  /// rows (expert-major, then rank) against the ranks' rows one after the
  /// other.
  struct EtpLayout {
    int64_t Mine = 0;
    std::vector<int64_t> RowsOf, RankMajorRow, ExpertMajorRow;
  };
  /// The routed experts, the rows moved between the tokens and the experts
  /// on the current backend (ComputeBackend::permuteRows and the others,
  /// and the ep and etp groups' exchanges, over their device counterparts
  /// where they have them): Y from Xn, the rows and the experts' outputs (in
  /// send order) kept on the backend under KeepFor (where not null) for
  /// routedExpertsBackward.
  void routedExperts(const MoeWeights &W, const Tensor &Xn, MoeSaved &S, Tensor &Y, const void *KeepFor);
  /// dXn from the routed output's gradient DY, and the routing weights'
  /// gradients DW, the same way.
  void routedExpertsBackward(const MoeWeights &W, MoeSaved &S, const Tensor &DY, std::vector<float> &DW, Tensor &DXn);
  /// The etp group's rows for this micro batch (the first call fills
  /// S.EtpCounts, over the group; later ones reuse them).
  EtpLayout etpLayout(MoeSaved &S) const;
  /// The router's settings for the compute backend (RouterArgs), over
  /// Tokens tokens.
  RouterArgs routerArgs(int64_t Tokens, const MoeWeights &W) const;
  /// Under etp > 1, on the current backend: this rank's expert-major rows
  /// Mine -> every etp rank's, expert-major then rank (S.ExpertIn's
  /// layout), into All's storage.
  void gatherExpertRows(const Tensor &Mine, const EtpLayout &Y, Tensor &All);
  /// The reverse: this rank's rows of the sum over the etp group of Partial
  /// (laid out as gatherExpertRows writes), into Mine's storage.
  void reduceExpertRows(const Tensor &Partial, const EtpLayout &Y, Tensor &Mine);

  const ModelConfig &Config;
  Communicator &TpCp;
  TokenDispatcher &Dispatcher;
  Communicator &Etp;
};

} // namespace moert

#endif
