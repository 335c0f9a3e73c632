//===- VisionPayloadTest.cpp - VLM image payload in the FLOPs and time ----===//
//
// data.images_per_sample and data.image_size drive the vision encoder's
// FLOPs and the decoder's useful (text) tokens: a hand count for a tiny VLM.
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Layout/Pipeline.h"
#include "moec/Model/Performance.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include <gtest/gtest.h>

using namespace moec;

namespace {

/// tiny_moe with a one-layer vision encoder: hidden 8, MLP 16, 4-pixel
/// patches merged 2x2 by the projector into the decoder's 64.
const char *Prelude = "model tiny_vlm extends tiny_moe {\n"
                      "  vision { layers = 1; hidden = 8; heads = 2; ffn_hidden = 16; patch_size = 4; "
                      "spatial_merge = 2 }\n"
                      "}\n";

Recipe vlm(llvm::StringRef Data, llvm::StringRef Extra = "") {
  std::string Text = std::string(Prelude) +
                     "recipe r {\n  model = tiny_vlm\n  cluster { gpu = cpu; gpus = 2 }\n"
                     "  seq_len = 256\n  batch { micro = 1; global = 4 }\n  data { " +
                     Data.str() + " }\n" + Extra.str() + "\n}\n";
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "vlm.moe"));
  std::vector<Recipe> Rs = S.analyze();
  for (const Diagnostic &D : Diags.finish())
    EXPECT_NE(D.Sev, Severity::Error) << D.Message << "\n" << Text;
  EXPECT_EQ(Rs.size(), 1u) << Text;
  return Rs.empty() ? Recipe() : Rs.front();
}

// One 16x16 image: (16/4)^2 = 16 encoder patches, (16/8)^2 = 4 merged tokens.
//   patch embed   2*16*(3*2*4*4)*8                     = 24,576
//   encoder GEMMs 2*16*(4*8*8 + 2*8*16)                = 16,384
//   encoder core  2*2*16*16*8                          =  8,192
//   projector     2*4*(32*32 + 32*64)                  = 24,576
//   training      3*(24,576 + 16,384 + 8,192) + 3*24,576 = 221,184 per image
// spread over the 256 decoder tokens of a sample: 864 per token.
// One 32x32 image: 64 patches (4x), 16 merged tokens:
//   3*(98,304 + 65,536 + 131,072) + 3*98,304 = 1,179,648 -> 4,608 per token.
TEST(VisionPayload, TinyVlmByHand) {
  Recipe Defaults = vlm("source = real(\"d/x\"); image_size = 16");
  EXPECT_EQ(Defaults.ImagesPerSample, 1);
  EXPECT_EQ(Defaults.ImageSize, 16);
  FlopCount One = countFlops(Defaults);
  EXPECT_DOUBLE_EQ(One.VisionPerToken, 864.0);
  EXPECT_DOUBLE_EQ(One.TextTokenFraction, 252.0 / 256);

  // Twice the images: twice the vision FLOPs, twice the image tokens.
  FlopCount Two = countFlops(vlm("source = real(\"d/x\"); images_per_sample = 2; image_size = 16"));
  EXPECT_DOUBLE_EQ(Two.VisionPerToken, 2 * One.VisionPerToken);
  EXPECT_DOUBLE_EQ(Two.TextTokenFraction, 248.0 / 256);
  EXPECT_DOUBLE_EQ(Two.PerStep - One.PerStep, 4 * 256 * 864.0);

  // Twice the side: four times the encoder tokens (GEMMs and projector 4x,
  // the bidirectional attention core 16x).
  FlopCount Big = countFlops(vlm("source = real(\"d/x\"); image_size = 32"));
  EXPECT_DOUBLE_EQ(Big.VisionPerToken, 4608.0);
  EXPECT_DOUBLE_EQ(Big.TextTokenFraction, 240.0 / 256);

  // Frozen: the encoder runs forward only, the projector still trains.
  FlopCount Frozen = countFlops(vlm("source = real(\"d/x\"); image_size = 16", "  vision { frozen = true }"));
  EXPECT_DOUBLE_EQ(Frozen.VisionPerToken, (24576.0 + 16384 + 8192 + 3 * 24576) / 256);

  // More image tokens than the sequence: no text tokens left, not negative.
  FlopCount Full = countFlops(vlm("source = real(\"d/x\"); images_per_sample = 100; image_size = 16"));
  EXPECT_DOUBLE_EQ(Full.TextTokenFraction, 0.0);

  // No images: mock data, or none per sample.
  EXPECT_DOUBLE_EQ(countFlops(vlm("source = mock; images_per_sample = 2")).VisionPerToken, 0.0);
  FlopCount None = countFlops(vlm("source = real(\"d/x\"); images_per_sample = 0"));
  EXPECT_DOUBLE_EQ(None.VisionPerToken, 0.0);
  EXPECT_DOUBLE_EQ(None.TextTokenFraction, 1.0);
}

/// One pipeline stage, the recipe's micro batches, no bubble.
StepTimeBreakdown predict(const Recipe &R) {
  PipelinePlan P;
  P.PP = P.VPP = 1;
  int64_t DP = std::max<int64_t>(R.Parallel.DP, 1);
  P.Microbatches = std::max<int64_t>(R.GlobalBatch / std::max<int64_t>(R.MicroBatch * DP, 1), 1);
  return predictStepTime(R, P);
}

// Useful (text) tokens are the decoder's tokens less the image tokens.
TEST(VisionPayload, UsefulTokensDropWithImages) {
  StepTimeBreakdown One = predict(vlm("source = real(\"d/x\"); image_size = 16"));
  StepTimeBreakdown Two = predict(vlm("source = real(\"d/x\"); images_per_sample = 2; image_size = 16"));
  EXPECT_DOUBLE_EQ(One.UsefulTokensPerSecPerGpu, One.TokensPerSecPerGpu * 252 / 256);
  EXPECT_DOUBLE_EQ(Two.UsefulTokensPerSecPerGpu, Two.TokensPerSecPerGpu * 248 / 256);
  // Twice the images: a longer step, fewer useful tokens.
  EXPECT_GT(Two.StepTime, One.StepTime);
  EXPECT_LT(Two.UsefulTokensPerSecPerGpu, One.UsefulTokensPerSecPerGpu);
}

TEST(VisionPayload, DefaultsAre448AndOneImage) {
  Recipe R = vlm("source = real(\"d/x\")");
  EXPECT_EQ(R.ImagesPerSample, 1);
  EXPECT_EQ(R.ImageSize, 448);
}

} // namespace
