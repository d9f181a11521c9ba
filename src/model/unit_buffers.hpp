// Working buffers for a stage's units, used where the whole stage is not held at once (ZeRO-2/3
// gradients and parameters): one for each unit that is not a block (wte, wpe, ln_f) and two
// alternating ones shared by the blocks.
#pragma once

#include <vector>

#include "core/buffer_list.hpp"
#include "core/memory.hpp"
#include "model/params.hpp"

namespace trident {

// Which working buffer each unit uses, and each buffer's size in elements. A pure function of the
// table, shared by the runtime and the memory model.
struct UnitBufferPlan {
  std::vector<int> buffer_of_unit;
  std::vector<int64_t> buffer_sizes;
};
UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer);

// Where unit u's part starts in a compact shard of `local` split dp ways.
std::vector<int64_t> unit_shard_offsets(const LocalParamTable& local, int dp);

class UnitBuffers {
 public:
  // Buffers of elements stored in `format` (parameters in the storage format, gradients fp32).
  UnitBuffers(const LocalParamTable& local, int n_layer, MemoryLedger& ledger, MemCategory category,
              const char* label, Precision format = Precision::kFp32);
  // Parameter p's numel elements in its unit's buffer.
  StoredTensor locate(const LocalParam& p) const;
  const StoredTensor& of_unit(int u) const { return buffers_[plan_.buffer_of_unit[u]]; }
  int index_of_unit(int u) const { return plan_.buffer_of_unit[u]; }
  const std::vector<StoredTensor>& all() const { return buffers_; }

 private:
  const LocalParamTable& local_;
  UnitBufferPlan plan_;
  std::vector<StoredTensor> buffers_;
};

}  // namespace trident
