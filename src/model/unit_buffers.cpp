// Unit working-buffer plan and allocation.
#include "model/unit_buffers.hpp"

#include <algorithm>

namespace trident {

UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer) {
  const auto& units = local.units();
  std::vector<bool> is_block(units.size(), false);
  int64_t largest_block = 0;
  for (const LocalParam& p : local.params())
    if (p.spec->layer >= 0 && p.spec->layer < n_layer)
      for (size_t u = 0; u < units.size(); ++u)
        if (units[u].offset == p.offset) {  // a block's first parameter opens its unit
          is_block[u] = true;
          largest_block = std::max(largest_block, units[u].padded);
        }
  UnitBufferPlan plan;
  int blocks_seen = 0, block_buffers[2] = {-1, -1};
  for (size_t u = 0; u < units.size(); ++u) {
    if (is_block[u]) {
      int& slot = block_buffers[blocks_seen++ % 2];
      if (slot < 0) {
        slot = static_cast<int>(plan.buffer_sizes.size());
        plan.buffer_sizes.push_back(largest_block);
      }
      plan.buffer_of_unit.push_back(slot);
    } else {
      plan.buffer_of_unit.push_back(static_cast<int>(plan.buffer_sizes.size()));
      plan.buffer_sizes.push_back(units[u].padded);
    }
  }
  return plan;
}

std::vector<int64_t> unit_shard_offsets(const LocalParamTable& local, int dp) {
  std::vector<int64_t> out;
  int64_t total = 0;
  for (const ParamUnit& u : local.units()) {
    out.push_back(total);
    total += u.padded / dp;
  }
  return out;
}

UnitBuffers::UnitBuffers(const LocalParamTable& local, int n_layer, MemoryLedger& ledger,
                         MemCategory category, const char* label, Precision format)
    : local_(local), plan_(plan_unit_buffers(local, n_layer)) {
  BufferList list(ledger);
  for (int64_t size : plan_.buffer_sizes)
    buffers_.push_back(list.stored(label, category, size, format));
}

StoredTensor UnitBuffers::locate(const LocalParam& p) const {
  const int u = local_.unit_of(p);
  return of_unit(u).window(p.offset - local_.units()[u].offset, p.numel);
}

}  // namespace trident
