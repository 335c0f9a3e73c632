//===- ReplayMain.cpp - Run a fuzz target over files, without libFuzzer ---===//
//
// Linked into every fuzz target in a normal build: each argument is a file
// or a directory (read recursively); every file is passed once to
// LLVMFuzzerTestOneInput. A crash, a sanitizer report (in a sanitizer
// build) or an abort from a harness check fails the ctest that runs it.
//
//===----------------------------------------------------------------------===//
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size);
// Defined by the targets that need one-time setup, as libFuzzer allows.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *Argc, char ***Argv);

static bool replay(const llvm::Twine &Path, unsigned &Count) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!Buffer) {
    llvm::errs() << "cannot read " << Path << ": " << Buffer.getError().message() << "\n";
    return false;
  }
  // A copy of exactly the file's bytes, as libFuzzer passes them: reading
  // past the end is then a sanitizer report, not a read of the mapping.
  std::vector<uint8_t> Bytes((*Buffer)->getBufferStart(), (*Buffer)->getBufferEnd());
  LLVMFuzzerTestOneInput(Bytes.data(), Bytes.size());
  ++Count;
  return true;
}

int main(int Argc, char **Argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&Argc, &Argv);
  unsigned Count = 0;
  bool OK = true;
  for (int I = 1; I < Argc; ++I) {
    if (!llvm::sys::fs::is_directory(Argv[I])) {
      OK &= replay(Argv[I], Count);
      continue;
    }
    std::error_code EC;
    std::vector<std::string> Files;
    for (llvm::sys::fs::recursive_directory_iterator It(Argv[I], EC), End; It != End && !EC; It.increment(EC))
      if (llvm::sys::fs::is_regular_file(It->path()))
        Files.push_back(It->path());
    if (EC) {
      llvm::errs() << "cannot list " << Argv[I] << ": " << EC.message() << "\n";
      OK = false;
    }
    std::sort(Files.begin(), Files.end());
    for (const std::string &F : Files)
      OK &= replay(F, Count);
  }
  llvm::outs() << "replayed " << Count << " inputs\n";
  return OK ? 0 : 1;
}
