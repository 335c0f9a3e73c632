//===- data/MultimodalSamples.h - Samples of a vision-language run -*- C++ -*-===//
//
// A vision-language sample is its images followed by text, as a processor
// lays out an image-then-caption pair: for each of the sample's images,
// StartToken, ImageToken once per merged patch (the tower's output token that
// replaces it), EndToken; then the text sample of the same index, cut to fill
// seq_len + 1 tokens (a text token equal to one of the three image ids is
// read as 0, so that only images hold them). A label whose token belongs to
// an image is -1 (no loss), so the loss counts text only: those are the
// useful tokens.
//
// Image J of sample S is either a mock image (ImageSize x ImageSize pixels'
// worth of patches, values drawn from the seed, the sample and the image,
// uniform in [-1, 1] like normalised pixels) or image (S x ImagesPerSample +
// J) mod N of a decoded image dataset (data/VisionDataset.h). Everything is a
// function of the sample's index, so any rank builds any sample and a resumed
// run reads what the uninterrupted one read.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_MULTIMODALSAMPLES_H
#define MOERT_DATA_MULTIMODALSAMPLES_H

#include "data/TokenSource.h"
#include "data/VisionDataset.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moert {

struct ImageTokens {
  int32_t Start = 0, Image = 0, End = 0;
};

/// What the vision tower reads: patch size, frames per patch, patches merged
/// per side (the processor's and the tower's).
struct PatchGeometry {
  int64_t PatchSize = 16, TemporalPatch = 2, MergeSize = 2;
  int64_t patchDim() const { return 3 * TemporalPatch * PatchSize * PatchSize; }
};

struct SampleImage {
  int64_t Frames = 1, Rows = 0, Cols = 0; ///< the grid, in patches
  std::vector<float> Patches;             ///< Frames x Rows x Cols patches, merge order
};

struct MultimodalSample {
  std::vector<int32_t> Tokens; ///< seq_len + 1
  std::vector<SampleImage> Images;
  int64_t imageTokens() const; ///< placeholders over all images
};

class MultimodalSamples {
public:
  /// Mock images of ImageSize pixels a side.
  MultimodalSamples(std::shared_ptr<const TokenSource> Text, ImageTokens Ids, PatchGeometry Geometry,
                    int64_t ImagesPerSample, int64_t ImageSize, uint64_t Seed);
  /// The images of a decoded dataset (its geometry must be Geometry's).
  MultimodalSamples(std::shared_ptr<const TokenSource> Text, ImageTokens Ids, PatchGeometry Geometry,
                    int64_t ImagesPerSample, std::shared_ptr<const VisionDataset> Dataset);

  /// An empty string, or why no sample fits seq_len (the images' tokens with
  /// their start and end exceed it) or the dataset does not fit the tower.
  std::string problem() const;
  MultimodalSample sample(int64_t Index) const;
  /// Labels of Tokens (next token; -1 where it belongs to an image).
  std::vector<int32_t> labels(const std::vector<int32_t> &Tokens) const;

private:
  SampleImage image(int64_t Sample, int64_t J) const;
  std::shared_ptr<const TokenSource> Text;
  ImageTokens Ids;
  PatchGeometry Geometry;
  int64_t ImagesPerSample = 1, ImageSize = 0;
  uint64_t Seed = 0;
  std::shared_ptr<const VisionDataset> Dataset;
};

} // namespace moert

#endif
