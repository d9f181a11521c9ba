// AdamW over a rank's parameters: moments in flat fp32 buffers, decay only where the table says.
#pragma once

#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "model/params.hpp"

namespace trident {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s)
      : table_(table), s_(s) {
    m_ = allocate(ledger, MemCategory::kOptimizer, "adam_m", table.total_numel());
    v_ = allocate(ledger, MemCategory::kOptimizer, "adam_v", table.total_numel());
  }

  // One step on `params` from `grads`, the gradient first multiplied by `grad_scale` (clipping).
  void step(const View1& params, const View1& grads, double lr, float grad_scale) {
    ++step_;
    for (const LocalParam& p : table_.params()) {
      const float decay = p.spec->weight_decay ? static_cast<float>(s_.weight_decay) : 0.0f;
      const kernels::AdamWHyper h{static_cast<float>(lr),
                                  static_cast<float>(s_.beta1),
                                  static_cast<float>(s_.beta2),
                                  static_cast<float>(s_.eps),
                                  decay,
                                  step_};
      const size_t off = p.offset, n = p.numel;
      kernels::adamw_update(exec_, window(params, off, n), window(m_, off, n), window(v_, off, n),
                            window(grads, off, n), h, grad_scale);
    }
    exec_.fence();
  }

  View1 first_moment() const { return m_; }
  View1 second_moment() const { return v_; }
  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }

 private:
  const LocalParamTable& table_;
  AdamWSettings s_;
  Exec exec_;
  View1 m_, v_;
  int step_ = 0;
};

}  // namespace trident
