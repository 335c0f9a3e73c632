//===- fuzz-parser.cpp - The lexer and parser on arbitrary bytes ----------===//
//
// Any byte sequence must give either a tree or at least one error, and the
// diagnostics must render. A tree must round-trip: its `--dump-ast` text
// parses again, without a diagnostic, to a tree that dumps identically.
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Syntax/Parser.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <cstdlib>

using namespace moec;

namespace {
struct Parsed {
  llvm::SourceMgr SM;
  std::unique_ptr<DiagnosticEngine> Diags;
  std::unique_ptr<ast::File> File;
  std::string Dump;

  explicit Parsed(llvm::StringRef Text) {
    Diags = std::make_unique<DiagnosticEngine>(SM);
    unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "fuzz.moe"), llvm::SMLoc());
    File = parseBuffer(ID, *Diags);
    if (File) {
      llvm::raw_string_ostream OS(Dump);
      ast::dump(*File, OS);
    }
  }
};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  Parsed First(llvm::StringRef(reinterpret_cast<const char *>(Data), Size));
  const std::vector<Diagnostic> &Final = First.Diags->finish();
  llvm::raw_null_ostream Null;
  renderText(Final, First.SM, Null, /*Colors=*/false);
  // JSON, not SARIF: the same locations, without SARIF's table of every
  // rule, which would cost more than the parse itself.
  Null << renderJSON(Final, First.SM);
  if (!First.File) {
    if (!First.Diags->hasErrors()) {
      llvm::errs() << "no tree and no error\n";
      abort();
    }
    return 0;
  }
  Parsed Second(First.Dump);
  if (!Second.File || Second.Diags->hasErrors() || Second.Dump != First.Dump) {
    llvm::errs() << "--dump-ast does not round-trip\n--- first dump ---\n"
                 << First.Dump << "--- second dump ---\n"
                 << Second.Dump << "\n";
    abort();
  }
  return 0;
}
