//===- RunCommand.cpp - moec run ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace moec::driver {

/// moerun: --moerun, else next to moec (an install), else the build tree's
/// sibling tools/moerun, else PATH.
std::string findMoerun(const char *Argv0) {
  if (!RunMoerun.empty())
    return llvm::sys::fs::can_execute(RunMoerun) ? RunMoerun.getValue() : "";
  std::string Self = llvm::sys::fs::getMainExecutable(Argv0, reinterpret_cast<void *>(&findMoerun));
  llvm::SmallString<256> Dir(Self);
  llvm::sys::path::remove_filename(Dir);
  for (const char *Rel : {"moerun", "../moerun/moerun"}) {
    llvm::SmallString<256> Candidate(Dir);
    llvm::sys::path::append(Candidate, Rel);
    if (llvm::sys::fs::can_execute(Candidate))
      return std::string(Candidate);
  }
  if (llvm::ErrorOr<std::string> OnPath = llvm::sys::findProgramByName("moerun"))
    return *OnPath;
  return "";
}

namespace {

/// Bytes of memory this machine can give the job: MOEC_HOST_MEMORY when set
/// (a container whose limit /proc does not show), else MemAvailable of
/// /proc/meminfo; None where neither says.
llvm::Optional<double> availableHostMemory() {
  if (const char *Env = std::getenv("MOEC_HOST_MEMORY")) {
    double Bytes = 0;
    if (!llvm::StringRef(Env).getAsDouble(Bytes) && Bytes > 0)
      return Bytes;
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Info = llvm::MemoryBuffer::getFileAsStream("/proc/meminfo");
  if (!Info)
    return llvm::None;
  llvm::SmallVector<llvm::StringRef, 64> Lines;
  (*Info)->getBuffer().split(Lines, '\n');
  for (llvm::StringRef L : Lines)
    if (L.consume_front("MemAvailable:")) {
      unsigned long long KiB = 0;
      if (!L.trim().split(' ').first.getAsInteger(10, KiB))
        return double(KiB) * 1024.0;
    }
  return llvm::None;
}

// Forwarded to the job, so that stopping moec stops mpirun and its ranks.
volatile sig_atomic_t Interrupted = 0;
volatile pid_t Job = 0;
extern "C" void forwardSignal(int Sig) {
  Interrupted = Sig;
  if (Job > 0)
    ::kill(Job, Sig);
}

/// Runs Args (Args[0] an absolute path) and waits; SIGINT and SIGTERM go to
/// the child meanwhile. The exit status, 128 + the signal for a signal, or
/// -1 when it cannot start.
int runForwardingSignals(const std::vector<std::string> &Args, std::string &Error) {
  std::vector<char *> Argv;
  for (const std::string &A : Args)
    Argv.push_back(const_cast<char *>(A.c_str()));
  Argv.push_back(nullptr);
  struct sigaction Forward = {}, OldInt = {}, OldTerm = {};
  Forward.sa_handler = forwardSignal;
  sigemptyset(&Forward.sa_mask);
  ::sigaction(SIGINT, &Forward, &OldInt);
  ::sigaction(SIGTERM, &Forward, &OldTerm);
  pid_t Pid = 0;
  int Err = ::posix_spawn(&Pid, Argv[0], nullptr, nullptr, Argv.data(), environ);
  int Status = -1;
  if (Err != 0) {
    Error = std::strerror(Err);
  } else {
    Job = Pid;
    if (Interrupted) // arrived before the child existed
      ::kill(Pid, Interrupted);
    int WS = 0;
    while (::waitpid(Pid, &WS, 0) < 0 && errno == EINTR) {
    }
    Status = WIFEXITED(WS) ? WEXITSTATUS(WS) : WIFSIGNALED(WS) ? 128 + WTERMSIG(WS) : 1;
    Job = 0;
  }
  ::sigaction(SIGINT, &OldInt, nullptr);
  ::sigaction(SIGTERM, &OldTerm, nullptr);
  return Status;
}

} // namespace

int runRun(const char *Argv0) {
  if (RunSteps == 0) {
    llvm::errs() << "moec run: --steps must be at least 1\n";
    return ExitUsage;
  }
  // The same path as `moec plan -o`: a plan only for a recipe that checks.
  OnePoint Point = compileOnePoint("run", "nothing is run");
  if (Point.Status)
    return Point.Status;
  const Recipe &R = *Point.R;
  const std::string &File = Point.File;
  llvm::Expected<Plan> P = buildPlan(R, File);
  if (!P) {
    llvm::errs() << "moec run: " << R.PointName << ": " << llvm::toString(P.takeError()) << "\n";
    return ExitErrors;
  }
  if (RunRanks.getNumOccurrences() && int64_t(RunRanks) != R.WorldSize) {
    llvm::errs() << fmt::format("moec run: recipe '{}' runs on {} ranks (world_size = {}), but --np is {}\n",
                                R.PointName, R.WorldSize, R.WorldSize, unsigned(RunRanks));
    return ExitUsage;
  }
  // Every rank runs on this machine: their predicted memory must fit in it,
  // or the job dies in an allocation minutes later.
  if (llvm::Optional<double> Available = availableHostMemory()) {
    const MemoryEstimate &M = P->Memory;
    double PerReplica = 0;
    for (const MemoryBreakdown &B : M.PerStage)
      PerReplica += B.total() - B.Reserve; // the reserve is CUDA's and NCCL's
    int64_t Stages = std::max<int64_t>(int64_t(M.PerStage.size()), 1);
    double Need = PerReplica * double(R.WorldSize / Stages);
    if (Need > *Available) {
      auto Size = [](double Bytes) {
        return Bytes >= 1e9 ? fmt::format("{:.1f} GB", Bytes / 1e9) : fmt::format("{:.1f} MB", Bytes / 1e6);
      };
      llvm::errs() << fmt::format("moec run: the {} ranks of '{}' need about {} of memory in all (moec plan's "
                                  "prediction), but this machine has {} available; use fewer or smaller "
                                  "ranks, or set MOEC_HOST_MEMORY if the limit is known to be higher\n",
                                  R.WorldSize, R.PointName, Size(Need), Size(*Available));
      return ExitUsage;
    }
  }
  std::string Moerun = findMoerun(Argv0);
  if (Moerun.empty()) {
    if (!RunMoerun.empty())
      llvm::errs() << "moec run: --moerun '" << RunMoerun << "' is not an executable file\n";
    else
      llvm::errs() << "moec run: cannot find moerun next to moec or on PATH; give it with --moerun PATH\n";
    return ExitUsage;
  }
  llvm::ErrorOr<std::string> Mpirun = llvm::sys::findProgramByName("mpirun");
  if (!Mpirun) {
    llvm::errs() << "moec run: cannot find mpirun on PATH (install Open MPI, or launch moerun yourself: "
                    "docs/runtime.md)\n";
    return ExitUsage;
  }

  llvm::SmallString<256> Dir;
  if (std::error_code EC = llvm::sys::fs::createUniqueDirectory("moec-run", Dir)) {
    llvm::errs() << "moec run: cannot create a temporary directory: " << EC.message() << "\n";
    return ExitUsage;
  }
  llvm::SmallString<256> PlanPath(Dir);
  llvm::sys::path::append(PlanPath, "plan.toml");
  if (llvm::Error E = writeFileAtomically(PlanPath, planToTOML(*P))) {
    llvm::errs() << "moec run: " << llvm::toString(std::move(E)) << "\n";
    return ExitUsage;
  }

  std::vector<std::string> Args = {*Mpirun, "--oversubscribe", "-np", std::to_string(R.WorldSize)};
  if (::getuid() == 0)
    Args.push_back("--allow-run-as-root");
  Args.insert(Args.end(), {Moerun, std::string(PlanPath), "--steps", std::to_string(unsigned(RunSteps))});
  for (auto [Flag, Value] :
       {std::make_pair("--log", &RunLog), std::make_pair("--seed", &RunSeed), std::make_pair("--lr", &RunLR),
        std::make_pair("--timeout", &RunTimeout), std::make_pair("--save", &RunSave),
        std::make_pair("--save-interval", &RunSaveInterval), std::make_pair("--keep", &RunKeep),
        std::make_pair("--load", &RunLoad), std::make_pair("--init-from-hf", &RunInitFromHf),
        std::make_pair("--backend", &RunBackend)})
    if (!Value->empty())
      Args.insert(Args.end(), {Flag, Value->getValue()});
  if (RunDry)
    Args.push_back("--dry-run");
  std::string ExecError;
  int Status = runForwardingSignals(Args, ExecError);
  auto Cleanup = [&] {
    llvm::sys::fs::remove(PlanPath);
    llvm::sys::fs::remove(Dir);
  };
  if (Status < 0) {
    llvm::errs() << "moec run: mpirun could not be started: " << ExecError << "\n";
    Cleanup();
    return ExitUsage;
  }
  if (Interrupted) {
    llvm::errs() << "moec run: interrupted (" << (Interrupted == SIGINT ? "SIGINT" : "SIGTERM")
                 << "): the job was stopped\n";
    Cleanup();
    return 128 + Interrupted;
  }
  if (Status != 0) {
    // Kept for a rerun by hand (mpirun -np N moerun PLAN).
    llvm::errs() << "moec run: mpirun exited with status " << Status << "; the plan is kept at " << PlanPath << "\n";
    return Status;
  }
  Cleanup();
  return ExitOK;
}

} // namespace moec::driver
