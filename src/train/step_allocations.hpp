// Counts what Kokkos allocates and frees inside training steps (`trident train
// --report-allocations`): after the first step a step should do neither.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/faults.hpp"

namespace trident {

// Wraps the run's other StepHooks (forwarding every event) and, while it lives, listens to
// Kokkos' allocation events through Kokkos Tools, chaining to a Kokkos Tools library's own
// callbacks when one is loaded. Allocations between step_begins and step_ends are charged to that
// step; checkpoints, validation and logging lie outside. On a GPU a View allocated in the step
// is a cudaMalloc, and freeing it a cudaFree, which waits for the whole device.
class StepAllocations final : public StepHooks {
 public:
  explicit StepAllocations(StepHooks* inner);
  ~StepAllocations() override;
  StepAllocations(const StepAllocations&) = delete;
  StepAllocations& operator=(const StepAllocations&) = delete;

  void step_begins(int step, PhaseTimer& timer) override;
  void step_ends(int step) override;
  void gradients_final(int step, const View1& gradients) override;
  void checkpoint_midway(int step) override;
  bool fences_phases(int step) const override { return inner_ && inner_->fences_phases(step); }

  struct StepRecord {
    int step = 0;
    int64_t allocations = 0, frees = 0;
    uint64_t bytes = 0;               // allocated
    std::map<std::string, int> what;  // "label (space)" -> allocations and frees of it
  };
  // Every step that allocated or freed something, in step order.
  const std::vector<StepRecord>& steps() const { return steps_; }
  // The steps counted (step_begins seen) and the first of them.
  int steps_counted() const { return counted_; }
  int first_step() const { return first_step_; }
  // The first steps of a run may allocate: Kokkos grows its reduction scratch when a reduction
  // first needs more, and asynchronous data parallelism first updates in its second step.
  static constexpr int kWarmupSteps = 2;
  // Lines for the console: "STEP_ALLOCATIONS rank=R steps=N first_step=S warmup_allocations=W
  // allocations_after_warmup=A frees_after_warmup=F bytes_after_warmup=B", then one
  // "STEP_ALLOCATION rank=R step=S ..." per later step that allocated or freed, naming what (at
  // most `detail` steps).
  std::string report(int rank, int detail = 5) const;

  // Kokkos Tools callbacks (C function pointers, so static).
  void on_event(const char* space, const char* label, uint64_t bytes, bool allocated);

 private:
  StepHooks* inner_;
  bool inside_ = false;
  int counted_ = 0, first_step_ = 0;
  StepRecord current_;
  std::vector<StepRecord> steps_;
};

}  // namespace trident
