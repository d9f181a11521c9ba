// Learning-rate schedule: linear warmup, then cosine decay to a floor.
#pragma once

#include <cmath>

namespace trident {

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
