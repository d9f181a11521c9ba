// Autoregressive sampling with the full-context forward (no KV cache: models here are small).
#include "train/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/host_memory.hpp"
#include "io/checkpoint.hpp"
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
  if (m.vocab_size != 256)
    throw InputError(
        fmt::format("'{}' has vocab_size {}: text generation needs the byte-level "
                    "vocabulary (256)",
                    o.checkpoint, m.vocab_size));
  require_memory_to_sample(config, o.checkpoint);
  MemoryLedger ledger;
  GptStage model(m, whole_model(m), nullptr, ledger, 1, m.block_size, 1);
  load_checkpoint(o.checkpoint, {ShardBuffers{&model.local(), model.params(), {}, {}}},
                  ShardOwner{}, MPI_COMM_SELF);

  std::vector<int32_t> context;
  for (unsigned char ch : o.prompt) context.push_back(ch);
  if (context.empty()) context.push_back('\n');
  if (o.print_logits) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    model.forward(0, context.data() + context.size() - T, nullptr, 1, T);
    const size_t V = model.logits(0).size() / m.block_size;  // the padded vocabulary
    for (const float v : host_values(model.logits(0), (T - 1) * V, m.vocab_size))
      emit(fmt::format("{:.9g}\n", v));
    return;
  }
  emit(o.prompt);
  uint64_t counter = 0;
  std::vector<double> probs(m.vocab_size);
  std::vector<int> order(m.vocab_size);
  for (int i = 0; i < o.tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    const int32_t* window = context.data() + context.size() - T;
    model.forward(0, window, nullptr, 1, T);
    const size_t V = model.logits(0).size() / m.block_size;  // the padded vocabulary
    const std::vector<float> last = host_values(model.logits(0), (T - 1) * V, m.vocab_size);
    for (int v = 0; v < m.vocab_size; ++v) {
      if (!std::isfinite(last[v]))
        throw InputError(fmt::format(
            "'{}': logit {} of the token after {} is {}: the checkpoint's weights are not finite",
            o.checkpoint, v, context.size(), last[v]));
      probs[v] = last[v] / o.temperature;
    }
    std::iota(order.begin(), order.end(), 0);
    const int k = o.top_k > 0 ? std::min(o.top_k, m.vocab_size) : m.vocab_size;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return probs[a] > probs[b]; });
    const double maxv = probs[order[0]];
    double total = 0;
    for (int j = 0; j < k; ++j) total += std::exp(probs[order[j]] - maxv);
    const uint64_t bits = mix64(mix64(o.seed) ^ mix64(++counter));
    double u = static_cast<double>(bits >> 11) / 9007199254740992.0 * total;
    int chosen = order[k - 1];
    for (int j = 0; j < k; ++j) {
      u -= std::exp(probs[order[j]] - maxv);
      if (u <= 0) {
        chosen = order[j];
        break;
      }
    }
    context.push_back(chosen);
    // Only the last block_size tokens are read: the context stays bounded however many come.
    if (context.size() >= 2 * static_cast<size_t>(m.block_size))
      context.erase(context.begin(), context.end() - m.block_size);
    emit(std::string(1, static_cast<char>(chosen)));
  }
}

}  // namespace trident
