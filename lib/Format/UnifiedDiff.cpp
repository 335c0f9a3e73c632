//===- UnifiedDiff.cpp - Myers line diff printed as `diff -u` -------------===//
//
// The shortest edit script by Myers' O((N+M)D) algorithm, after trimming the
// common prefix and suffix (what formatting leaves alone). Each step's
// frontier is kept for the walk back, which is O(D^2) memory; past MaxEdits
// the middle is shown as one replacement instead, which is still a correct
// diff, only not the shortest.
//
//===----------------------------------------------------------------------===//
#include "moec/Format/UnifiedDiff.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <vector>

using llvm::StringRef;

namespace {

/// Lines with their '\n' kept, so that a last line without one differs from
/// the same text with one (as in diff).
std::vector<StringRef> splitLines(StringRef Text) {
  std::vector<StringRef> Lines;
  while (!Text.empty()) {
    size_t NL = Text.find('\n');
    size_t Len = NL == StringRef::npos ? Text.size() : NL + 1;
    Lines.push_back(Text.take_front(Len));
    Text = Text.drop_front(Len);
  }
  return Lines;
}

enum class Op { Equal, Delete, Insert };

constexpr long MaxEdits = 4000;

/// The edit script turning A into B, both already free of a common prefix
/// and suffix.
std::vector<Op> myers(llvm::ArrayRef<StringRef> A, llvm::ArrayRef<StringRef> B) {
  long N = A.size(), M = B.size(), Max = N + M;
  std::vector<Op> Script;
  auto Replace = [&] {
    Script.assign(N, Op::Delete);
    Script.insert(Script.end(), M, Op::Insert);
    return Script;
  };
  if (N == 0 || M == 0)
    return Replace();
  // V[K + Offset] is the furthest x reached on diagonal k = x - y.
  long Offset = Max + 1;
  std::vector<long> V(2 * Max + 3, 0);
  std::vector<std::vector<long>> Trace;
  long Final = -1;
  for (long D = 0; D <= Max && D <= MaxEdits; ++D) {
    Trace.emplace_back(V.begin() + (Offset - D - 1), V.begin() + (Offset + D + 2));
    for (long K = -D; K <= D; K += 2) {
      long X =
          (K == -D || (K != D && V[Offset + K - 1] < V[Offset + K + 1])) ? V[Offset + K + 1] : V[Offset + K - 1] + 1;
      long Y = X - K;
      while (X < N && Y < M && A[X] == B[Y])
        ++X, ++Y;
      V[Offset + K] = X;
      if (X >= N && Y >= M) {
        Final = D;
        break;
      }
    }
    if (Final >= 0)
      break;
  }
  if (Final < 0)
    return Replace();

  // Walk back from (N, M): Trace[D] is the frontier before step D, stored
  // from diagonal -D-1, so diagonal k of it is at index k + D + 1.
  long X = N, Y = M;
  for (long D = Final; D > 0; --D) {
    const std::vector<long> &Prev = Trace[D];
    auto At = [&](long K) { return Prev[K + D + 1]; };
    long K = X - Y;
    bool Down = K == -D || (K != D && At(K - 1) < At(K + 1));
    long PrevK = Down ? K + 1 : K - 1;
    long PrevX = At(PrevK), PrevY = PrevX - PrevK;
    while (X > PrevX && Y > PrevY) {
      Script.push_back(Op::Equal);
      --X, --Y;
    }
    Script.push_back(Down ? Op::Insert : Op::Delete);
    X = PrevX, Y = PrevY;
  }
  while (X > 0 && Y > 0) {
    Script.push_back(Op::Equal);
    --X, --Y;
  }
  std::reverse(Script.begin(), Script.end());
  return Script;
}

void printLine(llvm::raw_ostream &OS, char Tag, StringRef Line) {
  OS << Tag << Line;
  if (!Line.endswith("\n"))
    OS << "\n\\ No newline at end of file\n";
}

void printRange(llvm::raw_ostream &OS, size_t Start, size_t Count) {
  // diff's convention: an empty range is named by the line before it.
  OS << (Count ? Start + 1 : Start);
  if (Count != 1)
    OS << ',' << Count;
}

} // namespace

std::string moec::unifiedDiff(StringRef Old, StringRef New, StringRef OldName, StringRef NewName, unsigned Context) {
  if (Old == New)
    return "";
  std::vector<StringRef> A = splitLines(Old), B = splitLines(New);
  size_t Prefix = 0;
  while (Prefix < A.size() && Prefix < B.size() && A[Prefix] == B[Prefix])
    ++Prefix;
  size_t Suffix = 0;
  while (Suffix < A.size() - Prefix && Suffix < B.size() - Prefix &&
         A[A.size() - 1 - Suffix] == B[B.size() - 1 - Suffix])
    ++Suffix;
  std::vector<Op> Script(Prefix, Op::Equal);
  std::vector<Op> Middle = myers(llvm::makeArrayRef(A).slice(Prefix, A.size() - Prefix - Suffix),
                                 llvm::makeArrayRef(B).slice(Prefix, B.size() - Prefix - Suffix));
  Script.insert(Script.end(), Middle.begin(), Middle.end());
  Script.insert(Script.end(), Suffix, Op::Equal);

  // Position in A and B before each step of the script.
  std::vector<size_t> PosA(Script.size() + 1), PosB(Script.size() + 1);
  for (size_t I = 0; I < Script.size(); ++I) {
    PosA[I + 1] = PosA[I] + (Script[I] != Op::Insert);
    PosB[I + 1] = PosB[I] + (Script[I] != Op::Delete);
  }

  std::string Out;
  llvm::raw_string_ostream OS(Out);
  OS << "--- " << OldName << "\n+++ " << NewName << "\n";
  size_t I = 0;
  while (I < Script.size()) {
    if (Script[I] == Op::Equal) {
      ++I;
      continue;
    }
    // A hunk: from Context lines before this change to Context lines after
    // the last change that is at most 2 * Context equal lines further on.
    size_t Begin = I >= Context ? I - Context : 0;
    size_t End = I;
    for (size_t J = I; J < Script.size(); ++J) {
      if (Script[J] != Op::Equal) {
        End = J + 1;
        continue;
      }
      if (J - End >= 2 * Context)
        break;
    }
    End = std::min(Script.size(), End + Context);
    OS << "@@ -";
    printRange(OS, PosA[Begin], PosA[End] - PosA[Begin]);
    OS << " +";
    printRange(OS, PosB[Begin], PosB[End] - PosB[Begin]);
    OS << " @@\n";
    for (size_t J = Begin; J < End; ++J) {
      switch (Script[J]) {
      case Op::Equal:
        printLine(OS, ' ', A[PosA[J]]);
        break;
      case Op::Delete:
        printLine(OS, '-', A[PosA[J]]);
        break;
      case Op::Insert:
        printLine(OS, '+', B[PosB[J]]);
        break;
      }
    }
    I = End;
  }
  OS.flush();
  return Out;
}
