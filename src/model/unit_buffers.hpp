// Working buffers for a stage's units, used where the whole stage is not held at once (ZeRO-2/3
// gradients and parameters): one for each unit that is not a block (wte, wpe, ln_f) and two
// alternating ones shared by the blocks' unit groups (a quarter: one unit, or its dense and
// expert units side by side).
#pragma once

#include <vector>

#include "core/buffer_list.hpp"
#include "core/memory.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"

namespace trident {

// Which working buffer each unit uses, and each buffer's size in elements. A pure function of the
// table, shared by the runtime and the memory model.
struct UnitBufferPlan {
  std::vector<int> buffer_of_unit;
  std::vector<int64_t> offset_in_buffer;  // by unit: where its elements start in its buffer
  std::vector<int64_t> buffer_sizes;
};
UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer);
// The same for units of `unit_sizes` elements each (by index into local.units()).
UnitBufferPlan plan_unit_buffers(const LocalParamTable& local, int n_layer,
                                 const std::vector<int64_t>& unit_sizes);

// ZeRO-2/3 gradients: the streamed matrices (streams_grad) pass through one buffer of rows; the
// rest of each unit (norms, biases, the position table) is kept in the unit's working buffer,
// packed, until the unit is done. A pure function of the table and the bucket, shared by the
// runtime and the memory model.
struct KeptGradPlan {
  struct Run {  // consecutive kept parameters: elements [unit_offset, + count) of their unit
    int64_t unit_offset = 0, kept_offset = 0, count = 0;
  };
  std::vector<std::vector<Run>> runs;  // by unit
  UnitBufferPlan buffers;              // of the kept elements
  // The rows buffer: the largest block any streamed matrix sends, grad_rows_per_block rows of it
  // (bounded by the streamed elements of its unit).
  int64_t rows_elements = 0;
  int64_t largest_run = 0;
};
KeptGradPlan plan_kept_grads(const LocalParamTable& local, int n_layer, int64_t bucket_elements);

// Each unit's part on one rank: its padded size over its group.
std::vector<int64_t> unit_part_sizes(const LocalParamTable& local, const ShardGroups& groups);
// Where unit u's part starts in a compact shard of `local`, each unit split over its group.
std::vector<int64_t> unit_shard_offsets(const LocalParamTable& local, const ShardGroups& groups);

class UnitBuffers {
 public:
  // Buffers of elements stored in `format` (parameters in the storage format, gradients fp32).
  UnitBuffers(const LocalParamTable& local, int n_layer, MemoryLedger& ledger, MemCategory category,
              const char* label, Precision format = Precision::kFp32);
  // Parameter p's numel elements in its unit's buffer.
  StoredTensor locate(const LocalParam& p) const;
  // Unit u's padded elements in its buffer.
  StoredTensor of_unit(int u) const;
  int index_of_unit(int u) const { return plan_.buffer_of_unit[u]; }
  const std::vector<StoredTensor>& all() const { return buffers_; }

 private:
  const LocalParamTable& local_;
  UnitBufferPlan plan_;
  std::vector<StoredTensor> buffers_;
};

}  // namespace trident
