// GPT2LMHeadModel (config.json + safetensors) to a trident checkpoint and back.
#include "io/hf_models.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/version.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_tools.hpp"
#include "io/safetensors.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// One trident parameter as a GPT2LMHeadModel stores it: its name there (without the
// "transformer." prefix that GPT2LMHeadModel's own state dict adds) and whether it is a Conv1D
// weight, stored [in, out] where trident stores [out, in].
struct HfName {
  std::string name;
  bool transposed = false;
};

HfName gpt2_name(const std::string& trident_name) {
  static const std::map<std::string, HfName> block{
      {"ln_1.weight", {"ln_1.weight"}},
      {"ln_1.bias", {"ln_1.bias"}},
      {"attn.qkv.weight", {"attn.c_attn.weight", true}},
      {"attn.qkv.bias", {"attn.c_attn.bias"}},
      {"attn.proj.weight", {"attn.c_proj.weight", true}},
      {"attn.proj.bias", {"attn.c_proj.bias"}},
      {"ln_2.weight", {"ln_2.weight"}},
      {"ln_2.bias", {"ln_2.bias"}},
      {"mlp.fc.weight", {"mlp.c_fc.weight", true}},
      {"mlp.fc.bias", {"mlp.c_fc.bias"}},
      {"mlp.proj.weight", {"mlp.c_proj.weight", true}},
      {"mlp.proj.bias", {"mlp.c_proj.bias"}}};
  if (trident_name.rfind("h.", 0) == 0) {
    const size_t dot = trident_name.find('.', 2);
    const HfName& inner = block.at(trident_name.substr(dot + 1));
    return {trident_name.substr(0, dot + 1) + inner.name, inner.transposed};
  }
  if (trident_name == "wte" || trident_name == "wpe") return {trident_name + ".weight"};
  return {trident_name};  // ln_f.weight, ln_f.bias
}

// The shape a tensor has in the Hugging Face file.
std::vector<int64_t> hf_shape(const ParamSpec& spec, bool transposed) {
  if (!transposed) return spec.shape;
  return {spec.shape[1], spec.shape[0]};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// [rows, cols] row-major -> [cols, rows] row-major.
std::vector<float> transpose(const std::vector<float>& in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  return out;
}

std::vector<float> to_floats(const std::vector<char>& bytes, const std::string& dtype) {
  const size_t n = bytes.size() / safetensors_dtype_bytes(dtype);
  std::vector<float> out(n);
  if (dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = dtype == "BF16" ? from_bf16(h) : from_fp16(h);
    }
  }
  return out;
}

std::vector<char> from_floats(const std::vector<float>& values, const std::string& dtype) {
  std::vector<char> bytes(values.size() * (dtype == "F32" ? 4 : 2));
  if (dtype == "F32") {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("cannot read '{}'", path.string()));
  Json json = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    throw InputError(fmt::format("'{}' is not a JSON object", path.string()));
  return json;
}

// An integer key of config.json in [1, 2^31).
int config_int(const Json& config, const std::string& key, const fs::path& path) {
  if (!config.contains(key) || !config[key].is_number_integer() || config[key].get<int64_t>() < 1 ||
      config[key].get<int64_t>() > (int64_t{1} << 30))
    throw InputError(fmt::format("'{}': {} must be a positive integer", path.string(), key));
  return config[key].get<int>();
}

// GPT2LMHeadModel's config.json, checked against what trident's GPT-2 computes.
ModelConfig gpt2_model(const fs::path& path) {
  const Json config = read_json(path);
  const std::string type = config.value("model_type", "");
  if (type != "gpt2")
    throw InputError(fmt::format(
        "'{}': model_type '{}' is not supported; trident imports GPT2LMHeadModel (gpt2)",
        path.string(), type));
  ModelConfig m;
  m.name = "hf-gpt2";
  m.n_layer = config_int(config, "n_layer", path);
  m.n_embd = config_int(config, "n_embd", path);
  m.n_head = config_int(config, "n_head", path);
  m.vocab_size = config_int(config, "vocab_size", path);
  m.block_size = config_int(config, "n_positions", path);
  const auto refuse = [&](const std::string& what) {
    return InputError(
        fmt::format("'{}': {}; trident's GPT-2 cannot compute this model", path.string(), what));
  };
  const std::string activation = config.value("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw refuse(
        fmt::format("activation_function '{}' is not GELU's tanh approximation", activation));
  const double eps = config.value("layer_norm_epsilon", 1e-5);
  if (std::abs(eps - 1e-5) > 1e-12)
    throw refuse(fmt::format("layer_norm_epsilon {} is not 1e-5", eps));
  if (config.contains("n_inner") && !config["n_inner"].is_null() &&
      config["n_inner"] != Json(4 * m.n_embd))
    throw refuse(fmt::format("n_inner {} is not 4 x n_embd", config["n_inner"].dump()));
  if (!config.value("tie_word_embeddings", true)) throw refuse("tie_word_embeddings is false");
  if (config.value("scale_attn_by_inverse_layer_idx", false))
    throw refuse("scale_attn_by_inverse_layer_idx is set");
  if (!config.value("scale_attn_weights", true)) throw refuse("scale_attn_weights is false");
  if (m.n_embd % m.n_head != 0)
    throw InputError(fmt::format("'{}': n_embd {} is not a multiple of n_head {}", path.string(),
                                 m.n_embd, m.n_head));
  return m;
}

// Every tensor of the model's safetensors file(s), by name, with the file that holds it.
struct HfTensors {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;
};

HfTensors open_tensors(const fs::path& dir) {
  HfTensors out;
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::vector<std::string> names;
  if (fs::exists(index)) {
    const Json json = read_json(index);
    if (!json.contains("weight_map") || !json["weight_map"].is_object())
      throw InputError(fmt::format("'{}' has no weight_map object", index.string()));
    std::set<std::string> shards;
    for (const auto& [tensor, file] : json["weight_map"].items()) {
      if (!file.is_string() || fs::path(file.get<std::string>()).has_parent_path())
        throw InputError(fmt::format("'{}': tensor '{}' names no file in the directory",
                                     index.string(), tensor));
      shards.insert(file.get<std::string>());
    }
    for (const std::string& shard : shards)
      out.files.push_back(std::make_unique<SafetensorsFile>((dir / shard).string()));
  } else if (fs::exists(single)) {
    out.files.push_back(std::make_unique<SafetensorsFile>(single.string()));
  } else {
    throw InputError(
        fmt::format("'{}' holds neither model.safetensors nor "
                    "model.safetensors.index.json",
                    dir.string()));
  }
  for (const auto& file : out.files)
    for (const auto& [name, tensor] : file->tensors()) {
      if (out.where.count(name))
        throw InputError(fmt::format("tensor '{}' is in both '{}' and '{}'", name,
                                     out.where[name]->path(), file->path()));
      out.where[name] = file.get();
    }
  return out;
}

}  // namespace

void import_hf(const std::string& dir, const std::string& out) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw InputError(fmt::format("--hf '{}' is not a directory", dir));
  const ModelConfig model = gpt2_model(root / "config.json");
  HfTensors tensors = open_tensors(root);
  const ParamTable table(model);

  // Every name, dtype and shape first; nothing of a tensor's size is read before all agree.
  // GPT2LMHeadModel's state dict prefixes "transformer."; GPT2Model's (the Hub's gpt2) does not.
  std::map<std::string, std::string> stored;  // trident name -> name in the files
  std::set<std::string> used;
  for (const ParamSpec& spec : table.specs()) {
    const HfName hf = gpt2_name(spec.name);
    std::string found;
    for (const std::string& candidate : {"transformer." + hf.name, hf.name})
      if (tensors.where.count(candidate)) found = candidate;
    if (found.empty())
      throw InputError(
          fmt::format("'{}': tensor '{}' is missing (trident's {})", dir, hf.name, spec.name));
    const SafeTensor& t = tensors.where[found]->at(found);
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw InputError(
          fmt::format("'{}': tensor '{}' has dtype {}; trident reads F32, BF16 and "
                      "F16",
                      tensors.where[found]->path(), found, t.dtype));
    const std::vector<int64_t> want = hf_shape(spec, hf.transposed);
    if (t.shape != want)
      throw InputError(fmt::format("'{}': tensor '{}' has shape {}, the config gives {}",
                                   tensors.where[found]->path(), found, shape_text(t.shape),
                                   shape_text(want)));
    stored[spec.name] = found;
    used.insert(found);
  }
  for (const auto& [name, file] : tensors.where) {
    if (used.count(name)) continue;
    // The causal-mask buffers older transformers saved, and the output head tied to wte.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    if (name == "lm_head.weight") {
      const std::string wte = stored.at("wte");
      if (file->at(name).shape != tensors.where[wte]->at(wte).shape ||
          to_floats(file->read(name), file->at(name).dtype) !=
              to_floats(tensors.where[wte]->read(wte), tensors.where[wte]->at(wte).dtype))
        throw InputError(
            fmt::format("'{}': lm_head.weight differs from {}: trident's GPT-2 ties "
                        "the output head to the token embedding",
                        file->path(), wte));
      continue;
    }
    throw InputError(
        fmt::format("'{}': tensor '{}' is not a GPT2LMHeadModel parameter", file->path(), name));
  }

  Config config;
  config.model = model;
  config.run.name = "imported";
  config.train.seq_len = std::min(config.train.seq_len, model.block_size);
  config.parallel.dp = 1;
  config = resolve(config, 1);
  const LocalParamTable local(table, model, whole_model(model));
  View1 params("imported params", local.total_numel());
  View1 moment_m("imported m", local.total_numel()), moment_v("imported v", local.total_numel());
  auto host = Kokkos::create_mirror_view(params);
  for (const LocalParam& p : local.params()) {
    const SafetensorsFile& file = *tensors.where[stored[p.spec->name]];
    const SafeTensor& t = file.at(stored[p.spec->name]);
    std::vector<float> values = to_floats(file.read(stored[p.spec->name]), t.dtype);
    if (gpt2_name(p.spec->name).transposed) values = transpose(values, t.shape[0], t.shape[1]);
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t global = local.global_index(p, i);
      host(p.offset + i) = global >= 0 ? values[static_cast<size_t>(global)] : 0.0f;
    }
  }
  Kokkos::deep_copy(params, host);
  CheckpointMeta meta;
  meta.seed = config.run.seed;
  meta.layout = fmt::format("imported from Hugging Face {}", dir);
  meta.git_revision = git_revision();
  save_checkpoint(out, config, meta, {ShardBuffers{&local, params, moment_m, moment_v}},
                  ShardOwner{}, MPI_COMM_SELF);
  std::printf(
      "imported %s (GPT2LMHeadModel: L=%d C=%d NH=%d V=%d block=%d, %lld parameters) into "
      "%s\n",
      dir.c_str(), model.n_layer, model.n_embd, model.n_head, model.vocab_size, model.block_size,
      static_cast<long long>(table.total_numel()), out.c_str());
}

void export_hf(const std::string& checkpoint, const std::string& dir, const std::string& dtype,
               uint64_t max_shard_bytes) {
  if (dtype != "fp32" && dtype != "bf16")
    throw InputError(fmt::format("--dtype '{}': choose fp32 or bf16", dtype));
  const std::string safe_dtype = dtype == "fp32" ? "F32" : "BF16";
  const CheckpointParams params(checkpoint);
  const ModelConfig& m = params.config().model;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw InputError(fmt::format("--hf '{}': cannot create the directory", dir));
  // Every tensor is read (and its checksum checked) before anything is written.
  std::vector<SafeTensorData> tensors;
  uint64_t total = 0;
  for (const ParamSpec& spec : params.table().specs()) {
    const HfName hf = gpt2_name(spec.name);
    std::vector<float> values = params.read(spec.name);
    if (hf.transposed) values = transpose(values, spec.shape[0], spec.shape[1]);
    tensors.push_back({"transformer." + hf.name, safe_dtype, hf_shape(spec, hf.transposed),
                       from_floats(values, safe_dtype)});
    total += tensors.back().bytes.size();
  }
  // Shards of at most max_shard_bytes (a larger tensor gets a shard of its own).
  std::vector<std::vector<SafeTensorData>> shards(1);
  uint64_t in_shard = 0;
  for (SafeTensorData& t : tensors) {
    if (!shards.back().empty() && in_shard + t.bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    in_shard += t.bytes.size();
    shards.back().push_back(std::move(t));
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], metadata);
  } else {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
      write_safetensors((fs::path(dir) / name).string(), shards[k], metadata);
      for (const SafeTensorData& t : shards[k]) index["weight_map"][t.name] = name;
    }
    std::ofstream((fs::path(dir) / "model.safetensors.index.json").string())
        << index.dump(2) << "\n";
  }
  const nlohmann::ordered_json config = {{"architectures", {"GPT2LMHeadModel"}},
                                         {"model_type", "gpt2"},
                                         {"vocab_size", m.vocab_size},
                                         {"n_positions", m.block_size},
                                         {"n_embd", m.n_embd},
                                         {"n_layer", m.n_layer},
                                         {"n_head", m.n_head},
                                         {"n_inner", nullptr},
                                         {"activation_function", "gelu_new"},
                                         {"layer_norm_epsilon", 1e-5},
                                         {"tie_word_embeddings", true},
                                         {"torch_dtype", dtype == "fp32" ? "float32" : "bfloat16"}};
  std::ofstream config_file((fs::path(dir) / "config.json").string());
  config_file << config.dump(2) << "\n";
  if (!config_file)
    throw InputError(fmt::format("cannot write '{}'", (fs::path(dir) / "config.json").string()));
  std::printf("wrote %s: config.json and %zu safetensors file(s), %s, %.1f MiB\n", dir.c_str(),
              shards.size(), safe_dtype.c_str(), total / 1048576.0);
}

}  // namespace trident
