//===- RunCommand.cpp - moec run ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include <unistd.h>

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

int runRun(const char *Argv0) {
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
  if (int64_t(RunRanks) != R.WorldSize) {
    llvm::errs() << fmt::format("moec run: recipe '{}' runs on {} ranks (world_size = {}), but --np is {}\n",
                                R.PointName, R.WorldSize, R.WorldSize, unsigned(RunRanks));
    return ExitUsage;
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

  std::vector<std::string> Args = {*Mpirun, "--oversubscribe", "-np", std::to_string(unsigned(RunRanks))};
  if (::getuid() == 0)
    Args.push_back("--allow-run-as-root");
  Args.insert(Args.end(), {Moerun, std::string(PlanPath), "--steps", std::to_string(unsigned(RunSteps))});
  for (auto [Flag, Value] : {std::make_pair("--log", &RunLog), std::make_pair("--seed", &RunSeed),
                             std::make_pair("--lr", &RunLR), std::make_pair("--timeout", &RunTimeout)})
    if (!Value->empty())
      Args.insert(Args.end(), {Flag, Value->getValue()});
  if (RunDry)
    Args.push_back("--dry-run");
  std::vector<llvm::StringRef> ArgRefs(Args.begin(), Args.end());
  std::string ExecError;
  int Status = llvm::sys::ExecuteAndWait(*Mpirun, ArgRefs, llvm::None, {}, 0, 0, &ExecError);
  if (Status < 0) {
    llvm::errs() << "moec run: mpirun " << (Status == -1 ? "could not be started" : "crashed") << ": " << ExecError
                 << "; the plan is kept at " << PlanPath << "\n";
    return ExitUsage;
  }
  if (Status != 0) {
    // Kept for a rerun by hand (mpirun -np N moerun PLAN).
    llvm::errs() << "moec run: mpirun exited with status " << Status << "; the plan is kept at " << PlanPath << "\n";
    return Status;
  }
  llvm::sys::fs::remove(PlanPath);
  llvm::sys::fs::remove(Dir);
  return ExitOK;
}

} // namespace moec::driver
