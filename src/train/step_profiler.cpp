// StepProfiler: one step's launches by label, and the other steps' wall times to compare them with.
#include "train/step_profiler.hpp"

#include <Kokkos_Core.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "core/device.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/shapes.hpp"
#include "plan/planner.hpp"
#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cublas.hpp"
#else
#include "kernels/onednn.hpp"
#endif

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

void StepProfiler::predict(const Config& config) {
  LaunchTarget target;
  target.gpu = kernels::kBuildShape == kernels::Shape::kGpu;
#if defined(KOKKOS_ENABLE_CUDA)
  target.cublaslt_epilogues = kernels::cublaslt_epilogues();
  target.cudnn_attention = kernels::cudnn_attention_used();
#else
  target.half_widened = kernels::onednn::widened(config.precision.compute);
#endif
  StepLaunches launches;
  try {
    launches = predict_step_launches(memory_query(config), target);
  } catch (const InputError& e) {
    return set_no_prediction(e.what());
  }
  const DevicePreset* preset = target.gpu ? preset_for_device_name(device_name()) : nullptr;
  std::optional<Roofline> timed;
  try {
    if (preset) timed = time_launches(launches, datasheet_ceilings(*preset));
  } catch (const InputError&) {  // an fp32 GEMM on a device without an fp32 figure: calls only
  }
  set_prediction(std::move(launches), std::move(timed));
}

void StepProfiler::set_prediction(StepLaunches launches, std::optional<Roofline> timed) {
  predicted_ = std::move(launches);
  timed_ = std::move(timed);
  no_prediction_.clear();
}

std::vector<std::string> StepProfiler::mismatched_labels() const {
  std::vector<std::string> out;
  if (!predicted_) return out;
  std::map<std::string, int64_t> measured;
  for (const LaunchRow& row : profiler_.rows())
    if (row.kind != LaunchKind::kCopy) measured[row.label] += row.calls;
  std::map<std::string, int64_t> predicted;
  for (const PredictedLaunch& p : predicted_->rows()) predicted[p.label] += p.calls;
  for (const auto& [label, calls] : measured) {
    const auto p = predicted.find(label);
    const int64_t want = p == predicted.end() ? 0 : p->second;
    if (calls != want) out.push_back(fmt::format("{}: {} vs {}", label, calls, want));
  }
  for (const auto& [label, calls] : predicted)
    if (calls > 0 && measured.count(label) == 0)
      out.push_back(fmt::format("{}: 0 vs {}", label, calls));
  return out;
}

std::string StepProfiler::table() const {
  std::string out = fmt::format(
      "# trident --profile-step {}: every kernel launch, library call and copy of the step, by "
      "label\n# {}\n",
      step_, summary_line());
  if (predicted_)
    out += fmt::format("# predicted: the launch roofline (plan/roofline.hpp){}\n",
                       timed_ ? ", timed on the device's datasheet ceilings" : "; calls only");
  else if (!no_prediction_.empty())
    out += fmt::format("# no prediction: {}\n", no_prediction_);
  out +=
      "label\tkind\tcalls\ttotal_ms\tmean_us\tgflop\ttflops\tgbs\tpredicted_calls\tpredicted_"
      "ms\tratio\n";
  std::map<std::string, double> predicted_seconds;
  if (timed_)
    for (const RooflineRow& r : timed_->rows) predicted_seconds[r.launch.label] = r.seconds;
  std::set<std::string> listed;
  const auto prediction = [&](const std::string& label, LaunchKind kind, double seconds) {
    const PredictedLaunch* p =
        predicted_ && kind != LaunchKind::kCopy ? predicted_->find(label) : nullptr;
    if (!p) return std::string(predicted_ && kind != LaunchKind::kCopy ? "\t0\t\t" : "\t\t\t");
    listed.insert(label);
    const auto at = predicted_seconds.find(label);
    if (at == predicted_seconds.end()) return fmt::format("\t{}\t\t", p->calls);
    return fmt::format(
        "\t{}\t{:.4f}\t{}", p->calls, 1e3 * at->second,
        at->second > 0 && seconds > 0 ? fmt::format("{:.2f}", seconds / at->second) : "");
  };
  for (const LaunchRow& row : profiler_.rows()) {
    const double ms = 1e3 * row.seconds, mean_us = row.calls ? 1e6 * row.seconds / row.calls : 0;
    const std::string gflop = row.flops > 0 ? fmt::format("{:.9f}", row.flops / 1e9) : "";
    const std::string tflops = row.flops > 0 && row.seconds > 0
                                   ? fmt::format("{:.3f}", row.flops / row.seconds / 1e12)
                                   : "";
    const std::string gbs = row.bytes > 0 && row.seconds > 0
                                ? fmt::format("{:.3f}", row.bytes / row.seconds / 1e9)
                                : "";
    out += fmt::format("{}\t{}\t{}\t{:.4f}\t{:.2f}\t{}\t{}\t{}{}\n", row.label, name_of(row.kind),
                       row.calls, ms, mean_us, gflop, tflops, gbs,
                       prediction(row.label, row.kind, row.seconds));
  }
  if (predicted_)  // predicted, never launched
    for (const PredictedLaunch& p : predicted_->rows())
      if (listed.count(p.label) == 0) {
        const auto at = predicted_seconds.find(p.label);
        out += fmt::format(
            "{}\t{}\t0\t0.0000\t0.00\t\t\t\t{}\t{}\t\n", p.label, name_of(p.kind), p.calls,
            at == predicted_seconds.end() ? "" : fmt::format("{:.4f}", 1e3 * at->second));
      }
  return out;
}

std::string StepProfiler::summary_line() const {
  double flops = 0;
  for (const LaunchRow& row : profiler_.rows()) flops += row.flops;
  std::string line = fmt::format(
      "PROFILE step={} launches={} labels={} launch_ms={:.3f} gemm_gflop={:.3f} step_ms={:.3f} "
      "profiled_step_ms={:.3f} busy_percent={:.1f}",
      step_, profiler_.launches(), profiler_.rows().size(), 1e3 * profiler_.launch_seconds(),
      flops / 1e9, 1e3 * other_step_seconds(), 1e3 * profiled_seconds_, busy_percent());
  if (predicted_)
    line += fmt::format(" predicted_launches={} mismatched_labels={}", predicted_->launches(),
                        mismatched_labels().size());
  if (timed_) line += fmt::format(" predicted_ms={:.3f}", 1e3 * timed_->step_seconds());
  return line;
}

}  // namespace trident
