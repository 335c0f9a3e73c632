//===- TargetTest.cpp - Targets and where each rule holds -----------------===//
#include "moec/Target/Target.h"
#include "moec/Rules/RuleEngine.h"
#include "llvm/ADT/StringSet.h"
#include <gtest/gtest.h>

using namespace moec;

TEST(Targets, NamesAreUniqueAndFound) {
  llvm::StringSet<> Seen;
  for (const TargetInfo &T : allTargets()) {
    EXPECT_TRUE(Seen.insert(T.Name).second) << T.Name.str();
    ASSERT_TRUE(lookupTarget(T.Name).hasValue()) << T.Name.str();
    EXPECT_EQ(*lookupTarget(T.Name), T.T);
    EXPECT_EQ(&getTargetInfo(T.T), &T);
    EXPECT_TRUE(T.Name.contains('@')) << "framework@version: " << T.Name.str();
  }
  EXPECT_FALSE(lookupTarget("megatron-bridge").hasValue());
  EXPECT_EQ(targetName(DefaultTarget), "megatron-bridge@main");
}

TEST(Targets, OnlyMegatronLmRunsValidateArgs) {
  for (const TargetInfo &T : allTargets())
    EXPECT_EQ(T.RunsValidateArgs, T.Kind == Framework::MegatronLM) << T.Name.str();
}

// A rule that mirrors a Megatron check says where it holds in every target;
// the seeds' practice rules and the planner's hold everywhere unless they
// mirror a Megatron check too (gpu-count-infeasible).
TEST(RuleTargets, EveryMegatronRuleSaysWhereItHolds) {
  for (const RuleSpec &R : allRules()) {
    llvm::StringRef Source = R.Source;
    bool Practice = Source.startswith("seed ") || Source.startswith("planner");
    const char *Id = getDiagInfo(R.ID).Id.data();
    EXPECT_TRUE(Practice || ruleHasTargets(R.ID)) << Id << " (source: " << Source.str() << ")";
    if (!ruleHasTargets(R.ID))
      continue;
    for (const TargetInfo &T : allTargets())
      EXPECT_FALSE(ruleMirror(R.ID, T.T).empty()) << Id << " in " << T.Name.str();
  }
}

// A validate_args-only check is an error where validate_args runs and at most
// a warning where it does not.
TEST(RuleTargets, ValidateArgsChecksAreAdviceUnderBridge) {
  for (const RuleSpec &R : allRules())
    for (const TargetInfo &T : allTargets()) {
      llvm::StringRef Mirror = ruleMirror(R.ID, T.T);
      if (!Mirror.startswith("megatron/training/arguments.py") || !Mirror.contains("validate_args only"))
        continue;
      EXPECT_FALSE(T.RunsValidateArgs) << getDiagInfo(R.ID).Id.data();
      EXPECT_NE(ruleSeverity(R.ID, T.T), llvm::Optional<Severity>(Severity::Error)) << getDiagInfo(R.ID).Id.data();
    }
}
