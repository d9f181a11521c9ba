// HDF5 checkpoints: every parameter and AdamW moment under its global name at its global shape.
#pragma once

#include <cstdint>
#include <string>

#include "io/config.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace trident {

constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int64_t step = 0;         // optimizer steps completed
  int64_t data_cursor = 0;  // the next step whose batch is drawn (batches are pure of (seed, step))
  int64_t seed = 0;
  std::string layout, git_revision;
};

// Writes `path` atomically: to path + ".tmp", flushed, then renamed. Called by one rank.
void save_checkpoint(const std::string& path, const Config& config, const Gpt& model,
                     const AdamW& optimizer, const CheckpointMeta& meta);

// The stored run configuration (TOML) of a checkpoint, parsed; InputError if unreadable.
Config read_checkpoint_config(const std::string& path);

// Loads parameters (and, when `optimizer` is given, the moments) into a model of the same
// configuration. InputError for a missing, truncated or foreign checkpoint.
CheckpointMeta load_checkpoint(const std::string& path, Gpt& model, AdamW* optimizer);

}  // namespace trident
