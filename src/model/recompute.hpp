// Activation recomputation policy: which activations a stage keeps for backward and which it
// recomputes from a block's input when backward reaches that block.
#pragma once

#include "core/names.hpp"

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

template <>
inline constexpr std::array<Named<RecomputePolicy>, 3> kNames<RecomputePolicy>{
    {{RecomputePolicy::kNone, "none"},
     {RecomputePolicy::kSelective, "selective"},
     {RecomputePolicy::kFull, "full"}}};

}  // namespace trident
