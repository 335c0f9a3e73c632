//===- Protocol.cpp - LSP positions and URIs ------------------------------===//
#include "moec/Lsp/Protocol.h"

#include "llvm/ADT/StringExtras.h"
#include <algorithm>

using namespace moec::lsp;
namespace json = llvm::json;

LineTable::LineTable(llvm::StringRef Text) : Text(Text) {
  Starts.push_back(0);
  for (size_t I = 0; I < Text.size(); ++I)
    if (Text[I] == '\n')
      Starts.push_back(I + 1);
}

// UTF-16 code units of the UTF-8 sequence that starts with byte B: four-byte
// sequences are surrogate pairs, continuation bytes count nothing (a stray
// one in invalid UTF-8 still moves no column: the client never saw it).
static unsigned utf16Units(unsigned char B) {
  if (B < 0x80)
    return 1;
  if (B < 0xC0)
    return 0;
  return B >= 0xF0 ? 2 : 1;
}

Position LineTable::position(size_t Offset) const {
  Offset = std::min(Offset, Text.size());
  size_t Line = std::upper_bound(Starts.begin(), Starts.end(), Offset) - Starts.begin() - 1;
  unsigned Units = 0;
  for (size_t I = Starts[Line]; I < Offset; ++I)
    Units += utf16Units(static_cast<unsigned char>(Text[I]));
  return {unsigned(Line), Units};
}

size_t LineTable::offset(Position P) const {
  if (P.Line >= Starts.size())
    return Text.size();
  size_t End = P.Line + 1 < Starts.size() ? Starts[P.Line + 1] - 1 : Text.size();
  size_t I = Starts[P.Line];
  unsigned Units = 0;
  while (I < End) {
    unsigned char B = static_cast<unsigned char>(Text[I]);
    unsigned U = utf16Units(B);
    if (Units + U > P.Character)
      break;
    Units += U;
    ++I;
    // Step over the rest of a multi-byte sequence.
    while (I < End && (static_cast<unsigned char>(Text[I]) & 0xC0) == 0x80)
      ++I;
    if (Units == P.Character)
      break;
  }
  return I;
}

json::Value moec::lsp::toJSON(Position P) { return json::Object{{"line", P.Line}, {"character", P.Character}}; }

json::Value moec::lsp::rangeJSON(Position Start, Position End) {
  return json::Object{{"start", toJSON(Start)}, {"end", toJSON(End)}};
}

llvm::Optional<Position> moec::lsp::positionFromJSON(const json::Value *V) {
  const json::Object *O = V ? V->getAsObject() : nullptr;
  if (!O)
    return llvm::None;
  llvm::Optional<int64_t> Line = O->getInteger("line"), Char = O->getInteger("character");
  if (!Line || !Char || *Line < 0 || *Char < 0 || *Line > UINT32_MAX || *Char > UINT32_MAX)
    return llvm::None;
  return Position{unsigned(*Line), unsigned(*Char)};
}

llvm::Optional<std::string> moec::lsp::uriToPath(llvm::StringRef URI) {
  if (!URI.consume_front("file://"))
    return llvm::None;
  // "file://host/path": only the local host (empty or localhost) is ours.
  if (!URI.startswith("/")) {
    if (!URI.consume_front("localhost"))
      return llvm::None;
  }
  std::string Path;
  for (size_t I = 0; I < URI.size(); ++I) {
    if (URI[I] != '%') {
      Path.push_back(URI[I]);
      continue;
    }
    if (I + 2 >= URI.size() || !llvm::isHexDigit(URI[I + 1]) || !llvm::isHexDigit(URI[I + 2]))
      return llvm::None;
    Path.push_back(char(llvm::hexFromNibbles(URI[I + 1], URI[I + 2])));
    I += 2;
  }
  return Path;
}

std::string moec::lsp::pathToURI(llvm::StringRef Path) {
  std::string URI = "file://";
  for (char C : Path) {
    if (llvm::isAlnum(C) || llvm::StringRef("-._~/").contains(C)) {
      URI.push_back(C);
      continue;
    }
    URI.push_back('%');
    URI.push_back(llvm::hexdigit((static_cast<unsigned char>(C) >> 4) & 0xF));
    URI.push_back(llvm::hexdigit(static_cast<unsigned char>(C) & 0xF));
  }
  return URI;
}

json::Value moec::lsp::jsonString(llvm::StringRef S) {
  return json::isUTF8(S) ? json::Value(S.str()) : json::Value(json::fixUTF8(S));
}
