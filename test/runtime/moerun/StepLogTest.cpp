//===- StepLogTest.cpp - moerun's per-step JSON-lines log ------------------===//
#include "StepLog.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <unistd.h>

using namespace moerun;

namespace {

StepRecord record(int64_t Step) {
  StepRecord R;
  R.Step = Step;
  R.Loss = 5.5;
  R.StepTimeSeconds = 0.25;
  R.TokensPerSecond = 1024;
  R.PeakBytes = 123456789;
  R.ComputeSeconds = 0.125;
  R.CommSeconds = 0.0625;
  R.AuxLoss = 0.0078125;
  R.GemmSeconds = 0.09375;
  R.CpuSeconds = 0.1875;
  R.LearningRate = 0.00025;
  R.GradNorm = 1.5;
  return R;
}

TEST(StepLog, JSONLine) {
  EXPECT_EQ(moec::formatStepLogLine(record(3)), "{\"step\":3,\"loss\":5.5,\"aux_loss\":0.0078125,\"lr\":0.00025,"
                                                "\"grad_norm\":1.5,\"step_time_s\":0.25,"
                                                "\"tokens_per_s\":1024,\"peak_bytes\":123456789,\"compute_s\":0.125,"
                                                "\"comm_s\":0.0625,\"gemm_s\":0.09375,\"cpu_s\":0.1875}\n");
  StepRecord R = record(1);
  R.Loss = std::nan("");
  EXPECT_NE(moec::formatStepLogLine(R).find("\"loss\":null,"), std::string::npos) << moec::formatStepLogLine(R);
  EXPECT_EQ(formatHumanLine(record(3), 10),
            "step 3/10  loss 5.500000  aux 0.007812  lr 0.00025  0.250 s  1024 tokens/s  "
            "peak 123.5 MB  compute 0.125 s (gemm 0.094 s)  comm 0.062 s\n");
}

TEST(StepLog, PredictionsBesideTheMeasurements) {
  StepRecord R = record(3);
  R.PredictedStepSeconds = 0.5;
  R.MFU = 0.125;
  R.PredictedPeakBytes = 100e6;
  EXPECT_EQ(moec::formatStepLogLine(R),
            "{\"step\":3,\"loss\":5.5,\"aux_loss\":0.0078125,\"lr\":0.00025,"
            "\"grad_norm\":1.5,\"step_time_s\":0.25,"
            "\"tokens_per_s\":1024,\"peak_bytes\":123456789,\"compute_s\":0.125,"
            "\"comm_s\":0.0625,\"gemm_s\":0.09375,\"cpu_s\":0.1875,"
            "\"predicted_step_time_s\":0.5,\"mfu\":0.125,\"predicted_peak_bytes\":100000000}\n");
  EXPECT_EQ(formatHumanLine(R, 10), "step 3/10  loss 5.500000  aux 0.007812  lr 0.00025  0.250 s (plan 0.500 s)  "
                                    "1024 tokens/s  peak 123.5 MB (plan 100.0 MB)  compute 0.125 s (gemm 0.094 s)  "
                                    "comm 0.062 s  MFU 12.5%\n");
}

// A run on the CUDA backend says what device memory it used and what it
// copied between host and device; the keys round-trip.
TEST(StepLog, DeviceFiguresOfAGpuRun) {
  StepRecord R = record(3);
  R.DevicePeakBytes = 2.5e9;
  R.StagedBytes = 75e6;
  std::string Line = moec::formatStepLogLine(R);
  EXPECT_NE(Line.find("\"peak_bytes\":123456789,\"device_peak_bytes\":2500000000,\"staged_bytes\":75000000,"),
            std::string::npos)
      << Line;
  llvm::Expected<StepRecord> Back = moec::parseStepLogLine(Line);
  ASSERT_TRUE(bool(Back)) << llvm::toString(Back.takeError());
  EXPECT_EQ(Back->DevicePeakBytes, 2.5e9);
  EXPECT_EQ(Back->StagedBytes, 75e6);
  EXPECT_EQ(formatHumanLine(R, 10), "step 3/10  loss 5.500000  aux 0.007812  lr 0.00025  0.250 s  1024 tokens/s  "
                                    "peak 123.5 MB  device 2500.0 MB (staged 75.0 MB)  compute 0.125 s "
                                    "(gemm 0.094 s)  comm 0.062 s\n");
}

TEST(StepLog, WritesOneCompleteLinePerStep) {
  char Path[] = "/tmp/moerun-steplog-XXXXXX";
  int FD = mkstemp(Path);
  ASSERT_GE(FD, 0);
  close(FD);
  {
    StepLog Log;
    std::string Error;
    ASSERT_TRUE(Log.open(Path, Error)) << Error;
    for (int64_t S = 1; S <= 3; ++S)
      ASSERT_TRUE(Log.write(record(S), 3, nullptr, Error)) << Error;
    // Lines are on disk before the log is closed: a crash keeps them.
    std::ifstream In(Path);
    std::stringstream Text;
    Text << In.rdbuf();
    EXPECT_EQ(Text.str(), moec::formatStepLogLine(record(1)) + moec::formatStepLogLine(record(2)) +
                              moec::formatStepLogLine(record(3)));
  }
  std::remove(Path);
}

TEST(StepLog, UnwritablePath) {
  StepLog Log;
  std::string Error;
  EXPECT_FALSE(Log.open("/nonexistent-dir/log.jsonl", Error));
  EXPECT_NE(Error.find("cannot write the log '/nonexistent-dir/log.jsonl'"), std::string::npos) << Error;
}

} // namespace
