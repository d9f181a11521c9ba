// AdamW over a rank's parameters, or over its ZeRO shard of them: moments in flat fp32 buffers
// covering [begin, end) of the flat parameter buffer, decay only where the table says.
#pragma once

#include <algorithm>

#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "model/params.hpp"

namespace trident {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // Updates elements [begin, end) of the flat buffers; the whole buffer by default.
  AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s, int64_t begin = 0,
        int64_t end = -1)
      : table_(table), s_(s), begin_(begin), end_(end < 0 ? table.total_numel() : end) {
    m_ = allocate(ledger, MemCategory::kOptimizer, "adam_m", end_ - begin_);
    v_ = allocate(ledger, MemCategory::kOptimizer, "adam_v", end_ - begin_);
  }

  // One step on `params` from `grads` (full flat buffers), the gradient first multiplied by
  // `grad_scale` (clipping). Only this optimizer's range is touched.
  void step(const View1& params, const View1& grads, double lr, float grad_scale) {
    ++step_;
    for (const LocalParam& p : table_.params()) {
      const int64_t lo = std::max(begin_, p.offset), hi = std::min(end_, p.offset + p.numel);
      if (lo >= hi) continue;
      const float decay = p.spec->weight_decay ? static_cast<float>(s_.weight_decay) : 0.0f;
      const kernels::AdamWHyper h{static_cast<float>(lr),
                                  static_cast<float>(s_.beta1),
                                  static_cast<float>(s_.beta2),
                                  static_cast<float>(s_.eps),
                                  decay,
                                  step_};
      const size_t n = static_cast<size_t>(hi - lo), moment = static_cast<size_t>(lo - begin_);
      kernels::adamw_update(exec_, window(params, lo, n), window(m_, moment, n),
                            window(v_, moment, n), window(grads, lo, n), h, grad_scale);
    }
    exec_.fence();
  }

  // Moments for elements [begin(), end()) of the flat buffer.
  View1 first_moment() const { return m_; }
  View1 second_moment() const { return v_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }

 private:
  const LocalParamTable& table_;
  AdamWSettings s_;
  int64_t begin_, end_;
  Exec exec_;
  View1 m_, v_;
  int step_ = 0;
};

}  // namespace trident
