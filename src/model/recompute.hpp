// Activation recomputation policy: which activations a stage keeps for backward and which it
// recomputes from a block's input when backward reaches that block.
#pragma once

#include "core/names.hpp"

namespace trident {

enum class RecomputePolicy {
  kNone,  // keep every activation backward reads
  // Megatron's selective recomputation drops the attention probabilities [B,NH,T,T]. trident's
  // tiled attention never stores them (backward recomputes each tile from the row statistics),
  // so this keeps what kNone keeps; the planner still models it for Megatron's runs.
  kSelective,
  kFull,  // keep only each block's output; recompute the block from its input
};

struct Recompute {
  RecomputePolicy policy = RecomputePolicy::kNone;
  int layers = 0;  // kFull: recompute the first `layers` blocks of each model chunk; 0: all

  // Whether block `local_index` (0 = the chunk's first block) is recomputed whole.
  bool full_block(int local_index) const {
    return policy == RecomputePolicy::kFull && (layers == 0 || local_index < layers);
  }
};

template <>
inline constexpr std::array<Named<RecomputePolicy>, 3> kNames<RecomputePolicy>{
    {{RecomputePolicy::kNone, "none"},
     {RecomputePolicy::kSelective, "selective"},
     {RecomputePolicy::kFull, "full"}}};

}  // namespace trident
