//===- Transport.h - JSON-RPC messages with Content-Length framing -*- C++ -*-===//
//
// The base protocol of LSP: each message is a header block ("Content-Length:
// N", optionally "Content-Type: ..."), an empty line, then N bytes of JSON.
// Reading never trusts the peer: a bad header is reported to the caller, who
// answers it with a JSON-RPC error and reads on.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LSP_TRANSPORT_H
#define MOEC_LSP_TRANSPORT_H

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <istream>
#include <string>

namespace moec::lsp {

struct IncomingMessage {
  enum class Kind {
    Message,   // Body holds the bytes Content-Length announced
    BadHeader, // the header block had no usable Content-Length; Error says why
    End,       // end of input (possibly in the middle of a message)
  } K = Kind::End;
  std::string Body;
  std::string Error;
};

/// Reads one framed message. A body larger than MaxBody bytes is skipped and
/// reported as BadHeader, so a hostile length cannot exhaust memory.
IncomingMessage readMessage(std::istream &In, size_t MaxBody = size_t(256) << 20);

/// Writes one framed message and flushes.
void writeMessage(llvm::raw_ostream &Out, const llvm::json::Value &Message);

} // namespace moec::lsp

#endif
