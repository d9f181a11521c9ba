// ZeRO-2 gradient sharding implementation.
#include "parallel/zero/grad_shards.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cast.hpp"

namespace trident {

namespace {

// shard[at, at + n) += received[0, n), fp32 or 16-bit in `format`. (Free functions: nvcc takes no
// device lambda in a private member.)
void add_into_shard(const View1& shard, int64_t at, const View1& received, size_t n) {
  Kokkos::parallel_for(
      "zero2_accumulate", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(int64_t i) { shard(at + i) += received(i); });
}
void add_into_shard(const View1& shard, int64_t at, const HalfView1& received, size_t n,
                    Precision format) {
  Kokkos::parallel_for(
      "zero2_accumulate_16", Kokkos::RangePolicy<Exec>(0, n),
      KOKKOS_LAMBDA(int64_t i) { shard(at + i) += from_half(received(i), format); });
}

}  // namespace

GradShards::GradShards(GptStage& stage, const ShardGroups& groups, Communicator* dp_comm,
                       Communicator* expert_comm, MemoryLedger& ledger, PhaseTimer* timer,
                       int64_t bucket_elements, Precision reduce)
    : stage_(stage),
      groups_(groups),
      comm_(dp_comm),
      expert_comm_(expert_comm),
      timer_(timer),
      bucket_elements_(bucket_elements),
      plan_(plan_kept_grads(stage.local(), stage.config().n_layer, bucket_elements)),
      shard_offset_(unit_shard_offsets(stage.local(), groups)),
      counts_(static_cast<size_t>(std::max(groups.dp, groups.expert_dp))),
      reduce_(reduce) {
  const auto& units = stage.local().units();
  int64_t largest_part = 0;
  for (const ParamUnit& u : units) largest_part = std::max(largest_part, groups.part(u));
  for (int64_t size : plan_.buffers.buffer_sizes)
    kept_.push_back(allocate(ledger, MemCategory::kGrads, "kept_grads", size));
  rows_ = allocate(ledger, MemCategory::kGrads, "grad_rows", plan_.rows_elements);
  shard_ = allocate(ledger, MemCategory::kGrads, "grad_shard",
                    units.empty() ? 0 : shard_offset_.back() + shard_size(units.size() - 1));
  if (reduce_ == Precision::kFp32) {
    received_ = allocate(ledger, MemCategory::kCommBuffers, "grad_reduce_scatter", largest_part);
  } else {
    send16_ = allocate_half(ledger, MemCategory::kCommBuffers, "grad_send16",
                            std::max(plan_.rows_elements, plan_.largest_run));
    received16_ =
        allocate_half(ledger, MemCategory::kCommBuffers, "grad_reduce_scatter16", largest_part);
  }
  stage.redirect_grads([this](const LocalParam& p) { return locate(p); });
  stage.stream_weight_grads(this);
  stage.set_unit_done_hook([this](int u) { unit_done(u); });
}

StoredTensor GradShards::locate(const LocalParam& p) const {
  if (streams_grad(*p.spec)) return {};
  const LocalParamTable& local = stage_.local();
  const int u = local.unit_of(p);
  const int64_t at = p.offset - local.units()[u].offset;
  for (const KeptGradPlan::Run& r : plan_.runs[u])
    if (r.unit_offset <= at && at + p.numel <= r.unit_offset + r.count)
      return stored_f32(kept_of_unit(u).data() + r.kept_offset + (at - r.unit_offset),
                        static_cast<size_t>(p.numel));
  throw std::logic_error("GradShards: " + p.spec->name + " lies in no kept run");
}

View1 GradShards::kept_of_unit(int u) const {
  const View1& buffer = kept_[plan_.buffers.buffer_of_unit[u]];
  const size_t at = static_cast<size_t>(plan_.buffers.offset_in_buffer[u]);
  return window(buffer, at, buffer.extent(0) - at);
}

void GradShards::reduce_into_shard(int u, int64_t begin, int64_t count, const Vec& source) {
  const ParamUnit& unit = stage_.local().units()[u];
  Communicator& comm = unit.experts ? *expert_comm_ : *comm_;
  const int64_t part = shard_size(u), end = begin + count;
  const int rank = comm.rank(), parts = groups_.parts(unit);
  counts_.resize(static_cast<size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const int64_t lo = std::max(begin, r * part), hi = std::min(end, (r + 1) * part);
    counts_[r] = static_cast<size_t>(std::max<int64_t>(0, hi - lo));
  }
  const size_t mine = counts_[rank];
  // Where this rank's share starts in its shard (meaningless when it has none).
  const int64_t at = shard_offset_[u] + std::max<int64_t>(0, begin - rank * part);
  if (reduce_ == Precision::kFp32) {
    comm.reduce_scatter_sum(source, window(received_, 0, mine), counts_);
    add_into_shard(shard_, at, received_, mine);
  } else {
    kernels::store_half(Exec(), send16_, 0, source, static_cast<size_t>(count), reduce_);
    comm.reduce_scatter_sum(CommBuffer(window(send16_, 0, static_cast<size_t>(count)), reduce_),
                            CommBuffer(window(received16_, 0, mine), reduce_), counts_);
    add_into_shard(shard_, at, received16_, mine, reduce_);
  }
}

void GradShards::take_rows(int64_t param_offset, int64_t first_row, int64_t rows, int64_t cols) {
  ScopedPhase phase(timer_, Phase::kDpComm);
  const LocalParamTable& local = stage_.local();
  const auto& units = local.units();
  const auto unit = std::upper_bound(units.begin(), units.end(), param_offset,
                                     [](int64_t at, const ParamUnit& u) { return at < u.offset; });
  const int u = static_cast<int>(unit - units.begin()) - 1;
  if (u < 0 || rows * cols > plan_.rows_elements)
    throw std::logic_error("GradShards::take_rows: a block outside the units or the buffer");
  reduce_into_shard(u, param_offset - units[u].offset + first_row * cols, rows * cols,
                    window(rows_, 0, static_cast<size_t>(rows * cols)));
}

void GradShards::unit_done(int first) {
  ScopedPhase phase(timer_, Phase::kDpComm);
  for (int u = first; u < stage_.local().group_end(first); ++u) {
    const View1 kept = kept_of_unit(u);
    int64_t used = 0;
    for (const KeptGradPlan::Run& r : plan_.runs[u]) {
      reduce_into_shard(
          u, r.unit_offset, r.count,
          window(kept, static_cast<size_t>(r.kept_offset), static_cast<size_t>(r.count)));
      used = std::max(used, r.kept_offset + r.count);
    }
    Kokkos::deep_copy(Exec(), window(kept, 0, static_cast<size_t>(used)), 0.0f);
  }
}

void GradShards::zero() {
  Kokkos::deep_copy(shard_, 0.0f);
  for (const View1& b : kept_) Kokkos::deep_copy(b, 0.0f);
}

}  // namespace trident
