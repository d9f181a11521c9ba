// Stop requests: async-signal-safe handlers that record the signal, and the time budget.
#include "core/stop_request.hpp"

#include <fmt/format.h>

#include <cstring>

namespace trident {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signo) {
  g_stop_signal = signo;
}

}  // namespace

int signal_number(StopSignal s) {
  switch (s) {
    case StopSignal::kTerm:
      return SIGTERM;
    case StopSignal::kInt:
      return SIGINT;
    case StopSignal::kUsr1:
      return SIGUSR1;
    case StopSignal::kUsr2:
      return SIGUSR2;
    case StopSignal::kHup:
      return SIGHUP;
  }
  return SIGTERM;
}

StopRequest::StopRequest(const std::vector<StopSignal>& signals, double max_minutes)
    : max_seconds_(max_minutes * 60.0), start_(std::chrono::steady_clock::now()) {
  g_stop_signal = 0;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted system calls (file I/O, MPI's polls) go on
  for (const StopSignal s : signals) sigaction(signal_number(s), &action, nullptr);
}

int StopRequest::reason(double step_seconds) const {
  if (g_stop_signal != 0) return g_stop_signal;
  if (max_seconds_ <= 0) return 0;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed + step_seconds > max_seconds_ ? kStopForTimeBudget : 0;
}

std::string StopRequest::describe(int reason) const {
  if (reason == kStopForTimeBudget)
    return fmt::format("the time budget run.max_minutes = {:g} would end during the next step",
                       max_seconds_ / 60.0);
  for (const Named<StopSignal>& n : kNames<StopSignal>)
    if (signal_number(n.value) == reason) return fmt::format("SIG{}", n.name);
  return fmt::format("signal {}", reason);
}

}  // namespace trident
