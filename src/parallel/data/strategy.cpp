// Plain DP, ZeRO-1, -2 and -3: gradient reduction, norm share, optimizer step, parameter gather
// and checkpoint state of one model chunk.
#include "parallel/data/strategy.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/adamw.hpp"
#include "kernels/cast.hpp"
#include "kernels/elementwise.hpp"
#include "model/partition.hpp"

namespace trident {

StageBuffers DataParallelStrategy::stage_buffers(ZeroStage zero, int dp, int expert_dp) {
  StageBuffers buffers;
  buffers.unit_alignment = zero == ZeroStage::kNone ? 1 : dp;
  if (expert_dp > 0) buffers.expert_unit_alignment = zero == ZeroStage::kNone ? 1 : expert_dp;
  buffers.full_params = zero != ZeroStage::kParameters;
  buffers.full_grads = zero == ZeroStage::kNone || zero == ZeroStage::kOptimizer;
  return buffers;
}

std::unique_ptr<DataParallelStrategy> DataParallelStrategy::create(
    GptStage& stage, Communicator& dp, const DataParallelSettings& settings, MemoryLedger& ledger,
    PhaseTimer& timer, Communicator* expert_dp) {
  switch (settings.zero) {
    case ZeroStage::kNone:
      return std::make_unique<PlainDataParallel>(stage, dp, settings, ledger, timer, expert_dp);
    case ZeroStage::kOptimizer:
      return std::make_unique<Zero1>(stage, dp, settings, ledger, timer, expert_dp);
    case ZeroStage::kGradients:
      return std::make_unique<Zero2>(stage, dp, settings, ledger, timer, expert_dp);
    case ZeroStage::kParameters:
      return std::make_unique<Zero3>(stage, dp, settings, ledger, timer, expert_dp);
  }
  throw std::logic_error("unknown ZeRO stage");
}

DataParallelStrategy::DataParallelStrategy(GptStage& stage, Communicator& dp,
                                           const DataParallelSettings& settings, PhaseTimer& timer,
                                           Communicator* expert_dp)
    : stage_(stage),
      dp_(dp),
      settings_(settings),
      timer_(timer),
      expert_dp_(expert_dp),
      squares_(stage.local().params().size()) {
  if (settings.zero != ZeroStage::kNone) {
    Communicator& experts = expert_dp ? *expert_dp : dp;
    groups_ = {dp.size(), dp.rank(), experts.size(), experts.rank()};
  }
}

void DataParallelStrategy::build_optimizer(MemoryLedger& ledger, FileStore* offloaded_params,
                                           const RoundedCopy& compute) {
  const LocalParamTable& local = stage_.local();
  const std::vector<Segment> owned = zero_shard(local, groups_);
  if (settings_.precision != Precision::kFp32) {
    master_ = std::make_unique<MasterWeights>(local, owned, compute, ledger);
    master_->init(settings_.seed);
  }
  MomentStorage storage = settings_.moments;
  storage.params = offloaded_params;
  optimizer_ = std::make_unique<AdamW>(local, ledger, settings_.adamw, owned, storage);
}

void DataParallelStrategy::zero_grads() {
  stage_.zero_grads();
}

bool DataParallelStrategy::exchange_async_gradients() {
  throw std::logic_error("dp.sync = async needs zero.stage 0 or 1 (validated with the config)");
}

void DataParallelStrategy::average_replicas() {
  throw std::logic_error("dp.sync = local_sgd needs zero.stage 0 (validated with the config)");
}

ChunkState DataParallelStrategy::checkpoint_state() const {
  // Full-layout buffers holding this rank's owned elements (its ZeRO shard of the moments, read
  // out of the optimizer, resident or streamed): checkpoints write only those, and loading fills
  // every element the rank holds.
  const int64_t n = stage_.local().total_numel();
  ChunkState state{owned_params_at_flat_positions(), View1("moment_m", n), View1("moment_v", n)};
  optimizer_->read_moments(state.m, state.v);
  return state;
}

void DataParallelStrategy::restore(const ChunkState& state, int adam_steps) {
  optimizer_->write_moments(state.m, state.v);
  restore_params(state.params);
  optimizer_->set_steps_taken(adam_steps);
}

View1 DataParallelStrategy::owned_params_at_flat_positions() const {
  if (!master_) return stage_.params();  // a load lands in place
  View1 full("master_full", stage_.local().total_numel());
  master_->read_full(full);
  return full;
}

void DataParallelStrategy::restore_params(const View1& full) {
  if (!master_) return;
  master_->write_full(full);
  // Every position, owned or not: ZeRO-1/2 gather the others only after the next step.
  kernels::store_compute_half(Exec(), stage_.params16(), 0, window(full, 0, full.extent(0)),
                              full.extent(0), settings_.precision);
  Exec().fence();
}

void DataParallelStrategy::gather_updated_shards() {
  if (groups_.dp == 1 && groups_.expert_dp == 1) return;
  ScopedPhase phase(timer_, Phase::kZeroGather);
  // 16-bit storage: the updated 16-bit shards travel, half the bytes of fp32. One equal-count,
  // in-place collective per unit, over the unit's group (an expert unit's: the experts' replicas).
  for (const ParamUnit& u : stage_.local().units()) {
    Communicator& group = u.experts ? *expert_dp_ : dp_;
    if (group.size() == 1) continue;
    const int64_t part = groups_.part(u), mine = groups_.part_begin(u);
    if (master_)
      group.allgather(
          CommBuffer(window(stage_.params16(), mine, part), settings_.precision),
          CommBuffer(window(stage_.params16(), u.offset, u.padded), settings_.precision));
    else
      group.allgather(window(stage_.params(), mine, part),
                      window(stage_.params(), u.offset, u.padded));
  }
}

// ---- plain DP and ZeRO-1 ----

PlainDataParallel::PlainDataParallel(GptStage& stage, Communicator& dp,
                                     const DataParallelSettings& settings, MemoryLedger& ledger,
                                     PhaseTimer& timer, Communicator* expert_dp)
    : DataParallelStrategy(stage, dp, settings, timer, expert_dp) {
  stage.init_params(settings.seed);
  build_optimizer(ledger, nullptr, {stage.params16(), Placement::kFlat, settings.precision});
  // Expert parallelism or tensor-parallel ranks routing their own tokens: the experts' gradients
  // have their own replicas.
  if (expert_dp)
    for (const LocalParam& p : stage.local().params())
      if (p.experts()) experts_.push_back({p.offset, p.offset + p.numel});
  buckets_ = std::make_unique<GradBuckets>(stage.grads(), settings.bucket_elements, &dp,
                                           settings.grad_reduce, &ledger, experts_, expert_dp);
  stage.set_grad_ready_hook([b = buckets_.get()](int64_t from) { b->ready_from(from); });
  const int64_t n = stage.local().total_numel();
  if (settings.sync == DpSync::kAsync)
    async_grads_ = allocate(ledger, MemCategory::kCommBuffers, "async_grads", n);
}

void PlainDataParallel::finish_reduction(bool reduce) {
  if (reduce) buckets_->finish();
}

Vec PlainDataParallel::held_gradient(const LocalParam& p) const {
  return window(stage_.grads(), p.offset, p.numel);
}

void DataParallelStrategy::add_grad_squares(double& sum, const ParamFilter& counted) const {
  queue_grad_squares(counted);
  squares_.add_to(Exec(), sum);
}

void DataParallelStrategy::grad_squares_on_device(
    const ParamFilter& counted, const Kokkos::View<double, MemSpace>& total) const {
  queue_grad_squares(counted);
  squares_.sum_on_device(Exec(), total);
}

bool DataParallelStrategy::read_grad_scale_from(const float* scale) {
  return optimizer_->read_grad_scale_from(scale);
}

void PlainDataParallel::queue_grad_squares(const ParamFilter& counted) const {
  for (const LocalParam& p : stage_.local().params())
    if (counted(p)) squares_.queue(Exec(), held_gradient(p));
}

void PlainDataParallel::step(double lr, float grad_scale) {
  if (master_) {  // 16-bit storage: AdamW updates the master weights and their compute copy
    optimizer_->step(master_->params(), stage_.grads(), Placement::kFlat, lr, grad_scale);
  } else {
    optimizer_->step(stage_.params(), stage_.grads(), lr, grad_scale);
  }
}

bool PlainDataParallel::exchange_async_gradients() {
  const bool had_one = async_in_flight_;
  for (Request& r : async_pending_) r.wait();
  kernels::swap_values(Exec(), stage_.grads(), async_grads_);
  Exec().fence();
  async_pending_.clear();
  by_group(0, static_cast<int64_t>(async_grads_.extent(0)),
           [&](Communicator& group, int64_t begin, int64_t end) {
             if (group.size() > 1)
               async_pending_.push_back(group.iallreduce_sum(window(
                   async_grads_, static_cast<size_t>(begin), static_cast<size_t>(end - begin))));
           });
  async_in_flight_ = true;
  return had_one;
}

void PlainDataParallel::by_group(
    int64_t first, int64_t n, const std::function<void(Communicator&, int64_t, int64_t)>& f) const {
  int64_t at = first;
  const int64_t end = first + n;
  for (const Segment& e : experts_) {
    if (e.end <= at) continue;
    if (e.begin >= end) break;
    if (e.begin > at) {
      f(dp_, at, e.begin);
      at = e.begin;
    }
    const int64_t stop = std::min(end, e.end);
    f(*expert_dp_, at, stop);
    at = stop;
  }
  if (at < end) f(dp_, at, end);
}

void PlainDataParallel::average_replicas() {
  if (dp_.size() == 1 && (!expert_dp_ || expert_dp_->size() == 1)) return;
  // x holds the flat layout's elements from `first` on: each range averaged over its replicas.
  const auto average = [&](int64_t first, const Vec& x) {
    by_group(first, static_cast<int64_t>(x.extent(0)),
             [&](Communicator& group, int64_t begin, int64_t end) {
               if (group.size() == 1) return;
               const Vec part =
                   window(x, static_cast<size_t>(begin - first), static_cast<size_t>(end - begin));
               group.allreduce_sum(part);
               kernels::scale(Exec(), part, 1.0f / static_cast<float>(group.size()));
             });
  };
  // ZeRO-0: every replica's moments are laid out alike, so they are averaged where they are.
  // The master weights are averaged as fp32 values in the gradient buffer, spent by now (bf16
  // keeps no fp32 copy of them), and written back with their compute copy.
  // ZeRO-0 owns every element, unpadded: a moment's index is its flat position.
  if (master_) {
    master_->read_full(stage_.grads());
    average(0, stage_.grads());
    master_->write_full(stage_.grads());
  } else {
    average(0, stage_.params());
  }
  optimizer_->transform_moments([&](int64_t first, const Vec& m, const Vec& v) {
    average(first, m);
    average(first, v);
  });
  Exec().fence();
}

// ---- ZeRO-2 and ZeRO-3 ----

Zero2::Zero2(GptStage& stage, Communicator& dp, const DataParallelSettings& settings,
             MemoryLedger& ledger, PhaseTimer& timer, Communicator* expert_dp)
    : DataParallelStrategy(stage, dp, settings, timer, expert_dp) {
  // ZeRO-3 shards the parameters before the optimizer is built on them. Expert units (expert
  // parallelism, or tp ranks routing their own rows) are sharded over the experts' replicas.
  Communicator* experts = expert_dp ? expert_dp : &dp;
  if (settings.zero == ZeroStage::kParameters) {
    param_shards_ = std::make_unique<ParamShards>(stage, groups_, &dp, experts, ledger, &timer,
                                                  settings.params_file, settings.precision);
    param_shards_->init(settings.seed);
  } else {
    stage.init_params(settings.seed);
  }
  const RoundedCopy compute =
      param_shards_ ? RoundedCopy{param_shards_->shard16(), Placement::kCompact, settings.precision}
                    : RoundedCopy{stage.params16(), Placement::kFlat, settings.precision};
  build_optimizer(ledger, param_shards_ ? param_shards_->store() : nullptr, compute);
  grad_shards_ = std::make_unique<GradShards>(stage, groups_, &dp, experts, ledger, &timer,
                                              static_cast<int64_t>(settings.bucket_elements),
                                              settings.grad_reduce);
}

void Zero2::zero_grads() {
  stage_.zero_grads();
  grad_shards_->zero();
}

Vec Zero2::held_gradient(const LocalParam& p) const {
  // Every unit is sharded alike on every rank that holds it (the tied embedding's two stages).
  const int u = stage_.local().unit_of(p);
  return window(grad_shards_->shard(), grad_shards_->shard_offset(u), grad_shards_->shard_size(u));
}

void Zero2::queue_grad_squares(const ParamFilter& counted) const {
  // This rank holds the reduced gradient of its shard of each unit only.
  const LocalParamTable& local = stage_.local();
  for (const LocalParam& p : local.params()) {
    if (!counted(p)) continue;
    const int u = local.unit_of(p);
    const int64_t part = grad_shards_->shard_size(u);
    const int64_t own_begin = groups_.part_begin(local.units()[u]);
    const int64_t a = std::max(own_begin, p.offset);
    const int64_t b = std::min(own_begin + part, p.offset + p.numel);
    if (a < b)
      squares_.queue(Exec(),
                     window(grad_shards_->shard(), grad_shards_->shard_offset(u) + (a - own_begin),
                            static_cast<size_t>(b - a)));
  }
}

void Zero2::step(double lr, float grad_scale) {
  if (master_) {
    optimizer_->step(master_->params(), grad_shards_->shard(), Placement::kCompact, lr, grad_scale);
  } else {
    optimizer_->step(stage_.params(), Placement::kFlat, grad_shards_->shard(), Placement::kCompact,
                     lr, grad_scale);
  }
}

View1 Zero2::gradients_at_flat_positions() const {
  const LocalParamTable& local = stage_.local();
  View1 full("full_grads", local.total_numel());
  for (size_t u = 0; u < local.units().size(); ++u) {
    const int unit = static_cast<int>(u);
    const int64_t part = grad_shards_->shard_size(unit);
    const int64_t at = groups_.part_begin(local.units()[u]);
    Kokkos::deep_copy(window(full, at, part),
                      window(grad_shards_->shard(), grad_shards_->shard_offset(unit), part));
  }
  return full;
}

void Zero3::step(double lr, float grad_scale) {
  if (master_)  // the compute copy is the 16-bit shard
    optimizer_->step(master_->params(), grad_shards_->shard(), Placement::kCompact, lr, grad_scale);
  else  // parameters, gradients and moments all sharded
    optimizer_->step(param_shards_->shard(), Placement::kCompact, grad_shards_->shard(),
                     Placement::kCompact, lr, grad_scale);
  param_shards_->invalidate();  // gathered again when next needed
}

View1 Zero3::owned_params_at_flat_positions() const {
  if (master_) return DataParallelStrategy::owned_params_at_flat_positions();
  View1 full("params_full", stage_.local().total_numel());
  param_shards_->read_own(full);
  return full;
}

void Zero3::restore_params(const View1& full) {
  param_shards_->scatter_full(full);
  if (master_) master_->write_full(full);
}

}  // namespace trident
