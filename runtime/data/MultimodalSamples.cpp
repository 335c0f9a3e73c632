//===- data/MultimodalSamples.cpp - Samples of a vision-language run ------===//
#include "data/MultimodalSamples.h"

#include <algorithm>
#include <cmath>

using namespace moert;

int64_t MultimodalSample::imageTokens() const {
  int64_t N = 0;
  for (const SampleImage &I : Images)
    N += I.Frames * I.Rows * I.Cols;
  return N;
}

MultimodalSamples::MultimodalSamples(std::shared_ptr<const TokenSource> Text, ImageTokens Ids, PatchGeometry Geometry,
                                     int64_t ImagesPerSample, int64_t ImageSize, uint64_t Seed)
    : Text(std::move(Text)), Ids(Ids), Geometry(Geometry), ImagesPerSample(ImagesPerSample), ImageSize(ImageSize),
      Seed(Seed) {}

MultimodalSamples::MultimodalSamples(std::shared_ptr<const TokenSource> Text, ImageTokens Ids, PatchGeometry Geometry,
                                     int64_t ImagesPerSample, std::shared_ptr<const VisionDataset> Dataset)
    : Text(std::move(Text)), Ids(Ids), Geometry(Geometry), ImagesPerSample(ImagesPerSample),
      Dataset(std::move(Dataset)) {}

std::string MultimodalSamples::problem() const {
  const int64_t Merge = Geometry.MergeSize * Geometry.MergeSize;
  if (Dataset) {
    const VisionDatasetHeader &H = Dataset->header();
    if (int64_t(H.PatchSize) != Geometry.PatchSize || int64_t(H.TemporalPatch) != Geometry.TemporalPatch ||
        int64_t(H.MergeSize) != Geometry.MergeSize)
      return "the image dataset's patches (" + std::to_string(H.PatchSize) + " pixels, " +
             std::to_string(H.TemporalPatch) + " frames, merged " + std::to_string(H.MergeSize) +
             " a side) are not the vision tower's (" + std::to_string(Geometry.PatchSize) + ", " +
             std::to_string(Geometry.TemporalPatch) + ", " + std::to_string(Geometry.MergeSize) + ")";
    if (Dataset->images().empty() && ImagesPerSample > 0)
      return "the image dataset holds no image";
  }
  // The largest sample: the most placeholders a sample's images can take.
  int64_t Largest = 0;
  if (Dataset) {
    std::vector<int64_t> Tokens;
    for (const VisionImageEntry &E : Dataset->images())
      Tokens.push_back(int64_t(E.patches()) / Merge + 2);
    std::sort(Tokens.rbegin(), Tokens.rend());
    for (int64_t J = 0; J < ImagesPerSample; ++J)
      Largest += Tokens[size_t(J) % Tokens.size()];
  } else {
    SampleImage I = image(0, 0);
    Largest = ImagesPerSample * (I.Frames * I.Rows * I.Cols / Merge + 2);
  }
  if (Largest > Text->seqLen())
    return "a sample's images take " + std::to_string(Largest) + " tokens, more than seq_len " +
           std::to_string(Text->seqLen()) + ": raise seq_len, or lower data.image_size or data.images_per_sample";
  return "";
}

SampleImage MultimodalSamples::image(int64_t Sample, int64_t J) const {
  SampleImage I;
  const int64_t Dim = Geometry.patchDim();
  if (Dataset) {
    size_t Which = size_t(Sample * ImagesPerSample + J) % Dataset->images().size();
    const VisionImageEntry &E = Dataset->images()[Which];
    I.Frames = int64_t(E.Frames);
    I.Rows = int64_t(E.Rows);
    I.Cols = int64_t(E.Cols);
    I.Patches = Dataset->read(Which);
    return I;
  }
  // A square of ImageSize pixels, its side rounded to whole merged patches.
  const int64_t Unit = Geometry.PatchSize * Geometry.MergeSize;
  const int64_t Side = std::max<int64_t>(1, int64_t(std::llround(double(ImageSize) / double(Unit))));
  I.Rows = I.Cols = Side * Geometry.MergeSize;
  I.Patches.resize(size_t(I.Rows * I.Cols * Dim));
  const uint64_t Base = mixHash(Seed ^ mixHash(uint64_t(Sample) * 1024 + uint64_t(J) + 0x5eedull));
  for (size_t K = 0; K < I.Patches.size(); ++K)
    I.Patches[K] = float(double(mixHash(Base + K) >> 11) * 0x1.0p-52 - 1.0);
  return I;
}

MultimodalSample MultimodalSamples::sample(int64_t Index) const {
  MultimodalSample S;
  const int64_t Length = Text->seqLen() + 1, Merge = Geometry.MergeSize * Geometry.MergeSize;
  for (int64_t J = 0; J < ImagesPerSample; ++J) {
    S.Images.push_back(image(Index, J));
    const SampleImage &I = S.Images.back();
    S.Tokens.push_back(Ids.Start);
    S.Tokens.insert(S.Tokens.end(), size_t(I.Frames * I.Rows * I.Cols / Merge), Ids.Image);
    S.Tokens.push_back(Ids.End);
  }
  std::vector<int32_t> Words = Text->sample(Index);
  for (size_t K = 0; int64_t(S.Tokens.size()) < Length; ++K) {
    int32_t W = Words[K];
    S.Tokens.push_back(W == Ids.Start || W == Ids.Image || W == Ids.End ? 0 : W);
  }
  S.Tokens.resize(size_t(Length));
  return S;
}

std::vector<int32_t> MultimodalSamples::labels(const std::vector<int32_t> &Tokens) const {
  std::vector<int32_t> Labels;
  for (size_t P = 0; P + 1 < Tokens.size(); ++P) {
    int32_t Next = Tokens[P + 1];
    bool Visual = Next == Ids.Start || Next == Ids.Image || Next == Ids.End;
    Labels.push_back(Visual ? -1 : Next);
  }
  return Labels;
}
