//===- IndexedDatasetTest.cpp - Megatron indexed dataset reader, writer ---===//
#include "DataTestUtil.h"

#include "data/IndexedDataset.h"
#include "data/IndexedDatasetWriter.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace moert;
using namespace moert::test;

namespace {

/// An .idx built field by field, as Megatron's _IndexWriter packs it, so
/// tests can break any one field.
struct RawIndex {
  std::string Magic = std::string("MMIDIDX\0\0", 9);
  uint64_t Version = 1;
  uint8_t Code = 4;
  std::vector<int32_t> Lengths;
  std::vector<int64_t> Pointers;
  std::vector<int64_t> Docs;
  // Counts written in the header; default to the arrays' sizes.
  int64_t SeqCount = -1, DocCount = -1;

  template <typename T> static void put(std::vector<unsigned char> &B, T V) {
    unsigned char Buf[sizeof(T)];
    std::memcpy(Buf, &V, sizeof(T));
    B.insert(B.end(), Buf, Buf + sizeof(T));
  }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> B(Magic.begin(), Magic.end());
    put<uint64_t>(B, Version);
    put<uint8_t>(B, Code);
    put<uint64_t>(B, SeqCount >= 0 ? uint64_t(SeqCount) : Lengths.size());
    put<uint64_t>(B, DocCount >= 0 ? uint64_t(DocCount) : Docs.size());
    for (int32_t L : Lengths)
      put(B, L);
    for (int64_t P : Pointers)
      put(B, P);
    for (int64_t D : Docs)
      put(B, D);
    return B;
  }
};

/// Two documents of int32 tokens: {[1 2 3], [4 5]} and {[6 7 8 9]}.
struct SmallCorpus {
  RawIndex Idx;
  std::vector<unsigned char> Bin;
  SmallCorpus() {
    Idx.Lengths = {3, 2, 4};
    Idx.Pointers = {0, 12, 20};
    Idx.Docs = {0, 2, 3};
    for (int32_t T = 1; T <= 9; ++T)
      RawIndex::put(Bin, T);
  }
  void write(const std::string &Prefix) const {
    writeBytes(Prefix + ".idx", Idx.bytes());
    writeBytes(Prefix + ".bin", Bin);
  }
};

/// Opens Prefix expecting failure; returns the message.
std::string openError(const std::string &Prefix, int64_t Vocab = 0) {
  std::string Error;
  auto D = IndexedDataset::open(Prefix, Vocab, Error);
  EXPECT_EQ(D, nullptr) << "opened a malformed dataset";
  EXPECT_FALSE(Error.empty());
  return Error;
}

} // namespace

TEST(IndexedDataset, ReadsAHandWrittenMegatronFile) {
  ScratchDir Dir;
  SmallCorpus C;
  C.write(Dir.file("c"));
  std::string Error;
  auto D = IndexedDataset::open(Dir.file("c"), 10, Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->dtype(), TokenDType::Int32);
  EXPECT_EQ(D->numSequences(), 3);
  EXPECT_EQ(D->numDocuments(), 2);
  EXPECT_EQ(D->numTokens(), 9);
  EXPECT_EQ(D->documentIndex(1), 2);
  EXPECT_EQ(D->sequencePointer(2), 20);
  EXPECT_EQ(D->sequence(0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(D->sequence(1), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(D->sequence(2), (std::vector<int32_t>{6, 7, 8, 9}));
  int32_t Part[2];
  D->read(2, 1, 2, Part);
  EXPECT_EQ(Part[0], 7);
  EXPECT_EQ(Part[1], 8);
}

TEST(IndexedDataset, WriterProducesMegatronBytes) {
  ScratchDir Dir;
  IndexedDatasetWriter W(TokenDType::Int32);
  W.addSequence({1, 2, 3});
  W.addSequence({4, 5});
  W.endDocument();
  W.addDocument({6, 7, 8, 9});
  std::string Error;
  ASSERT_TRUE(W.finish(Dir.file("w"), Error)) << Error;
  SmallCorpus C;
  EXPECT_EQ(readBytes(Dir.file("w.idx")), C.Idx.bytes());
  EXPECT_EQ(readBytes(Dir.file("w.bin")), C.Bin);
  // No temporary file is left behind.
  EXPECT_FALSE(exists(Dir.file("w.idx.tmp." + std::to_string(getpid()))));
  EXPECT_FALSE(exists(Dir.file("w.bin.tmp." + std::to_string(getpid()))));
}

TEST(IndexedDataset, RoundTripsEveryIntegerDType) {
  ScratchDir Dir;
  for (TokenDType T : {TokenDType::UInt8, TokenDType::Int8, TokenDType::Int16, TokenDType::UInt16, TokenDType::Int32,
                       TokenDType::Int64}) {
    SCOPED_TRACE(tokenDTypeName(uint8_t(T)));
    // Documents of varied shape, an empty sequence and an empty document.
    std::vector<std::vector<std::vector<int32_t>>> Docs = {
        {{5, 0, 17}, {}, {100, 3}}, {}, {{127}}, {{1, 2, 3, 4, 5, 6, 7}}};
    IndexedDatasetWriter W(T);
    for (const auto &Doc : Docs) {
      for (const auto &Seq : Doc)
        W.addSequence(Seq);
      W.endDocument();
    }
    std::string Prefix = Dir.file("rt" + std::to_string(unsigned(T))), Error;
    ASSERT_TRUE(W.finish(Prefix, Error)) << Error;
    auto D = IndexedDataset::open(Prefix, 128, Error);
    ASSERT_NE(D, nullptr) << Error;
    EXPECT_EQ(D->dtype(), T);
    EXPECT_EQ(D->numDocuments(), int64_t(Docs.size()));
    int64_t Seq = 0;
    for (size_t Doc = 0; Doc < Docs.size(); ++Doc) {
      EXPECT_EQ(D->documentIndex(int64_t(Doc)), Seq);
      for (const auto &Expected : Docs[Doc])
        EXPECT_EQ(D->sequence(Seq++), Expected);
    }
    EXPECT_EQ(D->numSequences(), Seq);
    EXPECT_EQ(D->numTokens(), 13);
    EXPECT_EQ(int64_t(readBytes(Prefix + ".bin").size()), 13 * int64_t(*tokenDTypeSize(uint8_t(T))));
  }
}

TEST(IndexedDataset, TrailingUnfinishedDocumentIsClosed) {
  ScratchDir Dir;
  IndexedDatasetWriter W(TokenDType::UInt16);
  W.addDocument({1});
  W.addSequence({2, 3});
  std::string Error;
  ASSERT_TRUE(W.finish(Dir.file("t"), Error)) << Error;
  auto D = IndexedDataset::open(Dir.file("t"), 0, Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->numDocuments(), 2);
  EXPECT_EQ(D->sequence(1), (std::vector<int32_t>{2, 3}));
}

TEST(IndexedDataset, WriterRejectsIdsTheDTypeCannotHold) {
  ScratchDir Dir;
  IndexedDatasetWriter W(TokenDType::UInt16);
  W.addDocument({1, 70000});
  std::string Error;
  EXPECT_FALSE(W.finish(Dir.file("big"), Error));
  EXPECT_NE(Error.find("70000"), std::string::npos) << Error;
  EXPECT_FALSE(exists(Dir.file("big.idx")));
  EXPECT_FALSE(exists(Dir.file("big.bin")));

  IndexedDatasetWriter F(TokenDType::Float32);
  F.addDocument({1});
  EXPECT_FALSE(F.finish(Dir.file("f"), Error));
  EXPECT_NE(Error.find("float32"), std::string::npos) << Error;
}

TEST(IndexedDataset, FailedWriteKeepsThePreviousDataset) {
  ScratchDir Dir;
  SmallCorpus C;
  C.write(Dir.file("keep"));
  IndexedDatasetWriter W(TokenDType::Int32);
  W.addDocument({1});
  std::string Error;
  EXPECT_FALSE(W.finish(Dir.file("missing-dir/x"), Error));
  EXPECT_NE(Error.find("missing-dir"), std::string::npos) << Error;
  IndexedDatasetWriter Bad(TokenDType::UInt8);
  Bad.addDocument({300});
  EXPECT_FALSE(Bad.finish(Dir.file("keep"), Error));
  EXPECT_EQ(readBytes(Dir.file("keep.idx")), C.Idx.bytes());
  EXPECT_EQ(readBytes(Dir.file("keep.bin")), C.Bin);
}

TEST(IndexedDataset, MultimodalModesAreTolerated) {
  ScratchDir Dir;
  SmallCorpus C;
  std::vector<unsigned char> Idx = C.Idx.bytes();
  Idx.insert(Idx.end(), {0, 1, 0}); // one int8 mode per sequence
  writeBytes(Dir.file("mm.idx"), Idx);
  writeBytes(Dir.file("mm.bin"), C.Bin);
  std::string Error;
  auto D = IndexedDataset::open(Dir.file("mm"), 10, Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->sequence(2), (std::vector<int32_t>{6, 7, 8, 9}));
}

TEST(IndexedDatasetErrors, MissingFiles) {
  ScratchDir Dir;
  EXPECT_NE(openError(Dir.file("none")).find("none.idx"), std::string::npos);
  SmallCorpus C;
  writeBytes(Dir.file("nobin.idx"), C.Idx.bytes());
  std::string E = openError(Dir.file("nobin"));
  EXPECT_NE(E.find("nobin.bin"), std::string::npos) << E;
  EXPECT_NE(E.find("No such file"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, BadMagic) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Idx.Magic = std::string("TNTIDX\0\0\0", 9); // Megatron's legacy format
  C.write(Dir.file("m"));
  EXPECT_NE(openError(Dir.file("m")).find("bad magic"), std::string::npos);
}

TEST(IndexedDatasetErrors, UnsupportedVersion) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Idx.Version = 2;
  C.write(Dir.file("v"));
  std::string E = openError(Dir.file("v"));
  EXPECT_NE(E.find("unsupported index version 2"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, UnsupportedDType) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Idx.Code = 7;
  C.write(Dir.file("f32"));
  std::string E = openError(Dir.file("f32"));
  EXPECT_NE(E.find("float32"), std::string::npos) << E;
  C.Idx.Code = 9;
  C.write(Dir.file("c9"));
  E = openError(Dir.file("c9"));
  EXPECT_NE(E.find("code 9"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, TruncatedIndex) {
  ScratchDir Dir;
  SmallCorpus C;
  std::vector<unsigned char> Full = C.Idx.bytes();
  writeBytes(Dir.file("h.idx"), {Full.begin(), Full.begin() + 20});
  writeBytes(Dir.file("h.bin"), C.Bin);
  std::string E = openError(Dir.file("h"));
  EXPECT_NE(E.find("truncated index"), std::string::npos) << E;
  // Header intact, arrays one byte short.
  writeBytes(Dir.file("a.idx"), {Full.begin(), Full.end() - 1});
  writeBytes(Dir.file("a.bin"), C.Bin);
  E = openError(Dir.file("a"));
  EXPECT_NE(E.find("truncated index"), std::string::npos) << E;
  // A header claiming 2^62 sequences must not overflow the size check.
  C.Idx.SeqCount = int64_t(1) << 62;
  C.write(Dir.file("huge"));
  E = openError(Dir.file("huge"));
  EXPECT_NE(E.find("truncated index"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, TrailingGarbage) {
  ScratchDir Dir;
  SmallCorpus C;
  std::vector<unsigned char> Idx = C.Idx.bytes();
  Idx.insert(Idx.end(), {1, 2, 3, 4, 5});
  writeBytes(Dir.file("g.idx"), Idx);
  writeBytes(Dir.file("g.bin"), C.Bin);
  std::string E = openError(Dir.file("g"));
  EXPECT_NE(E.find("5 unexpected bytes"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, InconsistentDocumentIndex) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Idx.Docs = {0, 2};
  C.write(Dir.file("end"));
  std::string E = openError(Dir.file("end"));
  EXPECT_NE(E.find("instead of the sequence count 3"), std::string::npos) << E;
  C.Idx.Docs = {1, 3};
  C.write(Dir.file("start"));
  E = openError(Dir.file("start"));
  EXPECT_NE(E.find("starts at 1"), std::string::npos) << E;
  C.Idx.Docs = {0, 3, 2, 3};
  C.write(Dir.file("dec"));
  E = openError(Dir.file("dec"));
  EXPECT_NE(E.find("decreases at entry 2"), std::string::npos) << E;
  C.Idx.Docs = {};
  C.write(Dir.file("empty"));
  E = openError(Dir.file("empty"));
  EXPECT_NE(E.find("empty document index"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, NegativeLength) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Idx.Lengths[1] = -2;
  C.write(Dir.file("n"));
  std::string E = openError(Dir.file("n"));
  EXPECT_NE(E.find("negative length"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, PointersBeyondTheDataFile) {
  ScratchDir Dir;
  SmallCorpus C;
  C.Bin.resize(C.Bin.size() - 1); // last sequence loses its last byte
  C.write(Dir.file("short"));
  std::string E = openError(Dir.file("short"));
  EXPECT_NE(E.find("sequence 2"), std::string::npos) << E;
  EXPECT_NE(E.find("beyond the end"), std::string::npos) << E;
  SmallCorpus P;
  P.Idx.Pointers[0] = int64_t(1) << 62; // must not overflow ptr + len
  P.write(Dir.file("far"));
  E = openError(Dir.file("far"));
  EXPECT_NE(E.find("sequence 0"), std::string::npos) << E;
  P.Idx.Pointers[0] = -4;
  P.write(Dir.file("neg"));
  E = openError(Dir.file("neg"));
  EXPECT_NE(E.find("beyond the end"), std::string::npos) << E;
}

TEST(IndexedDatasetErrors, TokenIdsOutsideTheVocabulary) {
  ScratchDir Dir;
  SmallCorpus C;
  C.write(Dir.file("v"));
  std::string E = openError(Dir.file("v"), 9); // id 9 is out of [0, 9)
  EXPECT_NE(E.find("token id 9"), std::string::npos) << E;
  EXPECT_NE(E.find("sequence 2, position 3"), std::string::npos) << E;
  std::string Error;
  EXPECT_NE(IndexedDataset::open(Dir.file("v"), 10, Error), nullptr) << Error;

  SmallCorpus Neg;
  int32_t Minus = -1;
  std::memcpy(Neg.Bin.data() + 4, &Minus, 4);
  Neg.write(Dir.file("neg"));
  E = openError(Dir.file("neg"));
  EXPECT_NE(E.find("token id -1"), std::string::npos) << E;

  // int64 ids beyond int32 are refused even without a vocabulary.
  RawIndex Wide;
  Wide.Code = 5;
  Wide.Lengths = {1};
  Wide.Pointers = {0};
  Wide.Docs = {0, 1};
  std::vector<unsigned char> Bin;
  RawIndex::put<int64_t>(Bin, int64_t(1) << 40);
  writeBytes(Dir.file("wide.idx"), Wide.bytes());
  writeBytes(Dir.file("wide.bin"), Bin);
  E = openError(Dir.file("wide"));
  EXPECT_NE(E.find("int32 range"), std::string::npos) << E;
}

TEST(IndexedDataset, TokenCheckCoversAnyRangeOfSequences) {
  ScratchDir Dir;
  SmallCorpus C;
  C.write(Dir.file("c"));
  std::string Error;
  // The index opens without reading a token; id 9 (sequence 2) is only
  // found by the share of the check that covers sequence 2.
  auto D = IndexedDataset::openIndex(Dir.file("c"), Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_EQ(D->checkTokens(9, 0, 2), "");
  EXPECT_EQ(D->checkTokens(9, 3, 3), "");
  std::string E = D->checkTokens(9, 2, 3);
  EXPECT_NE(E.find("token id 9 (sequence 2, position 3) is outside the vocabulary [0, 9)"), std::string::npos) << E;
  EXPECT_NE(E.find("c.bin'"), std::string::npos) << E;
  EXPECT_EQ(D->checkTokens(10, 0, 3), "");
}

TEST(IndexedDataset, DTypesThatCannotHoldABadIdAreNotScanned) {
  EXPECT_EQ(tokenDTypeRange(TokenDType::UInt16).Max, 65535);
  EXPECT_EQ(tokenDTypeRange(TokenDType::UInt8).Max, 255);
  EXPECT_EQ(tokenDTypeRange(TokenDType::Int8).Min, -128);
  EXPECT_EQ(tokenDTypeRange(TokenDType::Int32).Max, int64_t(INT32_MAX));
  EXPECT_FALSE(tokenDTypeRange(TokenDType::Float32).contains(0));

  // A uint16 corpus holding 65535 is in range for a vocabulary above it
  // (no scan) and out of range for one of 65535 (scanned and found).
  ScratchDir Dir;
  RawIndex Idx;
  Idx.Code = 8;
  Idx.Lengths = {2};
  Idx.Pointers = {0};
  Idx.Docs = {0, 1};
  std::vector<unsigned char> Bin;
  RawIndex::put<uint16_t>(Bin, 7);
  RawIndex::put<uint16_t>(Bin, 65535);
  writeBytes(Dir.file("u.idx"), Idx.bytes());
  writeBytes(Dir.file("u.bin"), Bin);
  std::string Error;
  auto D = IndexedDataset::openIndex(Dir.file("u"), Error);
  ASSERT_NE(D, nullptr) << Error;
  EXPECT_TRUE(D->dtypeFitsVocab(70000));
  EXPECT_EQ(D->checkTokens(70000, 0, 1), "");
  EXPECT_FALSE(D->dtypeFitsVocab(65535));
  EXPECT_NE(D->checkTokens(65535, 0, 1).find("token id 65535 (sequence 0, position 1)"), std::string::npos);
}
