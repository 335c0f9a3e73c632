//===- moerun-mkdata.cpp - Writes a small synthetic training corpus -------===//
//
//   moerun-mkdata --out PREFIX --vocab V --tokens N [--seed S]
//                 [--min-doc L] [--max-doc L]
//
// Writes PREFIX.bin and PREFIX.idx, a Megatron indexed dataset of N tokens
// drawn from a random order-2 Markov chain over V ids (data/SyntheticCorpus.h),
// so tests and demos train on a real corpus file without downloading one.
//
//===----------------------------------------------------------------------===//
#include "data/IndexedDataset.h"
#include "data/SyntheticCorpus.h"

#include "llvm/Support/CommandLine.h"
#include <cstdio>
#include <string>

using namespace moert;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory MkdataCategory("moerun-mkdata options");
cl::opt<std::string> Out("out", cl::desc("Write PREFIX.bin and PREFIX.idx"), cl::value_desc("PREFIX"), cl::Required,
                         cl::cat(MkdataCategory));
cl::opt<int64_t> Vocab("vocab", cl::desc("Token ids are below this (the model's vocabulary)"), cl::value_desc("V"),
                       cl::Required, cl::cat(MkdataCategory));
cl::opt<int64_t> Tokens("tokens", cl::desc("Tokens to write"), cl::value_desc("N"), cl::Required,
                        cl::cat(MkdataCategory));
cl::opt<uint64_t> Seed("seed", cl::desc("Seed of the Markov chain"), cl::value_desc("S"), cl::init(1),
                       cl::cat(MkdataCategory));
cl::opt<int64_t> MinDoc("min-doc", cl::desc("Shortest document, in tokens"), cl::value_desc("L"),
                        cl::cat(MkdataCategory));
cl::opt<int64_t> MaxDoc("max-doc", cl::desc("Longest document, in tokens"), cl::value_desc("L"),
                        cl::cat(MkdataCategory));

int fail(const std::string &Message) {
  std::fprintf(stderr, "moerun-mkdata: error: %s\n", Message.c_str());
  return 1;
}
} // namespace

int main(int Argc, char **Argv) {
  cl::HideUnrelatedOptions(MkdataCategory);
  if (!cl::ParseCommandLineOptions(Argc, Argv, "moerun-mkdata: writes a small synthetic training corpus\n"))
    return 1;
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
