// Checkpoint write (rank 0 lays the file out, every rank writes its owned elements, rank 0
// renames it complete) and selective, checksum-verified load.
#include "io/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/output_file.hpp"
#include "core/paths.hpp"
#include "io/hdf5.hpp"
#include "model/partition.hpp"

namespace trident {
namespace {

h5::Handle open_checkpoint(const std::string& path) {
  if (const std::string why = not_a_file(path); !why.empty())
    throw InputError(fmt::format("checkpoint '{}' {}", path, why));
  h5::Handle file = h5::open_file_quiet(path);
  if (file < 0)
    throw InputError(
        fmt::format("checkpoint '{}' is not a readable HDF5 file (truncated or corrupt)", path));
  const int64_t version = h5::read_attr_int(file, "format_version", path);
  if (version != kCheckpointFormatVersion)
    throw InputError(fmt::format("checkpoint '{}' has format version {}; this trident reads {}",
                                 path, version, kCheckpointFormatVersion));
  return file;
}

// The Mixture-of-Experts selection bias, [moe layers x experts] flattened (CheckpointMeta).
constexpr const char* kExpertBiasDataset = "moe_expert_bias";

// A rectangle of a global tensor: rows x cols from (row, col); 1-D tensors use row 0, 1 row.
struct Block {
  hsize_t row = 0, col = 0, rows = 1, cols = 0;
};

// The hyperslabs of one global tensor a rank reads or writes, with its elements in file order.
struct Selection {
  std::vector<Block> blocks;
  std::vector<float> values;
  std::vector<int64_t> local;  // each value's position in chunk `chunk`'s flat buffer
  int chunk = -1;
};

// The length of a tensor's rows in the file: its last dimension (a vector is one row). A block
// of rows of a tensor of three or more dimensions counts its leading dimensions as one.
int64_t row_length(const ParamSpec& spec) {
  return spec.shape.size() >= 2 ? spec.shape.back() : spec.numel();
}

// Adds elements [lo, hi) of local parameter p (relative to p) to `sel` as runs contiguous in the
// global tensor within one global row (tensor parallelism maps a local row, or a group of a
// split vector, onto such a run); consecutive runs on consecutive rows with the same columns
// merge into one block.
void select_range(const LocalParamTable& local, const LocalParam& p, int64_t lo, int64_t hi,
                  Selection& sel) {
  const int64_t global_cols = row_length(*p.spec);
  auto add_run = [&](int64_t g, int64_t len) {
    const Block b{static_cast<hsize_t>(g / global_cols), static_cast<hsize_t>(g % global_cols), 1,
                  static_cast<hsize_t>(len)};
    if (!sel.blocks.empty()) {
      Block& last = sel.blocks.back();
      const int64_t last_end =
          static_cast<int64_t>((last.row + last.rows - 1) * global_cols + last.col + last.cols);
      if (g < last_end)
        fatal("checkpoint selection", __FILE__, __LINE__,
              fmt::format("{}: local order is not global order", p.spec->name), "");
      if (last.col == b.col && last.cols == b.cols && last.row + last.rows == b.row) {
        ++last.rows;
        return;
      }
    }
    sel.blocks.push_back(b);
  };
  int64_t run_start = -1, run_len = 0;  // global start and length of the run being built
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t g = local.global_index(p, i);
    if (g < 0) continue;  // rows past the vocabulary are padding: never stored
    const bool extends = run_len > 0 && g == run_start + run_len && g % global_cols != 0;
    if (!extends) {
      if (run_len > 0) add_run(run_start, run_len);
      run_start = g;
      run_len = 0;
    }
    ++run_len;
    sel.local.push_back(p.offset + i);
  }
  if (run_len > 0) add_run(run_start, run_len);
}

// The flat segments of a chunk this rank owns for parameter p: its part of every unit split over
// dp (exactly its ZeRO shard when units are padded to dp), or over the experts' replicas for an
// expert tensor.
std::vector<Segment> owned_segments(const LocalParamTable& local, const LocalParam& p,
                                    const ShardOwner& o) {
  const int parts = p.experts() ? o.expert_dp : o.dp;
  const int mine = p.experts() ? o.expert_dp_rank : o.dp_rank;
  std::vector<Segment> out;
  for (const ParamUnit& u : local.units()) {
    const int64_t part = (u.padded + parts - 1) / parts;
    const int64_t begin = std::min(u.padded, mine * part);
    out.push_back({u.offset + begin, u.offset + std::min(u.padded, begin + part)});
  }
  return out;
}

// Whether this chunk's rank writes parameter p at all (one writer per element, see ShardOwner).
bool writes(const LocalParamTable& local, const LocalParam& p, const ShardOwner& o) {
  if (!p.first_replica(o.tp_rank)) return false;
  if (p.spec->name == "wte" && !local.layout().has_embedding) return false;  // the head's tied copy
  return true;
}

// This rank's owned elements of tensor `name` over its chunks.
Selection owned_selection(const std::vector<ShardBuffers>& mine, const std::string& name,
                          const ShardOwner& o) {
  Selection sel;
  for (size_t c = 0; c < mine.size(); ++c) {
    const LocalParamTable& local = *mine[c].local;
    if (!local.holds(name)) continue;
    const LocalParam& p = local.at(name);
    if (!writes(local, p, o)) continue;
    sel.chunk = static_cast<int>(c);  // at most one chunk writes a tensor
    for (const Segment& s : owned_segments(local, p, o)) {
      const int64_t lo = std::max(s.begin, p.offset), hi = std::min(s.end, p.offset + p.numel);
      if (lo < hi) select_range(local, p, lo - p.offset, hi - p.offset, sel);
    }
  }
  return sel;
}

h5::Handle file_selection(hid_t dset, const Selection& sel) {
  h5::Handle space(H5Dget_space(dset), H5Sclose);
  TRIDENT_H5(static_cast<hid_t>(space));
  TRIDENT_H5(H5Sselect_none(space));
  const int rank = H5Sget_simple_extent_ndims(space);
  TRIDENT_H5(rank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank)), start(dims.size()), count(dims.size());
  TRIDENT_H5(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  for (const Block& b : sel.blocks) {
    if (rank == 1) {
      start = {b.col}, count = {b.cols};
      TRIDENT_H5(
          H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
      continue;
    }
    // Rows of the leading dimensions flattened: one hyperslab per run of rows that stays within
    // the innermost leading dimension (a whole block for a matrix).
    const hsize_t inner = dims[rank - 2];
    for (hsize_t r = b.row; r < b.row + b.rows;) {
      const hsize_t n = std::min(b.row + b.rows - r, inner - r % inner);
      hsize_t outer = r / inner;
      for (int d = rank - 3; d >= 0; --d) start[d] = outer % dims[d], outer /= dims[d];
      std::fill(count.begin(), count.end(), 1);
      start[rank - 2] = r % inner, count[rank - 2] = n;
      start[rank - 1] = b.col, count[rank - 1] = b.cols;
      TRIDENT_H5(
          H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
      r += n;
    }
  }
  return space;
}

h5::Handle memory_space(size_t n) {
  const hsize_t dims[1] = {std::max<hsize_t>(1, n)};
  h5::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  if (n == 0) TRIDENT_H5(H5Sselect_none(space));
  return space;
}

// The global flat index of every selected element, in selection order.
template <class F>
void for_each_global(const Selection& sel, int64_t global_cols, F&& f) {
  size_t k = 0;
  for (const Block& b : sel.blocks)
    for (hsize_t r = 0; r < b.rows; ++r)
      for (hsize_t c = 0; c < b.cols; ++c, ++k)
        f(k, static_cast<int64_t>((b.row + r) * global_cols + b.col + c));
}

}  // namespace

uint64_t element_hash(int64_t flat_index, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return mix64(static_cast<uint64_t>(flat_index) * 0x100000001B3ull ^ bits);
}

namespace {

// Rank `root`'s `text` on every rank of `world`.
std::string broadcast_text(std::string text, MPI_Comm world, int root = 0) {
  int length = static_cast<int>(text.size());
  TRIDENT_MPI(MPI_Bcast(&length, 1, MPI_INT, root, world));
  text.resize(static_cast<size_t>(length));
  TRIDENT_MPI(MPI_Bcast(text.data(), length, MPI_CHAR, root, world));
  return text;
}

// The lowest rank's non-empty `failure` on every rank of `world`; "" when no rank has one.
std::string first_failure(const std::string& failure, MPI_Comm world) {
  int rank = 0, size = 1;
  TRIDENT_MPI(MPI_Comm_rank(world, &rank));
  TRIDENT_MPI(MPI_Comm_size(world, &size));
  int first = failure.empty() ? size : rank;
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, world));
  return first == size ? std::string() : broadcast_text(failure, world, first);
}

// Rank 0's part of a checkpoint write: the file at `temporary` with its attributes, the expert
// bias, and every dataset created with its checksum (`sums`: checksum and count per dataset, the
// groups' datasets in order), its storage contiguous and allocated but not filled. Returns each
// dataset's byte offset in the file, where the ranks then write its elements.
std::vector<int64_t> create_checkpoint_file(const std::string& temporary, const Config& config,
                                            const CheckpointMeta& meta, const ParamTable& table,
                                            int kinds, const std::vector<uint64_t>& sums) {
  const h5::WritingFile writing(temporary, /*remove_on_failure=*/true);
  // Exclusive: a name planted since OutputFile chose it fails here instead of being followed.
  h5::Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  TRIDENT_H5(static_cast<hid_t>(file));
  h5::write_attr(file, "format_version", kCheckpointFormatVersion);
  h5::write_attr(file, "config", config.to_toml());
  h5::write_attr(file, "step", meta.step);
  h5::write_attr(file, "data_cursor", meta.data_cursor);
  h5::write_attr(file, "seed", meta.seed);
  h5::write_attr(file, "adam_steps", meta.adam_steps);
  h5::write_attr(file, "layout", meta.layout);
  h5::write_attr(file, "git_revision", meta.git_revision);
  h5::write_attr(file, "loss_scale", meta.loss_scale);
  h5::write_attr(file, "loss_scale_clean_steps", meta.loss_scale_clean_steps);
  h5::write_attr(file, "loss_scale_hysteresis_left", meta.loss_scale_hysteresis_left);
  if (!meta.data_identity.empty()) h5::write_attr(file, "data_identity", meta.data_identity);
  if (!meta.expert_bias.empty()) {  // every rank holds the same values
    const hsize_t dims[1] = {meta.expert_bias.size()};
    h5::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    h5::Handle dset(H5Dcreate2(file, kExpertBiasDataset, H5T_IEEE_F32LE, space, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT),
                    H5Dclose);
    TRIDENT_H5(static_cast<hid_t>(dset));
    TRIDENT_H5(
        H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, meta.expert_bias.data()));
  }
  h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  TRIDENT_H5(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
  TRIDENT_H5(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));  // its offset is known at once
  TRIDENT_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));    // every element is written
  TRIDENT_H5(H5Pset_obj_track_times(dcpl, false));
  h5::Handle optim;
  if (kinds > 1) optim = h5::create_group(file, "optim");
  std::vector<int64_t> offsets;
  for (int k = 0; k < kinds; ++k) {
    h5::Handle group = h5::create_group(file, kCheckpointGroups[k]);
    for (const ParamSpec& spec : table.specs()) {
      std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
      h5::Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                       H5Sclose);
      h5::Handle dset(H5Dcreate2(group, spec.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                 H5P_DEFAULT),
                      H5Dclose);
      TRIDENT_H5(static_cast<hid_t>(dset));
      h5::write_attr(dset, "checksum", static_cast<int64_t>(sums[2 * offsets.size()]));
      const haddr_t offset = H5Dget_offset(dset);
      if (offset == HADDR_UNDEF)
        fatal("H5Dget_offset", __FILE__, __LINE__,
              fmt::format("{}/{}: no storage allocated", kCheckpointGroups[k], spec.name));
      offsets.push_back(static_cast<int64_t>(offset));
    }
  }
  TRIDENT_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  return offsets;
}

}  // namespace

CheckpointShare::CheckpointShare(const ModelConfig& model, const std::vector<ShardBuffers>& mine,
                                 const ShardOwner& owner)
    : kinds_(!mine.empty() && mine[0].m.extent(0) > 0 ? 3 : 1) {
  const ParamTable table(model);
  for (const ParamSpec& spec : table.specs()) {
    specs_.push_back({spec.name, spec.numel()});
    pieces_.emplace_back();
    std::vector<Piece>& pieces = pieces_.back();
    const Selection sel = owned_selection(mine, spec.name, owner);
    for_each_global(sel, row_length(spec), [&](size_t i, int64_t g) {
      const int64_t local = sel.local[i];
      if (!pieces.empty()) {
        Piece& last = pieces.back();
        if (last.local + last.count == local && last.element + last.count == g) {
          ++last.count;
          return;
        }
      }
      pieces.push_back({sel.chunk, local, g, 1});
    });
    for (const Piece& piece : pieces) owned_ += piece.count;
  }
}

CheckpointWrite::CheckpointWrite(const std::string& path, const Config& config,
                                 const CheckpointMeta& meta, const std::vector<ShardBuffers>& mine,
                                 const CheckpointShare& share, MPI_Comm world,
                                 const std::vector<std::string>& inputs)
    : path_(path), world_(world) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the files hold little-endian fp32, written as this host's floats");
  const ParamTable table(config.model);
  const int kinds = share.kinds_;
  // Host views of the buffers: the buffers themselves on host builds (no copy).
  using HostView = Kokkos::View<float*, Kokkos::HostSpace>;
  std::vector<std::array<HostView, 3>> host(mine.size());
  for (size_t c = 0; c < mine.size(); ++c) {
    const View1 bufs[3] = {mine[c].params, mine[c].m, mine[c].v};
    for (int k = 0; k < kinds; ++k)
      host[c][k] = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bufs[k]);
  }
  // This rank's owned elements, dataset by dataset in file order, each piece a run in the file
  // (its offset an element index within its dataset until the file says where that lies).
  values_.reserve(static_cast<size_t>(share.owned_ * kinds));
  std::vector<uint64_t> sums;  // checksum and element count per dataset
  std::vector<size_t> run_dataset;
  for (int k = 0; k < kinds; ++k) {
    for (const std::vector<CheckpointShare::Piece>& pieces : share.pieces_) {
      uint64_t checksum = 0, count = 0;
      for (const CheckpointShare::Piece& piece : pieces) {
        const float* from = host[static_cast<size_t>(piece.chunk)][k].data() + piece.local;
        runs_.push_back({piece.element, values_.size(), static_cast<size_t>(piece.count)});
        run_dataset.push_back(sums.size() / 2);
        values_.insert(values_.end(), from, from + piece.count);
        for (int64_t i = 0; i < piece.count; ++i)
          checksum += element_hash(piece.element + i, from[i]);
        count += static_cast<uint64_t>(piece.count);
      }
      sums.push_back(checksum);
      sums.push_back(count);
    }
  }
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T,
                            MPI_SUM, world));
  const size_t tensors = share.specs_.size();
  for (size_t d = 0; d < sums.size() / 2; ++d) {
    const auto& [name, numel] = share.specs_[d % tensors];
    if (static_cast<int64_t>(sums[2 * d + 1]) != numel)
      fatal("save_checkpoint", __FILE__, __LINE__,
            fmt::format("{} {}: the ranks own {} of {} elements", kCheckpointGroups[d / tensors],
                        name, sums[2 * d + 1], numel),
            "the ownership rule must cover every element once");
  }
  // Rank 0 creates the file; a refusal there (an input named, a full disk) is every rank's
  // InputError, so that none waits in a collective.
  int rank = 0;
  TRIDENT_MPI(MPI_Comm_rank(world, &rank));
  std::vector<int64_t> offsets(sums.size() / 2);
  std::string message;  // "+<temporary>" or "-<why not>"
  if (rank == 0) {
    try {
      file_on_rank0_ = std::make_unique<OutputFile>(path, inputs, OutputFile::Creator::kLibrary);
      offsets =
          create_checkpoint_file(file_on_rank0_->temporary(), config, meta, table, kinds, sums);
      message = "+" + file_on_rank0_->temporary();
    } catch (const InputError& e) {
      message = std::string("-") + e.what();
    }
  }
  message = broadcast_text(message, world);
  if (message.empty() || message[0] != '+') throw InputError(message.substr(1));
  temporary_ = message.substr(1);
  TRIDENT_MPI(MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_INT64_T, 0, world));
  for (size_t i = 0; i < runs_.size(); ++i)
    runs_[i].offset =
        offsets[run_dataset[i]] + runs_[i].offset * static_cast<int64_t>(sizeof(float));
}

CheckpointWrite::~CheckpointWrite() = default;

void CheckpointWrite::write_elements(const std::function<void()>& fault_point) {
  const auto failed = [&](const char* doing, int error) {
    return InputError(fmt::format("checkpoint {}: {} {} failed: {}", path_, doing, temporary_,
                                  explain_errno(error)));
  };
  // The file rank 0 made, never through a link planted at its name since.
  const int fd = ::open(temporary_.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw failed("opening", errno);
  for (size_t i = 0; i < runs_.size(); ++i) {
    const char* at = reinterpret_cast<const char*>(values_.data() + runs_[i].first);
    size_t left = runs_[i].count * sizeof(float);
    off_t offset = runs_[i].offset;
    while (left > 0) {
      const ssize_t n = ::pwrite(fd, at, left, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = n < 0 ? errno : ENOSPC;  // a short write: the device filled up
        ::close(fd);
        throw failed("writing", error);
      }
      at += n, offset += n, left -= static_cast<size_t>(n);
    }
    if (i == 0 && fault_point) fault_point();
  }
  if (runs_.empty() && fault_point) fault_point();
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw failed("syncing", error);
  }
  if (::close(fd) != 0) throw failed("closing", errno);
}

void CheckpointWrite::commit(const std::string& failure) {
  if (const std::string first = first_failure(failure, world_); !first.empty())
    throw InputError(first);
  // Rank 0 syncs and renames it; its failure (a full disk) is every rank's InputError.
  std::string renaming;
  if (file_on_rank0_) {
    try {
      file_on_rank0_->commit();
    } catch (const InputError& e) {
      renaming = e.what();
    }
  }
  renaming = broadcast_text(renaming, world_);
  if (!renaming.empty()) throw InputError(renaming);
}

void save_checkpoint(const std::string& path, const Config& config, const CheckpointMeta& meta,
                     const std::vector<ShardBuffers>& mine, const ShardOwner& owner, MPI_Comm world,
                     const std::function<void()>& fault_point,
                     const std::vector<std::string>& inputs) {
  CheckpointWrite write(path, config, meta, mine, CheckpointShare(config.model, mine, owner), world,
                        inputs);
  std::string failure;
  try {
    write.write_elements(fault_point);
  } catch (const InputError& e) {
    failure = e.what();
  }
  write.commit(failure);
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;  // a directory that cannot be read holds no checkpoint to resume from
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // step_ + 6 or more digits + .h5: the zero-padded names sort by step.
    if (name.size() >= 14 && name.rfind("step_", 0) == 0 &&
        name.compare(name.size() - 3, 3, ".h5") == 0 &&
        name.find_first_not_of("0123456789", 5) == name.size() - 3 && entry.is_regular_file())
      out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a > b;
  });
  return out;
}

std::vector<std::string> complete_checkpoints(const std::string& dir,
                                              std::vector<std::string>* skipped) {
  std::vector<std::pair<int64_t, std::string>> found;  // (step inside, path), in name order
  for (const std::string& path : list_checkpoints(dir)) {
    try {
      found.emplace_back(read_checkpoint_meta(path).step, path);
    } catch (const InputError& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (const auto& [step, path] : found) out.push_back(path);
  return out;
}

int64_t checkpoint_step(const std::string& path) {
  h5::Handle file = open_checkpoint(path);
  return h5::read_attr_int(file, "step", path);
}

void rotate_checkpoints(const std::string& dir, int keep, const std::string& written) {
  if (keep <= 0) return;
  // Newest first by the step inside, as --resume auto orders them (a copy renamed newer is old);
  // the one just written first of all. Files that do not open are not rotated.
  std::vector<std::string> all = complete_checkpoints(dir);
  const auto it = std::find_if(all.begin(), all.end(), [&](const std::string& p) {
    std::error_code ec;
    return std::filesystem::equivalent(p, written, ec);
  });
  if (it != all.end()) std::rotate(all.begin(), it, it + 1);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    std::error_code ec;
    if (!std::filesystem::remove(all[i], ec) && ec)
      std::fprintf(stderr, "warning: run.keep_checkpoints: cannot delete %s: %s\n", all[i].c_str(),
                   explain_errno(ec.value()).c_str());
  }
}

Config read_checkpoint_config(const std::string& path) {
  h5::Handle file = open_checkpoint(path);
  const Config c =
      parse_config_text(h5::read_attr_string(file, "config", path), path + " (config)");
  // Validated as a config file is, for the layout that wrote it: the model's sizes decide what
  // every reader allocates.
  const ParallelSection& p = c.parallel;
  const int64_t world = p.ranks();
  if (p.dp < 1 || p.cp < 1 || p.tp < 1 || p.pp < 1 || world > (int64_t{1} << 24))
    throw InputError(
        fmt::format("checkpoint '{}': its config's layout dp = {}, cp = {}, tp = {}, "
                    "pp = {} is not one a run can have",
                    path, p.dp, p.cp, p.tp, p.pp));
  validate(c, static_cast<int>(world));
  return c;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  h5::Handle file = open_checkpoint(path);
  CheckpointMeta meta;
  const auto counter = [&](const char* name, int64_t low, int64_t high) {
    const int64_t value = h5::read_attr_int(file, name, path);
    if (value < low || value > high)
      throw InputError(fmt::format("checkpoint '{}': attribute '{}' is {}, outside [{}, {}]", path,
                                   name, value, low, high));
    return value;
  };
  constexpr int64_t kMost = int64_t{1} << 40;  // no run takes a trillion steps
  meta.step = counter("step", 0, kMost);
  meta.data_cursor = counter("data_cursor", 0, kMost);
  meta.adam_steps = counter("adam_steps", 0, meta.step);
  meta.seed = h5::read_attr_int(file, "seed", path);
  meta.layout = h5::read_attr_string(file, "layout", path);
  meta.git_revision = h5::read_attr_string(file, "git_revision", path);
  meta.loss_scale = h5::read_attr_double(file, "loss_scale", path);
  if (!std::isfinite(meta.loss_scale) || meta.loss_scale <= 0)
    throw InputError(
        fmt::format("checkpoint '{}': attribute 'loss_scale' is {}, not a finite "
                    "positive number",
                    path, meta.loss_scale));
  meta.loss_scale_clean_steps = counter("loss_scale_clean_steps", 0, kMost);
  meta.loss_scale_hysteresis_left = counter("loss_scale_hysteresis_left", 0, kMost);
  if (h5::has_attr(file, "data_identity"))
    meta.data_identity = h5::read_attr_string(file, "data_identity", path);
  if (H5Lexists(file, kExpertBiasDataset, H5P_DEFAULT) > 0) {
    const Config config = read_checkpoint_config(path);
    const int64_t n = static_cast<int64_t>(config.model.moe_layers()) * config.model.moe.n_experts;
    const h5::Handle dset = h5::open_tensor(file, kExpertBiasDataset, {n}, path);
    meta.expert_bias.resize(static_cast<size_t>(n));
    h5::QuietErrors quiet;
    if (n > 0 &&
        H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, meta.expert_bias.data()) < 0)
      throw InputError(
          fmt::format("checkpoint '{}': cannot read '{}' (truncated?)", path, kExpertBiasDataset));
    for (float b : meta.expert_bias)
      if (!std::isfinite(b))
        throw InputError(
            fmt::format("checkpoint '{}': '{}' holds {}", path, kExpertBiasDataset, b));
  }
  return meta;
}

CheckpointMeta load_checkpoint(const std::string& path, const std::vector<ShardBuffers>& mine,
                               const ShardOwner& owner, MPI_Comm world) {
  const CheckpointMeta meta = read_checkpoint_meta(path);
  h5::Handle file = open_checkpoint(path);
  const bool with_moments = !mine.empty() && mine[0].m.extent(0) > 0;
  const ParamTable table(read_checkpoint_config(path).model);
  std::string bad;  // the first dataset whose checksum disagrees
  for (int k = 0; k < (with_moments ? 3 : 1); ++k) {
    std::vector<Kokkos::View<float*, Kokkos::HostSpace>> host;
    for (const ShardBuffers& chunk : mine) {
      const View1 bufs[3] = {chunk.params, chunk.m, chunk.v};
      host.push_back(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bufs[k]));
    }
    for (const ParamSpec& spec : table.specs()) {
      const h5::Handle dset = h5::open_tensor(
          file, std::string(kCheckpointGroups[k]) + "/" + spec.name, spec.shape, path);
      const int64_t global_cols = row_length(spec);
      // Every element this rank keeps, chunk by chunk (padding stays zero): all it holds, or
      // only its owned part of what ZeRO shards.
      const bool owned_only = (k > 0 && owner.zero_stage >= 1) || owner.zero_stage >= 3;
      for (size_t c = 0; c < mine.size(); ++c) {
        const LocalParamTable& local = *mine[c].local;
        if (!local.holds(spec.name)) continue;
        const LocalParam& p = local.at(spec.name);
        Selection sel;
        if (owned_only) {
          for (const Segment& s : owned_segments(local, p, owner)) {
            const int64_t lo = std::max(s.begin, p.offset),
                          hi = std::min(s.end, p.offset + p.numel);
            if (lo < hi) select_range(local, p, lo - p.offset, hi - p.offset, sel);
          }
        } else {
          select_range(local, p, 0, p.numel, sel);
        }
        sel.values.resize(sel.local.size());
        h5::Handle fspace = file_selection(dset, sel);
        h5::Handle mspace = memory_space(sel.values.size());
        if (!sel.values.empty()) {
          h5::QuietErrors quiet;
          if (H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, sel.values.data()) < 0)
            throw InputError(fmt::format("checkpoint '{}': cannot read '{}/{}' (truncated?)", path,
                                         kCheckpointGroups[k], spec.name));
        }
        for (size_t i = 0; i < sel.local.size(); ++i)
          host[c](static_cast<size_t>(sel.local[i])) = sel.values[i];
      }
      // The checksum over the elements this rank owns, summed over the ranks.
      Selection owned = owned_selection(mine, spec.name, owner);
      uint64_t sum = 0;
      if (!owned.local.empty())
        for_each_global(owned, global_cols, [&](size_t i, int64_t g) {
          sum += element_hash(
              g, host[static_cast<size_t>(owned.chunk)](static_cast<size_t>(owned.local[i])));
        });
      TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_UINT64_T, MPI_SUM, world));
      const uint64_t stored = static_cast<uint64_t>(h5::read_attr_int(dset, "checksum", path));
      if (sum != stored && bad.empty()) bad = std::string(kCheckpointGroups[k]) + "/" + spec.name;
    }
    for (size_t c = 0; c < mine.size(); ++c) {
      const View1 bufs[3] = {mine[c].params, mine[c].m, mine[c].v};
      Kokkos::deep_copy(bufs[k], host[c]);
    }
  }
  if (!bad.empty())
    throw CorruptCheckpoint(
        fmt::format("checkpoint '{}': dataset '{}' fails its checksum (corrupted)", path, bad));
  return meta;
}

}  // namespace trident
