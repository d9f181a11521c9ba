// Expert parallelism for a layout: the ep sizes its experts and dp x tp allow, each with the
// busiest rank's memory (the stages' own buffer plans) and the all-to-all traffic of a step.
#pragma once

#include <vector>

#include "comm/grid.hpp"
#include "plan/memory_model.hpp"

namespace trident {

struct ExpertOption {
  int ep = 1;
  BusiestRank busiest;  // the rank predicted to allocate the most, and its bytes by category
  // Bytes one rank sends to the other ranks of its expert-parallel group in a step, when routing
  // spreads every token's k slots evenly over the experts: (ep - 1) / ep of its N k rows of C
  // elements, per MoE layer it holds and micro-batch, four times (to the experts and back, forward
  // and backward; six for blocks recomputed whole).
  double exchanged_bytes = 0;
};

// Every ep dividing both n_experts and dp x tp, q's other settings kept, smallest first. Empty for
// a dense model.
std::vector<ExpertOption> expert_options(const MemoryQuery& q);

}  // namespace trident
