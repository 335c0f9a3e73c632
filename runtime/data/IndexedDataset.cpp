//===- data/IndexedDataset.cpp - Megatron-LM indexed dataset, mmap reader ===//
#include "data/IndexedDataset.h"

#include <cassert>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moert {

const char IndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

std::optional<size_t> tokenDTypeSize(uint8_t Code) {
  switch (TokenDType(Code)) {
  case TokenDType::UInt8:
  case TokenDType::Int8:
    return 1;
  case TokenDType::Int16:
  case TokenDType::UInt16:
    return 2;
  case TokenDType::Int32:
    return 4;
  case TokenDType::Int64:
    return 8;
  default:
    // Float token ids and unknown codes.
    return std::nullopt;
  }
}

std::string tokenDTypeName(uint8_t Code) {
  switch (TokenDType(Code)) {
  case TokenDType::UInt8:
    return "uint8";
  case TokenDType::Int8:
    return "int8";
  case TokenDType::Int16:
    return "int16";
  case TokenDType::Int32:
    return "int32";
  case TokenDType::Int64:
    return "int64";
  case TokenDType::Float64:
    return "float64";
  case TokenDType::Float32:
    return "float32";
  case TokenDType::UInt16:
    return "uint16";
  }
  return "code " + std::to_string(unsigned(Code));
}

std::unique_ptr<MappedFile> MappedFile::open(const std::string &Path, std::string &Error) {
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  if (Fd < 0) {
    Error = "cannot open '" + Path + "': " + std::strerror(errno);
    return nullptr;
  }
  struct stat St;
  if (fstat(Fd, &St) != 0 || !S_ISREG(St.st_mode)) {
    Error = "cannot read '" + Path + "': not a regular file";
    ::close(Fd);
    return nullptr;
  }
  std::unique_ptr<MappedFile> F(new MappedFile());
  F->Size = size_t(St.st_size);
  if (F->Size > 0) {
    void *P = mmap(nullptr, F->Size, PROT_READ, MAP_PRIVATE, Fd, 0);
    if (P == MAP_FAILED) {
      Error = "cannot map '" + Path + "': " + std::strerror(errno);
      ::close(Fd);
      return nullptr;
    }
    F->Data = static_cast<const unsigned char *>(P);
  }
  // The mapping stays valid after the descriptor is closed.
  ::close(Fd);
  return F;
}

MappedFile::~MappedFile() {
  if (Data)
    munmap(const_cast<unsigned char *>(Data), Size);
}

namespace {

template <typename T> T load(const unsigned char *At) {
  T V;
  std::memcpy(&V, At, sizeof(T));
  return V;
}

/// A token id of any integer dtype, widened.
int64_t loadToken(TokenDType DType, const unsigned char *At) {
  switch (DType) {
  case TokenDType::UInt8:
    return load<uint8_t>(At);
  case TokenDType::Int8:
    return load<int8_t>(At);
  case TokenDType::Int16:
    return load<int16_t>(At);
  case TokenDType::UInt16:
    return load<uint16_t>(At);
  case TokenDType::Int32:
    return load<int32_t>(At);
  case TokenDType::Int64:
    return load<int64_t>(At);
  default:
    break;
  }
  assert(false && "float dtypes are rejected at open");
  return -1;
}

} // namespace

TokenIdRange tokenDTypeRange(TokenDType DType) {
  auto Of = [](auto Type) {
    using T = decltype(Type);
    return TokenIdRange{int64_t(std::numeric_limits<T>::min()), int64_t(std::numeric_limits<T>::max())};
  };
  switch (DType) {
  case TokenDType::UInt8:
    return Of(uint8_t());
  case TokenDType::Int8:
    return Of(int8_t());
  case TokenDType::Int16:
    return Of(int16_t());
  case TokenDType::UInt16:
    return Of(uint16_t());
  case TokenDType::Int32:
    return Of(int32_t());
  case TokenDType::Int64:
    return Of(int64_t());
  default:
    return TokenIdRange{};
  }
}

std::unique_ptr<IndexedDataset> IndexedDataset::open(const std::string &Prefix, int64_t Vocab, std::string &Error) {
  std::unique_ptr<IndexedDataset> D = openIndex(Prefix, Error);
  if (!D)
    return nullptr;
  Error = D->checkTokens(Vocab, 0, D->numSequences());
  if (!Error.empty())
    return nullptr;
  return D;
}

std::unique_ptr<IndexedDataset> IndexedDataset::openIndex(const std::string &Prefix, std::string &Error) {
  const std::string IdxPath = Prefix + ".idx", BinPath = Prefix + ".bin";
  std::unique_ptr<IndexedDataset> D(new IndexedDataset());
  D->Idx = MappedFile::open(IdxPath, Error);
  if (!D->Idx)
    return nullptr;
  const unsigned char *I = D->Idx->data();
  const size_t IdxSize = D->Idx->size();
  auto Fail = [&](const std::string &Path, const std::string &Message) {
    Error = "'" + Path + "': " + Message;
    return nullptr;
  };

  if (IdxSize < IndexHeaderBytes)
    return Fail(IdxPath, "truncated index: " + std::to_string(IdxSize) + " bytes, the header alone needs " +
                             std::to_string(IndexHeaderBytes));
  if (std::memcmp(I, IndexMagic, sizeof(IndexMagic)) != 0)
    return Fail(IdxPath, "bad magic: not a Megatron MMIDIDX index");
  uint64_t Version = load<uint64_t>(I + 9);
  if (Version != 1)
    return Fail(IdxPath, "unsupported index version " + std::to_string(Version) + " (expected 1)");
  uint8_t Code = I[17];
  std::optional<size_t> TokenBytes = tokenDTypeSize(Code);
  if (!TokenBytes)
    return Fail(IdxPath, "unsupported token dtype " + tokenDTypeName(Code) + " (code " +
                             std::to_string(unsigned(Code)) + "); token ids must be an integer type");
  D->DType = TokenDType(Code);
  D->TokenBytes = *TokenBytes;
  uint64_t S = load<uint64_t>(I + 18), DocEntries = load<uint64_t>(I + 26);

  // Exact size the arrays need, without overflow: 12 bytes per sequence and
  // 8 per document entry, plus an optional int8 mode per sequence.
  unsigned __int128 Need =
      (unsigned __int128)IndexHeaderBytes + (unsigned __int128)S * 12 + (unsigned __int128)DocEntries * 8;
  if (Need > IdxSize)
    return Fail(IdxPath, "truncated index: " + std::to_string(S) + " sequences and " + std::to_string(DocEntries) +
                             " document entries need more than the file's " + std::to_string(IdxSize) + " bytes");
  size_t Trailing = IdxSize - size_t(Need);
  if (Trailing != 0 && Trailing != S)
    return Fail(IdxPath, std::to_string(Trailing) + " unexpected bytes after the document index");
  D->NumSequences = int64_t(S);
  D->NumDocIndices = int64_t(DocEntries);
  D->Lengths = I + IndexHeaderBytes;
  D->Pointers = D->Lengths + 4 * S;
  D->DocIndices = D->Pointers + 8 * S;

  if (DocEntries == 0)
    return Fail(IdxPath, "empty document index (it must start with 0)");
  if (D->documentIndex(0) != 0)
    return Fail(IdxPath, "document index starts at " + std::to_string(D->documentIndex(0)) + " instead of 0");
  for (int64_t K = 1; K < D->NumDocIndices; ++K)
    if (D->documentIndex(K) < D->documentIndex(K - 1))
      return Fail(IdxPath, "document index decreases at entry " + std::to_string(K));
  if (D->documentIndex(D->NumDocIndices - 1) != D->NumSequences)
    return Fail(IdxPath, "document index ends at " + std::to_string(D->documentIndex(D->NumDocIndices - 1)) +
                             " instead of the sequence count " + std::to_string(S));

  D->Bin = MappedFile::open(BinPath, Error);
  if (!D->Bin)
    return nullptr;
  const uint64_t BinSize = D->Bin->size();
  for (int64_t K = 0; K < D->NumSequences; ++K) {
    int64_t Len = D->sequenceLength(K), Ptr = D->sequencePointer(K);
    if (Len < 0)
      return Fail(IdxPath, "sequence " + std::to_string(K) + " has negative length " + std::to_string(Len));
    // Len < 2^31 and TokenBytes <= 8: the product cannot overflow.
    if (Ptr < 0 || uint64_t(Ptr) > BinSize || uint64_t(Len) * D->TokenBytes > BinSize - uint64_t(Ptr))
      return Fail(BinPath, "sequence " + std::to_string(K) + " (" + std::to_string(Len) + " tokens at byte " +
                               std::to_string(Ptr) + ") lies beyond the end of the " + std::to_string(BinSize) +
                               "-byte data file");
    D->TotalTokens += Len;
  }

  D->BinPath = BinPath;
  return D;
}

/// Ids must lie below this: the vocabulary, or without one int32's range.
static int64_t idLimit(int64_t Vocab) { return Vocab > 0 ? Vocab : int64_t(std::numeric_limits<int32_t>::max()) + 1; }

bool IndexedDataset::dtypeFitsVocab(int64_t Vocab) const {
  TokenIdRange R = tokenDTypeRange(DType);
  return R.Min >= 0 && R.Max < idLimit(Vocab);
}

std::string IndexedDataset::checkTokens(int64_t Vocab, int64_t First, int64_t End) const {
  assert(First >= 0 && First <= End && End <= NumSequences);
  if (dtypeFitsVocab(Vocab))
    return "";
  const int64_t Limit = idLimit(Vocab);
  for (int64_t K = First; K < End; ++K) {
    const unsigned char *At = Bin->data() + sequencePointer(K);
    for (int64_t T = 0, Len = sequenceLength(K); T < Len; ++T) {
      int64_t Id = loadToken(DType, At + T * TokenBytes);
      if (Id < 0 || Id >= Limit)
        return "'" + BinPath + "': token id " + std::to_string(Id) + " (sequence " + std::to_string(K) + ", position " +
               std::to_string(T) + ") is outside " +
               (Vocab > 0 ? "the vocabulary [0, " + std::to_string(Vocab) + ")" : std::string("the int32 range"));
    }
  }
  return "";
}

int64_t IndexedDataset::sequenceLength(int64_t Seq) const {
  assert(Seq >= 0 && Seq < NumSequences);
  return load<int32_t>(Lengths + 4 * Seq);
}

int64_t IndexedDataset::sequencePointer(int64_t Seq) const {
  assert(Seq >= 0 && Seq < NumSequences);
  return load<int64_t>(Pointers + 8 * Seq);
}

int64_t IndexedDataset::documentIndex(int64_t K) const {
  assert(K >= 0 && K < NumDocIndices);
  return load<int64_t>(DocIndices + 8 * K);
}

int32_t IndexedDataset::token(const unsigned char *At) const {
  // Checked by checkTokens before any read: every id fits int32.
  return int32_t(loadToken(DType, At));
}

void IndexedDataset::read(int64_t Seq, int64_t Offset, int64_t Count, int32_t *Out) const {
  assert(Offset >= 0 && Count >= 0 && Offset + Count <= sequenceLength(Seq));
  const unsigned char *At = Bin->data() + sequencePointer(Seq) + Offset * int64_t(TokenBytes);
  for (int64_t T = 0; T < Count; ++T)
    Out[T] = token(At + T * TokenBytes);
}

std::vector<int32_t> IndexedDataset::sequence(int64_t Seq) const {
  std::vector<int32_t> Out(size_t(sequenceLength(Seq)));
  read(Seq, 0, int64_t(Out.size()), Out.data());
  return Out;
}

} // namespace moert
