//===- FmtCommand.cpp - moec fmt ------------------------------------------===//
//
//   moec fmt FILE...            print each file formatted on stdout
//   moec fmt --check FILE...    print a unified diff for each file that is
//                               not formatted; exit 1 if there is one
//   moec fmt --write FILE...    rewrite the files that are not formatted
//
// A file that does not parse is refused with the parser's errors (exit 1)
// and nothing is printed or written for it. The layout is in
// docs/formatting.md.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Options.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "moec/Format/Formatter.h"
#include "moec/Format/UnifiedDiff.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

namespace moec::driver {

/// Replaces File whole or not at all. A symbolic link is followed (the file
/// it names is rewritten, the link stays) and the file keeps its permissions:
/// the atomic write creates a new file, which would otherwise get neither.
static llvm::Error rewrite(llvm::StringRef File, llvm::StringRef Text) {
  llvm::SmallString<256> Target;
  if (std::error_code EC = llvm::sys::fs::real_path(File, Target))
    return llvm::createStringError(EC, "cannot resolve '%s': %s", File.str().c_str(), EC.message().c_str());
  llvm::ErrorOr<llvm::sys::fs::perms> Perms = llvm::sys::fs::getPermissions(Target);
  if (llvm::Error E = writeFileAtomically(Target, Text))
    return E;
  if (Perms)
    if (std::error_code EC = llvm::sys::fs::setPermissions(Target, *Perms))
      return llvm::createStringError(EC, "cannot restore the permissions of '%s': %s", Target.c_str(),
                                     EC.message().c_str());
  return llvm::Error::success();
}

int runFmt() {
  if (FmtCheck && FmtWrite) {
    llvm::errs() << "moec fmt: --check and --write cannot be combined\n";
    return ExitUsage;
  }
  bool Colors = llvm::sys::Process::StandardErrHasColors();
  int Status = ExitOK;
  auto Raise = [&](int S) { Status = std::max(Status, S); };
  for (const std::string &File : FmtFiles) {
    if (FmtWrite && File == "-") {
      llvm::errs() << "moec fmt: --write needs files, not standard input\n";
      Raise(ExitUsage);
      continue;
    }
    // Each file has its own engine: one file's errors do not count against
    // another, and the error cap does not apply (a refused file shows all
    // of its syntax errors, which is at most one per line).
    llvm::SourceMgr SM;
    DiagnosticOptions DOpts;
    DOpts.ErrorLimit = 0;
    DiagnosticEngine Diags(SM, DOpts);
    auto Buffer = llvm::MemoryBuffer::getFileOrSTDIN(File, /*IsText=*/false, /*RequiresNullTerminator=*/false);
    if (!Buffer) {
      Diags.report(diag::file_unreadable, llvm::SMRange(), File, Buffer.getError().message());
      renderText(Diags.finish(), SM, llvm::errs(), Colors);
      Raise(ExitUsage);
      continue;
    }
    std::string Name = File == "-" ? "<stdin>" : File;
    auto Named = llvm::MemoryBuffer::getMemBufferCopy((*Buffer)->getBuffer(), Name);
    unsigned ID = SM.AddNewSourceBuffer(std::move(Named), llvm::SMLoc());
    llvm::StringRef Original = SM.getMemoryBuffer(ID)->getBuffer();

    FormatResult R = formatBuffer(ID, Diags);
    if (R.St == FormatResult::Status::SyntaxError) {
      renderText(Diags.finish(), SM, llvm::errs(), Colors);
      llvm::errs() << "moec fmt: " << Name << " has syntax errors; it was not formatted\n";
      Raise(ExitErrors);
      continue;
    }
    if (R.St == FormatResult::Status::InternalError) {
      llvm::errs() << "moec fmt: " << Name << ": internal error: " << R.Message
                   << "; the file was left as it is (please report this with the file)\n";
      Raise(ExitUsage);
      continue;
    }

    if (FmtCheck) {
      std::string Diff = unifiedDiff(Original, R.Text, Name, Name + " (formatted)");
      if (!Diff.empty()) {
        llvm::outs() << Diff;
        Raise(ExitErrors);
      }
    } else if (FmtWrite) {
      if (Original == R.Text)
        continue; // leave the file, and its modification time, alone
      if (llvm::Error E = rewrite(File, R.Text)) {
        llvm::errs() << "moec fmt: " << llvm::toString(std::move(E)) << "\n";
        Raise(ExitUsage);
      }
    } else {
      llvm::outs() << R.Text;
    }
  }
  return Status;
}

} // namespace moec::driver
