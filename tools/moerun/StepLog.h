//===- moerun/StepLog.h - The per-step log: JSON lines and human lines -----===//
//
// `--log FILE` gets one JSON object per finished step:
//   {"step":1,"loss":10.37,"aux_loss":0.0101,"step_time_s":0.41,
//    "tokens_per_s":1248.8,"peak_bytes":123456,"compute_s":0.30,
//    "comm_s":0.08,"gemm_s":0.21,"cpu_s":0.40}
// Each line is written whole with one write() and flushed before the next
// step starts, so the file always holds complete lines, one per finished
// step: after a failure it keeps the steps that finished, never a half
// line. Standard output gets the same as a line for people.
//
//===----------------------------------------------------------------------===//
#ifndef MOERUN_STEPLOG_H
#define MOERUN_STEPLOG_H

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace moerun {

struct StepRecord {
  int64_t Step = 0;        ///< 1-based
  double Loss = 0;         ///< mean cross entropy over the global batch
  double AuxLoss = 0;      ///< MoE load-balancing loss of the step (0: dense)
  double LearningRate = 0; ///< the step's rate (the plan's schedule)
  double GradNorm = 0;     ///< global gradient norm before clipping
  double StepTimeSeconds = 0;
  double TokensPerSecond = 0; ///< whole job: global batch x seq_len / step time
  int64_t PeakBytes = 0;      ///< largest peak memory over the ranks
  double ComputeSeconds = 0;
  double CommSeconds = 0;
  double GemmSeconds = 0; ///< part of ComputeSeconds spent inside BLAS gemm
  double CpuSeconds = 0;  ///< process CPU time of the step (mean over ranks)
  /// The plan's predictions beside the measurements (unset: not in the plan).
  std::optional<double> PredictedStepSeconds;
  std::optional<double> MFU; ///< the plan's predicted MFU x predicted / measured step time
  std::optional<double> PredictedPeakBytes;
};

/// The JSON line (with its newline) for a record; non-finite numbers are null.
std::string formatJSONLine(const StepRecord &R);
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
