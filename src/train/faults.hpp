// The test seam of a training run: the step loop announces a few events to a StepHooks object,
// and `trident train --inject-fault / --inject-overflow` installs one that breaks things on
// purpose there (a killed or hung rank, a kill mid-checkpoint, an fp16 overflow), so tests can
// exercise failure handling without any test code in the step itself.
#pragma once

#include <string>

#include "core/timer.hpp"
#include "core/types.hpp"

namespace trident {

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // A step (1-based) begins; `timer` shows what the rank is doing to the watchdog.
  virtual void step_begins(int step, PhaseTimer& timer) {
    (void)step;
    (void)timer;
  }
  // The step's training work is done: the optimizer has stepped and every replica holds the
  // updated parameters. A checkpoint, validation and the log line follow.
  virtual void step_ends(int step) { (void)step; }
  // The step's gradients are final (reduced over dp), before the fp16 overflow check reads them.
  virtual void gradients_final(int step, const View1& gradients) {
    (void)step;
    (void)gradients;
  }
  // A checkpoint of `step` is half written (its first dataset is on disk).
  virtual void checkpoint_midway(int step) { (void)step; }
  // Whether `step` must fence the device at each phase change whatever run.phase_fences says
  // (a profiled step: its phases are timed like its kernels).
  virtual bool fences_phases(int step) const {
    (void)step;
    return false;
  }
};

enum class FaultKind { kNone, kKill, kHang, kKillInCheckpoint, kHangInComm, kSlow };

// What --inject-fault KIND:STEP:RANK[:AXIS[:OP]] and --inject-overflow STEP:RANK ask for.
struct FaultPlan {
  FaultKind fault = FaultKind::kNone;
  int fault_step = 0, fault_rank = 0;
  // hang-comm: the rank stops before issuing, in that step, the first operation on this axis
  // ("tp", "dp", "pp", "cp", "ep", "world", ...) whose name contains `op` ("": any).
  std::string fault_axis, fault_op;
  // slow: from fault_step on, the rank's compute takes this many times as long.
  double slow_factor = 1;
  int overflow_step = 0, overflow_rank = 0;  // overflow_step 0: none
};

// Parses "kill:3:1", "hang-comm:3:1:tp:allreduce" or "slow:3:1:2" into plan (false: not
// KIND:STEP:RANK with a known KIND, AXIS[:OP] after it for hang-comm alone, FACTOR >= 1 for slow).
bool parse_fault(const std::string& text, FaultPlan& plan);
// Parses "3:1" into plan's overflow fields.
bool parse_overflow(const std::string& text, FaultPlan& plan);

// The faults of `plan` that fall on rank `rank`.
class InjectedFaults final : public StepHooks {
 public:
  // Arms the flight recorder's hang for hang-comm on its rank.
  InjectedFaults(const FaultPlan& plan, int rank);
  void step_begins(int step, PhaseTimer& timer) override;
  void step_ends(int step) override;
  void gradients_final(int step, const View1& gradients) override;
  void checkpoint_midway(int step) override;

 private:
  bool fault_here(FaultKind kind, int step) const {
    return plan_.fault == kind && step == plan_.fault_step && rank_ == plan_.fault_rank;
  }
  FaultPlan plan_;
  int rank_;
  PhaseTimer* timer_ = nullptr;  // the step's, from step_begins
};

}  // namespace trident
