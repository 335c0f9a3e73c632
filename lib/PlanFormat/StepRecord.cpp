//===- StepRecord.cpp - moerun's step log, written and read ----------------===//
#include "moec/PlanFormat/StepRecord.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include <cmath>
#include <fmt/format.h>
#include <limits>

using namespace moec;

llvm::ArrayRef<StepLogKey> moec::stepLogKeys() {
  static const StepLogKey Keys[] = {
      {"step", &StepRecord::Step},
      {"loss", &StepRecord::Loss},
      {"aux_loss", &StepRecord::AuxLoss},
      {"mtp_loss", &StepRecord::MtpLoss},
      {"lr", &StepRecord::LearningRate},
      {"grad_norm", &StepRecord::GradNorm},
      {"step_time_s", &StepRecord::StepTimeSeconds},
      {"tokens_per_s", &StepRecord::TokensPerSecond},
      {"useful_tokens_per_s", &StepRecord::UsefulTokensPerSecond},
      {"peak_bytes", &StepRecord::PeakBytes},
      {"device_peak_bytes", &StepRecord::DevicePeakBytes},
      {"staged_bytes", &StepRecord::StagedBytes},
      {"compute_s", &StepRecord::ComputeSeconds},
      {"comm_s", &StepRecord::CommSeconds},
      {"tp_comm_s", &StepRecord::TpCommSeconds},
      {"cp_comm_s", &StepRecord::CpCommSeconds},
      {"ep_comm_s", &StepRecord::EpCommSeconds},
      {"dp_comm_s", &StepRecord::DpCommSeconds},
      {"pp_comm_s", &StepRecord::PpCommSeconds},
      {"gemm_s", &StepRecord::GemmSeconds},
      {"cpu_s", &StepRecord::CpuSeconds},
      {"predicted_step_time_s", &StepRecord::PredictedStepSeconds},
      {"mfu", &StepRecord::MFU},
      {"predicted_peak_bytes", &StepRecord::PredictedPeakBytes},
      {"valid_loss", &StepRecord::ValidLoss},
  };
  return Keys;
}

namespace {
template <class... Fs> struct Overloaded : Fs... { using Fs::operator()...; };
template <class... Fs> Overloaded(Fs...) -> Overloaded<Fs...>;

std::string number(double V) { return std::isfinite(V) ? fmt::format("{}", V) : "null"; }
} // namespace

std::string moec::formatStepLogLine(const StepRecord &R) {
  std::string Line = "{";
  for (const StepLogKey &K : stepLogKeys()) {
    std::string Value;
    std::visit(Overloaded{[&](int64_t StepRecord::*M) { Value = fmt::format("{}", R.*M); },
                          [&](double StepRecord::*M) { Value = number(R.*M); },
                          [&](std::optional<double> StepRecord::*M) {
                            if (R.*M)
                              Value = number(*(R.*M));
                          }},
               K.Member);
    if (!Value.empty())
      Line += fmt::format("{}\"{}\":{}", Line.size() > 1 ? "," : "", K.Key, Value);
  }
  return Line + "}\n";
}

llvm::Expected<StepRecord> moec::parseStepLogLine(llvm::StringRef Line) {
  auto Fail = [](const std::string &Message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), Message);
  };
  llvm::Expected<llvm::json::Value> V = llvm::json::parse(Line);
  if (!V)
    return Fail("not JSON: " + llvm::toString(V.takeError()));
  const llvm::json::Object *O = V->getAsObject();
  if (!O)
    return Fail("not a JSON object");
  StepRecord R;
  const double NaN = std::numeric_limits<double>::quiet_NaN();
  for (const StepLogKey &K : stepLogKeys()) {
    const llvm::json::Value *Field = O->get(K.Key);
    std::string Error;
    std::visit(Overloaded{[&](int64_t StepRecord::*M) {
                            llvm::Optional<int64_t> I = Field ? Field->getAsInteger() : llvm::None;
                            if (!I)
                              Error = fmt::format("\"{}\" must be an integer", K.Key);
                            else
                              R.*M = *I;
                          },
                          [&](double StepRecord::*M) {
                            if (Field && Field->kind() == llvm::json::Value::Null)
                              R.*M = NaN;
                            else if (llvm::Optional<double> D = Field ? Field->getAsNumber() : llvm::None)
                              R.*M = *D;
                            else
                              Error = fmt::format("\"{}\" must be a number", K.Key);
                          },
                          [&](std::optional<double> StepRecord::*M) {
                            if (!Field)
                              return;
                            if (Field->kind() == llvm::json::Value::Null)
                              R.*M = NaN;
                            else if (llvm::Optional<double> D = Field->getAsNumber())
                              R.*M = *D;
                            else
                              Error = fmt::format("\"{}\" must be a number", K.Key);
                          }},
               K.Member);
    if (!Error.empty())
      return Fail(Field ? Error : fmt::format("no \"{}\"", K.Key));
  }
  return R;
}

llvm::Expected<std::vector<StepRecord>> moec::readStepLog(llvm::StringRef Path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer = llvm::MemoryBuffer::getFileOrSTDIN(Path);
  if (!Buffer)
    return llvm::createStringError(Buffer.getError(), "cannot read '%s': %s", Path.str().c_str(),
                                   Buffer.getError().message().c_str());
  std::vector<StepRecord> Steps;
  llvm::StringRef Rest = (*Buffer)->getBuffer();
  for (unsigned LineNo = 1; !Rest.empty(); ++LineNo) {
    auto [Line, Tail] = Rest.split('\n');
    Rest = Tail;
    if (Line.trim().empty())
      continue;
    llvm::Expected<StepRecord> R = parseStepLogLine(Line);
    if (!R)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s:%u: %s", Path.str().c_str(), LineNo,
                                     llvm::toString(R.takeError()).c_str());
    Steps.push_back(*R);
  }
  if (Steps.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "'%s' holds no step", Path.str().c_str());
  return Steps;
}
