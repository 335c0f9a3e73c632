//===- Analysis.cpp - Checking a document as `moec check` does ------------===//
#include "moec/Lsp/Analysis.h"

#include "moec/Catalog/Catalog.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

using namespace moec;
using namespace moec::lsp;

static constexpr llvm::StringLiteral BuiltinPrefix = "<builtin>/";

llvm::Optional<std::string> CatalogFiles::pathFor(llvm::StringRef BufferName) {
  if (!BufferName.startswith(BuiltinPrefix))
    return llvm::None;
  if (!Written && !WriteFailed) {
    Written = true;
    if (llvm::sys::fs::create_directories(Dir))
      WriteFailed = true;
    for (const CatalogFile &C : builtinCatalogFiles()) {
      if (WriteFailed)
        break;
      llvm::SmallString<256> P(Dir);
      llvm::sys::path::append(P, llvm::StringRef(C.Name).drop_front(BuiltinPrefix.size()));
      // Rewrite only when the embedded text changed (another moec version),
      // so that an editor showing the copy does not see it change under it.
      auto Old = llvm::MemoryBuffer::getFile(P);
      if (Old && (*Old)->getBuffer() == C.Text)
        continue;
      // Written to a temporary file and renamed, as every file moec writes,
      // so that an editor never opens half a catalog.
      if (llvm::Error E = llvm::writeFileAtomically(std::string(P.str()) + ".tmp-%%%%%%", P, C.Text)) {
        llvm::consumeError(std::move(E));
        WriteFailed = true;
        break;
      }
      // Read-only: edits to the copy would change nothing moec reads.
      llvm::sys::fs::setPermissions(P, llvm::sys::fs::all_read);
    }
  }
  if (WriteFailed)
    return llvm::None;
  llvm::SmallString<256> P(Dir);
  llvm::sys::path::append(P, BufferName.drop_front(BuiltinPrefix.size()));
  return std::string(P);
}

bool CatalogFiles::contains(llvm::StringRef Path) const {
  llvm::StringRef Parent = llvm::sys::path::parent_path(Path);
  if (Parent != llvm::StringRef(Dir))
    return false;
  llvm::StringRef Name = llvm::sys::path::filename(Path);
  for (const CatalogFile &C : builtinCatalogFiles())
    if (llvm::StringRef(C.Name).drop_front(BuiltinPrefix.size()) == Name)
      return true;
  return false;
}

std::unique_ptr<Analysis> Analysis::run(std::string Path, std::string Text, const AnalysisOptions &Opts) {
  std::unique_ptr<Analysis> A(new Analysis());
  A->Path = std::move(Path);
  A->Text = std::move(Text);
  A->Lines = LineTable(A->Text);
  A->Diags = std::make_unique<DiagnosticEngine>(A->SM, Opts.Diagnostics);
  SemaOptions SOpts;
  SOpts.IncludeDirs = Opts.IncludeDirs;
  SOpts.TargetOverride = Opts.TargetOverride;
  SOpts.Catalog = BuiltinCatalog::parse(*A->Diags, SOpts.Limits);
  A->S = std::make_unique<Sema>(*A->Diags, SOpts);
  // Sema adds the main file's buffer first, after the catalog's.
  A->MainBuffer = A->SM.getNumBuffers() + 1;
  A->S->loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(A->Text, A->Path));
  if (A->S->mainFile()) {
    A->Recipes = A->S->analyze();
    for (const Recipe &R : A->Recipes)
      runRules(R, *A->Diags, Opts.UsePlanner);
  }
  A->Final = A->Diags->finish();
  return A;
}

llvm::Optional<size_t> Analysis::offsetOf(llvm::SMLoc L) const {
  if (!L.isValid() || MainBuffer > SM.getNumBuffers())
    return llvm::None;
  const llvm::MemoryBuffer *B = SM.getMemoryBuffer(MainBuffer);
  const char *P = L.getPointer();
  // The end of the buffer is a valid position (a range's end).
  if (P < B->getBufferStart() || P > B->getBufferEnd())
    return llvm::None;
  return size_t(P - B->getBufferStart());
}

const char *Analysis::pointerAt(size_t Offset) const {
  const llvm::MemoryBuffer *B = SM.getMemoryBuffer(MainBuffer);
  return B->getBufferStart() + std::min(Offset, B->getBufferSize());
}

llvm::Optional<std::pair<Position, Position>> Analysis::mainRange(llvm::SMRange R) const {
  llvm::Optional<size_t> Start = offsetOf(R.Start);
  if (!Start)
    return llvm::None;
  llvm::Optional<size_t> End = offsetOf(R.End);
  if (!End || *End < *Start)
    End = Start;
  return std::make_pair(Lines.position(*Start), Lines.position(*End));
}

llvm::Optional<Location> Analysis::locate(llvm::SMRange R, llvm::StringRef MainURI, CatalogFiles &Catalog) {
  if (!R.Start.isValid())
    return llvm::None;
  if (auto Main = mainRange(R))
    return Location{MainURI.str(), Main->first, Main->second};
  unsigned Buf = SM.FindBufferContainingLoc(R.Start);
  if (!Buf)
    return llvm::None;
  const llvm::MemoryBuffer *B = SM.getMemoryBuffer(Buf);
  llvm::StringRef Name = B->getBufferIdentifier();
  std::string File;
  if (auto Copy = Catalog.pathFor(Name)) {
    File = *Copy;
  } else {
    // Imports are named by the path Sema found them at; a Hugging Face
    // config's generated text ("x.json (imported as .moe)") has no file.
    llvm::SmallString<256> Abs(Name);
    if (llvm::sys::fs::make_absolute(Abs) || !llvm::sys::fs::is_regular_file(Abs))
      return llvm::None;
    llvm::sys::path::remove_dots(Abs, /*remove_dot_dot=*/true);
    File = std::string(Abs);
  }
  LineTable Table(B->getBuffer());
  size_t Start = R.Start.getPointer() - B->getBufferStart();
  size_t End = Start;
  if (R.End.isValid() && R.End.getPointer() >= R.Start.getPointer() && R.End.getPointer() <= B->getBufferEnd())
    End = R.End.getPointer() - B->getBufferStart();
  return Location{pathToURI(File), Table.position(Start), Table.position(End)};
}

llvm::Optional<llvm::SMRange> Analysis::importedThrough(unsigned Buf) const {
  // Follow the include locations outwards until one is in the main buffer.
  for (unsigned Depth = 0; Buf && Buf != MainBuffer && Depth < 1000; ++Depth) {
    llvm::SMLoc Include = SM.getParentIncludeLoc(Buf);
    if (!Include.isValid())
      return llvm::None;
    unsigned Parent = SM.FindBufferContainingLoc(Include);
    if (Parent == MainBuffer) {
      if (const ast::File *F = file())
        for (const ast::Import &I : F->Imports)
          if (I.Range.Start == Include)
            return I.Range;
      return llvm::SMRange(Include, Include);
    }
    Buf = Parent;
  }
  return llvm::None;
}

std::string Analysis::describe(llvm::SMLoc L) const {
  unsigned Buf = L.isValid() ? SM.FindBufferContainingLoc(L) : 0;
  if (!Buf)
    return "?";
  unsigned Line = SM.getLineAndColumn(L, Buf).first;
  if (Buf == MainBuffer)
    return fmt::format("line {}", Line);
  return fmt::format("{}:{}", llvm::sys::path::filename(SM.getMemoryBuffer(Buf)->getBufferIdentifier()).str(), Line);
}

std::string Analysis::sourceText(llvm::SMRange R) const {
  if (!R.Start.isValid() || !R.End.isValid() || R.End.getPointer() < R.Start.getPointer())
    return "";
  return std::string(R.Start.getPointer(), R.End.getPointer());
}
