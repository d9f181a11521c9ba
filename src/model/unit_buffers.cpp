// Unit working-buffer plan and allocation.
#include "model/unit_buffers.hpp"

#include <algorithm>

#include "model/grad_sink.hpp"

namespace trident {

UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer) {
  std::vector<int64_t> sizes;
  for (const ParamUnit& u : local.units()) sizes.push_back(u.padded);
  return plan_unit_buffers(local, n_layer, sizes);
}

UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer,
                                 const std::vector<int64_t>& unit_sizes) {
  const auto& units = local.units();
  std::vector<bool> is_block(units.size(), false);
  int64_t largest_block = 0;
  for (const LocalParam& p : local.params())
    if (p.spec->layer >= 0 && p.spec->layer < n_layer)
      for (size_t u = 0; u < units.size(); ++u)
        if (units[u].offset == p.offset) {  // a block's first parameter opens its unit
          is_block[u] = true;
          largest_block = std::max(largest_block, unit_sizes[u]);
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
      plan.buffer_sizes.push_back(unit_sizes[u]);
    }
  }
  return plan;
}

KeptGradPlan plan_kept_grads(const LocalParamTable& local, int n_layer, int64_t bucket_elements) {
  const auto& units = local.units();
  KeptGradPlan plan;
  plan.runs.resize(units.size());
  std::vector<int64_t> kept(units.size(), 0), streamed(units.size(), 0);
  for (const LocalParam& p : local.params()) {
    const int u = local.unit_of(p);
    if (streams_grad(*p.spec)) {
      streamed[u] += p.numel;
      continue;
    }
    const int64_t at = p.offset - units[u].offset;
    std::vector<KeptGradPlan::Run>& runs = plan.runs[u];
    if (!runs.empty() && runs.back().unit_offset + runs.back().count == at)
      runs.back().count += p.numel;
    else
      runs.push_back({at, kept[u], p.numel});
    kept[u] += p.numel;
  }
  for (const auto& runs : plan.runs)
    for (const KeptGradPlan::Run& r : runs) plan.largest_run = std::max(plan.largest_run, r.count);
  for (const LocalParam& p : local.params())
    if (streams_grad(*p.spec)) {
      const int64_t cols = p.shape.size() == 2 ? p.shape[1] : p.numel;
      plan.rows_elements = std::max(
          plan.rows_elements,
          std::min(grad_rows_per_block(bucket_elements, cols) * cols, streamed[local.unit_of(p)]));
    }
  plan.buffers = plan_unit_buffers(local, n_layer, kept);
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
