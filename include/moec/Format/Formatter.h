//===- Formatter.h - The canonical layout of a .moe file ---------*- C++ -*-===//
//
// `moec fmt` prints a file in one canonical layout (docs/formatting.md):
// two-space indentation, single spaces around '=' and operators, the keys of
// single-entry lines aligned, trailing comments aligned, one blank line
// between definitions. Line breaks between entries and inside lists and
// calls are the author's; everything within a line is the formatter's.
// Comments stay where they were.
//
// The formatter works from the parser's tree (it never sees ANTLR) and finds
// the comments by scanning the source, which is exact once the file has
// parsed. Every result is checked before it is returned: the output must
// parse to the same tree and hold the same comments, so a formatter bug
// cannot change what a file means.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_FORMAT_FORMATTER_H
#define MOEC_FORMAT_FORMATTER_H

#include "moec/Diag/DiagnosticEngine.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace moec {

struct FormatOptions {
  unsigned IndentWidth = 2;
  /// Spaces between the code and a trailing comment (the widest line of a
  /// group of aligned comments).
  unsigned CommentGap = 3;
};

struct FormatResult {
  enum class Status {
    OK,
    /// The file did not parse; the errors are in the DiagnosticEngine.
    SyntaxError,
    /// The formatted text failed the self-check (a formatter bug); Message
    /// says what differed. The input must be left as it is.
    InternalError,
  };
  Status St = Status::OK;
  std::string Text;    // the formatted file when St is OK
  std::string Message; // the self-check failure when St is InternalError
  bool ok() const { return St == Status::OK; }
};

/// Formats buffer BufferID of Diags' SourceMgr.
FormatResult formatBuffer(unsigned BufferID, DiagnosticEngine &Diags, const FormatOptions &Opts = {});

/// The positions of the comments in a file that parses: byte offsets of each
/// `#` and of the end of its line. Strings are skipped, so a `#` inside a
/// string is not a comment.
struct CommentSpan {
  size_t Begin, End;
};
std::vector<CommentSpan> findComments(llvm::StringRef Text);

} // namespace moec

#endif
