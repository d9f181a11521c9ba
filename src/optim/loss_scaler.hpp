// Dynamic loss scaling for fp16 (Micikevicius et al. 2018; Megatron-LM's hysteresis): the loss
// is multiplied by the scale before backward so small gradients survive fp16; a step whose
// gradients overflow is skipped and, after `hysteresis` such steps, the scale is lowered; after
// `growth_interval` clean steps it is raised again.
#pragma once

#include <algorithm>

namespace trident {

class LossScaler {
 public:
  // A disabled scaler has scale 1 and never skips (fp32, bf16: their range needs no scaling).
  LossScaler() = default;
  LossScaler(double initial, int growth_interval, double backoff, int hysteresis,
             double growth = 2.0)
      : enabled_(true),
        scale_(initial),
        growth_interval_(growth_interval),
        backoff_(backoff),
        growth_(growth),
        hysteresis_(hysteresis),
        hysteresis_left_(hysteresis) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // The state a checkpoint keeps: scale, clean steps since the last change, hysteresis left.
  int clean_steps() const { return clean_steps_; }
  int hysteresis_left() const { return hysteresis_left_; }
  void restore(double scale, int clean_steps, int hysteresis_left) {
    scale_ = scale;
    clean_steps_ = clean_steps;
    hysteresis_left_ = hysteresis_left;
  }

  // Records whether this step's gradients overflowed (on any rank); true: skip the step.
  bool update(bool overflow) {
    if (!enabled_) return false;
    if (overflow) {
      clean_steps_ = 0;
      if (--hysteresis_left_ <= 0) scale_ = std::max(1.0, scale_ * backoff_);
      return true;
    }
    if (++clean_steps_ == growth_interval_) {
      clean_steps_ = 0;
      hysteresis_left_ = hysteresis_;
      scale_ *= growth_;
    }
    return false;
  }

 private:
  bool enabled_ = false;
  double scale_ = 1.0;
  int growth_interval_ = 1000;
  double backoff_ = 0.5, growth_ = 2.0;
  int hysteresis_ = 1, hysteresis_left_ = 1, clean_steps_ = 0;
};

}  // namespace trident
