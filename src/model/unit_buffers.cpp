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
  const int n = static_cast<int>(units.size());
  std::vector<bool> is_block(units.size(), false);
  for (const LocalParam& p : local.params())
    if (p.spec->layer >= 0 && p.spec->layer < n_layer)
      for (size_t u = 0; u < units.size(); ++u)
        if (units[u].offset == p.offset) is_block[u] = true;  // a block's parameter opens it
  const auto opens_group = [&](int u) { return u == 0 || units[u - 1].group != units[u].group; };
  int64_t largest_group = 0;  // of the blocks' groups, its units side by side
  for (int u = 0; u < n; ++u)
    if (is_block[u] && opens_group(u)) {
      int64_t size = 0;
      for (int v = u; v < local.group_end(u); ++v) size += unit_sizes[v];
      largest_group = std::max(largest_group, size);
    }
  UnitBufferPlan plan;
  int groups_seen = 0, block_buffers[2] = {-1, -1}, slot = -1;
  int64_t at = 0;
  for (int u = 0; u < n; ++u) {
    if (!is_block[u]) {
      plan.buffer_of_unit.push_back(static_cast<int>(plan.buffer_sizes.size()));
      plan.offset_in_buffer.push_back(0);
      plan.buffer_sizes.push_back(unit_sizes[u]);
      continue;
    }
    if (opens_group(u)) {
      int& buffer = block_buffers[groups_seen++ % 2];
      if (buffer < 0) {
        buffer = static_cast<int>(plan.buffer_sizes.size());
        plan.buffer_sizes.push_back(largest_group);
      }
      slot = buffer;
      at = 0;
    }
    plan.buffer_of_unit.push_back(slot);
    plan.offset_in_buffer.push_back(at);
    at += unit_sizes[u];
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

std::vector<int64_t> unit_part_sizes(const LocalParamTable& local, const ShardGroups& groups) {
  std::vector<int64_t> out;
  for (const ParamUnit& u : local.units()) out.push_back(groups.part(u));
  return out;
}

std::vector<int64_t> unit_shard_offsets(const LocalParamTable& local, const ShardGroups& groups) {
  std::vector<int64_t> out;
  int64_t total = 0;
  for (const ParamUnit& u : local.units()) {
    out.push_back(total);
    total += groups.part(u);
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

StoredTensor UnitBuffers::of_unit(int u) const {
  return buffers_[plan_.buffer_of_unit[u]].window(plan_.offset_in_buffer[u],
                                                  local_.units()[u].padded);
}

StoredTensor UnitBuffers::locate(const LocalParam& p) const {
  const int u = local_.unit_of(p);
  return of_unit(u).window(p.offset - local_.units()[u].offset, p.numel);
}

}  // namespace trident
