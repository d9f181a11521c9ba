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
  // The Hugging Face model directory whose tokenizer encodes the prompt and decodes the sample;
  // "": the checkpoint's data.tokenizer, or bytes when that is "" too.
  std::string tokenizer;
  // After the text: the prompt's and the sample's token ids.
  bool print_tokens = false;
};

// Passes the prompt, then the sample's text as it comes, to `emit`, so a long generation shows
// its text from the start; a UTF-8 character is never split between two calls. Sampling stops
// early at the tokenizer's EOS.
void generate(const GenerateOptions& options, const std::function<void(const std::string&)>& emit);

}  // namespace trident
