//===- GpuModelTest.cpp - The GPU training step against the CPU model -----===//
//
// One micro batch through the whole MoE transformer on the GPU must give the
// CPU StageModel's loss and gradients (same parameters, same tokens) up to
// bf16 activations: loss within 1%, every parameter's gradient within 5%
// (relative Frobenius error). The comparison routes every token to every
// expert (TopK = Experts) so that bf16 rounding cannot flip a top-k choice.
// Then AdamW steps on the GPU must make the loss fall.
//
//===----------------------------------------------------------------------===//
#include "GpuTestUtil.h"

#include "gpu/GpuModel.h"

#include <cmath>
#include <random>

using namespace moert;
using namespace moert::cuda;
using namespace moert::test;

namespace {

MicroBatch batch(int64_t Vocab, uint64_t Seed) {
  MicroBatch MB;
  MB.Sequences = 2;
  MB.SeqLen = 64;
  std::mt19937_64 Gen(Seed);
  // A learnable stream: each next token is a fixed function of the current.
  for (int64_t S = 0; S < MB.Sequences; ++S) {
    int32_t T = int32_t(Gen() % Vocab);
    for (int64_t I = 0; I < MB.SeqLen; ++I) {
      MB.Tokens.push_back(T);
      T = int32_t((T * 5 + 3) % Vocab);
      MB.Labels.push_back(I + 1 < MB.SeqLen ? T : -1);
    }
  }
  return MB;
}

struct CpuModel {
  std::unique_ptr<Communicator> Tp, Cp, TpCp, Ep;
  std::unique_ptr<StageModel> Model;
  CpuModel(const ModelConfig &C, double CeScale) {
    Tp = createSelfCommunicator("tp");
    Cp = createSelfCommunicator("cp");
    TpCp = createSelfCommunicator("tpcp");
    Ep = createSelfCommunicator("ep");
    ParallelContext Ctx{Tp.get(), Cp.get(), TpCp.get(), Ep.get()};
    StageSpec Stage{0, C.Layers, true, true};
    ModelOptions O;
    O.Seed = 7;
    O.CeScale = CeScale;
    O.AuxScale = 1.0;
    Model = std::make_unique<StageModel>(C, Stage, Ctx, O);
  }
};

TEST(GpuModel, LossAndGradientsMatchTheCpuStageModel) {
  ModelConfig C = tinyMoe(/*TopK=*/4);
  MicroBatch MB = batch(C.Vocab, 1);
  int64_t Labelled = 0;
  for (int32_t L : MB.Labels)
    Labelled += L >= 0;
  double CeScale = 1.0 / double(Labelled);
  CpuModel Cpu(C, CeScale);
  GpuModel Gpu(C, Cpu.Model->parameters());
  Cpu.Model->forward(0, MB, nullptr);
  Cpu.Model->backward(0, nullptr);
  StageModel::LossTotals Want = Cpu.Model->loss();
  GpuStepLoss Got = Gpu.forwardBackward(MB, CeScale, 1.0);
  EXPECT_EQ(Got.Tokens, Want.Tokens);
  EXPECT_NEAR(Got.CeSum, Want.CeSum, 1e-2 * Want.CeSum);
  EXPECT_NEAR(Got.AuxSum, Want.AuxSum, 2e-2 * std::fabs(Want.AuxSum) + 1e-6);
  size_t Checked = 0;
  for (Parameter *P : Cpu.Model->parameters()) {
    double Err = relativeError(Gpu.gradient(P->Name), P->Grad.storage());
    EXPECT_LT(Err, 5e-2) << P->Name;
    ++Checked;
  }
  EXPECT_EQ(Checked, Gpu.parameterNames().size());
}

TEST(GpuModel, AdamWStepsMakeTheLossFall) {
  ModelConfig C = tinyMoe(/*TopK=*/2);
  MicroBatch MB = batch(C.Vocab, 2);
  int64_t Labelled = 0;
  for (int32_t L : MB.Labels)
    Labelled += L >= 0;
  CpuModel Cpu(C, 1.0);
  GpuModel Gpu(C, Cpu.Model->parameters());
  GpuAdamW Opt;
  Opt.Lr = 1e-2;
  Opt.WeightDecay = 0.01;
  Opt.ClipGradNorm = 1.0;
  std::vector<double> Losses;
  for (int Step = 0; Step < 30; ++Step) {
    Gpu.zeroGrads();
    GpuStepLoss L = Gpu.forwardBackward(MB, 1.0 / double(Labelled), 1.0);
    ASSERT_TRUE(std::isfinite(L.CeSum)) << "step " << Step;
    Losses.push_back(L.CeSum / double(L.Tokens));
    double Norm = Gpu.step(Opt);
    ASSERT_TRUE(std::isfinite(Norm)) << "step " << Step;
  }
  // Starts near log(Vocab) (small random weights) and learns the fixed
  // next-token rule of the batch.
  EXPECT_NEAR(Losses.front(), std::log(double(C.Vocab)), 0.5);
  EXPECT_LT(Losses.back(), 0.6 * Losses.front()) << "first " << Losses.front() << ", last " << Losses.back();
}

} // namespace
