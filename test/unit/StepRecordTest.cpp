//===- StepRecordTest.cpp - moerun's step log, written and read back ------===//
//
// One key table defines the log: every record written reads back equal, a
// non-finite number is null and comes back NaN, predictions appear only when
// set, unknown keys are ignored, and a damaged line is named by its number.
//
//===----------------------------------------------------------------------===//
#include "moec/PlanFormat/StepRecord.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include <cmath>
#include <gtest/gtest.h>

using namespace moec;

namespace {
StepRecord sample() {
  StepRecord R;
  R.Step = 7;
  R.Loss = 5.25;
  R.AuxLoss = 0.0078125;
  R.LearningRate = 3e-4;
  R.GradNorm = 1.5;
  R.StepTimeSeconds = 0.41;
  R.TokensPerSecond = 1248.75;
  R.PeakBytes = 123456789012;
  R.ComputeSeconds = 0.3;
  R.CommSeconds = 0.08;
  R.GemmSeconds = 0.21;
  R.CpuSeconds = 0.4;
  return R;
}

std::string writeTemp(llvm::StringRef Text) {
  llvm::SmallString<128> Path;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("steps", "jsonl", Path));
  std::error_code EC;
  llvm::raw_fd_ostream OS(Path, EC);
  OS << Text;
  return std::string(Path);
}
} // namespace

TEST(StepRecord, EveryKeyRoundTrips) {
  StepRecord R = sample();
  R.PredictedStepSeconds = 0.35;
  R.MFU = 0.41;
  R.PredictedPeakBytes = 1.2e11;
  R.ValidLoss = 4.75;
  R.MtpLoss = 5.25;
  R.UsefulTokensPerSecond = 1000.5;
  R.TpCommSeconds = 0.01;
  R.CpCommSeconds = 0.02;
  R.EpCommSeconds = 0.03;
  R.DpCommSeconds = 0.015;
  R.PpCommSeconds = 0.005;
  R.DevicePeakBytes = 2.5e10;
  R.StagedBytes = 9e9;
  std::string Line = formatStepLogLine(R);
  ASSERT_EQ(Line.back(), '\n');
  llvm::Expected<StepRecord> Back = parseStepLogLine(Line);
  ASSERT_TRUE(bool(Back)) << llvm::toString(Back.takeError());
  EXPECT_EQ(formatStepLogLine(*Back), Line);
  EXPECT_EQ(Back->PeakBytes, R.PeakBytes);
  EXPECT_EQ(Back->MFU, R.MFU);
  EXPECT_EQ(Back->EpCommSeconds, R.EpCommSeconds);
  // Every key of the table is on a full line, once.
  for (const StepLogKey &K : stepLogKeys())
    EXPECT_NE(Line.find("\"" + std::string(K.Key) + "\":"), std::string::npos) << K.Key;
}

TEST(StepRecord, PredictionsOnlyWhenSetAndNonFiniteAsNull) {
  StepRecord R = sample();
  R.Loss = std::nan("");
  std::string Line = formatStepLogLine(R);
  EXPECT_EQ(Line.find("predicted"), std::string::npos) << Line;
  EXPECT_NE(Line.find("\"loss\":null,"), std::string::npos) << Line;
  llvm::Expected<StepRecord> Back = parseStepLogLine(Line);
  ASSERT_TRUE(bool(Back)) << llvm::toString(Back.takeError());
  EXPECT_TRUE(std::isnan(Back->Loss));
  EXPECT_FALSE(Back->PredictedStepSeconds.has_value());
}

TEST(StepRecord, UnknownKeysAreIgnoredMissingOnesNamed) {
  std::string Line = formatStepLogLine(sample());
  Line.insert(1, "\"eval\":{\"loss\":1},");
  EXPECT_TRUE(bool(parseStepLogLine(Line)));

  auto ErrorOf = [](llvm::StringRef Text) {
    llvm::Expected<StepRecord> R = parseStepLogLine(Text);
    return R ? std::string("parsed") : llvm::toString(R.takeError());
  };
  EXPECT_EQ(ErrorOf("{\"step\":1}"), "no \"loss\"");
  EXPECT_EQ(ErrorOf("{\"step\":1.5}"), "\"step\" must be an integer");
  EXPECT_EQ(ErrorOf("[1,2]"), "not a JSON object");
  EXPECT_NE(ErrorOf("{\"step\":").find("not JSON"), std::string::npos);
  std::string Text = formatStepLogLine(sample());
  size_t At = Text.find("\"lr\":") + 5;
  Text.replace(At, Text.find(',', At) - At, "\"high\"");
  EXPECT_EQ(ErrorOf(Text), "\"lr\" must be a number");
}

TEST(StepRecord, ReadsALogAndNamesTheBadLine) {
  StepRecord A = sample(), B = sample();
  B.Step = 8;
  std::string Good = writeTemp(formatStepLogLine(A) + "\n" + formatStepLogLine(B));
  llvm::Expected<std::vector<StepRecord>> Steps = readStepLog(Good);
  ASSERT_TRUE(bool(Steps)) << llvm::toString(Steps.takeError());
  ASSERT_EQ(Steps->size(), 2u);
  EXPECT_EQ((*Steps)[1].Step, 8);

  std::string Bad = writeTemp(formatStepLogLine(A) + "{\"step\":2,\"loss\":1}\n");
  Steps = readStepLog(Bad);
  ASSERT_FALSE(bool(Steps));
  EXPECT_EQ(llvm::toString(Steps.takeError()), Bad + ":2: no \"aux_loss\"");

  std::string Empty = writeTemp("\n");
  Steps = readStepLog(Empty);
  ASSERT_FALSE(bool(Steps));
  EXPECT_EQ(llvm::toString(Steps.takeError()), "'" + Empty + "' holds no step");
  for (const std::string &P : {Good, Bad, Empty})
    llvm::sys::fs::remove(P);
}
