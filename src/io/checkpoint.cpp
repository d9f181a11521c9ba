// Checkpoint write (temporary name, flush, rename) and validated load.
#include "io/checkpoint.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.hpp"
#include "io/hdf5.hpp"

namespace trident {
namespace {

void write_tensors(hid_t group, const ParamTable& table, const View1& flat) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), flat);
  for (const ParamSpec& p : table.specs())
    h5::write_floats(group, p.name, p.shape, host.data() + p.offset);
}

void read_tensors(hid_t group, const ParamTable& table, const View1& flat,
                  const std::string& file) {
  auto host = Kokkos::create_mirror_view(flat);
  for (const ParamSpec& p : table.specs())
    h5::read_floats(group, p.name, p.shape, host.data() + p.offset, file);
  Kokkos::deep_copy(flat, host);
}

h5::Handle open_checkpoint(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw InputError(fmt::format("checkpoint '{}' does not exist", path));
  h5::Handle file = h5::open_file_quiet(path);
  if (file < 0)
    throw InputError(
        fmt::format("checkpoint '{}' is not a readable HDF5 file (truncated or "
                    "corrupt)",
                    path));
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

}  // namespace

void save_checkpoint(const std::string& path, const Config& config, const Gpt& model,
                     const AdamW& optimizer, const CheckpointMeta& meta) {
  const std::string tmp = path + ".tmp";
  {
    h5::Handle file = h5::create_file(tmp);
    h5::write_attr(file, "format_version", kCheckpointFormatVersion);
    h5::write_attr(file, "config", config.to_toml());
    h5::write_attr(file, "step", meta.step);
    h5::write_attr(file, "data_cursor", meta.data_cursor);
    h5::write_attr(file, "seed", meta.seed);
    h5::write_attr(file, "adam_steps", static_cast<int64_t>(optimizer.steps_taken()));
    h5::write_attr(file, "layout", meta.layout);
    h5::write_attr(file, "git_revision", meta.git_revision);
    {
      h5::Handle params = h5::create_group(file, "params");
      write_tensors(params, model.table(), model.params());
    }
    h5::Handle optim = h5::create_group(file, "optim");
    h5::Handle m = h5::create_group(optim, "m");
    write_tensors(m, model.table(), optimizer.first_moment());
    h5::Handle v = h5::create_group(optim, "v");
    write_tensors(v, model.table(), optimizer.second_moment());
    TRIDENT_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  }
  std::filesystem::rename(tmp, path);
}

Config read_checkpoint_config(const std::string& path) {
  h5::Handle file = open_checkpoint(path);
  return parse_config_text(h5::read_attr_string(file, "config", path), path + " (config)");
}

CheckpointMeta load_checkpoint(const std::string& path, Gpt& model, AdamW* optimizer) {
  h5::Handle file = open_checkpoint(path);
  CheckpointMeta meta;
  meta.step = h5::read_attr_int(file, "step", path);
  meta.data_cursor = h5::read_attr_int(file, "data_cursor", path);
  meta.seed = h5::read_attr_int(file, "seed", path);
  meta.layout = h5::read_attr_string(file, "layout", path);
  {
    h5::Handle params = open_group(file, "params", path);
    read_tensors(params, model.table(), model.params(), path);
  }
  if (optimizer) {
    h5::Handle m = open_group(file, "optim/m", path);
    read_tensors(m, model.table(), optimizer->first_moment(), path);
    h5::Handle v = open_group(file, "optim/v", path);
    read_tensors(v, model.table(), optimizer->second_moment(), path);
    optimizer->set_steps_taken(static_cast<int>(h5::read_attr_int(file, "adam_steps", path)));
  }
  return meta;
}

}  // namespace trident
