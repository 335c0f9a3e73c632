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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace moert;

namespace {

void usage(std::FILE *To) {
  std::fprintf(To, "usage: moerun-mkdata --out PREFIX --vocab V --tokens N "
                   "[--seed S] [--min-doc L] [--max-doc L]\n");
}

/// A whole-string base-10 integer.
bool parseInt(const char *S, long long &Out) {
  errno = 0;
  char *End = nullptr;
  Out = std::strtoll(S, &End, 10);
  return errno == 0 && End != S && *End == '\0';
}

} // namespace

int main(int Argc, char **Argv) {
  std::string Out;
  MarkovCorpusOptions O;
  bool HaveVocab = false, HaveTokens = false;
  for (int I = 1; I < Argc; ++I) {
    std::string Arg = Argv[I];
    if (Arg == "-h" || Arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (I + 1 >= Argc) {
      std::fprintf(stderr, "moerun-mkdata: error: '%s' needs a value\n",
                   Arg.c_str());
      usage(stderr);
      return 1;
    }
    const char *Value = Argv[++I];
    if (Arg == "--out") {
      Out = Value;
      continue;
    }
    long long N = 0;
    if (Arg != "--vocab" && Arg != "--tokens" && Arg != "--seed" &&
        Arg != "--min-doc" && Arg != "--max-doc") {
      std::fprintf(stderr, "moerun-mkdata: error: unknown option '%s'\n",
                   Arg.c_str());
      usage(stderr);
      return 1;
    }
    if (!parseInt(Value, N) || N < 0) {
      std::fprintf(stderr,
                   "moerun-mkdata: error: '%s' needs a non-negative integer, "
                   "got '%s'\n",
                   Arg.c_str(), Value);
      return 1;
    }
    if (Arg == "--vocab") {
      O.Vocab = N;
      HaveVocab = true;
    } else if (Arg == "--tokens") {
      O.Tokens = N;
      HaveTokens = true;
    } else if (Arg == "--seed") {
      O.Seed = uint64_t(N);
    } else if (Arg == "--min-doc") {
      O.MinDocTokens = N;
    } else {
      O.MaxDocTokens = N;
    }
  }
  if (Out.empty() || !HaveVocab || !HaveTokens) {
    std::fprintf(stderr,
                 "moerun-mkdata: error: --out, --vocab and --tokens are "
                 "required\n");
    usage(stderr);
    return 1;
  }
  std::string Error;
  if (!writeMarkovCorpus(Out, O, Error)) {
    std::fprintf(stderr, "moerun-mkdata: error: %s\n", Error.c_str());
    return 1;
  }
  // Read it back: the tool never leaves a corpus the runtime would reject.
  auto D = IndexedDataset::open(Out, O.Vocab, Error);
  if (!D) {
    std::fprintf(stderr,
                 "moerun-mkdata: error: written corpus unreadable: %s\n",
                 Error.c_str());
    return 1;
  }
  std::printf("wrote %s.bin and %s.idx: %lld tokens in %lld documents, "
              "vocabulary %lld, %s\n",
              Out.c_str(), Out.c_str(), (long long)D->numTokens(),
              (long long)D->numDocuments(), (long long)O.Vocab,
              tokenDTypeName(uint8_t(D->dtype())).c_str());
  return 0;
}
