// Memory model implementation: the sum of the buffer descriptions the runtime allocates from (the
// model's stages, the pipeline's transfers), plus what the data-parallel strategy holds outside
// the model (ZeRO's shards and unit buffers, master weights, moments, its communication buffers).
#include "plan/memory_model.hpp"

#include <algorithm>

#include "io/config.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "model/stage_storage.hpp"
#include "model/unit_buffers.hpp"
#include "parallel/data/strategy.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/transfers.hpp"

namespace trident {

double MemoryPrediction::total() const {
  double t = 0;
  for (double b : bytes) t += b;
  return t;
}

double MemoryPrediction::model_states() const {
  return bytes[static_cast<int>(MemCategory::kParams)] +
         bytes[static_cast<int>(MemCategory::kGrads)] +
         bytes[static_cast<int>(MemCategory::kMasterWeights)] +
         bytes[static_cast<int>(MemCategory::kOptimizer)];
}

bool experts_own_replicas(const MemoryQuery& q) {
  return q.model.moe.enabled() && (q.ep > 1 || q.tp > 1);
}

StageShape stage_shape(const MemoryQuery& q, const StageLayout& layout, int slots, int deferred) {
  StageShape s{
      q.model,
      layout,
      q.micro_batch,
      q.seq_len / q.cp,
      slots,
      DataParallelStrategy::stage_buffers(static_cast<ZeroStage>(q.zero_stage), q.data_replicas(),
                                          experts_own_replicas(q) ? q.dp * q.tp / q.ep : 0)};
  s.buffers.recompute = q.recompute;
  s.buffers.precision = q.precision;
  s.buffers.deferred_sets = deferred;
  s.buffers.sequence_parallel = q.sequence_parallel;
  s.buffers.attention_tiles = q.attention_tiles;
  s.buffers.attention_kernel = q.attention_kernel;
  s.buffers.cp_comm = q.cp_comm;
  s.buffers.cp_split = q.cp_split;
  return s;
}

StageShape stage_recipe(const MemoryQuery& q, const GridCoord& rank, int chunk) {
  StageLayout layout =
      stage_layout(q.model, q.pp, q.virtual_stages, rank[Axis::pp], chunk, q.tp, rank[Axis::tp]);
  const ExpertFold fold = expert_fold(q.shape(), rank, q.ep);
  layout.ep_size = fold.ep;
  layout.ep_rank = fold.ep_rank;
  layout.cp_size = q.cp;
  layout.cp_rank = rank[Axis::cp];
  const auto actions =
      pipeline::make_schedule(q.schedule, q.pp, rank[Axis::pp], q.micro_batches, q.virtual_stages);
  return stage_shape(q, layout, std::max(1, pipeline::max_in_flight(actions, chunk)),
                     pipeline::max_deferred_weight_grads(actions, chunk));
}

namespace {

void add(MemoryPrediction& p, const BufferList& list) {
  for (int c = 0; c < kMemCategories; ++c) p.bytes[c] += list.bytes()[c];
}

// What the data-parallel strategy holds for one chunk beyond the stage's own buffers: ZeRO's
// shards and unit working buffers (ZeRO-2/3 gradients, ZeRO-3 parameters), the master weights
// and moments of its shard, and its communication buffers.
void add_strategy(const MemoryQuery& q, const LocalParamTable& local, const ShardGroups& groups,
                  MemoryPrediction& p) {
  const auto add_bytes = [&](MemCategory c, double bytes) {
    p.bytes[static_cast<int>(c)] += bytes;
  };
  const double f = sizeof(float), stored = q.precision == Precision::kFp32 ? 4 : 2;
  const bool sharded = q.zero_stage >= 1;
  double shard = 0;
  for (const Segment& seg : zero_shard(local, sharded ? groups : ShardGroups{}))
    shard += seg.size();
  double working = 0, largest_part = 0;
  for (int64_t size : plan_unit_buffers(local, q.model.n_layer).buffer_sizes) working += size;
  for (const ParamUnit& u : local.units())
    largest_part = std::max<double>(largest_part, groups.part(u));
  if (q.zero_stage >= 2) {
    // The reduced shard, the kept gradients of the units in use and one block of streamed rows.
    const KeptGradPlan kept = plan_kept_grads(
        local, q.model.n_layer, static_cast<int64_t>(dp_bucket_elements(q.dp_bucket_mb)));
    double kept_elements = 0;
    for (int64_t size : kept.buffers.buffer_sizes) kept_elements += size;
    add_bytes(MemCategory::kGrads, f * (shard + kept_elements + kept.rows_elements));
    // The reduce-scatter's result; in 16 bits also the part rounded for it.
    add_bytes(MemCategory::kCommBuffers,
              q.grad_reduce == Precision::kFp32
                  ? f * largest_part
                  : 2 * (std::max(kept.rows_elements, kept.largest_run) + largest_part));
  } else if (q.grad_reduce != Precision::kFp32 && q.data_replicas() > 1) {
    // A 16-bit dp reduction rounds the buckets into a 2-byte copy of the gradient.
    add_bytes(MemCategory::kCommBuffers, 2.0 * local.total_numel());
  }
  if (q.zero_stage >= 3 && q.offload_params_nvme) {
    // No resident shard: a staging buffer per working buffer (its units' parts side by side),
    // and the optimizer's stream.
    double staging = 0;
    for (int64_t size :
         plan_unit_buffers(local, q.model.n_layer, unit_part_sizes(local, groups)).buffer_sizes)
      staging += size;
    add_bytes(MemCategory::kParams,
              f * (working + staging + std::min<double>(shard, q.offload_buffer_elements)));
  } else if (q.zero_stage >= 3) {  // the shard and the gathered units, in the storage width
    add_bytes(MemCategory::kParams, stored * (shard + working));
  }
  // Master weights: bf16 keeps their low halves (the compute copy is the upper), fp16 fp32 ones.
  if (q.precision != Precision::kFp32)
    add_bytes(MemCategory::kMasterWeights, (q.precision == Precision::kBf16 ? 2 : f) * shard);
  add_bytes(MemCategory::kOptimizer,
            2 * f * (q.offload_nvme ? std::min<double>(shard, q.offload_buffer_elements) : shard));
  // async: the gradient in flight (local_sgd averages its moments where they are).
  if (q.dp_sync == DpSync::kAsync) add_bytes(MemCategory::kCommBuffers, f * local.total_numel());
}

}  // namespace

double layer_activation_bytes(const MemoryQuery& q, bool recomputed_whole) {
  StageShape s = stage_shape(q, whole_model(q.model), 1, 0);
  s.layout.tp_size = q.tp;
  return describe_kept_block(s, !recomputed_whole).bytes(MemCategory::kActivations);
}

namespace {

// predict_rank_memory with the model's parameter table built once (a search over every rank of a
// 16,384-GPU layout would otherwise build it 16,384 times).
MemoryPrediction predict_rank_memory(const MemoryQuery& q, const ParamTable& table,
                                     const GridCoord& rank) {
  MemoryPrediction p;
  for (int chunk = 0; chunk < q.virtual_stages; ++chunk) {
    const StageShape shape = stage_recipe(q, rank, chunk);
    const StageLayout& layout = shape.layout;
    const LocalParamTable local(table, q.model, layout, shape.buffers.unit_alignment,
                                shape.buffers.expert_unit_alignment);
    add(p, describe_stage(shape, local));
    BufferList transfers;
    const size_t activation_elements = shape.extents(q.micro_batch, shape.max_seq).rows_c;
    pipeline::lay_out_transfers(layout.has_embedding, layout.has_head, activation_elements,
                                q.precision, transfers);
    add(p, transfers);
    const ExpertFold fold = expert_fold(q.shape(), rank, q.ep);
    add_strategy(q, local,
                 {q.data_replicas(), data_rank(q.shape(), rank),
                  experts_own_replicas(q) ? fold.expert_dp : q.data_replicas(),
                  experts_own_replicas(q) ? fold.expert_dp_rank : data_rank(q.shape(), rank)},
                 p);
  }
  return p;
}

}  // namespace

MemoryPrediction predict_rank_memory(const MemoryQuery& q, const GridCoord& rank) {
  return predict_rank_memory(q, ParamTable(q.model), rank);
}

double zero_paper_model_states(double psi, int nd, int stage, double k) {
  switch (stage) {
    case 0:
      return (2 + 2 + k) * psi;
    case 1:
      return 4 * psi + k * psi / nd;
    case 2:
      return 2 * psi + (2 + k) * psi / nd;
    default:
      return (2 + 2 + k) * psi / nd;
  }
}

MemoryQuery memory_query(const Config& c) {
  const ParallelSection& par = c.parallel;
  MemoryQuery q;
  q.model = c.model;
  q.dp = par.dp;
  q.tp = par.tp;
  q.pp = par.pp;
  q.ep = par.ep;
  q.cp = par.cp;
  q.cp_comm = par.cp_comm;
  q.cp_split = par.cp_split;
  q.virtual_stages = par.virtual_stages;
  q.sequence_parallel = par.sequence_parallel;
  q.schedule = par.schedule;
  q.zero_stage = static_cast<int>(c.zero.stage);
  q.micro_batch = c.train.micro_batch_size;
  q.seq_len = c.train.seq_len;
  q.micro_batches = c.train.batch_size / par.dp / c.train.micro_batch_size;
  q.recompute = c.recompute.resolved();
  q.dp_sync = c.dp.sync;
  q.precision = c.precision.compute;
  q.grad_reduce = c.precision.grad_reduce;
  q.dp_bucket_mb = par.dp_bucket_mb;
  q.attention_tiles = {c.attention.tile_rows, c.attention.tile_keys};
  q.attention_kernel = c.attention.kernel;
  q.offload_nvme = c.offload.optimizer == OffloadTarget::kNvme;
  q.offload_params_nvme = c.offload.params == OffloadTarget::kNvme;
  q.offload_buffer_elements =
      std::max<int64_t>(1, static_cast<int64_t>(c.offload.buffer_mb * 1048576.0 / 4));
  return q;
}

BusiestRank predict_busiest_rank(const MemoryQuery& q) {
  BusiestRank busiest;
  double most = -1;
  // Ranks differ by pipeline stage (embedding, head), by tp slice (vocabulary padding) and by
  // ZeRO shard (unit padding falls on the last dp ranks).
  const GridShape shape = q.shape();
  const ParamTable table(q.model);
  for (int r = 0; r < shape.size(); ++r) {  // ties go to the lowest rank
    const GridCoord rank = grid_coord(shape, r);
    const MemoryPrediction p = predict_rank_memory(q, table, rank);
    if (p.total() > most) {
      most = p.total();
      busiest = {rank, p};
    }
  }
  return busiest;
}

}  // namespace trident
