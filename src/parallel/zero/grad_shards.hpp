// ZeRO-2: every unit's gradient is reduce-scattered over dp as soon as backward has finished it,
// and accumulated into this rank's shard; only the shard and a few units' working buffers are
// ever resident, never the whole gradient.
#pragma once

#include <vector>

#include "comm/comm.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "model/gpt.hpp"
#include "model/unit_buffers.hpp"

namespace trident {

class GradShards {
 public:
  // Redirects `stage`'s gradients into working buffers: one each for wte, wpe and the final
  // LayerNorm (wte collects its head and embedding contributions through the whole backward),
  // and two alternating ones for the blocks, so one block's reduce-scatter can finish while the
  // next block computes.
  // `reduce` bf16 / fp16: each unit is rounded to 16 bits, reduce-scattered in that format and
  // widened into the fp32 shard.
  GradShards(GptStage& stage, int dp, Communicator* dp_comm, MemoryLedger& ledger,
             PhaseTimer* timer, Precision reduce = Precision::kFp32);
  // Reduce-scatters unit `u`'s working buffer, adds this rank's part to the shard, zeroes it.
  void unit_done(int u);
  void zero();
  // The owned gradients, compact in owned-segment order (AdamW::step with Placement::kCompact).
  View1 shard() const { return shard_; }
  // Where unit u's part starts in shard().
  int64_t shard_offset(int u) const { return shard_offset_[u]; }
  int64_t shard_size(int u) const { return stage_.local().units()[u].padded / dp_; }

 private:
  GptStage& stage_;
  int dp_;
  Communicator* comm_;
  PhaseTimer* timer_;
  UnitBuffers buffers_;                // working buffers backward writes into
  std::vector<int64_t> shard_offset_;  // unit -> offset in shard_
  Precision reduce_;
  View1 shard_, received_;         // owned gradients; one unit's reduce-scatter result
  HalfView1 send16_, received16_;  // 16-bit reduction: one unit, and its reduced part
};

}  // namespace trident
