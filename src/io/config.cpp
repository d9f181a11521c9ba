// Config schema, TOML parsing, overrides, validation and TOML serialisation.
#include "io/config.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "comm/host_comm.hpp"
#include "core/build_options.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/paths.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {
namespace {

// The largest communication or staging buffer a setting may ask for (64 GiB): a larger one is a
// typo, and converting it to an element count would overflow.
constexpr double kMaxBufferMb = 65536;

// A key whose value is one of an enum's names (or, for zero.stage, one of its numbers): typed on
// reading, so nothing after parsing compares strings.
struct Choice {
  std::function<bool(const toml::node&)> assign;  // false: not one of the valid values
  std::function<std::string()> format;            // the value as TOML
  std::string valid;                              // "one of a, b, c"
  bool integer = false;                           // given as a TOML integer, not a string
  bool boolean = false;                           // given as true or false
};

template <class E>
Choice choice(E* target) {
  return {[target](const toml::node& node) {
            return node.is_string() && parse_name(node.value<std::string>().value(), *target);
          },
          [target] {
            std::ostringstream os;
            os << toml::value<std::string>(name_of(*target));
            return os.str();
          },
          valid_names<E>(), false};
}

Choice zero_stage_choice(ZeroStage* target) {
  return {[target](const toml::node& node) {
            const int64_t v = node.value<int64_t>().value_or(-1);
            if (v < 0 || v > 3) return false;
            *target = static_cast<ZeroStage>(v);
            return true;
          },
          [target] { return std::to_string(static_cast<int>(*target)); }, "0, 1, 2 or 3", true};
}

// run.stop_signals: a comma-separated list of signal names, or "none".
Choice signal_list_choice(std::vector<StopSignal>* target) {
  return {[target](const toml::node& node) {
            if (!node.is_string()) return false;
            const std::string text = node.value<std::string>().value();
            std::vector<StopSignal> parsed;
            size_t begin = 0;
            while (text != "none" && begin <= text.size()) {
              const size_t end = std::min(text.find(',', begin), text.size());
              StopSignal s = StopSignal::kTerm;
              if (!parse_name(text.substr(begin, end - begin), s)) return false;
              parsed.push_back(s);
              begin = end + 1;
            }
            *target = parsed;
            return true;
          },
          [target] {
            std::string names;
            for (const StopSignal s : *target)
              names += (names.empty() ? "" : ",") + std::string(name_of(s));
            std::ostringstream os;
            os << toml::value<std::string>(names.empty() ? "none" : names);
            return os.str();
          },
          "a comma-separated list of " + joined_names<StopSignal>() + ", or none", false};
}

// model.tie_embeddings: true or false; unset, the family's default (printed as its value).
Choice tie_choice(ModelConfig* m) {
  return {[m](const toml::node& node) {
            if (!node.is_boolean()) return false;
            m->tie_embeddings = node.value<bool>().value();
            return true;
          },
          [m] { return std::string(m->tied() ? "true" : "false"); }, "true or false", false, true};
}

using FieldRef = std::variant<bool*, int*, int64_t*, double*, std::string*, Choice>;

struct Field {
  std::string section, key;
  FieldRef ref;
  std::string help;
  std::string path() const { return section + "." + key; }
};

// The run, model, data, batch and optimizer keys.
std::vector<Field> run_fields(Config& c) {
  return {
      {"run", "name", &c.run.name, "run name: outputs go to <out_dir>/<name>/"},
      {"run", "out_dir", &c.run.out_dir, "directory for run outputs"},
      {"run", "seed", &c.run.seed, "seed for initialisation and data order"},
      {"run", "steps", &c.run.steps, "optimizer steps"},
      {"run", "log_every", &c.run.log_every, "print a step line every N steps"},
      {"run", "eval_every", &c.run.eval_every, "validation loss every N steps (0: end only)"},
      {"run", "eval_batches", &c.run.eval_batches, "validation batches per evaluation"},
      {"run", "checkpoint_every", &c.run.checkpoint_every,
       "checkpoint every N steps and at the end (0: at the end only; -1: never)"},
      {"run", "keep_checkpoints", &c.run.keep_checkpoints,
       "keep only the newest N checkpoints (0: keep all)"},
      {"run", "async_checkpoints", &c.run.async_checkpoints,
       "copy each checkpoint to host memory and write it while the next steps run (the same "
       "files; a checkpoint counts once renamed complete)"},
      {"run", "watchdog_seconds", &c.run.watchdog_seconds,
       "abort the job, naming each rank's phase, when a rank's phase has not changed for this "
       "long (a hung collective); 0: off"},
      {"run", "flight_recorder", &c.run.flight_recorder,
       "communication operations each rank remembers and writes to <run>/flight/ when the "
       "watchdog fires, on a crash or on SIGUSR2, for `trident doctor` (0: off)"},
      {"run", "peak_tflops", &c.run.peak_tflops, "per-rank peak TFLOP/s for MFU"},
      {"run", "phase_fences", choice(&c.run.phase_fences),
       "GPU builds: fence the device at each phase change in every step (every_step: each "
       "phase's time is its own kernels') or only in a profiled step (profiled: no stalls; the "
       "other steps' phase times are when the host issued their work)"},
      {"run", "stop_signals", signal_list_choice(&c.run.stop_signals),
       "signals that stop the run after the current step with a checkpoint and exit status 4 "
       "(what Slurm sends before it kills a job): comma-separated TERM, INT, USR1, USR2, HUP, "
       "or none"},
      {"run", "max_minutes", &c.run.max_minutes,
       "wall-clock budget: stop with a checkpoint (exit status 4) when another step would not "
       "end within it; 0: none"},
      {"run", "init_from", &c.run.init_from,
       "start from this checkpoint's weights: fresh optimizer, step 0 (fine-tuning)"},
      {"model", "name", &c.model.name, "model name"},
      {"model", "family", choice(&c.model.family),
       "architecture: gpt2 (LayerNorm, learned positions, GELU, biases, tied head) or llama "
       "(RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases)"},
      {"model", "n_layer", &c.model.n_layer, "transformer blocks L"},
      {"model", "n_embd", &c.model.n_embd, "channels C"},
      {"model", "n_head", &c.model.n_head, "attention heads NH"},
      {"model", "vocab_size", &c.model.vocab_size, "vocabulary V"},
      {"model", "block_size", &c.model.block_size, "maximum sequence length"},
      {"model", "n_kv_head", &c.model.n_kv_head,
       "llama: key/value heads (grouped-query attention); 0: n_head"},
      {"model", "ffn_hidden", &c.model.ffn_hidden,
       "llama: SwiGLU width; 0: 8/3 n_embd rounded up to multiple_of"},
      {"model", "multiple_of", &c.model.multiple_of, "llama: rounding of the default ffn_hidden"},
      {"model", "rope_theta", &c.model.rope_theta, "llama: rotary embedding base"},
      {"model", "norm_eps", &c.model.norm_eps, "llama: RMSNorm epsilon"},
      {"model", "tie_embeddings", tie_choice(&c.model),
       "output head shares the token embedding (default: gpt2 true, llama false)"},
      {"model", "vocab_padding", &c.model.vocab_padding,
       "pad each rank's vocabulary slice to a multiple of this (zero rows, masked out of the "
       "loss and sampling; checkpoints hold V rows); default 128 on GPU builds, 1 on CPUs"},
      {"data", "train", &c.data.train, "training tokens (.bin)"},
      {"data", "val", &c.data.val, "validation tokens (.bin)"},
      {"data", "tokenizer", &c.data.tokenizer,
       "Hugging Face model directory whose tokenizer made the tokens; generate speaks text "
       "with it (\"\": bytes)"},
      {"train", "seq_len", &c.train.seq_len, "sequence length T"},
      {"train", "batch_size", &c.train.batch_size, "global sequences per step"},
      {"train", "micro_batch_size", &c.train.micro_batch_size,
       "sequences per rank per micro-step (0: batch_size / dp)"},
      {"optim", "lr", &c.optim.lr, "peak learning rate"},
      {"optim", "min_lr_ratio", &c.optim.min_lr_ratio, "cosine floor as a fraction of lr"},
      {"optim", "warmup_steps", &c.optim.warmup_steps, "linear warmup steps"},
      {"optim", "weight_decay", &c.optim.weight_decay, "AdamW decoupled weight decay"},
      {"optim", "beta1", &c.optim.beta1, "AdamW beta1"},
      {"optim", "beta2", &c.optim.beta2, "AdamW beta2"},
      {"optim", "eps", &c.optim.eps, "AdamW epsilon"},
      {"optim", "max_norm", &c.optim.max_norm, "global gradient-norm clip (0: off)"},
      {"optim", "lr_scaling", choice(&c.optim.lr_scaling),
       "scale lr with the global batch: none, linear, sqrt (relative to base_batch_tokens)"},
      {"optim", "base_batch_tokens", &c.optim.base_batch_tokens,
       "global batch in tokens at which optim.lr was tuned (for lr_scaling)"},
  };
}

// The layout, sharding, offload, precision, data-parallel mode and recomputation keys.
std::vector<Field> layout_fields(Config& c) {
  return {
      {"parallel", "dp", &c.parallel.dp, "data-parallel replicas (0: world size / (cp*tp*pp))"},
      {"parallel", "cp", &c.parallel.cp,
       "context-parallel ranks: each sequence split over them in 2 cp balanced chunks"},
      {"parallel", "cp_comm", choice(&c.parallel.cp_comm),
       "how context parallelism moves keys and values: ring, allgather"},
      {"parallel", "cp_split", choice(&c.parallel.cp_split),
       "how it cuts sequences: balanced (2 cp causal chunks), contiguous (imbalance studies)"},
      {"parallel", "tp", &c.parallel.tp, "tensor-parallel ranks"},
      {"parallel", "pp", &c.parallel.pp, "pipeline-parallel ranks"},
      {"parallel", "ep", &c.parallel.ep,
       "expert-parallel ranks, folded onto dp x tp (each holds n_experts / ep experts)"},
      {"parallel", "schedule", choice(&c.parallel.schedule),
       "pipeline schedule: gpipe, 1f1b, interleaved, zb_h1"},
      {"parallel", "virtual_stages", &c.parallel.virtual_stages,
       "model chunks per pipeline rank (interleaved schedule)"},
      {"parallel", "sequence_parallel", &c.parallel.sequence_parallel,
       "split LayerNorm and residual activations along the sequence over tp (Korthikanti et al. "
       "2022)"},
      {"parallel", "dp_bucket_mb", &c.parallel.dp_bucket_mb,
       "gradient all-reduce bucket size over dp, MiB"},
      {"parallel", "backend_tp", choice(&c.parallel.backend_tp),
       "tensor-parallel collectives: auto, mpi, nccl (auto: NCCL on node-local GPU axes)"},
      {"parallel", "backend_dp", choice(&c.parallel.backend_dp),
       "data-parallel collectives: auto, mpi, nccl"},
      {"parallel", "backend_pp", choice(&c.parallel.backend_pp), "pipeline send/recv: auto, mpi"},
      {"zero", "stage", zero_stage_choice(&c.zero.stage),
       "ZeRO stage: 0 replicated; sharded over dp: 1 optimizer states, 2 + gradients, 3 + "
       "parameters"},
      {"offload", "optimizer", choice(&c.offload.optimizer),
       "optimizer states: none, host (device builds), nvme (files under nvme_dir)"},
      {"offload", "params", choice(&c.offload.params),
       "ZeRO-3 parameter shards: none or nvme (needs optimizer = nvme)"},
      {"offload", "nvme_dir", &c.offload.nvme_dir, "directory for nvme-offloaded states"},
      {"offload", "buffer_mb", &c.offload.buffer_mb,
       "resident buffer per moment while streaming from nvme, MiB"},
      {"precision", "compute", choice(&c.precision.compute),
       "fp32, or bf16 / fp16 parameters and activations (fp32 arithmetic, gradients and master "
       "weights)"},
      {"precision", "fp32_matmul", choice(&c.precision.fp32_matmul),
       "GPU GEMMs of fp32 runs: ieee (exact fp32) or tf32 (tensor cores, operands rounded to "
       "TF32); 16-bit runs multiply in bf16 / fp16 on tensor cores, CPUs always in fp32"},
      {"precision", "grad_reduce", choice(&c.precision.grad_reduce),
       "format of the data-parallel gradient reduction: fp32, bf16, fp16"},
      {"precision", "loss_scale", &c.precision.loss_scale, "fp16: initial dynamic loss scale"},
      {"precision", "growth_interval", &c.precision.growth_interval,
       "fp16: steps without overflow before the loss scale doubles"},
      {"precision", "backoff", &c.precision.backoff,
       "fp16: factor applied to the loss scale on overflow"},
      {"precision", "hysteresis", &c.precision.hysteresis,
       "fp16: overflowing steps (each skipped) before the scale is lowered"},
      {"dp", "sync", choice(&c.dp.sync),
       "data-parallel updates: sync, async (gradients applied one step late, the reduction "
       "overlapping the next step), local_sgd (local steps, averaged every local_steps)"},
      {"dp", "local_steps", &c.dp.local_steps,
       "local_sgd: steps per averaging round; the round's last step is synchronous"},
      {"recompute", "policy", choice(&c.recompute.policy),
       "activation recomputation: none, selective (the same as none: the tiled attention keeps "
       "no probabilities), full (whole blocks from their input)"},
      {"recompute", "layers", &c.recompute.layers,
       "full: recompute the first N blocks of each stage (each model chunk under interleaving; "
       "0: all)"},
      {"attention", "kernel", choice(&c.attention.kernel),
       "GPU builds: auto (cuDNN's fused flash attention where it takes the shape, else the tiled "
       "attention, saying why once), cudnn (or an error saying why not), tiled; host builds run "
       "the tiled attention and refuse cudnn"},
      {"attention", "tile_rows", &c.attention.tile_rows,
       "query rows per attention block (0: the build's default, 32 on CPUs, the whole sequence "
       "up to 1024 on GPUs); a smaller block takes less scratch, more launches on GPUs"},
      {"attention", "tile_keys", &c.attention.tile_keys,
       "keys per attention tile (0: the build's default, 256 on CPUs, 1024 on GPUs)"},
  };
}

// The Mixture-of-Experts keys (docs/moe.md).
std::vector<Field> moe_fields(Config& c) {
  MoeConfig& moe = c.model.moe;
  return {
      {"model", "n_experts", &moe.n_experts,
       "routed experts per MoE layer (0: a dense model, no MoE)"},
      {"model", "top_k", &moe.top_k, "experts each token is sent to"},
      {"model", "expert_ffn_hidden", &moe.expert_ffn_hidden,
       "an expert's MLP width (0: the dense MLP's)"},
      {"model", "n_shared_experts", &moe.n_shared_experts,
       "experts every token also runs (one dense MLP of this many experts' width)"},
      {"model", "moe_layer_every", &moe.moe_layer_every,
       "layer l is an MoE layer when l % moe_layer_every == 0 (1: every layer)"},
      {"model", "router", choice(&moe.router),
       "router scores: softmax (over all experts, top-k renormalised; Mixtral) or sigmoid (per "
       "expert, the top-k normalised; DeepSeek-V3)"},
      {"model", "capacity_factor", &moe.capacity_factor,
       "0: dropless; else each expert keeps ceil(T k / E x factor) slots of a micro-batch"},
      {"model", "drop_policy", choice(&moe.drop_policy),
       "slots an expert over capacity keeps: probs (its highest scores) or position (first "
       "choices before second, then token order)"},
      {"train", "aux_loss_coeff", &c.train.aux_loss_coeff,
       "load-balancing loss coefficient: coeff x E x sum_i f_i P_i, summed over MoE layers "
       "(Hugging Face's Mixtral value is top_k times this loss)"},
      {"train", "z_loss_coeff", &c.train.z_loss_coeff,
       "router z-loss coefficient: coeff x mean logsumexp(logits)^2"},
      {"train", "expert_bias_rate", &c.train.expert_bias_rate,
       "aux-loss-free balance: each step, expert bias += rate x sign(mean load - load) (0: off)"},
  };
}

// Every key, each section's together in the order its first key comes (what to_toml writes).
std::vector<Field> schema(Config& c) {
  std::vector<Field> fields = run_fields(c);
  for (Field& f : layout_fields(c)) fields.push_back(std::move(f));
  for (Field& f : moe_fields(c)) fields.push_back(std::move(f));
  std::vector<std::string> sections;
  for (const Field& f : fields)
    if (std::find(sections.begin(), sections.end(), f.section) == sections.end())
      sections.push_back(f.section);
  auto rank = [&](const Field& f) {
    return std::find(sections.begin(), sections.end(), f.section) - sections.begin();
  };
  std::stable_sort(fields.begin(), fields.end(),
                   [&](const Field& a, const Field& b) { return rank(a) < rank(b); });
  return fields;
}

std::string valid_keys(const std::vector<Field>& fields, const std::string& section) {
  std::string out;
  for (const auto& f : fields)
    if (f.section == section) out += (out.empty() ? "" : ", ") + f.key;
  return out;
}

std::string valid_sections(const std::vector<Field>& fields) {
  std::string out;
  for (const auto& f : fields)
    if (out.find("[" + f.section + "]") == std::string::npos)
      out += (out.empty() ? "" : ", ") + ("[" + f.section + "]");
  return out;
}

// Whether the value is written as a TOML string (and may be given bare to --set).
bool is_string_valued(const FieldRef& ref) {
  if (const Choice* c = std::get_if<Choice>(&ref)) return !c->integer && !c->boolean;
  return std::holds_alternative<std::string*>(ref);
}

const char* type_name(const FieldRef& ref) {
  if (is_string_valued(ref)) return "a string";
  if (std::holds_alternative<double*>(ref)) return "a number";
  const Choice* choice = std::get_if<Choice>(&ref);
  if (std::holds_alternative<bool*>(ref) || (choice && choice->boolean)) return "true or false";
  return "an integer";
}

void assign(const Field& f, const toml::node& node, const std::string& origin) {
  const std::string where = fmt::format("{}: key '{}'", origin, f.path());
  if (const Choice* c = std::get_if<Choice>(&f.ref)) {
    if (c->boolean ? !node.is_boolean() : c->integer ? !node.is_integer() : !node.is_string())
      throw InputError(where + " must be " + type_name(f.ref));
    if (!c->assign(node)) {
      std::ostringstream value;
      if (c->integer)
        value << node.value<int64_t>().value();
      else
        value << "'" << node.value<std::string>().value() << "'";
      throw InputError(
          fmt::format("{}: {} = {} must be {}", origin, f.path(), value.str(), c->valid));
    }
    return;
  }
  std::visit(
      [&](const auto& ref) {
        using T = std::remove_pointer_t<std::decay_t<decltype(ref)>>;
        if constexpr (std::is_same_v<T, Choice>) {
          return;  // handled above
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) throw InputError(where + " must be a string");
          *ref = node.value<std::string>().value();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!node.is_number()) throw InputError(where + " must be a number");
          const double v = node.value<double>().value();
          // No setting means anything at infinity or NaN; each key's own range follows.
          if (!std::isfinite(v))
            throw InputError(fmt::format("{} = {} must be a finite number", where, v));
          *ref = v;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) throw InputError(where + " must be true or false");
          *ref = node.value<bool>().value();
        } else {
          if (!node.is_integer()) throw InputError(where + " must be an integer");
          const int64_t v = node.value<int64_t>().value();
          if constexpr (std::is_same_v<T, int>) {
            if (v < INT32_MIN || v > INT32_MAX)
              throw InputError(where + fmt::format(" = {} is out of range", v));
          }
          *ref = static_cast<T>(v);
        }
      },
      f.ref);
}

void apply_table(Config& c, const toml::table& root, const std::string& origin,
                 const std::string& base_dir, bool allow_from) {
  auto fields = schema(c);
  // A model preset first, so the run file's own [model] keys override it.
  if (const toml::node* model = root.get("model"); model && model->is_table()) {
    if (const toml::node* from = model->as_table()->get("from")) {
      if (!allow_from || !from->is_string())
        throw InputError(origin + ": key 'model.from' must be a string path to a model file");
      const std::string path =
          (std::filesystem::path(base_dir) / from->value<std::string>().value()).string();
      if (const std::string why = not_a_file(path); !why.empty())
        throw InputError(fmt::format("{} (model.from): model file '{}' {}", origin, path, why));
      toml::table preset;
      try {
        preset = toml::parse_file(path);
      } catch (const toml::parse_error& e) {
        throw InputError(fmt::format("{} (model.from): cannot read model file '{}': {}", origin,
                                     path, e.description()));
      }
      apply_table(c, preset, path, std::filesystem::path(path).parent_path().string(), false);
    }
  }
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (!section_node.is_table())
      throw InputError(fmt::format("{}: '{}' must be a table [{}]; valid tables: {}", origin,
                                   section, section, valid_sections(fields)));
    if (valid_keys(fields, section).empty())
      throw InputError(fmt::format("{}: unknown table [{}]; valid tables: {}", origin, section,
                                   valid_sections(fields)));
    for (const auto& [key_node, value] : *section_node.as_table()) {
      const std::string key(key_node.str());
      if (section == "model" && key == "from") continue;
      const Field* field = nullptr;
      for (const auto& f : fields)
        if (f.section == section && f.key == key) field = &f;
      if (!field)
        throw InputError(fmt::format("{}: unknown key '{}.{}'; valid keys in [{}]: {}", origin,
                                     section, key, section, valid_keys(fields, section)));
      assign(*field, value, origin);
    }
  }
}

void apply_override(Config& c, const std::string& assignment) {
  const auto eq = assignment.find('=');
  const auto dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw InputError(
        fmt::format("--set '{}': expected section.key=value, e.g. run.steps=10", assignment));
  const std::string section = assignment.substr(0, dot);
  const std::string key = assignment.substr(dot + 1, eq - dot - 1);
  std::string value = assignment.substr(eq + 1);
  auto fields = schema(c);
  const Field* field = nullptr;
  for (const auto& f : fields)
    if (f.section == section && f.key == key) field = &f;
  if (!field) {
    const std::string keys = valid_keys(fields, section);
    throw InputError(keys.empty()
                         ? fmt::format("--set: unknown table [{}]; valid tables: {}", section,
                                       valid_sections(fields))
                         : fmt::format("--set: unknown key '{}.{}'; valid keys in [{}]: {}",
                                       section, key, section, keys));
  }
  // Strings may be given bare on the command line; quote them for the TOML parser.
  if (is_string_valued(field->ref) && (value.empty() || value[0] != '"'))
    value = "\"" + value + "\"";
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    throw InputError(
        fmt::format("--set {}: '{}' is not {}", field->path(), value, type_name(field->ref)));
  }
  assign(*field, *parsed.get("v"), "--set");
}

std::string format_value(const FieldRef& ref) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::remove_pointer_t<std::decay_t<decltype(v)>>;
        if constexpr (std::is_same_v<T, Choice>) {
          return v.format();
        } else if constexpr (std::is_same_v<T, std::string>) {
          std::ostringstream os;
          os << toml::value<std::string>(*v);
          return os.str();
        } else if constexpr (std::is_same_v<T, double>) {
          std::string s = fmt::format("{:.17g}", *v);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (std::is_same_v<T, bool>) {
          return *v ? "true" : "false";
        } else {
          return std::to_string(*v);
        }
      },
      ref);
}

}  // namespace

namespace {

// Keys whose change alters the remaining run's arithmetic or data. Everything else is layout
// (parallel, zero, offload, recompute, micro-batch) or bookkeeping (names, logging, checkpoints).
bool changes_math(const Field& f) {
  if (f.section == "model") return f.key != "name" && f.key != "vocab_padding";
  if (f.section == "data") return f.key != "tokenizer";  // where the tokenizer is, not the ids
  if (f.section == "optim" || f.section == "dp") return true;
  if (f.section == "precision") return true;
  if (f.section == "train") return f.key != "micro_batch_size";
  // run.steps is the length of the cosine LR schedule; run.seed the data order.
  return f.section == "run" && (f.key == "seed" || f.key == "steps");
}

}  // namespace

std::vector<ConfigChange> config_changes(const Config& before, const Config& after) {
  Config a = before, b = after;
  const std::vector<Field> fa = schema(a), fb = schema(b);
  std::vector<ConfigChange> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    const std::string va = format_value(fa[i].ref), vb = format_value(fb[i].ref);
    if (va != vb) out.push_back({fa[i].path(), va, vb, changes_math(fa[i])});
  }
  return out;
}

uint64_t config_hash(const Config& c) {
  return fnv1a(c.to_toml());
}

void require_same_config(const Config& c, const HostCollectives& ranks) {
  const uint64_t h = config_hash(c);
  // Two 32-bit halves: doubles hold them exactly.
  const std::vector<double> all =
      ranks.gather({static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffu)});
  std::string differing;
  for (int r = 1; r < ranks.size() && !all.empty(); ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  differing = ranks.broadcast(differing);
  if (!differing.empty())
    throw InputError(fmt::format(
        "ranks {} hold a different configuration than rank 0 (--config, --set or the file "
        "differ between ranks); every rank of a run needs the same",
        differing));
}

std::string Config::to_toml() const {
  Config copy = *this;
  std::string out, section;
  for (const auto& f : schema(copy)) {
    if (f.section != section) {
      out += (section.empty() ? "" : "\n") + ("[" + f.section + "]\n");
      section = f.section;
    }
    out += f.key + " = " + format_value(f.ref) + "\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Config::section_values(const std::string& section,
                                                                        bool as_json) const {
  Config copy = *this;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : schema(copy)) {
    if (f.section != section) continue;
    std::string literal = format_value(f.ref);
    if (as_json) {  // the TOML scalar read back, written as JSON of its type
      const toml::table parsed = toml::parse("v = " + literal);
      const toml::node& v = *parsed.get("v");
      if (v.is_string())
        literal = nlohmann::json(v.value<std::string>().value()).dump();
      else if (v.is_floating_point())
        literal = nlohmann::json(v.value<double>().value()).dump();
    }
    out.emplace_back(f.key, literal);
  }
  return out;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config c;
  c.source = path;
  if (const std::string why = not_a_file(path); !why.empty())
    throw InputError(fmt::format("config file '{}' {} (try inputs/small.toml)", path, why));
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}:{}: TOML syntax error: {}", path, e.source().begin.line,
                                 e.source().begin.column, e.description()));
  }
  // Every other section has defaults; a model does not.
  if (!root.contains("model"))
    throw InputError(fmt::format(
        "{}: no [model] section (add one, e.g. [model] from = \"models/tiny.toml\")", path));
  apply_table(c, root, path, std::filesystem::path(path).parent_path().string(), true);
  for (const auto& o : overrides) apply_override(c, o);
  return c;
}

Config parse_config_text(const std::string& text, const std::string& origin) {
  Config c;
  c.source = origin;
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw InputError(
        fmt::format("{}: stored config is not valid TOML: {}", origin, e.description()));
  }
  apply_table(c, root, origin, ".", false);
  return c;
}

namespace {

// Throws InputError("<source>: <msg>") unless ok.
struct Checker {
  const std::string& source;
  void operator()(bool ok, const std::string& msg) const {
    if (!ok) throw InputError(source + ": " + msg);
  }
};

void validate_model_and_run(const Config& c, const Checker& require) {
  const ModelConfig& m = c.model;
  require(m.n_layer >= 1 && m.n_layer <= 1024,
          fmt::format("model.n_layer = {} must be between 1 and 1024", m.n_layer));
  require(m.n_embd >= 1 && m.n_embd <= 65536,
          fmt::format("model.n_embd = {} must be between 1 and 65536", m.n_embd));
  require(m.n_head >= 1, fmt::format("model.n_head = {} must be at least 1", m.n_head));
  require(m.n_embd % m.n_head == 0,
          fmt::format("model.n_head = {} must divide model.n_embd = {}", m.n_head, m.n_embd));
  require(m.vocab_size >= 2 && m.vocab_size <= 1 << 24,
          fmt::format("model.vocab_size = {} must be between 2 and 16777216", m.vocab_size));
  require(m.vocab_padding >= 1 && m.vocab_padding <= 65536,
          fmt::format("model.vocab_padding = {} must be between 1 (no padding) and 65536",
                      m.vocab_padding));
  if (m.llama()) {
    const int kv = m.kv_heads();
    require(m.n_kv_head >= 0 && kv <= m.n_head && m.n_head % kv == 0,
            fmt::format("model.n_kv_head = {} must divide model.n_head = {} (0: n_head)",
                        m.n_kv_head, m.n_head));
    require(m.head_size() % 2 == 0,
            fmt::format("llama: the head size n_embd / n_head = {} must be even (RoPE rotates "
                        "pairs of channels)",
                        m.head_size()));
    require(m.ffn_hidden >= 0 && m.multiple_of >= 1,
            "model.ffn_hidden must not be negative and model.multiple_of must be positive");
    require(m.ffn_hidden <= 1 << 20 && m.multiple_of <= 1 << 20,
            fmt::format("model.ffn_hidden = {} and model.multiple_of = {} must be at most 1048576",
                        m.ffn_hidden, m.multiple_of));
    require(m.rope_theta > 0, "model.rope_theta must be positive");
    require(m.norm_eps > 0 && m.norm_eps < 1, "model.norm_eps must be in (0, 1)");
  } else {
    const ModelConfig gpt2;
    require((m.n_kv_head == 0 || m.n_kv_head == m.n_head) && m.ffn_hidden == 0 &&
                m.multiple_of == gpt2.multiple_of && m.rope_theta == gpt2.rope_theta &&
                m.norm_eps == gpt2.norm_eps && m.tied(),
            "model.n_kv_head, ffn_hidden, multiple_of, rope_theta, norm_eps and tie_embeddings = "
            "false apply to model.family = 'llama' only (GPT-2 has multi-head attention, a 4C "
            "GELU MLP, learned positions, LayerNorm eps 1e-5 and a tied head)");
  }
  require(m.block_size >= 1 && m.block_size <= 1 << 20,
          fmt::format("model.block_size = {} must be between 1 and 1048576", m.block_size));
  const TrainSection& t = c.train;
  require(t.seq_len >= 1 && t.seq_len <= m.block_size,
          fmt::format("train.seq_len = {} must be between 1 and model.block_size = {}", t.seq_len,
                      m.block_size));
  require(t.batch_size >= 1, fmt::format("train.batch_size = {} must be positive", t.batch_size));
  require(c.run.steps >= 0, fmt::format("run.steps = {} must not be negative", c.run.steps));
  require(c.run.log_every >= 1, "run.log_every must be at least 1");
  require(c.run.eval_every >= 0, "run.eval_every must not be negative");
  require(c.run.eval_batches >= 1, "run.eval_batches must be at least 1");
  require(c.run.checkpoint_every >= -1,
          "run.checkpoint_every must be -1 (never), 0 (at the end) or a step interval");
  require(c.run.peak_tflops > 0, "run.peak_tflops must be positive");
  require(c.run.max_minutes >= 0 && std::isfinite(c.run.max_minutes),
          "run.max_minutes must not be negative (0: no time budget)");
  require(c.run.watchdog_seconds >= 0 && std::isfinite(c.run.watchdog_seconds),
          "run.watchdog_seconds must not be negative (0 turns the watchdog off)");
  require(c.run.flight_recorder >= 0 && c.run.flight_recorder <= (1 << 24),
          "run.flight_recorder must be between 0 (off) and 16777216 operations");
  require(c.run.keep_checkpoints >= 0,
          "run.keep_checkpoints must not be negative (0 keeps every checkpoint)");
  const std::string bad_name = path_component_problem(c.run.name);
  require(bad_name.empty(), fmt::format("run.name = '{}' {}: it must be one directory name "
                                        "inside run.out_dir",
                                        c.run.name, bad_name));
}

void validate_optim(const OptimSection& op, const Checker& require) {
  require(op.lr > 0 && std::isfinite(op.lr), fmt::format("optim.lr = {} must be positive", op.lr));
  require(op.min_lr_ratio >= 0 && op.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1]");
  require(op.warmup_steps >= 0, "optim.warmup_steps must not be negative");
  require(op.weight_decay >= 0, "optim.weight_decay must not be negative");
  require(op.beta1 >= 0 && op.beta1 < 1, "optim.beta1 must be in [0, 1)");
  require(op.beta2 >= 0 && op.beta2 < 1, "optim.beta2 must be in [0, 1)");
  require(op.eps > 0, "optim.eps must be positive");
  require(op.max_norm >= 0, "optim.max_norm must not be negative (0 disables clipping)");
  require(op.lr_scaling == LrScaling::kNone || op.base_batch_tokens > 0,
          fmt::format("optim.lr_scaling = '{}' needs optim.base_batch_tokens > 0 (the global "
                      "batch in tokens at which optim.lr was tuned)",
                      name_of(op.lr_scaling)));
  require(op.base_batch_tokens >= 0, "optim.base_batch_tokens must not be negative");
}

// The layout against the world and the model: sizes, batch split, pipeline schedule.
void validate_layout(const Config& c, int world_size, const Checker& require) {
  const ParallelSection& p = c.parallel;
  const ModelConfig& m = c.model;
  const TrainSection& t = c.train;
  require(p.tp >= 1 && p.pp >= 1 && p.dp >= 0 && p.cp >= 1,
          "parallel.dp/cp/tp/pp must be positive");
  require(p.virtual_stages >= 1, "parallel.virtual_stages must be at least 1");
  require(
      p.dp_bucket_mb > 0 && p.dp_bucket_mb <= kMaxBufferMb,
      fmt::format("parallel.dp_bucket_mb = {} must be in (0, {}]", p.dp_bucket_mb, kMaxBufferMb));
  // NCCL point-to-point has no tags: transfers between two ranks match in issue order, which the
  // pipeline's tagged, send-before-receive exchange does not guarantee (and interleaving sends
  // equal-sized activations and gradients on the same pair). Until the pipeline orders its
  // transfers for NCCL, they stay on MPI.
  require(p.backend_pp != CollectiveBackend::kNccl,
          "parallel.backend_pp = 'nccl' is not supported yet: pipeline transfers are tagged MPI "
          "messages (NCCL has no tags); use 'mpi' or 'auto'");
  // The axes named as a config uses them: cp only where it splits sequences.
  const int model_ranks = p.cp * p.tp * p.pp;
  const std::string model_axes = p.cp > 1 ? "cp*tp*pp" : "tp*pp";
  const std::string model_sizes =
      p.cp > 1 ? fmt::format("{}*{}*{}", p.cp, p.tp, p.pp) : fmt::format("{}*{}", p.tp, p.pp);
  require(world_size % model_ranks == 0,
          fmt::format("parallel.{} = {} must divide the number of MPI ranks {}", model_axes,
                      model_ranks, world_size));
  require(p.dp * model_ranks == world_size,
          fmt::format("parallel.dp*{} = {}*{} = {} must equal the number of MPI ranks {}",
                      model_axes, p.dp, model_sizes, p.dp * model_ranks, world_size));
  require(p.cp == 1 || t.seq_len % (2 * p.cp) == 0,
          fmt::format("parallel.cp = {} cuts every sequence into 2 x cp = {} chunks: train.seq_len "
                      "= {} must be divisible by {}",
                      p.cp, 2 * p.cp, t.seq_len, 2 * p.cp));
  require(t.batch_size % p.dp == 0,
          fmt::format("train.batch_size = {} must be divisible by parallel.dp = {}", t.batch_size,
                      p.dp));
  const int per_rank = t.batch_size / p.dp;
  require(t.micro_batch_size >= 1 && per_rank % t.micro_batch_size == 0,
          fmt::format("train.micro_batch_size = {} must divide batch_size / dp = {}",
                      t.micro_batch_size, per_rank));
  require(m.n_head % p.tp == 0,
          fmt::format("parallel.tp = {} must divide model.n_head = {} (heads are split across tp)",
                      p.tp, m.n_head));
  require(m.mlp_hidden() % p.tp == 0,
          fmt::format("parallel.tp = {} must divide the MLP width {} (model.{})", p.tp,
                      m.mlp_hidden(), m.llama() ? "ffn_hidden" : "n_embd x 4"));
  require(m.kv_heads() % p.tp == 0 || p.tp % m.kv_heads() == 0,
          fmt::format("parallel.tp = {} and model.n_kv_head = {}: one must divide the other (tp "
                      "splits the key/value heads, or each rank keeps the one its query heads "
                      "read)",
                      p.tp, m.kv_heads()));
  require(
      !p.sequence_parallel || (t.seq_len / p.cp) % p.tp == 0,
      fmt::format("parallel.sequence_parallel splits every sequence over parallel.tp = {}: "
                  "train.seq_len{} = {} must be divisible by it",
                  p.tp, p.cp > 1 ? fmt::format(" / parallel.cp ({} / {})", t.seq_len, p.cp) : "",
                  t.seq_len / p.cp));
  require(m.n_layer % (p.pp * p.virtual_stages) == 0,
          fmt::format("model.n_layer = {} must be divisible by parallel.pp * virtual_stages = {}",
                      m.n_layer, p.pp * p.virtual_stages));
  const int chunk_layers = m.n_layer / (p.pp * p.virtual_stages);
  require(c.recompute.layers >= 0 && c.recompute.layers <= chunk_layers,
          fmt::format("recompute.layers = {} must be between 0 (all) and the {} blocks of a "
                      "pipeline stage's model chunk",
                      c.recompute.layers, chunk_layers));
  require(c.recompute.layers == 0 || c.recompute.policy == RecomputePolicy::kFull,
          "recompute.layers applies only to recompute.policy = 'full'");
  require(c.attention.tile_rows >= 0 && c.attention.tile_keys >= 0,
          fmt::format("attention.tile_rows = {} and attention.tile_keys = {} must not be negative "
                      "(0: the build's default)",
                      c.attention.tile_rows, c.attention.tile_keys));
#if !defined(TRIDENT_GPU_BUILD)
  require(c.attention.kernel != kernels::AttentionKernel::kCudnn,
          "attention.kernel = 'cudnn' needs the CUDA build (make build-cuda): this build runs "
          "the tiled attention ('auto' or 'tiled')");
#endif
  const int micro_batches = per_rank / t.micro_batch_size;
  const std::string why =
      pipeline::validate_schedule(p.schedule, p.pp, micro_batches, p.virtual_stages);
  require(why.empty(),
          fmt::format("parallel.schedule = '{}' with pp = {}, virtual_stages = {} and "
                      "{} micro-batches per step (batch_size / dp / "
                      "micro_batch_size): {}",
                      name_of(p.schedule), p.pp, p.virtual_stages, micro_batches, why));
}

// ZeRO, offload, precision and dp synchrony: which combinations run.
void validate_data_parallel(const Config& c, const Checker& require) {
  const OffloadSection& off = c.offload;
  const int zero = static_cast<int>(c.zero.stage);
  require(off.buffer_mb > 0 && off.buffer_mb <= kMaxBufferMb,
          fmt::format("offload.buffer_mb = {} must be in (0, {}]", off.buffer_mb, kMaxBufferMb));
  // Parameters live where the compute is; only files are a further place for them.
  require(off.params != OffloadTarget::kHost, "offload.params = 'host' must be none or nvme");
  require(off.params == OffloadTarget::kNone ||
              (c.zero.stage == ZeroStage::kParameters && off.optimizer == OffloadTarget::kNvme),
          "offload.params = 'nvme' needs zero.stage = 3 (sharded parameters) and "
          "offload.optimizer = 'nvme' (the optimizer streams them)");
  std::error_code ec;
  if (off.optimizer == OffloadTarget::kNvme || off.params == OffloadTarget::kNvme)
    require(std::filesystem::is_directory(off.nvme_dir, ec),
            fmt::format("offload.nvme_dir = '{}' is not a directory (create it, or point it at "
                        "an NVMe mount)",
                        off.nvme_dir));
  const PrecisionSection& pr = c.precision;
  require(pr.grad_reduce == Precision::kFp32 || c.dp.sync != DpSync::kAsync,
          "dp.sync = 'async' reduces gradients in fp32: set precision.grad_reduce = 'fp32'");
  require(pr.loss_scale >= 1 && std::isfinite(pr.loss_scale),
          "precision.loss_scale must be at least 1");
  require(pr.growth_interval >= 1, "precision.growth_interval must be at least 1");
  require(pr.backoff > 0 && pr.backoff < 1, "precision.backoff must be in (0, 1)");
  require(pr.hysteresis >= 1, "precision.hysteresis must be at least 1");
  require(pr.compute == Precision::kFp32 || off.params == OffloadTarget::kNone,
          fmt::format("precision.compute = '{}' keeps 16-bit parameter shards in memory: "
                      "offload.params = 'nvme' streams fp32 shards; use one or the other",
                      name_of(pr.compute)));
  require(c.dp.local_steps >= 1, "dp.local_steps must be at least 1");
  // A cp rank's gradient is its chunks' share of the sequences' gradient: the cp ranks sum theirs
  // every step, and MoE routing over a sequence split across ranks is not built yet.
  require(c.parallel.cp == 1 || c.dp.sync == DpSync::kSync,
          fmt::format("parallel.cp = {} needs dp.sync = 'sync': the context-parallel ranks' "
                      "gradients are parts of one gradient, summed every step",
                      c.parallel.cp));
  require(c.parallel.cp == 1 || !c.model.moe.enabled(),
          fmt::format("parallel.cp = {} with Mixture-of-Experts layers is not supported yet: "
                      "routing and capacity would be decided per chunk, not per sequence",
                      c.parallel.cp));
  require(c.dp.sync != DpSync::kAsync || zero <= 1,
          fmt::format("dp.sync = 'async' needs zero.stage 0 or 1, not {}: ZeRO-2 and 3 "
                      "reduce-scatter gradients during backward, async reduces the whole "
                      "gradient after it",
                      zero));
  require(c.dp.sync != DpSync::kLocalSgd || zero == 0,
          fmt::format("dp.sync = 'local_sgd' needs zero.stage = 0, not {}: each replica keeps "
                      "its own optimizer states between averaging rounds",
                      zero));
}

// The Mixture-of-Experts keys against each other and the model.
void validate_moe(const Config& c, const Checker& require) {
  const MoeConfig& moe = c.model.moe;
  const TrainSection& t = c.train;
  auto finite_non_negative = [](double v) { return std::isfinite(v) && v >= 0; };
  require(moe.n_experts >= 0 && moe.n_experts <= 4096,
          fmt::format("model.n_experts = {} must be between 0 (dense) and 4096", moe.n_experts));
  require(finite_non_negative(t.aux_loss_coeff) && finite_non_negative(t.z_loss_coeff) &&
              finite_non_negative(t.expert_bias_rate),
          "train.aux_loss_coeff, z_loss_coeff and expert_bias_rate must be finite and not "
          "negative");
  if (!moe.enabled()) return;
  require(moe.top_k >= 1 && moe.top_k <= moe.n_experts,
          fmt::format("model.top_k = {} must be between 1 and model.n_experts = {}", moe.top_k,
                      moe.n_experts));
  require(moe.expert_ffn_hidden >= 0 && moe.expert_ffn_hidden <= 1 << 20,
          fmt::format("model.expert_ffn_hidden = {} must be between 0 (the dense MLP's width) and "
                      "1048576",
                      moe.expert_ffn_hidden));
  require(
      moe.n_shared_experts >= 0 && moe.n_shared_experts <= 64,
      fmt::format("model.n_shared_experts = {} must be between 0 and 64", moe.n_shared_experts));
  require(moe.moe_layer_every >= 1 && moe.moe_layer_every <= c.model.n_layer,
          fmt::format("model.moe_layer_every = {} must be between 1 and model.n_layer = {}",
                      moe.moe_layer_every, c.model.n_layer));
  require(finite_non_negative(moe.capacity_factor),
          fmt::format("model.capacity_factor = {} must be 0 (dropless) or a positive number",
                      moe.capacity_factor));
}

// Expert parallelism against the experts and the ranks it folds onto.
void validate_expert_parallel(const Config& c, const Checker& require) {
  const ParallelSection& p = c.parallel;
  const MoeConfig& moe = c.model.moe;
  require(p.ep >= 1, fmt::format("parallel.ep = {} must be at least 1", p.ep));
  if (p.ep == 1) return;
  require(moe.enabled(), fmt::format("parallel.ep = {} splits experts, but model.n_experts = 0 (a "
                                     "dense model): set parallel.ep = 1",
                                     p.ep));
  require(!moe.enabled() || moe.n_experts % p.ep == 0,
          fmt::format("parallel.ep = {} must divide model.n_experts = {} (each expert-parallel "
                      "rank holds an equal share)",
                      p.ep, moe.n_experts));
  require(p.dp < 1 || (p.dp * p.tp) % p.ep == 0,
          fmt::format("parallel.ep = {} must divide parallel.dp x tp = {} x {} (expert "
                      "parallelism folds onto the data- and tensor-parallel ranks of a stage)",
                      p.ep, p.dp, p.tp));
}

}  // namespace

Config resolve(Config c, int world_size) {
  ParallelSection& p = c.parallel;
  if (p.dp == 0 && p.tp >= 1 && p.pp >= 1 && p.cp >= 1 && world_size % (p.cp * p.tp * p.pp) == 0)
    p.dp = world_size / (p.cp * p.tp * p.pp);
  TrainSection& t = c.train;
  if (t.micro_batch_size == 0 && p.dp >= 1 && t.batch_size % p.dp == 0) {
    // One micro-batch per pipeline stage by default.
    const int per_rank = t.batch_size / p.dp;
    t.micro_batch_size = per_rank % p.pp == 0 ? per_rank / p.pp : per_rank;
  }
  validate(c, world_size);
  return c;
}

void validate_model(const Config& c) {
  const Checker require{c.source};
  validate_model_and_run(c, require);
  validate_moe(c, require);
}

void validate(const Config& c, int world_size) {
  const Checker require{c.source};
  validate_model_and_run(c, require);
  validate_moe(c, require);
  validate_optim(c.optim, require);
  validate_layout(c, world_size, require);
  validate_expert_parallel(c, require);
  validate_data_parallel(c, require);
}

}  // namespace trident
