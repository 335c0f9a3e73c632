//===- moerun-mkdata.cpp - Writes a small synthetic training corpus -------===//
//
//   moerun-mkdata --out PREFIX --vocab V --tokens N [--seed S]
//                 [--min-doc L] [--max-doc L]
//   moerun-mkdata --out PREFIX --images FILE,... [--patch-size P]
//                 [--merge-size M] [--min-pixels N] [--max-pixels N]
//                 [--image-mean R,G,B] [--image-std R,G,B]
//
// Writes PREFIX.bin and PREFIX.idx, a Megatron indexed dataset of N tokens
// drawn from a random order-2 Markov chain over V ids (data/SyntheticCorpus.h),
// so tests and demos train on a real corpus file without downloading one.
// With --images, decodes the PNG and JPEG files into the vision tower's
// patches as the Qwen-VL image processor does (data/ImagePatches.h) and
// writes PREFIX.vision.bin and PREFIX.vision.idx (data/VisionDataset.h).
//
//===----------------------------------------------------------------------===//
#include "data/ImagePatches.h"
#include "data/IndexedDataset.h"
#include "data/SyntheticCorpus.h"
#include "data/VisionDataset.h"

#include "llvm/Support/CommandLine.h"
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

using namespace moert;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory MkdataCategory("moerun-mkdata options");
cl::opt<std::string> Out("out", cl::desc("Write PREFIX.bin and PREFIX.idx"), cl::value_desc("PREFIX"), cl::Required,
                         cl::cat(MkdataCategory));
cl::opt<int64_t> Vocab("vocab", cl::desc("Token ids are below this (the model's vocabulary)"), cl::value_desc("V"),
                       cl::cat(MkdataCategory));
cl::opt<int64_t> Tokens("tokens", cl::desc("Tokens to write"), cl::value_desc("N"), cl::cat(MkdataCategory));
cl::opt<uint64_t> Seed("seed", cl::desc("Seed of the Markov chain"), cl::value_desc("S"), cl::init(1),
                       cl::cat(MkdataCategory));
cl::opt<int64_t> MinDoc("min-doc", cl::desc("Shortest document, in tokens"), cl::value_desc("L"),
                        cl::cat(MkdataCategory));
cl::opt<int64_t> MaxDoc("max-doc", cl::desc("Longest document, in tokens"), cl::value_desc("L"),
                        cl::cat(MkdataCategory));

cl::list<std::string> Images("images", cl::desc("PNG or JPEG files to decode into PREFIX.vision.{bin,idx}"),
                             cl::value_desc("FILE,..."), cl::CommaSeparated, cl::cat(MkdataCategory));
cl::opt<int64_t> PatchSize("patch-size", cl::desc("Vision patch side, in pixels (Qwen3-VL: 16)"), cl::init(16),
                           cl::cat(MkdataCategory));
cl::opt<int64_t> MergeSize("merge-size", cl::desc("Patches merged per side into one token (2)"), cl::init(2),
                           cl::cat(MkdataCategory));
cl::opt<int64_t> MinPixels("min-pixels", cl::desc("Smallest resized image, in pixels (65536)"), cl::init(65536),
                           cl::cat(MkdataCategory));
cl::opt<int64_t> MaxPixels("max-pixels", cl::desc("Largest resized image, in pixels (16777216)"), cl::init(16777216),
                           cl::cat(MkdataCategory));
cl::list<float> ImageMean("image-mean", cl::desc("Per-channel mean (0.5,0.5,0.5)"), cl::CommaSeparated,
                          cl::cat(MkdataCategory));
cl::list<float> ImageStd("image-std", cl::desc("Per-channel standard deviation (0.5,0.5,0.5)"), cl::CommaSeparated,
                         cl::cat(MkdataCategory));

int fail(const std::string &Message) {
  std::fprintf(stderr, "moerun-mkdata: error: %s\n", Message.c_str());
  return 1;
}
/// --images: every file's patches into PREFIX.vision.{bin,idx}.
int writeImages() {
  ImagePreprocess P;
  P.PatchSize = PatchSize;
  P.MergeSize = MergeSize;
  P.MinPixels = MinPixels;
  P.MaxPixels = MaxPixels;
  if (P.PatchSize < 1 || P.MergeSize < 1 || P.MinPixels < 1 || P.MaxPixels < P.MinPixels)
    return fail("--patch-size and --merge-size must be positive and --min-pixels at most --max-pixels");
  for (auto [List, Dst, Name] : {std::tuple{&ImageMean, P.Mean, "--image-mean"}, {&ImageStd, P.Std, "--image-std"}}) {
    if (List->empty())
      continue;
    if (List->size() != 3)
      return fail(std::string(Name) + " takes three values, one per channel");
    for (size_t C = 0; C < 3; ++C)
      Dst[C] = (*List)[C];
  }
  for (float S : P.Std)
    if (!(S > 0))
      return fail("--image-std must be positive");
  VisionDatasetHeader H;
  H.PatchSize = uint64_t(P.PatchSize);
  H.TemporalPatch = uint64_t(P.TemporalPatch);
  H.MergeSize = uint64_t(P.MergeSize);
  std::copy(P.Mean, P.Mean + 3, H.Mean);
  std::copy(P.Std, P.Std + 3, H.Std);
  std::vector<VisionImageEntry> Entries;
  std::vector<std::vector<float>> Values;
  uint64_t Patches = 0;
  for (const std::string &File : Images) {
    RgbImage Image;
    ImagePatches Out;
    std::string Error;
    if (!readImageFile(File, Image, Error))
      return fail(Error);
    if (!imagePatches(Image, P, Out, Error))
      return fail("'" + File + "': " + Error);
    VisionImageEntry E;
    E.Rows = uint64_t(Out.Rows);
    E.Cols = uint64_t(Out.Cols);
    Patches += E.patches();
    Entries.push_back(E);
    Values.push_back(std::move(Out.Values));
  }
  std::string Error;
  if (!writeVisionDataset(Out, H, Entries, Values, Error))
    return fail(Error);
  VisionDataset Check;
  if (!Check.open(Out, Error))
    return fail("written images unreadable: " + Error);
  std::printf("wrote %s.vision.bin and %s.vision.idx: %zu images, %llu patches of %llu values (%llu tokens after "
              "the %lld x %lld merge)\n",
              Out.c_str(), Out.c_str(), Entries.size(), (unsigned long long)Patches, (unsigned long long)H.patchDim(),
              (unsigned long long)(Patches / (H.MergeSize * H.MergeSize)), (long long)P.MergeSize,
              (long long)P.MergeSize);
  return 0;
}
} // namespace

int main(int Argc, char **Argv) {
  cl::HideUnrelatedOptions(MkdataCategory);
  if (!cl::ParseCommandLineOptions(Argc, Argv, "moerun-mkdata: writes a small synthetic training corpus\n"))
    return 1;
  if (!Images.empty())
    return writeImages();
  if (!Vocab.getNumOccurrences() || !Tokens.getNumOccurrences())
    return fail("--vocab and --tokens are required (or --images)");
  MarkovCorpusOptions O;
  for (auto [Opt, Name] :
       {std::pair{&Vocab, "--vocab"}, {&Tokens, "--tokens"}, {&MinDoc, "--min-doc"}, {&MaxDoc, "--max-doc"}})
    if (*Opt < 0)
      return fail(std::string(Name) + " needs a non-negative integer, got " + std::to_string(int64_t(*Opt)));
  O.Vocab = Vocab;
  O.Tokens = Tokens;
  O.Seed = Seed;
  if (MinDoc.getNumOccurrences())
    O.MinDocTokens = MinDoc;
  if (MaxDoc.getNumOccurrences())
    O.MaxDocTokens = MaxDoc;
  std::string Error;
  if (!writeMarkovCorpus(Out, O, Error))
    return fail(Error);
  // Read it back: the tool never leaves a corpus the runtime would reject.
  auto D = IndexedDataset::open(Out, O.Vocab, Error);
  if (!D)
    return fail("written corpus unreadable: " + Error);
  std::printf("wrote %s.bin and %s.idx: %lld tokens in %lld documents, "
              "vocabulary %lld, %s\n",
              Out.c_str(), Out.c_str(), (long long)D->numTokens(), (long long)D->numDocuments(), (long long)O.Vocab,
              tokenDTypeName(uint8_t(D->dtype())).c_str());
  return 0;
}
