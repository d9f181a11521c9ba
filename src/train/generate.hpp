// Sampling text from a checkpoint (temperature, top-k) so a user sees what the model learned.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 0;
};

// Returns the prompt followed by the sampled continuation (byte-level models).
std::string generate(const GenerateOptions& options);

}  // namespace trident
