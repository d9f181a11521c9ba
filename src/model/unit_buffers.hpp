// Working buffers for a stage's units, used where the whole stage is not held in fp32 (ZeRO-2/3
// gradients and parameters, 16-bit parameters expanded for compute): one for each unit that is
// not a block (wte, wpe, ln_f) and two alternating ones shared by the blocks.
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
  UnitBuffers(const LocalParamTable& local, int n_layer, MemoryLedger& ledger, MemCategory category,
              const char* label);
  // The same buffers described to `list` (allocated when the list has a ledger).
  UnitBuffers(const LocalParamTable& local, int n_layer, BufferList& list, MemCategory category,
              const char* label);
  // Where parameter p's data lives in its unit's buffer.
  float* locate(const LocalParam& p) const;
  const View1& of_unit(int u) const { return buffers_[plan_.buffer_of_unit[u]]; }
  int index_of_unit(int u) const { return plan_.buffer_of_unit[u]; }
  const std::vector<View1>& all() const { return buffers_; }

 private:
  const LocalParamTable& local_;
  UnitBufferPlan plan_;
  std::vector<View1> buffers_;
};

}  // namespace trident
