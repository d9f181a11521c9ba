// HDF5 checkpoints: every parameter and AdamW moment under its global name at its global shape,
// whatever layout wrote it, and loadable onto any layout. Each rank writes only the elements it
// owns, into one file whose layout rank 0 creates; each reads back only what it holds.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "io/config.hpp"
#include "model/params.hpp"

namespace trident {

class OutputFile;

constexpr int64_t kCheckpointFormatVersion = 2;
// The HDF5 groups of a checkpoint's three tensors per parameter: the weights and the moments.
inline constexpr const char* kCheckpointGroups[3] = {"params", "optim/m", "optim/v"};

struct CheckpointMeta {
  int64_t step = 0;         // optimizer steps completed
  int64_t data_cursor = 0;  // the next step whose batch is drawn (batches are pure of (seed, step))
  int64_t seed = 0;
  int64_t adam_steps = 0;
  std::string layout, git_revision;
  // fp16 dynamic loss scaling state (LossScaler), so a resumed run scales as the original did.
  double loss_scale = 1.0;
  int64_t loss_scale_clean_steps = 0, loss_scale_hysteresis_left = 0;
  // The data files trained on (data_identity lines); empty in checkpoints of older versions.
  std::string data_identity = {};
  // Mixture of Experts: the aux-loss-free selection bias, [moe layers x experts] (dataset
  // moe_expert_bias; empty for a dense model or a checkpoint without it).
  std::vector<float> expert_bias = {};
};

// One model chunk's flat buffers on this rank and the table that maps them to global tensors.
// m and v may be empty (no optimizer state).
struct ShardBuffers {
  const LocalParamTable* local = nullptr;
  View1 params, m, v;
};

// Which elements of its buffers this rank writes (and checks on load): its part of every unit
// split over the dp replicas (its ZeRO shard under ZeRO), tensors replicated over tp only on
// tp rank 0, the tied embedding only on the first stage; the experts' tensors (expert
// parallelism) split alike over the ranks holding the same experts. Together the ranks cover
// every element of every tensor exactly once.
struct ShardOwner {
  int dp = 1, dp_rank = 0, tp_rank = 0;
  int expert_dp = 1, expert_dp_rank = 0;
  // Loading reads only the owned elements of what the rank keeps only there: the moments under
  // ZeRO >= 1, the parameters too under ZeRO-3.
  int zero_stage = 0;
};

// Which elements of every tensor this rank writes, as pieces contiguous both in one chunk's
// buffer and in the global tensor: the ownership rule of ShardOwner for one run's layout, worked
// out once and used by each of its checkpoints.
class CheckpointShare {
 public:
  // `mine`: the chunks' tables, and whether they hold moments (m non-empty).
  CheckpointShare(const ModelConfig& model, const std::vector<ShardBuffers>& mine,
                  const ShardOwner& owner);

 private:
  friend class CheckpointWrite;
  struct Piece {
    int chunk;
    int64_t local, element, count;  // from local (flat, in the chunk) to element (in the tensor)
  };
  int kinds_;                                           // parameters only, or with both moments
  std::vector<std::pair<std::string, int64_t>> specs_;  // name and elements of each tensor
  std::vector<std::vector<Piece>> pieces_;              // per tensor, in the model's order
  int64_t owned_ = 0;                                   // elements per kind over every tensor
};

// A checkpoint on its way to its file, in three parts, so that the middle one, the bulk of the
// bytes, may run while training goes on (run.async_checkpoints):
//  1. the constructor (collective over `world`) copies this rank's owned elements into host
//     memory and sums their checksums over the ranks in one reduction; rank 0 creates the file
//     under a temporary name (an OutputFile, core/output_file.hpp) with every attribute, dataset
//     and checksum, each dataset's storage contiguous and allocated but not yet written, and every
//     rank learns where its elements lie. A `path` that is one of `inputs`, or a file rank 0
//     cannot create, is every rank's InputError before anything is written;
//  2. write_elements() puts this rank's elements there (pwrite) and syncs them. It touches no
//     MPI, no HDF5 and none of the model's buffers, so another thread may run it while the next
//     steps change those buffers;
//  3. commit() (collective), once every rank's write has returned: rank 0 renames the file over
//     `path` and syncs the directory. A failure on any rank is every rank's InputError, and the
//     temporary is removed; a process killed before leaves only the temporary, which no reader
//     takes for a checkpoint.
// The file is what HDF5 itself writes for contiguous little-endian fp32 datasets; no rank gathers
// a tensor, and the ranks need no collective per dataset.
class CheckpointWrite {
 public:
  // `share`: of `mine` (the same tables, with or without moments alike).
  CheckpointWrite(const std::string& path, const Config& config, const CheckpointMeta& meta,
                  const std::vector<ShardBuffers>& mine, const CheckpointShare& share,
                  MPI_Comm world, const std::vector<std::string>& inputs = {});
  ~CheckpointWrite();
  CheckpointWrite(const CheckpointWrite&) = delete;
  CheckpointWrite& operator=(const CheckpointWrite&) = delete;

  const std::string& path() const { return path_; }
  // The bytes this rank writes.
  int64_t bytes() const { return static_cast<int64_t>(values_.size() * sizeof(float)); }
  // InputError naming the file and the cause (a full disk). `fault_point` (tests) is called once
  // the first run of elements is written, mid-checkpoint.
  void write_elements(const std::function<void()>& fault_point = {});
  // `failure`: this rank's write_elements error, "" when it succeeded. Collective.
  void commit(const std::string& failure);

 private:
  struct Run {
    int64_t offset;       // in the file, bytes
    size_t first, count;  // its elements in values_
  };
  std::string path_, temporary_;
  MPI_Comm world_;
  std::vector<float> values_;
  std::vector<Run> runs_;
  std::unique_ptr<OutputFile> file_on_rank0_;
};

// Writes `path` at once: a CheckpointWrite's three parts in a row. Collective over `world`.
// `fault_point` as for write_elements.
void save_checkpoint(const std::string& path, const Config& config, const CheckpointMeta& meta,
                     const std::vector<ShardBuffers>& mine, const ShardOwner& owner, MPI_Comm world,
                     const std::function<void()>& fault_point = {},
                     const std::vector<std::string>& inputs = {});

// The checkpoints `dir` holds (step_NNNNNN.h5; unfinished *.tmp files are not), newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The checkpoints in `dir` that open as complete trident checkpoints with valid metadata
// (read_checkpoint_meta), newest first by the step recorded inside them (not by file name: a copy
// renamed newer does not rewind a run); `skipped` collects the files that do not (with why).
std::vector<std::string> complete_checkpoints(const std::string& dir,
                                              std::vector<std::string>* skipped = nullptr);
// The step recorded inside a checkpoint; InputError when it does not open.
int64_t checkpoint_step(const std::string& path);

// A checkpoint whose data fails its checksums. Thrown by load_checkpoint on every rank alike (the
// ranks sum their parts first), so a caller may fall back to another checkpoint.
class CorruptCheckpoint : public InputError {
 public:
  using InputError::InputError;
};
// Deletes all but the newest `keep` complete checkpoints in `dir` (keep <= 0: none deleted),
// newest by the step recorded inside (complete_checkpoints' order, the one resume uses), `written`
// (the checkpoint just saved) always kept.
void rotate_checkpoints(const std::string& dir, int keep, const std::string& written);

// The stored run configuration (TOML) of a checkpoint, parsed; InputError if unreadable.
Config read_checkpoint_config(const std::string& path);
// A checkpoint's counters and provenance, each attribute checked to hold one value of its type
// and the counters to be in range and consistent (0 <= adam_steps <= step, data_cursor >= 0, a
// finite positive loss scale); InputError naming the field otherwise. What load_checkpoint, `ckpt
// info` and `ckpt verify` read, so verify refuses what resume would.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Fills this rank's shards (parameters, and moments where given) from the global tensors.
// Every rank reads only the hyperslabs it holds. The ranks together verify every dataset's
// checksum (each over the elements it owns, summed over `world`). InputError for a missing,
// truncated or foreign checkpoint, CorruptCheckpoint for one that fails a checksum. Collective
// over `world`.
CheckpointMeta load_checkpoint(const std::string& path, const std::vector<ShardBuffers>& mine,
                               const ShardOwner& owner, MPI_Comm world);

// The checksum a dataset stores: an order-independent sum over its elements of a hash of
// (flat index, bit pattern), so ranks can add their parts.
uint64_t element_hash(int64_t flat_index, float value);

}  // namespace trident
