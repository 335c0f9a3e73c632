//===- Transport.cpp - Content-Length framing -----------------------------===//
#include "moec/Lsp/Transport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

using namespace moec::lsp;

// Reads one header line without its terminator ("\r\n", or a bare "\n" from
// lenient clients). False at end of input.
static bool readLine(std::istream &In, std::string &Line) {
  Line.clear();
  int C;
  bool Any = false;
  while ((C = In.get()) != std::char_traits<char>::eof()) {
    Any = true;
    if (C == '\n')
      break;
    Line.push_back(char(C));
    // A header line is short; a peer that never sends a newline must not
    // make us buffer without bound.
    if (Line.size() > 4096)
      break;
  }
  if (!Line.empty() && Line.back() == '\r')
    Line.pop_back();
  return Any;
}

IncomingMessage moec::lsp::readMessage(std::istream &In, size_t MaxBody) {
  IncomingMessage M;
  std::string Line;
  bool HaveLength = false, SawHeader = false;
  uint64_t Length = 0;
  std::string Problem;
  while (true) {
    if (!readLine(In, Line)) {
      M.K = IncomingMessage::Kind::End;
      return M;
    }
    if (Line.empty()) {
      if (!SawHeader)
        continue; // blank lines between messages are harmless
      break;
    }
    SawHeader = true;
    llvm::StringRef Name, Value;
    std::tie(Name, Value) = llvm::StringRef(Line).split(':');
    if (Value.data() == nullptr || Name.size() == Line.size()) {
      Problem = "malformed header line '" + Line.substr(0, 80) + "'";
      continue;
    }
    if (Name.trim().equals_insensitive("Content-Length")) {
      if (Value.trim().getAsInteger(10, Length))
        Problem = "Content-Length is not a number: '" + Value.trim().substr(0, 40).str() + "'";
      else
        HaveLength = true;
    }
  }
  if (!HaveLength) {
    M.K = IncomingMessage::Kind::BadHeader;
    M.Error = Problem.empty() ? "missing Content-Length header" : Problem;
    return M;
  }
  if (Length > MaxBody) {
    // Skip the body so that the next message is read from its start.
    In.ignore(std::streamsize(Length));
    M.K = In ? IncomingMessage::Kind::BadHeader : IncomingMessage::Kind::End;
    M.Error = "message of " + std::to_string(Length) + " bytes is larger than the limit";
    return M;
  }
  M.Body.resize(size_t(Length));
  In.read(M.Body.data(), std::streamsize(Length));
  if (size_t(In.gcount()) != Length) {
    M.K = IncomingMessage::Kind::End;
    return M;
  }
  M.K = IncomingMessage::Kind::Message;
  return M;
}

void moec::lsp::writeMessage(llvm::raw_ostream &Out, const llvm::json::Value &Message) {
  std::string Body;
  llvm::raw_string_ostream OS(Body);
  OS << Message;
  OS.flush();
  Out << "Content-Length: " << Body.size() << "\r\n\r\n" << Body;
  Out.flush();
}
