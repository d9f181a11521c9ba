// The typed choices of data-parallel training: ZeRO stage, offload target, update synchrony.
#pragma once

#include <array>

#include "core/names.hpp"

namespace trident {

// What is sharded over the dp replicas (DeepSpeed's ZeRO stages, `[zero] stage`); each shards what
// the one below does and more.
enum class ZeroStage : int {
  kNone = 0,        // everything replicated
  kOptimizer = 1,   // AdamW moments (and fp32 master weights)
  kGradients = 2,   // + gradients, reduce-scattered unit by unit during backward
  kParameters = 3,  // + parameters, gathered unit by unit just before use
};

enum class OffloadTarget { kNone, kHost, kNvme };
template <>
inline constexpr std::array<Named<OffloadTarget>, 3> kNames<OffloadTarget>{
    {{OffloadTarget::kNone, "none"},
     {OffloadTarget::kHost, "host"},
     {OffloadTarget::kNvme, "nvme"}}};

// sync: gradients all-reduced every step. async: a step applies the gradient whose reduction
// overlapped it (staleness 1). local_sgd: replicas step on their own gradients and are averaged
// every dp.local_steps steps.
enum class DpSync { kSync, kAsync, kLocalSgd };
template <>
inline constexpr std::array<Named<DpSync>, 3> kNames<DpSync>{
    {{DpSync::kSync, "sync"}, {DpSync::kAsync, "async"}, {DpSync::kLocalSgd, "local_sgd"}}};

}  // namespace trident
