// Timings file implementation: extendible datasets, one row per step.
#include "io/timings.hpp"

#include <map>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"

namespace trident {
namespace {

// Each dataset's units, stored as its `units` attribute: "1" for a plain number.
const char* units_of(const std::string& name) {
  static const std::map<std::string, const char*> units{{"step", "step"},
                                                        {"loss", "nats per token"},
                                                        {"val_loss", "nats per token"},
                                                        {"lr", "1"},
                                                        {"grad_norm", "1"},
                                                        {"loss_scale", "1"},
                                                        {"skipped", "1"},
                                                        {"tokens", "tokens"},
                                                        {"step_seconds_max", "s"},
                                                        {"step_seconds_min", "s"},
                                                        {"bubble", "1"},
                                                        {"moe_aux_loss", "1"},
                                                        {"moe_z_loss", "1"},
                                                        {"moe_dropped_fraction", "1"},
                                                        {"moe_layer_aux_loss", "1"},
                                                        {"moe_layer_z_loss", "1"},
                                                        {"moe_layer_dropped_fraction", "1"},
                                                        {"moe_tokens_per_expert", "slots"},
                                                        {"moe_expert_bias", "1"},
                                                        {"phase_seconds", "s"},
                                                        {"peak_memory_bytes", "bytes"},
                                                        {"peak_memory_by_category", "bytes"},
                                                        {"predicted_memory_bytes", "bytes"},
                                                        {"cp_bytes", "bytes"},
                                                        {"straggler_score", "1"},
                                                        {"step_end_unix", "s since 1970"},
                                                        {"checkpoint_seconds", "s"},
                                                        {"checkpoint_background_seconds", "s"},
                                                        {"checkpoint_saved", "1"}};
  return units.at(name);
}

void create_extendible(hid_t file, const std::string& name, std::vector<hsize_t> tail, hid_t type) {
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{64};
  for (hsize_t d : tail) {
    dims.push_back(d);
    maxdims.push_back(d);
    chunk.push_back(d);
  }
  h5::Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()),
                   H5Sclose);
  h5::Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  TRIDENT_H5(H5Pset_chunk(plist, static_cast<int>(chunk.size()), chunk.data()));
  h5::Handle dset(H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, plist, H5P_DEFAULT),
                  H5Dclose);
  TRIDENT_H5(static_cast<hid_t>(dset));
  h5::write_attr(dset, "units", std::string(units_of(name)));
  TRIDENT_H5(dset.close());
}

}  // namespace

TimingsWriter::TimingsWriter(const std::string& path, int ranks,
                             const std::map<std::string, TimingsAttribute>& attributes,
                             TimingsSegment segment, const std::vector<double>& predicted_memory,
                             const TimingsMoe& moe)
    : path_(path), file_(h5::create_file(path)), moe_(!moe.layers.empty()) {
  const h5::WritingFile writing(path_);
  for (const auto& [key, value] : attributes)
    std::visit([&, key = key](const auto& v) { h5::write_attr(file_, key, v); }, value);
  std::string phases;
  for (const char* p : kPhaseNames) phases += (phases.empty() ? "" : ",") + std::string(p);
  h5::write_attr(file_, "phases", phases);
  std::string categories;
  for (int c = 0; c < kMemCategories; ++c)
    categories += (c ? "," : "") + std::string(mem_category_name(static_cast<MemCategory>(c)));
  h5::write_attr(file_, "memory_categories", categories);
  h5::write_attr(file_, "format_version", static_cast<int64_t>(1));
  h5::write_attr(file_, "segment", static_cast<int64_t>(segment.number));
  h5::write_attr(file_, "start_step", static_cast<int64_t>(segment.start_step));
  const hsize_t r = static_cast<hsize_t>(ranks);
  create_extendible(file_, "step", {}, H5T_STD_I64LE);
  for (const char* name :
       {"loss", "val_loss", "lr", "grad_norm", "loss_scale", "step_seconds_max", "step_seconds_min",
        "bubble", "moe_aux_loss", "moe_z_loss", "moe_dropped_fraction", "step_end_unix",
        "checkpoint_seconds", "checkpoint_background_seconds"})
    create_extendible(file_, name, {}, H5T_IEEE_F64LE);
  create_extendible(file_, "tokens", {}, H5T_STD_I64LE);
  create_extendible(file_, "skipped", {}, H5T_STD_I64LE);
  create_extendible(file_, "checkpoint_saved", {}, H5T_STD_I64LE);
  create_extendible(file_, "phase_seconds", {r, static_cast<hsize_t>(kPhases)}, H5T_IEEE_F64LE);
  create_extendible(file_, "peak_memory_bytes", {r}, H5T_IEEE_F64LE);
  const hsize_t cats = static_cast<hsize_t>(kMemCategories);
  create_extendible(file_, "peak_memory_by_category", {r, cats}, H5T_IEEE_F64LE);
  create_extendible(file_, "cp_bytes", {r}, H5T_IEEE_F64LE);
  create_extendible(file_, "straggler_score", {r}, H5T_IEEE_F64LE);
  if (moe_) {
    const hsize_t layers = moe.layers.size();
    for (const char* name :
         {"moe_layer_aux_loss", "moe_layer_z_loss", "moe_layer_dropped_fraction"})
      create_extendible(file_, name, {layers}, H5T_IEEE_F64LE);
    create_extendible(file_, "moe_tokens_per_expert", {layers, static_cast<hsize_t>(moe.experts)},
                      H5T_IEEE_F64LE);
    create_extendible(file_, "moe_expert_bias", {layers, static_cast<hsize_t>(moe.experts)},
                      H5T_IEEE_F32LE);
    std::string listed;
    for (int l : moe.layers) listed += (listed.empty() ? "" : ",") + std::to_string(l);
    h5::write_attr(file_, "moe_layers", listed);
  }
  {
    const hsize_t dims[2] = {r, cats};
    h5::Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose);
    h5::Handle dset(H5Dcreate2(file_, "predicted_memory_bytes", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT),
                    H5Dclose);
    TRIDENT_H5(static_cast<hid_t>(dset));
    TRIDENT_H5(
        H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, predicted_memory.data()));
    h5::write_attr(dset, "units", std::string(units_of("predicted_memory_bytes")));
    TRIDENT_H5(dset.close());
  }
  TRIDENT_H5(H5Fflush(file_, H5F_SCOPE_GLOBAL));
}

void TimingsWriter::append_row(const std::string& name, const void* row, hid_t type) {
  h5::Handle dset(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
  TRIDENT_H5(static_cast<hid_t>(dset));
  h5::Handle space(H5Dget_space(dset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  dims[0] = rows_ + 1;
  TRIDENT_H5(H5Dset_extent(dset, dims.data()));
  h5::Handle filespace(H5Dget_space(dset), H5Sclose);
  std::vector<hsize_t> start(rank, 0), count(dims);
  start[0] = rows_;
  count[0] = 1;
  TRIDENT_H5(
      H5Sselect_hyperslab(filespace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
  h5::Handle memspace(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
  TRIDENT_H5(H5Dwrite(dset, type, memspace, filespace, H5P_DEFAULT, row));
  TRIDENT_H5(dset.close());
}

void TimingsWriter::append(const StepRecord& r) {
  const h5::WritingFile writing(path_);
  append_row("step", &r.step, H5T_NATIVE_INT64);
  append_row("loss", &r.loss, H5T_NATIVE_DOUBLE);
  append_row("val_loss", &r.val_loss, H5T_NATIVE_DOUBLE);
  append_row("lr", &r.lr, H5T_NATIVE_DOUBLE);
  append_row("grad_norm", &r.grad_norm, H5T_NATIVE_DOUBLE);
  append_row("loss_scale", &r.loss_scale, H5T_NATIVE_DOUBLE);
  append_row("skipped", &r.skipped, H5T_NATIVE_INT64);
  append_row("checkpoint_saved", &r.checkpoint_saved, H5T_NATIVE_INT64);
  append_row("step_seconds_max", &r.step_seconds_max, H5T_NATIVE_DOUBLE);
  append_row("step_seconds_min", &r.step_seconds_min, H5T_NATIVE_DOUBLE);
  append_row("bubble", &r.bubble, H5T_NATIVE_DOUBLE);
  append_row("moe_aux_loss", &r.moe_aux_loss, H5T_NATIVE_DOUBLE);
  append_row("moe_z_loss", &r.moe_z_loss, H5T_NATIVE_DOUBLE);
  append_row("moe_dropped_fraction", &r.moe_dropped_fraction, H5T_NATIVE_DOUBLE);
  append_row("step_end_unix", &r.step_end_unix, H5T_NATIVE_DOUBLE);
  append_row("checkpoint_seconds", &r.checkpoint_seconds, H5T_NATIVE_DOUBLE);
  append_row("checkpoint_background_seconds", &r.checkpoint_background_seconds, H5T_NATIVE_DOUBLE);
  append_row("tokens", &r.tokens, H5T_NATIVE_INT64);
  append_row("phase_seconds", r.phase_seconds.data(), H5T_NATIVE_DOUBLE);
  append_row("peak_memory_bytes", r.peak_mem_bytes.data(), H5T_NATIVE_DOUBLE);
  append_row("peak_memory_by_category", r.peak_mem_by_category.data(), H5T_NATIVE_DOUBLE);
  append_row("cp_bytes", r.cp_bytes.data(), H5T_NATIVE_DOUBLE);
  append_row("straggler_score", r.straggler_score.data(), H5T_NATIVE_DOUBLE);
  if (moe_) {
    append_row("moe_layer_aux_loss", r.moe_layers.aux_loss.data(), H5T_NATIVE_DOUBLE);
    append_row("moe_layer_z_loss", r.moe_layers.z_loss.data(), H5T_NATIVE_DOUBLE);
    append_row("moe_layer_dropped_fraction", r.moe_layers.dropped_fraction.data(),
               H5T_NATIVE_DOUBLE);
    append_row("moe_tokens_per_expert", r.moe_layers.tokens_per_expert.data(), H5T_NATIVE_DOUBLE);
    append_row("moe_expert_bias", r.moe_layers.expert_bias.data(), H5T_NATIVE_FLOAT);
  }
  ++rows_;
  TRIDENT_H5(H5Fflush(file_, H5F_SCOPE_GLOBAL));
}

}  // namespace trident
