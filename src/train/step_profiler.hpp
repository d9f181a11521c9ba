// `trident train --profile-step K`: every kernel launch, library call and copy of step K timed by
// label (core/launch_profiler.hpp), and the table rank 0 writes into the run directory.
#pragma once

#include <string>
#include <vector>

#include "core/launch_profiler.hpp"
#include "train/faults.hpp"

namespace trident {

// Wraps the run's other StepHooks (forwarding every event), profiles step `step` (1-based) and
// keeps every other step's wall time, so that the kernels' time can be set against a step that
// was not profiled (Kokkos fences the device around each kernel while a tool listens).
class StepProfiler final : public StepHooks {
 public:
  StepProfiler(StepHooks* inner, int step);

  void step_begins(int step, PhaseTimer& timer) override;
  void step_ends(int step) override;
  void gradients_final(int step, const View1& gradients) override;
  void checkpoint_midway(int step) override;

  bool profiled() const { return profiled_; }
  // The median wall time of the steps not profiled (0: none ran), and the profiled one's.
  double other_step_seconds() const;
  double profiled_step_seconds() const { return profiled_seconds_; }
  // Kernel and library time over the other steps' median wall time: the share of a step the
  // device (or the host's threads) spends in launches; 0 when no other step ran.
  double busy_percent() const;
  const LaunchProfiler& launches() const { return profiler_; }

  // Tab-separated, one row per label, the longest first, after '#' lines naming the step:
  // label, kind, calls, total_ms, mean_us, then gflop and tflops (library calls that say their
  // FLOPs) and gbs (copies).
  std::string table() const;
  // "PROFILE step=K launches=N labels=L launch_ms=... gemm_gflop=... step_ms=...
  // profiled_step_ms=... busy_percent=...": step_ms is the other steps' median, from the step's
  // start to its updated parameters (no checkpoint, validation or logging).
  std::string summary_line() const;

 private:
  StepHooks* inner_;
  int step_;
  LaunchProfiler profiler_;
  bool profiled_ = false;
  double started_ = 0, profiled_seconds_ = 0;
  std::vector<double> other_seconds_;
};

}  // namespace trident
