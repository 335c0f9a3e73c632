//===- moerun.cpp - Runs a launch plan on an MPI job ----------------------===//
//
//   mpirun -np N moerun plan.toml [--steps K] [--log FILE] [--seed S]
//                                 [--lr X] [--timeout SECONDS] [--dry-run]
//                                 [--save DIR [--save-interval K] [--keep N]]
//                                 [--load DIR] [--init-from-hf DIR]
//                                 [--backend cpu|cuda]
//
// Every rank reads the plan and the job starts only when every check passes
// on every rank: the plan files agree (a hash all-gathered over the world),
// the plan is valid, and the job has the plan's world size. Checks end with
// an agreement (an all-reduce of failure flags) so that all ranks exit with
// the same status instead of some waiting forever for the others. Then one
// communicator per group kind of the plan is built, and runSteps() runs the
// training steps (RunSteps.h); --dry-run instead prints the layout each rank
// actually joined and exercises every group.
//
// Exit status (the same on every rank): 0 success, 1 a plan problem
// (unreadable, invalid, wrong world size, plans that differ between ranks),
// 2 usage, 3 an MPI failure, 4 the watchdog ended a job that made no
// progress, 5 the trainer refuses the plan, 6 a checkpoint cannot be loaded
// or saved.
//
//===----------------------------------------------------------------------===//
#include "RunSteps.h"
#include "comm/mpi/MpiComm.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace moerun;

namespace {

constexpr int ExitOK = 0, ExitPlan = 1, ExitUsage = 2;

namespace cl = llvm::cl;
cl::OptionCategory MoerunCategory("moerun options");
cl::opt<std::string> PlanPath(cl::Positional, cl::desc("<plan.toml>"), cl::cat(MoerunCategory));
cl::opt<int64_t> Steps("steps", cl::desc("Train until step K (at least 1), from a loaded checkpoint's step or 0"),
                       cl::value_desc("K"), cl::init(1), cl::cat(MoerunCategory));
cl::opt<std::string> LogPath("log", cl::desc("Write one JSON line per step to this file (rank 0)"),
                             cl::value_desc("FILE"), cl::cat(MoerunCategory));
cl::opt<uint64_t> Seed("seed", cl::desc("Seed of the weights and the data order"), cl::value_desc("S"), cl::init(1234),
                       cl::cat(MoerunCategory));
cl::opt<double> LearningRate("lr", cl::desc("Learning rate (positive)"), cl::value_desc("X"), cl::init(1e-3),
                             cl::cat(MoerunCategory));
cl::opt<double> TimeoutSeconds("timeout", cl::desc("End the job after this long without progress (0: never)"),
                               cl::value_desc("SECONDS"), cl::init(300), cl::cat(MoerunCategory));
cl::opt<std::string> SaveDir("save",
                             cl::desc("Save checkpoints in this directory: after the last step, every "
                                      "--save-interval steps, and on SIGTERM"),
                             cl::value_desc("DIR"), cl::cat(MoerunCategory));
cl::opt<int64_t> SaveInterval("save-interval", cl::desc("Save every K steps (with --save; 0: at the end only)"),
                              cl::value_desc("K"), cl::init(0), cl::cat(MoerunCategory));
cl::opt<int64_t> Keep("keep", cl::desc("Keep the newest N checkpoints (with --save; 0: all)"), cl::value_desc("N"),
                      cl::init(0), cl::cat(MoerunCategory));
cl::opt<std::string> LoadDir("load",
                             cl::desc("Resume from the latest checkpoint in this directory (none there: from step 0)"),
                             cl::value_desc("DIR"), cl::cat(MoerunCategory));
cl::opt<std::string> InitFromHf("init-from-hf",
                                cl::desc("Start from a Hugging Face checkpoint (DIR/model.safetensors, F32) instead "
                                         "of the seeded initialisation"),
                                cl::value_desc("DIR"), cl::cat(MoerunCategory));
cl::opt<std::string> Backend("backend",
                             cl::desc("Compute on the host (cpu) or on this node's CUDA devices (cuda: local rank r "
                                      "on device r modulo the devices); default: cuda for a plan made for a GPU, "
                                      "cpu for one made for `cpu`"),
                             cl::value_desc("cpu|cuda"), cl::cat(MoerunCategory));
cl::opt<bool> DryRun("dry-run", cl::desc("Check the plan and exercise every group instead of training"),
                     cl::cat(MoerunCategory));

const char *Usage =
    "usage: moerun PLAN.toml [--steps K] [--log FILE] [--seed S] [--lr X] [--timeout SECONDS] "
    "[--save DIR [--save-interval K] [--keep N]] [--load DIR] [--init-from-hf DIR] [--backend cpu|cuda] [--dry-run] "
    "(--help lists "
    "them)\n";

/// Parses the command line (llvm::cl, as moec does) without exiting:
/// false with Error set on a usage error, which every rank reports once MPI
/// is up so that the whole job exits with the same status. --help prints
/// and exits before MPI starts.
bool parseOptions(int Argc, char **Argv, RunOptions &Opts, std::string &Error) {
  cl::HideUnrelatedOptions(MoerunCategory);
  llvm::raw_string_ostream Errors(Error);
  if (!cl::ParseCommandLineOptions(Argc, Argv, "moerun: runs a launch plan on an MPI job\n", &Errors)) {
    Errors.flush();
    // llvm::cl names the program on each line; the caller names it and the
    // rank. A bad option value it prints itself, before this returns.
    llvm::SmallVector<llvm::StringRef, 4> Lines;
    llvm::StringRef(Error).trim().split(Lines, '\n');
    std::string Joined;
    for (llvm::StringRef Line : Lines) {
      Line.consume_front("moerun: ");
      Joined += (Joined.empty() ? "" : " ") + Line.trim().str();
    }
    Error = Joined.empty() ? "an option has an invalid value (above)" : Joined;
    return false;
  }
  if (PlanPath.empty())
    Error = "no plan given";
  else if (Steps < 1)
    Error = fmt::format("--steps: expected an integer of at least 1, got '{}'", int64_t(Steps));
  else if (!(LearningRate > 0))
    Error = fmt::format("--lr must be positive, got {}", double(LearningRate));
  else if (TimeoutSeconds < 0 || !std::isfinite(TimeoutSeconds))
    Error = fmt::format("--timeout must be 0 (no watchdog) or positive, got {}", double(TimeoutSeconds));
  else if (SaveInterval < 0 || Keep < 0 || Keep > 1000000)
    Error = fmt::format("--save-interval and --keep must be 0 or positive, got {} and {}", int64_t(SaveInterval),
                        int64_t(Keep));
  else if (SaveDir.empty() && (SaveInterval.getNumOccurrences() || Keep.getNumOccurrences()))
    Error = "--save-interval and --keep need --save DIR";
  else if (Backend.getNumOccurrences() && Backend != "cpu" && Backend != "cuda")
    Error = fmt::format("--backend: expected cpu or cuda, got '{}'", std::string(Backend));
  Opts.PlanPath = PlanPath;
  Opts.Steps = Steps;
  Opts.LogPath = LogPath;
  Opts.Seed = Seed;
  Opts.LearningRate = LearningRate;
  Opts.TimeoutSeconds = TimeoutSeconds;
  Opts.DryRun = DryRun;
  Opts.SaveDir = SaveDir;
  Opts.LoadDir = LoadDir;
  Opts.InitFromHf = InitFromHf;
  Opts.SaveInterval = SaveInterval;
  Opts.Keep = int(Keep);
  Opts.Backend = Backend;
  return Error.empty();
}

/// True when LocalOK holds on every rank. Every rank must call it.
bool allAgree(moert::CommWorld &World, bool LocalOK) {
  float Failed = LocalOK ? 0.0f : 1.0f;
  World.world().allReduceSum(&Failed, 1);
  return Failed == 0.0f;
}

std::string rankList(const std::vector<int> &Ranks) {
  std::string S = Ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t I = 0; I < Ranks.size(); ++I)
    S += (I ? "," : "") + std::to_string(Ranks[I]);
  return S;
}

/// Every rank all-gathers the hash of its plan file; false (with messages
/// printed) when they differ.
bool plansAgree(moert::CommWorld &World, uint64_t Hash, const std::string &Path) {
  int N = World.size();
  std::vector<int64_t> Send(static_cast<size_t>(N), static_cast<int64_t>(Hash));
  std::vector<int64_t> Recv(static_cast<size_t>(N));
  World.world().allToAll(Send.data(), Recv.data(), 1);
  // Ranks grouped by hash, groups in order of their lowest rank.
  std::vector<std::pair<int64_t, std::vector<int>>> ByHash;
  for (int R = 0; R < N; ++R) {
    auto It = std::find_if(ByHash.begin(), ByHash.end(), [&](const auto &G) { return G.first == Recv[size_t(R)]; });
    if (It == ByHash.end())
      ByHash.push_back({Recv[size_t(R)], {R}});
    else
      It->second.push_back(R);
  }
  if (ByHash.size() == 1)
    return true;
  if (World.rank() == 0) {
    std::string Parts;
    for (auto &[H, Ranks] : ByHash)
      Parts += fmt::format("{}{} read a plan with hash xxh64:{:016x}", Parts.empty() ? "" : "; ", rankList(Ranks),
                           uint64_t(H));
    std::fprintf(stderr, "moerun: the ranks do not read the same plan: %s. Give every rank the same plan file.\n",
                 Parts.c_str());
  }
  if (Recv[0] != int64_t(Hash))
    std::fprintf(stderr, "moerun: rank %d: my plan '%s' differs from rank 0's\n", World.rank(), Path.c_str());
  return false;
}

/// The group-local rank this rank has in each kind, checked against the
/// plan's coordinates; every group is exercised with an all-reduce.
bool checkGroups(const moec::LaunchPlan &Plan, int Rank,
                 std::map<std::string, std::unique_ptr<moert::Communicator>> &Groups, std::string &Error) {
  const moec::LaunchRank &Me = Plan.Ranks[size_t(Rank)];
  for (auto &[Kind, Comm] : Groups) {
    const std::vector<int> &Members = Plan.Groups.at(Kind)[size_t(Me.Groups.at(Kind))];
    if (Comm->size() != int(Members.size()) || Members[size_t(Comm->rank())] != Rank) {
      Error =
          fmt::format("the '{}' communicator has this rank at {} of {}, the plan at {} of {}", Kind, Comm->rank(),
                      Comm->size(), std::find(Members.begin(), Members.end(), Rank) - Members.begin(), Members.size());
      return false;
    }
    float One = 1.0f;
    Comm->allReduceSum(&One, 1);
    if (One != float(Members.size())) {
      Error = fmt::format("an all-reduce over the '{}' group summed to {}, expected {}", Kind, One, Members.size());
      return false;
    }
  }
  return true;
}

/// Rank 0 prints one line per rank, from what each rank reports of the
/// communicators it joined (not from the plan alone).
void printLayout(const moec::LaunchPlan &Plan, moert::CommWorld &World,
                 std::map<std::string, std::unique_ptr<moert::Communicator>> &Groups) {
  const std::vector<std::string> Kinds = {"tp", "cp", "dp", "pp", "ep", "etp", "edp"};
  std::vector<float> Mine;
  for (const std::string &K : Kinds)
    Mine.push_back(float(Groups.at(K)->rank()));
  std::vector<float> All(Mine.size() * size_t(World.size()));
  World.world().allGather(Mine.data(), All.data(), Mine.size());
  if (World.rank() != 0)
    return;
  const moec::LaunchParallel &Par = Plan.Parallel;
  std::printf("moerun: plan '%s' (%s), %lld ranks: tp=%lld cp=%lld ep=%lld etp=%lld pp=%lld vpp=%lld dp=%lld "
              "edp=%lld, %lld micro batches per step\n",
              Plan.Recipe.c_str(), Plan.RecipeHash.c_str(), (long long)Plan.WorldSize, (long long)Par.TP,
              (long long)Par.CP, (long long)Par.EP, (long long)Par.ETP, (long long)Par.PP, (long long)Par.VPP,
              (long long)Par.DP, (long long)Par.EDP, (long long)Plan.Microbatches);
  for (int R = 0; R < World.size(); ++R) {
    const moec::LaunchRank &LR = Plan.Ranks[size_t(R)];
    std::string Line = fmt::format("rank {:>3}: node {} local {}", R, LR.Node, LR.LocalRank);
    for (size_t K = 0; K < Kinds.size(); ++K)
      Line += fmt::format(" {} {}", Kinds[K], int64_t(All[size_t(R) * Kinds.size() + K]));
    int64_t PpRank = int64_t(All[size_t(R) * Kinds.size() + 3]);
    for (int64_t C = 0; C < Par.VPP; ++C) {
      const moec::LaunchStage &S = Plan.stage(PpRank, C);
      Line += fmt::format(" | stage {}: layers {}-{}{}{}", S.VirtualStage, S.FirstLayer,
                          S.FirstLayer + S.DecoderLayers - 1, S.Embedding ? " +embedding" : "", S.Loss ? " +loss" : "");
    }
    std::printf("%s\n", Line.c_str());
  }
  std::printf("moerun: dry run: plan checks passed and all %zu group kinds answered on every rank\n", Groups.size());
  std::fflush(stdout);
}

int run(int Argc, char **Argv) {
  RunOptions Opts;
  std::string UsageError;
  bool OptionsOK = parseOptions(Argc, Argv, Opts, UsageError);
  // Started before MPI_Init, which hangs when a process of the job never starts.
  Watchdog Dog(OptionsOK ? Opts.TimeoutSeconds : 300, "starting MPI");
  std::unique_ptr<moert::CommWorld> World = moert::createMpiWorld(&Argc, &Argv);
  const int Rank = World->rank();
  Dog.setRank(Rank);
  Dog.beat("checking the plan");

  if (!allAgree(*World, OptionsOK)) {
    if (!OptionsOK)
      std::fprintf(stderr, "moerun: rank %d: %s\n%s", Rank, UsageError.c_str(), Usage);
    return ExitUsage;
  }

  // The bytes every rank hashes and parses are the same read.
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer =
      llvm::MemoryBuffer::getFile(Opts.PlanPath, /*IsText=*/true);
  if (!allAgree(*World, bool(Buffer))) {
    if (!Buffer)
      std::fprintf(stderr, "moerun: rank %d: cannot read plan '%s': %s\n", Rank, Opts.PlanPath.c_str(),
                   Buffer.getError().message().c_str());
    return ExitPlan;
  }
  llvm::StringRef Text = (*Buffer)->getBuffer();
  if (!plansAgree(*World, llvm::xxHash64(Text), Opts.PlanPath))
    return ExitPlan;

  llvm::Expected<moec::LaunchPlan> Parsed = moec::parsePlan(Text, Opts.PlanPath);
  std::string PlanError;
  if (!Parsed)
    PlanError = llvm::toString(Parsed.takeError());
  // Every rank read the same bytes: rank 0 speaks for all.
  if (!allAgree(*World, PlanError.empty())) {
    if (Rank == 0)
      std::fprintf(stderr, "moerun: invalid plan: %s\n", PlanError.c_str());
    return ExitPlan;
  }
  const moec::LaunchPlan &Plan = *Parsed;
  if (Plan.WorldSize != World->size()) {
    if (Rank == 0)
      std::fprintf(stderr,
                   "moerun: the plan '%s' is for %lld ranks (world_size = %lld) but this job has %d ranks; "
                   "launch it with %lld ranks (mpirun -np %lld, or moec run --np %lld)\n",
                   Opts.PlanPath.c_str(), (long long)Plan.WorldSize, (long long)Plan.WorldSize, World->size(),
                   (long long)Plan.WorldSize, (long long)Plan.WorldSize, (long long)Plan.WorldSize);
    return ExitPlan;
  }

  std::unique_ptr<StepLog> Log;
  if (Rank == 0) {
    Log = std::make_unique<StepLog>();
    std::string LogError;
    // A resumed run continues its log.
    if (!Opts.LogPath.empty() && !Log->open(Opts.LogPath, LogError, /*Append=*/!Opts.LoadDir.empty())) {
      std::fprintf(stderr, "moerun: %s\n", LogError.c_str());
      Log.reset();
    }
  }
  if (!allAgree(*World, Rank != 0 || Log))
    return ExitUsage;

  // One communicator per kind; every rank splits the kinds in the same
  // (sorted) order, as the collective split requires.
  std::map<std::string, std::unique_ptr<moert::Communicator>> Groups;
  for (const auto &[Kind, List] : Plan.Groups) {
    Dog.beat("building the '" + Kind + "' groups");
    Groups[Kind] = World->split(Kind, List);
  }
  Dog.beat("checking the groups");
  std::string GroupError;
  bool GroupsOK = checkGroups(Plan, Rank, Groups, GroupError);
  if (!allAgree(*World, GroupsOK)) {
    if (!GroupsOK)
      std::fprintf(stderr, "moerun: rank %d: %s\n", Rank, GroupError.c_str());
    return ExitPlan;
  }

  if (Opts.DryRun) {
    Dog.beat("printing the layout");
    printLayout(Plan, *World, Groups);
    return ExitOK;
  }
  Dog.beat("training");
  RunContext Ctx{Plan, Opts, *World, Groups, Dog, Log.get()};
  int Status = runSteps(Ctx);
  // Every rank leaves with the worst status of any rank.
  float Worst = float(Status);
  std::vector<float> All(size_t(World->size()));
  World->world().allGather(&Worst, All.data(), 1);
  return int(*std::max_element(All.begin(), All.end()));
}

} // namespace

int main(int Argc, char **Argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
#ifdef __GLIBC__
  // Every step frees and allocates the same large activation buffers. By
  // default glibc maps big blocks afresh and trims the heap when they are
  // freed, so each step faults in new pages that the kernel must zero, a
  // tenth of a one-rank step (perf, docs/benchmarks.md). Keep blocks up to
  // 32 MiB (glibc's largest mmap threshold) in the heap and do not hand free
  // memory back below 1 GiB; the peak memory is the same.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  return run(Argc, Argv);
}
