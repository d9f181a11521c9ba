// StepAllocations: Kokkos Tools allocation events charged to the training step they fall in.
#include "train/step_allocations.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <stdexcept>

namespace trident {
namespace {

StepAllocations* active = nullptr;
Kokkos::Tools::Experimental::EventSet previous;  // a loaded Kokkos Tools library's callbacks

void on_allocate(const Kokkos_Profiling_SpaceHandle space, const char* label, const void* ptr,
                 const uint64_t bytes) {
  if (previous.allocate_data) previous.allocate_data(space, label, ptr, bytes);
  if (active) active->on_event(space.name, label, bytes, true);
}

void on_deallocate(const Kokkos_Profiling_SpaceHandle space, const char* label, const void* ptr,
                   const uint64_t bytes) {
  if (previous.deallocate_data) previous.deallocate_data(space, label, ptr, bytes);
  if (active) active->on_event(space.name, label, bytes, false);
}

}  // namespace

StepAllocations::StepAllocations(StepHooks* inner) : inner_(inner) {
  if (active) throw std::logic_error("one StepAllocations at a time: Kokkos has one callback");
  active = this;
  previous = Kokkos::Tools::Experimental::get_callbacks();
  Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
}

StepAllocations::~StepAllocations() {
  Kokkos::Tools::Experimental::set_allocate_data_callback(previous.allocate_data);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(previous.deallocate_data);
  active = nullptr;
}

void StepAllocations::on_event(const char* space, const char* label, uint64_t bytes,
                               bool allocated) {
  if (!inside_) return;
  if (allocated) {
    ++current_.allocations;
    current_.bytes += bytes;
  } else {
    ++current_.frees;
  }
  ++current_.what[fmt::format("{}{} ({})", allocated ? "" : "free ", label ? label : "?", space)];
}

void StepAllocations::step_begins(int step, PhaseTimer& timer) {
  if (counted_++ == 0) first_step_ = step;
  current_ = StepRecord{};
  current_.step = step;
  inside_ = true;
  if (inner_) inner_->step_begins(step, timer);
}

void StepAllocations::step_ends(int step) {
  if (inner_) inner_->step_ends(step);
  inside_ = false;
  if (current_.allocations > 0 || current_.frees > 0) steps_.push_back(current_);
}

void StepAllocations::gradients_final(int step, const View1& gradients) {
  if (inner_) inner_->gradients_final(step, gradients);
}

void StepAllocations::checkpoint_midway(int step) {
  if (inner_) inner_->checkpoint_midway(step);
}

std::string StepAllocations::report(int rank, int detail) const {
  int64_t warmup_allocations = 0, allocations = 0, frees = 0;
  uint64_t bytes = 0;
  std::string lines;
  int shown = 0;
  for (const StepRecord& r : steps_) {
    if (r.step < first_step_ + kWarmupSteps) {
      warmup_allocations += r.allocations;
      continue;
    }
    allocations += r.allocations;
    frees += r.frees;
    bytes += r.bytes;
    if (shown++ >= detail) continue;
    std::string what;
    for (const auto& [name, count] : r.what)
      what += fmt::format("{}{} x{}", what.empty() ? "" : ", ", name, count);
    lines += fmt::format(
        "STEP_ALLOCATION rank={} step={} allocations={} frees={} bytes={} what=\"{}\"\n", rank,
        r.step, r.allocations, r.frees, r.bytes, what);
  }
  return fmt::format(
             "STEP_ALLOCATIONS rank={} steps={} first_step={} warmup_allocations={} "
             "allocations_after_warmup={} frees_after_warmup={} bytes_after_warmup={}\n",
             rank, counted_, first_step_, warmup_allocations, allocations, frees, bytes) +
         lines;
}

}  // namespace trident
