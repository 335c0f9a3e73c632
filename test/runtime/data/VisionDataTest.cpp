//===- VisionDataTest.cpp - Image patches and the vision dataset ----------===//
//
// The vision dataset's round trip and one test per malformed index; the
// processor's smart_resize rounding and the patches' merge order on an image
// whose size needs no resampling. Equality with transformers' processor on
// real PNG and JPEG files: test/megatron/image_patches.py.
//
//===----------------------------------------------------------------------===//
#include "DataTestUtil.h"
#include "data/ImagePatches.h"
#include "data/MultimodalSamples.h"
#include "data/VisionDataset.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace moert;
using namespace moert::test;

namespace {

VisionDatasetHeader header() {
  VisionDatasetHeader H;
  H.PatchSize = 2;
  H.TemporalPatch = 2;
  H.MergeSize = 2;
  return H;
}

TEST(VisionDataset, RoundTrip) {
  ScratchDir D;
  VisionDatasetHeader H = header();
  std::vector<VisionImageEntry> E(2);
  E[0].Rows = 2;
  E[0].Cols = 4;
  E[1].Frames = 2;
  E[1].Rows = 2;
  E[1].Cols = 2;
  std::vector<std::vector<float>> V(2);
  for (size_t I = 0; I < 2; ++I)
    for (uint64_t K = 0; K < E[I].patches() * H.patchDim(); ++K)
      V[I].push_back(float(I * 1000 + K));
  std::string Error;
  ASSERT_TRUE(writeVisionDataset(D.file("c"), H, E, V, Error)) << Error;
  VisionDataset R;
  ASSERT_TRUE(R.open(D.file("c"), Error)) << Error;
  ASSERT_EQ(R.images().size(), 2u);
  EXPECT_EQ(R.images()[1].Frames, 2u);
  EXPECT_EQ(R.images()[1].Offset, E[0].patches() * H.patchDim());
  EXPECT_EQ(R.header().patchDim(), 24u);
  EXPECT_EQ(R.read(0), V[0]);
  EXPECT_EQ(R.read(1), V[1]);
  // A grid the values do not fill is refused before anything is written.
  E[0].Rows = 4;
  EXPECT_FALSE(writeVisionDataset(D.file("bad"), H, E, V, Error));
  EXPECT_NE(Error.find("image 0 has 192 values, its grid 384"), std::string::npos) << Error;
  EXPECT_FALSE(exists(D.file("bad.vision.idx")));
}

TEST(VisionDataset, MalformedIndexesAreRefusedWithTheReason) {
  ScratchDir D;
  VisionDatasetHeader H = header();
  std::vector<VisionImageEntry> E(1);
  E[0].Rows = E[0].Cols = 2;
  std::vector<std::vector<float>> V(1, std::vector<float>(E[0].patches() * H.patchDim(), 1.0f));
  std::string Error;
  ASSERT_TRUE(writeVisionDataset(D.file("c"), H, E, V, Error)) << Error;
  const std::vector<unsigned char> Idx = readBytes(D.file("c.vision.idx")), Bin = readBytes(D.file("c.vision.bin"));
  struct Case {
    std::vector<unsigned char> Idx, Bin;
    const char *Message;
  };
  std::vector<Case> Cases;
  auto Patched = [&](size_t At, uint64_t Value) {
    std::vector<unsigned char> B = Idx;
    std::memcpy(B.data() + At, &Value, 8);
    return B;
  };
  std::vector<unsigned char> BadMagic = Idx;
  BadMagic[0] = 'X';
  Cases.push_back({BadMagic, Bin, "its magic is not MOEVISN"});
  Cases.push_back({Patched(8, 2), Bin, "of version 2; moerun reads version 1"});
  Cases.push_back({Patched(16, 2), Bin, "ends inside image 1 of 2"});
  Cases.push_back({Patched(72 + 8, 3), Bin, "does not lie where the images before it end"}); // 3 rows: not mergeable
  Cases.push_back({Idx, std::vector<unsigned char>(Bin.begin(), Bin.end() - 4), "does not lie where"});
  Cases.push_back({std::vector<unsigned char>(Idx.begin(), Idx.begin() + 30), Bin, "truncated or empty header"});
  for (const Case &C : Cases) {
    writeBytes(D.file("m.vision.idx"), C.Idx);
    writeBytes(D.file("m.vision.bin"), C.Bin);
    VisionDataset R;
    EXPECT_FALSE(R.open(D.file("m"), Error)) << C.Message;
    EXPECT_NE(Error.find(C.Message), std::string::npos) << C.Message << " -> " << Error;
  }
  VisionDataset R;
  EXPECT_FALSE(R.open(D.file("absent"), Error));
  EXPECT_NE(Error.find("cannot read"), std::string::npos) << Error;
}

TEST(ImagePatches, SmartResizeRoundsHalvesToEvenAndKeepsThePixelBudget) {
  ImagePreprocess P; // factor 32, 65,536 to 16,777,216 pixels
  int64_t H = 0, W = 0;
  std::string Error;
  ASSERT_TRUE(smartResize(1000, 500, P, H, W, Error)) << Error;
  EXPECT_EQ(H, 992); // round(31.25) = 31
  EXPECT_EQ(W, 512); // round(15.625) = 16
  ASSERT_TRUE(smartResize(336, 400, P, H, W, Error));
  EXPECT_EQ(H, 320); // round(10.5) = 10, Python's half to even
  ASSERT_TRUE(smartResize(100, 100, P, H, W, Error));
  EXPECT_EQ(H * W >= P.MinPixels, true); // grown into the budget: ceil(100 x 2.56 / 32) x 32
  EXPECT_EQ(H, 256);
  P.MaxPixels = 64 * 64;
  ASSERT_TRUE(smartResize(1000, 1000, P, H, W, Error));
  EXPECT_EQ(H, 64);
  EXPECT_FALSE(smartResize(10, 2500, P, H, W, Error));
  EXPECT_NE(Error.find("exceeds 200"), std::string::npos) << Error;
}

TEST(ImagePatches, PatchesAreInMergeOrderWithEveryFrame) {
  // 4 x 4 pixels, patch 1, merge 2: no resampling (the size divides by 2 and
  // is within the budget); pixel (y, x) has value 16 y + x in every channel.
  RgbImage Image;
  Image.Width = Image.Height = 4;
  for (int64_t Y = 0; Y < 4; ++Y)
    for (int64_t X = 0; X < 4; ++X)
      for (int C = 0; C < 3; ++C)
        Image.Pixels.push_back(uint8_t(16 * Y + X));
  ImagePreprocess P;
  P.PatchSize = 1;
  P.MinPixels = 1;
  P.Mean[0] = P.Mean[1] = P.Mean[2] = 0;
  P.Std[0] = P.Std[1] = P.Std[2] = 1;
  ImagePatches Out;
  std::string Error;
  ASSERT_TRUE(imagePatches(Image, P, Out, Error)) << Error;
  ASSERT_EQ(Out.Rows, 4);
  ASSERT_EQ(Out.Cols, 4);
  ASSERT_EQ(Out.Values.size(), 16u * 6);
  // Block (0, 0) holds (0,0) (0,1) (1,0) (1,1), then block (0, 1) from (0,2).
  const int64_t Order[] = {0, 1, 16, 17, 2, 3, 18, 19, 32, 33, 48, 49, 34, 35, 50, 51};
  for (int64_t P = 0; P < 16; ++P)
    for (int64_t K = 0; K < 6; ++K) // 3 channels x 2 identical frames
      EXPECT_EQ(Out.Values[size_t(P * 6 + K)], float(double(Order[P]) * (1.0 / 255.0))) << P << " " << K;
}

// A vision-language sample: the image's start, one placeholder per merged
// patch and end, then text of the same index; labels skip the image; the
// same index gives the same sample; a dataset's images go round.
TEST(MultimodalSamples, ImagesThenTextWithTheImageOutOfTheLoss) {
  auto Text = std::make_shared<MockSource>(64, 24, 7);
  ImageTokens Ids{61, 62, 63};
  PatchGeometry G{2, 2, 2};
  MultimodalSamples Mock(Text, Ids, G, 1, 8, 3); // 8 pixels: 4 x 4 patches, 4 placeholders
  ASSERT_EQ(Mock.problem(), "");
  MultimodalSample S = Mock.sample(5);
  ASSERT_EQ(S.Tokens.size(), 25u);
  ASSERT_EQ(S.Images.size(), 1u);
  EXPECT_EQ(S.Images[0].Rows, 4);
  EXPECT_EQ(S.Images[0].Patches.size(), size_t(16 * G.patchDim()));
  EXPECT_EQ(S.imageTokens(), 16);
  EXPECT_EQ(std::vector<int32_t>(S.Tokens.begin(), S.Tokens.begin() + 6),
            (std::vector<int32_t>{61, 62, 62, 62, 62, 63}));
  std::vector<int32_t> Words = Text->sample(5);
  for (size_t K = 6; K < S.Tokens.size(); ++K)
    EXPECT_EQ(S.Tokens[K], Words[K - 6] >= 61 ? 0 : Words[K - 6]) << K;
  std::vector<int32_t> L = Mock.labels(S.Tokens);
  EXPECT_EQ(std::count(L.begin(), L.begin() + 5, -1), 5);
  EXPECT_EQ(L[5], S.Tokens[6]);
  EXPECT_EQ(Mock.sample(5).Images[0].Patches, S.Images[0].Patches);
  EXPECT_NE(Mock.sample(6).Images[0].Patches, S.Images[0].Patches);
  for (float V : S.Images[0].Patches)
    ASSERT_TRUE(V >= -1.0f && V <= 1.0f);
  // Two 16-pixel images take 2 x (16 + 2) tokens: more than 24.
  EXPECT_EQ(MultimodalSamples(Text, Ids, G, 2, 16, 3).problem(),
            "a sample's images take 36 tokens, more than seq_len 24: raise seq_len, or lower "
            "data.image_size or data.images_per_sample");

  ScratchDir D;
  VisionDatasetHeader H = header();
  std::vector<VisionImageEntry> E(2);
  E[0].Rows = E[0].Cols = 2;
  E[1].Rows = 2;
  E[1].Cols = 4;
  std::vector<std::vector<float>> V(2);
  for (size_t I = 0; I < 2; ++I)
    V[I].assign(E[I].patches() * H.patchDim(), float(I + 1));
  std::string Error;
  ASSERT_TRUE(writeVisionDataset(D.file("c"), H, E, V, Error)) << Error;
  auto Images = std::make_shared<VisionDataset>();
  ASSERT_TRUE(Images->open(D.file("c"), Error)) << Error;
  MultimodalSamples Real(Text, Ids, G, 1, Images);
  EXPECT_EQ(Real.problem(), "");
  EXPECT_EQ(Real.sample(0).imageTokens(), 4);
  EXPECT_EQ(Real.sample(1).imageTokens(), 8);
  EXPECT_EQ(Real.sample(2).Images[0].Patches, V[0]);
  EXPECT_EQ(MultimodalSamples(Text, Ids, PatchGeometry{4, 2, 2}, 1, Images).problem(),
            "the image dataset's patches (2 pixels, 2 frames, merged 2 a side) are not the vision tower's (4, 2, 2)");
}

} // namespace
