// Autoregressive sampling with the full-context forward (no KV cache: models here are small).
#include "train/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "io/checkpoint.hpp"
#include "model/gpt.hpp"

namespace trident {

void generate(const GenerateOptions& o, const std::function<void(const std::string&)>& emit) {
  if (o.temperature <= 0) throw InputError("--temperature must be positive");
  if (o.top_k < 0) throw InputError("--top-k must be >= 0 (0 samples from the whole vocabulary)");
  if (o.tokens < 0) throw InputError("--tokens must not be negative");
  const Config config = read_checkpoint_config(o.checkpoint);
  const ModelConfig& m = config.model;
  if (m.vocab_size != 256)
    throw InputError(
        fmt::format("'{}' has vocab_size {}: text generation needs the byte-level "
                    "vocabulary (256)",
                    o.checkpoint, m.vocab_size));
  MemoryLedger ledger;
  GptStage model(m, whole_model(m), nullptr, ledger, 1, m.block_size, 1);
  load_checkpoint(o.checkpoint, {ShardBuffers{&model.local(), model.params(), {}, {}}},
                  ShardOwner{}, MPI_COMM_SELF);

  std::vector<int32_t> context;
  for (unsigned char ch : o.prompt) context.push_back(ch);
  if (context.empty()) context.push_back('\n');
  emit(o.prompt);
  uint64_t counter = 0;
  std::vector<float> probs(m.vocab_size);
  std::vector<int> order(m.vocab_size);
  for (int i = 0; i < o.tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    const int32_t* window = context.data() + context.size() - T;
    model.forward(0, window, nullptr, 1, T);
    const size_t V = model.logits(0).size() / m.block_size;  // the padded vocabulary
    const std::vector<float> last = host_values(model.logits(0), (T - 1) * V, m.vocab_size);
    for (int v = 0; v < m.vocab_size; ++v) probs[v] = static_cast<float>(last[v] / o.temperature);
    std::iota(order.begin(), order.end(), 0);
    const int k = o.top_k > 0 ? std::min(o.top_k, m.vocab_size) : m.vocab_size;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return probs[a] > probs[b]; });
    const float maxv = probs[order[0]];
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
