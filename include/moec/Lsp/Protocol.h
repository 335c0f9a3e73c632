//===- Protocol.h - LSP positions, URIs and JSON-RPC codes ------*- C++ -*-===//
//
// The pieces of the Language Server Protocol that are about encoding rather
// than features: LSP positions count UTF-16 code units on 0-based lines while
// moec's locations are byte pointers into a SourceMgr buffer, and documents
// are named by URIs while Sema names buffers by path.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LSP_PROTOCOL_H
#define MOEC_LSP_PROTOCOL_H

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"
#include <string>
#include <vector>

namespace moec::lsp {

/// JSON-RPC and LSP error codes.
enum class ErrorCode : int {
  ParseError = -32700,
  InvalidRequest = -32600,
  MethodNotFound = -32601,
  InvalidParams = -32602,
  InternalError = -32603,
  ServerNotInitialized = -32002,
};

struct Position {
  unsigned Line = 0;      // 0-based
  unsigned Character = 0; // UTF-16 code units from the line start
};

/// Line starts of one text, for converting byte offsets to LSP positions and
/// back. A line ends at '\n'; a '\r' before it counts as part of the line.
class LineTable {
public:
  explicit LineTable(llvm::StringRef Text);
  Position position(size_t Offset) const;
  /// The byte offset of P, clamped to its line's end (and the text's end):
  /// clients may send a position past the end of a line.
  size_t offset(Position P) const;
  llvm::StringRef text() const { return Text; }

private:
  llvm::StringRef Text;
  std::vector<size_t> Starts;
};

llvm::json::Value toJSON(Position P);
llvm::json::Value rangeJSON(Position Start, Position End);
/// Reads {"line": N, "character": M}; None when either is missing or negative.
llvm::Optional<Position> positionFromJSON(const llvm::json::Value *V);

/// "file:///a/b%20c.moe" -> "/a/b c.moe"; None for another scheme or a
/// malformed escape.
llvm::Optional<std::string> uriToPath(llvm::StringRef URI);
/// An absolute path -> "file:///..." with RFC 3986 escapes.
std::string pathToURI(llvm::StringRef Path);

/// A JSON string that is valid UTF-8 whatever the bytes (diagnostics quote
/// source text, and llvm::json requires UTF-8).
llvm::json::Value jsonString(llvm::StringRef S);

} // namespace moec::lsp

#endif
