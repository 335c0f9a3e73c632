//===- data/TokenSource.cpp - Training samples by global sample index -----===//
#include "data/TokenSource.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace moert {

TokenSource::~TokenSource() = default;

std::vector<int32_t> TokenSource::sample(int64_t Index) const {
  std::vector<int32_t> Out(size_t(seqLen() + 1));
  sample(Index, Out.data());
  return Out;
}

uint64_t mixHash(uint64_t X) {
  X += 0x9e3779b97f4a7c15ULL;
  X = (X ^ (X >> 30)) * 0xbf58476d1ce4e5b9ULL;
  X = (X ^ (X >> 27)) * 0x94d049bb133111ebULL;
  return X ^ (X >> 31);
}

namespace {
/// Hash of a tuple, by chaining.
uint64_t hash3(uint64_t A, uint64_t B, uint64_t C) { return mixHash(mixHash(mixHash(A) ^ B) ^ C); }
} // namespace

MockSource::MockSource(int64_t Vocab, int64_t SeqLen, uint64_t Seed, double Noise)
    : Vocab(Vocab), SeqLen(SeqLen), Seed(Seed) {
  assert(Vocab > 0 && SeqLen > 0 && Noise >= 0 && Noise <= 1);
  // 2^64 * Noise, saturated: Noise == 1 makes every token random.
  NoiseThreshold = Noise >= 1 ? ~uint64_t(0) : uint64_t(std::ldexp(Noise, 64));
  // Fisher-Yates from the seed alone, so the table is the same everywhere.
  Next.resize(size_t(Vocab));
  for (int64_t I = 0; I < Vocab; ++I)
    Next[size_t(I)] = int32_t(I);
  for (int64_t I = Vocab - 1; I > 0; --I) {
    int64_t J = int64_t(hash3(Seed, 0x7065726dULL, uint64_t(I)) % uint64_t(I + 1));
    std::swap(Next[size_t(I)], Next[size_t(J)]);
  }
}

void MockSource::sample(int64_t Index, int32_t *Out) const {
  assert(Index >= 0);
  const uint64_t V = uint64_t(Vocab);
  Out[0] = int32_t(hash3(Seed, uint64_t(Index), 0) % V);
  for (int64_t T = 1; T <= SeqLen; ++T) {
    uint64_t H = hash3(Seed, uint64_t(Index), uint64_t(T));
    Out[T] = H < NoiseThreshold ? int32_t(mixHash(H) % V) : Next[size_t(Out[T - 1])];
  }
}

std::unique_ptr<IndexedSource> IndexedSource::open(const std::string &Prefix, int64_t Vocab, int64_t SeqLen,
                                                   std::string &Error, bool CheckTokens) {
  if (SeqLen < 1) {
    Error = "sequence length must be at least 1, got " + std::to_string(SeqLen);
    return nullptr;
  }
  std::shared_ptr<IndexedDataset> Data =
      CheckTokens ? IndexedDataset::open(Prefix, Vocab, Error) : IndexedDataset::openIndex(Prefix, Error);
  if (!Data)
    return nullptr;
  int64_t S = Data->numSequences();
  return over(std::move(Data), Vocab, SeqLen, 0, S, "'" + Prefix + "': the dataset", Error);
}

std::unique_ptr<IndexedSource> IndexedSource::over(std::shared_ptr<const IndexedDataset> Data, int64_t Vocab,
                                                   int64_t SeqLen, int64_t First, int64_t End, const std::string &What,
                                                   std::string &Error) {
  if (SeqLen < 1) {
    Error = "sequence length must be at least 1, got " + std::to_string(SeqLen);
    return nullptr;
  }
  assert(First >= 0 && First <= End && End <= Data->numSequences());
  std::unique_ptr<IndexedSource> S(new IndexedSource());
  S->Data = std::move(Data);
  S->Vocab = Vocab;
  S->SeqLen = SeqLen;
  S->FirstSeq = First;
  const int64_t N = End - First;
  S->Start.resize(size_t(N + 1));
  S->Start[0] = 0;
  for (int64_t K = 0; K < N; ++K)
    S->Start[size_t(K + 1)] = S->Start[size_t(K)] + S->Data->sequenceLength(First + K);
  if (S->Start.back() == 0) {
    Error = What + " holds no tokens";
    return nullptr;
  }
  return S;
}

std::vector<SequenceRange> splitSequences(const std::vector<int64_t> &Weights, int64_t Sequences) {
  if (Weights.empty())
    return {{0, Sequences}, {Sequences, Sequences}, {Sequences, Sequences}};
  std::vector<double> W(3, 0.0);
  double Sum = 0;
  for (size_t I = 0; I < Weights.size() && I < 3; ++I)
    Sum += double(Weights[I]);
  for (size_t I = 0; I < Weights.size() && I < 3; ++I)
    W[I] = double(Weights[I]) / Sum;
  // Running sums in Python's order, then round half to even (the default
  // rounding mode of nearbyint).
  double Ends[4] = {0, W[0], W[0] + W[1], W[0] + W[1] + W[2]};
  std::vector<SequenceRange> Parts;
  for (int I = 0; I < 3; ++I)
    Parts.push_back({int64_t(std::nearbyint(Ends[I] * double(Sequences))),
                     int64_t(std::nearbyint(Ends[I + 1] * double(Sequences)))});
  return Parts;
}

void IndexedSource::copyStream(int64_t Pos, int64_t Count, int32_t *Out) const {
  const int64_t Total = Start.back();
  // The sequence holding Pos: the last one starting at or before it
  // (upper_bound skips empty sequences, which start where the next does).
  int64_t Seq = int64_t(std::upper_bound(Start.begin(), Start.end(), Pos) - Start.begin()) - 1;
  while (Count > 0) {
    if (Pos == Total) {
      Pos = 0;
      Seq = 0;
    }
    int64_t Off = Pos - Start[size_t(Seq)];
    int64_t Len = Start[size_t(Seq + 1)] - Start[size_t(Seq)];
    int64_t N = std::min(Count, Len - Off);
    if (N > 0) {
      Data->read(FirstSeq + Seq, Off, N, Out);
      Out += N;
      Count -= N;
      Pos += N;
    }
    ++Seq;
  }
}

void IndexedSource::sample(int64_t Index, int32_t *Out) const {
  assert(Index >= 0);
  const int64_t Total = Start.back();
  // (Index * SeqLen) mod Total without overflow.
  int64_t Pos = int64_t((unsigned __int128)uint64_t(Index) * uint64_t(SeqLen) % uint64_t(Total));
  copyStream(Pos, SeqLen + 1, Out);
}

ShuffledSource::ShuffledSource(std::shared_ptr<const TokenSource> B, int64_t N, uint64_t S)
    : Base(std::move(B)), PassSamples(std::max<int64_t>(N, 1)), Seed(S) {}

int64_t ShuffledSource::baseIndex(int64_t Index) const {
  assert(Index >= 0);
  int64_t P = Index / PassSamples;
  if (P != Pass) {
    Perm.resize(size_t(PassSamples));
    for (int64_t K = 0; K < PassSamples; ++K)
      Perm[size_t(K)] = K;
    uint64_t State = mixHash(Seed ^ mixHash(uint64_t(P) + 0x5348554646ull));
    for (int64_t K = PassSamples - 1; K > 0; --K) {
      State = mixHash(State);
      std::swap(Perm[size_t(K)], Perm[size_t(State % uint64_t(K + 1))]);
    }
    Pass = P;
  }
  return Perm[size_t(Index % PassSamples)];
}

void ShuffledSource::sample(int64_t Index, int32_t *Out) const { Base->sample(baseIndex(Index), Out); }

} // namespace moert
