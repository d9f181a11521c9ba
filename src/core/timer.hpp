// Named phases of a training step and the per-rank timer that accumulates them.
#pragma once

#include <array>
#include <chrono>

namespace trident {

enum class Phase : int {
  kForward,
  kBackward,
  kRecompute,
  kTpComm,
  kPpWait,
  kDpComm,
  kOptimizer,
  kZeroGather,
  kIo,
  kCount
};
constexpr int kPhases = static_cast<int>(Phase::kCount);
constexpr std::array<const char*, kPhases> kPhaseNames = {"forward",   "backward",    "recompute",
                                                          "tp_comm",   "pp_wait",     "dp_comm",
                                                          "optimizer", "zero_gather", "io"};

// Seconds spent in each phase during the current step. Phases do not nest.
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void reset() { seconds_.fill(0.0); }
  void start(Phase p) {
    current_ = p;
    t0_ = Clock::now();
  }
  void stop() {
    seconds_[static_cast<int>(current_)] +=
        std::chrono::duration<double>(Clock::now() - t0_).count();
  }
  double seconds(Phase p) const { return seconds_[static_cast<int>(p)]; }
  const std::array<double, kPhases>& all() const { return seconds_; }

 private:
  std::array<double, kPhases> seconds_{};
  Phase current_ = Phase::kForward;
  Clock::time_point t0_;
};

// Times one phase for the lifetime of the scope.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimer& t, Phase p) : t_(t) { t_.start(p); }
  ~ScopedPhase() { t_.stop(); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimer& t_;
};

}  // namespace trident
