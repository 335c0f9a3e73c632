//===- TokenSourceTest.cpp - Sample windows, determinism, corpus builder --===//
#include "DataTestUtil.h"

#include "data/IndexedDatasetWriter.h"
#include "data/SyntheticCorpus.h"
#include "data/TokenSource.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

using namespace moert;
using namespace moert::test;

TEST(IndexedSource, WindowsCrossDocumentsAndWrapAround) {
  ScratchDir Dir;
  // Sequences of 5, 0, 3 | (empty document) | 7 and 2 tokens: the stream is
  // 0..16 in order, with ids chosen equal to stream positions.
  IndexedDatasetWriter W(TokenDType::UInt16);
  std::vector<int32_t> Stream;
  auto Add = [&](int N) {
    std::vector<int32_t> Seq;
    for (int I = 0; I < N; ++I) {
      Seq.push_back(int32_t(Stream.size()));
      Stream.push_back(int32_t(Stream.size()));
    }
    W.addSequence(Seq);
  };
  Add(5);
  Add(0);
  Add(3);
  W.endDocument();
  W.endDocument();
  Add(7);
  Add(2);
  W.endDocument();
  std::string Error;
  ASSERT_TRUE(W.finish(Dir.file("s"), Error)) << Error;
  const int64_t T = int64_t(Stream.size());
  ASSERT_EQ(T, 17);

  for (int64_t SeqLen : {1, 4, 6, 17, 40}) {
    SCOPED_TRACE(SeqLen);
    auto Src = IndexedSource::open(Dir.file("s"), 20, SeqLen, Error);
    ASSERT_NE(Src, nullptr) << Error;
    EXPECT_EQ(Src->seqLen(), SeqLen);
    EXPECT_EQ(Src->vocab(), 20);
    for (int64_t I = 0; I < 3 * T; ++I) {
      std::vector<int32_t> S = Src->sample(I);
      ASSERT_EQ(int64_t(S.size()), SeqLen + 1);
      for (int64_t K = 0; K <= SeqLen; ++K)
        ASSERT_EQ(S[size_t(K)], Stream[size_t((I * SeqLen + K) % T)]) << "sample " << I << " token " << K;
    }
  }
  // Huge indices do not overflow I * SeqLen.
  auto Src = IndexedSource::open(Dir.file("s"), 20, 6, Error);
  ASSERT_NE(Src, nullptr);
  int64_t Big = int64_t(1) << 61;
  unsigned __int128 Pos = (unsigned __int128)Big * 6 % 17;
  EXPECT_EQ(Src->sample(Big)[0], Stream[size_t(Pos)]);
}

TEST(ShuffledSource, EveryPassIsAPermutationDrawnFromTheSeed) {
  auto Base = std::make_shared<MockSource>(64, 8, 1);
  const int64_t N = 50;
  ShuffledSource A(Base, N, 7), Again(Base, N, 7), Other(Base, N, 8);
  std::vector<std::vector<int64_t>> Passes;
  for (int64_t P = 0; P < 3; ++P) {
    std::vector<int64_t> Order;
    for (int64_t K = 0; K < N; ++K)
      Order.push_back(A.baseIndex(P * N + K));
    std::vector<int64_t> Sorted = Order;
    std::sort(Sorted.begin(), Sorted.end());
    for (int64_t K = 0; K < N; ++K)
      ASSERT_EQ(Sorted[size_t(K)], K) << "pass " << P << " is not a permutation of the pass's samples";
    Passes.push_back(Order);
  }
  EXPECT_NE(Passes[0], Passes[1]);
  int64_t Identity = 0, SameAsOtherSeed = 0;
  for (int64_t K = 0; K < N; ++K) {
    Identity += Passes[0][size_t(K)] == K;
    SameAsOtherSeed += Passes[0][size_t(K)] == Other.baseIndex(K);
  }
  EXPECT_LT(Identity, N / 5);
  EXPECT_LT(SameAsOtherSeed, N / 5);
  // A function of the index alone, whatever was asked before (a resumed run).
  for (int64_t I : {123, 7, 140, 0, 99})
    EXPECT_EQ(Again.baseIndex(I), Passes[size_t(I / N)][size_t(I % N)]);
  EXPECT_EQ(A.sample(5), Base->sample(A.baseIndex(5)));
}

TEST(IndexedSource, ConsecutiveSamplesShareOneToken) {
  ScratchDir Dir;
  MarkovCorpusOptions O;
  O.Vocab = 50;
  O.Tokens = 1000;
  std::string Error;
  ASSERT_TRUE(writeMarkovCorpus(Dir.file("m"), O, Error)) << Error;
  auto Src = IndexedSource::open(Dir.file("m"), 50, 32, Error);
  ASSERT_NE(Src, nullptr) << Error;
  for (int64_t I = 0; I < 40; ++I)
    EXPECT_EQ(Src->sample(I).back(), Src->sample(I + 1).front());
}

TEST(IndexedSource, Errors) {
  ScratchDir Dir;
  std::string Error;
  EXPECT_EQ(IndexedSource::open(Dir.file("none"), 10, 4, Error), nullptr);
  EXPECT_NE(Error.find("cannot open"), std::string::npos) << Error;

  IndexedDatasetWriter Empty(TokenDType::Int32);
  Empty.addDocument({});
  ASSERT_TRUE(Empty.finish(Dir.file("e"), Error)) << Error;
  EXPECT_EQ(IndexedSource::open(Dir.file("e"), 10, 4, Error), nullptr);
  EXPECT_NE(Error.find("no tokens"), std::string::npos) << Error;

  IndexedDatasetWriter One(TokenDType::Int32);
  One.addDocument({3, 12});
  ASSERT_TRUE(One.finish(Dir.file("o"), Error)) << Error;
  EXPECT_EQ(IndexedSource::open(Dir.file("o"), 10, 4, Error), nullptr);
  EXPECT_NE(Error.find("token id 12"), std::string::npos) << Error;
  EXPECT_EQ(IndexedSource::open(Dir.file("o"), 20, 0, Error), nullptr);
  EXPECT_NE(Error.find("sequence length"), std::string::npos) << Error;
}

TEST(MockSource, DeterministicAndIndependentOfCallOrder) {
  MockSource A(97, 33, 7), B(97, 33, 7), C(97, 33, 8);
  std::vector<std::vector<int32_t>> Forward;
  for (int64_t I = 0; I < 20; ++I)
    Forward.push_back(A.sample(I));
  int Differs = 0;
  for (int64_t I = 19; I >= 0; --I) {
    EXPECT_EQ(B.sample(I), Forward[size_t(I)]);
    Differs += C.sample(I) != Forward[size_t(I)];
    for (int32_t T : Forward[size_t(I)]) {
      EXPECT_GE(T, 0);
      EXPECT_LT(T, 97);
    }
  }
  EXPECT_EQ(Differs, 20);
  EXPECT_NE(A.sample(0), A.sample(1));
}

TEST(MockSource, FollowsAPermutationWithNoise) {
  const int64_t V = 64, L = 256;
  MockSource Clean(V, L, 11, 0.0);
  std::set<int32_t> Image;
  for (int32_t T = 0; T < V; ++T)
    Image.insert(Clean.next(T));
  EXPECT_EQ(int64_t(Image.size()), V) << "Next must be a bijection";
  int Identity = 0;
  for (int32_t T = 0; T < V; ++T)
    Identity += Clean.next(T) == T;
  EXPECT_LT(Identity, 8) << "the permutation should be shuffled";
  for (int64_t I = 0; I < 10; ++I) {
    std::vector<int32_t> S = Clean.sample(I);
    for (int64_t K = 1; K <= L; ++K)
      ASSERT_EQ(S[size_t(K)], Clean.next(S[size_t(K - 1)]));
  }
  // With noise 0.25 about a quarter of transitions leave the permutation
  // (a random id can coincide with the successor: 1/64 of them do).
  MockSource Noisy(V, L, 11, 0.25);
  int64_t Off = 0, Total = 0;
  for (int64_t I = 0; I < 40; ++I) {
    std::vector<int32_t> S = Noisy.sample(I);
    for (int64_t K = 1; K <= L; ++K, ++Total)
      Off += S[size_t(K)] != Noisy.next(S[size_t(K - 1)]);
  }
  double Rate = double(Off) / double(Total);
  EXPECT_GT(Rate, 0.20);
  EXPECT_LT(Rate, 0.30);
}

TEST(MarkovCorpus, ExactSizeStructureAndDeterminism) {
  MarkovCorpusOptions O;
  O.Vocab = 300;
  O.Tokens = 20000;
  O.Seed = 5;
  std::string Error;
  auto Docs = markovCorpus(O, Error);
  ASSERT_FALSE(Docs.empty()) << Error;
  int64_t Total = 0;
  // Successors seen per (a, b) state: at most four by construction, while a
  // uniform stream of 20000 tokens over 299 words would show almost none
  // repeated.
  std::map<std::pair<int32_t, int32_t>, std::set<int32_t>> Next;
  std::map<std::pair<int32_t, int32_t>, int> Seen;
  for (const auto &D : Docs) {
    ASSERT_FALSE(D.empty());
    EXPECT_GE(int64_t(D.size()), 1);
    EXPECT_LE(int64_t(D.size()), O.MaxDocTokens);
    EXPECT_EQ(D.back(), MarkovEod);
    for (size_t K = 0; K + 1 < D.size(); ++K) {
      EXPECT_GE(D[K], 1);
      EXPECT_LT(D[K], 300);
      if (K >= 2 && K + 1 < D.size()) {
        Next[{D[K - 2], D[K - 1]}].insert(D[K]);
        ++Seen[{D[K - 2], D[K - 1]}];
      }
    }
    Total += int64_t(D.size());
  }
  EXPECT_EQ(Total, O.Tokens);
  int Repeated = 0;
  for (const auto &[State, Succ] : Next) {
    EXPECT_LE(Succ.size(), 4u);
    Repeated += Seen[State] > 1;
  }
  EXPECT_GT(Repeated, 100) << "the chain should revisit states";
  EXPECT_EQ(markovCorpus(O, Error), Docs);
  O.Seed = 6;
  EXPECT_NE(markovCorpus(O, Error), Docs);

  O.Vocab = 1;
  EXPECT_TRUE(markovCorpus(O, Error).empty());
  EXPECT_NE(Error.find("vocabulary"), std::string::npos);
  O.Vocab = 10;
  O.Tokens = 0;
  EXPECT_TRUE(markovCorpus(O, Error).empty());
  EXPECT_NE(Error.find("token count"), std::string::npos);
}

#ifdef MOERUN_MKDATA
namespace {
int runTool(const std::string &Args) {
  std::string Cmd = std::string(MOERUN_MKDATA) + " " + Args + " >/dev/null 2>&1";
  int Status = std::system(Cmd.c_str());
  return WIFEXITED(Status) ? WEXITSTATUS(Status) : -1;
}
} // namespace

TEST(MoerunMkdata, WritesAReadableCorpus) {
  ScratchDir Dir;
  ASSERT_EQ(runTool("--out " + Dir.file("c") + " --vocab 70000 --tokens 3000 --seed 9"), 0);
  std::string Error;
  auto D = IndexedDataset::open(Dir.file("c"), 70000, Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->numTokens(), 3000);
  EXPECT_EQ(D->dtype(), TokenDType::Int32); // too many ids for uint16
  // The same seed writes the same bytes; the library agrees with the tool.
  MarkovCorpusOptions O;
  O.Vocab = 70000;
  O.Tokens = 3000;
  O.Seed = 9;
  ASSERT_TRUE(writeMarkovCorpus(Dir.file("lib"), O, Error)) << Error;
  EXPECT_EQ(readBytes(Dir.file("c.bin")), readBytes(Dir.file("lib.bin")));
  EXPECT_EQ(readBytes(Dir.file("c.idx")), readBytes(Dir.file("lib.idx")));

  ASSERT_EQ(runTool("--out " + Dir.file("s") + " --vocab 500 --tokens 100"), 0);
  D = IndexedDataset::open(Dir.file("s"), 500, Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->dtype(), TokenDType::UInt16);
}

TEST(MoerunMkdata, RejectsBadArguments) {
  ScratchDir Dir;
  EXPECT_NE(runTool("--vocab 10 --tokens 10"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("x") + " --vocab ten --tokens 10"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("x") + " --vocab 1 --tokens 10"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("x") + " --vocab 10 --tokens 0"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("x") + " --vocab 10 --frobnicate 1"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("x") + " --vocab 10 --tokens"), 0);
  EXPECT_NE(runTool("--out " + Dir.file("nodir/x") + " --vocab 10 --tokens 5"), 0);
  EXPECT_FALSE(exists(Dir.file("x.idx")));
}
#endif

TEST(SplitSequences, MegatronsBookEndsRoundedHalfToEven) {
  auto Parts = [](std::vector<int64_t> W, int64_t S) {
    std::vector<std::pair<int64_t, int64_t>> Out;
    for (const SequenceRange &R : splitSequences(W, S))
      Out.push_back({R.First, R.End});
    return Out;
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  // No split: everything trains.
  EXPECT_EQ(Parts({}, 10), (V{{0, 10}, {10, 10}, {10, 10}}));
  // Megatron's default 969,30,1 over 1000 sequences.
  EXPECT_EQ(Parts({969, 30, 1}, 1000), (V{{0, 969}, {969, 999}, {999, 1000}}));
  // Missing weights are 0, and weights are relative.
  EXPECT_EQ(Parts({8, 2}, 10), Parts({80, 20, 0}, 10));
  // 1.5 and 2.5 round to the even neighbour, as Python's round() does.
  EXPECT_EQ(Parts({1, 1}, 3), (V{{0, 2}, {2, 3}, {3, 3}}));
  EXPECT_EQ(Parts({1, 1}, 5), (V{{0, 2}, {2, 5}, {5, 5}}));
  // The parts always tile [0, S).
  for (int64_t S : {1, 7, 151, 1000})
    for (std::vector<int64_t> W : {std::vector<int64_t>{1, 1, 1}, {969, 30, 1}, {3, 0, 4}}) {
      std::vector<SequenceRange> P = splitSequences(W, S);
      EXPECT_EQ(P[0].First, 0);
      EXPECT_EQ(P[0].End, P[1].First);
      EXPECT_EQ(P[1].End, P[2].First);
      EXPECT_EQ(P[2].End, S);
    }
}
