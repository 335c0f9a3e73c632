//===- Formatter.cpp - Printing a parsed file in the canonical layout ------===//
//
// The printer walks the tree in source order and builds output lines. Before
// it starts a line for code at a source position it emits the comments that
// come before that position: a comment that followed code on its source line
// becomes the trailing comment of the last line printed, any other comment a
// line of its own at the indentation of what follows it. Blank lines are
// taken from the source (at most one in a row) where the layout allows them.
//
// The layout rules are in docs/formatting.md; the comments below say why
// each one is what it is.
//
//===----------------------------------------------------------------------===//
#include "moec/Format/Formatter.h"

#include "moec/AST/AST.h"
#include "moec/Syntax/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/MemoryBuffer.h"
#include <algorithm>
#include <functional>

using namespace moec;
using llvm::StringRef;

std::vector<CommentSpan> moec::findComments(StringRef Text) {
  std::vector<CommentSpan> Out;
  for (const LexedToken &T : lexText(Text))
    if (T.K == LexedToken::Comment)
      Out.push_back({T.Begin, T.End});
  return Out;
}

namespace {

struct OutLine {
  unsigned Indent = 0;
  /// The path of the entry a line starts with, when it is the only entry on
  /// the line: such keys are padded to the widest key of their run.
  std::string Key;
  std::string Text;
  std::string Comment; // trailing comment
  bool BlankBefore = false;
  bool Aligned = false;
  bool IsComment = false; // a comment on a line of its own
  unsigned Run = 0;
};

/// Whether a blank line may come before the first line a newLine() emits.
enum class Blank { Drop, Keep, Force };

bool isLineBreak(char C) { return C == '\n' || C == '\r'; }

/// Where an element of a list or an argument of a call starts.
const char *start(const ast::ExprPtr &E) { return E->getRange().Start.getPointer(); }
const char *start(const ast::Argument &A) {
  return (A.Name.empty() ? A.Value->getRange().Start : A.NameRange.Start).getPointer();
}

class Printer {
public:
  Printer(StringRef Text, const FormatOptions &Opts) : Text(Text), Opts(Opts) { Comments = findComments(Text); }

  std::string print(const ast::File &F);

private:
  // --- Source positions -------------------------------------------------

  /// Line breaks in [A, B): "\r\n" is one, a lone '\r' is one too (the
  /// parser treats both as line breaks between entries).
  unsigned lineBreaks(const char *A, const char *B) const {
    unsigned N = 0;
    for (const char *P = A; P < B; ++P)
      if (*P == '\n' || (*P == '\r' && (P + 1 == B || P[1] != '\n')))
        ++N;
    return N;
  }
  bool sameLine(const char *A, const char *B) const { return A >= B || std::none_of(A, B, isLineBreak); }
  bool inComment(const char *P) const {
    size_t Offset = P - Text.data();
    auto It = llvm::upper_bound(Comments, Offset, [](size_t O, const CommentSpan &C) { return O < C.Begin; });
    return It != Comments.begin() && Offset < std::prev(It)->End;
  }
  bool hasCommentIn(const char *A, const char *B) const {
    size_t From = A - Text.data(), To = B - Text.data();
    auto It = llvm::lower_bound(Comments, From, [](const CommentSpan &C, size_t O) { return C.Begin < O; });
    return It != Comments.end() && It->Begin < To;
  }
  /// The first C at or after From outside comments. Only called on the gap
  /// between two tokens, where nothing but whitespace, comments and the
  /// punctuation looked for can be.
  const char *find(const char *From, char C) const {
    const char *P = From, *End = Text.end();
    while (P < End && *P != C) {
      if (*P == '#')
        P = std::find_if(P, End, isLineBreak);
      else
        ++P;
    }
    return P;
  }
  /// Whether E was written in parentheses of its own, `(a + b)`.
  bool inSourceParens(const ast::Expr &E) const {
    const char *P = E.getRange().Start.getPointer();
    while (P > Text.begin() && llvm::isSpace(P[-1]))
      --P;
    if (P == Text.begin() || P[-1] != '(' || inComment(P - 1))
      return false;
    const char *Q = E.getRange().End.getPointer();
    while (Q < Text.end() && llvm::isSpace(*Q))
      ++Q;
    return Q < Text.end() && *Q == ')';
  }
  void consumed(const char *P) { LastEnd = std::max(LastEnd, P); }

  // --- Lines -------------------------------------------------------------

  void endLine() {
    if (HaveCur)
      Lines.push_back(std::move(Cur));
    Cur = OutLine();
    HaveCur = false;
  }

  /// Ends the current line and starts one at Indent for the code at Pos,
  /// after the comments before Pos (own-line ones at CommentIndent). First
  /// says whether a blank line may precede the first line emitted here;
  /// CodeMayBlank whether the source's blank line may precede the code line.
  void newLine(unsigned Indent, const char *Pos, Blank First = Blank::Keep, bool CodeMayBlank = true,
               int CommentIndent = -1) {
    endLine();
    bool IsFirst = true;
    auto BlankAt = [&](const char *At, bool MayBlank) {
      bool FromSource = LastEnd && lineBreaks(LastEnd, At) >= 2;
      bool B = FromSource && MayBlank;
      if (IsFirst)
        B = First == Blank::Force || (First == Blank::Keep && B);
      IsFirst = false;
      return B;
    };
    while (NextComment < Comments.size() && Text.data() + Comments[NextComment].Begin < Pos) {
      const CommentSpan &C = Comments[NextComment++];
      const char *Begin = Text.data() + C.Begin;
      std::string Body = StringRef(Begin, C.End - C.Begin).rtrim().str();
      if (followsCode(Begin) && !Lines.empty() && !Lines.back().IsComment && Lines.back().Comment.empty()) {
        Lines.back().Comment = std::move(Body);
      } else {
        OutLine L;
        L.Indent = CommentIndent < 0 ? Indent : unsigned(CommentIndent);
        L.Text = std::move(Body);
        L.IsComment = true;
        L.BlankBefore = BlankAt(Begin, true);
        Lines.push_back(std::move(L));
      }
      consumed(Text.data() + C.End);
    }
    Cur.Indent = Indent;
    Cur.BlankBefore = BlankAt(Pos, CodeMayBlank);
    HaveCur = true;
    consumed(Pos);
  }

  /// Whether code precedes the comment at P on its source line.
  bool followsCode(const char *P) const {
    while (P > Text.begin() && !isLineBreak(P[-1])) {
      --P;
      if (!llvm::isSpace(*P))
        return true;
    }
    return false;
  }

  // --- Definitions and entries ------------------------------------------

  void printDefinition(const ast::Definition &D, Blank B);
  void printAnnotations(const std::vector<ast::Annotation> &As, unsigned Indent, Blank &B);
  void printBlock(const std::vector<ast::Entry> &Entries, unsigned Indent);
  /// Prints `{ ... }` after a definition's header or a section's name.
  void printBraces(const std::vector<ast::Entry> &Entries, const char *Open, const char *Close, unsigned Indent);
  void printEntry(const ast::Entry &E, unsigned Indent, bool AsKey);
  bool canBeInline(const std::vector<ast::Entry> &Entries, const char *Open, const char *Close) const;

  // --- Expressions ------------------------------------------------------

  void printExpr(const ast::Expr &E, bool InAnnotation = false);
  void printOperand(const ast::Expr &E, int ParentPrec, bool IsRight);
  /// Elements between brackets: on one line, or one per line with a
  /// trailing comma when the source spread them over lines.
  template <typename T, typename Fn>
  void printSequence(const std::vector<T> &Items, const char *Open, const char *Close, char OpenChar, char CloseChar,
                     Fn PrintItem);
  void printArgs(const std::vector<ast::Argument> &Args, const char *Open, const char *Close, bool InAnnotation);
  static bool isKebab(const ast::Expr &E);

  std::string render() const;

  StringRef Text;
  const FormatOptions &Opts;
  std::vector<CommentSpan> Comments;
  size_t NextComment = 0;
  const char *LastEnd = nullptr;
  std::vector<OutLine> Lines;
  OutLine Cur;
  bool HaveCur = false;
  unsigned NextRun = 1;
};

std::string quote(StringRef S) {
  std::string Out = "\"";
  for (char C : S) {
    if (C == '"' || C == '\\')
      Out += {'\\', C};
    else if (C == '\n')
      Out += "\\n";
    else
      Out += C;
  }
  return Out + "\"";
}

std::string Printer::print(const ast::File &F) {
  // Imports and definitions in source order.
  struct Item {
    const char *Start;
    const ast::Import *Import;
    const ast::Definition *Def;
  };
  std::vector<Item> Items;
  for (const ast::Import &I : F.Imports)
    Items.push_back({I.Range.Start.getPointer(), &I, nullptr});
  for (const ast::Definition &D : F.Definitions)
    Items.push_back({D.Range.Start.getPointer(), nullptr, &D});
  llvm::sort(Items, [](const Item &A, const Item &B) { return A.Start < B.Start; });

  for (size_t I = 0; I < Items.size(); ++I) {
    // Definitions are set apart by one blank line; imports keep the source's.
    Blank B = I == 0 ? Blank::Drop : (Items[I].Def || Items[I - 1].Def) ? Blank::Force : Blank::Keep;
    if (const ast::Import *Imp = Items[I].Import) {
      newLine(0, Imp->Range.Start.getPointer(), B);
      Cur.Text = "import " + quote(Imp->Path);
      consumed(Imp->Range.End.getPointer());
    } else {
      printDefinition(*Items[I].Def, B);
    }
  }
  // Comments after the last definition.
  newLine(0, Text.end());
  HaveCur = false;
  return render();
}

void Printer::printAnnotations(const std::vector<ast::Annotation> &As, unsigned Indent, Blank &B) {
  for (const ast::Annotation &A : As) {
    // No blank line between an annotation and what it annotates.
    newLine(Indent, A.Range.Start.getPointer(), B, &A == &As.front());
    B = Blank::Keep;
    Cur.Text = "@" + A.Name;
    if (!A.Args.empty()) {
      const char *Open = find(A.Range.Start.getPointer() + 1 + A.Name.size(), '(');
      printArgs(A.Args, Open, A.Range.End.getPointer() - 1, /*InAnnotation=*/true);
    }
    consumed(A.Range.End.getPointer());
  }
}

void Printer::printDefinition(const ast::Definition &D, Blank B) {
  printAnnotations(D.Annotations, 0, B);
  const char *Start = D.Annotations.empty() ? D.Range.Start.getPointer() : D.NameRange.Start.getPointer();
  newLine(0, Start, B, D.Annotations.empty());
  Cur.Text = (ast::defKindName(D.Kind) + " " + D.Name).str();
  const char *HeaderEnd = D.NameRange.End.getPointer();
  if (!D.Base.empty()) {
    Cur.Text += " extends " + D.Base;
    HeaderEnd = D.BaseRange.End.getPointer();
  }
  printBraces(D.Entries, find(HeaderEnd, '{'), D.Range.End.getPointer() - 1, 0);
}

bool Printer::canBeInline(const std::vector<ast::Entry> &Entries, const char *Open, const char *Close) const {
  // A block written on one line stays on one line, unless it holds an
  // annotation, which always gets a line of its own.
  std::function<bool(const std::vector<ast::Entry> &)> NoAnnotations = [&](const std::vector<ast::Entry> &Es) {
    return llvm::all_of(Es, [&](const ast::Entry &E) { return E.Annotations.empty() && NoAnnotations(E.Children); });
  };
  return sameLine(Open, Close) && NoAnnotations(Entries);
}

void Printer::printBraces(const std::vector<ast::Entry> &Entries, const char *Open, const char *Close,
                          unsigned Indent) {
  if (Entries.empty() && !hasCommentIn(Open, Close)) {
    Cur.Text += " {}";
    consumed(Close + 1);
    return;
  }
  if (!Entries.empty() && canBeInline(Entries, Open, Close)) {
    Cur.Text += " { ";
    for (const ast::Entry &E : Entries) {
      if (&E != &Entries.front())
        Cur.Text += "; ";
      printEntry(E, Indent, /*AsKey=*/false);
    }
    Cur.Text += " }";
    consumed(Close + 1);
    return;
  }
  Cur.Text += " {";
  consumed(Open + 1);
  printBlock(Entries, Indent + Opts.IndentWidth);
  newLine(Indent, Close, Entries.empty() ? Blank::Drop : Blank::Keep, /*CodeMayBlank=*/false,
          Indent + Opts.IndentWidth);
  Cur.Text = "}";
  consumed(Close + 1);
}

void Printer::printBlock(const std::vector<ast::Entry> &Entries, unsigned Indent) {
  unsigned Run = NextRun++;
  for (size_t I = 0; I < Entries.size();) {
    const ast::Entry &E = Entries[I];
    endLine();
    size_t LinesBefore = Lines.size();
    Blank B = I == 0 ? Blank::Drop : Blank::Keep;
    printAnnotations(E.Annotations, Indent, B);
    newLine(Indent, E.Annotations.empty() ? E.Range.Start.getPointer() : E.PathRange.Start.getPointer(), B,
            E.Annotations.empty());
    // A blank line ends a run of aligned keys; a comment does not.
    bool BlankSeen = Cur.BlankBefore || std::any_of(Lines.begin() + LinesBefore, Lines.end(),
                                                    [](const OutLine &L) { return L.BlankBefore; });
    if (BlankSeen)
      Run = NextRun++;
    size_t EntryLine = Lines.size(); // the index Cur gets once pushed
    Cur.Run = Run;
    printEntry(E, Indent, /*AsKey=*/true);
    ++I;
    // Entries that shared a line in the source keep sharing it, unless the
    // one before them took several lines.
    bool Joined = false;
    while (I < Entries.size() && Lines.size() == EntryLine && Entries[I].Annotations.empty() &&
           sameLine(Entries[I - 1].Range.End.getPointer(), Entries[I].Range.Start.getPointer())) {
      Cur.Text += "; ";
      printEntry(Entries[I], Indent, /*AsKey=*/false);
      ++I;
      Joined = true;
    }
    // Only single-entry lines are aligned: `tp = 1; cp = 8` stays compact.
    OutLine &First = Lines.size() == EntryLine ? Cur : Lines[EntryLine];
    First.Aligned = !Joined;
  }
}

void Printer::printEntry(const ast::Entry &E, unsigned Indent, bool AsKey) {
  std::string Path = llvm::join(E.Path, ".");
  if (AsKey)
    Cur.Key = Path;
  else
    Cur.Text += Path;
  if (E.isSection()) {
    printBraces(E.Children, E.OpenBrace.Start.getPointer(), E.Range.End.getPointer() - 1, Indent);
  } else {
    Cur.Text += " = ";
    printExpr(*E.Value);
  }
  consumed(E.Range.End.getPointer());
}

// --- Expressions --------------------------------------------------------

int precedence(char Op) { return (Op == '+' || Op == '-') ? 1 : 2; }

bool Printer::isKebab(const ast::Expr &E) {
  if (llvm::isa<ast::PathExpr>(E))
    return true;
  const auto *B = llvm::dyn_cast<ast::BinaryExpr>(&E);
  return B && B->Op == '-' && isKebab(*B->LHS) && llvm::isa<ast::PathExpr>(*B->RHS);
}

template <typename T, typename Fn>
void Printer::printSequence(const std::vector<T> &Items, const char *Open, const char *Close, char OpenChar,
                            char CloseChar, Fn PrintItem) {
  Cur.Text += OpenChar;
  if (Items.empty() || sameLine(Open, Close)) {
    for (const T &X : Items) {
      if (&X != &Items.front())
        Cur.Text += ", ";
      PrintItem(X);
    }
    Cur.Text += CloseChar;
    consumed(Close + 1);
    return;
  }
  unsigned Indent = Cur.Indent;
  consumed(Open + 1);
  for (const T &X : Items) {
    newLine(Indent + Opts.IndentWidth, start(X), &X == &Items.front() ? Blank::Drop : Blank::Keep);
    PrintItem(X);
    Cur.Text += ',';
  }
  newLine(Indent, Close, Blank::Keep, /*CodeMayBlank=*/false, Indent + Opts.IndentWidth);
  Cur.Text += CloseChar;
  consumed(Close + 1);
}

void Printer::printArgs(const std::vector<ast::Argument> &Args, const char *Open, const char *Close,
                        bool InAnnotation) {
  printSequence(Args, Open, Close, '(', ')', [&](const ast::Argument &A) {
    if (!A.Name.empty())
      Cur.Text += A.Name + " = ";
    printExpr(*A.Value, InAnnotation);
  });
}

void Printer::printOperand(const ast::Expr &E, int ParentPrec, bool IsRight) {
  // Parentheses the tree needs, and those the author wrote around an
  // operand: `a - (b * c)` says what the reader should see first.
  bool Parens = inSourceParens(E);
  if (const auto *B = llvm::dyn_cast<ast::BinaryExpr>(&E)) {
    int P = precedence(B->Op);
    Parens |= P < ParentPrec || (IsRight && P == ParentPrec);
  }
  if (Parens)
    Cur.Text += '(';
  printExpr(E);
  if (Parens)
    Cur.Text += ')';
}

void Printer::printExpr(const ast::Expr &E, bool InAnnotation) {
  using K = ast::Expr::Kind;
  const char *End = E.getRange().End.getPointer();
  switch (E.getKind()) {
  case K::Int:
  case K::Float:
  case K::Quantity: {
    // Literals keep their spelling: `4K`, `1_024`, `1e-4` are the author's.
    const auto &N = llvm::cast<ast::NumberLit>(E);
    Cur.Text += N.Digits + N.Unit;
    break;
  }
  case K::String:
    Cur.Text += quote(llvm::cast<ast::StringLit>(E).Value);
    break;
  case K::Bool:
    Cur.Text += llvm::cast<ast::BoolLit>(E).Value ? "true" : "false";
    break;
  case K::Path:
    Cur.Text += llvm::cast<ast::PathExpr>(E).joined();
    break;
  case K::List:
  case K::Sweep: {
    const char *Open = E.getRange().Start.getPointer();
    if (E.getKind() == K::Sweep) {
      Cur.Text += "sweep ";
      Open = find(Open + 5, '[');
    }
    printSequence(llvm::cast<ast::ListExpr>(E).Elements, Open, End - 1, '[', ']',
                  [&](const ast::ExprPtr &X) { printExpr(*X); });
    break;
  }
  case K::Call: {
    const auto &C = llvm::cast<ast::CallExpr>(E);
    Cur.Text += C.Callee;
    printArgs(C.Args, find(C.CalleeRange.End.getPointer(), '('), End - 1, /*InAnnotation=*/false);
    break;
  }
  case K::Unary: {
    const auto &U = llvm::cast<ast::UnaryExpr>(E);
    Cur.Text += U.Op;
    printOperand(*U.Operand, 3, false);
    break;
  }
  case K::Binary: {
    const auto &B = llvm::cast<ast::BinaryExpr>(E);
    // A diagnostic ID in @allow is kebab-case, which parses as subtraction:
    // `@allow(shadows-builtin, ...)` is printed as written, not spaced out.
    if (InAnnotation && isKebab(E)) {
      printExpr(*B.LHS, /*InAnnotation=*/true);
      Cur.Text += '-';
      printExpr(*B.RHS);
      break;
    }
    unsigned Indent = Cur.Indent;
    int P = precedence(B.Op);
    printOperand(*B.LHS, P, false);
    // An expression the author continued on the next line is continued
    // there, with the operator first (the only way the language allows).
    if (!sameLine(B.LHS->getRange().End.getPointer(), B.RHS->getRange().Start.getPointer())) {
      newLine(Indent + Opts.IndentWidth, B.OpRange.Start.getPointer(), Blank::Keep, /*CodeMayBlank=*/false);
      Cur.Text += B.Op;
      Cur.Text += ' ';
    } else {
      Cur.Text += ' ';
      Cur.Text += B.Op;
      Cur.Text += ' ';
    }
    consumed(B.OpRange.End.getPointer());
    printOperand(*B.RHS, P, true);
    break;
  }
  }
  consumed(End);
}

std::string Printer::render() const {
  // Each run's keys are padded to its widest key, except that in a run of
  // three or more, one key more than OutlierGap characters wider than all
  // the others is left out, so that a single `cuda_graph_impl` does not push
  // every `=` to the right.
  constexpr size_t OutlierGap = 4;
  std::vector<std::vector<size_t>> KeySizes(NextRun);
  for (const OutLine &L : Lines)
    if (L.Aligned)
      KeySizes[L.Run].push_back(L.Key.size());
  std::vector<size_t> Width(NextRun, 0);
  for (unsigned Run = 0; Run < NextRun; ++Run) {
    std::vector<size_t> &Sizes = KeySizes[Run];
    llvm::sort(Sizes, std::greater<size_t>());
    if (Sizes.size() >= 3 && Sizes[0] > Sizes[1] + OutlierGap)
      Width[Run] = Sizes[1];
    else if (!Sizes.empty())
      Width[Run] = Sizes[0];
  }
  std::vector<std::string> Code;
  for (const OutLine &L : Lines) {
    std::string S(L.Indent, ' ');
    S += L.Key;
    if (L.Aligned && Width[L.Run] > L.Key.size())
      S.append(Width[L.Run] - L.Key.size(), ' ');
    S += L.Text;
    Code.push_back(StringRef(S).rtrim().str());
  }
  // Trailing comments on consecutive lines of one indentation line up.
  for (size_t I = 0; I < Lines.size();) {
    if (Lines[I].Comment.empty()) {
      ++I;
      continue;
    }
    size_t J = I, Column = 0;
    for (; J < Lines.size() && !Lines[J].Comment.empty() && Lines[J].Indent == Lines[I].Indent &&
           (J == I || !Lines[J].BlankBefore);
         ++J)
      Column = std::max(Column, Code[J].size() + Opts.CommentGap);
    for (; I < J; ++I) {
      Code[I].append(Column - Code[I].size(), ' ');
      Code[I] += Lines[I].Comment;
    }
  }
  std::string Out;
  for (size_t I = 0; I < Lines.size(); ++I) {
    if (Lines[I].BlankBefore && I > 0)
      Out += '\n';
    Out += Code[I];
    Out += '\n';
  }
  return Out;
}

} // namespace

FormatResult moec::formatBuffer(unsigned BufferID, DiagnosticEngine &Diags, const FormatOptions &Opts) {
  FormatResult R;
  unsigned ErrorsBefore = Diags.errorCount();
  std::unique_ptr<ast::File> F = parseBuffer(BufferID, Diags);
  if (!F || Diags.errorCount() != ErrorsBefore) {
    R.St = FormatResult::Status::SyntaxError;
    return R;
  }
  const llvm::MemoryBuffer *Buffer = Diags.getSourceMgr().getMemoryBuffer(BufferID);
  StringRef Text = Buffer->getBuffer();
  std::string Out = Printer(Text, Opts).print(*F);

  // The self-check: the output must mean what the input meant.
  auto Fail = [&](std::string Why) {
    R.St = FormatResult::Status::InternalError;
    R.Message = std::move(Why);
    return R;
  };
  llvm::SourceMgr SM;
  DiagnosticEngine Check(SM);
  unsigned OutID =
      SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Out, Buffer->getBufferIdentifier()), llvm::SMLoc());
  std::unique_ptr<ast::File> G = parseBuffer(OutID, Check);
  if (!G || Check.errorCount()) {
    const std::vector<Diagnostic> &Ds = Check.finish();
    return Fail("the formatted text does not parse" + (Ds.empty() ? std::string() : ": " + Ds.front().Message));
  }
  auto Dump = [](const ast::File &X) {
    std::string S;
    llvm::raw_string_ostream OS(S);
    ast::dump(X, OS);
    return OS.str();
  };
  if (Dump(*F) != Dump(*G))
    return Fail("the formatted text parses to a different tree");
  auto CommentTexts = [](StringRef T) {
    std::vector<std::string> Out;
    for (const CommentSpan &C : findComments(T))
      Out.push_back(T.slice(C.Begin, C.End).rtrim().str());
    return Out;
  };
  if (CommentTexts(Text) != CommentTexts(Out))
    return Fail("the formatted text does not keep the comments in their order");
  R.Text = std::move(Out);
  return R;
}
