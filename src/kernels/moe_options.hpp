// The Mixture-of-Experts choices a config names (router score, drop policy): shared by the
// routing kernels, the model config and the config parser, without Kokkos.
#pragma once

#include <array>

#include "core/names.hpp"

namespace trident::kernels {

// How logits become scores: softmax over all experts (Mixtral), or a sigmoid per expert
// (DeepSeek-V3, whose expert bias shifts only the selection).
enum class RouterScore { kSoftmax, kSigmoid };
// Which slots an expert over capacity keeps: its highest scores (ties to the lower token), or
// the first in (slot, token) order: every token's first choice before any second choice.
enum class DropPolicy { kProbs, kPosition };

}  // namespace trident::kernels

namespace trident {

template <>
inline constexpr std::array<Named<kernels::RouterScore>, 2> kNames<kernels::RouterScore>{
    {{kernels::RouterScore::kSoftmax, "softmax"}, {kernels::RouterScore::kSigmoid, "sigmoid"}}};
template <>
inline constexpr std::array<Named<kernels::DropPolicy>, 2> kNames<kernels::DropPolicy>{
    {{kernels::DropPolicy::kProbs, "probs"}, {kernels::DropPolicy::kPosition, "position"}}};

}  // namespace trident
