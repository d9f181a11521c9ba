// Named phases of a training step and the per-rank timer that accumulates them.
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <vector>

namespace trident {

// The CPU seconds of every thread of this process so far (about 0.6 us a read here).
inline double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

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
  kWeightGrad,  // zero-bubble schedules' deferred weight-gradient passes (fused ones: kBackward)
  kEpComm,      // expert parallelism's all-to-all exchanges of token rows
  kCpComm,      // context parallelism's waits on key/value chunks and their gradients
  kCount
};
constexpr int kPhases = static_cast<int>(Phase::kCount);
constexpr std::array<const char*, kPhases> kPhaseNames = {
    "forward",   "backward",    "recompute", "tp_comm",     "pp_wait", "dp_comm",
    "optimizer", "zero_gather", "io",        "weight_grad", "ep_comm", "cp_comm"};

// Seconds since the Unix epoch: when steps end, for goodput against the job's wall clock.
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
// When this process started, as unix_seconds(): the first call's time (main calls it first).
inline double process_start_unix() {
  static const double start = unix_seconds();
  return start;
}

// Seconds spent in each phase during the current step. Phases nest: entering tp_comm inside
// forward pauses forward, so each second is counted in exactly one phase.
class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;
  // Called at every phase change before the clock is read. On an asynchronous device the trainer
  // sets a fence, so that a phase's seconds are its own kernels' and not the next phase's (a
  // collective timed alone would otherwise be charged the compute queued before it).
  void set_settle(void (*settle)()) { settle_ = settle; }
  // Whether phase changes call the settle function (from the next change on).
  void set_settling(bool on) { settling_ = on; }
  void reset() {
    seconds_.fill(0.0);
    cpu_seconds_.fill(0.0);
  }
  void push(Phase p) {
    if (settle_ && settling_) settle_();
    const auto now = Clock::now();
    const double cpu = process_cpu();
    if (!stack_.empty()) add(stack_.back(), now, cpu);
    stack_.push_back(p);
    t0_ = now;
    cpu0_ = cpu;
    mark(now);
  }
  void pop() {
    if (settle_ && settling_) settle_();
    const auto now = Clock::now();
    const double cpu = process_cpu();
    add(stack_.back(), now, cpu);
    stack_.pop_back();
    t0_ = now;
    cpu0_ = cpu;
    mark(now);
  }
  // For a watchdog thread: the innermost phase (-1: none) and when the phase last changed.
  int current_phase() const { return current_.load(std::memory_order_relaxed); }
  Clock::time_point last_change() const {
    return Clock::time_point(Clock::duration(last_change_.load(std::memory_order_relaxed)));
  }
  const std::array<double, kPhases>& all() const { return seconds_; }
  // Whether the CPU clock is read: on the host, not where a settle function is set (a device,
  // whose work the host's CPU time does not show).
  bool counts_cpu() const { return settle_ == nullptr; }
  // The process's CPU seconds in each phase this step (0 where counts_cpu() is false).
  const std::array<double, kPhases>& cpu() const { return cpu_seconds_; }
  // The seconds of the compute phases (forward, backward, recompute, weight gradients,
  // optimizer): CPU seconds on the host, wall seconds on a device. What a rank's straggler score
  // compares: on the host, CPU time leaves out the time a rank waits for a core it shares.
  double compute_seconds() const {
    const auto& source = counts_cpu() ? cpu_seconds_ : seconds_;
    double sum = 0;
    for (const Phase p : {Phase::kForward, Phase::kBackward, Phase::kRecompute, Phase::kWeightGrad,
                          Phase::kOptimizer})
      sum += source[static_cast<int>(p)];
    return sum;
  }

 private:
  void mark(Clock::time_point now) {
    current_.store(stack_.empty() ? -1 : static_cast<int>(stack_.back()),
                   std::memory_order_relaxed);
    last_change_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }
  void add(Phase p, Clock::time_point now, double cpu) {
    seconds_[static_cast<int>(p)] += std::chrono::duration<double>(now - t0_).count();
    cpu_seconds_[static_cast<int>(p)] += cpu - cpu0_;
  }
  // The process's CPU clock, read on the host only.
  double process_cpu() const { return counts_cpu() ? process_cpu_seconds() : 0; }
  void (*settle_)() = nullptr;
  bool settling_ = true;
  std::array<double, kPhases> seconds_{}, cpu_seconds_{};
  std::vector<Phase> stack_;
  Clock::time_point t0_;
  double cpu0_ = 0;
  std::atomic<int> current_{-1};
  std::atomic<Clock::rep> last_change_{Clock::now().time_since_epoch().count()};
};

// Times one phase for the lifetime of the scope; a null timer times nothing.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimer* t, Phase p) : t_(t) {
    if (t_) t_->push(p);
  }
  ScopedPhase(PhaseTimer& t, Phase p) : ScopedPhase(&t, p) {}
  ~ScopedPhase() {
    if (t_) t_->pop();
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimer* t_;
};

}  // namespace trident
