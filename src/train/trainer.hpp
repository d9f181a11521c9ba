// The training driver: data, model, optimizer, step loop, logging, timings and checkpoints.
#pragma once

#include <string>

#include "comm/grid.hpp"
#include "io/config.hpp"
#include "train/faults.hpp"

namespace trident {

struct TrainOptions {
  std::string resume;          // checkpoint to continue from, or empty
  bool resume_newest = false;  // continue from the newest complete checkpoint of the run, if any
  // Resume even when the config changes what the remaining steps compute (optimizer, LR
  // schedule, data, seed, precision); without it such a resume is refused.
  bool allow_config_change = false;
  // A fresh run into a run directory that holds an earlier run deletes its timings and
  // checkpoints first; without it such a run is refused.
  bool overwrite = false;
  std::string dump_grads;      // write the first step's gradients here at global shape, or empty
  std::string config_path;     // the config file read (none of the run's outputs may replace it)
  StepHooks* hooks = nullptr;  // the test seam (injected faults); null: none
};

// Runs training on this rank's part of `grid`. Throws InputError before any output is written
// when the config, data or checkpoint is unusable. Returns the process exit status.
int train(Config config, const Grid& grid, const TrainOptions& options);

}  // namespace trident
