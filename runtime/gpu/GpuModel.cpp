//===- gpu/GpuModel.cpp ---------------------------------------------------===//
//
// Parameters live in five flat device arenas (fp32 master, bf16 compute copy,
// fp32 gradient, AdamW m and v) at the same offsets. The arena order keeps
// each MoE layer's experts of one kind (gate, up, down) back to back in
// expert order, so the grouped expert GEMMs see one [Experts, In, Out] block.
//
//===----------------------------------------------------------------------===//
#include "gpu/GpuModel.h"

#include "gpu/EmbeddingKernels.h"
#include "kernels/cuda/AdamW.h"
#include "kernels/cuda/Attention.h"
#include "kernels/cuda/CrossEntropy.h"
#if MOERT_HAS_CUDNN
#include "kernels/cuda/CudnnAttention.h"
#endif
#include "kernels/cuda/Elementwise.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/Moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace moert::cuda {

namespace {

/// The expert GEMMs' mode: per-expert cuBLAS GEMMs, over side streams where
/// the experts are small (Gemm.h). Measured on an H200 (docs/benchmarks.md,
/// "CUDA kernels"), one cublasGemmGroupedBatchedEx took 2.3-3.0x the time of
/// a dense GEMM of the same size, and refused this model's bf16-in,
/// fp32-accumulated weight gradients.
constexpr GroupedMode ExpertGemms = GroupedMode::Auto;

using Buf = DeviceBuffer<bf16>;
using FBuf = DeviceBuffer<float>;

struct ParamSlot {
  std::string Name;
  std::vector<int64_t> Shape;
  int64_t Offset = 0, Count = 0;
};

/// "layers.L.experts.E.KIND" -> L, KIND's rank (gate 0, up 1, down 2), E.
bool parseExpert(const std::string &Name, int64_t &Layer, int &Kind, int64_t &Expert) {
  const std::string Pre = "layers.";
  if (Name.compare(0, Pre.size(), Pre) != 0)
    return false;
  size_t Dot = Name.find('.', Pre.size());
  if (Dot == std::string::npos || Name.compare(Dot, 9, ".experts.") != 0)
    return false;
  Layer = std::stoll(Name.substr(Pre.size(), Dot - Pre.size()));
  size_t EBegin = Dot + 9, EDot = Name.find('.', EBegin);
  if (EDot == std::string::npos)
    return false;
  Expert = std::stoll(Name.substr(EBegin, EDot - EBegin));
  std::string K = Name.substr(EDot + 1);
  Kind = K == "gate" ? 0 : K == "up" ? 1 : K == "down" ? 2 : -1;
  return Kind >= 0;
}

void copyDevice(void *Dst, const void *Src, size_t Bytes) {
  if (Bytes)
    MOERT_CUDA_CHECK(cudaMemcpy(Dst, Src, Bytes, cudaMemcpyDeviceToDevice));
}

/// What one layer keeps from forward for backward.
struct LayerState {
  Buf X, Xn1, Q, K, V, AttnBf, H, Xn2, G, U, Act, SG, SU, SAct;
  FBuf Rstd1, Rstd2, AttnOut, Lse;
  // MoE
  FBuf Logits, Scores, TopW, Fraction;
  DeviceBuffer<int32_t> TopIdx, Perm, RowOfCopy, PermScratch;
  DeviceBuffer<int64_t> Counts;
  std::vector<int64_t> Rows;
  double GroupTokens = 0;
  Buf ExpertIn, EG, EU, EAct, EOut;
};

} // namespace

struct GpuModel::Impl {
  ModelConfig C;
  std::vector<ParamSlot> Slots;
  std::map<std::string, size_t> ByName;
  int64_t Total = 0;
  FBuf Master, Grad, M, V;
  Buf Value;
  BlasHandle Blas;
#if MOERT_HAS_CUDNN
  // Attention on the tensor cores where cuDNN was built in (its fused SDPA
  // writes bf16 Out and gradients); the CUDA-core kernels otherwise, as in the
  // emulation.
  CudnnAttention Fused;
#endif
  int64_t Steps = 0;
  cudaStream_t S = nullptr; // the legacy stream: host copies order after it
  // Per micro batch.
  int64_t Seqs = 0, SeqLen = 0, N = 0;
  DeviceBuffer<int32_t> Tokens, Labels, RowPositions, SeqPositions;
  std::vector<LayerState> Layers;
  Buf HLast, XnF;
  FBuf RstdF, Logits;

  const ParamSlot &slot(const std::string &Name) const {
    auto It = ByName.find(Name);
    if (It == ByName.end())
      throw std::invalid_argument("GpuModel: no parameter '" + Name + "'");
    return Slots[It->second];
  }
  bf16 *w(const std::string &Name) { return Value.data() + slot(Name).Offset; }
  float *g(const std::string &Name) { return Grad.data() + slot(Name).Offset; }
  std::string expert(int64_t L, const char *Kind) const { return "layers." + std::to_string(L) + ".experts.0." + Kind; }

  // ---- helpers ---------------------------------------------------------
  /// Y [Rows, Out] = X [Rows, In] W.
  void linear(const bf16 *X, int64_t Rows, int64_t In, int64_t Out, const std::string &W, Buf &Y) {
    Y.resize(static_cast<size_t>(Rows * Out));
    gemm(Blas, false, false, Rows, Out, In, 1.0f, X, w(W), 0.0f, Y.data(), OutType::BF16);
  }
  /// DX (fp32, scaled by Beta first) += DY W^T; dW += X^T DY.
  void linearBackward(const bf16 *X, const bf16 *DY, int64_t Rows, int64_t In, int64_t Out, const std::string &W,
                      float *DX, float Beta) {
    gemm(Blas, false, true, Rows, In, Out, 1.0f, DY, w(W), Beta, DX, OutType::F32);
    gemm(Blas, true, false, In, Out, Rows, 1.0f, X, DY, 1.0f, g(W), OutType::F32);
  }
  Buf toBf(const FBuf &F) {
    Buf B(F.size());
    castToBf16(int64_t(F.size()), F.data(), B.data(), S);
    return B;
  }
  Buf copyOf(const Buf &B) {
    Buf C(B.size());
    copyDevice(C.data(), B.data(), B.bytes());
    return C;
  }

  // ---- forward ---------------------------------------------------------
  DeviceAttentionShape attnShape() const {
    return DeviceAttentionShape{
        Seqs, SeqLen, SeqLen, C.Heads, C.KvHeads, C.HeadDim, float(1.0 / std::sqrt(double(C.HeadDim)))};
  }

  double moeForward(int64_t L, LayerState &St, Buf &Y) {
    const int64_t E = C.Experts, K = C.TopK, H = C.Hidden, F = C.MoeFfnHidden;
    const std::string Pre = "layers." + std::to_string(L) + ".";
    St.Logits.resize(static_cast<size_t>(N * E));
    gemm(Blas, false, false, N, E, H, 1.0f, St.Xn2.data(), w(Pre + "router"), 0.0f, St.Logits.data(), OutType::F32);
    St.Scores.resize(static_cast<size_t>(N * E));
    St.TopIdx.resize(static_cast<size_t>(N * K));
    St.TopW.resize(static_cast<size_t>(N * K));
    routerTopK(N, E, K, C.SigmoidRouter, St.Logits.data(), St.Scores.data(), St.TopIdx.data(), St.TopW.data(), S);
    FBuf Stats(static_cast<size_t>(2 * E + 1));
    routerStats(N, E, K, St.Scores.data(), St.TopIdx.data(), Stats.data(), S);
    std::vector<float> HostStats = Stats.download();
    St.GroupTokens = HostStats[2 * E];
    std::vector<float> Fraction(E);
    double Aux = 0;
    for (int64_t J = 0; J < E; ++J) {
      Fraction[J] = float(HostStats[J] / (St.GroupTokens * double(K)));
      Aux += double(Fraction[J]) * (HostStats[E + J] / St.GroupTokens);
    }
    St.Fraction.upload(Fraction);
    St.Perm.resize(static_cast<size_t>(N * K));
    St.RowOfCopy.resize(static_cast<size_t>(N * K));
    St.Counts.resize(static_cast<size_t>(E));
    St.PermScratch.resize(permutationScratch(N * K, E));
    buildPermutation(N, K, E, St.TopIdx.data(), St.Perm.data(), St.RowOfCopy.data(), St.Counts.data(),
                     St.PermScratch.data(), S);
    St.Rows = St.Counts.download();
    const int64_t NK = N * K;
    St.ExpertIn.resize(static_cast<size_t>(NK * H));
    permuteTokens(N, K, H, St.Xn2.data(), St.Perm.data(), St.ExpertIn.data(), S);
    St.EG.resize(static_cast<size_t>(NK * F));
    St.EU.resize(static_cast<size_t>(NK * F));
    St.EAct.resize(static_cast<size_t>(NK * F));
    St.EOut.resize(static_cast<size_t>(NK * H));
    groupedGemm(Blas, ExpertGemms, St.Rows, F, H, St.ExpertIn.data(), w(expert(L, "gate")), false, 0.0f, St.EG.data(),
                OutType::BF16);
    groupedGemm(Blas, ExpertGemms, St.Rows, F, H, St.ExpertIn.data(), w(expert(L, "up")), false, 0.0f, St.EU.data(),
                OutType::BF16);
    swiGluForward(NK * F, St.EG.data(), St.EU.data(), St.EAct.data(), S);
    groupedGemm(Blas, ExpertGemms, St.Rows, H, F, St.EAct.data(), w(expert(L, "down")), false, 0.0f, St.EOut.data(),
                OutType::BF16);
    Y.resize(static_cast<size_t>(N * H));
    unpermuteTokens(N, K, H, St.EOut.data(), St.RowOfCopy.data(), St.TopW.data(), Y.data(), S);
    return Aux * C.AuxLossCoeff * double(E);
  }

  /// One layer; St.X holds its input. Returns its output; Aux gets the
  /// layer's aux loss (0 for a dense layer).
  Buf layerForward(int64_t L, LayerState &St, double &Aux) {
    const int64_t H = C.Hidden, QW = C.Heads * C.HeadDim, KW = C.KvHeads * C.HeadDim;
    const std::string Pre = "layers." + std::to_string(L) + ".";
    const float Eps = float(C.RmsNormEps);
    St.Xn1.resize(static_cast<size_t>(N * H));
    St.Rstd1.resize(static_cast<size_t>(N));
    rmsNormForward(N, H, St.X.data(), w(Pre + "attn_norm"), Eps, St.Xn1.data(), St.Rstd1.data(), S);
    linear(St.Xn1.data(), N, H, QW, Pre + "attn.q", St.Q);
    linear(St.Xn1.data(), N, H, KW, Pre + "attn.k", St.K);
    linear(St.Xn1.data(), N, H, KW, Pre + "attn.v", St.V);
    applyRope(N, C.Heads, C.HeadDim, St.Q.data(), RowPositions.data(), C.RopeTheta, false, S);
    applyRope(N, C.KvHeads, C.HeadDim, St.K.data(), RowPositions.data(), C.RopeTheta, false, S);
    St.Lse.resize(static_cast<size_t>(Seqs * C.Heads * SeqLen));
#if MOERT_HAS_CUDNN
    St.AttnBf.resize(static_cast<size_t>(N * QW));
    Fused.forward(attnShape(), St.Q.data(), St.K.data(), St.V.data(), St.AttnBf.data(), St.Lse.data(), S);
#else
    St.AttnOut.resize(static_cast<size_t>(N * QW));
    causalAttentionForward(attnShape(), St.Q.data(), St.K.data(), St.V.data(), SeqPositions.data(), St.AttnOut.data(),
                           St.Lse.data(), S);
    St.AttnBf = toBf(St.AttnOut);
#endif
    Buf Y;
    linear(St.AttnBf.data(), N, QW, H, Pre + "attn.o", Y);
    St.H = copyOf(St.X);
    addInPlace(N * H, Y.data(), St.H.data(), S);
    St.Xn2.resize(static_cast<size_t>(N * H));
    St.Rstd2.resize(static_cast<size_t>(N));
    rmsNormForward(N, H, St.H.data(), w(Pre + "mlp_norm"), Eps, St.Xn2.data(), St.Rstd2.data(), S);
    Aux = 0;
    if (!C.isMoeLayer(L)) {
      linear(St.Xn2.data(), N, H, C.FfnHidden, Pre + "mlp.gate", St.G);
      linear(St.Xn2.data(), N, H, C.FfnHidden, Pre + "mlp.up", St.U);
      St.Act.resize(St.G.size());
      swiGluForward(int64_t(St.G.size()), St.G.data(), St.U.data(), St.Act.data(), S);
      linear(St.Act.data(), N, C.FfnHidden, H, Pre + "mlp.down", Y);
    } else {
      Aux = moeForward(L, St, Y);
      if (C.SharedFfnHidden > 0) {
        int64_t SF = C.SharedFfnHidden;
        linear(St.Xn2.data(), N, H, SF, Pre + "shared.gate", St.SG);
        linear(St.Xn2.data(), N, H, SF, Pre + "shared.up", St.SU);
        St.SAct.resize(St.SG.size());
        swiGluForward(int64_t(St.SG.size()), St.SG.data(), St.SU.data(), St.SAct.data(), S);
        Buf Y2;
        linear(St.SAct.data(), N, SF, H, Pre + "shared.down", Y2);
        addInPlace(N * H, Y2.data(), Y.data(), S);
      }
    }
    addInPlace(N * H, St.H.data(), Y.data(), S);
    return Y;
  }

  // ---- backward --------------------------------------------------------
  /// Routed experts and router: DXn2 (fp32) = the gradient through them.
  void moeBackward(int64_t L, LayerState &St, const Buf &DY, double AuxScale, FBuf &DXn2) {
    const int64_t E = C.Experts, K = C.TopK, H = C.Hidden, F = C.MoeFfnHidden;
    const int64_t NK = N * K;
    const std::string Pre = "layers." + std::to_string(L) + ".";
    Buf DRows(static_cast<size_t>(NK * H)), DEAct(static_cast<size_t>(NK * F)), DEG(static_cast<size_t>(NK * F)),
        DEU(static_cast<size_t>(NK * F));
    FBuf DTopW(static_cast<size_t>(NK)), DInF(static_cast<size_t>(NK * H));
    unpermuteTokensBackward(N, K, H, DY.data(), St.EOut.data(), St.RowOfCopy.data(), St.TopW.data(), DRows.data(),
                            DTopW.data(), S);
    groupedGemm(Blas, ExpertGemms, St.Rows, F, H, DRows.data(), w(expert(L, "down")), true, 0.0f, DEAct.data(),
                OutType::BF16);
    groupedWeightGradGemm(Blas, ExpertGemms, St.Rows, F, H, St.EAct.data(), DRows.data(), 1.0f, g(expert(L, "down")));
    swiGluBackward(NK * F, St.EG.data(), St.EU.data(), DEAct.data(), DEG.data(), DEU.data(), S);
    MOERT_CUDA_CHECK(cudaMemsetAsync(DInF.data(), 0, DInF.bytes(), S));
    groupedGemm(Blas, ExpertGemms, St.Rows, H, F, DEG.data(), w(expert(L, "gate")), true, 1.0f, DInF.data(),
                OutType::F32);
    groupedGemm(Blas, ExpertGemms, St.Rows, H, F, DEU.data(), w(expert(L, "up")), true, 1.0f, DInF.data(),
                OutType::F32);
    groupedWeightGradGemm(Blas, ExpertGemms, St.Rows, H, F, St.ExpertIn.data(), DEG.data(), 1.0f, g(expert(L, "gate")));
    groupedWeightGradGemm(Blas, ExpertGemms, St.Rows, H, F, St.ExpertIn.data(), DEU.data(), 1.0f, g(expert(L, "up")));
    Buf DIn = toBf(DInF), DXb(static_cast<size_t>(N * H));
    permuteTokensBackward(N, K, H, DIn.data(), St.RowOfCopy.data(), DXb.data(), S);
    DXn2.resize(static_cast<size_t>(N * H));
    castToF32(N * H, DXb.data(), DXn2.data(), S);
    // Router: routing-weight and aux-loss gradients through the scores.
    double AuxPerScore = AuxScale * C.AuxLossCoeff * double(E) / St.GroupTokens;
    FBuf DLogits(static_cast<size_t>(N * E));
    routerBackward(N, E, K, C.SigmoidRouter, St.Scores.data(), St.TopIdx.data(), St.TopW.data(), DTopW.data(),
                   St.Fraction.data(), float(AuxPerScore), DLogits.data(), S);
    Buf DLb = toBf(DLogits);
    linearBackward(St.Xn2.data(), DLb.data(), N, H, E, Pre + "router", DXn2.data(), 1.0f);
  }

  /// A SwiGLU MLP's backward (dense or shared experts): DXn2 = Beta DXn2 +
  /// the gradient through it.
  void swiGluMlpBackward(const std::string &Gate, const std::string &Up, const std::string &Down, const Buf &G,
                         const Buf &U, const Buf &Act, const bf16 *Xn2, int64_t Ffn, const Buf &DY, FBuf &DXn2,
                         float Beta) {
    const int64_t H = C.Hidden;
    Buf DAct(static_cast<size_t>(N * Ffn)), DG(static_cast<size_t>(N * Ffn)), DU(static_cast<size_t>(N * Ffn));
    gemm(Blas, false, true, N, Ffn, H, 1.0f, DY.data(), w(Down), 0.0f, DAct.data(), OutType::BF16);
    gemm(Blas, true, false, Ffn, H, N, 1.0f, Act.data(), DY.data(), 1.0f, g(Down), OutType::F32);
    swiGluBackward(N * Ffn, G.data(), U.data(), DAct.data(), DG.data(), DU.data(), S);
    linearBackward(Xn2, DG.data(), N, H, Ffn, Gate, DXn2.data(), Beta);
    linearBackward(Xn2, DU.data(), N, H, Ffn, Up, DXn2.data(), 1.0f);
  }

  Buf layerBackward(int64_t L, LayerState &St, const Buf &DY, double AuxScale) {
    const int64_t H = C.Hidden, QW = C.Heads * C.HeadDim, KW = C.KvHeads * C.HeadDim;
    const std::string Pre = "layers." + std::to_string(L) + ".";
    FBuf DXn2f(static_cast<size_t>(N * H));
    if (!C.isMoeLayer(L)) {
      swiGluMlpBackward(Pre + "mlp.gate", Pre + "mlp.up", Pre + "mlp.down", St.G, St.U, St.Act, St.Xn2.data(),
                        C.FfnHidden, DY, DXn2f, 0.0f);
    } else {
      moeBackward(L, St, DY, AuxScale, DXn2f);
      if (C.SharedFfnHidden > 0)
        swiGluMlpBackward(Pre + "shared.gate", Pre + "shared.up", Pre + "shared.down", St.SG, St.SU, St.SAct,
                          St.Xn2.data(), C.SharedFfnHidden, DY, DXn2f, 1.0f);
    }
    Buf DXn2 = toBf(DXn2f), DH(static_cast<size_t>(N * H));
    rmsNormBackward(N, H, St.H.data(), w(Pre + "mlp_norm"), St.Rstd2.data(), DXn2.data(), DH.data(),
                    g(Pre + "mlp_norm"), S);
    addInPlace(N * H, DY.data(), DH.data(), S);
    // Attention branch.
    Buf DAttn(static_cast<size_t>(N * QW));
    gemm(Blas, false, true, N, QW, H, 1.0f, DH.data(), w(Pre + "attn.o"), 0.0f, DAttn.data(), OutType::BF16);
    gemm(Blas, true, false, QW, H, N, 1.0f, St.AttnBf.data(), DH.data(), 1.0f, g(Pre + "attn.o"), OutType::F32);
#if MOERT_HAS_CUDNN
    Buf DQb(static_cast<size_t>(N * QW)), DKb(static_cast<size_t>(N * KW)), DVb(static_cast<size_t>(N * KW));
    Fused.backward(attnShape(), St.Q.data(), St.K.data(), St.V.data(), St.AttnBf.data(), DAttn.data(), St.Lse.data(),
                   DQb.data(), DKb.data(), DVb.data(), S);
#else
    FBuf Delta(St.Lse.size()), DQ(static_cast<size_t>(N * QW)), DK(static_cast<size_t>(N * KW)),
        DV(static_cast<size_t>(N * KW));
    causalAttentionBackward(attnShape(), St.Q.data(), St.K.data(), St.V.data(), SeqPositions.data(), St.AttnOut.data(),
                            St.Lse.data(), DAttn.data(), Delta.data(), DQ.data(), DK.data(), DV.data(), S);
    Buf DQb = toBf(DQ), DKb = toBf(DK), DVb = toBf(DV);
#endif
    applyRope(N, C.Heads, C.HeadDim, DQb.data(), RowPositions.data(), C.RopeTheta, true, S);
    applyRope(N, C.KvHeads, C.HeadDim, DKb.data(), RowPositions.data(), C.RopeTheta, true, S);
    FBuf DXn1f(static_cast<size_t>(N * H));
    linearBackward(St.Xn1.data(), DQb.data(), N, H, QW, Pre + "attn.q", DXn1f.data(), 0.0f);
    linearBackward(St.Xn1.data(), DKb.data(), N, H, KW, Pre + "attn.k", DXn1f.data(), 1.0f);
    linearBackward(St.Xn1.data(), DVb.data(), N, H, KW, Pre + "attn.v", DXn1f.data(), 1.0f);
    Buf DXn1 = toBf(DXn1f), DX(static_cast<size_t>(N * H));
    rmsNormBackward(N, H, St.X.data(), w(Pre + "attn_norm"), St.Rstd1.data(), DXn1.data(), DX.data(),
                    g(Pre + "attn_norm"), S);
    addInPlace(N * H, DH.data(), DX.data(), S);
    return DX;
  }
};

GpuModel::GpuModel(const ModelConfig &Config, const std::vector<Parameter *> &Params) : P(std::make_unique<Impl>()) {
  // The CPU model's later features, which this path would silently leave out.
  std::string Missing;
  auto Lacks = [&](bool Uses, const char *What) {
    if (Uses)
      Missing += (Missing.empty() ? "" : ", ") + std::string(What);
  };
  Lacks(Config.QkNorm, "QK-norm");
  Lacks(Config.Mla.has_value(), "multi-head latent attention");
  Lacks(Config.PreSoftmax, "a softmax before the top-k");
  Lacks(Config.RouterGroups > 1, "group-limited routing");
  Lacks(Config.ExpertBias, "the expert bias");
  if (!Missing.empty())
    throw std::invalid_argument("GpuModel does not implement " + Missing);
  P->C = Config;
  // Arena order: every non-expert parameter in the given order, then each
  // MoE layer's experts by kind, expert id ascending.
  struct Key {
    int Group; // 0 ordinary, 1 expert
    int64_t Layer;
    int Kind;
    int64_t Expert;
    size_t Index;
  };
  std::vector<Key> Keys;
  for (size_t I = 0; I < Params.size(); ++I) {
    Key K{0, 0, 0, 0, I};
    if (parseExpert(Params[I]->Name, K.Layer, K.Kind, K.Expert))
      K.Group = 1;
    Keys.push_back(K);
  }
  std::sort(Keys.begin(), Keys.end(), [](const Key &A, const Key &B) {
    if (A.Group != B.Group)
      return A.Group < B.Group;
    if (A.Group == 0)
      return A.Index < B.Index;
    return std::tie(A.Layer, A.Kind, A.Expert) < std::tie(B.Layer, B.Kind, B.Expert);
  });
  for (const Key &K : Keys) {
    const Parameter &Src = *Params[K.Index];
    ParamSlot Slot;
    Slot.Name = Src.Name;
    Slot.Shape = Src.Value.shape();
    Slot.Count = Src.Value.numel();
    Slot.Offset = P->Total;
    P->Total += Slot.Count;
    P->ByName[Slot.Name] = P->Slots.size();
    P->Slots.push_back(std::move(Slot));
  }
  // Expert blocks must be complete: expert 0 .. Experts-1 of each kind.
  for (int64_t L = 0; L < Config.Layers; ++L)
    if (Config.isMoeLayer(L))
      for (const char *Kind : {"gate", "up", "down"})
        for (int64_t E = 0; E < Config.Experts; ++E) {
          std::string Name = "layers." + std::to_string(L) + ".experts." + std::to_string(E) + "." + Kind;
          const ParamSlot &First = P->slot(P->expert(L, Kind));
          const ParamSlot &This = P->slot(Name);
          if (This.Offset != First.Offset + E * First.Count)
            throw std::invalid_argument("GpuModel: experts of layer " + std::to_string(L) + " not contiguous");
        }
  P->Master.resize(static_cast<size_t>(P->Total));
  P->Value.resize(static_cast<size_t>(P->Total));
  P->Grad.resize(static_cast<size_t>(P->Total));
  P->M.resize(static_cast<size_t>(P->Total));
  P->V.resize(static_cast<size_t>(P->Total));
  for (const Parameter *Src : Params) {
    const ParamSlot &Slot = P->slot(Src->Name);
    MOERT_CUDA_CHECK(cudaMemcpy(P->Master.data() + Slot.Offset, Src->Value.data(), Slot.Count * sizeof(float),
                                cudaMemcpyHostToDevice));
  }
  castToBf16(P->Total, P->Master.data(), P->Value.data(), P->S);
  P->Grad.zero();
  P->M.zero();
  P->V.zero();
}

GpuModel::~GpuModel() = default;

GpuStepLoss GpuModel::forwardBackward(const MicroBatch &MB, double CeScale, double AuxScale) {
  Impl &I = *P;
  const ModelConfig &C = I.C;
  I.Seqs = MB.Sequences;
  I.SeqLen = MB.SeqLen;
  I.N = MB.Sequences * MB.SeqLen;
  const int64_t N = I.N, H = C.Hidden;
  if (int64_t(MB.Tokens.size()) != N || int64_t(MB.Labels.size()) != N)
    throw std::invalid_argument("GpuModel: tokens and labels must be [Sequences * SeqLen]");
  I.Tokens.upload(MB.Tokens);
  I.Labels.upload(MB.Labels);
  std::vector<int32_t> Seq(MB.SeqLen), Rows(N);
  std::iota(Seq.begin(), Seq.end(), 0);
  for (int64_t R = 0; R < N; ++R)
    Rows[R] = int32_t(R % MB.SeqLen);
  I.SeqPositions.upload(Seq);
  I.RowPositions.upload(Rows);

  GpuStepLoss Loss;
  Buf X(static_cast<size_t>(N * H));
  embeddingForward(N, H, I.Tokens.data(), I.w("embedding"), X.data(), I.S);
  I.Layers.clear();
  I.Layers.resize(static_cast<size_t>(C.Layers));
  for (int64_t L = 0; L < C.Layers; ++L) {
    LayerState &St = I.Layers[L];
    St.X = std::move(X);
    double Aux = 0;
    X = I.layerForward(L, St, Aux);
    Loss.AuxSum += Aux;
  }
  I.HLast = std::move(X);
  I.XnF.resize(static_cast<size_t>(N * H));
  I.RstdF.resize(static_cast<size_t>(N));
  rmsNormForward(N, H, I.HLast.data(), I.w("final_norm"), float(C.RmsNormEps), I.XnF.data(), I.RstdF.data(), I.S);
  I.Logits.resize(static_cast<size_t>(N * C.Vocab));
  gemm(I.Blas, false, false, N, C.Vocab, H, 1.0f, I.XnF.data(), I.w("output"), 0.0f, I.Logits.data(), OutType::F32);
  FBuf Losses(static_cast<size_t>(N));
  crossEntropyForward(N, C.Vocab, I.Logits.data(), I.Labels.data(), Losses.data(), I.S);
  std::vector<float> HostLosses = Losses.download();
  for (int64_t R = 0; R < N; ++R)
    if (MB.Labels[R] >= 0) {
      Loss.CeSum += HostLosses[R];
      ++Loss.Tokens;
    }

  // Backward.
  Buf DLogits(static_cast<size_t>(N * C.Vocab)), DXn(static_cast<size_t>(N * H)), DY(static_cast<size_t>(N * H));
  crossEntropyBackward(N, C.Vocab, I.Logits.data(), I.Labels.data(), float(CeScale), DLogits.data(), I.S);
  gemm(I.Blas, false, true, N, H, C.Vocab, 1.0f, DLogits.data(), I.w("output"), 0.0f, DXn.data(), OutType::BF16);
  gemm(I.Blas, true, false, H, C.Vocab, N, 1.0f, I.XnF.data(), DLogits.data(), 1.0f, I.g("output"), OutType::F32);
  rmsNormBackward(N, H, I.HLast.data(), I.w("final_norm"), I.RstdF.data(), DXn.data(), DY.data(), I.g("final_norm"),
                  I.S);
  for (int64_t L = C.Layers; L-- > 0;)
    DY = I.layerBackward(L, I.Layers[L], DY, AuxScale);
  embeddingBackward(N, H, I.Tokens.data(), DY.data(), I.g("embedding"), I.S);
  MOERT_CUDA_CHECK(cudaDeviceSynchronize());
  I.Layers.clear(); // the activations of this micro batch are done
  return Loss;
}

double GpuModel::step(const GpuAdamW &O) {
  Impl &I = *P;
  ++I.Steps;
  DeviceBuffer<double> Scratch(SumSquaresScratch), Sum(1);
  sumSquares(I.Total, I.Grad.data(), Scratch.data(), Sum.data(), I.S);
  double Norm = std::sqrt(Sum.download()[0]);
  double Clip = 1.0;
  if (O.ClipGradNorm > 0 && O.ClipGradNorm / (Norm + 1e-6) < 1.0)
    Clip = O.ClipGradNorm / (Norm + 1e-6);
  for (const ParamSlot &Slot : I.Slots) {
    double Wd = Slot.Shape.size() == 1 ? 0.0 : O.WeightDecay;
    AdamWStep C = adamWStep(O.Lr, O.Beta1, O.Beta2, O.Eps, Wd, I.Steps, Clip);
    adamWUpdate(Slot.Count, C, I.Master.data() + Slot.Offset, I.M.data() + Slot.Offset, I.V.data() + Slot.Offset,
                I.Grad.data() + Slot.Offset, I.Value.data() + Slot.Offset, I.S);
  }
  MOERT_CUDA_CHECK(cudaDeviceSynchronize());
  return Norm;
}

void GpuModel::zeroGrads() { P->Grad.zero(); }

std::vector<float> GpuModel::gradient(const std::string &Name) const {
  const ParamSlot &Slot = P->slot(Name);
  std::vector<float> Out(static_cast<size_t>(Slot.Count));
  MOERT_CUDA_CHECK(
      cudaMemcpy(Out.data(), P->Grad.data() + Slot.Offset, Out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return Out;
}

std::vector<float> GpuModel::value(const std::string &Name) const {
  const ParamSlot &Slot = P->slot(Name);
  std::vector<float> Out(static_cast<size_t>(Slot.Count));
  MOERT_CUDA_CHECK(
      cudaMemcpy(Out.data(), P->Master.data() + Slot.Offset, Out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return Out;
}

std::vector<std::string> GpuModel::parameterNames() const {
  std::vector<std::string> Names;
  for (const ParamSlot &S : P->Slots)
    Names.push_back(S.Name);
  return Names;
}

} // namespace moert::cuda
