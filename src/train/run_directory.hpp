// A run's directory, <out_dir>/<name>/: created and locked for the run, refused to a fresh run when
// it holds an earlier one, and the timings segments of a run resumed there.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/host_comm.hpp"
#include "core/run_lock.hpp"
#include "io/config.hpp"
#include "train/step_metrics.hpp"

namespace trident {

class RunDirectory {
 public:
  // Every rank: rank 0 creates the directory and takes its lock (run.lock); when that fails
  // every rank throws InputError with the cause (a path that is a file, no permission, another
  // run holding it).
  RunDirectory(const Config& config, const HostCollectives& world, const Console& console);
  // Releases the lock; removes the directories this run created when they are still empty (a
  // run refused before writing anything leaves nothing behind).
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

  // A fresh run (no --resume): refused on every rank when the directory holds an earlier run's
  // timings or checkpoints, unless `overwrite`, which deletes them first.
  void require_fresh(bool overwrite) const;
  // An explicit --resume from a checkpoint at `step`: refused on every rank when the directory
  // holds checkpoints past it (the timeline being rewound), which the new run's would mix with.
  void require_nothing_after(int64_t step, const std::string& resume) const;
  // Each rank's NVMe offload files are named by run and rank; this rank locks them too, so two
  // runs sharing offload.nvme_dir under one run.name cannot corrupt each other's states.
  void lock_offload_files(const std::string& prefix);
  // Rank 0: removes the NVMe offload files <nvme_dir>/<name>.rank<r>.* of ranks r >= `ranks`,
  // left by a killed run on more ranks, once their lock shows the holder gone (a live holder's
  // are kept, with a line). Ranks below `ranks` truncate their own when they make them.
  void remove_dead_offload_files(const std::string& nvme_dir, const std::string& name, int ranks);

  // An early stop (a signal, run.max_minutes): rank 0 writes `line` to <run dir>/stopped, which a
  // launcher reads when it cannot pass on the ranks' exit status 4 (mpirun, signalled itself,
  // exits 1 once they have stopped, and may drop their last output). Each start removes it first.
  void record_stop(const std::string& line) const;

  // The timings file of the segment starting now: timings.h5 for a run's first, timings.<k>.h5
  // for its k-th (resumed) one; none is ever overwritten. Rank 0.
  std::filesystem::path next_timings_segment(int& segment) const;

  // At the end of a run: refused on every rank when the directory was removed or replaced since
  // the run made it (its timings, written to a file no name reaches, and checkpoints are gone), so
  // that the run does not end with exit status 0 and a PERFORMANCE line for nothing kept.
  void require_still_there() const;

 private:
  // The earlier run's files that a fresh run would mix with: timings segments, checkpoints.
  std::vector<std::filesystem::path> earlier_outputs() const;

  std::filesystem::path path_;
  const HostCollectives& world_;
  const Console& console_;
  std::vector<std::filesystem::path> created_;  // deepest first
  dev_t device_ = 0;                            // rank 0: the directory's identity when made
  ino_t inode_ = 0;
  std::unique_ptr<RunLock> lock_, offload_lock_;
};

// The segment number of a timings file name (timings.h5: 1, timings.<k>.h5: k), 0 otherwise.
int timings_segment(const std::string& file_name);

}  // namespace trident
