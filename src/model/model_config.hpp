// GPT model hyper-parameters and the derived quantities every layer uses.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct ModelConfig {
  std::string name = "custom";
  int n_layer = 2;       // L
  int n_embd = 64;       // C
  int n_head = 4;        // NH
  int vocab_size = 256;  // V
  int block_size = 64;   // maximum T

  int head_size() const { return n_embd / n_head; }  // HS
};

// Parameter count of the GPT-2 architecture (tied output projection).
int64_t parameter_count(const ModelConfig& m);

// Training FLOPs per token: 6 * parameters (matmuls, forward + backward) plus the attention
// score and value products, 12 * L * C * T (PaLM appendix B). Printed at start-up.
double flops_per_token(const ModelConfig& m, int T);

}  // namespace trident
