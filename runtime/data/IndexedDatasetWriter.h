//===- data/IndexedDatasetWriter.h - Writes Megatron's indexed dataset ----===//
//
// Builds PREFIX.bin and PREFIX.idx in the layout IndexedDataset.h describes,
// like Megatron's IndexedDatasetBuilder: sequences are added one at a time and
// endDocument() closes a document. The files are written under temporary
// names and renamed into place, .bin first: a reader that finds PREFIX.idx
// also finds the complete PREFIX.bin it describes, and a failed write leaves
// any earlier dataset at PREFIX untouched.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_DATA_INDEXEDDATASETWRITER_H
#define MOERT_DATA_INDEXEDDATASETWRITER_H

#include "data/IndexedDataset.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// Writes Bytes to Path through a temporary file in the same directory, an
/// fsync and a rename, so Path holds either its old content or all of the new.
bool writeFileAtomically(const std::string &Path, const std::vector<unsigned char> &Bytes, std::string &Error);

class IndexedDatasetWriter {
public:
  /// DType must be an integer dtype (finish() reports otherwise).
  explicit IndexedDatasetWriter(TokenDType DType) : DType(DType) {}

  /// Appends one sequence of the current document.
  void addSequence(const int32_t *Tokens, size_t Count);
  void addSequence(const std::vector<int32_t> &Tokens) { addSequence(Tokens.data(), Tokens.size()); }
  /// Closes the current document (Megatron's end_document()).
  void endDocument() { DocIndices.push_back(int64_t(Lengths.size())); }
  /// A document of one sequence.
  void addDocument(const std::vector<int32_t> &Tokens) {
    addSequence(Tokens);
    endDocument();
  }

  /// Writes PREFIX.bin and PREFIX.idx. Sequences added after the last
  /// endDocument() are closed into a final document. Fails (false, Error set)
  /// on a token id the dtype cannot hold or on an I/O error.
  bool finish(const std::string &Prefix, std::string &Error);

private:
  TokenDType DType;
  std::vector<int32_t> Tokens;
  std::vector<int32_t> Lengths;
  std::vector<int64_t> DocIndices{0};
};

} // namespace moert

#endif
