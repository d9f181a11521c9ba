// Checkpoint write (gather to rank 0, temporary name, flush, rename) and validated load.
#include "io/checkpoint.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "comm/grid.hpp"
#include "core/error.hpp"
#include "io/hdf5.hpp"

namespace trident {
namespace {

using GlobalTensors = std::map<std::string, std::vector<float>>;

h5::Handle open_checkpoint(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw InputError(fmt::format("checkpoint '{}' does not exist", path));
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

h5::Handle open_group(hid_t file, const std::string& name, const std::string& path) {
  h5::QuietErrors quiet;
  h5::Handle g(H5Gopen2(file, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (g < 0) throw InputError(fmt::format("checkpoint '{}' has no group '{}'", path, name));
  return g;
}

// Places one shard's local elements at their global positions.
void scatter_to_global(const LocalParamTable& local, const float* shard, GlobalTensors& out) {
  for (const LocalParam& p : local.params()) {
    std::vector<float>& global = out[p.spec->name];
    if (global.empty()) global.assign(static_cast<size_t>(p.spec->numel()), NAN);
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = local.global_index(p, i);
      if (g >= 0) global[static_cast<size_t>(g)] = shard[p.offset + i];
    }
  }
}

void write_group(hid_t file, const std::string& name, const ParamTable& table,
                 const GlobalTensors& tensors) {
  h5::Handle group = h5::create_group(file, name);
  for (const ParamSpec& p : table.specs())
    h5::write_floats(group, p.name, p.shape, tensors.at(p.name).data());
}

}  // namespace

void save_checkpoint(const std::string& path, const Config& config, const CheckpointMeta& meta,
                     const std::vector<ShardBuffers>& mine, const ShardGeometry& geo,
                     MPI_Comm world) {
  int rank = 0, size = 0;
  TRIDENT_MPI(MPI_Comm_rank(world, &rank));
  TRIDENT_MPI(MPI_Comm_size(world, &size));
  const GridShape shape{geo.pp, geo.dp, geo.tp};
  const bool with_moments = !mine.empty() && mine[0].m.extent(0) > 0;
  const int kinds = with_moments ? 3 : 1;
  if (rank != 0) {
    if (grid_coord(shape, rank).dp != 0) return;  // dp replicas hold copies
    for (size_t c = 0; c < mine.size(); ++c) {
      const View1 bufs[3] = {mine[c].params, mine[c].m, mine[c].v};
      for (int k = 0; k < kinds; ++k) {
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bufs[k]);
        TRIDENT_MPI(MPI_Send(host.data(), static_cast<int>(mine[c].local->total_numel()), MPI_FLOAT,
                             0, static_cast<int>(c) * 3 + k, world));
      }
    }
    return;
  }
  const ParamTable table(config.model);
  GlobalTensors tensors[3];
  for (int r = 0; r < size; ++r) {
    const GridCoord coord = grid_coord(shape, r);
    if (coord.dp != 0) continue;
    for (int c = 0; c < geo.v; ++c) {
      const LocalParamTable local(
          table, config.model,
          stage_layout(config.model, geo.pp, geo.v, coord.pp, c, geo.tp, coord.tp),
          geo.unit_alignment);
      for (int k = 0; k < kinds; ++k) {
        std::vector<float> shard(static_cast<size_t>(local.total_numel()));
        if (r == 0) {
          const View1 bufs[3] = {mine[c].params, mine[c].m, mine[c].v};
          auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bufs[k]);
          std::copy(host.data(), host.data() + shard.size(), shard.begin());
        } else {
          TRIDENT_MPI(MPI_Recv(shard.data(), static_cast<int>(shard.size()), MPI_FLOAT, r,
                               c * 3 + k, world, MPI_STATUS_IGNORE));
        }
        scatter_to_global(local, shard.data(), tensors[k]);
      }
    }
  }
  const std::string tmp = path + ".tmp";
  {
    h5::Handle file = h5::create_file(tmp);
    h5::write_attr(file, "format_version", kCheckpointFormatVersion);
    h5::write_attr(file, "config", config.to_toml());
    h5::write_attr(file, "step", meta.step);
    h5::write_attr(file, "data_cursor", meta.data_cursor);
    h5::write_attr(file, "seed", meta.seed);
    h5::write_attr(file, "adam_steps", meta.adam_steps);
    h5::write_attr(file, "layout", meta.layout);
    h5::write_attr(file, "git_revision", meta.git_revision);
    write_group(file, "params", table, tensors[0]);
    if (with_moments) {
      h5::Handle optim = h5::create_group(file, "optim");
      write_group(optim, "m", table, tensors[1]);
      write_group(optim, "v", table, tensors[2]);
    }
    TRIDENT_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  }
  std::filesystem::rename(tmp, path);
}

Config read_checkpoint_config(const std::string& path) {
  h5::Handle file = open_checkpoint(path);
  return parse_config_text(h5::read_attr_string(file, "config", path), path + " (config)");
}

CheckpointMeta load_checkpoint(const std::string& path, const std::vector<ShardBuffers>& mine) {
  h5::Handle file = open_checkpoint(path);
  CheckpointMeta meta;
  meta.step = h5::read_attr_int(file, "step", path);
  meta.data_cursor = h5::read_attr_int(file, "data_cursor", path);
  meta.seed = h5::read_attr_int(file, "seed", path);
  meta.adam_steps = h5::read_attr_int(file, "adam_steps", path);
  meta.layout = h5::read_attr_string(file, "layout", path);
  const char* groups[3] = {"params", "optim/m", "optim/v"};
  for (const ShardBuffers& shard : mine) {
    const View1 bufs[3] = {shard.params, shard.m, shard.v};
    for (int k = 0; k < 3; ++k) {
      if (bufs[k].extent(0) == 0) continue;
      h5::Handle group = open_group(file, groups[k], path);
      auto host = Kokkos::create_mirror_view(bufs[k]);
      for (const LocalParam& p : shard.local->params()) {
        std::vector<float> global(static_cast<size_t>(p.spec->numel()));
        h5::read_floats(group, p.spec->name, p.spec->shape, global.data(), path);
        for (int64_t i = 0; i < p.numel; ++i) {
          const int64_t g = shard.local->global_index(p, i);
          host(p.offset + i) = g < 0 ? 0.0f : global[static_cast<size_t>(g)];
        }
      }
      Kokkos::deep_copy(bufs[k], host);
    }
  }
  return meta;
}

}  // namespace trident
