// ZeRO-3 parameter sharding implementation.
#include "parallel/zero/param_shards.hpp"

#include <algorithm>

#include "kernels/cast.hpp"
#include "model/params.hpp"

namespace trident {

ParamShards::ParamShards(GptStage& stage, const ShardGroups& groups, Communicator* dp_comm,
                         Communicator* expert_comm, MemoryLedger& ledger, PhaseTimer* timer,
                         const std::string& nvme_path, Precision precision)
    : stage_(stage),
      groups_(groups),
      comm_(dp_comm),
      expert_comm_(expert_comm),
      timer_(timer),
      buffers_(stage.local(), stage.config().n_layer, ledger, MemCategory::kParams, "unit_params",
               precision),
      shard_offset_(unit_shard_offsets(stage.local(), groups)),
      precision_(precision) {
  const auto& units = stage.local().units();
  const int64_t total = units.empty() ? 0 : shard_offset_.back() + part(units.size() - 1);
  if (precision_ != Precision::kFp32) {
    shard16_ = allocate_half(ledger, MemCategory::kParams, "param_shard16", total);
  } else if (nvme_path.empty()) {
    shard_ = allocate(ledger, MemCategory::kParams, "param_shard", total);
  } else {
    store_ = std::make_unique<FileStore>(nvme_path, total);
    // A unit's part is staged where its group's parts lie side by side, one staging buffer per
    // working buffer.
    staging_plan_ = plan_unit_buffers(stage.local(), stage.config().n_layer,
                                      unit_part_sizes(stage.local(), groups));
    for (int64_t size : staging_plan_.buffer_sizes) {
      staging_.push_back(allocate(ledger, MemCategory::kParams, "param_staging", size));
      staging_host_.push_back(host_side(staging_.back(), "param_staging_host"));
    }
  }
  resident_.assign(buffers_.all().size(), -1);
  pending_.resize(buffers_.all().size());
  stage.redirect_params([this](const LocalParam& p) { return buffers_.locate(p); });
  stage.set_unit_needed_hook([this](int u, int next) { need(u, next); });
}

void ParamShards::init(uint64_t seed) {
  const LocalParamTable& local = stage_.local();
  const auto& units = local.units();
  const int64_t total = units.empty() ? 0 : shard_offset_.back() + part(units.size() - 1);
  Kokkos::View<float*, Kokkos::HostSpace> host("init_shard", total);
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t begin = own_begin(u), end = begin + part(u);
    for (const LocalParam& p : local.params()) {
      const int64_t a = std::max(begin, p.offset), b = std::min(end, p.offset + p.numel);
      for (int64_t i = a; i < b; ++i) {
        const int64_t g = local.global_index(p, i - p.offset);
        host(shard_offset_[u] + (i - begin)) = g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
      }
    }
  }
  if (precision_ != Precision::kFp32) {
    auto host16 = Kokkos::create_mirror_view(shard16_);
    for (int64_t i = 0; i < total; ++i) host16(i) = to_compute_half(host(i), precision_);
    Kokkos::deep_copy(shard16_, host16);
  } else if (store_) {
    store_->write(0, total, host.data());
  } else {
    Kokkos::deep_copy(shard_, host);
  }
  invalidate();
}

void ParamShards::start_gather(int first) {
  const int b = buffers_.index_of_unit(first);
  for (Request& r : pending_[b]) r.wait();  // the buffer's previous gathers must land first
  pending_[b].clear();
  for (int u = first; u < stage_.local().group_end(first); ++u) {
    const ParamUnit& unit = stage_.local().units()[u];
    Communicator& comm = unit.experts ? *expert_comm_ : *comm_;
    const int64_t mine = part(u);
    const size_t whole = static_cast<size_t>(unit.padded);
    if (precision_ != Precision::kFp32) {
      pending_[b].push_back(
          comm.iallgather(CommBuffer(window(shard16_, shard_offset_[u], mine), precision_),
                          CommBuffer(buffers_.of_unit(u)).window(0, whole)));
      continue;
    }
    Vec own;
    if (store_) {  // offloaded: stage this unit's part of the shard first
      const int64_t at = staging_plan_.offset_in_buffer[u];
      const auto host = Kokkos::subview(staging_host_[b], std::make_pair(at, at + mine));
      store_->read(shard_offset_[u], mine, host.data());
      own = window(staging_[b], at, mine);
      Kokkos::deep_copy(own, host);
    } else {
      own = window(shard_, shard_offset_[u], mine);
    }
    pending_[b].push_back(comm.iallgather(own, window(buffers_.of_unit(u).f32, 0, whole)));
  }
  resident_[b] = first;
}

void ParamShards::need(int u, int next) {
  ScopedPhase phase(timer_, Phase::kZeroGather);
  const int b = buffers_.index_of_unit(u);
  if (resident_[b] != u) start_gather(u);
  for (Request& r : pending_[b]) r.wait();
  pending_[b].clear();
  if (next >= 0 && buffers_.index_of_unit(next) != b &&
      resident_[buffers_.index_of_unit(next)] != next)
    start_gather(next);  // prefetch: overlaps with this group's compute
}

void ParamShards::invalidate() {
  for (std::vector<Request>& requests : pending_) {
    for (Request& r : requests) r.wait();
    requests.clear();
  }
  std::fill(resident_.begin(), resident_.end(), -1);
}

void ParamShards::read_own(const View1& full) const {
  const LocalParamTable& local = stage_.local();
  View1 shard = shard_;
  if (store_) {
    shard = View1("shard_read", store_->size());
    auto host = Kokkos::create_mirror_view(shard);
    store_->read(0, store_->size(), host.data());
    Kokkos::deep_copy(shard, host);
  }
  for (size_t u = 0; u < local.units().size(); ++u) {
    const int64_t n = part(u), at = own_begin(u);
    Kokkos::deep_copy(
        Kokkos::subview(full, std::make_pair(at, at + n)),
        Kokkos::subview(shard, std::make_pair(shard_offset_[u], shard_offset_[u] + n)));
  }
}

void ParamShards::scatter_full(const View1& full) {
  const LocalParamTable& local = stage_.local();
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full);
  for (size_t u = 0; u < local.units().size(); ++u) {
    const int64_t n = part(u), at = own_begin(u);
    if (precision_ != Precision::kFp32) {
      kernels::store_compute_half(Exec(), shard16_, static_cast<size_t>(shard_offset_[u]),
                                  window(full, at, n), n, precision_);
      continue;
    }
    if (store_) {
      store_->write(shard_offset_[u], n, host.data() + at);
      continue;
    }
    Kokkos::deep_copy(
        Kokkos::subview(shard_, std::make_pair(shard_offset_[u], shard_offset_[u] + n)),
        Kokkos::subview(full, std::make_pair(at, at + n)));
  }
  invalidate();
}

}  // namespace trident
