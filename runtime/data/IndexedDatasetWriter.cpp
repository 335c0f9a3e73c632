//===- data/IndexedDatasetWriter.cpp - Writes Megatron's indexed dataset --===//
#include "data/IndexedDatasetWriter.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unistd.h>

namespace moert {

void IndexedDatasetWriter::addSequence(const int32_t *T, size_t Count) {
  Tokens.insert(Tokens.end(), T, T + Count);
  Lengths.push_back(int32_t(Count));
}

namespace {

void storeToken(TokenDType DType, int32_t Id, std::vector<unsigned char> &Out) {
  unsigned char Buf[8];
  size_t N = *tokenDTypeSize(uint8_t(DType));
  switch (DType) {
  case TokenDType::UInt8: {
    uint8_t V = uint8_t(Id);
    std::memcpy(Buf, &V, 1);
    break;
  }
  case TokenDType::Int8: {
    int8_t V = int8_t(Id);
    std::memcpy(Buf, &V, 1);
    break;
  }
  case TokenDType::Int16: {
    int16_t V = int16_t(Id);
    std::memcpy(Buf, &V, 2);
    break;
  }
  case TokenDType::UInt16: {
    uint16_t V = uint16_t(Id);
    std::memcpy(Buf, &V, 2);
    break;
  }
  case TokenDType::Int32:
    std::memcpy(Buf, &Id, 4);
    break;
  default: {
    int64_t V = Id;
    std::memcpy(Buf, &V, 8);
    break;
  }
  }
  Out.insert(Out.end(), Buf, Buf + N);
}

template <typename T> void append(std::vector<unsigned char> &Out, T V) {
  unsigned char Buf[sizeof(T)];
  std::memcpy(Buf, &V, sizeof(T));
  Out.insert(Out.end(), Buf, Buf + sizeof(T));
}

} // namespace

bool writeFileAtomically(const std::string &Path, const std::vector<unsigned char> &Bytes, std::string &Error) {
  std::string Tmp = Path + ".tmp." + std::to_string(getpid());
  std::FILE *F = std::fopen(Tmp.c_str(), "wb");
  if (!F) {
    Error = "cannot create '" + Tmp + "': " + std::strerror(errno);
    return false;
  }
  bool Ok = Bytes.empty() || std::fwrite(Bytes.data(), 1, Bytes.size(), F) == Bytes.size();
  int WriteErrno = errno;
  Ok = std::fflush(F) == 0 && Ok;
  Ok = fsync(fileno(F)) == 0 && Ok;
  Ok = std::fclose(F) == 0 && Ok;
  if (!Ok) {
    Error = "cannot write '" + Tmp + "': " + std::strerror(WriteErrno);
    std::remove(Tmp.c_str());
    return false;
  }
  if (std::rename(Tmp.c_str(), Path.c_str()) != 0) {
    Error = "cannot rename '" + Tmp + "' to '" + Path + "': " + std::strerror(errno);
    std::remove(Tmp.c_str());
    return false;
  }
  return true;
}

bool IndexedDatasetWriter::finish(const std::string &Prefix, std::string &Error) {
  std::optional<size_t> TokenBytes = tokenDTypeSize(uint8_t(DType));
  if (!TokenBytes) {
    Error = "cannot write token dtype " + tokenDTypeName(uint8_t(DType)) + ": token ids must be an integer type";
    return false;
  }
  if (DocIndices.back() != int64_t(Lengths.size()))
    endDocument();

  std::vector<unsigned char> Bin;
  Bin.reserve(Tokens.size() * *TokenBytes);
  for (size_t K = 0; K < Tokens.size(); ++K) {
    if (!tokenDTypeRange(DType).contains(Tokens[K])) {
      Error = "token id " + std::to_string(Tokens[K]) + " does not fit " + tokenDTypeName(uint8_t(DType));
      return false;
    }
    storeToken(DType, Tokens[K], Bin);
  }

  std::vector<unsigned char> Idx(IndexMagic, IndexMagic + sizeof(IndexMagic));
  append<uint64_t>(Idx, 1);
  append<uint8_t>(Idx, uint8_t(DType));
  append<uint64_t>(Idx, Lengths.size());
  append<uint64_t>(Idx, DocIndices.size());
  for (int32_t L : Lengths)
    append<int32_t>(Idx, L);
  int64_t Pointer = 0;
  for (int32_t L : Lengths) {
    append<int64_t>(Idx, Pointer);
    Pointer += int64_t(L) * int64_t(*TokenBytes);
  }
  for (int64_t D : DocIndices)
    append<int64_t>(Idx, D);

  return writeFileAtomically(Prefix + ".bin", Bin, Error) && writeFileAtomically(Prefix + ".idx", Idx, Error);
}

} // namespace moert
