// AdamW over a rank's parameters, or over its ZeRO shard of them: moments in flat fp32 buffers
// covering [begin, end) of the flat parameter buffer, resident or streamed from files through a
// bounded buffer (NVMe offload); decay only where the table says.
#pragma once

#include <memory>
#include <string>

#include "core/memory.hpp"
#include "model/params.hpp"
#include "parallel/zero/nvme_store.hpp"

namespace trident {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// Where the moments live. `path_prefix` + ".m" / ".v" name the files when streamed.
struct MomentStorage {
  bool nvme = false;
  std::string path_prefix;
  int64_t buffer_elements = 1 << 22;  // per moment, resident while streaming
};

class AdamW {
 public:
  // Updates elements [begin, end) of the flat buffers; the whole table by default.
  AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s, int64_t begin = 0,
        int64_t end = -1, const MomentStorage& storage = {});

  // One step on `params` from `grads` (full flat buffers), the gradient first multiplied by
  // `grad_scale` (clipping). Only this optimizer's range is touched.
  void step(const View1& params, const View1& grads, double lr, float grad_scale);

  // Copies the moments of [begin(), end()) into / out of m[0, end-begin), v[0, end-begin).
  void read_moments(const View1& m, const View1& v) const;
  void write_moments(const View1& m, const View1& v);
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool streamed() const { return m_file_ != nullptr; }
  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }

 private:
  // Updates [lo, hi) of the flat buffers with moments m(i - base), v(i - base).
  void update(const View1& params, const View1& grads, double lr, float grad_scale, int64_t lo,
              int64_t hi, const View1& m, const View1& v, int64_t base);

  const LocalParamTable& table_;
  AdamWSettings s_;
  int64_t begin_, end_;
  Exec exec_;
  View1 m_, v_;  // all moments, or the streaming buffers
  std::unique_ptr<NvmeStore> m_file_, v_file_;
  int step_ = 0;
};

}  // namespace trident
