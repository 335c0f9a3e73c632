//===- DiagnosticsTest.cpp - The ID table, suggestions, engine policy, JSON -===//
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Diag/DiagnosticRenderers.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include <gtest/gtest.h>
#include <regex>

using namespace moec;
using llvm::SMLoc;
using llvm::SMRange;
using llvm::StringRef;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// The table in Diagnostics.def
//===----------------------------------------------------------------------===//

TEST(DiagTable, IdsAreUniqueAndKebabCase) {
  const std::regex Kebab("^[a-z0-9]+(-[a-z0-9]+)*$");
  llvm::StringSet<> Seen;
  ASSERT_EQ(allDiagInfos().size(), size_t(diag::NumDiags));
  for (const DiagInfo &I : allDiagInfos()) {
    EXPECT_TRUE(std::regex_match(I.Id.str(), Kebab)) << I.Id.str();
    EXPECT_TRUE(Seen.insert(I.Id).second) << "duplicate ID " << I.Id.str();
  }
}

TEST(DiagTable, ExplanationsAreSentences) {
  // Rule explanations may cite their source after the last sentence:
  // "... need PP > 1. (MLM-PP-006)", "... lengths. (Megatron-Bridge §2.20)".
  const std::regex Citation(R"(\s*\([^()]*\)$)");
  for (const DiagInfo &I : allDiagInfos()) {
    StringRef E = StringRef(I.Explanation).trim();
    EXPECT_FALSE(E.empty()) << I.Id.str();
    std::string Sentence = std::regex_replace(E.str(), Citation, "");
    EXPECT_TRUE(StringRef(Sentence).endswith(".")) << I.Id.str() << ": " << E.str();
    EXPECT_FALSE(StringRef(I.Format).empty()) << I.Id.str();
  }
}

TEST(DiagTable, LookupRoundTrips) {
  for (unsigned I = 0; I < diag::NumDiags; ++I) {
    const DiagInfo &Info = getDiagInfo(diag::ID(I));
    EXPECT_EQ(&Info, &allDiagInfos()[I]);
    auto Found = lookupDiagID(Info.Id);
    ASSERT_TRUE(Found.hasValue()) << Info.Id.str();
    EXPECT_EQ(unsigned(*Found), I) << Info.Id.str();
  }
  EXPECT_FALSE(lookupDiagID("no-such-diagnostic").hasValue());
  EXPECT_FALSE(lookupDiagID("").hasValue());
  EXPECT_FALSE(lookupDiagID("world_size").hasValue()); // the enum name is not the ID
  EXPECT_EQ(getDiagInfo(*lookupDiagID("world-size")).DefaultSeverity, Severity::Error);
  EXPECT_EQ(getDiagInfo(*lookupDiagID("shadows-builtin")).DefaultSeverity, Severity::Warning);
  EXPECT_EQ(getDiagInfo(*lookupDiagID("allow-unused")).DefaultSeverity, Severity::Remark);
}

TEST(DiagTable, SeverityNames) {
  EXPECT_EQ(severityName(Severity::Error), "error");
  EXPECT_EQ(severityName(Severity::Warning), "warning");
  EXPECT_EQ(severityName(Severity::Remark), "remark");
}

//===----------------------------------------------------------------------===//
// "did you mean"
//===----------------------------------------------------------------------===//

namespace {
const std::vector<StringRef> Units = {"K", "M", "G", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "TFLOPS"};
const std::vector<StringRef> Precisions = {"bf16", "fp8.delayed", "fp8.tensorwise", "fp8.blockwise", "mxfp8", "nvfp4"};
const std::vector<StringRef> Models = {"deepseek_v3", "qwen3_235b_a22b", "qwen3_30b_a3b", "mixtral_8x7b"};
const std::vector<StringRef> Gpus = {"h100_sxm", "h200_sxm", "b200", "gb200_nvl72"};

std::string closest(StringRef Typo, llvm::ArrayRef<StringRef> Candidates) {
  auto M = closestMatch(Typo, Candidates);
  return M ? M->str() : "<none>";
}
} // namespace

TEST(DidYouMean, CaseSlips) {
  EXPECT_EQ(closest("gb", Units), "GB");
  EXPECT_EQ(closest("gib", Units), "GiB");
  EXPECT_EQ(closest("tflops", Units), "TFLOPS");
  EXPECT_EQ(closest("BF16", Precisions), "bf16");
}

TEST(DidYouMean, Typos) {
  EXPECT_EQ(closest("deepsek_v3", Models), "deepseek_v3");
  EXPECT_EQ(closest("deepseek_v4", Models), "deepseek_v3");
  EXPECT_EQ(closest("qwen3_30b_a3", Models), "qwen3_30b_a3b");
  EXPECT_EQ(closest("fp8.blockwize", Precisions), "fp8.blockwise");
  EXPECT_EQ(closest("h100_sxn", Gpus), "h100_sxm");
  EXPECT_EQ(closest("seq_lne", {"seq_len", "batch.micro"}), "seq_len");
}

TEST(DidYouMean, Prefixes) {
  EXPECT_EQ(closest("fp8.block", Precisions), "fp8.blockwise");
  EXPECT_EQ(closest("fp8.tensor", Precisions), "fp8.tensorwise");
  EXPECT_EQ(closest("qwen3_235b", Models), "qwen3_235b_a22b");
  EXPECT_EQ(closest("mixtral", Models), "mixtral_8x7b");
}

TEST(DidYouMean, PrefixBeatsAShortEditDistance) {
  // `gpu = h100` means h100_sxm; b200 is two replacements away but another product.
  const std::vector<StringRef> AllGpus = {"h100_sxm", "h200_sxm", "b200", "b300", "gb200_nvl72", "gb300_nvl72", "cpu"};
  EXPECT_EQ(closest("h100", AllGpus), "h100_sxm");
  EXPECT_EQ(closest("h200", AllGpus), "h200_sxm");
  EXPECT_EQ(closest("gb200", AllGpus), "gb200_nvl72");
  EXPECT_EQ(closest("gb300", AllGpus), "gb300_nvl72");
}

TEST(DidYouMean, NothingForDistantWords) {
  EXPECT_EQ(closest("banana", Precisions), "<none>");
  EXPECT_EQ(closest("llama_70b", Models), "<none>");
  EXPECT_EQ(closest("tpu_v5", Gpus), "<none>");
  EXPECT_EQ(closest("x", {"parallel", "precision"}), "<none>");
  EXPECT_EQ(closest("anything", {}), "<none>");
  // An exact match is not a suggestion.
  EXPECT_EQ(closest("bf16", Precisions), "<none>");
}

TEST(DidYouMean, MessageText) {
  EXPECT_EQ(didYouMean("deepsek_v3", Models), "; did you mean 'deepseek_v3'?");
  EXPECT_EQ(didYouMean("banana", Models), "");
}

//===----------------------------------------------------------------------===//
// The engine's policy
//===----------------------------------------------------------------------===//

namespace {
const char *Source = "recipe r {\n"              // line 1
                     "  cp = 8\n"                // line 2
                     "  tp = 2\n"                // line 3
                     "  precision = fp8.block\n" // line 4
                     "}\n";

/// A SourceMgr holding Source and an engine over it.
struct Fixture {
  explicit Fixture(DiagnosticOptions Opts = {}) : Diags(SM, std::move(Opts)) {
    BufferID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(Source, "t.moe"), SMLoc());
    Text = SM.getMemoryBuffer(BufferID)->getBuffer();
  }
  /// The range of the N-th occurrence (0-based) of Needle.
  SMRange range(StringRef Needle, unsigned N = 0) {
    size_t Pos = Text.find(Needle);
    while (N-- && Pos != std::string::npos)
      Pos = Text.find(Needle, Pos + 1);
    EXPECT_NE(Pos, std::string::npos) << Needle.str();
    const char *P = Text.data() + Pos;
    return SMRange(SMLoc::getFromPointer(P), SMLoc::getFromPointer(P + Needle.size()));
  }
  /// The range of whole line L (1-based), without its newline.
  SMRange line(unsigned L) {
    const char *P = Text.data();
    for (unsigned I = 1; I < L; ++I)
      P = strchr(P, '\n') + 1;
    const char *E = strchr(P, '\n');
    return SMRange(SMLoc::getFromPointer(P), SMLoc::getFromPointer(E));
  }
  std::vector<std::string> ids() {
    std::vector<std::string> Out;
    for (const Diagnostic &D : Diags.finish())
      Out.push_back(getDiagInfo(D.ID).Id.str());
    return Out;
  }
  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  unsigned BufferID;
  StringRef Text;
};
using Strings = std::vector<std::string>;
} // namespace

TEST(DiagEngine, ReportFormatsMessage) {
  Fixture F;
  F.Diags.report(diag::world_size, F.range("8"), 256, "tp x cp x pp", "3 x 1 x 1");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 1u);
  EXPECT_EQ(Out[0].ID, diag::world_size);
  EXPECT_EQ(Out[0].Sev, Severity::Error);
  EXPECT_EQ(Out[0].Message, "256 GPUs do not divide into tp x cp x pp = 3 x 1 x 1");
  EXPECT_TRUE(F.Diags.hasErrors());
  EXPECT_EQ(F.Diags.errorCount(), 1u);
}

TEST(DiagEngine, WarningsStayWarningsByDefault) {
  Fixture F;
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "alow");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 1u);
  EXPECT_EQ(Out[0].Sev, Severity::Warning);
  EXPECT_FALSE(F.Diags.hasErrors());
}

TEST(DiagEngine, WerrorPromotesWarningsOnly) {
  DiagnosticOptions Opts;
  Opts.WarningsAsErrors = true;
  Fixture F(Opts);
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "alow");
  // An unused @allow produces a remark, which -Werror leaves alone.
  F.Diags.addAllowScope(diag::shadows_builtin, F.line(3), F.range("tp"));
  EXPECT_FALSE(F.Diags.hasErrors());
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 2u);
  EXPECT_EQ(Out[0].ID, diag::unknown_annotation);
  EXPECT_EQ(Out[0].Sev, Severity::Error);
  EXPECT_EQ(Out[1].ID, diag::allow_unused);
  EXPECT_EQ(Out[1].Sev, Severity::Remark);
  EXPECT_TRUE(F.Diags.hasErrors());
  EXPECT_EQ(F.Diags.errorCount(), 1u);
}

TEST(DiagEngine, DisabledWarningsAreDropped) {
  DiagnosticOptions Opts;
  Opts.Disabled.insert(diag::unknown_annotation);
  Opts.Disabled.insert(diag::world_size); // errors cannot be disabled
  Fixture F(Opts);
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "alow");
  F.Diags.report(diag::shadows_builtin, F.range("tp"), "model", "x", "model");
  F.Diags.report(diag::world_size, F.range("8"), 256, "tp x cp x pp", "3 x 1 x 1");
  EXPECT_EQ(F.ids(), (Strings{"world-size", "shadows-builtin"}));
}

TEST(DiagEngine, DisabledAndWerrorTogether) {
  DiagnosticOptions Opts;
  Opts.WarningsAsErrors = true;
  Opts.Disabled.insert(diag::unknown_annotation);
  Fixture F(Opts);
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "alow");
  EXPECT_TRUE(F.Diags.finish().empty());
  EXPECT_FALSE(F.Diags.hasErrors());
}

TEST(DiagEngine, AllowScopes) {
  Fixture F;
  // @allow(unknown-annotation) on line 2 only.
  F.Diags.addAllowScope(diag::unknown_annotation, F.line(2), F.range("cp"));
  F.Diags.report(diag::unknown_annotation, F.range("8"), "inside");
  F.Diags.report(diag::unknown_annotation, F.range("2"), "outside");           // line 3
  F.Diags.report(diag::shadows_builtin, F.range("cp"), "model", "x", "model"); // another ID
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 2u);
  EXPECT_EQ(Out[0].ID, diag::shadows_builtin);
  EXPECT_EQ(Out[1].ID, diag::unknown_annotation);
  EXPECT_EQ(Out[1].Message, "unknown annotation '@outside'");
}

TEST(DiagEngine, AllowScopeDoesNotSilenceErrors) {
  Fixture F;
  F.Diags.addAllowScope(diag::world_size, F.line(2), F.range("cp"));
  F.Diags.report(diag::world_size, F.range("8"), 256, "tp x cp x pp", "3 x 1 x 1");
  auto Ids = F.ids();
  EXPECT_TRUE(llvm::is_contained(Ids, "world-size"));
  EXPECT_TRUE(F.Diags.hasErrors());
}

TEST(DiagEngine, UnusedAllowIsARemark) {
  Fixture F;
  F.Diags.addAllowScope(diag::unknown_annotation, F.line(2), F.range("cp = 8"));
  F.Diags.report(diag::unknown_annotation, F.range("tp"), "outside"); // line 3: not in scope
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 2u);
  EXPECT_EQ(Out[0].ID, diag::allow_unused);
  EXPECT_EQ(Out[0].Sev, Severity::Remark);
  EXPECT_EQ(Out[0].Message, "@allow(unknown-annotation) silences nothing here");
  EXPECT_EQ(Out[0].Range.Start.getPointer(), F.range("cp = 8").Start.getPointer());
  EXPECT_EQ(Out[1].ID, diag::unknown_annotation);
}

TEST(DiagEngine, UnusedAllowRemarkCanBeDisabled) {
  DiagnosticOptions Opts;
  Opts.Disabled.insert(diag::allow_unused);
  Fixture F(Opts);
  F.Diags.addAllowScope(diag::unknown_annotation, F.line(2), F.range("cp"));
  EXPECT_TRUE(F.Diags.finish().empty());
}

TEST(DiagEngine, DuplicatesAreDropped) {
  Fixture F;
  for (int I = 0; I < 3; ++I) {
    F.Diags.setRecipeContext("r[micro=" + std::to_string(I) + "]");
    F.Diags.report(diag::unknown_annotation, F.range("cp"), "same");
  }
  F.Diags.setRecipeContext("");
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "different message");
  F.Diags.report(diag::unknown_annotation, F.range("tp"), "same");             // another place
  F.Diags.report(diag::shadows_builtin, F.range("cp"), "model", "x", "model"); // another ID
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 4u);
  // One diagnostic for the three sweep points, named for the recipe.
  EXPECT_EQ(Out[0].Message, "unknown annotation '@same'");
  EXPECT_EQ(Out[0].Recipe, "r");
  for (const DiagNote &N : Out[0].Notes)
    EXPECT_EQ(N.Message.find("in sweep point"), std::string::npos) << N.Message;
}

TEST(DiagEngine, DuplicatesInOnePointKeepThePointName) {
  Fixture F;
  F.Diags.setRecipeContext("r[micro=2]");
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "same");
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "same");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 1u);
  EXPECT_EQ(Out[0].Recipe, "r[micro=2]");
  ASSERT_EQ(Out[0].Notes.size(), 1u);
  EXPECT_EQ(Out[0].Notes[0].Message, "in sweep point r[micro=2]");
}

TEST(DiagEngine, SortedByLocation) {
  Fixture F;
  F.Diags.report(diag::unknown_annotation, F.range("fp8.block"), "c");
  F.Diags.report(diag::unknown_annotation, F.range("tp"), "b");
  F.Diags.report(diag::unknown_annotation, SMRange(), "nowhere");
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "a");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 4u);
  EXPECT_EQ(Out[0].Message, "unknown annotation '@nowhere'"); // no location first
  EXPECT_EQ(Out[1].Message, "unknown annotation '@a'");
  EXPECT_EQ(Out[2].Message, "unknown annotation '@b'");
  EXPECT_EQ(Out[3].Message, "unknown annotation '@c'");
}

TEST(DiagEngine, ErrorCap) {
  DiagnosticOptions Opts;
  Opts.ErrorLimit = 3;
  Fixture F(Opts);
  for (int I = 0; I < 5; ++I)
    F.Diags.report(diag::bad_call, F.range("8"), "error " + std::to_string(I))
        .note(diag::note_value_set_here, F.range("cp"), "cp");            // notes on dropped errors are ignored
  F.Diags.report(diag::unknown_annotation, F.range("tp"), "still-shown"); // warnings are not capped
  EXPECT_TRUE(F.Diags.hasErrors());
  EXPECT_GE(F.Diags.errorCount(), 3u);
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 5u);
  EXPECT_EQ(Out[0].Message, "error 0");
  EXPECT_EQ(Out[2].Message, "error 2");
  EXPECT_EQ(Out[3].ID, diag::unknown_annotation);
  const Diagnostic &Cap = Out.back();
  EXPECT_EQ(Cap.ID, diag::too_many_errors);
  EXPECT_EQ(Cap.Sev, Severity::Error);
  EXPECT_EQ(Cap.Message, "too many errors emitted (3); stopping now");
  ASSERT_EQ(Cap.Notes.size(), 1u);
  EXPECT_EQ(Cap.Notes[0].Message, "errors not shown: 2 more");
  EXPECT_FALSE(Cap.Range.Start.isValid());
}

TEST(DiagEngine, ErrorCapCountsDistinctErrors) {
  // A sweep reports the same error once per point; that is one error for the cap.
  DiagnosticOptions Opts;
  Opts.ErrorLimit = 2;
  Fixture F(Opts);
  for (int I = 0; I < 5; ++I) {
    F.Diags.setRecipeContext("r[micro=" + std::to_string(I) + "]");
    F.Diags.report(diag::bad_call, F.range("8"), "the same error");
  }
  F.Diags.setRecipeContext("");
  F.Diags.report(diag::bad_call, F.range("2"), "another error");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 2u);
  EXPECT_EQ(Out[0].Message, "the same error");
  EXPECT_EQ(Out[1].Message, "another error");
  for (const Diagnostic &D : Out)
    EXPECT_NE(D.ID, diag::too_many_errors);
}

TEST(DiagEngine, ErrorLimitZeroMeansUnlimited) {
  DiagnosticOptions Opts;
  Opts.ErrorLimit = 0;
  Fixture F(Opts);
  for (int I = 0; I < 100; ++I)
    F.Diags.report(diag::bad_call, F.range("8"), "error " + std::to_string(I));
  const auto &Out = F.Diags.finish();
  EXPECT_EQ(Out.size(), 100u);
  EXPECT_EQ(F.Diags.errorCount(), 100u);
}

TEST(DiagEngine, NotesFixItsAndRecipeContext) {
  Fixture F;
  F.Diags.setRecipeContext("r[micro=2]");
  F.Diags
      .report(diag::unknown_enum_value, F.range("fp8.block"), "fp8.block", "precision",
              "; did you mean 'fp8.blockwise'?")
      .note(diag::note_value_set_here, F.range("cp"), "cp")
      .fixit(F.range("fp8.block"), "fp8.blockwise");
  const auto &Out = F.Diags.finish();
  ASSERT_EQ(Out.size(), 1u);
  const Diagnostic &D = Out[0];
  EXPECT_EQ(D.Message, "'fp8.block' is not a valid precision; did you mean 'fp8.blockwise'?");
  EXPECT_EQ(D.Recipe, "r[micro=2]");
  ASSERT_EQ(D.Notes.size(), 3u);
  EXPECT_EQ(D.Notes[0].Message, "'cp' is set here");
  EXPECT_EQ(D.Notes[1].Message, "fix-it: fp8.blockwise");
  // A diagnostic of one sweep point names the point in a note too (text output).
  EXPECT_EQ(D.Notes[2].Message, "in sweep point r[micro=2]");
  EXPECT_FALSE(D.Notes[2].Range.Start.isValid());
  ASSERT_EQ(D.FixIts.size(), 1u);
  EXPECT_EQ(D.FixIts[0].Replacement, "fp8.blockwise");
}

TEST(DiagEngine, FinishIsIdempotent) {
  Fixture F;
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "x");
  size_t First = F.Diags.finish().size();
  EXPECT_EQ(F.Diags.finish().size(), First);
}

//===----------------------------------------------------------------------===//
// Renderers
//===----------------------------------------------------------------------===//

TEST(DiagRender, JSONFields) {
  Fixture F;
  F.Diags.setRecipeContext("r");
  F.Diags
      .report(diag::unknown_enum_value, F.range("fp8.block"), "fp8.block", "precision",
              "; did you mean 'fp8.blockwise'?")
      .note(diag::note_value_set_here, F.range("cp = 8"), "cp")
      .fixit(F.range("fp8.block"), "fp8.blockwise");
  F.Diags.setRecipeContext("");
  json::Value V = renderJSON(F.Diags.finish(), F.SM);
  const json::Array *A = V.getAsArray();
  ASSERT_TRUE(A);
  ASSERT_EQ(A->size(), 1u);
  const json::Object *O = (*A)[0].getAsObject();
  ASSERT_TRUE(O);
  EXPECT_EQ(O->getString("id").getValueOr(""), "unknown-value");
  EXPECT_EQ(O->getString("severity").getValueOr(""), "error");
  EXPECT_EQ(O->getString("message").getValueOr(""),
            "'fp8.block' is not a valid precision; did you mean 'fp8.blockwise'?");
  EXPECT_EQ(O->getString("file").getValueOr(""), "t.moe");
  EXPECT_EQ(O->getString("recipe").getValueOr(""), "r");
  // "  precision = fp8.block": the value starts in column 15 (1-based) and
  // ends before column 24 (exclusive).
  EXPECT_EQ(O->getInteger("line").getValueOr(-1), 4);
  EXPECT_EQ(O->getInteger("column").getValueOr(-1), 15);
  EXPECT_EQ(O->getInteger("end_line").getValueOr(-1), 4);
  EXPECT_EQ(O->getInteger("end_column").getValueOr(-1), 24);

  const json::Array *Notes = O->getArray("notes");
  ASSERT_TRUE(Notes);
  ASSERT_EQ(Notes->size(), 2u);
  const json::Object *N = (*Notes)[0].getAsObject();
  ASSERT_TRUE(N);
  EXPECT_EQ(N->getString("message").getValueOr(""), "'cp' is set here");
  EXPECT_EQ(N->getString("file").getValueOr(""), "t.moe");
  EXPECT_EQ(N->getInteger("line").getValueOr(-1), 2);
  EXPECT_EQ(N->getInteger("column").getValueOr(-1), 3);
  EXPECT_EQ(N->getInteger("end_line").getValueOr(-1), 2);
  EXPECT_EQ(N->getInteger("end_column").getValueOr(-1), 9);
  EXPECT_EQ((*Notes)[1].getAsObject()->getString("message").getValueOr(""), "fix-it: fp8.blockwise");

  const json::Array *Fixes = O->getArray("fixits");
  ASSERT_TRUE(Fixes);
  ASSERT_EQ(Fixes->size(), 1u);
  const json::Object *X = (*Fixes)[0].getAsObject();
  ASSERT_TRUE(X);
  EXPECT_EQ(X->getString("replacement").getValueOr(""), "fp8.blockwise");
  EXPECT_EQ(X->getString("file").getValueOr(""), "t.moe");
  EXPECT_EQ(X->getInteger("line").getValueOr(-1), 4);
  EXPECT_EQ(X->getInteger("column").getValueOr(-1), 15);
  EXPECT_EQ(X->getInteger("end_line").getValueOr(-1), 4);
  EXPECT_EQ(X->getInteger("end_column").getValueOr(-1), 24);
}

TEST(DiagRender, JSONWithoutLocation) {
  Fixture F;
  F.Diags.report(diag::unknown_recipe, SMRange(), "x", "t.moe", "");
  json::Value V = renderJSON(F.Diags.finish(), F.SM);
  const json::Object *O = (*V.getAsArray())[0].getAsObject();
  ASSERT_TRUE(O);
  for (StringRef Key : {"file", "line", "column", "end_line", "end_column", "recipe"}) {
    const json::Value *X = O->get(Key);
    ASSERT_TRUE(X) << Key.str();
    EXPECT_EQ(X->kind(), json::Value::Null) << Key.str();
  }
  EXPECT_EQ(O->getArray("notes")->size(), 0u);
  EXPECT_EQ(O->getArray("fixits")->size(), 0u);
}

TEST(DiagRender, JSONMultiLineRange) {
  Fixture F;
  SMRange R(F.range("cp").Start, F.range("2").End); // line 2 col 3 to line 3 col 9
  F.Diags.report(diag::unknown_annotation, R, "x");
  json::Value V = renderJSON(F.Diags.finish(), F.SM);
  const json::Object *O = (*V.getAsArray())[0].getAsObject();
  EXPECT_EQ(O->getInteger("line").getValueOr(-1), 2);
  EXPECT_EQ(O->getInteger("column").getValueOr(-1), 3);
  EXPECT_EQ(O->getInteger("end_line").getValueOr(-1), 3);
  EXPECT_EQ(O->getInteger("end_column").getValueOr(-1), 9);
}

TEST(DiagRender, TextFollowsCompilerConvention) {
  Fixture F;
  F.Diags
      .report(diag::unknown_enum_value, F.range("fp8.block"), "fp8.block", "precision",
              "; did you mean 'fp8.blockwise'?")
      .fixit(F.range("fp8.block"), "fp8.blockwise");
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  renderText(F.Diags.finish(), F.SM, OS, /*Colors=*/false);
  OS.flush();
  EXPECT_EQ(Out, "t.moe:4:15: error: 'fp8.block' is not a valid precision; did you mean 'fp8.blockwise'? "
                 "[unknown-value]\n"
                 "  precision = fp8.block\n"
                 "              ^~~~~~~~~\n"
                 "t.moe:4:15: note: fix-it: fp8.blockwise\n");
}

TEST(DiagRender, SARIFHasEveryRule) {
  Fixture F;
  F.Diags.report(diag::unknown_annotation, F.range("cp"), "x");
  json::Value V = renderSARIF(F.Diags.finish(), F.SM, "0.0-test");
  const json::Object *Log = V.getAsObject();
  ASSERT_TRUE(Log);
  EXPECT_EQ(Log->getString("version").getValueOr(""), "2.1.0");
  const json::Object *Run = (*Log->getArray("runs"))[0].getAsObject();
  const json::Object *Driver = Run->getObject("tool")->getObject("driver");
  EXPECT_EQ(Driver->getArray("rules")->size(), size_t(diag::NumDiags));
  const json::Array *Results = Run->getArray("results");
  ASSERT_EQ(Results->size(), 1u);
  const json::Object *R = (*Results)[0].getAsObject();
  EXPECT_EQ(R->getString("ruleId").getValueOr(""), "unknown-annotation");
  EXPECT_EQ(R->getString("level").getValueOr(""), "warning");
}

// Diagnostic arguments are counted at compile time from the message format
// (report() static_asserts the count): the counting itself.
static_assert(diag::detail::formatArity("no arguments") == 0, "");
static_assert(diag::detail::formatArity("{0} and {1}") == 2, "");
static_assert(diag::detail::formatArity("{2} only") == 3, "");
static_assert(diag::detail::formatArity("{{0}} is literal") == 0, "");
static_assert(diag::detail::formatArity("{0:02x}") == 1, "");
static_assert(diag::Tag<diag::detail::unknown_target>::Arity == 3, "");
TEST(DiagnosticArity, EveryFormatHasAnArity) {
  for (unsigned I = 0; I < diag::NumDiags; ++I)
    EXPECT_EQ(diag::detail::Arities[I], diag::detail::formatArity(getDiagInfo(diag::ID(I)).Format.data()));
}
