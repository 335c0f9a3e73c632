//===- data/ImagePatches.h - Images to the vision tower's patches -*- C++ -*-===//
//
// What a Qwen-VL image processor does to a PNG or JPEG file before the
// vision tower sees it, as transformers' Qwen2VLImageProcessor (the one
// Qwen3-VL's processor derives from; models/qwen2_vl/image_processing_qwen2_vl.py)
// does it with PIL:
//
//  1. decode to 8-bit RGB (libpng, libjpeg; PIL's convert("RGB"): alpha is
//     dropped, grey replicated, a palette looked up);
//  2. smart_resize: the nearest size whose sides divide by PatchSize x
//     MergeSize, scaled into [MinPixels, MaxPixels] keeping the aspect ratio;
//  3. resize to it with PIL's bicubic filter (Pillow's libImaging/Resample.c:
//     a = -0.5, support scaled by the reduction, 22-bit fixed-point
//     coefficients, the horizontal pass then the vertical, each rounded to
//     8 bits), or keep the pixels when the size is unchanged;
//  4. x / 255, then (x - Mean) / Std per channel, in float32;
//  5. one image is TemporalPatch identical frames; the patches, in merge
//     order (block row, block column, the block's rows and columns), each
//     channel x frame x PatchSize x PatchSize values.
//
// The defaults are Qwen3-VL's preprocessor_config.json: patch 16, merge 2,
// temporal patch 2, mean and std 0.5, 65,536 to 16,777,216 pixels.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_IMAGEPATCHES_H
#define MOERT_DATA_IMAGEPATCHES_H

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// 8-bit RGB pixels, row-major, 3 per pixel.
struct RgbImage {
  int64_t Width = 0, Height = 0;
  std::vector<uint8_t> Pixels;
};

/// A PNG or JPEG file (told apart by its signature) as RGB; false with
/// Error naming the file and the reason.
bool readImageFile(const std::string &Path, RgbImage &Out, std::string &Error);

/// PIL's Image.resize(..., BICUBIC) of an RGB image.
RgbImage resizeBicubic(const RgbImage &In, int64_t Width, int64_t Height);

struct ImagePreprocess {
  int64_t PatchSize = 16, MergeSize = 2, TemporalPatch = 2;
  int64_t MinPixels = 65536, MaxPixels = 16777216;
  float Mean[3] = {0.5f, 0.5f, 0.5f}, Std[3] = {0.5f, 0.5f, 0.5f};
  int64_t patchDim() const { return 3 * TemporalPatch * PatchSize * PatchSize; }
};

/// smart_resize's (height, width); false with Error for an aspect ratio
/// above 200 or an empty image.
bool smartResize(int64_t Height, int64_t Width, const ImagePreprocess &P, int64_t &OutHeight, int64_t &OutWidth,
                 std::string &Error);

/// An image's patches [Rows x Cols, patchDim()] (one temporal patch) and its
/// grid in patches.
struct ImagePatches {
  int64_t Rows = 0, Cols = 0;
  std::vector<float> Values;
};

bool imagePatches(const RgbImage &Image, const ImagePreprocess &P, ImagePatches &Out, std::string &Error);

} // namespace moert

#endif
