//===- data/IndexedDataset.h - Megatron-LM's indexed dataset, read by mmap ===//
//
// Megatron-LM tokenizes corpora into an "MMapIndexedDataset": a pair of files
// PREFIX.bin (the token ids of every sequence, back to back, in one integer
// dtype) and PREFIX.idx (where each sequence starts). The .idx layout, all
// little-endian, as megatron/core/datasets/indexed_dataset.py writes it:
//
//   9 bytes   magic "MMIDIDX\0\0"
//   uint64    version (= 1)
//   uint8     dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//             6 float64, 7 float32, 8 uint16)
//   uint64    sequence count S
//   uint64    document count D (entries of the document index, which starts
//             at 0 and ends at S: the file holds D - 1 documents)
//   int32[S]  sequence lengths, in tokens
//   int64[S]  sequence pointers, byte offsets into .bin
//   int64[D]  document indices: document i is sequences [doc[i], doc[i+1])
//   int8[S]   sequence modes, only in multimodal datasets (ignored here)
//
// The header is 34 bytes, so the arrays after it are not aligned: every read
// goes through memcpy. Opening validates the whole index (every sequence lies
// inside .bin) without reading .bin; checkTokens() then checks the token ids
// of a range of sequences, so that a job can split that pass over its ranks,
// and skips it when the dtype cannot hold an id outside the vocabulary. Once
// every sequence is checked, reads cannot fail. Errors are returned as
// messages, never thrown.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_INDEXEDDATASET_H
#define MOERT_DATA_INDEXEDDATASET_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moert {

/// Megatron's DType codes.
enum class TokenDType : uint8_t {
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float64 = 6,
  Float32 = 7,
  UInt16 = 8,
};

/// Bytes per token of an integer dtype; nullopt for codes that are not
/// integer token types (floats, unknown codes).
std::optional<size_t> tokenDTypeSize(uint8_t Code);
/// "int32", "uint16", ...; "code N" for unknown codes.
std::string tokenDTypeName(uint8_t Code);

/// The ids an integer dtype can hold, [Min, Max].
struct TokenIdRange {
  int64_t Min = 0, Max = -1;
  bool contains(int64_t Id) const { return Id >= Min && Id <= Max; }
};
/// Empty for float dtypes.
TokenIdRange tokenDTypeRange(TokenDType DType);

/// The 9-byte magic of an .idx file.
extern const char IndexMagic[9];
/// Bytes before the sequence lengths.
constexpr size_t IndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

/// A read-only file mapping (unmapped on destruction). An empty file maps to
/// no memory.
class MappedFile {
public:
  static std::unique_ptr<MappedFile> open(const std::string &Path, std::string &Error);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const unsigned char *data() const { return Data; }
  size_t size() const { return Size; }

private:
  MappedFile() = default;
  const unsigned char *Data = nullptr;
  size_t Size = 0;
};

class IndexedDataset {
public:
  /// Maps PREFIX.idx and PREFIX.bin and validates the index against the
  /// size of .bin, reading no token. Returns null and sets Error to a message
  /// naming the file and the problem.
  static std::unique_ptr<IndexedDataset> openIndex(const std::string &Prefix, std::string &Error);
  /// openIndex, then checkTokens over every sequence.
  static std::unique_ptr<IndexedDataset> open(const std::string &Prefix, int64_t Vocab, std::string &Error);

  /// Checks that the ids of sequences [First, End) lie in [0, Vocab) (Vocab
  /// > 0) or fit int32 (Vocab == 0). Returns "" or a message naming .bin, the
  /// id, its sequence and position. Reads nothing when the dtype's range
  /// already lies inside.
  std::string checkTokens(int64_t Vocab, int64_t First, int64_t End) const;
  /// True when no id of this dtype can fall outside [0, Vocab).
  bool dtypeFitsVocab(int64_t Vocab) const;

  TokenDType dtype() const { return DType; }
  int64_t numSequences() const { return NumSequences; }
  /// Documents (entries of the document index minus one).
  int64_t numDocuments() const { return NumDocIndices - 1; }
  int64_t numTokens() const { return TotalTokens; }

  int64_t sequenceLength(int64_t Seq) const;
  /// Byte offset of the sequence in .bin.
  int64_t sequencePointer(int64_t Seq) const;
  /// Entry I of the document index (0 <= I <= numDocuments()): document D
  /// holds sequences [documentIndex(D), documentIndex(D + 1)).
  int64_t documentIndex(int64_t I) const;

  /// Copies Count tokens of sequence Seq, from token Offset on, to Out.
  /// Requires Offset + Count <= sequenceLength(Seq).
  void read(int64_t Seq, int64_t Offset, int64_t Count, int32_t *Out) const;
  std::vector<int32_t> sequence(int64_t Seq) const;

private:
  IndexedDataset() = default;
  int32_t token(const unsigned char *At) const;

  std::unique_ptr<MappedFile> Idx, Bin;
  std::string BinPath;
  TokenDType DType = TokenDType::Int32;
  size_t TokenBytes = 4;
  int64_t NumSequences = 0, NumDocIndices = 0, TotalTokens = 0;
  const unsigned char *Lengths = nullptr, *Pointers = nullptr, *DocIndices = nullptr;
};

} // namespace moert

#endif
