//===- PlanReaderFuzzTest.cpp - What fuzz-planreader found, as unit tests -===//
//
// Each test is an input class that crashed or misbehaved in the plan reader
// under fuzz-planreader (docs/reliability.md), now a located error: a
// non-ASCII character outside strings (undefined behaviour inside toml++
// 3.3.0), sizes whose products wrap past 2^63, and a world size so large
// that the reader allocated per rank before checking the document has that
// many ranks. The raw inputs are replayed by the fuzz-replay-planreader test.
//
//===----------------------------------------------------------------------===//
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Emit/Plan.h"
#include "moec/PlanFormat/PlanReader.h"
#include "moec/Sema/Sema.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include <gtest/gtest.h>

using namespace moec;

namespace {

/// The plan of a four-node tiny MoE: world 8, tp 1, cp 2, pp 2, dp 2, ep 2,
/// edp 2, global batch 8 of micro batch 1 (4 micro batches).
std::string tinyPlan() {
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema S(Diags);
  S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(R"(
recipe tiny {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 4 }
  seq_len = 64
  batch { micro = 1; global = 8 }
  parallel { tp = 1; pp = 2; ep = 2; cp = 2 }
}
)",
                                                    "tiny.moe"));
  std::vector<Recipe> All = S.analyze();
  EXPECT_FALSE(Diags.hasErrors());
  if (All.size() != 1)
    return "";
  llvm::Expected<Plan> P = buildPlan(All.front(), "tiny.moe");
  if (!P) {
    ADD_FAILURE() << llvm::toString(P.takeError());
    return "";
  }
  return planToTOML(*P);
}

/// Document with every occurrence of From replaced by To (at least one).
std::string replacedAll(std::string Document, const std::string &From, const std::string &To) {
  size_t At = Document.find(From);
  EXPECT_NE(At, std::string::npos) << From;
  for (; At != std::string::npos; At = Document.find(From, At + To.size()))
    Document.replace(At, From.size(), To);
  return Document;
}

std::string errorOf(const std::string &Document) {
  llvm::Expected<LaunchPlan> L = parsePlan(Document, "plan.toml");
  if (L) {
    ADD_FAILURE() << "accepted";
    return "";
  }
  return llvm::toString(L.takeError());
}

class FuzzFound : public ::testing::Test {
protected:
  void SetUp() override { Good = tinyPlan(); }
  std::string Good;
};

TEST_F(FuzzFound, NonAsciiIsLocated) {
  // The first input found: two bytes, U+047B.
  const std::string Msg = ": non-ASCII character in a plan; plans are ASCII, write it as a \\uXXXX escape in a string";
  EXPECT_EQ(errorOf("\xd1\xbb"), "plan.toml:1:1" + Msg);
  size_t Lines = std::count(Good.begin(), Good.end(), '\n');
  EXPECT_EQ(errorOf(Good + "x = 1 \xc3\xb3\n"), "plan.toml:" + std::to_string(Lines + 1) + ":7" + Msg);
  // The second: U+FEFB after a key of four quotes, which toml++ and a
  // scanner of strings read differently; raw non-ASCII is refused anywhere.
  EXPECT_EQ(errorOf(" \"\"\"\"e#], [e \"a \\\n\n\xef\xbb\xbb[aeed= byteh;]"), "plan.toml:3:1" + Msg);
  EXPECT_EQ(errorOf("recipe = 't\xc3\xafny'\n"), "plan.toml:1:12" + Msg);
  EXPECT_EQ(errorOf("# \xd1\xbb\n"), "plan.toml:1:3" + Msg);
}

TEST_F(FuzzFound, EscapedNonAsciiIsRead) {
  std::string Doc = replacedAll(Good, "recipe = 'tiny'", "recipe = \"t\\u00efny\"");
  Doc = replacedAll(Doc, "source = 'tiny.moe'", "source = \"\\u047b\\\"\\u047B\"");
  llvm::Expected<LaunchPlan> L = parsePlan(Doc, "plan.toml");
  ASSERT_TRUE(bool(L)) << llvm::toString(L.takeError());
  EXPECT_EQ(L->Recipe, "t\xc3\xafny");
  EXPECT_EQ(L->Source, "\xd1\xbb\"\xd1\xbb");
}

TEST_F(FuzzFound, ProductsPastInt64AreErrors) {
  std::string E = errorOf(replacedAll(Good, "\n    tp = 1\n", "\n    tp = 4611686018427387904\n"));
  EXPECT_EQ(E, "plan.toml: config.parallel: tp x cp x dp x pp = 4611686018427387904 x 2 x 2 x 2 = more than 2^63, "
               "but world_size is 8");
  E = errorOf(replacedAll(Good, "vpp = 1\n", "vpp = 4611686018427387904\n"));
  EXPECT_EQ(E, "plan.toml: pipeline.stages: expected pp x vpp = more than 2^63 stages, found 2");
}

TEST_F(FuzzFound, HugeWorldIsRefusedBeforeAllocatingPerRank) {
  // Consistent sizes for 2^40 ranks; the document has 8 [[ranks]].
  std::string Doc = replacedAll(Good, "world_size = 8\n", "world_size = 1099511627776\n");
  Doc = replacedAll(Doc, "\n    dp = 2\n", "\n    dp = 274877906944\n");
  Doc = replacedAll(Doc, "\n    edp = 2\n", "\n    edp = 274877906944\n");
  Doc = replacedAll(Doc, "global_batch = 8\n", "global_batch = 1099511627776\n");
  EXPECT_EQ(errorOf(Doc), "plan.toml: ranks: expected one entry per rank (1099511627776), found 8");
}

} // namespace
