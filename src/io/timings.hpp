// runs/<name>/timings.h5 (and timings.<k>.h5 for resumed segments): per-step, per-rank phase
// seconds and step metrics, flushed each row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "io/hdf5.hpp"

namespace trident {

// A step's Mixture-of-Experts balance per MoE layer, in layer order: aux and z losses (means over
// the layer's forwards), the share of its slots dropped, and the slots routed to each of its
// experts (before capacity) summed over the step's micro-batches and data-parallel replicas.
struct MoeLayerBalance {
  std::vector<int> layers;  // their global indices (the file's `moe_layers` attribute)
  std::vector<double> aux_loss, z_loss, dropped_fraction;  // [moe layers]
  std::vector<double> tokens_per_expert;                   // [moe layers * E]
  std::vector<float> expert_bias;  // [moe layers * E] the selection bias after the step
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, val_loss = 0, lr = 0, grad_norm = 0;
  double loss_scale = 1;  // fp16 dynamic loss scale used by this step
  int64_t skipped = 0;    // 1 when the step made no update (fp16 overflow)
  int64_t tokens = 0;
  double step_seconds_max = 0, step_seconds_min = 0;  // checkpoint writes excluded
  double bubble = 0;  // mean share of the step ranks spent waiting on the pipeline
  // Mixture of Experts (0 for a dense model): the mean aux and z losses over MoE blocks and
  // micro-batches, and the share of routed slots the capacity dropped.
  double moe_aux_loss = 0, moe_z_loss = 0, moe_dropped_fraction = 0;
  MoeLayerBalance moe_layers;                // written when the file was opened with MoE layers
  std::vector<double> phase_seconds;         // [ranks * phases]
  std::vector<double> peak_mem_bytes;        // [ranks]
  std::vector<double> peak_mem_by_category;  // [ranks * memory categories]
  std::vector<double> cp_bytes;  // [ranks] keys, values and their gradients sent over cp
  // [ranks] compute speed against the fastest rank of the stage (train/straggler_scores.hpp);
  // NaN while too few steps are in the window
  std::vector<double> straggler_score;
  double step_end_unix = 0;  // when the step ended on rank 0, seconds since 1970
  // The slowest rank's seconds on checkpoints after it (StepOutcome::checkpoint_seconds), and an
  // asynchronous write's background seconds in the row of the step after which it committed.
  double checkpoint_seconds = 0, checkpoint_background_seconds = 0;
  int64_t checkpoint_saved = 0;  // 1: a checkpoint of this step was written (or started)
};

// Which part of a run a timings file holds: a run resumed k - 1 times has k segments, each in its
// own file (timings.h5, timings.2.h5, ...), starting after `start_step` steps.
struct TimingsSegment {
  int number = 1;
  int start_step = 0;
};

// A file attribute: text, a count or a measurement (numbers are stored as HDF5 numbers).
using TimingsAttribute = std::variant<std::string, int64_t, double>;

// The Mixture-of-Experts layers whose balance the file records per step (none: a dense model).
struct TimingsMoe {
  std::vector<int> layers;  // global layer indices
  int experts = 0;
};

// Written by one rank. Every dataset is chunked and extendible along steps and flushed after
// each row, so a killed run keeps every completed step.
class TimingsWriter {
 public:
  // `predicted_memory` [ranks * memory categories]: the memory model's bytes per rank. Every
  // dataset carries a `units` attribute (docs/checkpoints-and-faults.md lists them).
  TimingsWriter(const std::string& path, int ranks,
                const std::map<std::string, TimingsAttribute>& attributes, TimingsSegment segment,
                const std::vector<double>& predicted_memory, const TimingsMoe& moe = {});
  void append(const StepRecord& r);

 private:
  void append_row(const std::string& name, const void* row, hid_t type);
  std::string path_;
  h5::Handle file_;
  hsize_t rows_ = 0;
  bool moe_ = false;
};

}  // namespace trident
