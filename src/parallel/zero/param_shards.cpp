// ZeRO-3 parameter sharding implementation.
#include "parallel/zero/param_shards.hpp"

#include <algorithm>

#include "kernels/cast.hpp"
#include "model/params.hpp"

namespace trident {

ParamShards::ParamShards(GptStage& stage, int dp, int dp_rank, Communicator* dp_comm,
                         MemoryLedger& ledger, PhaseTimer* timer, const std::string& nvme_path,
                         Precision precision)
    : stage_(stage),
      dp_(dp),
      dp_rank_(dp_rank),
      comm_(dp_comm),
      timer_(timer),
      buffers_(stage.local(), stage.config().n_layer, ledger, MemCategory::kParams, "unit_params",
               precision),
      shard_offset_(unit_shard_offsets(stage.local(), dp)),
      precision_(precision) {
  const auto& units = stage.local().units();
  const int64_t total = units.empty() ? 0 : shard_offset_.back() + units.back().padded / dp;
  if (precision_ != Precision::kFp32) {
    shard16_ = allocate_half(ledger, MemCategory::kParams, "param_shard16", total);
  } else if (nvme_path.empty()) {
    shard_ = allocate(ledger, MemCategory::kParams, "param_shard", total);
  } else {
    store_ = std::make_unique<FileStore>(nvme_path, total);
    for (const StoredTensor& b : buffers_.all()) {
      staging_.push_back(allocate(ledger, MemCategory::kParams, "param_staging", b.size() / dp));
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
  const int64_t total = units.empty() ? 0 : shard_offset_.back() + units.back().padded / dp_;
  Kokkos::View<float*, Kokkos::HostSpace> host("init_shard", total);
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t part = units[u].padded / dp_;
    const int64_t begin = units[u].offset + dp_rank_ * part, end = begin + part;
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

void ParamShards::start_gather(int u) {
  const int b = buffers_.index_of_unit(u);
  pending_[b].wait();  // the buffer's previous gather, if any, must land first
  const int64_t part = stage_.local().units()[u].padded / dp_;
  const size_t whole = static_cast<size_t>(part * dp_);
  if (precision_ != Precision::kFp32) {
    pending_[b] =
        comm_->iallgather(CommBuffer(window(shard16_, shard_offset_[u], part), precision_),
                          CommBuffer(buffers_.of_unit(u)).window(0, whole));
    resident_[b] = u;
    return;
  }
  Vec mine;
  if (store_) {  // offloaded: stage this unit's part of the shard first
    store_->read(shard_offset_[u], part, staging_host_[b].data());
    mine = window(staging_[b], 0, part);
    Kokkos::deep_copy(mine, Kokkos::subview(staging_host_[b], std::make_pair(int64_t{0}, part)));
  } else {
    mine = window(shard_, shard_offset_[u], part);
  }
  pending_[b] = comm_->iallgather(mine, window(buffers_.of_unit(u).f32, 0, whole));
  resident_[b] = u;
}

void ParamShards::need(int u, int next) {
  ScopedPhase phase(timer_, Phase::kZeroGather);
  const int b = buffers_.index_of_unit(u);
  if (resident_[b] != u) start_gather(u);
  pending_[b].wait();
  if (next >= 0 && buffers_.index_of_unit(next) != b &&
      resident_[buffers_.index_of_unit(next)] != next)
    start_gather(next);  // prefetch: overlaps with this unit's compute
}

void ParamShards::invalidate() {
  for (Request& r : pending_) r.wait();
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
    const ParamUnit& unit = local.units()[u];
    const int64_t part = unit.padded / dp_, at = unit.offset + dp_rank_ * part;
    Kokkos::deep_copy(
        Kokkos::subview(full, std::make_pair(at, at + part)),
        Kokkos::subview(shard, std::make_pair(shard_offset_[u], shard_offset_[u] + part)));
  }
}

void ParamShards::scatter_full(const View1& full) {
  const LocalParamTable& local = stage_.local();
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full);
  for (size_t u = 0; u < local.units().size(); ++u) {
    const ParamUnit& unit = local.units()[u];
    const int64_t part = unit.padded / dp_, at = unit.offset + dp_rank_ * part;
    if (precision_ != Precision::kFp32) {
      kernels::store_compute_half(Exec(), shard16_, static_cast<size_t>(shard_offset_[u]),
                                  window(full, at, part), part, precision_);
      continue;
    }
    if (store_) {
      store_->write(shard_offset_[u], part, host.data() + at);
      continue;
    }
    Kokkos::deep_copy(
        Kokkos::subview(shard_, std::make_pair(shard_offset_[u], shard_offset_[u] + part)),
        Kokkos::subview(full, std::make_pair(at, at + part)));
  }
  invalidate();
}

}  // namespace trident
