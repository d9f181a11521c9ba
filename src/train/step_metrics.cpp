// Step metrics: gathers, timings rows, console lines.
#include "train/step_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trident {

namespace {
// Steps in a straggler score's window, how many it needs before it judges (fewer: NaN), and the
// steps of a run (or resumed segment) it leaves out first: their compute differs from rank to rank
// by 2-3x here (first touches of memory, the allocator, the scheduler placing ranks).
constexpr int kStragglerWindow = 20, kStragglerMinSteps = 5, kStragglerWarmup = 3;
}  // namespace

void Console::line(const std::string& text) const {
  if (!enabled_) return;
  std::fputs((text + "\n").c_str(), stdout);
  std::fflush(stdout);
}

StepMetrics::StepMetrics(const RunShape& shape, const HostCollectives& world,
                         const MemoryLedger& ledger, std::unique_ptr<TimingsWriter> timings,
                         const Console& console)
    : shape_(shape),
      world_(world),
      ledger_(ledger),
      timings_(std::move(timings)),
      console_(console),
      stragglers_(shape.sections, kStragglerWindow) {}

double StepMetrics::mfu_percent(double tokens_per_second) const {
  return 100.0 * shape_.flops_per_token * tokens_per_second /
         (world_.size() * shape_.peak_tflops * 1e12);
}

void StepMetrics::record(const StepOutcome& s) {
  const std::vector<double> phases = world_.gather({s.phases.begin(), s.phases.end()});
  const std::vector<double> peak_mem = world_.gather({static_cast<double>(ledger_.peak_total())});
  std::vector<double> categories(kMemCategories);
  for (int cat = 0; cat < kMemCategories; ++cat)
    categories[cat] = static_cast<double>(ledger_.peak(static_cast<MemCategory>(cat)));
  const std::vector<double> peak_by_category = world_.gather(categories);
  const std::vector<double> cp_bytes = world_.gather({s.cp_bytes});
  const std::vector<double> compute = world_.gather({s.compute_seconds});
  const double slowest = world_.max(s.seconds), fastest = world_.min(s.seconds);
  const double checkpoint = world_.max(s.checkpoint_seconds);  // the slowest rank's
  checkpoint_s_ += checkpoint;
  checkpoint_background_s_ += s.checkpoint_background_seconds;
  if (s.checkpoint_saved) ++checkpoints_;
  last_loss_ = s.loss;
  last_val_loss_ = s.val_loss;
  if (s.skipped) ++skipped_steps_;
  ++recorded_steps_;
  if (!timings_) return;  // rank 0 writes and prints
  // Pipeline bubble: the share of the step the average rank spent waiting on pp.
  double wait = 0;
  for (int rank = 0; rank < world_.size(); ++rank)
    wait += phases[static_cast<size_t>(rank) * kPhases + static_cast<int>(Phase::kPpWait)];
  const double bubble = slowest > 0 ? wait / world_.size() / slowest : 0.0;
  std::vector<double> scores(static_cast<size_t>(world_.size()), NAN);
  if (++scored_steps_ > kStragglerWarmup) {
    scores = stragglers_.add(compute);
    if (scored_steps_ < kStragglerWarmup + kStragglerMinSteps)
      std::fill(scores.begin(), scores.end(), NAN);
  }
  StepRecord row;
  row.step = s.step;
  row.loss = s.loss;
  row.val_loss = s.val_loss;
  row.lr = s.lr;
  row.grad_norm = s.grad_norm;
  row.loss_scale = s.loss_scale;
  row.skipped = s.skipped ? 1 : 0;
  row.tokens = shape_.tokens_per_step;
  row.step_seconds_max = slowest;
  row.step_seconds_min = fastest;
  row.bubble = bubble;
  row.moe_aux_loss = s.moe_aux_loss;
  row.moe_z_loss = s.moe_z_loss;
  row.moe_dropped_fraction = s.moe_dropped_fraction;
  row.moe_layers = s.moe_layers;
  row.phase_seconds = phases;
  row.peak_mem_bytes = peak_mem;
  row.peak_mem_by_category = peak_by_category;
  row.cp_bytes = cp_bytes;
  row.straggler_score = scores;
  row.step_end_unix = s.end_unix;
  row.checkpoint_seconds = checkpoint;
  row.checkpoint_background_seconds = s.checkpoint_background_seconds;
  row.checkpoint_saved = s.checkpoint_saved ? 1 : 0;
  timings_->append(row);
  const int index = s.step - 1;  // the first step of a run warms caches and is not timed
  if (index > shape_.start_step || shape_.steps - shape_.start_step == 1) {
    sum_ms_ += slowest * 1e3;
    ++timed_steps_;
  }
  print_step(s, slowest, fastest, checkpoint, s.checkpoint_background_seconds, peak_mem, scores);
}

void StepMetrics::print_step(const StepOutcome& s, double slowest, double fastest,
                             double checkpoint, double background,
                             const std::vector<double>& peak_mem,
                             const std::vector<double>& scores) const {
  const double tok_s = shape_.tokens_per_step / slowest;
  // Ranks computing slower than kStragglerScore x the fastest of their stage, named every step.
  std::string slow;
  for (size_t r = 0; r < scores.size(); ++r)
    if (scores[r] < kStragglerScore)
      slow += fmt::format("{}rank {} {:.2f}", slow.empty() ? " | slow: " : ", ", r, scores[r]);
  // A checkpoint written or started after the step: its seconds apart from the step's; an
  // asynchronous one's background seconds once it is complete.
  std::string wrote = s.checkpoint_saved ? fmt::format(" | ckpt {:.3f} s", checkpoint) : "";
  if (background > 0)
    wrote += fmt::format(" | ckpt written in {:.3f} s behind the steps", background);
  if (s.step % shape_.log_every == 0 || s.step == shape_.steps || !slow.empty() || background > 0)
    console_.line(fmt::format(
        "step {:>5}/{} | loss {:.4f} | lr {:.3e} | norm {:.4f} | {:.1f} ms (min {:.1f}) | {:.0f} "
        "tok/s | MFU {:.2f}% | peak mem {:.1f} MiB{}{}",
        s.step, shape_.steps, s.loss, s.lr, s.grad_norm, slowest * 1e3, fastest * 1e3, tok_s,
        mfu_percent(tok_s), *std::max_element(peak_mem.begin(), peak_mem.end()) / 1048576.0, wrote,
        slow));
  if (s.moe && (s.step % shape_.log_every == 0 || s.step == shape_.steps)) {
    // The most loaded expert against the mean, in the layer where that is worst.
    const MoeLayerBalance& b = s.moe_layers;
    const size_t layers = b.layers.size();
    const size_t E = layers > 0 ? b.tokens_per_expert.size() / layers : 0;
    double worst = 0;
    int worst_layer = -1;
    for (size_t l = 0; l < layers && E > 0; ++l) {
      const double* t = b.tokens_per_expert.data() + l * E;
      double sum = 0, most = 0;
      for (size_t e = 0; e < E; ++e) sum += t[e], most = std::max(most, t[e]);
      const double ratio = sum > 0 ? most * static_cast<double>(E) / sum : 0;
      if (ratio > worst) worst = ratio, worst_layer = b.layers[l];
    }
    console_.line(
        fmt::format("moe   {:>5}/{} | aux {:.4f} | z {:.4f} | dropped {:.2f}% | load max/mean "
                    "{:.2f} (layer {})",
                    s.step, shape_.steps, s.moe_aux_loss, s.moe_z_loss,
                    100 * s.moe_dropped_fraction, worst, worst_layer));
  }
  if (!std::isnan(s.val_loss))
    console_.line(
        fmt::format("eval  {:>5}/{} | val loss {:.4f}", s.step, shape_.steps, s.val_loss));
}

void StepMetrics::summarise(const std::string& last_checkpoint) const {
  if (!timings_) return;
  const double ms = timed_steps_ ? sum_ms_ / timed_steps_ : 0.0;
  const double tok_s = ms > 0 ? shape_.tokens_per_step / (ms / 1e3) : 0.0;
  console_.line(fmt::format("checkpoint: {}", last_checkpoint.empty() ? "none" : last_checkpoint));
  console_.line(fmt::format(
      "PERFORMANCE steps={} ranks={} layout=\"{}\" ms_per_step={:.2f} tokens_per_s={:.1f} "
      "mfu_percent={:.3f} final_loss={:.6f} val_loss={:.6f} peak_mem_mib={:.1f} skipped_steps={} "
      "checkpoints={} checkpoint_s={:.3f} checkpoint_background_s={:.3f}",
      recorded_steps_, world_.size(), shape_.layout, ms, tok_s, mfu_percent(tok_s), last_loss_,
      last_val_loss_, ledger_.peak_total() / 1048576.0, skipped_steps_, checkpoints_, checkpoint_s_,
      checkpoint_background_s_));
}

}  // namespace trident
