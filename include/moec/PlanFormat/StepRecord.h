//===- StepRecord.h - One line of moerun's step log --------------*- C++ -*-===//
//
// `moerun --log FILE` writes one JSON object per finished step; `moec report
// --log FILE` reads them back beside the plan that predicted them. Both go
// through this header, whose key table is the one definition of the format:
//
//   {"step":1,"loss":10.37,"aux_loss":0.0101,"lr":0.001,"grad_norm":1.2,
//    "step_time_s":0.41,"tokens_per_s":1248.8,"peak_bytes":123456,
//    "compute_s":0.30,"comm_s":0.08,"tp_comm_s":0,"cp_comm_s":0,
//    "ep_comm_s":0.05,"dp_comm_s":0.03,"pp_comm_s":0,"gemm_s":0.21,
//    "cpu_s":0.40,"predicted_step_time_s":0.35,"mfu":0.41,
//    "predicted_peak_bytes":120000}
//
// The five <dim>_comm_s split comm_s by the parallel dimension whose group
// carried the traffic, as the plan's predicted.breakdown_s prices it
// (absent from logs of older moeruns). "device_peak_bytes" and
// "staged_bytes" (after "peak_bytes") only from a run on the CUDA backend.
// The last three only when the plan
// predicts them; "valid_loss" (the
// held-out loss) only on the steps after which the run evaluated. Non-finite numbers are
// written as null and read back as NaN. Readers ignore keys they do not know,
// so a newer moerun's log still reads.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_EMIT_STEPRECORD_H
#define MOEC_EMIT_STEPRECORD_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace moec {

struct StepRecord {
  int64_t Step = 0;   ///< 1-based
  double Loss = 0;    ///< mean cross entropy over the global batch
  double AuxLoss = 0; ///< MoE load-balancing loss of the step (0: dense)
  /// Mean cross entropy of the multi-token-prediction blocks (unset: none).
  std::optional<double> MtpLoss;
  double LearningRate = 0; ///< the step's rate (the plan's schedule)
  double GradNorm = 0;     ///< global gradient norm before clipping
  double StepTimeSeconds = 0;
  double TokensPerSecond = 0; ///< whole job: global batch x seq_len / step time
  /// A vision model's: the text tokens (those with a label) per second.
  std::optional<double> UsefulTokensPerSecond;
  int64_t PeakBytes = 0; ///< largest peak memory over the ranks
  /// A GPU run's: the largest device memory peak over the ranks, and the
  /// most bytes a rank's compute backend copied between host and device
  /// (unset: the host backend).
  std::optional<double> DevicePeakBytes, StagedBytes;
  double ComputeSeconds = 0;
  double CommSeconds = 0;
  /// CommSeconds by parallel dimension (unset: a log without them).
  std::optional<double> TpCommSeconds, CpCommSeconds, EpCommSeconds, DpCommSeconds, PpCommSeconds;
  double GemmSeconds = 0; ///< part of ComputeSeconds spent inside BLAS gemm
  double CpuSeconds = 0;  ///< process CPU time of the step (mean over ranks)
  /// The plan's predictions beside the measurements (unset: not in the plan).
  std::optional<double> PredictedStepSeconds;
  std::optional<double> MFU; ///< the plan's predicted MFU x predicted / measured step time
  std::optional<double> PredictedPeakBytes;
  /// The loss on the held-out samples, on the steps after which the run
  /// evaluated (data.eval_interval).
  std::optional<double> ValidLoss;
};

/// A key of the log and the member it holds, in the order lines list them.
struct StepLogKey {
  const char *Key;
  std::variant<int64_t StepRecord::*, double StepRecord::*, std::optional<double> StepRecord::*> Member;
};
llvm::ArrayRef<StepLogKey> stepLogKeys();

/// The JSON line (with its newline) for a record.
std::string formatStepLogLine(const StepRecord &R);
/// One line back; the error says which key is missing or of the wrong type.
llvm::Expected<StepRecord> parseStepLogLine(llvm::StringRef Line);
/// Every line of a log file (blank lines skipped); the error names the file
/// and line. A log with no step is an error.
llvm::Expected<std::vector<StepRecord>> readStepLog(llvm::StringRef Path);

} // namespace moec

#endif
