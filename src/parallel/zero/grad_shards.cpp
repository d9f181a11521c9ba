// ZeRO-2 gradient sharding implementation.
#include "parallel/zero/grad_shards.hpp"

#include <algorithm>

#include "kernels/cast.hpp"

namespace trident {

GradShards::GradShards(GptStage& stage, int dp, Communicator* dp_comm, MemoryLedger& ledger,
                       PhaseTimer* timer, Precision reduce)
    : stage_(stage),
      dp_(dp),
      comm_(dp_comm),
      timer_(timer),
      buffers_(stage.local(), stage.config().n_layer, ledger, MemCategory::kGrads, "unit_grads"),
      shard_offset_(unit_shard_offsets(stage.local(), dp)),
      reduce_(reduce) {
  const auto& units = stage.local().units();
  int64_t largest_part = 0;
  for (const ParamUnit& u : units) largest_part = std::max(largest_part, u.padded / dp);
  shard_ = allocate(ledger, MemCategory::kGrads, "grad_shard",
                    units.empty() ? 0 : shard_offset_.back() + units.back().padded / dp);
  if (reduce_ == Precision::kFp32) {
    received_ = allocate(ledger, MemCategory::kCommBuffers, "grad_reduce_scatter", largest_part);
  } else {
    int64_t largest_unit = 0;
    for (const ParamUnit& u : units) largest_unit = std::max(largest_unit, u.padded);
    send16_ = allocate_half(ledger, MemCategory::kCommBuffers, "grad_send16", largest_unit);
    received16_ =
        allocate_half(ledger, MemCategory::kCommBuffers, "grad_reduce_scatter16", largest_part);
  }
  stage.redirect_grads([this](const LocalParam& p) { return buffers_.locate(p); });
  stage.set_unit_done_hook([this](int u) { unit_done(u); });
}

void GradShards::unit_done(int u) {
  ScopedPhase phase(timer_, Phase::kDpComm);
  const int64_t part = shard_size(u);
  const View1& buffer = buffers_.of_unit(u).f32;
  const View1 shard = shard_;
  const int64_t offset = shard_offset_[u];
  if (reduce_ == Precision::kFp32) {
    comm_->reduce_scatter_sum(window(buffer, 0, part * dp_), window(received_, 0, part));
    const View1 received = received_;
    Kokkos::parallel_for(
        "zero2_accumulate", Kokkos::RangePolicy<Exec>(0, part),
        KOKKOS_LAMBDA(int64_t i) { shard(offset + i) += received(i); });
  } else {
    const size_t whole = static_cast<size_t>(part * dp_);
    kernels::store_half(Exec(), send16_, 0, window(buffer, 0, whole), whole, reduce_);
    comm_->reduce_scatter_sum(CommBuffer(window(send16_, 0, whole), reduce_),
                              CommBuffer(window(received16_, 0, part), reduce_));
    const HalfView1 received = received16_;
    const Precision p = reduce_;
    Kokkos::parallel_for(
        "zero2_accumulate_16", Kokkos::RangePolicy<Exec>(0, part),
        KOKKOS_LAMBDA(int64_t i) { shard(offset + i) += from_half(received(i), p); });
  }
  Kokkos::deep_copy(Exec(), Kokkos::subview(buffer, std::make_pair(int64_t{0}, part * dp_)), 0.0f);
}

void GradShards::zero() {
  Kokkos::deep_copy(shard_, 0.0f);
  for (const StoredTensor& b : buffers_.all()) Kokkos::deep_copy(b.f32, 0.0f);
}

}  // namespace trident
