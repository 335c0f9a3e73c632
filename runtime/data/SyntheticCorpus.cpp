//===- data/SyntheticCorpus.cpp - A small structured corpus for tests -----===//
#include "data/SyntheticCorpus.h"

#include "data/IndexedDatasetWriter.h"
#include "data/TokenSource.h"

#include <algorithm>

namespace moert {

namespace {
/// Successor probabilities of every state, in 1/64ths: skewed, so a model that
/// learns the chain beats the uniform loss by a wide margin.
constexpr uint64_t SuccessorWeights[] = {36, 16, 8, 4};
constexpr uint64_t WeightTotal = 64;
} // namespace

TokenDType smallestTokenDType(int64_t Vocab) { return Vocab < 65500 ? TokenDType::UInt16 : TokenDType::Int32; }

std::vector<std::vector<int32_t>> markovCorpus(const MarkovCorpusOptions &O, std::string &Error) {
  if (O.Vocab < 2 || O.Vocab > int64_t(INT32_MAX)) {
    Error = "vocabulary size must be in [2, 2^31), got " + std::to_string(O.Vocab);
    return {};
  }
  if (O.Tokens < 1) {
    Error = "token count must be positive, got " + std::to_string(O.Tokens);
    return {};
  }
  if (O.MinDocTokens < 1 || O.MaxDocTokens < O.MinDocTokens) {
    Error = "document lengths must satisfy 1 <= min <= max";
    return {};
  }
  const uint64_t Words = uint64_t(O.Vocab - 1); // ids 1..Vocab-1
  uint64_t Counter = 0;
  auto Draw = [&]() { return mixHash(O.Seed * 0x100000001b3ULL + ++Counter); };
  auto Word = [&](uint64_t H) { return int32_t(1 + H % Words); };

  std::vector<std::vector<int32_t>> Docs;
  int64_t Left = O.Tokens;
  while (Left > 0) {
    int64_t Span = O.MaxDocTokens - O.MinDocTokens + 1;
    int64_t Len = O.MinDocTokens + int64_t(Draw() % uint64_t(Span));
    Len = std::min(Len, Left);
    std::vector<int32_t> Doc;
    Doc.reserve(size_t(Len));
    // Len - 1 words then EOD; a length-1 document is just EOD.
    for (int64_t T = 0; T + 1 < Len; ++T) {
      if (T < 2) {
        Doc.push_back(Word(Draw()));
        continue;
      }
      uint64_t State = uint64_t(Doc[size_t(T - 2)]) * uint64_t(O.Vocab) + uint64_t(Doc[size_t(T - 1)]);
      uint64_t Pick = Draw() % WeightTotal, K = 0;
      while (Pick >= SuccessorWeights[K]) {
        Pick -= SuccessorWeights[K];
        ++K;
      }
      Doc.push_back(Word(mixHash(mixHash(O.Seed ^ State) + K)));
    }
    Doc.push_back(MarkovEod);
    Left -= Len;
    Docs.push_back(std::move(Doc));
  }
  return Docs;
}

bool writeMarkovCorpus(const std::string &Prefix, const MarkovCorpusOptions &O, std::string &Error) {
  std::vector<std::vector<int32_t>> Docs = markovCorpus(O, Error);
  if (Docs.empty())
    return false;
  IndexedDatasetWriter W(smallestTokenDType(O.Vocab));
  for (const auto &D : Docs)
    W.addDocument(D);
  return W.finish(Prefix, Error);
}

} // namespace moert
