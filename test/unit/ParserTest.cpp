//===- ParserTest.cpp - Round trips through ast::dump; errors are diagnostics -===//
#include "moec/Syntax/Parser.h"
#include "moec/AST/AST.h"
#include "moec/AST/Builder.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Casting.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <algorithm>
#include <gtest/gtest.h>

using namespace moec;
using llvm::StringRef;

namespace {

/// The repository root, found from this file's path (test/unit/ParserTest.cpp).
std::string repoRoot() {
  llvm::SmallString<256> P(__FILE__);
  llvm::sys::path::remove_filename(P); // test/unit
  llvm::sys::path::remove_filename(P); // test
  llvm::sys::path::remove_filename(P); // root
  return std::string(P);
}

std::vector<std::string> moeFilesUnder(StringRef Dir) {
  std::vector<std::string> Files;
  std::error_code EC;
  for (llvm::sys::fs::recursive_directory_iterator It(Dir, EC), End; It != End && !EC; It.increment(EC))
    if (llvm::sys::path::extension(It->path()) == ".moe")
      Files.push_back(It->path());
  std::sort(Files.begin(), Files.end());
  return Files;
}

/// One parse of Text in its own SourceMgr.
struct Parsed {
  explicit Parsed(StringRef Text, StringRef Name = "test.moe", ParseLimits Limits = {}) : Diags(SM) {
    unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, Name), llvm::SMLoc());
    File = parseBuffer(ID, Diags, Limits);
    Final = Diags.finish();
  }
  std::string dump() const {
    std::string S;
    llvm::raw_string_ostream OS(S);
    if (File)
      ast::dump(*File, OS);
    OS.flush();
    return S;
  }
  std::string summary() const {
    std::string Out;
    for (const Diagnostic &D : Final) {
      if (D.Range.Start.isValid()) {
        auto LC = SM.getLineAndColumn(D.Range.Start);
        Out += std::to_string(LC.first) + ":" + std::to_string(LC.second) + ": ";
      }
      Out += "[" + getDiagInfo(D.ID).Id.str() + "] " + D.Message + "\n";
    }
    return Out.empty() ? "(no diagnostics)" : Out;
  }
  StringRef text() const { return SM.getMemoryBuffer(SM.getMainFileID())->getBuffer(); }
  size_t errors() const {
    return size_t(llvm::count_if(Final, [](const Diagnostic &D) { return D.Sev == Severity::Error; }));
  }
  bool hasError() const {
    return llvm::any_of(Final, [](const Diagnostic &D) { return D.Sev == Severity::Error; });
  }
  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  std::unique_ptr<ast::File> File;
  std::vector<Diagnostic> Final;
};

// A fully parenthesized structural print of the tree, independent of
// ast::dump, so that a round trip that changes the meaning (a lost
// parenthesis, a reordered entry) is caught even if dump is self-consistent.
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

void sexprEntries(const std::vector<ast::Entry> &Entries, std::string &Out) {
  for (const ast::Entry &E : Entries) {
    Out += "(entry ";
    sexprAnnotations(E.Annotations, Out);
    for (const std::string &P : E.Path)
      Out += P + ".";
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

std::string sexpr(const ast::File &F) {
  std::string Out;
  for (const ast::Import &I : F.Imports)
    Out += "(import \"" + I.Path + "\")";
  for (const ast::Definition &D : F.Definitions) {
    Out += "(def ";
    sexprAnnotations(D.Annotations, Out);
    Out += ast::defKindName(D.Kind).str() + " " + D.Name + " extends:" + D.Base;
    sexprEntries(D.Entries, Out);
    Out += ")\n";
  }
  return Out;
}

/// parse -> dump -> parse -> dump: the dumps are identical and the trees agree.
void expectRoundTrip(StringRef Text, StringRef Name) {
  Parsed First(Text, Name);
  ASSERT_TRUE(First.File) << Name.str() << ":\n" << First.summary();
  EXPECT_FALSE(First.hasError()) << First.summary();
  std::string Dump1 = First.dump();
  EXPECT_FALSE(Dump1.empty());
  Parsed Second(Dump1, Name);
  ASSERT_TRUE(Second.File) << "the dump of " << Name.str() << " does not parse:\n"
                           << Second.summary() << "\n--- dump ---\n"
                           << Dump1;
  EXPECT_TRUE(Second.Final.empty()) << Second.summary();
  EXPECT_EQ(Second.dump(), Dump1) << Name.str();
  EXPECT_EQ(sexpr(*Second.File), sexpr(*First.File)) << Name.str();
}

} // namespace

TEST(ParserRoundTrip, Examples) {
  std::string Examples = repoRoot() + "/examples";
  ASSERT_TRUE(llvm::sys::fs::is_directory(Examples)) << Examples;
  std::vector<std::string> Files = moeFilesUnder(Examples);
  ASSERT_FALSE(Files.empty()) << "no .moe files under " << Examples;
  for (const std::string &Path : Files) {
    SCOPED_TRACE(Path);
    auto Buffer = llvm::MemoryBuffer::getFile(Path);
    ASSERT_TRUE(bool(Buffer)) << Path;
    expectRoundTrip((*Buffer)->getBuffer(), Path);
  }
}

TEST(ParserRoundTrip, Catalog) {
  std::vector<std::string> Files = moeFilesUnder(repoRoot() + "/lib/Catalog");
  ASSERT_FALSE(Files.empty());
  for (const std::string &Path : Files) {
    SCOPED_TRACE(Path);
    auto Buffer = llvm::MemoryBuffer::getFile(Path);
    ASSERT_TRUE(bool(Buffer)) << Path;
    expectRoundTrip((*Buffer)->getBuffer(), Path);
  }
}

TEST(ParserRoundTrip, EverySyntacticForm) {
  expectRoundTrip(R"moe(import "common.moe"
import "dir/with \"quote\".moe"

# A comment.
@allow(shadows-builtin, reason = "testing; \\ and \n escapes")
model deepseek_v3 extends deepseek_v3 { layers = 1_024 }

cluster eos { gpu = h100_sxm; nodes = 576 }

@allow(cp-shard-size, reason = "why")
recipe r extends base {
  model = deepseek_v3; cluster = eos
  seq_len = 128K
  parallel.cp = seq_len / 4K
  parallel { tp = -(1 - 2) * 1; pp = (8 + 8) / (1 + 1); ep = 2 * (3 + 5) % 7; vpp = +4 }
  parallel { etp = 8 - 4 - 2; dp = 16 / 4 / 2; layout = "Et|(tt|)*30mL" }
  @allow(unknown-unit, reason = "x")
  batch { micro = sweep [1, 2, 4,]; global = 256 }
  precision = fp8.blockwise
  recompute = selective(up_proj, norm)
  cuda_graph = [attn, moe_router]
  offload { optimizer = 0.5; other = 1e-4; third = 2.5e+3 }
  data { source = real("data/x_text_document"); variable_length = false; flag = true }
  memory = 80GB + 3.35TB/s * 2 - 1GiB
  nested { deeper { deepest = [[1, 2], [], f(), g(a = 1, 2)] } }
  recompute2 = full(method = uniform, layers = 2)
  ;
}
)moe",
                  "forms.moe");
}

// A tree built in memory (as moec import builds its recipes) prints as
// source that parses back to the same tree, node kinds included.
TEST(ASTBuilder, BuiltTreesPrintAsSourceThatParsesBackToThem) {
  ast::File F;
  ast::Definition M;
  M.Kind = ast::DefKind::Model;
  M.Name = "imported_model";
  M.Base = "qwen3_30b_a3b";
  M.Entries.push_back(ast::makeAssignment("rope_theta", ast::makeNumber(1e6)));
  M.Entries.push_back(ast::makeAssignment("topk_scaling", ast::makeNumber(2.446)));
  F.Definitions.push_back(std::move(M));
  ast::Definition R;
  R.Kind = ast::DefKind::Recipe;
  R.Name = "r";
  R.Entries.push_back(ast::makeAssignment("model", ast::makeName("imported_model")));
  std::vector<ast::Entry> Cluster;
  Cluster.push_back(ast::makeAssignment("gpu", ast::makeName("h100_sxm")));
  Cluster.push_back(ast::makeAssignment("gpus", ast::makeInt(16)));
  R.Entries.push_back(ast::makeSection("cluster", std::move(Cluster)));
  R.Entries.push_back(ast::makeAssignment("precision", ast::makeName("fp8.tensorwise")));
  std::vector<ast::Entry> Numbers;
  Numbers.push_back(ast::makeAssignment("negative", ast::makeInt(-3)));
  Numbers.push_back(ast::makeAssignment("lowest", ast::makeInt(INT64_MIN)));
  Numbers.push_back(ast::makeAssignment("whole_real", ast::makeReal(2)));
  Numbers.push_back(ast::makeAssignment("small", ast::makeReal(1e-5)));
  Numbers.push_back(ast::makeAssignment("large", ast::makeReal(1e20)));
  Numbers.push_back(ast::makeAssignment("negative_real", ast::makeReal(-0.5)));
  Numbers.push_back(ast::makeAssignment("quoted", ast::makeString("say \"E|t\"\\n\nnext\tline")));
  R.Entries.push_back(ast::makeSection("numbers", std::move(Numbers)));
  std::vector<ast::Argument> Args;
  Args.push_back(ast::makeArg("", ast::makeName("moe_act")));
  Args.push_back(ast::makeArg("layers", ast::makeInt(2)));
  R.Entries.push_back(ast::makeAssignment("recompute", ast::makeCall("full", std::move(Args))));
  R.Entries.push_back(ast::makeAssignment("cuda_graph", ast::makeNameList({"attn", "moe_router"})));
  std::vector<ast::Entry> Deeper;
  Deeper.push_back(ast::makeAssignment("x", ast::makeList({})));
  std::vector<ast::Entry> Outer;
  Outer.push_back(ast::makeSection("deeper", std::move(Deeper)));
  R.Entries.push_back(ast::makeSection("outer", std::move(Outer)));
  F.Definitions.push_back(std::move(R));

  for (unsigned Width : {0u, 100u}) {
    std::string Text;
    llvm::raw_string_ostream OS(Text);
    ast::PrintOptions Opts;
    Opts.InlineWidth = Width;
    ast::print(F, OS, Opts);
    Parsed Back(OS.str(), "built.moe");
    ASSERT_TRUE(Back.File) << Back.summary() << "\n" << Text;
    EXPECT_TRUE(Back.Final.empty()) << Back.summary() << "\n" << Text;
    EXPECT_EQ(sexpr(*Back.File), sexpr(F)) << Text;
    // Inline where the section fits the width, a line per entry otherwise.
    bool Inline = Width != 0;
    EXPECT_EQ(Text.find("  cluster { gpu = h100_sxm; gpus = 16 }\n") != std::string::npos, Inline) << Text;
    EXPECT_EQ(Text.find("  outer { deeper { x = [] } }\n") != std::string::npos, Inline) << Text;
    EXPECT_NE(Text.find("  numbers {\n    negative = -3\n"), std::string::npos) << Text;
  }
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  ast::print(F, OS, ast::PrintOptions());
  for (const char *Spelled : {"rope_theta = 1000000\n", "topk_scaling = 2.446\n", "lowest = -9223372036854775808\n",
                              "whole_real = 2.0\n", "small = 1e-05\n", "large = 1e+20\n", "negative_real = -0.5\n",
                              "quoted = \"say \\\"E|t\\\"\\\\n\\nnext\tline\"\n"})
    EXPECT_NE(OS.str().find(Spelled), std::string::npos) << Spelled << " in\n" << Text;
}

TEST(ASTBuilder, NamesAndStringsTheLanguageCanHold) {
  EXPECT_TRUE(ast::isIdentifier("h100_sxm"));
  EXPECT_TRUE(ast::isIdentifier("_x1"));
  EXPECT_FALSE(ast::isIdentifier(""));
  EXPECT_FALSE(ast::isIdentifier("1x"));
  EXPECT_FALSE(ast::isIdentifier("gb200-nvl72"));
  EXPECT_FALSE(ast::isIdentifier("true"));
  EXPECT_FALSE(ast::isIdentifier("model"));
  EXPECT_TRUE(ast::isStringLiteralText("tab\tand\nnewline \"quoted\""));
  EXPECT_FALSE(ast::isStringLiteralText("carriage\rreturn"));
  EXPECT_FALSE(ast::isStringLiteralText(llvm::StringRef("nul\0", 4)));
}

TEST(ParserRoundTrip, PrecedenceIsKept) {
  Parsed P("recipe r { a = (1 + 2) * 3; b = 1 + 2 * 3; c = 1 - (2 - 3); d = 1 - 2 - 3; e = -(1 + 2) }\n");
  ASSERT_TRUE(P.File) << P.summary();
  std::string S = sexpr(*P.File);
  EXPECT_NE(S.find("a. = (* (+ (num 0 1 ) (num 0 2 )) (num 0 3 ))"), std::string::npos) << S;
  EXPECT_NE(S.find("b. = (+ (num 0 1 ) (* (num 0 2 ) (num 0 3 )))"), std::string::npos) << S;
  EXPECT_NE(S.find("c. = (- (num 0 1 ) (- (num 0 2 ) (num 0 3 )))"), std::string::npos) << S;
  EXPECT_NE(S.find("d. = (- (- (num 0 1 ) (num 0 2 )) (num 0 3 ))"), std::string::npos) << S;
  EXPECT_NE(S.find("e. = (- (+ (num 0 1 ) (num 0 2 )))"), std::string::npos) << S;
  expectRoundTrip(std::string("recipe r { a = (1 + 2) * 3; b = 1 + 2 * 3; c = 1 - (2 - 3); d = 1 - 2 - 3; "
                              "e = -(1 + 2); f = 2 * -3; g = -(-1); h = (4K / (2 * 2)) % (3 - 1) }\n"),
                  "precedence.moe");
}

TEST(ParserRoundTrip, RangesPointIntoTheSource) {
  Parsed P("recipe dsv3 extends base {\n  parallel { cp = 32 }\n}\n");
  ASSERT_TRUE(P.File) << P.summary();
  const ast::Definition &D = P.File->Definitions[0];
  auto Text = [](llvm::SMRange R) { return std::string(R.Start.getPointer(), R.End.getPointer()); };
  EXPECT_EQ(Text(D.NameRange), "dsv3");
  EXPECT_EQ(Text(D.BaseRange), "base");
  ASSERT_EQ(D.Entries.size(), 1u);
  const ast::Entry &Section = D.Entries[0];
  EXPECT_TRUE(Section.isSection());
  EXPECT_EQ(Text(Section.PathRange), "parallel");
  EXPECT_EQ(Text(Section.OpenBrace), "{");
  ASSERT_EQ(Section.Children.size(), 1u);
  EXPECT_EQ(Text(Section.Children[0].PathRange), "cp");
  EXPECT_EQ(Text(Section.Children[0].Value->getRange()), "32");
  EXPECT_EQ(Text(Section.Children[0].Range), "cp = 32");
}

//===----------------------------------------------------------------------===//
// Errors are diagnostics, never exceptions or crashes
//===----------------------------------------------------------------------===//

namespace {
/// Text must give at least one error (ExpectedId among them, if given) and,
/// unless MayKeepTree, no tree, or one whose definitions the parser
/// recovered in are marked damaged (it skipped the broken entry).
void expectRejected(StringRef Text, StringRef ExpectedId = "", ParseLimits Limits = {}, bool MayKeepTree = false) {
  std::unique_ptr<Parsed> P;
  EXPECT_NO_THROW(P = std::make_unique<Parsed>(Text, "bad.moe", Limits)) << Text.str();
  ASSERT_TRUE(P);
  if (!MayKeepTree && P->File) {
    EXPECT_TRUE(llvm::any_of(P->File->Definitions, [](const ast::Definition &D) { return D.Damaged; })) << Text.str();
  }
  EXPECT_TRUE(P->hasError()) << Text.str();
  for (const Diagnostic &D : P->Final) {
    EXPECT_FALSE(D.Message.empty());
    EXPECT_EQ(D.Message.find("internal parser failure"), std::string::npos) << D.Message;
  }
  if (!ExpectedId.empty()) {
    EXPECT_TRUE(llvm::any_of(P->Final, [&](const Diagnostic &D) { return getDiagInfo(D.ID).Id == ExpectedId; }))
        << "expected [" << ExpectedId.str() << "] for: " << Text.str() << "\n"
        << P->summary();
  }
}
} // namespace

TEST(ParserErrors, SyntaxErrorsAreDiagnostics) {
  expectRejected("recipe {", "");
  expectRejected("recipe r { a = }", "syntax-error");
  expectRejected("recipe r { a = 1 +* 2 }", "syntax-error");
  expectRejected("recipe r { a = (1 + 2 }");
  expectRejected("recipe r { a = [1, 2 }");
  expectRejected("recipe r { a = f(1, }");
  expectRejected("recipe r extends { a = 1 }");
  expectRejected("recipex r { a = 1 }");
  expectRejected("recipe r { a = 1 }}");
  expectRejected("recipe r { = 1 }");
  expectRejected("recipe r { a.= 1 }");
  expectRejected("@ recipe r { a = 1 }");
  expectRejected("import recipe");
  // A missing ';' is reported but the tree is kept, so that Sema can report
  // the file's other errors in the same run (lib/Syntax/Parser.cpp).
  expectRejected("recipe r { a = 1 b = 2 }", "missing-separator", {}, /*MayKeepTree=*/true);
  expectRejected("recipe r {\n  a = 1\n", "unclosed-block");
  expectRejected("recipe r { parallel { cp = 1 }\n", "unclosed-block");
  expectRejected("recipe r { s = \"abc }\n", "unterminated-string");
  expectRejected("recipe r { s = \"a\\qb\" }\n", "invalid-escape");
  expectRejected("recipe r { a = 1 $ }", "stray-character");
  expectRejected("recipe r { a = 1 ` }", "stray-character");
}

TEST(ParserErrors, RecoveryGoesOnAfterABrokenEntry) {
  Parsed P("recipe a { x = = 1 }\nrecipe b { y = 2 }\n");
  ASSERT_TRUE(P.File) << P.summary();
  ASSERT_EQ(P.File->Definitions.size(), 2u);
  EXPECT_TRUE(P.File->Definitions[0].Damaged);
  EXPECT_TRUE(P.File->Definitions[0].Entries.empty());
  EXPECT_FALSE(P.File->Definitions[1].Damaged);
  ASSERT_EQ(P.File->Definitions[1].Entries.size(), 1u);
  EXPECT_TRUE(P.hasError());
}

TEST(ParserErrors, AnOpenBlockClosesWhereItsIndentationEnds) {
  // The section's brace is missing: it closes before the next line at its
  // indentation, and the second recipe keeps its entries and locations.
  const char *Text = "recipe a {\n  s { x = 1\n  y = 2\n}\nrecipe b { z = 3 }\n";
  Parsed P(Text);
  ASSERT_TRUE(P.File) << P.summary();
  ASSERT_EQ(P.File->Definitions.size(), 2u);
  EXPECT_TRUE(P.File->Definitions[0].Damaged);
  EXPECT_EQ(P.File->Definitions[0].Entries.size(), 2u); // s { x }, y
  const ast::Definition &B = P.File->Definitions[1];
  EXPECT_FALSE(B.Damaged);
  ASSERT_EQ(B.Entries.size(), 1u);
  EXPECT_EQ(B.Entries[0].Range.Start.getPointer() - P.text().data(), llvm::StringRef(Text).find("z = 3"));
  EXPECT_TRUE(P.hasError());
  // A section and its definition both left open before the next
  // definition: one error, the next definition intact.
  Parsed Both("recipe a {\n  s { x = 1\nrecipe b { y = 2 }\n");
  ASSERT_TRUE(Both.File) << Both.summary();
  ASSERT_EQ(Both.File->Definitions.size(), 2u);
  EXPECT_EQ(Both.errors(), 1u) << Both.summary();
  EXPECT_TRUE(Both.File->Definitions[0].Damaged);
  EXPECT_FALSE(Both.File->Definitions[1].Damaged);
  // Open at the end of the file: nothing after it to check, no tree.
  Parsed AtEnd("recipe a {\n  x = 1\n");
  EXPECT_EQ(AtEnd.File, nullptr);
}

TEST(ParserErrors, EncodingAndEmptyInput) {
  expectRejected("", "empty-file");
  expectRejected("# only a comment\n\n", "empty-file");
  expectRejected(";;;\n");
  expectRejected(StringRef("recipe r { a = 1 }\0", 20), "binary-input");
  expectRejected("recipe r { s = \"\xff\" }", "invalid-utf8");
  expectRejected("recipe r { s = \"\xc3\" }", "invalid-utf8");
}

TEST(ParserErrors, ValidUtf8InStringsAndComments) {
  Parsed P("# Précision : classe FP8 — ok\nrecipe r { s = \"déchargement\" }\n");
  EXPECT_TRUE(P.File) << P.summary();
  EXPECT_TRUE(P.Final.empty()) << P.summary();
}

TEST(ParserErrors, Limits) {
  ParseLimits Limits;
  Limits.MaxNesting = 16;
  std::string Deep = "recipe r { a = " + std::string(40, '(') + "1" + std::string(40, ')') + " }\n";
  expectRejected(Deep, "nesting-too-deep", Limits);
  std::string DeepSections = "recipe r { ";
  for (int I = 0; I < 40; ++I)
    DeepSections += "s" + std::to_string(I) + " { ";
  DeepSections += "a = 1" + std::string(41, '}');
  expectRejected(DeepSections, "nesting-too-deep", Limits);

  Limits = ParseLimits();
  Limits.MaxOperatorsPerExpression = 32;
  std::string Long = "recipe r { a = 1";
  for (int I = 0; I < 100; ++I)
    Long += " + 1";
  expectRejected(Long + " }\n", "expression-too-long", Limits);

  Limits = ParseLimits();
  Limits.MaxFileBytes = 64;
  expectRejected("recipe r { a = 1 }\n" + std::string(100, '#') + "\n", "file-too-large", Limits);
}

TEST(ParserErrors, DefaultLimitsSurviveHostileNesting) {
  // Far past the default limits: must be a diagnostic, not a stack overflow.
  std::string Deep = "recipe r { a = " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }\n";
  expectRejected(Deep, "nesting-too-deep");
  std::string Lists = "recipe r { a = " + std::string(100000, '[') + std::string(100000, ']') + " }\n";
  expectRejected(Lists, "nesting-too-deep");
  std::string Long = "recipe r { a = 1";
  for (int I = 0; I < 20000; ++I)
    Long += "+1";
  expectRejected(Long + " }\n", "expression-too-long");
}

TEST(ParserErrors, EveryTruncationOfAnExampleIsHandled) {
  // Cutting a real recipe anywhere gives diagnostics (or a valid prefix), never a crash.
  auto Buffer = llvm::MemoryBuffer::getFile(repoRoot() + "/examples/long-context/dsv3_256k_h100.moe");
  if (!Buffer)
    Buffer = llvm::MemoryBuffer::getFile(repoRoot() + "/examples/long-context/dsv3_128k_h100.moe");
  ASSERT_TRUE(bool(Buffer));
  StringRef Text = (*Buffer)->getBuffer();
  for (size_t Cut = 0; Cut < Text.size(); Cut += 3) {
    std::unique_ptr<Parsed> P;
    EXPECT_NO_THROW(P = std::make_unique<Parsed>(Text.take_front(Cut), "cut.moe")) << Cut;
    ASSERT_TRUE(P);
    if (!P->File) {
      EXPECT_TRUE(P->hasError()) << "rejected without an error at cut " << Cut;
    }
    for (const Diagnostic &D : P->Final)
      EXPECT_EQ(D.Message.find("internal parser failure"), std::string::npos) << Cut << ": " << D.Message;
  }
}

TEST(Lexer, TokensCarryByteOffsetsAndKinds) {
  // A non-ASCII comment before the tokens: offsets are bytes, not code points.
  std::string Text = "# é\nrecipe r { seq_len = 4K; s = \"a#b\" } # end\nx = \"open";
  std::vector<LexedToken> Ts = lexText(Text);
  auto At = [&](size_t I) { return llvm::StringRef(Text).slice(Ts[I].Begin, Ts[I].End).str(); };
  ASSERT_GE(Ts.size(), 14u);
  EXPECT_EQ(Ts[0].K, LexedToken::Comment);
  EXPECT_EQ(At(0), "# é");
  EXPECT_EQ(Ts[1].K, LexedToken::Keyword);
  EXPECT_EQ(At(1), "recipe");
  EXPECT_EQ(Ts[2].K, LexedToken::Name);
  EXPECT_EQ(At(5), "=");
  EXPECT_EQ(Ts[6].K, LexedToken::Number);
  EXPECT_EQ(At(6), "4K");
  // A '#' inside a string is not a comment.
  EXPECT_EQ(Ts[10].K, LexedToken::String);
  EXPECT_EQ(At(10), "\"a#b\"");
  EXPECT_EQ(Ts[12].K, LexedToken::Comment);
  EXPECT_EQ(At(12), "# end");
  EXPECT_EQ(Ts.back().K, LexedToken::UnterminatedString);
  EXPECT_EQ(At(Ts.size() - 1), "\"open");
}
