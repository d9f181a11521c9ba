// ZeRO-2: every gradient is reduce-scattered over dp as soon as backward has made it, and
// accumulated into this rank's shard; only the shard, the small gradients of the units in use and
// one block of rows are ever resident, never a whole unit's or matrix's gradient.
#pragma once

#include <vector>

#include "comm/comm.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "model/gpt.hpp"
#include "model/partition.hpp"
#include "model/unit_buffers.hpp"

namespace trident {

class GradShards final : public GradSink {
 public:
  // Sends `stage`'s large matrices' gradients here a block of `bucket_elements` at a time (each
  // block reduce-scattered to the ranks whose shards it covers as soon as its GEMM has made it),
  // and redirects the rest (norms, biases, the position table) into working buffers: one for each
  // unit that is not a block, and two alternating ones for the blocks.
  // `reduce` bf16 / fp16: each part is rounded to 16 bits, reduce-scattered in that format and
  // widened into the fp32 shard. Expert units (where `groups` has them) are reduced over their
  // replicas, `expert_comm`, the others over `dp_comm`.
  GradShards(GptStage& stage, const ShardGroups& groups, Communicator* dp_comm,
             Communicator* expert_comm, MemoryLedger& ledger, PhaseTimer* timer,
             int64_t bucket_elements, Precision reduce = Precision::kFp32);
  // Reduce-scatters the kept gradients of the units of unit `u`'s group, adds this rank's parts
  // to the shard, zeroes them.
  void unit_done(int u);
  void zero();
  // The owned gradients, compact in owned-segment order (AdamW::step with Placement::kCompact).
  View1 shard() const { return shard_; }
  // Where unit u's part starts in shard().
  int64_t shard_offset(int u) const { return shard_offset_[u]; }
  int64_t shard_size(int u) const { return groups_.part(stage_.local().units()[u]); }

  // GradSink: blocks of the streamed matrices.
  const View1& rows_buffer() const override { return rows_; }
  int64_t bucket_elements() const override { return bucket_elements_; }
  void take_rows(int64_t param_offset, int64_t first_row, int64_t rows, int64_t cols) override;

 private:
  // Elements [begin, begin + count) of unit u's gradient, in source[0, count): reduce-scattered to
  // the ranks whose parts of the unit they cover (uneven counts), this rank's added to its shard.
  void reduce_into_shard(int u, int64_t begin, int64_t count, const Vec& source);
  StoredTensor locate(const LocalParam& p) const;
  // Unit u's kept gradients in their working buffer.
  View1 kept_of_unit(int u) const;

  GptStage& stage_;
  ShardGroups groups_;
  Communicator *comm_, *expert_comm_;
  PhaseTimer* timer_;
  int64_t bucket_elements_;
  KeptGradPlan plan_;
  std::vector<View1> kept_;            // the working buffers of the kept gradients
  std::vector<int64_t> shard_offset_;  // unit -> offset in shard_
  std::vector<size_t> counts_;         // one reduce-scatter's counts, by rank
  Precision reduce_;
  View1 shard_, received_, rows_;  // owned gradients; one reduce-scatter's result; a block
  HalfView1 send16_, received16_;  // 16-bit reduction: a part, and its reduced share
};

}  // namespace trident
