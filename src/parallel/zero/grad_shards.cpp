// ZeRO-2 gradient sharding implementation.
#include "parallel/zero/grad_shards.hpp"

#include <algorithm>

namespace trident {

GradShards::GradShards(GptStage& stage, int dp, Communicator* dp_comm, MemoryLedger& ledger,
                       PhaseTimer* timer)
    : stage_(stage), dp_(dp), comm_(dp_comm), timer_(timer) {
  const LocalParamTable& local = stage.local();
  const auto& units = local.units();
  int64_t shard_total = 0, largest_block = 0, largest_part = 0;
  std::vector<bool> is_block(units.size(), false);
  for (size_t u = 0; u < units.size(); ++u) {
    shard_offset_.push_back(shard_total);
    shard_total += units[u].padded / dp;
    largest_part = std::max(largest_part, units[u].padded / dp);
  }
  for (const LocalParam& p : local.params())
    if (p.spec->layer >= 0 && p.spec->layer < stage.config().n_layer)
      for (size_t u = 0; u < units.size(); ++u)
        if (units[u].offset == p.offset) {  // a block's first parameter opens its unit
          is_block[u] = true;
          largest_block = std::max(largest_block, units[u].padded);
        }
  shard_ = allocate(ledger, MemCategory::kGrads, "grad_shard", shard_total);
  received_ = allocate(ledger, MemCategory::kCommBuffers, "grad_reduce_scatter", largest_part);
  int blocks_seen = 0, block_buffers[2] = {-1, -1};
  for (size_t u = 0; u < units.size(); ++u) {
    if (is_block[u]) {
      int& slot = block_buffers[blocks_seen++ % 2];
      if (slot < 0) {
        slot = static_cast<int>(buffers_.size());
        buffers_.push_back(allocate(ledger, MemCategory::kGrads, "block_grads", largest_block));
      }
      buffer_of_unit_.push_back(slot);
    } else {
      buffer_of_unit_.push_back(static_cast<int>(buffers_.size()));
      buffers_.push_back(allocate(ledger, MemCategory::kGrads, "unit_grads", units[u].padded));
    }
  }
  stage.redirect_grads([this, &local](const LocalParam& p) {
    const auto& us = local.units();
    for (size_t u = 0; u < us.size(); ++u)
      if (us[u].offset <= p.offset && p.offset < us[u].offset + us[u].padded)
        return buffers_[buffer_of_unit_[u]].data() + (p.offset - us[u].offset);
    return static_cast<float*>(nullptr);
  });
  stage.set_unit_done_hook([this](int u) { unit_done(u); });
}

void GradShards::unit_done(int u) {
  ScopedPhase phase(timer_, Phase::kDpComm);
  const int64_t part = shard_size(u);
  const View1& buffer = buffers_[buffer_of_unit_[u]];
  comm_->reduce_scatter_sum(buffer.data(), received_.data(), static_cast<size_t>(part));
  const View1 shard = shard_, received = received_;
  const int64_t offset = shard_offset_[u];
  Kokkos::parallel_for(
      "zero2_accumulate", Kokkos::RangePolicy<Exec>(0, part),
      KOKKOS_LAMBDA(int64_t i) { shard(offset + i) += received(i); });
  Kokkos::deep_copy(Kokkos::subview(buffer, std::make_pair(int64_t{0}, part * dp_)), 0.0f);
  Exec().fence();
}

void GradShards::zero() {
  Kokkos::deep_copy(shard_, 0.0f);
  for (const View1& b : buffers_) Kokkos::deep_copy(b, 0.0f);
}

}  // namespace trident
