// A run's checkpoints: when one is due, writing one (each rank its owned elements, through the
// data-parallel strategies), rotation, loading one onto any layout, and the first-step
// gradient dump that layout tests compare.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/grid.hpp"
#include "comm/host_comm.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "optim/loss_scaler.hpp"
#include "train/faults.hpp"
#include "train/pipeline_runner.hpp"
#include "train/step_metrics.hpp"

namespace trident {

class Checkpointer {
 public:
  // `data_identity`: the data files' identity lines, recorded in every checkpoint.
  // `expert_bias`: the trainer's MoE selection bias [moe layers x E] (empty without MoE), saved
  // with every checkpoint and restored (into it and every chunk) on load.
  Checkpointer(const Config& config, const Grid& grid, const HostCollectives& world,
               std::vector<ModelChunk>& chunks, std::string layout, std::string data_identity,
               StepHooks& hooks, std::vector<float>& expert_bias);
  // Waits for a write still running (without committing it: its temporary is removed).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  std::filesystem::path directory() const { return dir_; }
  // Whether a checkpoint is written after 1-based `step` (every run.checkpoint_every steps and
  // at the end; never with -1).
  bool due(int step) const;
  // Writes step_NNNNNN.h5 of 1-based `step` and drops the oldest beyond run.keep_checkpoints.
  // A checkpoint the file system has no room for is refused before a byte is written
  // (InputError on every rank, naming the free and the needed space). Collective.
  // With run.async_checkpoints, the state is copied to host memory and the file created before
  // it returns, and each rank's thread writes the bytes while training goes on; the checkpoint
  // counts (rename, rotation, last_written) once poll() or finish() commits it. An earlier
  // write still running is finished first.
  void save(int step, const LossScaler& scaler);
  // Collective, after every step while a write runs: commits it when every rank's thread has
  // written its bytes. Returns the slowest rank's seconds of that background write (0 while it
  // runs, or with none). InputError on every rank when any rank's write failed.
  double poll();
  // Whether an asynchronous write awaits its commit (the same on every rank).
  bool pending() const { return pending_ != nullptr; }
  // Collective: waits for a write still running and commits it (before the run ends, stops, or
  // writes its next checkpoint). Returns its background seconds as poll() does.
  double finish();
  // Before step 1: creates the checkpoint directory and refuses (InputError on every rank) one
  // that cannot be written to, or whose file system has no room for a checkpoint. Collective.
  void require_writable() const;
  // Rank 0, before step 1 (the run's lock held, so no other process writes here): deletes the
  // temporaries of checkpoint writes a killed process left (.step_NNNNNN.h5.<pid>.<hex>.tmp,
  // as large as a checkpoint each) and returns their names; empty on other ranks.
  std::vector<std::string> remove_unfinished_writes() const;
  const std::string& last_written() const { return last_written_; }
  // Loads `path` (any layout) into every chunk and, for an fp16 run resumed from fp16, the loss
  // scale into `scaler`. Returns the step to continue from. Collective.
  int load(const std::string& path, LossScaler& scaler, const HostCollectives& world,
           const Console& console);
  // Loads only the parameters of `path` (any layout, any run) into every chunk, for
  // run.init_from: the optimizer stays fresh and this run starts at step 0. The caller has checked
  // that its model is this run's. Collective.
  void init_weights(const std::string& path, const HostCollectives& world, const Console& console);
  // Writes the current gradients at global shapes (checkpoint schema, /params) to `path`.
  void dump_gradients(const std::string& path, int step,
                      const std::vector<std::string>& inputs) const;

 private:
  std::vector<ShardBuffers> buffers(const std::vector<ChunkState>& states) const;
  ShardOwner owner() const;
  // `which`: "checkpoint step 8", in the error.
  void require_room(const std::string& which) const;
  // Joins the writer thread, commits its file (collective) and rotates.
  double commit_pending();

  const Config& config_;
  const Grid& grid_;
  const HostCollectives& world_;
  std::vector<ModelChunk>& chunks_;
  std::string layout_, data_identity_;
  StepHooks& hooks_;
  std::vector<float>& expert_bias_;
  std::filesystem::path dir_;
  std::string last_written_;
  // The asynchronous write in flight: its file, its thread, and what the thread reports.
  std::unique_ptr<CheckpointShare> share_;  // worked out at the first checkpoint
  std::unique_ptr<CheckpointWrite> pending_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::string write_failure_;  // set by the thread before written_
  double write_seconds_ = 0;   // likewise
};

}  // namespace trident
