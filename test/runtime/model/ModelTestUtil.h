//===- ModelTestUtil.h - Tiny configs and runners for the model tests -----===//
#ifndef MOERT_TEST_MODEL_MODELTESTUTIL_H
#define MOERT_TEST_MODEL_MODELTESTUTIL_H

#include "model/Model.h"
#include "parallel/cp/ContextParallelAttention.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace moert::test {

/// 2 layers (1 dense + 1 MoE), Hidden 16, Vocab 32, 4 experts top-2.
inline ModelConfig tinyConfig(bool Sigmoid, int64_t Shared, int64_t Layers = 2) {
  ModelConfig C;
  C.Layers = Layers;
  C.Hidden = 16;
  C.FfnHidden = 32;
  C.Heads = 4;
  C.KvHeads = 2;
  C.HeadDim = 4;
  C.Vocab = 32;
  C.Experts = 4;
  C.TopK = 2;
  C.MoeFfnHidden = 8;
  C.SharedFfnHidden = Shared * C.MoeFfnHidden;
  C.DenseLayers = 1;
  C.SigmoidRouter = Sigmoid;
  C.AuxLossCoeff = 0.1;
  return C;
}

/// Sequences x SeqLen random tokens and labels (full sequences, CP = 1).
inline MicroBatch randomBatch(int64_t Sequences, int64_t SeqLen, int64_t Vocab, unsigned Seed) {
  std::mt19937 Gen(Seed);
  std::uniform_int_distribution<int32_t> Tok(0, int32_t(Vocab - 1));
  MicroBatch MB;
  MB.Sequences = Sequences;
  MB.SeqLen = SeqLen;
  for (int64_t I = 0; I < Sequences * SeqLen; ++I) {
    MB.Tokens.push_back(Tok(Gen));
    MB.Labels.push_back(Tok(Gen));
  }
  return MB;
}

/// Time, row and column positions for every token of MB (full sequences)
/// under multimodal RoPE: each sequence some text, a Rows x Cols image at
/// one position with its rows and columns counted from there, then text
/// from past the image's largest position, as Qwen3-VL's get_rope_index
/// lays them out.
inline void addImagePositions(MicroBatch &MB, int64_t Text, int64_t Rows, int64_t Cols) {
  for (auto &Axis : MB.RopePositions)
    Axis.clear();
  for (int64_t S = 0; S < MB.Sequences; ++S) {
    int64_t Next = 0;
    for (int64_t P = 0; P < MB.SeqLen;) {
      if (P == Text) {
        for (int64_t R = 0; R < Rows; ++R)
          for (int64_t C = 0; C < Cols && P < MB.SeqLen; ++C, ++P) {
            MB.RopePositions[0].push_back(Next);
            MB.RopePositions[1].push_back(Next + R);
            MB.RopePositions[2].push_back(Next + C);
          }
        Next += std::max(Rows, Cols);
        continue;
      }
      for (auto &Axis : MB.RopePositions)
        Axis.push_back(Next);
      ++Next, ++P;
    }
  }
}

/// Random tokens and labels for Depth MTP blocks, the positions past each
/// sequence's end without a label, as the trainer fills them.
inline void addMtpTokens(MicroBatch &MB, int64_t Depth, int64_t Vocab, unsigned Seed) {
  std::mt19937 Gen(Seed);
  std::uniform_int_distribution<int32_t> Tok(0, int32_t(Vocab - 1));
  MB.MtpTokens.assign(size_t(Depth), {});
  MB.MtpLabels.assign(size_t(Depth), {});
  for (int64_t K = 1; K <= Depth; ++K)
    for (int64_t I = 0; I < int64_t(MB.Tokens.size()); ++I) {
      bool Inside = I % MB.SeqLen + K < MB.SeqLen;
      MB.MtpTokens[size_t(K - 1)].push_back(Inside ? Tok(Gen) : 0);
      MB.MtpLabels[size_t(K - 1)].push_back(Inside ? Tok(Gen) : -1);
    }
}

/// The CP rank's view of a full micro batch: its tokens in localPositions
/// order.
inline MicroBatch cpShard(const MicroBatch &Full, int CpRank, int CpSize) {
  MicroBatch MB;
  MB.Sequences = Full.Sequences;
  MB.SeqLen = Full.SeqLen;
  std::vector<int64_t> Pos = localPositions(CpRank, CpSize, Full.SeqLen);
  for (int64_t S = 0; S < Full.Sequences; ++S)
    for (int64_t P : Pos) {
      MB.Tokens.push_back(Full.Tokens[S * Full.SeqLen + P]);
      MB.Labels.push_back(Full.Labels[S * Full.SeqLen + P]);
    }
  return MB;
}

/// Groups of one for every dimension.
struct SelfGroups {
  std::unique_ptr<Communicator> Tp = createSelfCommunicator("tp"), Cp = createSelfCommunicator("cp"),
                                TpCp = createSelfCommunicator("tp-cp"), Ep = createSelfCommunicator("ep");
  ParallelContext context() const { return ParallelContext{Tp.get(), Cp.get(), TpCp.get(), Ep.get()}; }
};

inline StageSpec wholeModel(const ModelConfig &C) {
  StageSpec S;
  S.FirstLayer = 0;
  S.NumLayers = C.Layers;
  S.HasEmbedding = S.HasLoss = true;
  S.HasMtp = C.MtpLayers > 0;
  return S;
}

inline double objective(StageModel &M, const ModelOptions &O) {
  double L = O.CeScale * M.loss().CeSum + O.AuxScale * M.loss().AuxSum;
  for (size_t K = 0; K < M.loss().MtpCeSum.size(); ++K)
    L += O.MtpCeScale.at(K) * M.loss().MtpCeSum[K];
  return L;
}

/// Every parameter's gradient by name.
inline std::map<std::string, std::vector<float>> gradients(StageModel &M) {
  std::map<std::string, std::vector<float>> G;
  for (Parameter *P : M.parameters())
    G[P->Name] = P->Grad.storage();
  return G;
}

inline void zeroGradients(StageModel &M) {
  for (Parameter *P : M.parameters())
    P->Grad.zero();
}

} // namespace moert::test

#endif
