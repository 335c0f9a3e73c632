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
  /// The windows over sequences [First, End) of an open dataset only (one
  /// part of a split): the stream is those sequences' tokens. Fails on an
  /// empty part or SeqLen < 1; What names the part in the message.
  static std::unique_ptr<IndexedSource> over(std::shared_ptr<const IndexedDataset> Data, int64_t Vocab, int64_t SeqLen,
                                             int64_t First, int64_t End, const std::string &What, std::string &Error);
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

  std::shared_ptr<const IndexedDataset> Data;
  int64_t Vocab = 0, SeqLen = 0;
  /// The first sequence of the stream (sequence s of the stream is the
  /// dataset's FirstSeq + s).
  int64_t FirstSeq = 0;
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

/// Another source's samples from Offset on: sample I is Base's sample
/// Offset + I. Held-out mock samples for evaluation are those far past any
/// index training reaches.
class OffsetSource final : public TokenSource {
public:
  OffsetSource(std::shared_ptr<const TokenSource> Base, int64_t Offset) : Base(std::move(Base)), Offset(Offset) {}
  int64_t vocab() const override { return Base->vocab(); }
  int64_t seqLen() const override { return Base->seqLen(); }
  void sample(int64_t Index, int32_t *Out) const override { Base->sample(Offset + Index, Out); }
  using TokenSource::sample;

private:
  std::shared_ptr<const TokenSource> Base;
  int64_t Offset;
};

/// Megatron-Core's split of a GPT dataset by sequence: Weights (training,
/// validation, test; missing ones are 0) normalised by their sum, their
/// running sums as book-ends, and part i the sequences [round(e_i * S),
/// round(e_{i+1} * S)) with round half to even, as Python's round()
/// (blended_megatron_dataset_config.py parse_and_normalize_split and
/// convert_split_vector_to_split_matrix; blended_megatron_dataset_builder.py
/// _build_megatron_dataset_splits; gpt_dataset.py numel_low_level_dataset
/// counts sequences). Empty Weights: everything trains. Requires non-negative
/// weights with a positive sum.
struct SequenceRange {
  int64_t First = 0, End = 0;
  int64_t size() const { return End - First; }
};
std::vector<SequenceRange> splitSequences(const std::vector<int64_t> &Weights, int64_t Sequences);

/// splitmix64: the counter-based hash the synthetic data draws from.
uint64_t mixHash(uint64_t X);

} // namespace moert

#endif
