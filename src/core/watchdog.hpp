// A step watchdog: a thread that aborts the job when this rank's phase has not changed for a
// configured time (a hung collective, a dead peer the transport does not notice), after
// printing what the rank was doing, so a hang becomes an error message instead of a lost
// allocation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/timer.hpp"

namespace trident {

class Watchdog {
 public:
  // Watches `timer` (its phase changes are the heartbeat); `where` describes the rank's
  // position (step) for the message. timeout_seconds <= 0: no thread, nothing watched.
  Watchdog(const PhaseTimer& timer, double timeout_seconds, int rank,
           std::function<int()> current_step);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch();
  const PhaseTimer& timer_;
  double timeout_;
  int rank_;
  std::function<int()> step_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trident
