// GPT2LMHeadModel, LlamaForCausalLM and MixtralForCausalLM (config.json + safetensors) to a trident
// checkpoint and back.
#include "io/hf_models.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/output_file.hpp"
#include "core/version.hpp"
#include "io/checkpoint.hpp"
#include "io/checkpoint_tools.hpp"
#include "io/json_file.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// One trident parameter as a Hugging Face model stores it: the tensors stacked along trident's
// rows (Llama's k_proj and v_proj make trident's attn.kv, gate_proj and up_proj its mlp.fc), named
// as in the model's state dict (for GPT-2 without the "transformer." prefix GPT2LMHeadModel adds),
// and whether it is a GPT-2 Conv1D weight, stored [in, out] where trident stores [out, in].
struct HfName {
  std::vector<std::string> parts;
  bool transposed = false;
};

// A block parameter's name after "h.<layer>.": "<part>.<kind>".
std::string local_name(BlockPart part, const char* kind = "weight") {
  return std::string(name_of(part)) + "." + kind;
}

HfName gpt2_name(const std::string& trident_name) {
  using P = BlockPart;
  static const std::map<std::string, HfName> block{
      {local_name(P::kLn1), {{"ln_1.weight"}}},
      {local_name(P::kLn1, "bias"), {{"ln_1.bias"}}},
      {local_name(P::kQkv), {{"attn.c_attn.weight"}, true}},
      {local_name(P::kQkv, "bias"), {{"attn.c_attn.bias"}}},
      {local_name(P::kAttnProj), {{"attn.c_proj.weight"}, true}},
      {local_name(P::kAttnProj, "bias"), {{"attn.c_proj.bias"}}},
      {local_name(P::kLn2), {{"ln_2.weight"}}},
      {local_name(P::kLn2, "bias"), {{"ln_2.bias"}}},
      {local_name(P::kFc), {{"mlp.c_fc.weight"}, true}},
      {local_name(P::kFc, "bias"), {{"mlp.c_fc.bias"}}},
      {local_name(P::kProj), {{"mlp.c_proj.weight"}, true}},
      {local_name(P::kProj, "bias"), {{"mlp.c_proj.bias"}}}};
  if (trident_name.rfind("h.", 0) == 0) {
    const size_t dot = trident_name.find('.', 2);
    const HfName& inner = block.at(trident_name.substr(dot + 1));
    return {{trident_name.substr(0, dot + 1) + inner.parts[0]}, inner.transposed};
  }
  if (trident_name == "wte" || trident_name == "wpe") return {{trident_name + ".weight"}};
  return {{trident_name}};  // ln_f.weight, ln_f.bias
}

// LlamaForCausalLM's names (MixtralForCausalLM's for an MoE layer, whose experts are stacked in
// trident along a leading dimension of E); its Linear weights are [out, in], as trident's.
HfName llama_name(const ModelConfig& m, const std::string& trident_name) {
  using P = BlockPart;
  static const std::map<std::string, std::vector<std::string>> block{
      {local_name(P::kLn1), {"input_layernorm.weight"}},
      {local_name(P::kQ), {"self_attn.q_proj.weight"}},
      {local_name(P::kKv), {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
      {local_name(P::kAttnProj), {"self_attn.o_proj.weight"}},
      {local_name(P::kLn2), {"post_attention_layernorm.weight"}},
      {local_name(P::kFc), {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},
      {local_name(P::kProj), {"mlp.down_proj.weight"}},
      {local_name(P::kRouter), {"block_sparse_moe.gate.weight"}}};
  // Each expert's w1 (gate) and w3 (up) rows make its block of experts.fc; w2 (down) experts.proj.
  static const std::map<std::string, std::vector<std::string>> experts{
      {local_name(P::kExpertsFc), {"w1.weight", "w3.weight"}},
      {local_name(P::kExpertsProj), {"w2.weight"}}};
  if (trident_name.rfind("h.", 0) == 0) {
    const size_t dot = trident_name.find('.', 2);
    const std::string layer = "model.layers." + trident_name.substr(2, dot - 2) + ".";
    const std::string local = trident_name.substr(dot + 1);
    HfName out;
    if (const auto e = experts.find(local); e != experts.end()) {
      for (int expert = 0; expert < m.moe.n_experts; ++expert)
        for (const std::string& part : e->second)
          out.parts.push_back(layer + "block_sparse_moe.experts." + std::to_string(expert) + "." +
                              part);
      return out;
    }
    const auto b = block.find(local);
    if (b == block.end())  // shared experts, a sigmoid router: refused before names are asked
      throw std::logic_error("no Hugging Face name for " + trident_name);
    for (const std::string& part : b->second) out.parts.push_back(layer + part);
    return out;
  }
  if (trident_name == "wte") return {{"model.embed_tokens.weight"}};
  if (trident_name == "lm_head") return {{"lm_head.weight"}};
  return {{"model.norm.weight"}};  // ln_f.weight
}

HfName hf_name(const ModelConfig& m, const std::string& trident_name) {
  return m.llama() ? llama_name(m, trident_name) : gpt2_name(trident_name);
}

// The Hugging Face class a model is exported as and read from.
const char* architecture(const ModelConfig& m) {
  if (!m.llama()) return "GPT2LMHeadModel";
  return m.moe.enabled() ? "MixtralForCausalLM" : "LlamaForCausalLM";
}

// The shape each part of a parameter has in the Hugging Face file: an equal block of its rows
// (a stack of experts [E, rows, cols] counts its leading dimensions as rows).
std::vector<int64_t> hf_shape(const ParamSpec& spec, const HfName& hf) {
  std::vector<int64_t> shape = spec.shape;
  if (shape.size() > 2) shape = {spec.numel() / shape.back(), shape.back()};
  shape[0] /= static_cast<int64_t>(hf.parts.size());
  if (hf.transposed) std::swap(shape[0], shape[1]);
  return shape;
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
  return read_json_object(path.string());
}

// config[key] as T (the fallback when absent or null); InputError naming the file and the key
// when it holds another JSON type (the library's own error names neither).
template <class T>
T config_value(const Json& config, const std::string& key, const T& fallback,
               const fs::path& path) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const Json& v = config[key];
  const char* want = std::is_same_v<T, bool>          ? "true or false"
                     : std::is_same_v<T, std::string> ? "a string"
                                                      : "a number";
  const bool ok = std::is_same_v<T, bool>          ? v.is_boolean()
                  : std::is_same_v<T, std::string> ? v.is_string()
                                                   : v.is_number();
  if (!ok)
    throw InputError(fmt::format("'{}': {} is {} ({}), not {}", path.string(), key, v.dump(),
                                 v.type_name(), want));
  return v.get<T>();
}

// An integer key of config.json in [1, 2^31).
int config_int(const Json& config, const std::string& key, const fs::path& path) {
  if (!config.contains(key) || !config[key].is_number_integer() || config[key].get<int64_t>() < 1 ||
      config[key].get<int64_t>() > (int64_t{1} << 30))
    throw InputError(fmt::format("'{}': {} must be a positive integer", path.string(), key));
  return config[key].get<int>();
}

// GPT2LMHeadModel's config.json, checked against what trident's GPT-2 computes.
ModelConfig gpt2_model(const Json& config, const fs::path& path) {
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
  const std::string activation =
      config_value<std::string>(config, "activation_function", "gelu_new", path);
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw refuse(
        fmt::format("activation_function '{}' is not GELU's tanh approximation", activation));
  const double eps = config_value<double>(config, "layer_norm_epsilon", 1e-5, path);
  if (std::abs(eps - 1e-5) > 1e-12)
    throw refuse(fmt::format("layer_norm_epsilon {} is not 1e-5", eps));
  if (config.contains("n_inner") && !config["n_inner"].is_null() &&
      config["n_inner"] != Json(4 * m.n_embd))
    throw refuse(fmt::format("n_inner {} is not 4 x n_embd", config["n_inner"].dump()));
  if (!config_value<bool>(config, "tie_word_embeddings", true, path))
    throw refuse("tie_word_embeddings is false");
  if (config_value<bool>(config, "scale_attn_by_inverse_layer_idx", false, path))
    throw refuse("scale_attn_by_inverse_layer_idx is set");
  if (!config_value<bool>(config, "scale_attn_weights", true, path))
    throw refuse("scale_attn_weights is false");
  if (m.n_embd % m.n_head != 0)
    throw InputError(fmt::format("'{}': n_embd {} is not a multiple of n_head {}", path.string(),
                                 m.n_embd, m.n_head));
  return m;
}

// LlamaForCausalLM's config.json, checked against what trident's Llama computes.
ModelConfig llama_model(const Json& config, const fs::path& path) {
  ModelConfig m;
  m.name = "hf-llama";
  m.family = ModelFamily::kLlama;
  m.n_layer = config_int(config, "num_hidden_layers", path);
  m.n_embd = config_int(config, "hidden_size", path);
  m.n_head = config_int(config, "num_attention_heads", path);
  m.n_kv_head = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                    ? config_int(config, "num_key_value_heads", path)
                    : m.n_head;
  m.ffn_hidden = config_int(config, "intermediate_size", path);
  m.vocab_size = config_int(config, "vocab_size", path);
  m.block_size = config_int(config, "max_position_embeddings", path);
  const auto number = [&](const char* key, double fallback) {
    if (!config.contains(key)) return fallback;
    if (!config[key].is_number() || !(config[key].get<double>() > 0))
      throw InputError(fmt::format("'{}': {} must be a positive number", path.string(), key));
    return config[key].get<double>();
  };
  m.rope_theta = number("rope_theta", 10000.0);
  m.norm_eps = number("rms_norm_eps", 1e-6);  // LlamaConfig's default
  m.tie_embeddings = config_value<bool>(config, "tie_word_embeddings", false, path);
  const auto refuse = [&](const std::string& what) {
    return InputError(
        fmt::format("'{}': {}; trident's Llama cannot compute this model", path.string(), what));
  };
  if (config_value<std::string>(config, "hidden_act", "silu", path) != "silu")
    throw refuse(fmt::format("hidden_act '{}' is not silu",
                             config_value<std::string>(config, "hidden_act", "", path)));
  if (config_value<bool>(config, "attention_bias", false, path))
    throw refuse("attention_bias is set");
  if (config_value<bool>(config, "mlp_bias", false, path)) throw refuse("mlp_bias is set");
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null())
    throw refuse(fmt::format("rope_scaling {} is set (trident's RoPE is unscaled)",
                             config["rope_scaling"].dump()));
  if (m.n_embd % m.n_head != 0)
    throw InputError(fmt::format("'{}': hidden_size {} is not a multiple of num_attention_heads {}",
                                 path.string(), m.n_embd, m.n_head));
  if (config.contains("head_dim") && !config["head_dim"].is_null() &&
      config["head_dim"] != Json(m.n_embd / m.n_head))
    throw refuse(fmt::format("head_dim {} is not hidden_size / num_attention_heads",
                             config["head_dim"].dump()));
  return m;
}

// MixtralForCausalLM's config.json: a Llama whose every MLP is a sparse MoE block of
// num_local_experts SwiGLU experts of intermediate_size, num_experts_per_tok of them per token
// by a softmax router renormalised over the chosen (trident's "softmax" router), dropless.
ModelConfig mixtral_model(const Json& config, const fs::path& path) {
  ModelConfig m = llama_model(config, path);
  m.name = "hf-mixtral";
  m.moe.n_experts = config_int(config, "num_local_experts", path);
  m.moe.top_k = config_int(config, "num_experts_per_tok", path);
  m.moe.expert_ffn_hidden = m.ffn_hidden;
  m.moe.moe_layer_every = 1;
  m.moe.router = kernels::RouterScore::kSoftmax;
  m.moe.capacity_factor = 0;
  if (m.moe.top_k > m.moe.n_experts)
    throw InputError(fmt::format("'{}': num_experts_per_tok {} exceeds num_local_experts {}",
                                 path.string(), m.moe.top_k, m.moe.n_experts));
  // Sliding-window attention differs from trident's full causal attention only past the window.
  if (config.contains("sliding_window") && !config["sliding_window"].is_null() &&
      config_int(config, "sliding_window", path) < m.block_size)
    throw InputError(fmt::format(
        "'{}': sliding_window {} is shorter than max_position_embeddings {}; trident's attention "
        "is full causal attention and cannot compute this model",
        path.string(), config["sliding_window"].dump(), m.block_size));
  return m;
}

// The model config.json describes, for the families trident computes.
ModelConfig hf_model(const fs::path& path) {
  const Json config = read_json(path);
  std::string type;
  try {
    type = config_value<std::string>(config, "model_type", "", path);
    if (type == "llama") return llama_model(config, path);
    if (type == "mixtral") return mixtral_model(config, path);
    if (type == "gpt2") return gpt2_model(config, path);
  } catch (const Json::exception& e) {  // a key of the wrong JSON type: name the file
    throw InputError(fmt::format("'{}': {}", path.string(), e.what()));
  }
  throw InputError(
      fmt::format("'{}': model_type '{}' is not supported; trident imports GPT2LMHeadModel (gpt2), "
                  "LlamaForCausalLM (llama) and MixtralForCausalLM (mixtral)",
                  path.string(), type));
}

// The dtypes trident reads; any other is refused before a byte of the tensor is read.
void require_float_dtype(const SafetensorsFile& file, const std::string& name) {
  const std::string& dtype = file.at(name).dtype;
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw InputError(fmt::format("'{}': tensor '{}' has dtype {}; trident reads F32, BF16 and F16",
                                 file.path(), name, dtype));
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
    // A single file beside an index that does not name it: two exports mixed (one killed half-way
    // over the other); reading either would give a model no one wrote.
    if (fs::exists(single) && shards.count("model.safetensors") == 0)
      throw InputError(fmt::format(
          "'{}' holds model.safetensors and an index of other files: two exports mixed; keep one "
          "(remove model.safetensors or the index and its shards)",
          dir.string()));
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

// Matches every parameter of `table` to its tensor(s) in `tensors` by name, dtype and shape, and
// refuses a tensor that is none of the model's; nothing of a tensor's size is read before all
// agree. Returns each Hugging Face part name's name in the files.
std::map<std::string, std::string> match_tensors(const std::string& dir, const ModelConfig& model,
                                                 const ParamTable& table, HfTensors& tensors) {
  // GPT2LMHeadModel's state dict prefixes "transformer."; GPT2Model's (the Hub's gpt2) does not.
  std::map<std::string, std::string> stored;  // name in the model -> name in the files
  std::set<std::string> used;
  for (const ParamSpec& spec : table.specs()) {
    const HfName hf = hf_name(model, spec.name);
    for (const std::string& part : hf.parts) {
      std::string found;
      for (const std::string& candidate : {"transformer." + part, part})
        if (tensors.where.count(candidate) && (!model.llama() || candidate == part))
          found = candidate;
      if (found.empty())
        throw InputError(
            fmt::format("'{}': tensor '{}' is missing (trident's {})", dir, part, spec.name));
      const SafeTensor& t = tensors.where[found]->at(found);
      require_float_dtype(*tensors.where[found], found);
      const std::vector<int64_t> want = hf_shape(spec, hf);
      if (t.shape != want)
        throw InputError(fmt::format("'{}': tensor '{}' has shape {}, the config gives {}",
                                     tensors.where[found]->path(), found, shape_text(t.shape),
                                     shape_text(want)));
      stored[part] = found;
      used.insert(found);
    }
  }
  const std::string embedding = hf_name(model, "wte").parts[0];
  for (const auto& [name, file] : tensors.where) {
    if (used.count(name)) continue;
    // The causal-mask buffers older transformers saved, and Llama's rotary frequencies.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
        ends_with(name, ".rotary_emb.inv_freq"))
      continue;
    if (name == "lm_head.weight" && model.tied()) {  // a saved copy of the tied head
      const std::string wte = stored.at(embedding);
      require_float_dtype(*file, name);  // before its bytes are read as floats
      if (file->at(name).shape != tensors.where[wte]->at(wte).shape ||
          to_floats(file->read(name), file->at(name).dtype) !=
              to_floats(tensors.where[wte]->read(wte), tensors.where[wte]->at(wte).dtype))
        throw InputError(
            fmt::format("'{}': lm_head.weight differs from {}: the model ties the output head "
                        "to the token embedding",
                        file->path(), wte));
      continue;
    }
    throw InputError(fmt::format("'{}': tensor '{}' is not a {} parameter", file->path(), name,
                                 architecture(model)));
  }

  return stored;
}

// The parameters of `local` (the whole model) from their tensors, into `host`; a non-finite
// weight is refused unless `allow_non_finite`.
void read_weights(const ModelConfig& model, const LocalParamTable& local, HfTensors& tensors,
                  const std::map<std::string, std::string>& stored, bool allow_non_finite,
                  const Kokkos::View<float*, Kokkos::HostSpace>& host) {
  for (const LocalParam& p : local.params()) {
    const HfName hf = hf_name(model, p.spec->name);
    std::vector<float> values;  // the parts stacked along trident's rows
    for (const std::string& part : hf.parts) {
      const std::string& name = stored.at(part);
      const SafetensorsFile& file = *tensors.where[name];
      const SafeTensor& t = file.at(name);
      std::vector<float> rows = to_floats(file.read(name), t.dtype);
      if (!allow_non_finite)
        for (size_t i = 0; i < rows.size(); ++i)
          if (!std::isfinite(rows[i]))
            throw InputError(fmt::format(
                "'{}': tensor '{}' holds {} at element {} (import with --allow-non-finite to "
                "keep it)",
                file.path(), name, rows[i], i));
      if (hf.transposed) rows = transpose(rows, t.shape[0], t.shape[1]);
      values.insert(values.end(), rows.begin(), rows.end());
    }
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t global = local.global_index(p, i);
      host(p.offset + i) = global >= 0 ? values[static_cast<size_t>(global)] : 0.0f;
    }
  }
}

}  // namespace

void import_hf(const std::string& dir, const std::string& out, bool allow_non_finite) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw InputError(fmt::format("--hf '{}' is not a directory", dir));
  const ModelConfig model = hf_model(root / "config.json");
  // The sizes validated as a config's are before anything is sized from them (2^30 layers once
  // built a 3 GB table first).
  Config config;
  config.model = model;
  config.run.name = "imported";
  config.train.seq_len = std::min(config.train.seq_len, model.block_size);
  config.parallel.dp = 1;
  config.source = (root / "config.json").string();  // what a refusal of the model names
  std::error_code ec;
  if (fs::is_regular_file(root / "tokenizer.json", ec))  // generate speaks text with it
    config.data.tokenizer = fs::canonical(root, ec).string();
  config = resolve(config, 1);
  HfTensors tensors = open_tensors(root);
  const ParamTable table(model);

  const std::map<std::string, std::string> stored = match_tensors(dir, model, table, tensors);
  const LocalParamTable local(table, model, whole_model(model));
  View1 params("imported params", local.total_numel());
  View1 moment_m("imported m", local.total_numel()), moment_v("imported v", local.total_numel());
  auto host = Kokkos::create_mirror_view(params);
  read_weights(model, local, tensors, stored, allow_non_finite, host);
  Kokkos::deep_copy(params, host);
  CheckpointMeta meta;
  meta.seed = config.run.seed;
  meta.layout = fmt::format("imported from Hugging Face {}", dir);
  meta.git_revision = git_revision();
  // The checkpoint may replace none of the files it was read from.
  std::vector<std::string> inputs{(root / "config.json").string(),
                                  (root / "model.safetensors.index.json").string()};
  for (const auto& file : tensors.files) inputs.push_back(file->path());
  save_checkpoint(out, config, meta, {ShardBuffers{&local, params, moment_m, moment_v}},
                  ShardOwner{}, MPI_COMM_SELF, {}, inputs);
  std::printf("imported %s (%s: %s, %lld parameters) into %s\n", dir.c_str(), architecture(model),
              model.shape_line().c_str(), static_cast<long long>(table.total_numel()), out.c_str());
  if (!config.data.tokenizer.empty())
    std::printf("its tokenizer: data.tokenizer = %s (generate encodes and decodes with it)\n",
                config.data.tokenizer.c_str());
}

namespace {

// A model no Hugging Face class trident writes computes: refused before anything is written.
void refuse_unexportable(const ModelConfig& m, const std::string& checkpoint) {
  if (!m.moe.enabled()) return;
  std::string why;
  if (!m.llama())
    why = "GPT-2 has no Mixture-of-Experts class";
  else if (m.moe.moe_layer_every != 1)
    why = "model.moe_layer_every is not 1 (Mixtral: every layer)";
  else if (m.moe.n_shared_experts > 0)
    why = "model.n_shared_experts > 0 (Mixtral has none)";
  else if (m.moe.router != kernels::RouterScore::kSoftmax)
    why = "model.router is not softmax (Mixtral's)";
  else if (m.moe.capacity_factor > 0)
    why = "model.capacity_factor > 0 (Mixtral is dropless)";
  if (!why.empty())
    throw InputError(
        fmt::format("'{}' holds a Mixture-of-Experts model MixtralForCausalLM cannot express: {}",
                    checkpoint, why));
}

// config.json for the checkpoint's model.
nlohmann::ordered_json hf_config(const ModelConfig& m, const std::string& dtype) {
  const std::string torch_dtype = dtype == "fp32" ? "float32" : "bfloat16";
  if (m.llama() && m.moe.enabled())
    return {{"architectures", {"MixtralForCausalLM"}},
            {"model_type", "mixtral"},
            {"vocab_size", m.vocab_size},
            {"max_position_embeddings", m.block_size},
            {"hidden_size", m.n_embd},
            {"intermediate_size", m.expert_hidden()},
            {"num_hidden_layers", m.n_layer},
            {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.kv_heads()},
            {"num_local_experts", m.moe.n_experts},
            {"num_experts_per_tok", m.moe.top_k},
            {"hidden_act", "silu"},
            {"rms_norm_eps", m.norm_eps},
            {"rope_theta", m.rope_theta},
            {"sliding_window", nullptr},
            {"router_jitter_noise", 0.0},
            {"tie_word_embeddings", m.tied()},
            {"torch_dtype", torch_dtype}};
  if (m.llama())
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", m.vocab_size},
            {"max_position_embeddings", m.block_size},
            {"hidden_size", m.n_embd},
            {"intermediate_size", m.mlp_hidden()},
            {"num_hidden_layers", m.n_layer},
            {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.kv_heads()},
            {"hidden_act", "silu"},
            {"rms_norm_eps", m.norm_eps},
            {"rope_theta", m.rope_theta},
            {"rope_scaling", nullptr},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", m.tied()},
            {"torch_dtype", torch_dtype}};
  return {{"architectures", {"GPT2LMHeadModel"}},
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
          {"torch_dtype", torch_dtype}};
}

// The directory's files from an earlier export that this one does not write: a single file's
// index and shards, or shards of another count.
// A Hugging Face tokenizer's files, copied into an export from the checkpoint's data.tokenizer.
const std::array<std::string, 3> kTokenizerFiles{"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json"};

// The tokenizer files of the checkpoint's data.tokenizer directory, as (name, text); none when it
// names none, or (said on standard error) when the directory no longer holds tokenizer.json.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const Config& config) {
  const std::string& dir = config.data.tokenizer;
  std::vector<std::pair<std::string, std::string>> files;
  if (dir.empty()) return files;
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec)) {
    std::fprintf(stderr,
                 "export: the checkpoint's data.tokenizer '%s' holds no tokenizer.json now; the "
                 "export has no tokenizer\n",
                 dir.c_str());
    return files;
  }
  for (const std::string& name : kTokenizerFiles)
    if (fs::exists(fs::path(dir) / name, ec))
      files.emplace_back(name, read_json_text((fs::path(dir) / name).string()));
  return files;
}

std::vector<fs::path> stale_export_files(const std::string& dir,
                                         const std::set<std::string>& kept) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool exported =
        name == "model.safetensors" || name == "model.safetensors.index.json" ||
        std::count(kTokenizerFiles.begin(), kTokenizerFiles.end(), name) > 0 ||
        (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
         name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
    if (exported && kept.count(name) == 0) stale.push_back(entry.path());
  }
  return stale;
}

// Writes an export into `dir` as its own: every output checked (none may be the checkpoint read)
// and written before any is renamed in; a stale index of an earlier export removed first, then the
// shards and config.json replaced, the new index last, and the earlier export's other shards
// removed. A command that fails before the renames leaves the directory as it was.
void write_export(const std::string& dir, const std::vector<std::vector<SafeTensorData>>& shards,
                  uint64_t total, const nlohmann::ordered_json& config,
                  const std::vector<std::pair<std::string, std::string>>& tokenizer,
                  const std::string& checkpoint) {
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  const std::string index_name = "model.safetensors.index.json";
  std::vector<std::string> names;
  for (size_t k = 0; k < shards.size(); ++k)
    names.push_back(shards.size() == 1
                        ? "model.safetensors"
                        : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size()));
  const auto at = [&](const std::string& name) { return (fs::path(dir) / name).string(); };
  std::vector<std::unique_ptr<OutputFile>> files;
  for (size_t k = 0; k < shards.size(); ++k) {
    files.push_back(std::make_unique<OutputFile>(at(names[k]), std::vector{checkpoint}));
    write_safetensors(*files.back(), shards[k], metadata);
  }
  OutputFile config_file(at("config.json"), {checkpoint});
  config_file.write(config.dump(2) + "\n");
  std::vector<std::string> names_kept = names;
  for (const auto& [name, text] : tokenizer) {
    files.push_back(std::make_unique<OutputFile>(at(name), std::vector{checkpoint}));
    files.back()->write(text);
    names_kept.push_back(name);
  }
  std::unique_ptr<OutputFile> index_file;
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (size_t k = 0; k < shards.size(); ++k)
      for (const SafeTensorData& t : shards[k]) index["weight_map"][t.name] = names[k];
    index_file = std::make_unique<OutputFile>(at(index_name), std::vector{checkpoint});
    index_file->write(index.dump(2) + "\n");
  }
  std::set<std::string> kept(names_kept.begin(), names_kept.end());
  if (index_file) kept.insert(index_name);
  const std::vector<fs::path> stale = stale_export_files(dir, kept);
  std::error_code ec;
  fs::remove(at(index_name), ec);  // import prefers an index: never one beside other shards
  for (auto& file : files) file->commit();
  config_file.commit();
  if (index_file) index_file->commit();
  for (const fs::path& path : stale) fs::remove(path, ec);
}

}  // namespace

void export_hf(const std::string& checkpoint, const std::string& dir, const std::string& dtype,
               uint64_t max_shard_bytes) {
  if (dtype != "fp32" && dtype != "bf16")
    throw InputError(fmt::format("--dtype '{}': choose fp32 or bf16", dtype));
  const std::string safe_dtype = dtype == "fp32" ? "F32" : "BF16";
  const CheckpointParams params(checkpoint);
  const ModelConfig& m = params.config().model;
  refuse_unexportable(m, checkpoint);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw InputError(fmt::format("--hf '{}': cannot create the directory", dir));
  // Every tensor is read (and its checksum checked) before anything is written.
  std::vector<SafeTensorData> tensors;
  uint64_t total = 0;
  for (const ParamSpec& spec : params.table().specs()) {
    const HfName hf = hf_name(m, spec.name);
    std::vector<float> values = params.read(spec.name);
    if (hf.transposed) values = transpose(values, spec.shape[0], spec.shape[1]);
    const size_t part_size = values.size() / hf.parts.size();
    for (size_t k = 0; k < hf.parts.size(); ++k) {
      const std::vector<float> part(values.begin() + k * part_size,
                                    values.begin() + (k + 1) * part_size);
      tensors.push_back({(m.llama() ? "" : "transformer.") + hf.parts[k], safe_dtype,
                         hf_shape(spec, hf), from_floats(part, safe_dtype)});
      total += tensors.back().bytes.size();
    }
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
  const auto tokenizer = tokenizer_files(params.config());
  write_export(dir, shards, total, hf_config(m, dtype), tokenizer, checkpoint);
  std::printf(
      "wrote %s: config.json and %zu safetensors file(s), %s, %.1f MiB%s\n", dir.c_str(),
      shards.size(), safe_dtype.c_str(), total / 1048576.0,
      tokenizer.empty()
          ? ""
          : fmt::format(", and the tokenizer of {}", params.config().data.tokenizer).c_str());
}

}  // namespace trident
