// Requests to stop a run early and resumably: the signals a scheduler sends before it kills a
// job (Slurm: SIGTERM at the time limit and on scancel, the batch script's --signal, often
// SIGUSR1) and a wall-clock budget. A handler only records the signal; the run acts on it
// between steps, once every rank has agreed (see Trainer), so all ranks stop after the same step.
#pragma once

#include <array>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "core/names.hpp"

namespace trident {

enum class StopSignal { kTerm, kInt, kUsr1, kUsr2, kHup };
template <>
inline constexpr std::array<Named<StopSignal>, 5> kNames<StopSignal>{{{StopSignal::kTerm, "TERM"},
                                                                      {StopSignal::kInt, "INT"},
                                                                      {StopSignal::kUsr1, "USR1"},
                                                                      {StopSignal::kUsr2, "USR2"},
                                                                      {StopSignal::kHup, "HUP"}}};
int signal_number(StopSignal s);

// Why a rank wants to stop: 0 none, a signal number, or kStopForTimeBudget. Codes are ordered
// so that the largest over the ranks is a valid reason to report.
constexpr int kStopForTimeBudget = 1000;

class StopRequest {
 public:
  // Installs a handler for each of `signals` and starts the clock of the `max_minutes` budget
  // (0: no budget). The handlers stay for the rest of the process: a signal that arrives while a
  // stopped run shuts down (MPI and Kokkos finalising) must not turn its clean exit into death
  // by that signal.
  StopRequest(const std::vector<StopSignal>& signals, double max_minutes);
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // This rank's reason to stop now, after a step that took `step_seconds`: a signal received, or
  // a budget in which another step of that length would not end.
  int reason(double step_seconds) const;
  // "SIGUSR1", "the time budget run.max_minutes = 30"
  std::string describe(int reason) const;

 private:
  double max_seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trident
