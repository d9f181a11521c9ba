// StepProfiler: one step's launches by label, and the other steps' wall times to compare them with.
#include "train/step_profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace trident {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StepProfiler::StepProfiler(StepHooks* inner, int step) : inner_(inner), step_(step) {}

void StepProfiler::step_begins(int step, PhaseTimer& timer) {
  if (inner_) inner_->step_begins(step, timer);
  if (step == step_) profiler_.start();
  started_ = now_seconds();
}

void StepProfiler::step_ends(int step) {
  const double seconds = now_seconds() - started_;
  if (step == step_) {
    profiler_.stop();
    profiled_ = true;
    profiled_seconds_ = seconds;
  } else {
    other_seconds_.push_back(seconds);
  }
  if (inner_) inner_->step_ends(step);
}

void StepProfiler::gradients_final(int step, const View1& gradients) {
  if (inner_) inner_->gradients_final(step, gradients);
}

void StepProfiler::checkpoint_midway(int step) {
  if (inner_) inner_->checkpoint_midway(step);
}

double StepProfiler::other_step_seconds() const {
  if (other_seconds_.empty()) return 0;
  std::vector<double> sorted = other_seconds_;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double StepProfiler::busy_percent() const {
  const double other = other_step_seconds();
  return other > 0 ? 100.0 * profiler_.launch_seconds() / other : 0.0;
}

std::string StepProfiler::table() const {
  std::string out = fmt::format(
      "# trident --profile-step {}: every kernel launch, library call and copy of the step, by "
      "label\n# {}\n",
      step_, summary_line());
  out += "label\tkind\tcalls\ttotal_ms\tmean_us\tgflop\ttflops\tgbs\n";
  for (const LaunchRow& row : profiler_.rows()) {
    const double ms = 1e3 * row.seconds, mean_us = row.calls ? 1e6 * row.seconds / row.calls : 0;
    const std::string gflop = row.flops > 0 ? fmt::format("{:.9f}", row.flops / 1e9) : "";
    const std::string tflops = row.flops > 0 && row.seconds > 0
                                   ? fmt::format("{:.3f}", row.flops / row.seconds / 1e12)
                                   : "";
    const std::string gbs = row.bytes > 0 && row.seconds > 0
                                ? fmt::format("{:.3f}", row.bytes / row.seconds / 1e9)
                                : "";
    out += fmt::format("{}\t{}\t{}\t{:.4f}\t{:.2f}\t{}\t{}\t{}\n", row.label, name_of(row.kind),
                       row.calls, ms, mean_us, gflop, tflops, gbs);
  }
  return out;
}

std::string StepProfiler::summary_line() const {
  double flops = 0;
  for (const LaunchRow& row : profiler_.rows()) flops += row.flops;
  return fmt::format(
      "PROFILE step={} launches={} labels={} launch_ms={:.3f} gemm_gflop={:.3f} step_ms={:.3f} "
      "profiled_step_ms={:.3f} busy_percent={:.1f}",
      step_, profiler_.launches(), profiler_.rows().size(), 1e3 * profiler_.launch_seconds(),
      flops / 1e9, 1e3 * other_step_seconds(), 1e3 * profiled_seconds_, busy_percent());
}

}  // namespace trident
