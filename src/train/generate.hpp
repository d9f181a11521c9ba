// Sampling text from a checkpoint (temperature, top-k) so a user sees what the model learned.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace trident {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 0;
  // Instead of sampling: the prompt's next-token logits, one per line (%.9g), to check a model
  // against a reference.
  bool print_logits = false;
};

// Passes the prompt, then each sampled byte as it comes, to `emit` (byte-level models), so a long
// generation shows its text from the start.
void generate(const GenerateOptions& options, const std::function<void(const std::string&)>& emit);

}  // namespace trident
