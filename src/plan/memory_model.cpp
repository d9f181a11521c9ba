// Memory model implementation: walks the same parameter table and schedule the trainer uses.
#include "plan/memory_model.hpp"

#include <algorithm>

#include "io/config.hpp"
#include "kernels/attention_blocking.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "model/unit_buffers.hpp"
#include "parallel/pipeline/schedule.hpp"

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

namespace {

// One kept block's activations for one micro-batch, in elements: `stored` in the storage width
// (2 bytes under bf16 / fp16), `wide` always fp32 (the LayerNorm statistics).
struct LayerElements {
  double stored = 0, wide = 0;
};

LayerElements kept_layer_elements(const MemoryQuery& q, bool recomputed_whole) {
  const double N = static_cast<double>(q.micro_batch) * q.seq_len, h = q.model.n_embd, t = q.tp;
  const double Nl = q.sequence_parallel && q.tp > 1 ? N / t : N;
  LayerElements e{Nl * h, 0};  // the block's output
  if (recomputed_whole) return e;
  // ln1, res_attn, ln2; qkv and the attention output; fc and GELU outputs; the probabilities.
  e.stored += 3 * Nl * h + 4 * N * h / t + 8 * N * h / t;
  if (!q.recompute.selective()) e.stored += q.model.n_head * N * q.seq_len / t;
  e.wide = 4 * Nl;  // LayerNorm means and reciprocal deviations
  return e;
}

}  // namespace

double layer_activation_bytes(const MemoryQuery& q, bool recomputed_whole) {
  const LayerElements e = kept_layer_elements(q, recomputed_whole);
  return e.stored * (q.precision == Precision::kFp32 ? 4 : 2) + e.wide * 4;
}

MemoryPrediction predict_rank_memory(const MemoryQuery& q, int pp_rank, int tp_rank, int dp_rank) {
  const ModelConfig& m = q.model;
  const ParamTable table(m);
  const auto actions =
      pipeline::make_schedule(q.schedule, q.pp, pp_rank, q.micro_batches, q.virtual_stages);
  const double f = sizeof(float), N = static_cast<double>(q.micro_batch) * q.seq_len;
  const double h = m.n_embd, t = q.tp, a = m.n_head, s = q.seq_len;
  // Token rows outside the tensor-parallel regions: all N, or N/t under sequence parallelism.
  const bool sp = q.sequence_parallel && q.tp > 1;
  const double Nl = sp ? N / t : N;
  const double v_slice = padded_vocab(m.vocab_size, q.tp) / q.tp;
  MemoryPrediction p;
  auto add = [&](MemCategory c, double elements) { p.bytes[static_cast<int>(c)] += elements * f; };
  // 16-bit storage (bf16 / fp16): parameters and kept activations in 2 bytes, computed in fp32
  // working copies (a unit of parameters, one block's activations: workspace).
  const bool half = q.precision != Precision::kFp32;
  const double stored_bytes = half ? 2 : 4;
  auto add_stored = [&](MemCategory c, double elements) {
    p.bytes[static_cast<int>(c)] += elements * stored_bytes;
  };
  for (int chunk = 0; chunk < q.virtual_stages; ++chunk) {
    const StageLayout layout =
        stage_layout(m, q.pp, q.virtual_stages, pp_rank, chunk, q.tp, tp_rank);
    const bool sharded = q.zero_stage >= 1;
    const LocalParamTable local(table, m, layout, sharded ? q.dp : 1);
    double shard = 0;
    for (const Segment& seg : zero_shard(local, sharded ? q.dp : 1, sharded ? dp_rank : 0))
      shard += seg.size();
    if (q.zero_stage >= 2) {
      // The reduced shard, the unit working buffers (UnitBuffers), and the largest unit part
      // for the reduce-scatter result.
      double working = 0, largest_part = 0;
      for (int64_t size : plan_unit_buffers(local, m.n_layer).buffer_sizes) working += size;
      for (const ParamUnit& u : local.units())
        largest_part = std::max<double>(largest_part, u.padded / q.dp);
      add(MemCategory::kGrads, shard + working);
      if (q.grad_reduce == Precision::kFp32) {
        add(MemCategory::kCommBuffers, largest_part);
      } else {  // one unit rounded to 16 bits, and its reduced part
        double largest_unit = 0;
        for (const ParamUnit& u : local.units())
          largest_unit = std::max<double>(largest_unit, u.padded);
        p.bytes[static_cast<int>(MemCategory::kCommBuffers)] += 2 * (largest_unit + largest_part);
      }
      // ZeRO-3 holds parameters the same way: the shard and the same working buffers.
      if (q.zero_stage >= 3 && q.offload_params_nvme) {
        // No resident shard: a staging part per working buffer, and the optimizer's stream.
        double staging = 0;
        for (int64_t size : plan_unit_buffers(local, m.n_layer).buffer_sizes)
          staging += size / q.dp;
        add(MemCategory::kParams,
            working + staging + std::min<double>(shard, q.offload_buffer_elements));
      } else if (q.zero_stage >= 3) {
        // The shard and the gathered units (in 16 bits under bf16 / fp16, whose fp32 working
        // copies are counted as workspace below).
        add_stored(MemCategory::kParams, shard + working);
      } else {
        add_stored(MemCategory::kParams, local.total_numel());
      }
    } else {
      add(MemCategory::kGrads, local.total_numel());
      add_stored(MemCategory::kParams, local.total_numel());
      // A 16-bit dp reduction rounds the buckets into a 2-byte copy of the gradient.
      if (q.grad_reduce != Precision::kFp32 && q.dp > 1)
        p.bytes[static_cast<int>(MemCategory::kCommBuffers)] += 2.0 * local.total_numel();
    }
    if (half) {
      add(MemCategory::kMasterWeights, shard);
      for (int64_t size : plan_unit_buffers(local, m.n_layer).buffer_sizes)
        add(MemCategory::kWorkspace, size);  // units expanded to fp32
    }
    add(MemCategory::kOptimizer,
        2.0 * (q.offload_nvme ? std::min<double>(shard, q.offload_buffer_elements) : shard));

    const int slots = std::max(1, pipeline::max_in_flight(actions, chunk));
    const int layers = layout.last_layer - layout.first_layer;
    // One block's activations other than its output, and the attention probabilities.
    const double probabilities = a * N * s / t;
    const double internals = 3 * Nl * h + 4 * N * h / t + 8 * N * h / t + probabilities + 4 * Nl;
    // Per slot, in elements of the stored width (16-bit storage keeps statistics, token ids and
    // losses in 4 bytes: `wide`).
    double stored = Nl * h, wide = 2 * N;  // input activation; tokens and targets
    for (int i = 0; i < layers; ++i) {
      const LayerElements e = kept_layer_elements(q, q.recompute.full_block(i));
      stored += e.stored;
      wide += e.wide;
    }
    if (!layout.has_head) stored -= Nl * h;  // the output is sent, not kept (output buffers)
    if (layout.has_head) {
      stored += Nl * h + N * v_slice;  // final LayerNorm, logits
      wide += 2 * Nl + 2 * N;          // its statistics; losses, log-sum-exp
    }
    add_stored(MemCategory::kActivations, slots * stored);
    add(MemCategory::kActivations, slots * wide);
    // Zero-bubble schedules: the output gradients kept for deferred weight-gradient passes
    // (DeferredGrads): per block four [Nl,h], fc's [N,4h/t] and qkv's [N,3h/t]; the stage input's
    // and the final LayerNorm's.
    const int deferred = pipeline::max_deferred_weight_grads(actions, chunk);
    add_stored(MemCategory::kActivations,
               deferred * (layers * (4 * Nl * h + 7 * N * h / t) +
                           (layout.has_embedding ? Nl * h : 0) + (layout.has_head ? Nl * h : 0)));
    if (half) {
      // One block's activations and its input in fp32; the head's too. A stage sends its output
      // from the 16-bit activations it keeps.
      add(MemCategory::kWorkspace, internals + 2 * Nl * h);
      if (layout.has_head) add(MemCategory::kWorkspace, Nl * h + N * v_slice);
    } else if (layers > 0 && q.recompute.full_block(0)) {
      // Recomputation's shared buffers: one block's internals, or its attention probabilities.
      add(MemCategory::kActivations, internals);
    } else if (layers > 0 && q.recompute.selective()) {
      add(MemCategory::kActivations, probabilities);
    }
    // Workspace: projection scratch, cross-entropy reductions, backward buffers (dresidual has
    // Nl rows), and under sequence parallelism the gathered rows, a reduce-scattered part and
    // the LayerNorm parameter gradients before their tp sum.
    add(MemCategory::kWorkspace,
        N * h + 3 * N + Nl * h + N * h + N * h / t + 3 * N * h / t + 4 * N * h / t +
            q.micro_batch * (a / t) * kernels::attention_block_rows(static_cast<int>(s)) * s);
    if (sp) add(MemCategory::kWorkspace, N * h + Nl * h + 2 * h);
    // 16-bit tensor-parallel transfers: the [N,h] a collective sends or receives, and under
    // sequence parallelism a rank's rows of it.
    if (half && q.tp > 1) add_stored(MemCategory::kCommBuffers, N * h + (sp ? Nl * h : 0));
    // async: the gradient in flight (local_sgd averages its moments where they are).
    if (q.dp_sync == DpSync::kAsync) add(MemCategory::kCommBuffers, local.total_numel());
    // Pipeline transfers, in the storage width (16-bit stages round activations and their
    // gradients as they make them): without the head, the output buffers and a received gradient
    // (under 16 bits expanded into an fp32 copy for backward); without the embedding, the
    // input-gradient send buffers.
    if (!layout.has_head) {
      add_stored(MemCategory::kCommBuffers, (pipeline::kSendBuffers + 1) * Nl * h);
      if (half) add(MemCategory::kCommBuffers, Nl * h);
    }
    if (!layout.has_embedding)
      add_stored(MemCategory::kCommBuffers, pipeline::kSendBuffers * Nl * h);
  }
  return p;
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
  for (int pp = 0; pp < q.pp; ++pp)
    for (int tp = 0; tp < q.tp; ++tp)
      for (int dp = 0; dp < q.dp; ++dp) {
        const MemoryPrediction p = predict_rank_memory(q, pp, tp, dp);
        if (p.total() > most) {
          most = p.total();
          busiest = {pp, tp, dp, p};
        }
      }
  return busiest;
}

}  // namespace trident
