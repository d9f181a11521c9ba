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

}  // namespace trident
