//===- moerun/StepLog.h - The per-step log: JSON lines and human lines -----===//
//
// `--log FILE` gets one JSON object per finished step, in the format
// moec/PlanFormat/StepRecord.h defines (moec report --log reads it back). Each
// line is written whole with one write() and flushed before the next step
// starts, so the file always holds complete lines, one per finished step:
// after a failure it keeps the steps that finished, never a half line.
// Standard output gets the same as a line for people.
//
//===----------------------------------------------------------------------===//
#ifndef MOERUN_STEPLOG_H
#define MOERUN_STEPLOG_H

#include "moec/PlanFormat/StepRecord.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace moerun {

using moec::StepRecord;

/// The line for people (with its newline).
std::string formatHumanLine(const StepRecord &R, int64_t TotalSteps);

class StepLog {
public:
  /// Path empty: human lines only. Only rank 0 should own a StepLog.
  StepLog() = default;
  ~StepLog();
  StepLog(const StepLog &) = delete;
  StepLog &operator=(const StepLog &) = delete;

  /// Creates or truncates Path (Append: keeps what it holds, for a resumed
  /// run); false with Error set when it cannot.
  bool open(const std::string &Path, std::string &Error, bool Append = false);
  /// Writes the JSON line (if a file is open) and the human line to Human.
  bool write(const StepRecord &R, int64_t TotalSteps, std::FILE *Human, std::string &Error);

private:
  int FD = -1;
  std::string Path;
};

} // namespace moerun

#endif
