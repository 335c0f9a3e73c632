//===- moerun/Watchdog.h - Ends a job that stops making progress -----------===//
//
// A rank blocked in a collective or a receive whose peer died or hung would
// wait forever: MPI has no timeouts. The watchdog is a thread that the main
// thread feeds a heartbeat (after each pipeline op, each phase of a step);
// when no heartbeat arrives for the timeout it prints what the rank was doing
// and ends the process with exit code 4. mpirun (or srun with
// --kill-on-bad-exit) then ends every other rank of the job.
//
// It never calls MPI: the main thread may be inside an MPI call, and MPI was
// initialised without thread support. It starts before MPI_Init, which can
// itself hang when a process of the job never starts.
//
//===----------------------------------------------------------------------===//
#ifndef MOERUN_WATCHDOG_H
#define MOERUN_WATCHDOG_H

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace moerun {

constexpr int ExitWatchdog = 4;

class Watchdog {
public:
  /// Starts watching; TimeoutSeconds <= 0 disables the watchdog.
  Watchdog(double TimeoutSeconds, std::string Phase);
  ~Watchdog();
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

  /// Progress was made; Phase (if given) says what the rank does next.
  void beat();
  void beat(const std::string &Phase);
  /// The rank's id for the message, once MPI knows it.
  void setRank(int Rank);

private:
  void run();

  double Timeout;
  std::atomic<double> LastBeat;
  std::atomic<int> Rank{-1};
  std::mutex M; // guards Phase and Stop
  std::condition_variable Wake;
  std::string Phase;
  bool Stop = false;
  std::thread Thread;
};

} // namespace moerun

#endif
