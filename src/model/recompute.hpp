// Activation recomputation policy: which activations a stage keeps for backward and which it
// recomputes from a block's input when backward reaches that block.
#pragma once

#include <string>

namespace trident {

enum class RecomputePolicy {
  kNone,       // keep every activation backward reads
  kSelective,  // drop the attention probabilities [B,NH,T,T]; recompute them from qkv
  kFull,       // keep only each block's output; recompute the block from its input
};

struct Recompute {
  RecomputePolicy policy = RecomputePolicy::kNone;
  int layers = 0;  // kFull: recompute the first `layers` blocks of each model chunk; 0: all

  // Whether block `local_index` (0 = the chunk's first block) is recomputed whole.
  bool full_block(int local_index) const {
    return policy == RecomputePolicy::kFull && (layers == 0 || local_index < layers);
  }
  bool selective() const { return policy == RecomputePolicy::kSelective; }
};

// "none" | "selective" | "full"; false for anything else.
inline bool parse_recompute(const std::string& name, RecomputePolicy& out) {
  if (name == "none")
    out = RecomputePolicy::kNone;
  else if (name == "selective")
    out = RecomputePolicy::kSelective;
  else if (name == "full")
    out = RecomputePolicy::kFull;
  else
    return false;
  return true;
}

}  // namespace trident
