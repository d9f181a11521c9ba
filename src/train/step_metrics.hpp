// What a run reports about its steps: every rank's phase times and peak memory gathered to rank
// 0, a row of timings.h5 per step, the console's step and eval lines, and the final PERFORMANCE
// line (its fields are fixed: scripts grep them).
#pragma once

#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/host_comm.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "io/timings.hpp"
#include "train/straggler_scores.hpp"

namespace trident {

// Prints on rank 0 only, flushed at once (a killed job keeps every line).
class Console {
 public:
  explicit Console(bool enabled) : enabled_(enabled) {}
  void line(const std::string& text) const;

 private:
  bool enabled_;
};

// One step as this rank saw it.
struct StepOutcome {
  int step = 0;  // 1-based
  double loss = 0, val_loss = 0, lr = 0, grad_norm = 0, loss_scale = 1;
  bool skipped = false;  // no update (fp16 overflow)
  // Mixture of Experts: the mean over MoE blocks and micro-batches of the aux and z losses, and
  // the share of routed slots the capacity dropped (0 for a dense model).
  double moe_aux_loss = 0, moe_z_loss = 0, moe_dropped_fraction = 0;
  bool moe = false;
  MoeLayerBalance moe_layers;  // the same per MoE layer, with tokens per expert
  double seconds = 0;          // wall time of the step, evaluation and checkpoint excluded
  // What the training thread spent on checkpoints after it: writing one (synchronous), copying
  // one to host memory and creating its file (asynchronous), or committing an asynchronous one.
  double checkpoint_seconds = 0;
  bool checkpoint_saved = false;  // a checkpoint of this step was written or started
  // The slowest rank's seconds of an asynchronous write committed after this step (0: none).
  double checkpoint_background_seconds = 0;
  double end_unix = 0;  // when it ended (unix_seconds)
  std::array<double, kPhases> phases{};
  double compute_seconds = 0;  // PhaseTimer::compute_seconds(): what straggler scores compare
  double cp_bytes = 0;         // this rank's context-parallel bytes sent in the step
};

struct RunShape {
  int steps = 0, start_step = 0, log_every = 1;
  int64_t tokens_per_step = 0;
  double flops_per_token = 0, peak_tflops = 1;  // MFU = FLOP/s / (ranks x peak)
  std::string layout;
  std::vector<int> sections;  // each rank's pipeline stage: the ranks straggler scores compare
};

class StepMetrics {
 public:
  // `timings` is rank 0's writer (null elsewhere).
  StepMetrics(const RunShape& shape, const HostCollectives& world, const MemoryLedger& ledger,
              std::unique_ptr<TimingsWriter> timings, const Console& console);
  // Collective: gathers the step to rank 0, appends its row, prints its lines.
  void record(const StepOutcome& s);
  // Rank 0: the checkpoint written last and the PERFORMANCE line.
  void summarise(const std::string& last_checkpoint) const;

 private:
  void print_step(const StepOutcome& s, double slowest, double fastest, double checkpoint,
                  double background, const std::vector<double>& peak_mem,
                  const std::vector<double>& scores) const;
  double mfu_percent(double tokens_per_second) const;
  RunShape shape_;
  const HostCollectives& world_;
  const MemoryLedger& ledger_;
  std::unique_ptr<TimingsWriter> timings_;
  const Console& console_;
  StragglerScores stragglers_;
  int scored_steps_ = 0;  // steps recorded since this segment started
  double sum_ms_ = 0, checkpoint_s_ = 0, checkpoint_background_s_ = 0;
  int checkpoints_ = 0;
  int timed_steps_ = 0, skipped_steps_ = 0, recorded_steps_ = 0;
  double last_loss_ = 0, last_val_loss_ = NAN;  // NAN: no step ran
};

}  // namespace trident
