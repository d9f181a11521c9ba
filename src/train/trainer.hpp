// The training driver: data, model, optimizer, step loop, logging, timings and checkpoints.
#pragma once

#include <string>

#include "comm/grid.hpp"
#include "io/config.hpp"

namespace trident {

struct TrainOptions {
  std::string resume;      // checkpoint to continue from, or empty
  std::string dump_grads;  // write the first step's gradients here at global shape, or empty
  // Testing aid: rank inject_overflow_rank writes infinity into its gradient at 1-based step
  // inject_overflow_step (0: never), as an fp16 overflow would.
  int inject_overflow_step = 0, inject_overflow_rank = 0;
  // Testing aid: at 1-based step inject_fault_step rank inject_fault_rank is killed (SIGKILL),
  // hangs in its forward, or is killed inside the checkpoint write ("kill", "hang",
  // "kill-in-checkpoint"; empty: none).
  std::string inject_fault;
  int inject_fault_step = 0, inject_fault_rank = 0;
};

// Runs training on this rank's part of `grid`. Throws InputError before any output is written
// when the config, data or checkpoint is unusable. Returns the process exit status.
int train(Config config, const Grid& grid, const TrainOptions& options);

}  // namespace trident
