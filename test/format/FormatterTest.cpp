//===- FormatterTest.cpp - moec fmt's layout, comments, idempotence, diffs ===//
#include "moec/Format/Formatter.h"
#include "moec/AST/AST.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Format/UnifiedDiff.h"
#include "moec/Syntax/Parser.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <random>

using namespace moec;
using llvm::StringRef;

namespace {

std::string repoRoot() {
  llvm::SmallString<256> P(__FILE__);
  llvm::sys::path::remove_filename(P); // test/format
  llvm::sys::path::remove_filename(P); // test
  llvm::sys::path::remove_filename(P); // root
  return std::string(P);
}

struct Formatted {
  explicit Formatted(StringRef Text, StringRef Name = "t.moe") : Diags(SM) {
    unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, Name), llvm::SMLoc());
    R = formatBuffer(ID, Diags);
    Final = Diags.finish();
  }
  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  FormatResult R;
  std::vector<Diagnostic> Final;
};

/// Formats Text and expects success.
std::string fmt(StringRef Text) {
  Formatted F(Text);
  EXPECT_TRUE(F.R.ok()) << "status " << int(F.R.St) << ": " << F.R.Message << "\n" << Text.str();
  return F.R.Text;
}

// --- An independent structural print of the tree ------------------------
// Not ast::dump, which the formatter's own self-check uses: a bug shared by
// both would otherwise go unseen.

void sexpr(const ast::Expr &E, std::string &Out);

void sexprArgs(const std::vector<ast::Argument> &Args, std::string &Out) {
  for (const ast::Argument &A : Args) {
    Out += " (arg " + A.Name + " ";
    sexpr(*A.Value, Out);
    Out += ")";
  }
}

void sexpr(const ast::Expr &E, std::string &Out) {
  using K = ast::Expr::Kind;
  switch (E.getKind()) {
  case K::Int:
  case K::Float:
  case K::Quantity: {
    const auto &N = llvm::cast<ast::NumberLit>(E);
    Out += "(num " + std::to_string(int(E.getKind())) + " " + N.Digits + " " + N.Unit + ")";
    return;
  }
  case K::String:
    Out += "(str \"" + llvm::cast<ast::StringLit>(E).Value + "\")";
    return;
  case K::Bool:
    Out += llvm::cast<ast::BoolLit>(E).Value ? "(true)" : "(false)";
    return;
  case K::Path:
    Out += "(path " + llvm::cast<ast::PathExpr>(E).joined() + ")";
    return;
  case K::List:
  case K::Sweep:
    Out += E.getKind() == K::List ? "(list" : "(sweep";
    for (const ast::ExprPtr &X : llvm::cast<ast::ListExpr>(E).Elements) {
      Out += " ";
      sexpr(*X, Out);
    }
    Out += ")";
    return;
  case K::Call: {
    const auto &C = llvm::cast<ast::CallExpr>(E);
    Out += "(call " + C.Callee;
    sexprArgs(C.Args, Out);
    Out += ")";
    return;
  }
  case K::Unary: {
    const auto &U = llvm::cast<ast::UnaryExpr>(E);
    Out += std::string("(") + U.Op + " ";
    sexpr(*U.Operand, Out);
    Out += ")";
    return;
  }
  case K::Binary: {
    const auto &B = llvm::cast<ast::BinaryExpr>(E);
    Out += std::string("(") + B.Op + " ";
    sexpr(*B.LHS, Out);
    Out += " ";
    sexpr(*B.RHS, Out);
    Out += ")";
    return;
  }
  }
}

void sexprAnnotations(const std::vector<ast::Annotation> &As, std::string &Out) {
  for (const ast::Annotation &A : As) {
    Out += "(@" + A.Name;
    sexprArgs(A.Args, Out);
    Out += ")";
  }
}

void sexprEntries(const std::vector<ast::Entry> &Es, std::string &Out) {
  for (const ast::Entry &E : Es) {
    Out += "(entry ";
    sexprAnnotations(E.Annotations, Out);
    Out += llvm::join(E.Path, ".");
    if (E.isSection()) {
      Out += " {";
      sexprEntries(E.Children, Out);
      Out += "}";
    } else {
      Out += " = ";
      sexpr(*E.Value, Out);
    }
    Out += ")";
  }
}

/// The tree of Text, or "" when it does not parse.
std::string structure(StringRef Text) {
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "s.moe"), llvm::SMLoc());
  std::unique_ptr<ast::File> F = parseBuffer(ID, Diags);
  if (!F || Diags.errorCount())
    return "";
  std::string Out;
  for (const ast::Import &I : F->Imports)
    Out += "(import " + I.Path + ")";
  for (const ast::Definition &D : F->Definitions) {
    Out += "(def ";
    sexprAnnotations(D.Annotations, Out);
    Out += ast::defKindName(D.Kind).str() + " " + D.Name + " " + D.Base;
    sexprEntries(D.Entries, Out);
    Out += ")";
  }
  return Out;
}

std::vector<std::string> commentsOf(StringRef Text) {
  std::vector<std::string> Out;
  for (const CommentSpan &C : findComments(Text))
    Out.push_back(Text.slice(C.Begin, C.End).rtrim().str());
  return Out;
}

// --- Layout ----------------------------------------------------------------

TEST(FormatLayout, SpacingIndentationAndAlignment) {
  EXPECT_EQ(fmt("recipe   r extends  base{\n"
                "model=qwen3_30b_a3b\n"
                "      cluster{gpu=h100_sxm;nodes=2}\n"
                "seq_len=4K*2\n"
                "  parallel{tp=2;cp=seq_len/4K}\n"
                "}\n"),
            "recipe r extends base {\n"
            "  model    = qwen3_30b_a3b\n"
            "  cluster  { gpu = h100_sxm; nodes = 2 }\n"
            "  seq_len  = 4K * 2\n"
            "  parallel { tp = 2; cp = seq_len / 4K }\n"
            "}\n");
}

TEST(FormatLayout, BlankLinesEndAlignmentRunsAndAreKeptAtMostOne) {
  EXPECT_EQ(fmt("recipe r {\n\n\n  model = m\n  seq_len = 4K\n\n\n\n  precision = bf16\n  x = 1\n\n}\n"),
            "recipe r {\n"
            "  model   = m\n"
            "  seq_len = 4K\n"
            "\n"
            "  precision = bf16\n"
            "  x         = 1\n"
            "}\n");
}

TEST(FormatLayout, DefinitionsAreSetApartByOneBlankLine) {
  EXPECT_EQ(
      fmt("import \"a.moe\"\nimport \"b.moe\"\nmodel m extends x { layers = 4 }\n\n\n\nrecipe r {}; recipe s {\n}"),
      "import \"a.moe\"\n"
      "import \"b.moe\"\n"
      "\n"
      "model m extends x { layers = 4 }\n"
      "\n"
      "recipe r {}\n"
      "\n"
      "recipe s {}\n");
}

TEST(FormatLayout, EntriesSharingALineStayTogetherUnaligned) {
  // `tp = 1; cp = 8` is a deliberate group; a line of several entries is
  // neither padded nor widens the run.
  EXPECT_EQ(fmt("recipe r {\n  parallel {\n    tp=1;cp=8;;ep=8\n    layout = \"Et|tL\"\n    cp_comm = a2a\n  }\n}\n"),
            "recipe r {\n"
            "  parallel {\n"
            "    tp = 1; cp = 8; ep = 8\n"
            "    layout  = \"Et|tL\"\n"
            "    cp_comm = a2a\n"
            "  }\n"
            "}\n");
}

TEST(FormatLayout, OneOutlierKeyIsNotAlignedTo) {
  EXPECT_EQ(
      fmt("recipe r {\n  model = m\n  cuda_graph = none\n  cuda_graph_impl = local\n  data { source = mock }\n}\n"),
      "recipe r {\n"
      "  model      = m\n"
      "  cuda_graph = none\n"
      "  cuda_graph_impl = local\n"
      "  data       { source = mock }\n"
      "}\n");
  // Within OutlierGap characters, or in a run of two, the longest key is
  // aligned to.
  EXPECT_EQ(fmt("recipe r {\n  model = m\n  cuda_graph = none\n  cuda_graph_x = none\n}\n"),
            "recipe r {\n  model        = m\n  cuda_graph   = none\n  cuda_graph_x = none\n}\n");
  EXPECT_EQ(fmt("recipe r {\n  model = m\n  cuda_graph_impl = none\n}\n"),
            "recipe r {\n  model           = m\n  cuda_graph_impl = none\n}\n");
}

TEST(FormatLayout, SectionsWrittenOnSeveralLinesStayExpanded) {
  EXPECT_EQ(fmt("recipe r { batch { micro = 1\n global = 8 }; x { } }\n"), "recipe r {\n"
                                                                           "  batch {\n"
                                                                           "    micro  = 1\n"
                                                                           "    global = 8\n"
                                                                           "  }\n"
                                                                           "  x     {}\n"
                                                                           "}\n");
}

TEST(FormatLayout, ListsAndCallsSpreadOverLinesGetOneElementPerLine) {
  EXPECT_EQ(fmt("recipe r {\n  recompute = sweep [selective(moe_act),\n  full(method=uniform,\n layers = 2)]\n"
                "  cuda_graph = [attn, moe]\n}\n"),
            "recipe r {\n"
            "  recompute  = sweep [\n"
            "    selective(moe_act),\n"
            "    full(\n"
            "      method = uniform,\n"
            "      layers = 2,\n"
            "    ),\n"
            "  ]\n"
            "  cuda_graph = [attn, moe]\n"
            "}\n");
  // A trailing comma on one line goes.
  EXPECT_EQ(fmt("recipe r { x = [1, 2,] }\n"), "recipe r { x = [1, 2] }\n");
}

TEST(FormatLayout, ContinuedExpressionsBreakBeforeTheOperator) {
  // Each continuation is indented from the line its operand starts on, so
  // the indentation shows the tree: `*` binds 4K * 2 below `+`.
  std::string Out = fmt("recipe r {\n  seq_len = 4K +\n 4K\n      * 2\n  x = a\n - b\n - c\n}\n");
  EXPECT_EQ(Out, "recipe r {\n"
                 "  seq_len = 4K\n"
                 "    + 4K\n"
                 "      * 2\n"
                 "  x       = a\n"
                 "    - b\n"
                 "    - c\n"
                 "}\n");
  EXPECT_EQ(fmt(Out), Out);
}

TEST(FormatLayout, Parentheses) {
  // Kept around an operand where written, added where needed, dropped
  // around a whole value.
  EXPECT_EQ(fmt("recipe r {\n  a = (seq_len / 4K)\n  b = x - (y * z)\n  c = (x + y) * z\n  d = -(x+y)\n"
                "  e = x - (y - z)\n  f = ((x)) * 2\n}\n"),
            "recipe r {\n"
            "  a = seq_len / 4K\n"
            "  b = x - (y * z)\n"
            "  c = (x + y) * z\n"
            "  d = -(x + y)\n"
            "  e = x - (y - z)\n"
            "  f = (x) * 2\n"
            "}\n");
}

TEST(FormatLayout, LiteralsKeepTheirSpelling) {
  EXPECT_EQ(fmt("gpu g extends h100_sxm { memory = 80GB; hbm = 3.35TB/s; bf16 = 989TFLOPS; sm = 1_32 }\n"
                "recipe r { s = \"a \\\"q\\\" \\\\ # not a comment\\n\"; f = 1e-4; t = true }\n"),
            "gpu g extends h100_sxm { memory = 80GB; hbm = 3.35TB/s; bf16 = 989TFLOPS; sm = 1_32 }\n"
            "\n"
            "recipe r { s = \"a \\\"q\\\" \\\\ # not a comment\\n\"; f = 1e-4; t = true }\n");
}

TEST(FormatLayout, AnnotationsGetTheirOwnLineAndKebabIDsStayKebab) {
  EXPECT_EQ(fmt("@allow(shadows-builtin,reason=\"r\") model qwen3_30b_a3b extends qwen3_30b_a3b { layers = 4 }\n"
                "recipe r {\n  model = m\n  @allow( cp-ring-across-domains , reason = \"x\" ) parallel { cp = 2 }\n"
                "  @deprecated() seq_len = 4K - 1\n}\n"),
            "@allow(shadows-builtin, reason = \"r\")\n"
            "model qwen3_30b_a3b extends qwen3_30b_a3b { layers = 4 }\n"
            "\n"
            "recipe r {\n"
            "  model    = m\n"
            "  @allow(cp-ring-across-domains, reason = \"x\")\n"
            "  parallel { cp = 2 }\n"
            "  @deprecated\n"
            "  seq_len  = 4K - 1\n"
            "}\n");
}

TEST(FormatLayout, LineEndingsByteOrderMarkAndTabs) {
  std::string Want = "recipe r {\n  model = m   # c\n\n  seq_len = 4K\n}\n";
  EXPECT_EQ(fmt("\xEF\xBB\xBFrecipe r {\r\n\tmodel = m # c\r\n\r\n\tseq_len = 4K\r\n}\r\n"), Want);
  EXPECT_EQ(fmt("recipe r {\r\tmodel = m # c\r\r\tseq_len = 4K\r}"), Want);
}

// --- Comments ----------------------------------------------------------------

TEST(FormatComments, StayWhereTheyWere) {
  std::string In = "   # header\n"
                   "\n"
                   "\n"
                   "import \"a.moe\"  # why a\n"
                   "# about r\n"
                   "recipe r {  # opening\n"
                   "    # first\n"
                   "  model = m # the model\n"
                   "  seq_len = 4K     # short\n"
                   "  recompute = sweep [ # choices\n"
                   "    selective(moe_act), # one\n"
                   "       # between\n"
                   "    full\n"
                   "  ]\n"
                   "  parallel {\n"
                   "    tp = 2\n"
                   "        # last inside\n"
                   "  } # after the section\n"
                   "  # last in r\n"
                   "}  # closing r\n"
                   "# footer\n";
  std::string Out = fmt(In);
  EXPECT_EQ(Out, "# header\n"
                 "\n"
                 "import \"a.moe\"   # why a\n"
                 "\n"
                 "# about r\n"
                 "recipe r {   # opening\n"
                 "  # first\n"
                 "  model     = m         # the model\n"
                 "  seq_len   = 4K        # short\n"
                 "  recompute = sweep [   # choices\n"
                 "    selective(moe_act),   # one\n"
                 "    # between\n"
                 "    full,\n"
                 "  ]\n"
                 "  parallel  {\n"
                 "    tp = 2\n"
                 "    # last inside\n"
                 "  }   # after the section\n"
                 "  # last in r\n"
                 "}   # closing r\n"
                 "# footer\n");
  EXPECT_EQ(commentsOf(In), commentsOf(Out));
}

TEST(FormatComments, CommentsInOddPlacesAreKeptInOrder) {
  // Places the layout has no slot for (inside a path, between a call's name
  // and its '(', inside dropped parentheses) keep every comment, in order.
  std::string In = "recipe # a\n r # b\n extends # c\n base # d\n { x = ( # e\n 4K # f\n ) ; y = f # g\n (1)\n"
                   " z = a. # h\n b }\n";
  std::string Out = fmt(In);
  EXPECT_EQ(commentsOf(In), commentsOf(Out));
  EXPECT_EQ(structure(In), structure(Out));
  EXPECT_EQ(fmt(Out), Out);
}

TEST(FormatComments, FindCommentsSkipsStrings) {
  StringRef T = "a = \"# no\" # yes\nb = \"\\\" # still a string\" # two\n# three";
  std::vector<std::string> Want = {"# yes", "# two", "# three"};
  EXPECT_EQ(commentsOf(T), Want);
}

// --- Errors ----------------------------------------------------------------------

TEST(FormatErrors, SyntaxErrorsAreRefusedWithTheParsersDiagnostic) {
  Formatted F("recipe r {\n  seq_len = 4K 5\n}\n");
  EXPECT_EQ(F.R.St, FormatResult::Status::SyntaxError);
  EXPECT_TRUE(F.R.Text.empty());
  ASSERT_FALSE(F.Final.empty());
  EXPECT_EQ(getDiagInfo(F.Final[0].ID).Id.str(), "syntax-error");
  EXPECT_EQ(F.SM.getLineAndColumn(F.Final[0].Range.Start), std::make_pair(2u, 16u));
  // A missing separator is an error the parser reports without failing.
  Formatted G("recipe r {\n  seq_len = 4K batch { micro = 1 }\n}\n");
  EXPECT_EQ(G.R.St, FormatResult::Status::SyntaxError);
  // A file of comments only defines nothing.
  EXPECT_EQ(Formatted("# nothing\n").R.St, FormatResult::Status::SyntaxError);
}

// --- The corpus: every example and every test input ---------------------------

/// Every .moe under examples/ and test/lit, and every `#--- x.moe` section
/// of the lit tests (split-file inputs), as (name, text).
std::vector<std::pair<std::string, std::string>> corpus() {
  std::vector<std::pair<std::string, std::string>> Out;
  std::string Root = repoRoot();
  for (StringRef Dir : {"examples", "test/lit"}) {
    llvm::SmallString<256> Base(Root);
    llvm::sys::path::append(Base, Dir);
    std::error_code EC;
    for (llvm::sys::fs::recursive_directory_iterator It(Base, EC), End; It != End && !EC; It.increment(EC)) {
      StringRef Ext = llvm::sys::path::extension(It->path());
      if (Ext != ".moe" && Ext != ".test")
        continue;
      auto Buffer = llvm::MemoryBuffer::getFile(It->path());
      if (!Buffer)
        continue;
      StringRef Text = (*Buffer)->getBuffer();
      if (Ext == ".moe") {
        Out.push_back({It->path(), Text.str()});
        continue;
      }
      std::string Name, Section;
      auto Flush = [&] {
        if (StringRef(Name).endswith(".moe"))
          Out.push_back({It->path() + ":" + Name, Section});
      };
      llvm::SmallVector<StringRef, 64> Lines;
      Text.split(Lines, '\n');
      for (StringRef Line : Lines) {
        if (Line.startswith("#--- ")) {
          Flush();
          Name = Line.drop_front(5).trim().str();
          Section.clear();
        } else if (!Name.empty()) {
          Section += Line.str() + "\n";
        }
      }
      Flush();
    }
  }
  std::sort(Out.begin(), Out.end());
  return Out;
}

TEST(FormatCorpus, IdempotentAndMeaningPreservingOnEveryInput) {
  auto Files = corpus();
  ASSERT_GT(Files.size(), 300u) << "the corpus was not found under " << repoRoot();
  unsigned Formatted_ = 0, Refused = 0, Examples = 0;
  for (const auto &[Name, Text] : Files) {
    Formatted F(Text, Name);
    if (F.R.St == FormatResult::Status::SyntaxError) {
      // Only inputs the parser rejects are refused.
      EXPECT_EQ(structure(Text), "") << Name;
      ++Refused;
      continue;
    }
    ASSERT_TRUE(F.R.ok()) << Name << ": " << F.R.Message;
    ++Formatted_;
    Examples += StringRef(Name).contains("/examples/");
    EXPECT_EQ(structure(Text), structure(F.R.Text)) << Name;
    EXPECT_EQ(commentsOf(Text), commentsOf(F.R.Text)) << Name;
    Formatted Again(F.R.Text, Name);
    ASSERT_TRUE(Again.R.ok()) << Name;
    EXPECT_EQ(Again.R.Text, F.R.Text) << Name << "\n" << unifiedDiff(F.R.Text, Again.R.Text, "once", "twice");
  }
  EXPECT_GT(Examples, 90u);
  EXPECT_GT(Formatted_, 350u);
  EXPECT_GT(Refused, 10u); // the syntax-error tests are in the corpus
}

/// Text with its whitespace (outside strings and comments) replaced at
/// random by other whitespace, line breaks, blank lines and comments: the
/// same tokens, so the same tree, in a layout no one would write.
std::string perturb(StringRef Text, std::mt19937 &Rng) {
  static const char *const Choices[] = {" ", "   ", "\t", "\n", "\n\n\n", "  # fuzz\n", "\n# fuzz\n\n  ", "\r\n"};
  std::uniform_int_distribution<int> Pick(0, 7), Coin(0, 2);
  std::string Out;
  for (size_t I = 0; I < Text.size();) {
    char C = Text[I];
    if (C == '"' || C == '#') {
      // Copy a string or a comment as it is.
      size_t J = I + 1;
      if (C == '"') {
        while (J < Text.size() && Text[J] != '"' && Text[J] != '\n')
          J += Text[J] == '\\' ? 2 : 1;
        J = std::min(J + 1, Text.size());
      } else {
        J = std::min(Text.find('\n', I), Text.size());
      }
      Out += Text.slice(I, J).str();
      I = J;
      continue;
    }
    if (C != ' ' && C != '\t' && C != '\n') {
      Out += C;
      ++I;
      continue;
    }
    size_t J = I;
    bool HadBreak = false;
    while (J < Text.size() && (Text[J] == ' ' || Text[J] == '\t' || Text[J] == '\n'))
      HadBreak |= Text[J++] == '\n';
    // A line break between entries may not be dropped: it is their separator.
    std::string W = Coin(Rng) ? Choices[Pick(Rng)] : Text.slice(I, J).str();
    if (HadBreak && W.find('\n') == std::string::npos)
      W += "\n";
    Out += W;
    I = J;
  }
  return Out;
}

TEST(FormatCorpus, AnyLayoutOfTheSameTokensFormatsTheSame) {
  // Reformatting is a function of the tokens, the comments and the line
  // breaks the layout keeps: every perturbation must format without a
  // self-check failure, keep the tree, and be idempotent.
  std::mt19937 Rng(2026);
  unsigned Runs = 0;
  for (const auto &[Name, Text] : corpus()) {
    std::string Tree = structure(Text);
    if (Tree.empty())
      continue;
    for (int Variant = 0; Variant < 3; ++Variant) {
      std::string In = perturb(Text, Rng);
      Formatted F(In, Name);
      ASSERT_TRUE(F.R.ok()) << Name << " variant " << Variant << ": status " << int(F.R.St) << " " << F.R.Message
                            << "\n"
                            << In;
      EXPECT_EQ(structure(F.R.Text), Tree) << Name;
      EXPECT_EQ(commentsOf(F.R.Text), commentsOf(In)) << Name;
      Formatted Again(F.R.Text, Name);
      ASSERT_TRUE(Again.R.ok()) << Name;
      EXPECT_EQ(Again.R.Text, F.R.Text) << Name << " variant " << Variant << "\n"
                                        << unifiedDiff(F.R.Text, Again.R.Text, "once", "twice") << "input:\n"
                                        << In;
      ++Runs;
    }
  }
  EXPECT_GT(Runs, 1000u);
}

// --- Unified diffs --------------------------------------------------------------

/// Applies a unified diff to Old, checking every context and removed line.
std::string applyDiff(StringRef Old, StringRef Diff) {
  llvm::SmallVector<StringRef, 64> OldLines, DiffLines;
  Old.split(OldLines, '\n');
  if (!OldLines.empty() && OldLines.back().empty())
    OldLines.pop_back();
  Diff.split(DiffLines, '\n');
  std::vector<std::string> Out;
  size_t At = 0; // next line of Old to copy
  for (size_t I = 2; I < DiffLines.size(); ++I) {
    StringRef L = DiffLines[I];
    if (L.empty())
      continue;
    if (L.startswith("@@ -")) {
      // "-Start[,Count]": an empty old range names the line before it.
      StringRef Range = L.drop_front(4).take_until([](char C) { return C == ' '; });
      unsigned Start = 0, Count = 1;
      Range.take_until([](char C) { return C == ','; }).getAsInteger(10, Start);
      if (Range.contains(','))
        Range.split(',').second.getAsInteger(10, Count);
      size_t Target = Count == 0 ? Start : Start - 1;
      while (At < Target)
        Out.push_back(OldLines[At++].str());
      continue;
    }
    if (L[0] == ' ' || L[0] == '-') {
      EXPECT_LT(At, OldLines.size());
      if (At < OldLines.size())
        EXPECT_EQ(OldLines[At].str(), L.drop_front().str()) << "diff line " << I;
      ++At;
    }
    if (L[0] == ' ' || L[0] == '+')
      Out.push_back(L.drop_front().str());
  }
  while (At < OldLines.size())
    Out.push_back(OldLines[At++].str());
  std::string S;
  for (const std::string &L : Out)
    S += L + "\n";
  return S;
}

TEST(UnifiedDiff, Format) {
  EXPECT_EQ(unifiedDiff("a\nb\n", "a\nb\n", "x", "y"), "");
  EXPECT_EQ(unifiedDiff("a\nb\nc\n", "a\nB\nc\n", "x", "x (formatted)"),
            "--- x\n+++ x (formatted)\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
  EXPECT_EQ(unifiedDiff("", "a\n", "x", "y"), "--- x\n+++ y\n@@ -0,0 +1 @@\n+a\n");
  EXPECT_EQ(unifiedDiff("a", "a\n", "x", "y"), "--- x\n+++ y\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n");
  // Changes more than twice the context apart are separate hunks.
  std::string Old, New;
  for (int I = 0; I < 20; ++I) {
    Old += std::to_string(I) + "\n";
    New += (I == 2 || I == 17 ? "x" : std::to_string(I)) + "\n";
  }
  std::string D = unifiedDiff(Old, New, "o", "n");
  EXPECT_NE(D.find("@@ -1,6 +1,6 @@"), std::string::npos) << D;
  EXPECT_NE(D.find("@@ -15,6 +15,6 @@"), std::string::npos) << D;
}

TEST(UnifiedDiff, RandomEditsRoundTrip) {
  std::mt19937 Rng(7);
  for (int Trial = 0; Trial < 300; ++Trial) {
    std::uniform_int_distribution<int> Len(0, 40), Letter(0, 5), Edit(0, 9);
    std::vector<std::string> A;
    for (int I = 0, N = Len(Rng); I < N; ++I)
      A.push_back(std::string(1, char('a' + Letter(Rng))));
    std::vector<std::string> B;
    for (const std::string &L : A) {
      int E = Edit(Rng);
      if (E == 0)
        continue; // delete
      if (E == 1)
        B.push_back("new");
      B.push_back(E == 2 ? "changed" : L);
    }
    std::string Old, New;
    for (const std::string &L : A)
      Old += L + "\n";
    for (const std::string &L : B)
      New += L + "\n";
    std::string D = unifiedDiff(Old, New, "a", "b");
    EXPECT_EQ(D.empty(), Old == New);
    if (!D.empty())
      EXPECT_EQ(applyDiff(Old, D), New) << "trial " << Trial << "\n" << D;
  }
}

} // namespace
