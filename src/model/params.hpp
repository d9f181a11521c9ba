// The parameter table: one row per parameter, the single source of truth for init, slicing,
// optimizer grouping, checkpoint datasets and (later) ZeRO partitioning and memory modelling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace trident {

enum class InitKind { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;            // global name, e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // global shape
  int tp_split_dim = -1;       // dimension a tensor-parallel split cuts, -1 = replicated
  int tp_split_groups = 1;  // the split dim holds this many equal blocks, each cut alike (qkv: 3)
  int layer = -1;           // -1: embeddings (first stage); n_layer: final LayerNorm (last)
  InitKind init = InitKind::kNormal;
  float init_std = 0.0f;
  bool weight_decay = false;  // matrices decay; biases and LayerNorm gains do not
  int64_t offset = 0;         // element offset in this rank's flat parameter buffer
  int64_t numel() const;
};

class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& m);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& at(const std::string& name) const;
  int64_t total_numel() const { return total_; }

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

// Counter-based initial value: a pure function of (seed, parameter name, global element
// index), so any rank can generate exactly its slice of any tensor.
float initial_value(uint64_t seed, const ParamSpec& spec, int64_t global_index);

// 64-bit hashes underneath the initialiser and the data sampler.
uint64_t hash_name(const std::string& s);
uint64_t mix64(uint64_t x);

}  // namespace trident
