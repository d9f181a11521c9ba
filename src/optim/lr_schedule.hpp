// Learning-rate schedule: scaling with the global batch, linear warmup, then cosine decay.
#pragma once

#include <cmath>

#include "core/names.hpp"

namespace trident {

enum class LrScaling { kNone, kLinear, kSqrt };

template <>
inline constexpr std::array<Named<LrScaling>, 3> kNames<LrScaling>{
    {{LrScaling::kNone, "none"}, {LrScaling::kLinear, "linear"}, {LrScaling::kSqrt, "sqrt"}}};

// The peak lr for a global batch of `batch_tokens`, given `base_lr` tuned at
// `base_batch_tokens`: unchanged, proportional to the batch (Goyal et al. 2017, with warmup), or
// to its square root (the variance argument; Krizhevsky 2014, Malladi et al. 2022 for Adam).
inline double scaled_lr(double base_lr, LrScaling scaling, double batch_tokens,
                        double base_batch_tokens) {
  if (scaling == LrScaling::kNone) return base_lr;
  const double ratio = batch_tokens / base_batch_tokens;
  return base_lr * (scaling == LrScaling::kLinear ? ratio : std::sqrt(ratio));
}

struct LrSchedule {
  double peak_lr = 6e-4;
  double min_lr_ratio = 0.1;
  int warmup_steps = 0;
  int total_steps = 1;

  // lr for the 0-based optimizer step `step`.
  double at(int step) const {
    if (step < warmup_steps) return peak_lr * (step + 1) / warmup_steps;
    const double min_lr = peak_lr * min_lr_ratio;
    const int decay_steps = total_steps - warmup_steps;
    if (decay_steps <= 1) return peak_lr;
    double progress = static_cast<double>(step - warmup_steps) / (decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (peak_lr - min_lr);
  }
};

}  // namespace trident
