// The typed choice of how context parallelism moves keys and values, with its config names (the
// attention itself is in context_parallel.hpp).
#pragma once

#include <array>

#include "core/names.hpp"

namespace trident {

// How keys and values reach the other ranks' queries (parallel.cp_comm): around a ring, one
// chunk in flight while the previous one is attended to (Megatron-Core, Transformer Engine,
// torchtitan), or all-gathered at once (Llama 3).
enum class CpComm { kRing, kAllgather };
template <>
inline constexpr std::array<Named<CpComm>, 2> kNames<CpComm>{
    {{CpComm::kRing, "ring"}, {CpComm::kAllgather, "allgather"}}};

// How a sequence is cut over the cp ranks (parallel.cp_split): balanced causal chunks (each rank
// an early and a late one: equal attention work), or contiguous blocks (the last rank does 2 cp - 1
// times the first's work; for studies of the imbalance).
enum class CpSplit { kBalanced, kContiguous };
template <>
inline constexpr std::array<Named<CpSplit>, 2> kNames<CpSplit>{
    {{CpSplit::kBalanced, "balanced"}, {CpSplit::kContiguous, "contiguous"}}};

}  // namespace trident
