// Autoregressive sampling with the full-context forward (no KV cache: models here are small).
#include "train/generate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/host_memory.hpp"
#include "io/checkpoint.hpp"
#include "io/hf_tokenizer.hpp"
#include "model/gpt.hpp"
#include "plan/memory_model.hpp"

namespace trident {

namespace {
// The stored config decides what sampling allocates: by the memory model, one sequence of
// block_size tokens on one rank, parameters and gradients without optimizer states (none is
// loaded), against the tightest host bound; refused before anything of that size is allocated.
void require_memory_to_sample(const Config& config, const std::string& checkpoint) {
  MemoryQuery q = memory_query(config);
  q.dp = q.tp = q.pp = q.ep = q.virtual_stages = 1;
  q.zero_stage = 0;
  q.offload_nvme = q.offload_params_nvme = false;
  q.micro_batch = q.micro_batches = 1;
  q.seq_len = config.model.block_size;
  const MemoryPrediction p = predict_rank_memory(q, GridCoord{});
  const double needed = p.total() - p.bytes[static_cast<int>(MemCategory::kOptimizer)] -
                        p.bytes[static_cast<int>(MemCategory::kMasterWeights)];
  for (const HostMemoryBound& bound : host_memory_bounds())
    if (needed > bound.bytes)
      throw InputError(fmt::format(
          "checkpoint '{}' holds a model (model.n_layer = {}, model.n_embd = {}, "
          "model.block_size = {}) that needs {:.1f} GiB to sample from by the memory model, more "
          "than {}",
          checkpoint, config.model.n_layer, config.model.n_embd, config.model.block_size,
          needed / 1073741824.0, bound.what));
}

// Samples the next id from the last position's logits (temperature, then top-k).
class Sampler {
 public:
  Sampler(const GenerateOptions& o, int vocab_size)
      : o_(o), probs_(vocab_size), order_(vocab_size) {}
  int32_t next(const std::vector<float>& logits, size_t position) {
    const int V = static_cast<int>(probs_.size());
    for (int v = 0; v < V; ++v) {
      if (!std::isfinite(logits[v]))
        throw InputError(fmt::format(
            "'{}': logit {} of the token after {} is {}: the checkpoint's weights are not finite",
            o_.checkpoint, v, position, logits[v]));
      probs_[v] = logits[v] / o_.temperature;
    }
    std::iota(order_.begin(), order_.end(), 0);
    const int k = o_.top_k > 0 ? std::min(o_.top_k, V) : V;
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [&](int a, int b) { return probs_[a] > probs_[b]; });
    const double maxv = probs_[order_[0]];
    double total = 0;
    for (int j = 0; j < k; ++j) total += std::exp(probs_[order_[j]] - maxv);
    const uint64_t bits = mix64(mix64(o_.seed) ^ mix64(++counter_));
    double u = static_cast<double>(bits >> 11) / 9007199254740992.0 * total;
    for (int j = 0; j < k; ++j) {
      u -= std::exp(probs_[order_[j]] - maxv);
      if (u <= 0) return order_[j];
    }
    return order_[k - 1];
  }

 private:
  const GenerateOptions& o_;
  std::vector<double> probs_;
  std::vector<int> order_;
  uint64_t counter_ = 0;
};

// The prompt's ids: its bytes, or the tokenizer's document prefix (BOS) and its tokens. An empty
// prompt starts from a newline (bytes), BOS, or EOS (a document boundary).
std::vector<uint32_t> prompt_ids(const GenerateOptions& o, HfTokenizer* tokenizer) {
  std::vector<uint32_t> ids;
  if (!tokenizer) {
    for (unsigned char ch : o.prompt) ids.push_back(ch);
    if (ids.empty()) ids.push_back('\n');
    return ids;
  }
  if (const std::string bad = utf8_problem(o.prompt); !bad.empty())
    throw InputError(fmt::format("--prompt is not UTF-8: {}", bad));
  ids = tokenizer->document_prefix();
  const std::vector<uint32_t> text = tokenizer->encode({o.prompt}).front();
  ids.insert(ids.end(), text.begin(), text.end());
  if (ids.empty() && tokenizer->eos()) ids.push_back(*tokenizer->eos());
  if (ids.empty())
    throw InputError(
        fmt::format("the tokenizer of '{}' has no BOS or EOS to start from: give "
                    "a --prompt",
                    tokenizer->dir()));
  return ids;
}

std::unique_ptr<HfTokenizer> open_tokenizer(const GenerateOptions& o, const Config& config) {
  const ModelConfig& m = config.model;
  const std::string dir = !o.tokenizer.empty() ? o.tokenizer : config.data.tokenizer;
  if (dir.empty()) {
    if (m.vocab_size != 256)
      throw InputError(fmt::format(
          "'{}' has vocab_size {} and names no tokenizer (its data.tokenizer is \"\"): give "
          "--tokenizer DIR, the Hugging Face model directory its token files were prepared with",
          o.checkpoint, m.vocab_size));
    return nullptr;
  }
  auto tokenizer = std::make_unique<HfTokenizer>(dir);
  if (tokenizer->vocab_size() > m.vocab_size)
    throw InputError(
        fmt::format("the tokenizer of '{}' has {} ids, more than the model's "
                    "vocab_size {} in '{}'",
                    dir, tokenizer->vocab_size(), m.vocab_size, o.checkpoint));
  return tokenizer;
}

std::string joined_ids(const char* what, std::vector<uint32_t>::const_iterator begin,
                       std::vector<uint32_t>::const_iterator end) {
  return fmt::format("\n{} ({}): {}", what, end - begin, fmt::join(begin, end, " "));
}

}  // namespace

void generate(const GenerateOptions& o, const std::function<void(const std::string&)>& emit) {
  // Below this, logits / temperature leave float range and sampling would read noise; greedy
  // decoding is --top-k 1.
  constexpr double kMinTemperature = 1e-6;
  if (!(o.temperature >= kMinTemperature))
    throw InputError(
        fmt::format("--temperature {} must be at least {} (for greedy decoding use --top-k 1)",
                    o.temperature, kMinTemperature));
  if (o.top_k < 0) throw InputError("--top-k must be >= 0 (0 samples from the whole vocabulary)");
  if (o.tokens < 0) throw InputError("--tokens must not be negative");
  const Config config = read_checkpoint_config(o.checkpoint);
  const ModelConfig& m = config.model;
  const std::unique_ptr<HfTokenizer> tokenizer = open_tokenizer(o, config);
  require_memory_to_sample(config, o.checkpoint);
  MemoryLedger ledger;
  GptStage model(m, whole_model(m), nullptr, ledger, 1, m.block_size, 1);
  load_checkpoint(o.checkpoint, {ShardBuffers{&model.local(), model.params(), {}, {}}},
                  ShardOwner{}, MPI_COMM_SELF);

  const std::vector<uint32_t> prompt = prompt_ids(o, tokenizer.get());
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  // The last position's logits over the model's vocabulary (not its padding).
  auto last_logits = [&] {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    model.forward(0, context.data() + context.size() - T, nullptr, 1, T);
    const size_t V = model.logits(0).size() / m.block_size;  // the padded vocabulary
    return host_values(model.logits(0), (T - 1) * V, m.vocab_size);
  };
  if (o.print_logits) {
    for (const float v : last_logits()) emit(fmt::format("{:.9g}\n", v));
    return;
  }
  emit(o.prompt);
  std::optional<TextStream> stream;
  if (tokenizer) stream.emplace(*tokenizer, prompt);
  Sampler sampler(o, m.vocab_size);
  std::vector<uint32_t> sampled;
  for (int i = 0; i < o.tokens; ++i) {
    const int32_t chosen = sampler.next(last_logits(), context.size());
    context.push_back(chosen);
    sampled.push_back(static_cast<uint32_t>(chosen));
    // Only the last block_size tokens are read: the context stays bounded however many come.
    if (context.size() >= 2 * static_cast<size_t>(m.block_size))
      context.erase(context.begin(), context.end() - m.block_size);
    if (tokenizer && tokenizer->eos() && static_cast<uint32_t>(chosen) == *tokenizer->eos()) break;
    emit(stream ? stream->push(static_cast<uint32_t>(chosen))
                : std::string(1, static_cast<char>(chosen)));
  }
  if (stream) emit(stream->finish());
  if (o.print_tokens) {
    emit(joined_ids("prompt tokens", prompt.begin(), prompt.end()));
    emit(joined_ids("sampled tokens", sampled.begin(), sampled.end()));
  }
}

}  // namespace trident
