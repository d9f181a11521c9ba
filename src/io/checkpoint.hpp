// HDF5 checkpoints: every parameter and AdamW moment under its global name at its global shape,
// whatever layout wrote it, and loadable onto any layout.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "io/config.hpp"
#include "model/params.hpp"

namespace trident {

constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int64_t step = 0;         // optimizer steps completed
  int64_t data_cursor = 0;  // the next step whose batch is drawn (batches are pure of (seed, step))
  int64_t seed = 0;
  int64_t adam_steps = 0;
  std::string layout, git_revision;
};

// One model chunk's flat buffers on this rank and the table that maps them to global tensors.
// m and v may be empty (no optimizer state).
struct ShardBuffers {
  const LocalParamTable* local = nullptr;
  View1 params, m, v;
};

// Where every chunk of every rank sits: enough to rebuild any rank's LocalParamTable.
struct ShardGeometry {
  int pp = 1, dp = 1, tp = 1, v = 1;
  int64_t unit_alignment = 1;  // the ranks' LocalParamTable unit padding (dp under ZeRO)
};

// Gathers every rank's shards to rank 0 of `world` (dp replica 0 only: the others are copies)
// and writes `path` atomically (temporary name, flush, rename). Collective over `world`.
void save_checkpoint(const std::string& path, const Config& config, const CheckpointMeta& meta,
                     const std::vector<ShardBuffers>& mine, const ShardGeometry& geometry,
                     MPI_Comm world);

// The stored run configuration (TOML) of a checkpoint, parsed; InputError if unreadable.
Config read_checkpoint_config(const std::string& path);

// Fills this rank's shards (parameters, and moments where given) from the global tensors.
// Every rank reads only the tensors it holds. InputError for a missing, truncated or foreign
// checkpoint.
CheckpointMeta load_checkpoint(const std::string& path, const std::vector<ShardBuffers>& mine);

}  // namespace trident
