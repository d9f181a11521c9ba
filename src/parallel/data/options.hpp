// The typed choices of data-parallel training: ZeRO stage, offload target, update synchrony.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>

#include "core/names.hpp"

namespace trident {

// What is sharded over the dp replicas (DeepSpeed's ZeRO stages, `[zero] stage`); each shards what
// the one below does and more.
enum class ZeroStage : int {
  kNone = 0,        // everything replicated
  kOptimizer = 1,   // AdamW moments (and fp32 master weights)
  kGradients = 2,   // + gradients, reduce-scattered during backward as they are made
  kParameters = 3,  // + parameters, gathered unit by unit just before use
};

// The gradient bucket over dp, `[parallel] dp_bucket_mb`: ZeRO 0/1 all-reduce buckets of it,
// ZeRO-2/3 reduce-scatter the large matrices' gradients in blocks of rows of about its size.
inline constexpr double kDefaultDpBucketMb = 25.0;
// Its fp32 gradient elements, at least 1.
inline size_t dp_bucket_elements(double bucket_mb) {
  return std::max<size_t>(1, static_cast<size_t>(bucket_mb * 1048576.0 / sizeof(float)));
}

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
