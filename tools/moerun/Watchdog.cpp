//===- moerun/Watchdog.cpp - Ends a job that stops making progress ---------===//
#include "Watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

using namespace moerun;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Before MPI_Init the launcher's environment is the only source of the rank.
static int rankFromEnvironment() {
  for (const char *Var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char *V = std::getenv(Var))
      return std::atoi(V);
  return -1;
}

Watchdog::Watchdog(double TimeoutSeconds, std::string Phase)
    : Timeout(TimeoutSeconds), LastBeat(now()), Rank(rankFromEnvironment()), Phase(std::move(Phase)) {
  if (Timeout > 0)
    Thread = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> Lock(M);
    Stop = true;
  }
  Wake.notify_all();
  if (Thread.joinable())
    Thread.join();
}

void Watchdog::beat() { LastBeat = now(); }

void Watchdog::beat(const std::string &NewPhase) {
  {
    std::lock_guard<std::mutex> Lock(M);
    Phase = NewPhase;
  }
  LastBeat = now();
}

void Watchdog::setRank(int R) { Rank = R; }

void Watchdog::run() {
  // Check a few times per timeout so the overshoot stays small.
  auto Poll = std::chrono::duration<double>(std::min(1.0, Timeout / 4));
  std::unique_lock<std::mutex> Lock(M);
  while (!Stop) {
    Wake.wait_for(Lock, Poll);
    if (Stop)
      return;
    double Idle = now() - LastBeat.load();
    if (Idle < Timeout)
      continue;
    std::fprintf(stderr,
                 "moerun: rank %d: no progress for %.0f s while %s; a peer has probably died or hung. "
                 "Ending the job (raise --timeout if a step legitimately takes longer).\n",
                 Rank.load(), Idle, Phase.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    // Not exit(): the main thread is blocked inside MPI and destructors would
    // run under it. The launcher sees the non-zero exit and ends the job.
    _exit(ExitWatchdog);
  }
}
