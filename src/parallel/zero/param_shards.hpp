// ZeRO-3: parameters sharded over dp like the optimizer states; a unit's parameters are
// all-gathered just before forward or backward reads them, the next unit's gather is started
// ahead, and block buffers are reused (released) as the pass moves on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/file_store.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "model/gpt.hpp"
#include "model/partition.hpp"
#include "model/unit_buffers.hpp"

namespace trident {

class ParamShards {
 public:
  // Redirects `stage`'s parameters into working buffers: one each for wte, wpe and ln_f, two
  // alternating ones for the blocks (the current block and the one being prefetched).
  // With `nvme_path`, the shard itself lives in that file (parameter offload): a unit's part is
  // read into a staging buffer for its gather, and the optimizer streams the file.
  // With `precision` bf16 / fp16 the shard is stored, and units gathered and read, in 16 bits.
  // Expert units (where `groups` has them) are sharded over their replicas, `expert_comm`, the
  // others over `dp_comm`.
  ParamShards(GptStage& stage, const ShardGroups& groups, Communicator* dp_comm,
              Communicator* expert_comm, MemoryLedger& ledger, PhaseTimer* timer,
              const std::string& nvme_path = "", Precision precision = Precision::kFp32);
  // Fills this rank's shard from the counter-based initialiser.
  void init(uint64_t seed);
  // The owned parameters, compact in owned-segment order (AdamW::step with Placement::kCompact);
  // empty when offloaded, then store() holds them.
  View1 shard() const { return shard_; }
  // 16-bit storage: the owned parameters, compact like shard().
  HalfView1 shard16() const { return shard16_; }
  FileStore* store() const { return store_.get(); }
  // Makes the group unit u opens resident (waiting for its prefetch, or gathering it) and starts
  // gathering the group `next` opens (-1: none) into its buffer.
  void need(int u, int next);
  // The shard changed (optimizer step, checkpoint load): every gathered unit is stale.
  void invalidate();
  // The owned parameters at their flat positions of `full`, other positions untouched
  // (checkpoints write only what each rank owns); and this rank's part of `full` back (loading).
  void read_own(const View1& full) const;
  void scatter_full(const View1& full);

 private:
  // Gathers the units of the group `first` opens into their buffer.
  void start_gather(int first);
  // This rank's elements of unit u, and where they start in the flat layout.
  int64_t part(size_t u) const { return groups_.part(stage_.local().units()[u]); }
  int64_t own_begin(size_t u) const { return groups_.part_begin(stage_.local().units()[u]); }
  GptStage& stage_;
  ShardGroups groups_;
  Communicator *comm_, *expert_comm_;
  PhaseTimer* timer_;
  UnitBuffers buffers_;                // where forward and backward read the parameters
  std::vector<int64_t> shard_offset_;  // unit -> offset in shard_
  View1 shard_;
  Precision precision_;
  HalfView1 shard16_;  // 16-bit storage: the owned parameters
  std::unique_ptr<FileStore> store_;
  UnitBufferPlan staging_plan_;                // offloaded: where each unit's part is staged
  std::vector<View1> staging_;                 // buffer -> its group's parts read from the store
  std::vector<HostView1> staging_host_;        // where the store's reads land (host_side)
  std::vector<int> resident_;                  // buffer -> the group gathered into it (or -1)
  std::vector<std::vector<Request>> pending_;  // buffer -> its gathers in flight
};

}  // namespace trident
