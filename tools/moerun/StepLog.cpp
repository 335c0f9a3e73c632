//===- moerun/StepLog.cpp - The per-step log -------------------------------===//
#include "StepLog.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

using namespace moerun;

std::string moerun::formatHumanLine(const StepRecord &R, int64_t TotalSteps) {
  std::string Plan = R.PredictedStepSeconds ? fmt::format(" (plan {:.3f} s)", *R.PredictedStepSeconds) : "";
  std::string PlanPeak = R.PredictedPeakBytes ? fmt::format(" (plan {:.1f} MB)", *R.PredictedPeakBytes / 1e6) : "";
  std::string Tail = R.MFU ? fmt::format("  MFU {:.1f}%", 100 * *R.MFU) : "";
  if (R.ValidLoss)
    Tail += fmt::format("  validation loss {:.6f}", *R.ValidLoss);
  std::string Mtp = R.MtpLoss ? fmt::format("  mtp {:.6f}", *R.MtpLoss) : "";
  std::string Device = R.DevicePeakBytes ? fmt::format("  device {:.1f} MB", *R.DevicePeakBytes / 1e6) : "";
  if (R.StagedBytes)
    Device += fmt::format(" (staged {:.1f} MB)", *R.StagedBytes / 1e6);
  std::string Useful = R.UsefulTokensPerSecond ? fmt::format(" ({:.0f} text)", *R.UsefulTokensPerSecond) : "";
  return fmt::format("step {}/{}  loss {:.6f}  aux {:.4g}{}  lr {:.3g}  {:.3f} s{}  {:.0f} tokens/s{}  peak {:.1f} "
                     "MB{}{}  compute {:.3f} s (gemm {:.3f} s)  comm {:.3f} s{}\n",
                     R.Step, TotalSteps, R.Loss, R.AuxLoss, Mtp, R.LearningRate, R.StepTimeSeconds, Plan,
                     R.TokensPerSecond, Useful, double(R.PeakBytes) / 1e6, PlanPeak, Device, R.ComputeSeconds,
                     R.GemmSeconds, R.CommSeconds, Tail);
}

StepLog::~StepLog() {
  if (FD >= 0)
    ::close(FD);
}

bool StepLog::open(const std::string &P, std::string &Error, bool Append) {
  Path = P;
  FD = ::open(P.c_str(), O_WRONLY | O_CREAT | (Append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC, 0644);
  if (FD < 0) {
    Error = fmt::format("cannot write the log '{}': {}", P, std::strerror(errno));
    return false;
  }
  return true;
}

bool StepLog::write(const StepRecord &R, int64_t TotalSteps, std::FILE *Human, std::string &Error) {
  if (Human) {
    std::string Line = formatHumanLine(R, TotalSteps);
    std::fputs(Line.c_str(), Human);
    std::fflush(Human);
  }
  if (FD < 0)
    return true;
  std::string Line = moec::formatStepLogLine(R);
  // One write of the whole line: a crash leaves whole lines only.
  ssize_t N = ::write(FD, Line.data(), Line.size());
  if (N != ssize_t(Line.size())) {
    Error = fmt::format("cannot write the log '{}': {}", Path, N < 0 ? std::strerror(errno) : "short write");
    return false;
  }
  return true;
}
