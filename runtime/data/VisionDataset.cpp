//===- data/VisionDataset.cpp - Decoded image patches on disk -------------===//
#include "data/VisionDataset.h"

#include "data/IndexedDatasetWriter.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

using namespace moert;

namespace {

constexpr char Magic[8] = {'M', 'O', 'E', 'V', 'I', 'S', 'N', '\0'};
constexpr uint64_t Version = 1;

template <typename T> bool get(std::ifstream &In, T &V) {
  return static_cast<bool>(In.read(reinterpret_cast<char *>(&V), sizeof(V)));
}

} // namespace

bool moert::writeVisionDataset(const std::string &Prefix, const VisionDatasetHeader &Header,
                               const std::vector<VisionImageEntry> &Entries,
                               const std::vector<std::vector<float>> &Images, std::string &Error) {
  if (Entries.size() != Images.size()) {
    Error = "one grid per image";
    return false;
  }
  std::vector<unsigned char> Idx(Magic, Magic + sizeof(Magic)), Bin;
  auto Put = [](std::vector<unsigned char> &Out, const void *V, size_t Bytes) {
    Out.insert(Out.end(), static_cast<const unsigned char *>(V), static_cast<const unsigned char *>(V) + Bytes);
  };
  const uint64_t Count = Entries.size();
  for (uint64_t V : {Version, Count, Header.PatchSize, Header.TemporalPatch, Header.MergeSize})
    Put(Idx, &V, sizeof(V));
  Put(Idx, Header.Mean, sizeof(Header.Mean));
  Put(Idx, Header.Std, sizeof(Header.Std));
  uint64_t Offset = 0;
  for (size_t I = 0; I < Entries.size(); ++I) {
    const VisionImageEntry &E = Entries[I];
    if (Images[I].size() != E.patches() * Header.patchDim()) {
      Error = "image " + std::to_string(I) + " has " + std::to_string(Images[I].size()) + " values, its grid " +
              std::to_string(E.patches() * Header.patchDim());
      return false;
    }
    for (uint64_t V : {E.Frames, E.Rows, E.Cols, Offset})
      Put(Idx, &V, sizeof(V));
    Put(Bin, Images[I].data(), Images[I].size() * sizeof(float));
    Offset += Images[I].size();
  }
  // The index last: a reader never finds an index whose images are not there.
  return writeFileAtomically(Prefix + ".vision.bin", Bin, Error) &&
         writeFileAtomically(Prefix + ".vision.idx", Idx, Error);
}

bool VisionDataset::open(const std::string &Prefix, std::string &Error) {
  const std::string IdxPath = Prefix + ".vision.idx";
  BinPath = Prefix + ".vision.bin";
  std::ifstream In(IdxPath, std::ios::binary);
  struct stat St;
  if (!In || ::stat(BinPath.c_str(), &St) != 0) {
    Error = "cannot read '" + IdxPath + "' and '" + BinPath + "': " + std::strerror(errno);
    return false;
  }
  char Got[8];
  uint64_t V = 0, Count = 0;
  if (!In.read(Got, 8) || std::memcmp(Got, Magic, 8) != 0) {
    Error = "'" + IdxPath + "' is not a vision index (its magic is not MOEVISN)";
    return false;
  }
  if (!get(In, V) || V != Version) {
    Error = "'" + IdxPath + "' is of version " + std::to_string(V) + "; moerun reads version 1";
    return false;
  }
  bool Ok = get(In, Count) && get(In, Header.PatchSize) && get(In, Header.TemporalPatch) && get(In, Header.MergeSize);
  for (float &M : Header.Mean)
    Ok = Ok && get(In, M);
  for (float &S : Header.Std)
    Ok = Ok && get(In, S);
  if (!Ok || !Header.PatchSize || !Header.TemporalPatch || !Header.MergeSize) {
    Error = "'" + IdxPath + "' has a truncated or empty header";
    return false;
  }
  const uint64_t Values = uint64_t(St.st_size) / sizeof(float);
  Entries.resize(size_t(Count));
  uint64_t Expect = 0;
  for (uint64_t I = 0; I < Count; ++I) {
    VisionImageEntry &E = Entries[size_t(I)];
    if (!get(In, E.Frames) || !get(In, E.Rows) || !get(In, E.Cols) || !get(In, E.Offset)) {
      Error = "'" + IdxPath + "' ends inside image " + std::to_string(I) + " of " + std::to_string(Count);
      return false;
    }
    if (!E.Frames || !E.Rows || !E.Cols || E.Rows % Header.MergeSize || E.Cols % Header.MergeSize ||
        E.Offset != Expect || E.Offset + E.patches() * Header.patchDim() > Values) {
      Error = "'" + IdxPath + "': image " + std::to_string(I) + " (" + std::to_string(E.Frames) + " x " +
              std::to_string(E.Rows) + " x " + std::to_string(E.Cols) +
              " patches) does not lie where the images before it end, whole, in '" + BinPath + "'";
      return false;
    }
    Expect = E.Offset + E.patches() * Header.patchDim();
  }
  return true;
}

std::vector<float> VisionDataset::read(size_t I) const {
  const VisionImageEntry &E = Entries.at(I);
  std::vector<float> Out(size_t(E.patches() * Header.patchDim()));
  std::ifstream In(BinPath, std::ios::binary);
  In.seekg(std::streamoff(E.Offset * sizeof(float)));
  In.read(reinterpret_cast<char *>(Out.data()), std::streamsize(Out.size() * sizeof(float)));
  return Out;
}
