//===- data/TokenSource.h - Training samples by global sample index -------===//
//
// A TokenSource hands out training samples of SeqLen + 1 tokens: the model's
// input is the first SeqLen and its labels the last SeqLen (the next token at
// every position). Sample I is a pure function of I and the source's own
// settings, never of the parallel layout: whichever DP rank, micro batch or CP
// shard asks for global sample I gets the same tokens, which is what lets
// every layout reproduce the single-rank run.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_TOKENSOURCE_H
#define MOERT_DATA_TOKENSOURCE_H

#include "data/IndexedDataset.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moert {

class TokenSource {
public:
  virtual ~TokenSource();
  virtual int64_t vocab() const = 0;
  virtual int64_t seqLen() const = 0;
  /// Writes the seqLen() + 1 tokens of global sample Index (>= 0) to Out.
  virtual void sample(int64_t Index, int32_t *Out) const = 0;
  std::vector<int32_t> sample(int64_t Index) const;
};

/// A synthetic, learnable stream with no files: a fixed random permutation
/// Next of the vocabulary (from Seed) drives each sample, token t+1 being
/// Next[token t] except that with probability Noise it is a random id. The
/// first token and the noise come from a counter-based hash of (Seed, Index,
/// position), so samples are independent and cheap to address. A model can
/// learn the bigram table, so the loss falls towards the noise's entropy.
class MockSource final : public TokenSource {
public:
  MockSource(int64_t Vocab, int64_t SeqLen, uint64_t Seed, double Noise = 0.1);
  int64_t vocab() const override { return Vocab; }
  int64_t seqLen() const override { return SeqLen; }
  void sample(int64_t Index, int32_t *Out) const override;
  using TokenSource::sample;
  /// The permutation's successor of Token.
  int32_t next(int32_t Token) const { return Next[size_t(Token)]; }

private:
  int64_t Vocab, SeqLen;
  uint64_t Seed;
  uint64_t NoiseThreshold; ///< noise when a 64-bit hash falls below it
  std::vector<int32_t> Next;
};

/// Megatron-style windows over an indexed dataset: every sequence of every
/// document is concatenated in file order into one stream of T tokens, and
/// sample I is the SeqLen + 1 tokens starting at stream position I * SeqLen
/// (consecutive samples overlap by the one token that is both the last label
/// of one and the first input of the next), wrapping around to the start of
/// the stream past its end. Documents are not separated by an extra token: a
/// corpus that wants an end-of-document id carries it, as Megatron's
/// preprocessing appends EOD.
class IndexedSource final : public TokenSource {
public:
  /// Opens PREFIX.{bin,idx}, with every id checked against Vocab unless
  /// CheckTokens is false (then the caller must call dataset().checkTokens
  /// over every sequence before the first sample). Fails on any
  /// IndexedDataset error, on an empty corpus, or on SeqLen < 1.
  static std::unique_ptr<IndexedSource> open(const std::string &Prefix, int64_t Vocab, int64_t SeqLen,
                                             std::string &Error, bool CheckTokens = true);
  int64_t vocab() const override { return Vocab; }
  int64_t seqLen() const override { return SeqLen; }
  void sample(int64_t Index, int32_t *Out) const override;
  using TokenSource::sample;
  const IndexedDataset &dataset() const { return *Data; }
  /// Samples in one pass over the stream: T / SeqLen windows (at least 1).
  int64_t passSamples() const { return std::max<int64_t>(Start.back() / SeqLen, 1); }

private:
  IndexedSource() = default;
  /// Copies Count tokens of the stream from position Pos (< T) on, wrapping.
  void copyStream(int64_t Pos, int64_t Count, int32_t *Out) const;

  std::unique_ptr<IndexedDataset> Data;
  int64_t Vocab = 0, SeqLen = 0;
  /// Start[s]: stream position of sequence s's first token; Start[S] = T.
  std::vector<int64_t> Start;
};

/// Another source's first PassSamples samples, visited in a new order on
/// every pass: sample I is Base's sample Perm_p(I mod PassSamples), with p =
/// I / PassSamples and Perm_p a permutation drawn from (Seed, p) by
/// Fisher-Yates over splitmix64. The order is a function of I alone, so a run
/// resumed at any sample continues it exactly. Holds one pass's permutation
/// (8 bytes per sample) and builds the next when a pass ends.
class ShuffledSource final : public TokenSource {
public:
  ShuffledSource(std::shared_ptr<const TokenSource> Base, int64_t PassSamples, uint64_t Seed);
  int64_t vocab() const override { return Base->vocab(); }
  int64_t seqLen() const override { return Base->seqLen(); }
  void sample(int64_t Index, int32_t *Out) const override;
  using TokenSource::sample;
  /// The base sample that sample Index reads.
  int64_t baseIndex(int64_t Index) const;

private:
  std::shared_ptr<const TokenSource> Base;
  int64_t PassSamples;
  uint64_t Seed;
  mutable int64_t Pass = -1;
  mutable std::vector<int64_t> Perm;
};

/// splitmix64: the counter-based hash the synthetic data draws from.
uint64_t mixHash(uint64_t X);

} // namespace moert

#endif
