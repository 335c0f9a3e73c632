//===- UnifiedDiff.h - Line diffs in the `diff -u` format -------*- C++ -*-===//
//
// `moec fmt --check` shows what formatting would change as a unified diff
// that `patch -p0` and code-review tools read.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_FORMAT_UNIFIEDDIFF_H
#define MOEC_FORMAT_UNIFIEDDIFF_H

#include "llvm/ADT/StringRef.h"
#include <string>

namespace moec {

/// The unified diff from Old to New with Context lines around each change,
/// headed `--- OldName` / `+++ NewName`; empty when the texts are equal. A
/// text that does not end in a newline gets `\ No newline at end of file`.
std::string unifiedDiff(llvm::StringRef Old, llvm::StringRef New, llvm::StringRef OldName, llvm::StringRef NewName,
                        unsigned Context = 3);

} // namespace moec

#endif
