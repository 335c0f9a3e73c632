//===- fuzz-hfconfig.cpp - The Hugging Face config importer ---------------===//
//
// importHFConfig on any text: an error naming the key, or `model` text. The
// model text it writes must parse: the importer's output is .moe source.
//
//===----------------------------------------------------------------------===//
#include "moec/Import/HFConfig.h"
#include "moec/Syntax/Parser.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <cstdlib>

using namespace moec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Text(reinterpret_cast<const char *>(Data), Size);
  llvm::Expected<HFImport> Imported = importHFConfig(Text, "hf_fuzz");
  if (!Imported) {
    std::string Message = llvm::toString(Imported.takeError());
    if (Message.empty())
      abort();
    return 0;
  }
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Imported->MoeText, "hf.moe"), llvm::SMLoc());
  if (!parseBuffer(ID, Diags)) {
    llvm::errs() << "the imported model does not parse:\n" << Imported->MoeText << "\n";
    abort();
  }
  return 0;
}
