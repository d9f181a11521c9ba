// `trident train --profile-step K`: every kernel launch, library call and copy of step K timed by
// label (core/launch_profiler.hpp), and the table rank 0 writes into the run directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/launch_profiler.hpp"
#include "plan/roofline.hpp"
#include "train/faults.hpp"

namespace trident {

struct Config;

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
  bool fences_phases(int step) const override {
    return step == step_ || (inner_ && inner_->fences_phases(step));
  }

  // The launch roofline's prediction of this step (plan/roofline.hpp): the table gains each
  // label's predicted calls and, with `timed` (a GPU with a preset), its predicted time and the
  // measured over predicted ratio. Labels predicted but not launched are listed with 0 calls.
  void set_prediction(StepLaunches launches, std::optional<Roofline> timed);
  // Why this step has no prediction (a layout the roofline does not predict), for the table.
  void set_no_prediction(std::string why) { no_prediction_ = std::move(why); }
  // The prediction for a run of `config` by this build on this device: calls for this build's
  // kernels, timed where the device has a preset (GPU builds); or why there is none.
  void predict(const Config& config);

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
  // FLOPs), gbs (copies), predicted_calls, predicted_ms and ratio (measured / predicted ms).
  std::string table() const;
  // "PROFILE step=K launches=N labels=L launch_ms=... gemm_gflop=... step_ms=...
  // profiled_step_ms=... busy_percent=..." and, with a prediction, "predicted_launches=...
  // mismatched_labels=..." (labels whose calls differ from the prediction; copies are not
  // predicted) and, timed, "predicted_ms=...": step_ms is the other steps' median, from the
  // step's start to its updated parameters (no checkpoint, validation or logging).
  std::string summary_line() const;
  // The labels whose calls differ from the prediction, "label: measured vs predicted".
  std::vector<std::string> mismatched_labels() const;

 private:
  StepHooks* inner_;
  int step_;
  LaunchProfiler profiler_;
  bool profiled_ = false;
  double started_ = 0, profiled_seconds_ = 0;
  std::vector<double> other_seconds_;
  std::optional<StepLaunches> predicted_;
  std::optional<Roofline> timed_;
  std::string no_prediction_;
};

}  // namespace trident
