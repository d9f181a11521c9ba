// `trident ckpt info | verify | export`: serial readers of a checkpoint written by any layout.
#include "io/checkpoint_tools.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "core/paths.hpp"
#include "io/checkpoint.hpp"
#include "io/hdf5.hpp"
#include "model/params.hpp"

namespace trident {
namespace {

h5::Handle open_or_throw(const std::string& path) {
  read_checkpoint_config(path);  // validates existence, HDF5, format version
  return h5::open_file_quiet(path);
}

bool has_link(hid_t file, const std::string& name) {
  h5::QuietErrors quiet;
  return H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

}  // namespace

void checkpoint_info(const std::string& path, bool json) {
  const Config c = read_checkpoint_config(path);
  h5::Handle file = open_or_throw(path);
  const ParamTable table(c.model);
  const CheckpointMeta meta = read_checkpoint_meta(path);
  const uintmax_t bytes = std::filesystem::file_size(path);
  const int64_t version = h5::read_attr_int(file, "format_version", path);
  std::vector<std::string> data, groups;
  std::istringstream data_lines(meta.data_identity);
  for (std::string line; std::getline(data_lines, line);) data.push_back(line);
  for (const char* group : kCheckpointGroups)
    if (has_link(file, group)) groups.push_back(group);
  // The [model] keys a config must hold to resume from this checkpoint or start from it
  // (run.init_from): the model is compared whole.
  const auto model_keys = c.section_values("model");
  if (json) {
    nlohmann::ordered_json out = {{"path", path},
                                  {"bytes", bytes},
                                  {"format_version", version},
                                  {"parameters", table.total_numel()},
                                  {"model", nlohmann::ordered_json::object()},
                                  {"written_by", meta.layout},
                                  {"git_revision", meta.git_revision},
                                  {"step", meta.step},
                                  {"data_cursor", meta.data_cursor},
                                  {"adam_steps", meta.adam_steps},
                                  {"seed", meta.seed},
                                  {"data", data},
                                  {"groups", groups},
                                  {"precision", name_of(c.precision.compute)},
                                  {"zero_stage", static_cast<int>(c.zero.stage)},
                                  {"dp", c.parallel.dp},
                                  {"tp", c.parallel.tp},
                                  {"pp", c.parallel.pp}};
    if (c.precision.compute == Precision::kFp16) out["loss_scale"] = meta.loss_scale;
    for (const auto& [key, literal] : c.section_values("model", /*as_json=*/true))
      out["model"][key] = nlohmann::ordered_json::parse(literal);
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("checkpoint   %s (%.1f MiB on disk, format version %lld)\n", path.c_str(),
              bytes / 1048576.0, static_cast<long long>(version));
  std::printf("model        %s: %s, %lld parameters\n", c.model.name.c_str(),
              c.model.shape_line().c_str(), static_cast<long long>(table.total_numel()));
  std::printf("written by   %s (git %s)\n", meta.layout.c_str(), meta.git_revision.c_str());
  std::printf("step         %lld (data cursor %lld, AdamW steps %lld, seed %lld)\n",
              static_cast<long long>(meta.step), static_cast<long long>(meta.data_cursor),
              static_cast<long long>(meta.adam_steps), static_cast<long long>(meta.seed));
  if (c.precision.compute == Precision::kFp16) std::printf("loss scale   %g\n", meta.loss_scale);
  for (const std::string& line : data) std::printf("data         %s\n", line.c_str());
  for (const std::string& group : groups)
    std::printf("/%-11s %zu tensors, %.1f MiB fp32\n", group.c_str(), table.specs().size(),
                table.total_numel() * 4.0 / 1048576.0);
  std::printf("config       run %s, precision %s, zero %d, dp %d tp %d pp %d\n", c.run.name.c_str(),
              name_of(c.precision.compute), static_cast<int>(c.zero.stage), c.parallel.dp,
              c.parallel.tp, c.parallel.pp);
  std::printf("[model]      the keys a config must hold to resume from it or start from it:\n");
  for (const auto& [key, literal] : model_keys)
    std::printf("  %s = %s\n", key.c_str(), literal.c_str());
}

namespace {
// The checksum of a tensor's values, as the writer records it on the dataset.
uint64_t values_checksum(const std::vector<float>& data) {
  uint64_t sum = 0;
  for (size_t i = 0; i < data.size(); ++i) sum += element_hash(static_cast<int64_t>(i), data[i]);
  return sum;
}

uint64_t stored_checksum(hid_t file, const std::string& name, const std::vector<int64_t>& shape,
                         const std::string& path) {
  const h5::Handle d = h5::open_tensor(file, name, shape, path);
  return static_cast<uint64_t>(h5::read_attr_int(d, "checksum", path));
}
}  // namespace

int checkpoint_verify(const std::string& path) {
  const Config c = read_checkpoint_config(path);
  read_checkpoint_meta(path);  // what resume reads besides the tensors
  h5::Handle file = open_or_throw(path);
  const ParamTable table(c.model);
  // Every checkpoint has parameters; a gradient dump (--dump-grads) has no optimizer state.
  if (!has_link(file, "params"))
    throw InputError(fmt::format("checkpoint '{}' has no 'params' group", path));
  int failures = 0, total = 0;
  for (const char* group : kCheckpointGroups) {
    if (!has_link(file, group)) continue;
    for (const ParamSpec& spec : table.specs()) {
      ++total;
      const std::string name = std::string(group) + "/" + spec.name;
      std::vector<float> data;
      try {
        // The dataset's shape is checked before room for it is allocated.
        h5::open_tensor(file, name, spec.shape, path);
        data.resize(static_cast<size_t>(spec.numel()));
        h5::read_floats(file, name, spec.shape, data.data(), path);
      } catch (const InputError& e) {
        std::printf("FAIL %s: %s\n", name.c_str(), e.what());
        ++failures;
        continue;
      }
      const uint64_t sum = values_checksum(data);
      const uint64_t stored = stored_checksum(file, name, spec.shape, path);
      if (sum != stored) {
        std::printf("FAIL %s: checksum %016llx, stored %016llx\n", name.c_str(),
                    static_cast<unsigned long long>(sum), static_cast<unsigned long long>(stored));
        ++failures;
      }
    }
  }
  std::printf("%s: %d datasets, %d verified, %d failing\n", path.c_str(), total, total - failures,
              failures);
  return failures;
}

CheckpointParams::CheckpointParams(const std::string& path)
    : path_(path),
      config_(read_checkpoint_config(path)),
      table_(config_.model),
      file_(open_or_throw(path)) {}

std::vector<float> CheckpointParams::read(const std::string& name) const {
  const std::string dataset = "params/" + name;
  const std::vector<int64_t>& shape = table_.at(name).shape;
  h5::open_tensor(file_, dataset, shape, path_);  // shape first, then room
  std::vector<float> data(static_cast<size_t>(table_.at(name).numel()));
  h5::read_floats(file_, dataset, shape, data.data(), path_);
  if (values_checksum(data) != stored_checksum(file_, dataset, shape, path_))
    throw CorruptCheckpoint(
        fmt::format("checkpoint '{}': dataset '{}' fails its checksum", path_, dataset));
  return data;
}

void export_llmc(const std::string& path, const std::string& out) {
  // Refused before anything is read: the checkpoint itself, a directory, a missing directory.
  OutputFile file(out, {path});
  // Each tensor is checked against its stored checksum: an export of a corrupt checkpoint is
  // refused, not written (and the file that was at `out` kept).
  const CheckpointParams checkpoint(path);
  const ModelConfig& m = checkpoint.config().model;
  if (m.llama())
    throw InputError(fmt::format(
        "ckpt export --llmc: '{}' holds a Llama-family model; llm.c's format holds GPT-2 only "
        "(export it with --hf)",
        path));
  if (m.moe.enabled())
    throw InputError(fmt::format(
        "ckpt export --llmc: '{}' holds a Mixture-of-Experts GPT-2; llm.c's format holds dense "
        "GPT-2 only",
        path));
  auto read = [&](const std::string& name) { return checkpoint.read(name); };
  const int padded_v = (m.vocab_size + 127) / 128 * 128;
  int32_t header[256] = {};
  header[0] = 20240326;  // llm.c's model magic
  header[1] = 3;         // version 3: padded vocabulary
  header[2] = m.block_size;
  header[3] = m.vocab_size;
  header[4] = m.n_layer;
  header[5] = m.n_head;
  header[6] = m.n_embd;
  header[7] = padded_v;
  file.write(header, sizeof header);
  auto put = [&](const std::vector<float>& v) { file.write(v.data(), v.size() * sizeof(float)); };
  std::vector<float> wte = read("wte");
  wte.resize(static_cast<size_t>(padded_v) * m.n_embd, 0.0f);
  put(wte);
  put(read("wpe"));
  // llm.c keeps each kind of block tensor for all layers together, in this order.
  for (const BlockPart part : {BlockPart::kLn1, BlockPart::kQkv, BlockPart::kAttnProj,
                               BlockPart::kLn2, BlockPart::kFc, BlockPart::kProj})
    for (const char* kind : {"weight", "bias"})
      for (int l = 0; l < m.n_layer; ++l) put(read(block_param(l, part, kind)));
  put(read("ln_f.weight"));
  put(read("ln_f.bias"));
  file.commit();
}

}  // namespace trident
