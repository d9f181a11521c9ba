// Step watchdog implementation: poll the phase timer's heartbeat, print and abort on a stall.
#include "core/watchdog.hpp"

#include "core/flight_recorder.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace trident {

Watchdog::Watchdog(const PhaseTimer& timer, double timeout_seconds, int rank,
                   std::function<int()> current_step)
    : timer_(timer), timeout_(timeout_seconds), rank_(rank), step_(std::move(current_step)) {
  // The flight recorder's dumps on request (SIGUSR2) are written from this thread too.
  if (timeout_ > 0 || FlightRecorder::instance().capacity() > 0)
    thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stopping_; })) {
    FlightRecorder& recorder = FlightRecorder::instance();
    if (recorder.dump_requested() && recorder.dump("SIGUSR2"))
      std::fprintf(stderr, "trident: rank %d wrote its flight record (SIGUSR2)\n", rank_);
    const double idle =
        std::chrono::duration<double>(PhaseTimer::Clock::now() - timer_.last_change()).count();
    if (timeout_ <= 0 || idle < timeout_) continue;
    const int phase = timer_.current_phase();
    // Each rank's record of its communication, for `trident doctor RUN_DIR` to name the rank the
    // others wait for.
    const bool recorded = recorder.dump("watchdog");
    std::fprintf(
        stderr,
        "trident: watchdog: rank %d has been in phase %s of step %d for %.0f s "
        "(run.watchdog_seconds = %g); aborting the job%s\n",
        rank_, phase >= 0 ? kPhaseNames[phase] : "(between phases)", step_(), idle, timeout_,
        recorded ? " (flight record written: trident doctor RUN_DIR names who hangs)" : "");
    std::fflush(stderr);
    // Give the other ranks' watchdogs, stalled on the same collective, time to report theirs
    // before the launcher tears the job down.
    sleep(3);
    std::_Exit(124);
  }
}

}  // namespace trident
