// The collectives backends a config can name per axis (auto, mpi, nccl); comm/backend.hpp builds
// them.
#pragma once

#include "core/names.hpp"

namespace trident {

// The values of parallel.backend_tp / backend_dp / backend_pp.
enum class CollectiveBackend { kAuto, kMpi, kNccl };
template <>
inline constexpr std::array<Named<CollectiveBackend>, 3> kNames<CollectiveBackend>{
    {{CollectiveBackend::kAuto, "auto"},
     {CollectiveBackend::kMpi, "mpi"},
     {CollectiveBackend::kNccl, "nccl"}}};

}  // namespace trident
