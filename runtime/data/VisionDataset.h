//===- data/VisionDataset.h - Decoded image patches on disk -----*- C++ -*-===//
//
// The images of a vision-language corpus, already decoded and cut into the
// vision tower's patches (data/ImagePatches.h), beside the token dataset:
// moerun-mkdata --images writes PREFIX.vision.bin and PREFIX.vision.idx.
// All little-endian:
//
//   PREFIX.vision.idx
//     8 bytes    magic "MOEVISN\0"
//     uint64     version (= 1)
//     uint64     image count N
//     uint64     patch size, temporal patch, merge size (the processor's)
//     float32[6] mean and std per channel (the processor's normalisation)
//     N x { uint64 frames, rows, cols (the image's grid, in patches);
//           uint64 offset (in values, into .bin) }
//   PREFIX.vision.bin
//     float32 values: image i's frames x rows x cols patches, each
//     3 x temporal patch x patch size^2 values, from its offset, in merge
//     order (block row, block column, the block's rows and columns)
//
// Both files are written through a temporary and a rename, the index last.
// Opening validates the whole index against the .bin's size. Errors are
// returned as messages naming the file.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_VISIONDATASET_H
#define MOERT_DATA_VISIONDATASET_H

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

struct VisionImageEntry {
  uint64_t Frames = 1, Rows = 0, Cols = 0, Offset = 0;
  uint64_t patches() const { return Frames * Rows * Cols; }
};

struct VisionDatasetHeader {
  uint64_t PatchSize = 0, TemporalPatch = 0, MergeSize = 0;
  float Mean[3] = {0, 0, 0}, Std[3] = {1, 1, 1};
  uint64_t patchDim() const { return 3 * TemporalPatch * PatchSize * PatchSize; }
};

/// Writes the pair; Images[i] holds image i's values (Entries[i] its grid;
/// offsets are computed). False with Error on an I/O failure or a size that
/// does not match its grid.
bool writeVisionDataset(const std::string &Prefix, const VisionDatasetHeader &Header,
                        const std::vector<VisionImageEntry> &Entries, const std::vector<std::vector<float>> &Images,
                        std::string &Error);

class VisionDataset {
public:
  bool open(const std::string &Prefix, std::string &Error);
  const VisionDatasetHeader &header() const { return Header; }
  const std::vector<VisionImageEntry> &images() const { return Entries; }
  /// Image I's values (patches() x patchDim()).
  std::vector<float> read(size_t I) const;

private:
  std::string BinPath;
  VisionDatasetHeader Header;
  std::vector<VisionImageEntry> Entries;
};

} // namespace moert

#endif
