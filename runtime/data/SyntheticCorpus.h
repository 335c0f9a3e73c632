//===- data/SyntheticCorpus.h - A small structured corpus for tests -------===//
//
// A stand-in for a tokenized text corpus that a model can actually learn
// from: documents drawn from a random order-2 Markov chain over the
// vocabulary. Each state (previous two tokens) has a few successors, chosen by
// hashing the state with the seed, with fixed skewed probabilities, so the
// chain needs no V^2 table and the text has real, learnable structure. Id 0 is
// the end-of-document token that closes every document (Megatron's
// preprocessing appends EOD the same way); the chain draws from [1, Vocab).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_SYNTHETICCORPUS_H
#define MOERT_DATA_SYNTHETICCORPUS_H

#include "data/IndexedDataset.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

struct MarkovCorpusOptions {
  int64_t Vocab = 0;  ///< at least 2
  int64_t Tokens = 0; ///< total tokens, EOD included; at least 1
  uint64_t Seed = 1;
  int64_t MinDocTokens = 16, MaxDocTokens = 256;
};

/// The end-of-document id.
constexpr int32_t MarkovEod = 0;

/// The corpus as documents, each ending with EOD; the last is shortened so
/// the total is exactly Options.Tokens. Empty, with Error set, on bad options.
std::vector<std::vector<int32_t>> markovCorpus(const MarkovCorpusOptions &Options, std::string &Error);

/// Megatron's choice: uint16 below 65500 ids, int32 otherwise.
TokenDType smallestTokenDType(int64_t Vocab);

/// Writes markovCorpus() as PREFIX.{bin,idx}, one sequence per document.
bool writeMarkovCorpus(const std::string &Prefix, const MarkovCorpusOptions &Options, std::string &Error);

} // namespace moert

#endif
