// Injected faults for tests: SIGKILL, an endless phase, an infinite gradient element.
#include "train/faults.hpp"

#include "core/flight_recorder.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <limits>
#include <stdexcept>

namespace trident {
namespace {

// "a:b" -> a, b; false when malformed.
bool parse_pair(const std::string& text, int& a, int& b) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  try {
    size_t used = 0;
    a = std::stoi(text.substr(0, colon), &used);
    if (used != colon) return false;
    b = std::stoi(text.substr(colon + 1), &used);
    return used == text.size() - colon - 1;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

bool parse_fault(const std::string& text, FaultPlan& plan) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  FaultKind parsed = FaultKind::kNone;
  if (kind == "kill")
    parsed = FaultKind::kKill;
  else if (kind == "hang")
    parsed = FaultKind::kHang;
  else if (kind == "kill-in-checkpoint")
    parsed = FaultKind::kKillInCheckpoint;
  else if (kind == "hang-comm")
    parsed = FaultKind::kHangInComm;
  else if (kind == "slow")
    parsed = FaultKind::kSlow;
  if (parsed == FaultKind::kNone || colon == std::string::npos) return false;
  std::string rest = text.substr(colon + 1);
  if (parsed == FaultKind::kHangInComm) {  // STEP:RANK:AXIS[:OP]
    const auto second = rest.find(':', rest.find(':') + 1);
    if (rest.find(':') == std::string::npos || second == std::string::npos) return false;
    const std::string where = rest.substr(second + 1);
    const auto op = where.find(':');
    plan.fault_axis = where.substr(0, op);
    plan.fault_op = op == std::string::npos ? "" : where.substr(op + 1);
    if (plan.fault_axis.empty()) return false;
    rest = rest.substr(0, second);
  }
  if (parsed == FaultKind::kSlow) {  // STEP:RANK:FACTOR
    const auto last = rest.rfind(':');
    if (last == std::string::npos || rest.find(':') == last) return false;
    try {
      size_t used = 0;
      plan.slow_factor = std::stod(rest.substr(last + 1), &used);
      if (used != rest.size() - last - 1 || !(plan.slow_factor >= 1 && plan.slow_factor <= 100))
        return false;
    } catch (const std::exception&) {
      return false;
    }
    rest = rest.substr(0, last);
  }
  if (!parse_pair(rest, plan.fault_step, plan.fault_rank)) return false;
  plan.fault = parsed;
  return true;
}

bool parse_overflow(const std::string& text, FaultPlan& plan) {
  return parse_pair(text, plan.overflow_step, plan.overflow_rank);
}

InjectedFaults::InjectedFaults(const FaultPlan& plan, int rank) : plan_(plan), rank_(rank) {
  if (plan.fault == FaultKind::kHangInComm && rank == plan.fault_rank)
    FlightRecorder::instance().hang_before(plan.fault_axis, plan.fault_op, plan.fault_step);
}

void InjectedFaults::step_begins(int step, PhaseTimer& timer) {
  timer_ = &timer;
  if (fault_here(FaultKind::kKill, step)) std::raise(SIGKILL);
  if (fault_here(FaultKind::kHang, step)) {
    ScopedPhase phase(timer, Phase::kForward);
    for (;;) sleep(1);  // the others block in their first collective with this rank
  }
}

void InjectedFaults::step_ends(int step) {
  if (plan_.fault != FaultKind::kSlow || rank_ != plan_.fault_rank || step < plan_.fault_step ||
      !timer_)
    return;
  // The step's compute so far, once more (factor - 1) times, as forward work that keeps the CPU
  // busy (what straggler scores measure on the host): a slower node.
  const double extra = timer_->compute_seconds() * (plan_.slow_factor - 1);
  ScopedPhase phase(*timer_, Phase::kForward);
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  auto spent = [&] {
    return timer_->counts_cpu()
               ? process_cpu_seconds() - cpu_start
               : std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start)
                     .count();
  };
  volatile double sink = 0;
  while (spent() < extra) sink = sink + 1;
}

void InjectedFaults::gradients_final(int step, const View1& gradients) {
  if (step != plan_.overflow_step || rank_ != plan_.overflow_rank) return;
  Kokkos::deep_copy(Kokkos::subview(gradients, 0), std::numeric_limits<float>::infinity());
}

void InjectedFaults::checkpoint_midway(int step) {
  if (fault_here(FaultKind::kKillInCheckpoint, step)) std::raise(SIGKILL);
}

}  // namespace trident
