//===- model/Model.cpp - StageModel: layers, recompute, accounting --------===//
#include "model/Model.h"

#include "model/GatedDeltaNet.h"
#include "model/ModelOps.h"
#include "model/MoeBlock.h"
#include "model/VisionTower.h"
#include "parallel/cp/ContextParallelAttention.h"
#include "parallel/tp/SequenceParallelLinear.h"
#include "parallel/tp/VocabParallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

namespace moert {

namespace {

[[noreturn]] void fail(const std::string &What) {
  std::fprintf(stderr, "moerun: model: %s\n", What.c_str());
  std::abort();
}

/// The parameters of one layer on this rank.
struct LayerParams {
  int64_t Index = 0;
  bool Moe = false;
  Parameter *AttnNorm = nullptr, *Q = nullptr, *K = nullptr, *V = nullptr, *O = nullptr, *MlpNorm = nullptr;
  Parameter *QNorm = nullptr, *KNorm = nullptr; ///< with ModelConfig::QkNorm
  Parameter *OGate = nullptr;                   ///< full attention beside linear layers: [Hidden, Heads*HeadDim]
  bool Linear = false;                          ///< Gated DeltaNet instead of attention
  GdnWeights Gdn;
  /// Multi-head latent attention (Q is the query projection without a q
  /// latent; K and V are unused).
  Parameter *QDown = nullptr, *QDownNorm = nullptr, *QUp = nullptr;
  Parameter *KvDown = nullptr, *KvDownNorm = nullptr, *KvUp = nullptr;
  Parameter *Gate = nullptr, *Up = nullptr, *Down = nullptr; ///< dense MLP
  MoeWeights Routed;
  Parameter *SGate = nullptr, *SUp = nullptr, *SDown = nullptr; ///< shared
  Parameter *SGateW = nullptr;                                  ///< the shared experts' sigmoid gate, [Hidden, 1]
};

/// One layer's saved activations for one micro batch, by module.
struct LayerState {
  Tensor X;                        // layer_input [Ns, H]
  Tensor Xn1, Xn2;                 // layernorm [Ns, H]
  std::vector<float> Rstd1, Rstd2; // layernorm
  Tensor Q, K, V, H;               // attention (Q/K/V after RoPE)
  Tensor QPre, KPre;               // attention: Q/K before the QK-norm
  std::vector<float> RstdQ, RstdK; // attention: its statistics
  // Multi-head latent attention: the latents of this rank's tokens before and
  // after their norms, and the RoPE key before RoPE ([Ns, QkRopeDim]);
  // Q, K, V above are the up-projections (mla_up_proj).
  Tensor Qc, QcN, Ckv, CkvN, KPe;
  std::vector<float> RstdQc, RstdCkv;
  Tensor OGate;                  // attention: the output gate before its sigmoid
  GdnSaved Gdn;                  // attention: a linear layer's Gated DeltaNet
  Tensor AttnOut, Lse;           // core_attn
  Tensor G, U, Act;              // mlp
  MoeSaved Routed;               // moe (Routed.Act: moe_act)
  Tensor SG, SU, SAct;           // shared_experts
  Tensor SOut, SScore;           // shared_experts: the ungated output and its gate per token
  std::set<std::string> Dropped; // modules to recompute
  bool FullDropped = false;

  std::map<std::string, int64_t> bytes() const {
    std::map<std::string, int64_t> B;
    B["layer_input"] = X.bytes();
    B["layernorm"] = Xn1.bytes() + Xn2.bytes() + int64_t((Rstd1.size() + Rstd2.size()) * sizeof(float));
    B["attention"] = Q.bytes() + K.bytes() + V.bytes() + H.bytes() + QPre.bytes() + KPre.bytes() +
                     int64_t((RstdQ.size() + RstdK.size()) * sizeof(float)) + Qc.bytes() + QcN.bytes() + Ckv.bytes() +
                     CkvN.bytes() + KPe.bytes() + int64_t((RstdQc.size() + RstdCkv.size()) * sizeof(float)) +
                     OGate.bytes() + Gdn.bytes();
    B["core_attn"] = AttnOut.bytes() + Lse.bytes();
    B["mlp"] = G.bytes() + U.bytes() + Act.bytes();
    B["moe"] = Routed.moeBytes();
    B["moe_act"] = Routed.actBytes();
    B["shared_experts"] = SG.bytes() + SU.bytes() + SAct.bytes() + SOut.bytes() + SScore.bytes();
    return B;
  }
};

/// One multi-token-prediction block's parameters.
struct MtpParams {
  Parameter *ENorm = nullptr, *HNorm = nullptr, *Proj = nullptr, *FinalNorm = nullptr;
  LayerParams Layer;
};

/// One MTP block's saved activations for one micro batch: the future
/// tokens' embeddings before and after enorm, the incoming hidden states
/// after hnorm (concatenated, [Ns, 2 * Hidden]), the layer, its output before
/// and after the block's final norm, and the softmax of its logits.
struct MtpState {
  std::vector<int32_t> Tokens, Labels;
  Tensor E, Cat;
  std::vector<float> RstdE, RstdH;
  LayerState Layer;
  Tensor Y, Out, Probs, HeadDOut; ///< HeadDOut: as MicroState::HeadDXn
  std::vector<float> RstdOut;
  int64_t bytes() const {
    return E.bytes() + Cat.bytes() + Y.bytes() + Out.bytes() + Probs.bytes() + HeadDOut.bytes() +
           int64_t((RstdE.size() + RstdH.size() + RstdOut.size()) * sizeof(float));
  }
};

/// One in-flight micro batch.
struct MicroState {
  int64_t Sequences = 0, SeqLen = 0;
  std::vector<int32_t> Tokens, Labels;
  std::vector<int64_t> Positions; ///< absolute position of each of the N tokens
  /// Under multimodal RoPE, each of the N tokens' time, row and column
  /// positions (empty: Positions alone).
  MultimodalPositions Multimodal;
  /// With ModelConfig::ForceBalance: a key per token of this rank's SP shard
  /// (its global sample and position), the same under every layout.
  std::vector<uint64_t> TokenKeys;
  std::vector<LayerState> Layers;
  // Loss chunk: final norm input and output, and either the softmax over
  // this rank's vocabulary slice or, where the backend ran the loss head's
  // backward with its forward (ComputeBackend::lossHead), the gradient of the
  // final norm's output.
  Tensor HLast, XnF, Probs, HeadDXn;
  std::vector<float> RstdF;
  std::vector<MtpState> Mtp;
  // Embedding chunk with a vision tower: its activations and output (kept
  // on the backend under &VisionOut from the tower's forward to the last
  // layer's), and the pairs (tower row, SP shard row) of the image
  // placeholders.
  VisionSaved Vision;
  VisionOutput VisionOut;
  RowPairs VisualRows;
  int64_t VisionBytes = 0; ///< charged to "vision" until the backward
  int64_t outputBytes() const {
    int64_t B = HLast.bytes() + XnF.bytes() + Probs.bytes() + HeadDXn.bytes() + int64_t(RstdF.size() * sizeof(float));
    for (const MtpState &S : Mtp)
      B += S.bytes();
    return B;
  }
};

/// T, allocated, held while backend operations write it and later ones
/// read it (HeldArray::Read): the host may read it meanwhile, not write it.
HeldArray keptResult(Tensor &T) { return {T.data(), T.numel(), HeldArray::Read}; }
/// T, allocated, held as the backend's own (HeldArray::BackendOnly): only
/// its operations, and host code that asks for it, read it.
HeldArray onBackend(Tensor &T) { return {T.data(), T.numel(), HeldArray::BackendOnly}; }
/// The same for T, which the backend's operations write wholly before they
/// read it (HeldArray::Unset): its copy starts from nothing.
HeldArray madeOnBackend(Tensor &T) {
  HeldArray H = onBackend(T);
  H.Unset = true;
  return H;
}

/// The key of a stage's output (or input gradient) on the backend from the
/// layer that makes it until the stage returns it, kept under its own
/// address from then on, for the pipeline's send (ComputeBackend::
/// sendActivations) or the next chunk of this rank.
const char StageOutputKey = 0;

} // namespace

struct StageModel::Impl {
  ModelConfig Config;
  StageSpec Stage;
  ParallelContext Groups;
  ModelOptions Options;
  int64_t TpRank = 0, TpSize = 1;
  std::vector<uint64_t> BalanceKeys; ///< balanceKeys()'s, for the call it made them for
  std::vector<std::unique_ptr<Parameter>> Params;
  std::vector<std::unique_ptr<ExpertBias>> Biases;
  bool Training = true;
  Parameter *Embedding = nullptr, *FinalNorm = nullptr, *Output = nullptr;
  std::vector<LayerParams> Layers;
  std::vector<MtpParams> Mtp;
  std::unique_ptr<TokenDispatcher> Dispatcher;
  std::unique_ptr<Communicator> WholeExperts; ///< the etp group when the context has none
  std::unique_ptr<MoeBlock> Moe;
  std::unique_ptr<GatedDeltaNetBlock> Gdn;
  std::unique_ptr<VisionTower> Tower; ///< on the embedding chunk of a vision model
  std::map<int64_t, MicroState> InFlight;
  LossTotals Loss;
  /// A loss head's losses that the backend writes later
  /// (LossHeadArgs::LossesLater), to be added to Loss in the forwards'
  /// order when it is read: the rows of this rank's shard with a label, and
  /// the sum they go to (-1 the decoder's, K the MTP block K's).
  struct CountedLosses {
    std::vector<double> Losses;
    std::vector<int64_t> Rows;
    int64_t Head = -1;
    bool Later = false; ///< written by the backend's lossesRead()
  };
  std::vector<CountedLosses> Uncounted;
  std::map<std::string, int64_t> Current, Peak;
  std::set<std::string> SelectiveModules;

  Impl(const ModelConfig &C, const StageSpec &S, const ParallelContext &G, const ModelOptions &O)
      : Config(C), Stage(S), Groups(G), Options(O) {
    if (!G.Tp || !G.Cp || !G.TpCp || !G.Ep)
      fail("every group of the ParallelContext must be set");
    if (!Groups.Etp) {
      WholeExperts = createSelfCommunicator("etp");
      Groups.Etp = WholeExperts.get();
    }
    TpRank = G.Tp->rank();
    TpSize = G.Tp->size();
    validate();
    static const std::set<std::string> Known = {"core_attn", "layernorm",      "mlp",         "moe_act",
                                                "moe",       "shared_experts", "mla_up_proj", "gdn_norm_out"};
    for (const std::string &M : O.Recompute.Modules) {
      if (!Known.count(M))
        fail("unknown recompute module '" + M + "'");
      SelectiveModules.insert(M);
    }
    build();
  }

  void validate() const {
    const ModelConfig &C = Config;
    if (C.Mla) {
      const ModelConfig::LatentAttention &A = *C.Mla;
      if (C.Hidden <= 0 || C.Heads <= 0 || C.Vocab <= 0 || A.QLoraRank < 0 || A.KvLoraRank <= 0 || A.QkNopeDim < 0 ||
          A.QkRopeDim <= 0 || A.QkRopeDim % 2 || A.VHeadDim <= 0)
        fail("invalid latent attention dimensions");
      if (C.Heads % TpSize)
        fail("Heads must divide by the tp size");
      if (C.QkNorm)
        fail("latent attention has no QK-norm");
    } else {
      if (C.Hidden <= 0 || C.Heads <= 0 || C.KvHeads <= 0 || C.HeadDim <= 0 || C.Vocab <= 0 || C.HeadDim % 2)
        fail("invalid model dimensions");
      if (C.Heads % C.KvHeads)
        fail("Heads must be a multiple of KvHeads");
      if (C.Heads % TpSize || C.KvHeads % TpSize)
        fail("Heads and KvHeads must divide by the tp size");
    }
    if (C.Vocab % TpSize)
      fail("Vocab must divide by the tp size");
    if (C.Linear) {
      const ModelConfig::LinearAttention &L = *C.Linear;
      if (L.Interval <= 0 || L.KeyHeads <= 0 || L.ValueHeads <= 0 || L.HeadDim <= 0 || L.ConvKernel <= 0 ||
          L.ValueHeads % L.KeyHeads || L.KeyHeads % TpSize)
        fail("invalid linear-attention dimensions (value heads a multiple of key heads, key heads of the tp size)");
      if (Groups.Cp->size() > 1)
        fail("Gated DeltaNet runs without context parallelism");
      if (C.Mla)
        fail("linear attention beside latent attention");
    }
    if (C.Experts > 0 && (C.TopK <= 0 || C.TopK > C.Experts || C.MoeFfnHidden <= 0 || C.SharedFfnHidden % TpSize))
      fail("invalid MoE dimensions");
    if (C.FfnHidden % TpSize)
      fail("FfnHidden must divide by the tp size");
    const Communicator &Etp = *Groups.Etp;
    if (Etp.size() > 1 && (Etp.size() != TpSize || Etp.rank() != TpRank))
      fail("expert tensor parallelism runs over the tp group: etp must be 1 or tp");
    if (C.Experts > 0 && C.MoeFfnHidden % Etp.size())
      fail("MoeFfnHidden must divide by the etp size");
    if (Stage.FirstLayer < 0 || Stage.NumLayers < 0 || Stage.FirstLayer + Stage.NumLayers > C.Layers)
      fail("stage layers out of range");
    if (C.Vision && Stage.HasEmbedding &&
        (C.Vision->OutHidden != C.Hidden || int64_t(C.Vision->DeepstackLayers.size()) > Stage.NumLayers))
      fail("the vision tower's output must be the decoder's width, and the embedding chunk must hold a decoder "
           "layer per deepstack feature");
    if (C.MropeSection) {
      const auto &S = *C.MropeSection;
      const int64_t Rotated = C.RotaryDim > 0 ? C.RotaryDim : C.HeadDim;
      if (C.Mla || S[0] < 0 || S[1] < 0 || S[2] < 0 || 2 * (S[0] + S[1] + S[2]) != Rotated)
        fail("multimodal RoPE needs query-key heads (no latent attention) and sections summing to half the "
             "rotated dimensions");
    }
    if (Stage.HasMtp && (!Stage.HasLoss || C.MtpLayers <= 0 || int64_t(Options.MtpCeScale.size()) != C.MtpLayers))
      fail("MTP blocks need the loss chunk, MtpLayers > 0 and a loss scale per block");
  }

  Parameter *addParam(const std::string &Name, ParamKind Kind, std::vector<int64_t> Shape, double Std, int Split) {
    // Split: 0 replicated, 1 row shard over tp, 2 column shard over tp.
    Tensor Full = initParameter(Options.Seed, Name, Shape, Std);
    auto P = std::make_unique<Parameter>();
    P->Name = Name;
    P->Kind = Kind;
    P->Split = Split == 1 ? TpSplit::Rows : Split == 2 ? TpSplit::Cols : TpSplit::None;
    P->Value = Split == 1   ? rowShard(Full, TpRank, TpSize)
               : Split == 2 ? colShard(Full, TpRank, TpSize)
                            : std::move(Full);
    P->Grad = Tensor(P->Value.shape());
    Params.push_back(std::move(P));
    return Params.back().get();
  }

  void build() {
    const ModelConfig &C = Config;
    const double Std = 0.02;
    const ParamKind Dense = ParamKind::Dense, Rep = ParamKind::SequenceParallelReplicated;
    if (Stage.HasEmbedding)
      Embedding = addParam("embedding", Dense, {C.Vocab, C.Hidden}, Std, 1);
    if (Stage.HasEmbedding && C.Vision) {
      Tower = std::make_unique<VisionTower>(*C.Vision, Options.Seed);
      // Every tp rank runs the whole tower and back-propagates its own
      // sequence shard's rows: the gradients are summed over tp too.
      for (Parameter *P : Tower->parameters())
        P->Kind = Rep;
    }
    if (C.Experts > 0) {
      Dispatcher = std::make_unique<TokenDispatcher>(*Groups.Ep, C.Experts, C.TopK, C.Hidden);
      Moe = std::make_unique<MoeBlock>(Config, *Groups.TpCp, *Dispatcher, *Groups.Etp);
    }
    if (C.Linear)
      Gdn = std::make_unique<GatedDeltaNetBlock>(Config, *Groups.Tp);
    for (int64_t L = Stage.FirstLayer; L < Stage.FirstLayer + Stage.NumLayers; ++L)
      Layers.push_back(buildLayer(L, "layers." + std::to_string(L) + "."));
    if (Stage.HasLoss) {
      FinalNorm = addParam("final_norm", Rep, {C.Hidden}, 0.0, 0);
      Output = addParam("output", Dense, {C.Hidden, C.Vocab}, Std, 2);
    }
    if (Stage.HasMtp) {
      if (!Embedding) {
        Embedding = addParam("embedding", Dense, {C.Vocab, C.Hidden}, Std, 1);
        Embedding->TiedCopy = true;
      }
      for (int64_t K = 0; K < C.MtpLayers; ++K) {
        std::string Pre = "mtp." + std::to_string(K) + ".";
        MtpParams M;
        M.ENorm = addParam(Pre + "enorm", Rep, {C.Hidden}, 0.0, 0);
        M.HNorm = addParam(Pre + "hnorm", Rep, {C.Hidden}, 0.0, 0);
        M.Proj = addParam(Pre + "eh_proj", Rep, {2 * C.Hidden, C.Hidden}, Std, 0);
        M.Layer = buildLayer(C.Layers + K, Pre + "layer.");
        M.FinalNorm = addParam(Pre + "final_norm", Rep, {C.Hidden}, 0.0, 0);
        Mtp.push_back(std::move(M));
      }
    }
  }

  /// The parameters of decoder layer L (L >= Layers: an MTP block's), named
  /// from Pre.
  LayerParams buildLayer(int64_t L, const std::string &Pre) {
    const ModelConfig &C = Config;
    const double Std = 0.02;
    // Projections that write into the residual stream start smaller, as in
    // GPT-2/Megatron, so the residual's variance does not grow with depth.
    const double OutStd = 0.02 / std::sqrt(2.0 * double(C.Layers));
    const ParamKind Dense = ParamKind::Dense, Rep = ParamKind::SequenceParallelReplicated;
    LayerParams P;
    P.Index = L;
    P.Moe = C.isMoeLayer(L);
    P.AttnNorm = addParam(Pre + "attn_norm", Rep, {C.Hidden}, 0.0, 0);
    P.Linear = C.isLinearLayer(L);
    if (P.Linear) {
      const ModelConfig::LinearAttention &A = *C.Linear;
      const int64_t Kc = A.KeyHeads * A.HeadDim, Vc = A.ValueHeads * A.HeadDim, Hv = A.ValueHeads;
      GdnWeights &G = P.Gdn;
      G.Q = addParam(Pre + "gdn.q", Dense, {C.Hidden, Kc}, Std, 2);
      G.K = addParam(Pre + "gdn.k", Dense, {C.Hidden, Kc}, Std, 2);
      G.V = addParam(Pre + "gdn.v", Dense, {C.Hidden, Vc}, Std, 2);
      G.Z = addParam(Pre + "gdn.z", Dense, {C.Hidden, Vc}, Std, 2);
      G.B = addParam(Pre + "gdn.b", Dense, {C.Hidden, Hv}, Std, 2);
      G.A = addParam(Pre + "gdn.a", Dense, {C.Hidden, Hv}, Std, 2);
      // The conv, dt_bias and A_log follow their channels and heads over tp
      // (rows); the conv starts at the scale of a width-ConvKernel average.
      const double ConvStd = 1.0 / std::sqrt(double(A.ConvKernel));
      G.ConvQ = addParam(Pre + "gdn.conv_q", Dense, {Kc, A.ConvKernel}, ConvStd, 1);
      G.ConvK = addParam(Pre + "gdn.conv_k", Dense, {Kc, A.ConvKernel}, ConvStd, 1);
      G.ConvV = addParam(Pre + "gdn.conv_v", Dense, {Vc, A.ConvKernel}, ConvStd, 1);
      G.DtBias = addParam(Pre + "gdn.dt_bias", Dense, {Hv, 1}, Std, 1);
      G.ALog = addParam(Pre + "gdn.a_log", Dense, {Hv, 1}, 0.0, 1);
      G.Norm = addParam(Pre + "gdn.norm", Rep, {A.HeadDim}, 0.0, 0);
      G.Out = addParam(Pre + "gdn.out", Dense, {Vc, C.Hidden}, OutStd, 1);
    } else if (C.Mla) {
      // The down-projections and their norms are whole on every tp rank,
      // which runs them on its sequence shard (Megatron-Core's duplicated
      // linear_q_down_proj / linear_kv_down_proj); the up-projections are
      // column-parallel by heads.
      const ModelConfig::LatentAttention &A = *C.Mla;
      if (A.QLoraRank > 0) {
        P.QDown = addParam(Pre + "attn.q_down", Rep, {C.Hidden, A.QLoraRank}, Std, 0);
        P.QDownNorm = addParam(Pre + "attn.q_down_norm", Rep, {A.QLoraRank}, 0.0, 0);
        P.QUp = addParam(Pre + "attn.q_up", Dense, {A.QLoraRank, C.Heads * A.qkDim()}, Std, 2);
      } else {
        P.Q = addParam(Pre + "attn.q", Dense, {C.Hidden, C.Heads * A.qkDim()}, Std, 2);
      }
      P.KvDown = addParam(Pre + "attn.kv_down", Rep, {C.Hidden, A.KvLoraRank + A.QkRopeDim}, Std, 0);
      P.KvDownNorm = addParam(Pre + "attn.kv_down_norm", Rep, {A.KvLoraRank}, 0.0, 0);
      P.KvUp = addParam(Pre + "attn.kv_up", Dense, {A.KvLoraRank, C.Heads * (A.QkNopeDim + A.VHeadDim)}, Std, 2);
      P.O = addParam(Pre + "attn.o", Dense, {C.Heads * A.VHeadDim, C.Hidden}, OutStd, 1);
    } else {
      P.Q = addParam(Pre + "attn.q", Dense, {C.Hidden, C.Heads * C.HeadDim}, Std, 2);
      P.K = addParam(Pre + "attn.k", Dense, {C.Hidden, C.KvHeads * C.HeadDim}, Std, 2);
      P.V = addParam(Pre + "attn.v", Dense, {C.Hidden, C.KvHeads * C.HeadDim}, Std, 2);
      P.O = addParam(Pre + "attn.o", Dense, {C.Heads * C.HeadDim, C.Hidden}, OutStd, 1);
      if (C.Linear)
        P.OGate = addParam(Pre + "attn.gate", Dense, {C.Hidden, C.Heads * C.HeadDim}, Std, 2);
    }
    if (C.QkNorm && !P.Linear) {
      P.QNorm = addParam(Pre + "attn.q_norm", Rep, {C.HeadDim}, 0.0, 0);
      P.KNorm = addParam(Pre + "attn.k_norm", Rep, {C.HeadDim}, 0.0, 0);
    }
    P.MlpNorm = addParam(Pre + "mlp_norm", Rep, {C.Hidden}, 0.0, 0);
    if (!P.Moe) {
      P.Gate = addParam(Pre + "mlp.gate", Dense, {C.Hidden, C.FfnHidden}, Std, 2);
      P.Up = addParam(Pre + "mlp.up", Dense, {C.Hidden, C.FfnHidden}, Std, 2);
      P.Down = addParam(Pre + "mlp.down", Dense, {C.FfnHidden, C.Hidden}, OutStd, 1);
    } else {
      P.Routed.Router = addParam(Pre + "router", Rep, {C.Hidden, C.Experts}, Std, 0);
      if (C.ExpertBias) {
        // Megatron-Core starts the bias at zero (router.py register_buffer).
        auto B = std::make_unique<ExpertBias>();
        B->State.Name = Pre + "router.expert_bias";
        B->State.Kind = Rep;
        B->State.Value = Tensor({C.Experts});
        B->Tokens.assign(size_t(C.Experts), 0.0f);
        P.Routed.Bias = B.get();
        Biases.push_back(std::move(B));
      }
      // Under etp = tp the experts are split as the dense MLP is.
      bool Split = Groups.Etp->size() > 1;
      for (int64_t E = 0; E < Dispatcher->localExperts(); ++E) {
        std::string EP = Pre + "experts." + std::to_string(Dispatcher->globalExpert(E)) + ".";
        ParamKind X = ParamKind::Expert;
        P.Routed.Gate.push_back(addParam(EP + "gate", X, {C.Hidden, C.MoeFfnHidden}, Std, Split ? 2 : 0));
        P.Routed.Up.push_back(addParam(EP + "up", X, {C.Hidden, C.MoeFfnHidden}, Std, Split ? 2 : 0));
        P.Routed.Down.push_back(addParam(EP + "down", X, {C.MoeFfnHidden, C.Hidden}, OutStd, Split ? 1 : 0));
      }
      if (C.SharedFfnHidden > 0) {
        int64_t SF = C.SharedFfnHidden;
        P.SGate = addParam(Pre + "shared.gate", Dense, {C.Hidden, SF}, Std, 2);
        P.SUp = addParam(Pre + "shared.up", Dense, {C.Hidden, SF}, Std, 2);
        P.SDown = addParam(Pre + "shared.down", Dense, {SF, C.Hidden}, OutStd, 1);
        if (C.SharedExpertGate)
          P.SGateW = addParam(Pre + "shared.gate_weight", Rep, {C.Hidden, 1}, Std, 0);
      }
    }
    return P;
  }

  // ---- activation accounting ------------------------------------------
  void charge(const std::map<std::string, int64_t> &Bytes, int Sign) {
    for (const auto &[Module, B] : Bytes) {
      Current[Module] += Sign * B;
      Current["total"] += Sign * B;
    }
    for (const auto &[Module, B] : Current)
      Peak[Module] = std::max(Peak[Module], B);
  }
  static std::map<std::string, int64_t> minus(std::map<std::string, int64_t> A,
                                              const std::map<std::string, int64_t> &B) {
    for (const auto &[K, V] : B)
      A[K] -= V;
    return A;
  }

  // ---- layer pieces (each recomputable from what precedes it) ----------
  AttentionDims attentionDims(const MicroState &M) const {
    AttentionDims D;
    D.Batch = M.Sequences;
    D.SeqLen = M.SeqLen;
    D.QHeads = Config.Heads / TpSize;
    D.KvHeads = Config.KvHeads / TpSize;
    D.HeadDim = Config.HeadDim;
    if (Config.Mla) {
      D.KvHeads = D.QHeads;
      D.HeadDim = Config.Mla->qkDim();
      D.VHeadDim = Config.Mla->VHeadDim;
    }
    return D;
  }

  /// Runs Norm, which writes a norm's statistics (a float a row) into
  /// Rstd, sized Rows first: where Key is not null, the backend makes them
  /// in fp32 and keeps them under Key for the norm's backward, their only
  /// reader, so that they never come back to the host (a copy back waits
  /// for all the work queued on the device).
  template <typename Fn> void withStatistics(std::vector<float> &Rstd, int64_t Rows, const void *Key, Fn Norm) {
    Rstd.resize(size_t(Rows));
    std::vector<HeldArray> Stats;
    if (Key && Rows > 0)
      Stats.push_back(HeldArray::wide(Rstd.data(), Rows));
    HeldArrays Hold(compute(), Stats);
    Norm();
    if (!Stats.empty())
      compute().keepArrays(Key, Stats);
  }
  /// A norm's statistics that a recompute policy drops, with their kept
  /// copy.
  void dropStatistics(LayerState &S, std::vector<float> &Rstd) {
    compute().releaseKept(&S, Rstd.data());
    Rstd.clear();
  }

  void attnNorm(const LayerParams &P, const MicroState &M, LayerState &S) {
    withStatistics(S.Rstd1, S.X.rows(), keepKey(M, S),
                   [&] { rmsNormForward(S.X, P.AttnNorm->Value, Config.RmsNormEps, S.Rstd1, S.Xn1); });
  }
  /// RMSNorm of each HeadDim-wide head of X [N, Heads * HeadDim] (the rows
  /// of a [N * Heads, HeadDim] view).
  /// RMSNorm over each head of X into Y (the QK-norm), its storage kept
  /// where it has X's shape already (held on the backend).
  void headNorm(const Tensor &X, const Parameter &W, std::vector<float> &Rstd, Tensor &Y, const void *Key) {
    const int64_t Rows = X.numel() / Config.HeadDim;
    Y.ensureShape(X.shape());
    withStatistics(Rstd, Rows, Key, [&] {
      compute().rmsNormForward(Rows, Config.HeadDim, X.data(), W.Value.data(), Config.RmsNormEps, Y.data(),
                               Rstd.data());
    });
  }
  /// Its backward into DX, shaped likewise.
  void headNormBackward(const Tensor &X, Parameter &W, const std::vector<float> &Rstd, const Tensor &DY,
                        Tensor &DX) const {
    DX.ensureShape(X.shape());
    compute().rmsNormBackward(X.numel() / Config.HeadDim, Config.HeadDim, X.data(), W.Value.data(), Rstd.data(),
                              DY.data(), DX.data(), W.Grad.data());
  }

  /// Columns [From, From + Cols) of every row of Src into columns [To, To +
  /// Cols) of Dst (ComputeBackend::copyColumns).
  void copyColumnRange(const Tensor &Src, int64_t From, int64_t Cols, Tensor &Dst, int64_t To) const {
    compute().copyColumns({Src.rows(), 1, Cols, Src.cols(), 0, Dst.cols(), 0}, Src.data() + From, Dst.data() + To);
  }
  /// The same for each of Heads blocks: head h's columns [From, From +
  /// Cols) of its SrcWidth in Src (all heads' the same where SrcWidth is 0,
  /// and into one block, summed in head order, where DstWidth is 0).
  void copyHeadColumns(int64_t Heads, const Tensor &Src, int64_t SrcWidth, int64_t From, int64_t Cols, Tensor &Dst,
                       int64_t DstWidth, int64_t To) const {
    compute().copyColumns({Src.rows(), Heads, Cols, Src.cols(), SrcWidth, Dst.cols(), DstWidth, DstWidth == 0},
                          Src.data() + From, Dst.data() + To);
  }
  /// Latent attention's activations made ready for qkv() before a hold
  /// covers them: the latents of this rank's tokens and its RoPE key
  /// (mlaDown), and the heads' queries, keys and values over the tp group's
  /// tokens (mlaUp). Only the backend's operations read them (the split and
  /// assembly of columns included), so where they are kept for the backward
  /// their values stay there.
  std::vector<HeldArray> heldLatents(const LayerParams &P, const MicroState &M, LayerState &S) {
    const ModelConfig::LatentAttention &A = *Config.Mla;
    const int64_t Ns = S.Xn1.rows();
    std::vector<Tensor *> Made = {&S.Ckv, &S.CkvN, &S.KPe};
    S.Ckv.ensureShape({Ns, A.KvLoraRank});
    S.CkvN.ensureShape({Ns, A.KvLoraRank});
    S.KPe.ensureShape({Ns, A.QkRopeDim});
    if (P.QDown) {
      S.Qc.ensureShape({Ns, A.QLoraRank});
      S.QcN.ensureShape({Ns, A.QLoraRank});
      Made.insert(Made.end(), {&S.Qc, &S.QcN});
    }
    latentProjections(S);
    Made.insert(Made.end(), {&S.Q, &S.K, &S.V});
    const bool Kept = keepKey(M, S) != nullptr;
    std::vector<HeldArray> Held;
    for (Tensor *T : Made)
      Held.push_back(Kept ? madeOnBackend(*T) : keptResult(*T));
    return Held;
  }
  /// The heads' queries, keys and values over the tp group's tokens.
  void latentProjections(LayerState &S) const {
    const ModelConfig::LatentAttention &A = *Config.Mla;
    const int64_t N = S.Xn1.rows() * TpSize, Heads = Config.Heads / TpSize;
    S.Q.ensureShape({N, Heads * A.qkDim()});
    S.K.ensureShape({N, Heads * A.qkDim()});
    S.V.ensureShape({N, Heads * A.VHeadDim});
  }

  /// Latent attention, first half: the latents of this rank's tokens, and
  /// its RoPE key, the down-projection's last columns. The latents' norms
  /// keep their statistics where they are made, for their backward.
  void mlaDown(const LayerParams &P, const MicroState &M, LayerState &S) {
    const ModelConfig::LatentAttention &A = *Config.Mla;
    const int64_t Rows = S.Xn1.rows();
    if (P.QDown) {
      matmul(S.Xn1, P.QDown->Value, S.Qc);
      withStatistics(S.RstdQc, Rows, keepKey(M, S),
                     [&] { rmsNormForward(S.Qc, P.QDownNorm->Value, Config.RmsNormEps, S.RstdQc, S.QcN); });
    }
    Tensor KvC({Rows, A.KvLoraRank + A.QkRopeDim});
    HeldArrays Hold(compute(), {madeOnBackend(KvC)});
    matmul(S.Xn1, P.KvDown->Value, KvC);
    copyColumnRange(KvC, 0, A.KvLoraRank, S.Ckv, 0);
    copyColumnRange(KvC, A.KvLoraRank, A.QkRopeDim, S.KPe, 0);
    withStatistics(S.RstdCkv, Rows, keepKey(M, S),
                   [&] { rmsNormForward(S.Ckv, P.KvDownNorm->Value, Config.RmsNormEps, S.RstdCkv, S.CkvN); });
  }
  /// Latent attention, second half (mla_up_proj): per-head Q, K and V of
  /// every token of the tp group from the latents, RoPE applied (to each
  /// head's copy of the shared RoPE key: the same operation on the same
  /// values as rotating it once).
  void mlaUp(const LayerParams &P, const MicroState &M, LayerState &S) {
    const ModelConfig::LatentAttention &A = *Config.Mla;
    Communicator &Tp = *Groups.Tp;
    const int64_t Qk = A.qkDim(), KvW = A.QkNopeDim + A.VHeadDim, Heads = Config.Heads / TpSize;
    latentProjections(S);
    if (P.QUp)
      columnParallelForward(Tp, S.QcN, {&P.QUp->Value}, {&S.Q});
    else
      columnParallelForward(Tp, S.Xn1, {&P.Q->Value}, {&S.Q});
    applyInterleavedRope(S.Q, Qk, A.QkNopeDim, A.QkRopeDim, M.Positions, Config.RopeTheta, false);
    Tensor KvU({S.K.rows(), Heads * KvW}), KPe;
    std::vector<HeldArray> Temporaries = {madeOnBackend(KvU)};
    if (Tp.size() > 1) {
      KPe = Tensor({S.K.rows(), A.QkRopeDim});
      Temporaries.push_back(madeOnBackend(KPe));
    }
    HeldArrays Hold(compute(), Temporaries);
    columnParallelForward(Tp, S.CkvN, {&P.KvUp->Value}, {&KvU});
    if (Tp.size() > 1)
      compute().gatherActivations(S.KPe.data(), KPe.data(), S.KPe.numel(), Tp);
    copyHeadColumns(Heads, KvU, KvW, 0, A.QkNopeDim, S.K, Qk, 0);
    copyHeadColumns(Heads, Tp.size() > 1 ? KPe : S.KPe, 0, 0, A.QkRopeDim, S.K, Qk, A.QkNopeDim);
    copyHeadColumns(Heads, KvU, KvW, A.QkNopeDim, A.VHeadDim, S.V, A.VHeadDim, 0);
    applyInterleavedRope(S.K, Qk, A.QkNopeDim, A.QkRopeDim, M.Positions, Config.RopeTheta, false);
  }
  /// Backward of mlaDown and mlaUp from the attention's input gradients
  /// (DQ rotated back in place) into DXn1 (this rank's tokens, its storage
  /// kept where it has their shape).
  void mlaBackward(const LayerParams &P, const MicroState &M, LayerState &S, Tensor &DQ, const Tensor &DK,
                   const Tensor &DV, Tensor &DXn1) {
    const ModelConfig::LatentAttention &A = *Config.Mla;
    Communicator &Tp = *Groups.Tp;
    const int64_t Qk = A.qkDim(), KvW = A.QkNopeDim + A.VHeadDim, Heads = Config.Heads / TpSize;
    const int64_t N = DK.rows(), Ns = S.Ckv.rows();
    applyInterleavedRope(DQ, Qk, A.QkNopeDim, A.QkRopeDim, M.Positions, Config.RopeTheta, true);
    // What passes between the products stays on the backend: the
    // up-projection's output gradient and the latents', and the RoPE key's
    // gradient, summed over the heads (and then over tp) in fp32.
    Tensor DKvU({N, Heads * KvW}), DKPe({N, A.QkRopeDim}), DKPeLocal, DCkvN({Ns, A.KvLoraRank}),
        DCkv({Ns, A.KvLoraRank}), DKvC({Ns, A.KvLoraRank + A.QkRopeDim});
    std::vector<HeldArray> Temporaries = {madeOnBackend(DKvU), HeldArray::wide(DKPe.data(), DKPe.numel()),
                                          HeldArray::wide(DCkvN.data(), DCkvN.numel()), madeOnBackend(DCkv),
                                          madeOnBackend(DKvC)};
    if (Tp.size() > 1) {
      DKPeLocal = Tensor({Ns, A.QkRopeDim});
      Temporaries.push_back(HeldArray::wide(DKPeLocal.data(), DKPeLocal.numel()));
    }
    HeldArrays Hold(compute(), Temporaries);
    compute().zero(DKPe.data(), DKPe.numel());
    copyHeadColumns(Heads, DK, Qk, 0, A.QkNopeDim, DKvU, KvW, 0);
    copyHeadColumns(Heads, DV, A.VHeadDim, 0, A.VHeadDim, DKvU, KvW, A.QkNopeDim);
    copyHeadColumns(Heads, DK, Qk, A.QkNopeDim, A.QkRopeDim, DKPe, 0, 0);
    applyInterleavedRope(DKPe, A.QkRopeDim, 0, A.QkRopeDim, M.Positions, Config.RopeTheta, true);
    // Every tp rank's heads read every token's RoPE key: sum, then keep this
    // rank's tokens.
    if (Tp.size() > 1)
      reduceScatterSequence(Tp, DKPe, DKPeLocal);
    columnParallelBackward(Tp, S.CkvN, nullptr, {&P.KvUp->Value}, {&DKvU}, {&P.KvUp->Grad}, DCkvN);
    rmsNormBackward(S.Ckv, P.KvDownNorm->Value, S.RstdCkv, DCkvN, P.KvDownNorm->Grad, DCkv);
    copyColumnRange(DCkv, 0, A.KvLoraRank, DKvC, 0);
    copyColumnRange(Tp.size() > 1 ? DKPeLocal : DKPe, 0, A.QkRopeDim, DKvC, A.KvLoraRank);
    if (P.QUp) {
      Tensor DQcN({Ns, A.QLoraRank}), DQc({Ns, A.QLoraRank});
      HeldArrays HoldQ(compute(), {HeldArray::wide(DQcN.data(), DQcN.numel()), madeOnBackend(DQc)});
      columnParallelBackward(Tp, S.QcN, nullptr, {&P.QUp->Value}, {&DQ}, {&P.QUp->Grad}, DQcN);
      rmsNormBackward(S.Qc, P.QDownNorm->Value, S.RstdQc, DQcN, P.QDownNorm->Grad, DQc);
      matmulBackward(S.Xn1, P.QDown->Value, DQc, P.QDown->Grad, DXn1);
    } else {
      columnParallelBackward(Tp, S.Xn1, nullptr, {&P.Q->Value}, {&DQ}, {&P.Q->Grad}, DXn1);
    }
    matmulBackward(S.Xn1, P.KvDown->Value, DKvC, P.KvDown->Grad, DXn1, 1.0f);
  }

  void qkv(const LayerParams &P, const MicroState &M, LayerState &S) {
    if (Config.Mla) {
      mlaDown(P, M, S);
      mlaUp(P, M, S);
      return;
    }
    columnParallelForward(*Groups.Tp, S.Xn1, projectionWeights(P), projections(P, S));
    if (P.QNorm) {
      headNorm(S.QPre, *P.QNorm, S.RstdQ, S.Q, keepKey(M, S));
      headNorm(S.KPre, *P.KNorm, S.RstdK, S.K, keepKey(M, S));
    }
    rope(S.Q, M, false);
    rope(S.K, M, false);
  }
  /// The query, key and value projections' weights, and the output gate's
  /// where the layer has one.
  static std::vector<const Tensor *> projectionWeights(const LayerParams &P) {
    std::vector<const Tensor *> Ws = {&P.Q->Value, &P.K->Value, &P.V->Value};
    if (P.OGate)
      Ws.push_back(&P.OGate->Value);
    return Ws;
  }
  /// Where they land: the queries and keys before their head norms where
  /// the layer has them.
  static std::vector<Tensor *> projections(const LayerParams &P, LayerState &S) {
    std::vector<Tensor *> Ys = {P.QNorm ? &S.QPre : &S.Q, P.QNorm ? &S.KPre : &S.K, &S.V};
    if (P.OGate)
      Ys.push_back(&S.OGate);
    return Ys;
  }
  /// The projections made ready for qkv() (as its products' shapes), and
  /// the head norms' outputs where the layer has them, held from their
  /// making to the attention (and output gate) that reads them (the backend
  /// keeps its copies of them; RoPE rotates the copy). Only the backend
  /// reads them (and a ring's sends, which ask), so their values stay there.
  std::vector<HeldArray> heldProjections(const LayerParams &P, const MicroState &M, LayerState &S) {
    const int64_t Rows = S.Xn1.rows() * Groups.Tp->size();
    const std::vector<const Tensor *> Ws = projectionWeights(P);
    const std::vector<Tensor *> Ys = projections(P, S);
    for (size_t I = 0; I < Ys.size(); ++I)
      *Ys[I] = Tensor({Rows, Ws[I]->cols()});
    std::vector<Tensor *> Held = Ys;
    if (P.QNorm) {
      S.Q = Tensor(S.QPre.shape());
      S.K = Tensor(S.KPre.shape());
      Held.push_back(&S.Q);
      Held.push_back(&S.K);
    }
    // The backward reads them from the backend only where they are kept
    // (not in an MTP block's layer).
    const bool Kept = keepKey(M, S) != nullptr;
    std::vector<HeldArray> Arrays;
    for (Tensor *T : Held)
      Arrays.push_back(Kept ? onBackend(*T) : keptResult(*T));
    return Arrays;
  }
  /// Rotates queries or keys (or, Inverse, their gradients) of micro batch
  /// M: by each token's time, row and column positions under multimodal
  /// RoPE, else by its place in the sequence.
  void rope(Tensor &X, const MicroState &M, bool Inverse) const {
    if (Config.MropeSection && !M.Multimodal.Axes[0].empty())
      applyMultimodalRope(X, Config.HeadDim, M.Multimodal, Config.RopeTheta, *Config.MropeSection, Inverse,
                          Config.RotaryDim);
    else
      applyRope(X, Config.HeadDim, M.Positions, Config.RopeTheta, Inverse, Config.RotaryDim);
  }

  /// Where attention writes its output and log-sum-exp, allocated once
  /// (before a hold covers them, in the forward; by the recompute that
  /// remakes them).
  void attentionOutput(const MicroState &M, LayerState &S, int64_t Rows) {
    AttentionDims D = attentionDims(M);
    if (!S.AttnOut.numel())
      S.AttnOut = Tensor({Rows, D.QHeads * D.vHeadDim()});
    else if (S.AttnOut.rows() != Rows || S.AttnOut.cols() != D.QHeads * D.vHeadDim())
      throw std::logic_error("attention's output was allocated for another shape");
    S.Lse = Tensor({D.Batch, D.QHeads, M.SeqLen / Groups.Cp->size()});
  }
  /// The log-sum-exp's hold where it stays on the backend from attention's
  /// forward to its backward, its only readers.
  std::optional<HeldArray> heldStatistics(const MicroState &M, LayerState &S) const {
    if (!keepKey(M, S) || !statisticsOnBackend(*Groups.Cp, attentionDims(M), Groups.CpKind))
      return std::nullopt;
    return HeldArray::wide(S.Lse.data(), S.Lse.numel());
  }
  /// Attention's output and log-sum-exp, held while attention writes them:
  /// the output the backend's alone where it is kept for the backward, else
  /// the host's too; the log-sum-exp as heldStatistics says.
  std::vector<HeldArray> heldAttentionOutput(const MicroState &M, LayerState &S) const {
    std::vector<HeldArray> Held = {keepKey(M, S) ? onBackend(S.AttnOut) : keptResult(S.AttnOut)};
    if (std::optional<HeldArray> Statistics = heldStatistics(M, S))
      Held.push_back(*Statistics);
    return Held;
  }
  /// Attention under heldAttentionOutput's hold; the log-sum-exp kept for
  /// the backward where it is held.
  void coreAttn(const MicroState &M, LayerState &S) {
    contextParallelAttentionForward(*Groups.Cp, attentionDims(M), S.Q.data(), S.K.data(), S.V.data(), S.AttnOut.data(),
                                    S.Lse.data(), Groups.CpKind);
    if (std::optional<HeldArray> Statistics = heldStatistics(M, S))
      compute().keepArrays(keepKey(M, S), {*Statistics});
  }
  void mlpNorm(const LayerParams &P, const MicroState &M, LayerState &S) {
    withStatistics(S.Rstd2, S.H.rows(), keepKey(M, S),
                   [&] { rmsNormForward(S.H, P.MlpNorm->Value, Config.RmsNormEps, S.Rstd2, S.Xn2); });
  }
  /// The dense MLP or the shared experts; writes the output shard to Y
  /// unless it is null (a recompute wants only the products).
  void denseMlp(const LayerParams &P, LayerState &S, Tensor *Y, const void *KeepFor) {
    parallelMlpForward(*Groups.Tp, S.Xn2, {&P.Gate->Value, &P.Up->Value, &P.Down->Value}, S.G, S.U, S.Act, Y, KeepFor);
  }
  void sharedExperts(const LayerParams &P, LayerState &S, Tensor *Y, const void *KeepFor) {
    parallelMlpForward(*Groups.Tp, S.Xn2, {&P.SGate->Value, &P.SUp->Value, &P.SDown->Value}, S.SG, S.SU, S.SAct, Y,
                       KeepFor);
  }
  /// An output of a branch (or its input's gradient), on the backend where
  /// the residual stream is and the backend makes it there (HeldArray::Wide,
  /// in Y's storage; else Y is left empty, to be written on the host).
  std::vector<HeldArray> branchOutput(Tensor &Y, const LayerState &S, bool OnBackend) {
    if (!OnBackend)
      return {};
    Y = Tensor({S.H.rows(), S.H.cols()});
    return {residual(Y)};
  }

  /// The attention output the out-projection reads: gated by sigmoid(OGate)
  /// into Gated where the layer has the output gate, else itself.
  const Tensor &gatedAttention(const LayerState &S, Tensor &Gated) const {
    if (!S.OGate.numel())
      return S.AttnOut;
    Gated.ensureShape(S.AttnOut.shape());
    const int64_t Count = Gated.numel();
    onBackendElseHost(
        compute(), {readsOf(S.AttnOut), readsOf(S.OGate)}, {writesOf(Gated)},
        [&] { return compute().sigmoidGateForward(Count, S.AttnOut.data(), S.OGate.data(), Gated.data()); },
        [&] { sigmoidGateForward(Count, S.AttnOut.data(), S.OGate.data(), Gated.data()); });
    return Gated;
  }
  /// Where gatedAttention() writes, made before it: the backend's alone
  /// (only the out-projection's products read it).
  std::vector<HeldArray> heldGatedAttention(const LayerParams &P, const LayerState &S, Tensor &Gated) const {
    if (!P.OGate)
      return {};
    Gated = Tensor(S.AttnOut.shape());
    return {madeOnBackend(Gated)};
  }

  /// The keys forced routing draws layer P's logits from (null without
  /// ModelConfig::ForceBalance): the token's, salted by the seed and layer.
  const uint64_t *balanceKeys(const LayerParams &P, const MicroState &M) {
    if (!Config.ForceBalance)
      return nullptr;
    uint64_t Salt = mix64(Options.Seed * 0x100000001b3ull + uint64_t(P.Index));
    BalanceKeys.resize(M.TokenKeys.size());
    for (size_t I = 0; I < BalanceKeys.size(); ++I)
      BalanceKeys[I] = M.TokenKeys[I] ^ Salt;
    return BalanceKeys.data();
  }

  /// The whole layer; fills every saved activation and the layer's aux
  /// loss, and the layer's output into Out where Out is not null (a
  /// recompute wants only the saved activations). Where OutputKey is not
  /// null the output stays on the backend, kept under that key (the next
  /// decoder layer's, whose input it is).
  void layerForward(const LayerParams &P, const MicroState &M, LayerState &S, double &Aux, bool Count, Tensor *Out,
                    const void *OutputKey = nullptr) {
    // The residual stream stays on the backend (in fp32, so that its adds
    // are the host's) in a decoder layer, whose saved activations are kept
    // there until its backward: the branch sums H, and the output where the
    // next layer reads it.
    const bool ResidualOnBackend = keepKey(M, S) != nullptr;
    S.H = Tensor({S.X.rows(), S.X.cols()});
    HeldArrays KeepSum(compute(), ResidualOnBackend ? std::vector{residual(S.H)} : std::vector<HeldArray>());
    // Each branch's normalised input is written by the backend alone and
    // read by every product of the branch: held while the branch runs, it
    // moves to the backend once, as the norm's result. The branch's input
    // (the residual stream) moves once too, for the norm's forward and
    // backward, where it is not there already.
    S.Xn1 = Tensor({S.X.rows(), S.X.cols()});
    {
      HeldArrays Keep(compute(), {normalised(M, S, S.Xn1, true), keptResult(S.X)});
      attnNorm(P, M, S);
      if (P.Linear) {
        // The mixer's output, added to the residual stream where it is.
        Tensor Y;
        HeldArrays KeepOutput(compute(), branchOutput(Y, S, ResidualOnBackend && tpOnBackend()));
        Gdn->forward(P.Gdn, S.Xn1, M.Sequences, S.Gdn, Y, keepKey(M, S));
        residualAdd(S.X, Y, S.H);
      } else {
        // Attention's output, read by the out-projection here and by its
        // weight gradient and Delta in the backward: one copy, made by
        // attention where its kernel writes the whole of it, kept, and the
        // backend's alone (but where the output gate reads it on the host).
        attentionOutput(M, S, S.Xn1.rows() * Groups.Tp->size());
        HeldArrays KeepOutput(compute(), heldAttentionOutput(M, S));
        {
          HeldArrays KeepProjections(compute(), Config.Mla ? heldLatents(P, M, S) : heldProjections(P, M, S));
          qkv(P, M, S);
          coreAttn(M, S);
          keepForBackward(M, S, {&S.Q, &S.K, &S.V});
          if (P.QNorm)
            keepForBackward(M, S, {&S.QPre, &S.KPre});
          if (P.OGate)
            keepForBackward(M, S, {&S.OGate});
          if (Config.Mla)
            keepForBackward(M, S, {&S.Ckv, &S.CkvN, &S.KPe});
          if (P.QDown)
            keepForBackward(M, S, {&S.Qc, &S.QcN});
        }
        Tensor Gated;
        HeldArrays KeepGated(compute(), heldGatedAttention(P, S, Gated));
        addProjection(gatedAttention(S, Gated), P.O->Value, S.X, S.H, ResidualOnBackend);
        keepForBackward(M, S, {&S.AttnOut});
      }
      keepForBackward(M, S, {&S.Xn1, &S.X});
    }
    S.Xn2 = Tensor({S.H.rows(), S.H.cols()});
    HeldArrays Keep(compute(), {normalised(M, S, S.Xn2, true), keptResult(S.H)});
    mlpNorm(P, M, S);
    Aux = 0;
    // The MLPs' products stay on the backend for the backward, as the
    // normalised inputs do, and their outputs for the residual add where
    // no host code combines them (a tp reduce-scatter, an ep combine, the
    // shared experts' gate).
    const void *KeepFor = keepKey(M, S);
    Tensor Y;
    HeldArrays KeepOutput(compute(), branchOutput(Y, S, ResidualOnBackend && (P.Moe || tpOnBackend())));
    if (!P.Moe) {
      denseMlp(P, S, &Y, KeepFor);
    } else {
      Aux = Moe->forward(P.Routed, S.Xn2, S.Routed, Y, Count, balanceKeys(P, M), KeepFor);
      if (P.SGate) {
        Tensor Shared;
        HeldArrays KeepShared(compute(), branchOutput(Shared, S, ResidualOnBackend && tpOnBackend() && !P.SGateW));
        sharedExperts(P, S, &Shared, KeepFor);
        if (P.SGateW) {
          S.SOut = Shared;
          S.SScore = matmul(S.Xn2, P.SGateW->Value);
          for (int64_t I = 0; I < Shared.rows(); ++I) {
            float &Score = S.SScore[I];
            Score = float(1.0 / (1.0 + std::exp(-double(Score))));
            for (int64_t C = 0; C < Shared.cols(); ++C)
              Shared.row(I)[C] *= Score;
          }
        }
        residualAdd(Y, Shared, Y);
      }
    }
    keepForBackward(M, S, {&S.Xn2, &S.H});
    if (Out)
      *Out = residualOutput(Y, S.H, OutputKey);
  }

  /// A residual stream's array on the backend (HeldArray::Wide).
  static HeldArray residual(Tensor &T) { return HeldArray::wide(T.data(), T.numel()); }
  /// A + B, a layer's output (or its input gradient): kept on the backend
  /// under OutputKey where it is not null.
  Tensor residualOutput(const Tensor &A, const Tensor &B, const void *OutputKey) {
    Tensor Sum(A.shape());
    HeldArrays Keep(compute(), OutputKey ? std::vector{residual(Sum)} : std::vector<HeldArray>());
    residualAdd(A, B, Sum);
    if (OutputKey)
      compute().keepArrays(OutputKey, {residual(Sum)});
    return Sum;
  }
  /// The layer's input gradient: the residual stream's DH plus the attention
  /// norm's backward from DXn1, which joins it on the backend where the
  /// stream is.
  Tensor inputGradient(const LayerParams &P, const MicroState &M, LayerState &S, const Tensor &DH, const Tensor &DXn1,
                       const void *OutputKey) {
    Tensor DNorm(DH.shape());
    HeldArrays Keep(compute(), keepKey(M, S) ? std::vector{residual(DNorm)} : std::vector<HeldArray>());
    rmsNormBackward(S.X, P.AttnNorm->Value, S.Rstd1, DXn1, P.AttnNorm->Grad, DNorm);
    return residualOutput(DH, DNorm, OutputKey);
  }
  /// Sum = A + B, where the backend keeps whichever of them it holds.
  void residualAdd(const Tensor &A, const Tensor &B, Tensor &Sum) {
    if (A.shape() != B.shape() || Sum.shape() != A.shape())
      fail("residual add of tensors of different shapes");
    compute().add(Sum.numel(), A.data(), B.data(), Sum.data());
  }
  /// Sum = Residual + In W, the out-projection's output added to the
  /// residual stream: on the backend alone where it keeps the stream and no
  /// tensor-parallel reduce-scatter reads the product on the host.
  void addProjection(const Tensor &In, const Tensor &W, const Tensor &Residual, Tensor &Sum, bool OnBackend) {
    if (!OnBackend || !tpOnBackend()) {
      residualAdd(Residual, rowParallelForward(*Groups.Tp, In, W), Sum);
      return;
    }
    Tensor Projected({Residual.rows(), W.cols()});
    HeldArrays Keep(compute(), {residual(Projected)});
    rowParallelForward(*Groups.Tp, In, W, Projected);
    residualAdd(Residual, Projected, Sum);
  }
  /// Whether tensor parallelism's exchanges run where the backend computes:
  /// on a group of one, or over the group's device counterpart, so that
  /// what they sum may stay there as the residual stream does.
  bool tpOnBackend() const { return TpSize == 1 || Groups.Tp->device(); }

  /// A branch's normalised input, held from its RMSNorm through the
  /// branch: the backend's alone (HeldArray::BackendOnly) where it is kept
  /// for the backward and ProductsAlone (only products and gathers, which
  /// ask for it, read it), else copied to the host too.
  HeldArray normalised(const MicroState &M, const LayerState &S, Tensor &Xn, bool ProductsAlone) const {
    return ProductsAlone && keepKey(M, S) ? onBackend(Xn) : keptResult(Xn);
  }

  /// Saved activations of a decoder layer whose copies a hold made in its
  /// forward stay on the backend until the layer's backward (or discard())
  /// reads them: their backward readers take them from the device. What a
  /// recompute policy drops is released with it (dropSaved) and kept again
  /// when the recompute remakes it.
  void keepForBackward(const MicroState &M, LayerState &S, std::initializer_list<Tensor *> Saved) {
    const void *Key = keepKey(M, S);
    if (!Key)
      return;
    std::vector<HeldArray> Kept;
    for (Tensor *T : Saved)
      Kept.push_back(keptResult(*T));
    compute().keepArrays(Key, Kept);
  }
  /// The key a decoder layer's saved activations are kept under
  /// (keepForBackward), or null where they are not kept.
  const void *keepKey(const MicroState &M, const LayerState &S) const {
    const bool Decoder = &S >= M.Layers.data() && &S < M.Layers.data() + M.Layers.size();
    const bool MtpLayer = std::any_of(M.Mtp.begin(), M.Mtp.end(), [&](const MtpState &B) { return &B.Layer == &S; });
    return Decoder || MtpLayer ? &S : nullptr;
  }
  /// A stage's input or output gradient from the pipeline, which a backend
  /// may keep under its address (ComputeBackend::receiveActivations): now
  /// kept under Reader, or brought to the host where host code reads it.
  void takeReceived(Tensor &T, const void *Reader) {
    if (Reader) {
      compute().passKept(T.data(), Reader);
      return;
    }
    compute().hostReads(T.data(), T.numel());
    compute().releaseKept(T.data());
  }
  /// Frees saved activations a recompute policy drops, and the backend's
  /// kept copies of them.
  void dropSaved(LayerState &S, std::initializer_list<Tensor *> Saved) {
    for (Tensor *T : Saved) {
      compute().releaseKept(&S, T->data());
      *T = Tensor();
    }
  }

  bool selective(const char *Module) const { return SelectiveModules.count(Module) != 0; }

  void dropForRecompute(LayerState &S) {
    if (Options.Recompute.Full) {
      // The layer's input stays where it is (on the backend, as Megatron
      // keeps a checkpointed input on the GPU: megatron-core 0.16.1
      // tensor_parallel/random.py:528, CheckpointFunction.forward's
      // save_for_backward of its inputs).
      compute().releaseKeptBut(&S, S.X.data());
      Tensor X = std::move(S.X);
      S = LayerState();
      S.X = std::move(X);
      S.FullDropped = true;
      return;
    }
    if (selective("layernorm")) {
      dropSaved(S, {&S.Xn1, &S.Xn2});
      dropStatistics(S, S.Rstd1);
      dropStatistics(S, S.Rstd2);
      S.Dropped.insert("layernorm");
    }
    if (selective("mla_up_proj") && Config.Mla) {
      dropSaved(S, {&S.Q, &S.K, &S.V});
      S.Dropped.insert("mla_up_proj");
    }
    if (selective("gdn_norm_out") && S.Gdn.Gated.numel()) {
      compute().releaseKept(&S, S.Gdn.Gated.data());
      compute().releaseKept(&S, S.Gdn.RstdO.data());
      S.Gdn.dropNormOut();
      S.Dropped.insert("gdn_norm_out");
    }
    if (selective("core_attn") && S.AttnOut.numel()) {
      dropSaved(S, {&S.AttnOut, &S.Lse});
      S.Dropped.insert("core_attn");
    }
    if (selective("mlp") && S.G.numel()) {
      dropSaved(S, {&S.G, &S.U, &S.Act});
      S.Dropped.insert("mlp");
    }
    if (selective("moe") && S.Routed.Valid) {
      dropSaved(S, {&S.Routed.Scores, &S.Routed.ExpertIn, &S.Routed.G, &S.Routed.U, &S.Routed.Dispatch.CombinedCopies});
      compute().releaseKept(&S, S.Routed.TopW.data());
      S.Routed.dropMoe();
      S.Dropped.insert("moe");
    } else if (selective("moe_act") && S.Routed.Valid) {
      S.Routed.Act = Tensor();
      S.Dropped.insert("moe_act");
    }
    if (selective("shared_experts") && S.SG.numel()) {
      dropSaved(S, {&S.SG, &S.SU, &S.SAct});
      S.Dropped.insert("shared_experts");
    }
  }

  /// Brings back what dropForRecompute removed, by rerunning the same
  /// forward code on the same inputs (so the values are bit-identical).
  void recompute(const LayerParams &P, const MicroState &M, LayerState &S) {
    if (S.FullDropped) {
      double Aux;
      layerForward(P, M, S, Aux, /*Count=*/false, /*Out=*/nullptr);
      S.FullDropped = false;
      return;
    }
    if (S.Dropped.count("layernorm")) {
      // Remade where the forward made them, from the residual stream kept
      // there, and kept there again for the backward's products.
      S.Xn1 = Tensor(S.X.shape());
      {
        HeldArrays Keep(compute(), {normalised(M, S, S.Xn1, true)});
        attnNorm(P, M, S);
        keepForBackward(M, S, {&S.Xn1});
      }
      S.Xn2 = Tensor(S.H.shape());
      HeldArrays Keep(compute(), {normalised(M, S, S.Xn2, true)});
      mlpNorm(P, M, S);
      keepForBackward(M, S, {&S.Xn2});
    }
    if (S.Dropped.count("mla_up_proj"))
      mlaUp(P, M, S);
    if (S.Dropped.count("gdn_norm_out"))
      Gdn->recomputeNormOut(P.Gdn, S.Gdn);
    if (S.Dropped.count("core_attn")) {
      // Remade where the forward made it (from the queries, keys and values
      // kept there) and kept there again for the backward.
      attentionOutput(M, S, S.Q.rows());
      HeldArrays KeepOutput(compute(), heldAttentionOutput(M, S));
      coreAttn(M, S);
      keepForBackward(M, S, {&S.AttnOut});
    }
    if (S.Dropped.count("mlp"))
      denseMlp(P, S, /*Y=*/nullptr, keepKey(M, S));
    if (S.Dropped.count("moe")) {
      // The combined output, which nothing reads, is made where the
      // forward's was and stays there.
      Tensor Y;
      HeldArrays KeepOutput(compute(), branchOutput(Y, S, keepKey(M, S) != nullptr));
      Moe->forward(P.Routed, S.Xn2, S.Routed, Y, /*CountTokens=*/false, balanceKeys(P, M), keepKey(M, S));
    }
    if (S.Dropped.count("moe_act"))
      Moe->recomputeAct(S.Routed, keepKey(M, S));
    if (S.Dropped.count("shared_experts"))
      sharedExperts(P, S, /*Y=*/nullptr, keepKey(M, S));
    S.Dropped.clear();
  }

  /// The layer's backward from its output gradient DY; returns its input
  /// gradient, kept on the backend under OutputKey where it is not null (the
  /// previous decoder layer's, which reads it), as layerForward's output.
  Tensor layerBackward(const LayerParams &P, const MicroState &M, LayerState &S, const Tensor &DY,
                       const void *OutputKey = nullptr) {
    Communicator &Tp = *Groups.Tp;
    // The residual stream's gradient, on the backend as the stream itself.
    Tensor DH(DY.shape());
    HeldArrays KeepSum(compute(), keepKey(M, S) ? std::vector{residual(DH)} : std::vector<HeldArray>());
    // MLP / MoE branch. Its input is read by every weight's gradient: held
    // for them, it moves to the backend once. Its input gradient joins the
    // residual stream's through the norm on the backend, where the backend
    // makes it there (as the branch's output).
    Tensor DXn2;
    HeldArrays KeepBranchGradient(compute(), branchOutput(DXn2, S, keepKey(M, S) && (P.Moe || tpOnBackend())));
    {
      HeldArrays KeepInput(compute(), {keptResult(S.Xn2)});
      if (!P.Moe) {
        parallelMlpBackward(Tp, S.Xn2, {&P.Gate->Value, &P.Up->Value, &P.Down->Value}, S.G, S.U, S.Act, DY,
                            {&P.Gate->Grad, &P.Up->Grad, &P.Down->Grad}, DXn2);
      } else {
        Moe->backward(P.Routed, S.Xn2, S.Routed, DY, Options.AuxScale, DXn2);
        if (P.SGate) {
          Tensor Scaled;
          const Tensor *DShared = &DY;
          if (P.SGateW) {
            // Y = out * s, s = sigmoid(Xn2 w) per token, on the host.
            compute().hostReads(DY.data(), DY.numel());
            Scaled = DY;
            DShared = &Scaled;
            Tensor DLogit({DY.rows(), 1});
            for (int64_t I = 0; I < DY.rows(); ++I) {
              double Ds = 0;
              const float Score = S.SScore[I];
              for (int64_t C = 0; C < DY.cols(); ++C) {
                Ds += double(DY.row(I)[C]) * S.SOut.row(I)[C];
                Scaled.row(I)[C] *= Score;
              }
              DLogit[I] = float(Ds * Score * (1 - Score));
            }
            matmulBackward(S.Xn2, P.SGateW->Value, DLogit, P.SGateW->Grad, DXn2, 1.0f);
          }
          Tensor DSharedIn;
          HeldArrays KeepSharedGradient(compute(), branchOutput(DSharedIn, S, keepKey(M, S) && tpOnBackend()));
          parallelMlpBackward(Tp, S.Xn2, {&P.SGate->Value, &P.SUp->Value, &P.SDown->Value}, S.SG, S.SU, S.SAct,
                              *DShared, {&P.SGate->Grad, &P.SUp->Grad, &P.SDown->Grad}, DSharedIn);
          residualAdd(DXn2, DSharedIn, DXn2);
        }
      }
    }
    {
      Tensor DNorm(DY.shape());
      HeldArrays KeepNormGradient(compute(), keepKey(M, S) ? std::vector{residual(DNorm)} : std::vector<HeldArray>());
      rmsNormBackward(S.H, P.MlpNorm->Value, S.Rstd2, DXn2, P.MlpNorm->Grad, DNorm);
      residualAdd(DY, DNorm, DH);
    }
    // Attention branch, its input held as the MLP branch's.
    HeldArrays KeepInput(compute(), {keptResult(S.Xn1)});
    if (P.Linear) {
      Tensor DXn1;
      HeldArrays KeepInputGradient(compute(), branchOutput(DXn1, S, keepKey(M, S) && tpOnBackend()));
      Gdn->backward(P.Gdn, S.Xn1, M.Sequences, S.Gdn, DH, DXn1);
      return inputGradient(P, M, S, DH, DXn1, OutputKey);
    }
    // Attention's output gradient, which only the backend reads (for
    // Delta and every block), and the output gate's (for its products).
    Tensor DOut({S.AttnOut.rows(), S.AttnOut.cols()}), DOGate;
    std::vector<HeldArray> OutputGradients = {onBackend(DOut)};
    if (P.OGate) {
      DOGate = Tensor(S.OGate.shape());
      OutputGradients.push_back(madeOnBackend(DOGate));
    }
    HeldArrays KeepOutputGradient(compute(), OutputGradients);
    {
      Tensor Gated;
      HeldArrays KeepGated(compute(), heldGatedAttention(P, S, Gated));
      rowParallelBackward(Tp, gatedAttention(S, Gated), P.O->Value, DH, P.O->Grad, DOut);
    }
    if (P.OGate) {
      const int64_t Count = DOut.numel();
      onBackendElseHost(
          compute(), {readsOf(S.AttnOut), readsOf(S.OGate), readsOf(DOut)}, {writesOf(DOut), writesOf(DOGate)},
          [&] {
            return compute().sigmoidGateBackward(Count, S.AttnOut.data(), S.OGate.data(), DOut.data(), DOut.data(),
                                                 DOGate.data());
          },
          [&] {
            sigmoidGateBackward(Count, S.AttnOut.data(), S.OGate.data(), DOut.data(), DOut.data(), DOGate.data());
          });
    }
    Tensor DQ(S.Q.shape()), DK(S.K.shape()), DV(S.V.shape());
    // Attention's gradients stay on the backend, as sums in fp32, from its
    // blocks to the projections' products (through RoPE and the head norms'
    // backward) where only the backend reads them on the way (no cp
    // exchange but one that runs through the backend, exchangeOnBackend:
    // the others send them from host memory).
    const bool GradientsOnBackend =
        keepKey(M, S) && (Groups.Cp->size() == 1 || exchangeOnBackend(*Groups.Cp, attentionDims(M), Groups.CpKind));
    HeldArrays KeepAttentionGradients(compute(), GradientsOnBackend
                                                     ? std::vector{residual(DQ), residual(DK), residual(DV)}
                                                     : std::vector<HeldArray>());
    {
      // Every block of the ring reads them: one copy each.
      HeldArrays KeepOperands(compute(), {keptResult(S.Q), keptResult(S.K), keptResult(S.V), keptResult(DOut)});
      contextParallelAttentionBackward(*Groups.Cp, attentionDims(M), S.Q.data(), S.K.data(), S.V.data(),
                                       S.AttnOut.data(), S.Lse.data(), DOut.data(), DQ.data(), DK.data(), DV.data(),
                                       Groups.CpKind);
    }
    if (Config.Mla) {
      Tensor DXn1;
      HeldArrays KeepInputGradient(compute(), branchOutput(DXn1, S, keepKey(M, S) && tpOnBackend()));
      mlaBackward(P, M, S, DQ, DK, DV, DXn1);
      return inputGradient(P, M, S, DH, DXn1, OutputKey);
    }
    // The projections' output gradients, held from the rotation back to
    // their products, which alone read them (through the head norms'
    // backward, where the layer has them).
    Tensor DQPre, DKPre;
    std::vector<HeldArray> Grads = {onBackend(DQ), onBackend(DK), onBackend(DV)};
    if (P.QNorm) {
      DQPre = Tensor(S.QPre.shape());
      DKPre = Tensor(S.KPre.shape());
      Grads.push_back(madeOnBackend(DQPre));
      Grads.push_back(madeOnBackend(DKPre));
    }
    HeldArrays KeepGrads(compute(), Grads);
    rope(DQ, M, true);
    rope(DK, M, true);
    if (P.QNorm) {
      headNormBackward(S.QPre, *P.QNorm, S.RstdQ, DQ, DQPre);
      headNormBackward(S.KPre, *P.KNorm, S.RstdK, DK, DKPre);
    }
    std::vector<const Tensor *> DYs = {P.QNorm ? &DQPre : &DQ, P.QNorm ? &DKPre : &DK, &DV};
    std::vector<Tensor *> DWs = {&P.Q->Grad, &P.K->Grad, &P.V->Grad};
    if (P.OGate) {
      DYs.push_back(&DOGate);
      DWs.push_back(&P.OGate->Grad);
    }
    // The projections' input gradient, summed where the norm's backward
    // reads it (where tp's reduce-scatter, if any, runs on the backend).
    Tensor DXn1;
    HeldArrays KeepInputGradient(compute(), branchOutput(DXn1, S, keepKey(M, S) && tpOnBackend()));
    columnParallelBackward(Tp, S.Xn1, nullptr, projectionWeights(P), DYs, DWs, DXn1);
    return inputGradient(P, M, S, DH, DXn1, OutputKey);
  }

  // ---- the chunk -------------------------------------------------------
  ComputeBackend &compute() const { return Options.Compute ? *Options.Compute : hostBackend(); }

  Tensor forward(int64_t Id, const MicroBatch &MB, Tensor *Input) {
    if (InFlight.count(Id))
      fail("micro batch " + std::to_string(Id) + " is already in flight");
    int Cp = Groups.Cp->size();
    int64_t N = MB.Sequences * MB.SeqLen / Cp;
    if (MB.SeqLen % (2 * Cp) && Cp > 1)
      fail("SeqLen must divide by 2 * CP");
    if (N % TpSize)
      fail("local tokens must divide by the tp size");
    if ((Stage.HasEmbedding && int64_t(MB.Tokens.size()) != N) || (Stage.HasLoss && int64_t(MB.Labels.size()) != N))
      fail("micro batch tokens or labels are not [Sequences * SeqLen / CP]");
    MicroState &M = InFlight[Id];
    M.Sequences = MB.Sequences;
    M.SeqLen = MB.SeqLen;
    M.Tokens = MB.Tokens;
    M.Labels = MB.Labels;
    std::vector<int64_t> Local = localPositions(Groups.Cp->rank(), Cp, MB.SeqLen);
    M.Positions.resize(N);
    for (int64_t I = 0; I < N; ++I)
      M.Positions[I] = Local[I % int64_t(Local.size())];
    M.Multimodal = MultimodalPositions();
    if (Config.MropeSection && !MB.RopePositions[0].empty()) {
      for (const auto &Axis : MB.RopePositions)
        if (int64_t(Axis.size()) != N)
          fail("a micro batch's multimodal positions are not one per token");
      for (size_t A = 0; A < 3; ++A)
        M.Multimodal.Axes[A] = MB.RopePositions[A];
    }
    M.TokenKeys.clear();
    if (Config.ForceBalance)
      for (int64_t I = TpRank * (N / TpSize); I < (TpRank + 1) * (N / TpSize); ++I) {
        int64_t Sample = MB.FirstSample + I / int64_t(Local.size());
        M.TokenKeys.push_back(mix64(uint64_t(Sample) * uint64_t(MB.SeqLen) + uint64_t(M.Positions[I])));
      }

    M.Layers.resize(Layers.size());
    Tensor X;
    if (Stage.HasEmbedding) {
      // The looked-up rows are the first layer's input, which it reads on
      // the backend where no tp reduce-scatter sums them; a vision tower's
      // tokens replace their placeholders' rows there.
      embed(M.Tokens, X, tpOnBackend() && !Layers.empty() ? keepKey(M, M.Layers[0]) : nullptr);
      if (Tower)
        visionForward(MB, M, X);
    } else {
      if (!Input || Input->rows() != N / TpSize || Input->cols() != Config.Hidden)
        fail("stage input is not [Sequences * SeqLen / CP / TP, Hidden]");
      X = std::move(*Input);
      takeReceived(X, !Layers.empty() ? keepKey(M, M.Layers[0]) : Stage.HasLoss ? &M : nullptr);
    }
    for (size_t L = 0; L < Layers.size(); ++L) {
      LayerState &S = M.Layers[L];
      S.X = std::move(X);
      double Aux = 0;
      // The next layer reads the output on the backend, as do the final
      // norm's forward and backward (the micro batch's own key) and the
      // pipeline's send; a deepstack feature is added to it there.
      const void *ReadBy = L + 1 < Layers.size() ? keepKey(M, M.Layers[L + 1])
                           : Stage.HasLoss       ? static_cast<const void *>(&M)
                                                 : &StageOutputKey;
      layerForward(Layers[L], M, S, Aux, /*CountRouting=*/Training, &X, ReadBy);
      if (Tower && L < M.VisionOut.Deepstack.size())
        compute().copyRows(M.VisualRows, M.VisionOut.Deepstack[L].data(), X.data(), /*Accumulate=*/true);
      if (Layers[L].Moe)
        Loss.AuxSum += Aux;
      dropForRecompute(S);
      charge(S.bytes(), +1);
    }
    compute().releaseKept(&M.VisionOut); // the tower's output: its readers ran
    if (!Stage.HasLoss) {
      compute().passKept(&StageOutputKey, X.data());
      return X;
    }

    M.HLast = std::move(X);
    // The final norm's output, which the loss heads' products alone read
    // (and gather under tp, asking for it): the backend's, kept under the
    // micro batch's key until the backward or a discard.
    M.XnF = Tensor(M.HLast.shape());
    {
      HeldArrays Keep(compute(), {onBackend(M.XnF)});
      withStatistics(M.RstdF, M.HLast.rows(), &M,
                     [&] { rmsNormForward(M.HLast, FinalNorm->Value, Config.RmsNormEps, M.RstdF, M.XnF); });
      compute().keepArrays(&M, {onBackend(M.XnF)});
    }
    std::vector<double> Losses;
    // The head's input gradient is the final norm's backward's operand, on
    // the backend.
    const bool Fused = lossHeadOnBackend(M.XnF, M.Labels, Options.CeScale, Losses, M.HeadDXn, &M);
    if (!Fused) {
      std::vector<Tensor> Logits = columnParallelForward(*Groups.Tp, M.XnF, {&Output->Value});
      int64_t VocabStart = TpRank * Output->Value.cols();
      vocabParallelCrossEntropyForward(*Groups.Tp, Logits[0], M.Labels, VocabStart, Losses);
      M.Probs = std::move(Logits[0]);
    }
    countLosses(std::move(Losses), M.Labels, N / TpSize, -1, Fused);
    if (Stage.HasMtp)
      mtpForward(M, MB);
    charge({{"output", M.outputBytes()}}, +1);
    return Tensor();
  }

  /// The embeddings of Tokens (this rank's sequence, before tp's scatter)
  /// into X: where KeepFor is not null, on the backend alone and kept under
  /// that key (the first layer's, or an MTP block's, which read them there).
  void embed(const std::vector<int32_t> &Tokens, Tensor &X, const void *KeepFor) {
    const int64_t VocabStart = TpRank * Embedding->Value.rows();
    if (!KeepFor) {
      X = vocabParallelEmbeddingForward(*Groups.Tp, Tokens, Embedding->Value, VocabStart);
      return;
    }
    X = Tensor({int64_t(Tokens.size()) / TpSize, Config.Hidden});
    HeldArrays Keep(compute(), {residual(X)});
    vocabParallelEmbeddingForward(*Groups.Tp, Tokens, Embedding->Value, VocabStart, X);
    compute().keepArrays(KeepFor, {residual(X)});
  }

  /// Counts a loss head's losses (all N rows'): every tp rank holds them
  /// all, and each counts its own sequence shard of Ns rows, so that sums
  /// over tp x cp x dp count every token once. The tokens are counted now;
  /// the losses are added when the backend has written them (addLosses).
  void countLosses(std::vector<double> &&Losses, const std::vector<int32_t> &Labels, int64_t Ns, int64_t Head,
                   bool Later) {
    CountedLosses &C = Uncounted.emplace_back();
    C.Losses = std::move(Losses);
    C.Head = Head;
    C.Later = Later;
    for (int64_t I = TpRank * Ns; I < (TpRank + 1) * Ns; ++I)
      if (Labels[size_t(I)] >= 0)
        C.Rows.push_back(I);
    (Head < 0 ? Loss.Tokens : Loss.MtpTokens[size_t(Head)]) += int64_t(C.Rows.size());
  }
  /// Adds the counted losses to Loss, in the forwards' order (the sums'
  /// order does not depend on when they are read).
  void addLosses() {
    for (CountedLosses &C : Uncounted) {
      if (C.Later)
        compute().lossesRead(C.Losses.data());
      double &Sum = C.Head < 0 ? Loss.CeSum : Loss.MtpCeSum[size_t(C.Head)];
      for (int64_t I : C.Rows)
        Sum += C.Losses[size_t(I)];
    }
    Uncounted.clear();
  }

  /// A loss head (the main one or an MTP block's) as one backend operation,
  /// forward and backward (ComputeBackend::lossHead), where the backend takes
  /// it: in a training forward, whose logits then never leave the backend.
  /// XShard is the head's input (this rank's sequence shard); Losses as
  /// vocabParallelCrossEntropyForward gives them; DX is the backward's input
  /// gradient (the shard's), kept on the backend under KeepFor where it is
  /// not null and no tp reduce-scatter sums it on the host, and the output
  /// head's gradient is summed now.
  bool lossHeadOnBackend(const Tensor &XShard, const std::vector<int32_t> &Labels, double Scale,
                         std::vector<double> &Losses, Tensor &DX, const void *KeepFor = nullptr) {
    if (!Training || !compute().fusesLossHead())
      return false;
    Communicator &Tp = *Groups.Tp;
    WholeSequence Gathered(Tp, XShard, ReadBy::Products);
    const Tensor &Rows = Gathered.get();
    LossHeadArgs A;
    A.Rows = Rows.rows();
    A.Hidden = Rows.cols();
    A.Vocab = Output->Value.cols();
    A.VocabStart = TpRank * A.Vocab;
    A.X = Rows.data();
    A.W = Output->Value.data();
    A.Labels = Labels.data();
    A.Scale = float(Scale);
    Losses.assign(size_t(A.Rows), 0.0);
    A.Losses = Losses.data();
    A.LossesLater = true; // read through addLosses()
    // The input's gradient stays on the backend where it is kept and the tp
    // group's reduce-scatter (if any) runs there; the sum over the whole
    // sequence under tp is the backend's alone.
    const bool Keep = KeepFor && tpOnBackend();
    std::optional<PartialSums> Sums;
    Tensor Partial;
    if (TpSize > 1)
      Sums.emplace(std::vector<int64_t>{A.Rows, A.Hidden});
    else
      Partial = Tensor({A.Rows, A.Hidden});
    HeldArrays Hold(compute(), Keep && TpSize == 1 ? std::vector{residual(Partial)} : std::vector<HeldArray>());
    A.DX = (Sums ? Sums->get() : Partial).data();
    A.DW = Output->Grad.data();
    if (TpSize > 1) {
      A.MaxOverGroup = [&Tp](float *Values, int64_t N) { maxOverGroup(Tp, Values, N); };
      A.SumOverGroup = [&Tp](float *Values, int64_t N) { Tp.allReduceSum(Values, size_t(N)); };
      A.Device = Tp.device();
    }
    compute().lossHead(A);
    if (!Sums) {
      DX = std::move(Partial); // the same storage, which stays held
      if (Keep)
        compute().keepArrays(KeepFor, {residual(DX)});
      return true;
    }
    DX = Tensor({XShard.rows(), A.Hidden});
    HeldArrays HoldShard(compute(), Keep ? std::vector{residual(DX)} : std::vector<HeldArray>());
    reduceScatterSequence(Tp, Sums->get(), DX);
    if (Keep)
      compute().keepArrays(KeepFor, {residual(DX)});
    return true;
  }

  /// The MTP blocks after the main loss (Megatron-Core
  /// multi_token_prediction.py MultiTokenPredictionLayer; the losses as
  /// gpt_model.py _postprocess computes them). Block k reads the block
  /// before's output, or the decoder's after its final norm.
  ///
  /// A block runs on the backend as the decoder does: what it saves for its
  /// backward (the future tokens' embeddings, the concatenation, its layer's
  /// output and its final norm's) is kept under the block's state, and its
  /// layer's input under the layer's; nothing but the losses comes back.
  void mtpForward(MicroState &M, const MicroBatch &MB) {
    const ModelConfig &C = Config;
    const size_t N = M.Tokens.size();
    if (MB.MtpTokens.size() != Mtp.size() || MB.MtpLabels.size() != Mtp.size())
      fail("micro batch lacks the tokens and labels of its " + std::to_string(Mtp.size()) + " MTP blocks");
    M.Mtp.resize(Mtp.size());
    Loss.MtpCeSum.resize(Mtp.size());
    Loss.MtpTokens.resize(Mtp.size());
    const int64_t Ns = int64_t(N) / TpSize, Hd = C.Hidden;
    const Tensor *H = &M.XnF;
    for (size_t K = 0; K < Mtp.size(); ++K) {
      const MtpParams &P = Mtp[K];
      MtpState &S = M.Mtp[K];
      S.Tokens = MB.MtpTokens[K];
      S.Labels = MB.MtpLabels[K];
      if (S.Tokens.size() != N || S.Labels.size() != N)
        fail("MTP tokens or labels are not [Sequences * SeqLen / CP]");
      embed(S.Tokens, S.E, tpOnBackend() ? &S : nullptr);
      // [embedding, hidden], in Megatron's order: each half normalised into
      // its columns, which the projection alone reads (and its weight
      // gradient in the backward).
      Tensor En({Ns, Hd}), Hn({Ns, Hd});
      S.Cat = Tensor({Ns, 2 * Hd});
      S.Layer.X = Tensor({Ns, Hd});
      {
        HeldArrays Hold(compute(), {madeOnBackend(En), madeOnBackend(Hn), madeOnBackend(S.Cat), residual(S.Layer.X)});
        withStatistics(S.RstdE, Ns, &S, [&] { rmsNormForward(S.E, P.ENorm->Value, C.RmsNormEps, S.RstdE, En); });
        withStatistics(S.RstdH, Ns, &S, [&] { rmsNormForward(*H, P.HNorm->Value, C.RmsNormEps, S.RstdH, Hn); });
        copyColumnRange(En, 0, Hd, S.Cat, 0);
        copyColumnRange(Hn, 0, Hd, S.Cat, Hd);
        matmul(S.Cat, P.Proj->Value, S.Layer.X);
        compute().keepArrays(&S, {onBackend(S.Cat)});
        compute().keepArrays(&S.Layer, {residual(S.Layer.X)});
      }
      double Aux = 0;
      layerForward(P.Layer, M, S.Layer, Aux, /*CountRouting=*/Training, &S.Y, /*OutputKey=*/&S);
      if (P.Layer.Moe)
        Loss.AuxSum += Aux;
      dropForRecompute(S.Layer);
      charge(S.Layer.bytes(), +1);
      // The block's output, which the loss head's products, the next
      // block's norm and their backwards read (as the decoder's XnF).
      S.Out = Tensor({Ns, Hd});
      {
        HeldArrays Keep(compute(), {onBackend(S.Out)});
        withStatistics(S.RstdOut, Ns, &S,
                       [&] { rmsNormForward(S.Y, P.FinalNorm->Value, C.RmsNormEps, S.RstdOut, S.Out); });
        compute().keepArrays(&S, {onBackend(S.Out)});
      }
      std::vector<double> Losses;
      const bool Fused = lossHeadOnBackend(S.Out, S.Labels, Options.MtpCeScale.at(K), Losses, S.HeadDOut, &S);
      if (!Fused) {
        std::vector<Tensor> Logits = columnParallelForward(*Groups.Tp, S.Out, {&Output->Value});
        vocabParallelCrossEntropyForward(*Groups.Tp, Logits[0], S.Labels, TpRank * Output->Value.cols(), Losses);
        S.Probs = std::move(Logits[0]);
      }
      countLosses(std::move(Losses), S.Labels, Ns, int64_t(K), Fused);
      H = &S.Out;
    }
  }

  /// Backward of the MTP blocks, last first; returns the gradient of the
  /// decoder's normalised output that the first block read, kept on the
  /// backend under the micro batch's key (its reader releases it).
  Tensor mtpBackward(MicroState &M) {
    const int64_t Hd = Config.Hidden;
    Tensor DH; // into block K's output, from block K + 1, kept under block K's state
    for (size_t K = Mtp.size(); K-- > 0;) {
      const MtpParams &P = Mtp[K];
      MtpState &S = M.Mtp[K];
      Tensor DOut;
      if (S.HeadDOut.numel() > 0) {
        DOut = std::move(S.HeadDOut); // the same storage, which stays kept
      } else {
        Tensor DLogits = vocabParallelCrossEntropyBackward(S.Probs, S.Labels, TpRank * Output->Value.cols(),
                                                           float(Options.MtpCeScale.at(K)));
        DOut = columnParallelBackward(*Groups.Tp, S.Out, nullptr, {&Output->Value}, {&DLogits}, {&Output->Grad});
      }
      if (DH.numel())
        residualAdd(DOut, DH, DOut);
      // The layer's output gradient, which its backward reads on the
      // backend as a decoder layer's.
      Tensor DY(S.Y.shape());
      {
        HeldArrays Keep(compute(), {residual(DY)});
        rmsNormBackward(S.Y, P.FinalNorm->Value, S.RstdOut, DOut, P.FinalNorm->Grad, DY);
        compute().keepArrays(&S.Layer, {residual(DY)});
      }
      auto Before = S.Layer.bytes();
      recompute(P.Layer, M, S.Layer);
      auto After = S.Layer.bytes();
      charge(minus(After, Before), +1);
      Tensor DX = layerBackward(P.Layer, M, S.Layer, DY, /*OutputKey=*/&S);
      charge(After, -1);
      compute().releaseKept(&S.Layer); // DY among them: before it is freed
      S.Layer = LayerState();
      // The concatenation's gradient, split into its halves' for their
      // norms, on the backend; the embedding's where its backward reads it
      // (tp's exchanges there), and the incoming hidden states' gradient
      // kept for the block before (or the decoder's final norm).
      const int64_t Ns = S.Cat.rows();
      Tensor DCat({Ns, 2 * Hd}), DEn({Ns, Hd}), DHn({Ns, Hd}), DE({Ns, Hd}), DIn({Ns, Hd});
      {
        HeldArrays Hold(compute(), {madeOnBackend(DCat), madeOnBackend(DEn), madeOnBackend(DHn), residual(DIn)});
        matmulBackward(S.Cat, P.Proj->Value, DX, P.Proj->Grad, DCat);
        copyColumnRange(DCat, 0, Hd, DEn, 0);
        copyColumnRange(DCat, Hd, Hd, DHn, 0);
        {
          HeldArrays KeepDE(compute(), tpOnBackend() ? std::vector{residual(DE)} : std::vector<HeldArray>());
          rmsNormBackward(S.E, P.ENorm->Value, S.RstdE, DEn, P.ENorm->Grad, DE);
          vocabParallelEmbeddingBackward(*Groups.Tp, S.Tokens, DE, Embedding->Grad, TpRank * Embedding->Value.rows());
        }
        const Tensor &In = K ? M.Mtp[K - 1].Out : M.XnF;
        rmsNormBackward(In, P.HNorm->Value, S.RstdH, DHn, P.HNorm->Grad, DIn);
        compute().keepArrays(K ? static_cast<const void *>(&M.Mtp[K - 1]) : &M, {residual(DIn)});
      }
      compute().releaseKept(&S); // DOut, DH and DX among them: before they are freed
      DH = std::move(DIn);
    }
    return DH;
  }

  void discard(int64_t Id) {
    auto It = InFlight.find(Id);
    if (It == InFlight.end())
      fail("discard of micro batch " + std::to_string(Id) + " without its forward");
    MicroState &M = It->second;
    if (Stage.HasLoss && (M.Probs.numel() > 0 || M.HeadDXn.numel() > 0))
      charge({{"output", M.outputBytes()}}, -1);
    for (LayerState &S : M.Layers) {
      charge(S.bytes(), -1);
      compute().releaseKept(&S);
    }
    for (MtpState &S : M.Mtp) {
      charge(S.Layer.bytes(), -1);
      compute().releaseKept(&S.Layer);
      compute().releaseKept(&S);
    }
    charge({{"vision", M.VisionBytes}}, -1);
    compute().releaseKept(&M.Vision);
    compute().releaseKept(&M.VisionOut);
    compute().releaseKept(&M);
    InFlight.erase(It);
  }

  bool VisionFrozen() const { return Config.VisionFrozen; }

  /// Runs the tower on the micro batch's images and puts its tokens in place
  /// of the placeholders' embeddings in X, this rank's sequence shard (on
  /// the backend where X is there).
  void visionForward(const MicroBatch &MB, MicroState &M, Tensor &X) {
    const int64_t Ns = X.rows(), First = TpRank * Ns;
    if (int64_t(MB.VisionRows.size()) != int64_t(M.Tokens.size()))
      fail("a vision model's micro batch needs a vision row per token");
    M.VisualRows = RowPairs();
    M.VisionOut = VisionOutput();
    if (MB.Images.empty())
      return;
    const int64_t Dim = Config.Vision->patchDim();
    Tensor Patches({int64_t(MB.ImagePatches.size()) / Dim, Dim});
    std::copy(MB.ImagePatches.begin(), MB.ImagePatches.end(), Patches.data());
    // What the tower's backward reads stays on the backend until it runs,
    // its output until the layers that read it have.
    M.VisionOut = Tower->forward(Patches, MB.Images, M.Vision, VisionFrozen() ? nullptr : &M.Vision, &M.VisionOut);
    // A frozen tower has no backward: only its outputs stay, the deepstack
    // features until the layers that add them.
    if (VisionFrozen())
      M.Vision = VisionSaved();
    M.VisionBytes = M.Vision.bytes() + M.VisionOut.bytes();
    charge({{"vision", M.VisionBytes}}, +1);
    RowPairs &Rows = M.VisualRows;
    Rows.Cols = Config.Hidden;
    Rows.SrcRows = M.VisionOut.Tokens.rows();
    Rows.DstRows = Ns;
    for (int64_t I = 0; I < Ns; ++I) {
      int32_t From = MB.VisionRows[size_t(First + I)];
      if (From < 0)
        continue;
      if (From >= M.VisionOut.Tokens.rows())
        fail("a placeholder's vision row is past the tower's output");
      Rows.From.push_back(From);
      Rows.To.push_back(int32_t(I));
    }
    if (!Rows.valid())
      fail("two placeholders take one vision row");
    compute().copyRows(Rows, M.VisionOut.Tokens.data(), X.data(), /*Accumulate=*/false);
  }

  /// The placeholders' rows of DY go to the tower's DTokens (and not to the
  /// embedding table, whose rows they replaced); the tower accumulates its
  /// gradients.
  void visionBackward(MicroState &M, Tensor &DY, Tensor &DTokens, const std::vector<Tensor> &DDeepstack) {
    if (M.VisionOut.Tokens.numel() == 0)
      return;
    compute().moveRows(M.VisualRows.reversed(), DY.data(), DTokens.data());
    if (!VisionFrozen())
      Tower->backward(M.Vision, DTokens, DDeepstack, /*PatchesGradient=*/false);
    compute().releaseKept(&M.Vision);
    M.Vision = VisionSaved();
    M.VisionOut = VisionOutput();
    charge({{"vision", M.VisionBytes}}, -1);
    M.VisionBytes = 0;
  }

  Tensor backward(int64_t Id, Tensor *OutputGrad) {
    auto It = InFlight.find(Id);
    if (It == InFlight.end())
      fail("backward of micro batch " + std::to_string(Id) + " without its forward");
    MicroState &M = It->second;
    // The gradient the last layer reads on the backend, as its forward's
    // output was.
    const bool LastReadsOnBackend = !Layers.empty();
    Tensor DY;
    if (Stage.HasLoss) {
      const int64_t OutputBytes = M.outputBytes();
      Tensor DXn;
      if (M.HeadDXn.numel() > 0) {
        DXn = std::move(M.HeadDXn);
      } else {
        Tensor DLogits =
            vocabParallelCrossEntropyBackward(M.Probs, M.Labels, TpRank * Output->Value.cols(), float(Options.CeScale));
        DXn = columnParallelBackward(*Groups.Tp, M.XnF, nullptr, {&Output->Value}, {&DLogits}, {&Output->Grad});
      }
      if (Stage.HasMtp) {
        Tensor DMtp = mtpBackward(M);
        residualAdd(DXn, DMtp, DXn);
        compute().releaseKept(&M, DMtp.data()); // before it is freed
      }
      DY = Tensor(M.HLast.shape());
      {
        HeldArrays Keep(compute(), LastReadsOnBackend ? std::vector{residual(DY)} : std::vector<HeldArray>());
        rmsNormBackward(M.HLast, FinalNorm->Value, M.RstdF, DXn, FinalNorm->Grad, DY);
        if (LastReadsOnBackend)
          compute().keepArrays(keepKey(M, M.Layers.back()), {residual(DY)});
      }
      compute().releaseKept(&M, M.HLast.data());
      compute().releaseKept(&M, DXn.data()); // before it is freed
      charge({{"output", OutputBytes}}, -1);
    } else {
      int64_t Ns = M.Sequences * M.SeqLen / Groups.Cp->size() / TpSize;
      if (!OutputGrad || OutputGrad->rows() != Ns || OutputGrad->cols() != Config.Hidden)
        fail("backward of a non-loss chunk needs the output gradient "
             "[Sequences * SeqLen / CP / TP, Hidden]");
      DY = std::move(*OutputGrad);
      takeReceived(DY, LastReadsOnBackend ? keepKey(M, M.Layers.back()) : nullptr);
    }
    // The tower's output gradients, in fp32 on the backend where it keeps
    // them, from the layers that read its output to the tower's backward.
    Tensor DTokens;
    std::vector<Tensor> DDeepstack;
    std::vector<HeldArray> TowerGradients;
    if (Tower && M.VisionOut.Tokens.numel() > 0) {
      TowerGradients.push_back(residual(DTokens = Tensor(M.VisionOut.Tokens.shape())));
      if (!VisionFrozen())
        for (const Tensor &F : M.VisionOut.Deepstack)
          TowerGradients.push_back(residual(DDeepstack.emplace_back(F.shape())));
    }
    std::optional<HeldArrays> HoldTowerGradients(std::in_place, compute(), TowerGradients);
    for (const HeldArray &G : TowerGradients)
      compute().zero(G.Data, G.Count);
    const RowPairs ToTower = M.VisualRows.reversed();
    for (size_t L = Layers.size(); L-- > 0;) {
      LayerState &S = M.Layers[L];
      if (L < DDeepstack.size())
        compute().copyRows(ToTower, DY.data(), DDeepstack[L].data(), /*Accumulate=*/true);
      auto Before = S.bytes();
      recompute(Layers[L], M, S);
      auto After = S.bytes();
      charge(minus(After, Before), +1);
      // The previous layer reads the input gradient on the backend, as the
      // forward's output, and so do the pipeline's send, a deepstack
      // feature's gradient, the tower's and the embedding's backward (under
      // the micro batch's key) where tp's exchanges run on the backend.
      const void *ReadBy = L > 0                 ? keepKey(M, M.Layers[L - 1])
                           : !Stage.HasEmbedding ? &StageOutputKey
                           : tpOnBackend()       ? static_cast<const void *>(&M)
                                                 : nullptr;
      Tensor DX = layerBackward(Layers[L], M, S, DY, ReadBy);
      charge(After, -1);
      compute().releaseKept(&S); // DY among them: before it is freed
      S = LayerState();
      DY = std::move(DX);
    }
    Tensor Result;
    if (Tower)
      visionBackward(M, DY, DTokens, DDeepstack);
    HoldTowerGradients.reset();
    if (Stage.HasEmbedding)
      vocabParallelEmbeddingBackward(*Groups.Tp, M.Tokens, DY, Embedding->Grad, TpRank * Embedding->Value.rows());
    else {
      Result = std::move(DY);
      compute().passKept(&StageOutputKey, Result.data());
    }
    compute().releaseKept(&M); // DY among them: before it is freed
    InFlight.erase(It);
    return Result;
  }
};

StageModel::StageModel(const ModelConfig &Config, const StageSpec &Stage, const ParallelContext &Groups,
                       const ModelOptions &Options)
    : P(std::make_unique<Impl>(Config, Stage, Groups, Options)) {}

StageModel::~StageModel() = default;

Tensor StageModel::forward(int64_t Id, const MicroBatch &MB, Tensor *Input) {
  BackendScope Scope(P->compute());
  return P->forward(Id, MB, Input);
}

Tensor StageModel::backward(int64_t Id, Tensor *OutputGrad) {
  BackendScope Scope(P->compute());
  return P->backward(Id, OutputGrad);
}

void StageModel::discard(int64_t Id) { P->discard(Id); }

std::vector<Parameter *> StageModel::parameters() {
  std::vector<Parameter *> R;
  for (auto &Param : P->Params)
    R.push_back(Param.get());
  if (P->Tower && !P->Config.VisionFrozen)
    for (Parameter *Param : P->Tower->parameters())
      R.push_back(Param);
  return R;
}

std::vector<Parameter *> StageModel::frozenParameters() {
  if (P->Tower && P->Config.VisionFrozen)
    return P->Tower->parameters();
  return {};
}

std::vector<ExpertBias *> StageModel::expertBiases() {
  std::vector<ExpertBias *> R;
  for (auto &B : P->Biases)
    R.push_back(B.get());
  return R;
}

void StageModel::setTraining(bool Training) { P->Training = Training; }

void StageModel::setCeScale(double Scale) { P->Options.CeScale = Scale; }

StageModel::LossTotals &StageModel::loss() {
  P->addLosses();
  return P->Loss;
}

const std::map<std::string, int64_t> &StageModel::peakActivationBytes() const { return P->Peak; }

const std::vector<int32_t> *StageModel::routedExperts(int64_t Id, int64_t Layer) const {
  auto It = P->InFlight.find(Id);
  if (It == P->InFlight.end() || Layer < 0 || Layer >= int64_t(It->second.Layers.size()))
    return nullptr;
  const MoeSaved &S = It->second.Layers[size_t(Layer)].Routed;
  return S.TopIdx.empty() ? nullptr : &S.TopIdx;
}

void StageModel::resetStepStats() {
  P->addLosses(); // the backend's pending copies are done with
  P->Peak = P->Current;
  P->Loss = LossTotals();
}

} // namespace moert
