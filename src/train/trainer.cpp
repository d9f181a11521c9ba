// Training driver: data, the rank's model chunks, the pipeline schedule, gradient reduction over
// dp in overlapped buckets, clipping, AdamW, logging, timings and checkpoints.
#include "train/trainer.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "comm/backend.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "core/version.hpp"
#include "core/watchdog.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/timings.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cast.hpp"
#include "kernels/elementwise.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/master_weights.hpp"
#include "optim/schedule.hpp"
#include "parallel/data/grad_buckets.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/zero/grad_shards.hpp"
#include "parallel/zero/param_shards.hpp"
#include "parallel/zero/partition.hpp"
#include "plan/memory_model.hpp"

namespace trident {
namespace {

constexpr uint64_t kTrainStream = 1, kValStream = 2;

std::string hostnames(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  TRIDENT_MPI(MPI_Get_processor_name(name, &len));
  int size = 0;
  TRIDENT_MPI(MPI_Comm_size(comm, &size));
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  TRIDENT_MPI(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm));
  std::string out;
  for (int r = 0; r < size; ++r)
    out +=
        (r ? "," : "") + std::string(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return out;
}

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Checks that a checkpoint's model matches the configured one, before anything is written.
void check_resume_compatible(const Config& ours, const std::string& path) {
  const Config theirs = read_checkpoint_config(path);
  const ModelConfig &a = ours.model, &b = theirs.model;
  if (a.n_layer != b.n_layer || a.n_embd != b.n_embd || a.n_head != b.n_head ||
      a.vocab_size != b.vocab_size || a.block_size != b.block_size)
    throw InputError(fmt::format(
        "checkpoint '{}' holds a different model (L={} C={} NH={} V={} block={}) than the "
        "config (L={} C={} NH={} V={} block={})",
        path, b.n_layer, b.n_embd, b.n_head, b.vocab_size, b.block_size, a.n_layer, a.n_embd,
        a.n_head, a.vocab_size, a.block_size));
}

// One model chunk on this rank: its stage, optimizer, gradient buckets and pipeline buffers.
struct Chunk {
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<MasterWeights> master;      // 16-bit storage: fp32 weights AdamW updates
  std::unique_ptr<GradBuckets> buckets;       // ZeRO 0/1: dp all-reduce of the whole gradient
  std::unique_ptr<GradShards> grad_shards;    // ZeRO 2+: reduce-scatter unit by unit
  std::unique_ptr<ParamShards> param_shards;  // ZeRO 3: gather units just in time
  int shard_dp = 1, shard_rank = 0;  // ZeRO: every unit split into shard_dp parts, ours shard_rank
  int virtual_stage = 0;
  bool first = false, last = false;
  View1 grad_recv;               // [N,C] output gradient received from the next stage
  std::vector<View1> grad_send;  // per slot [N,C] input gradient sent to the previous one
  std::vector<Request> fwd_sends, bwd_sends;  // per slot, waited on before the slot is reused
  View1 async_grads;      // dp.sync = async: the gradient whose reduction is in flight
  Request async_pending;  // that reduction
  bool async_in_flight = false;
  View1 replica_m, replica_v;  // dp.sync = local_sgd: moments staged for averaging
};

class Trainer {
 public:
  Trainer(Config c, const Grid& grid, const TrainOptions& opt)
      : c_(std::move(c)),
        grid_(grid),
        opt_(opt),
        // NCCL only pays off within a node: tp groups are placed on one; dp and pp span nodes
        // unless the axis is trivial.
        tp_(make_communicator(grid.tp_comm(), c_.parallel.backend_tp, grid.tp_groups_node_local(),
                              "parallel.backend_tp")),
        dp_(make_communicator(grid.dp_comm(), c_.parallel.backend_dp, grid.shape().dp == 1,
                              "parallel.backend_dp")),
        pp_(make_communicator(grid.pp_comm(), c_.parallel.backend_pp, grid.shape().pp == 1,
                              "parallel.backend_pp")),
        mp_(grid.model_parallel_comm()),
        world_(grid.world()) {}
  int run();

 private:
  void build_model(MemoryLedger& ledger);
  // Executes `actions`; returns this rank's share of the summed per-token losses. With
  // `train`, backward actions run too and gradients accumulate.
  double run_actions(const std::vector<pipeline::Action>& actions, const BatchSampler& sampler,
                     int64_t batch_index, bool train);
  double evaluate(const BatchSampler& val);
  // Clips by the global norm of grad_scale x the gradient, steps every chunk's optimizer.
  double clip_and_step(double lr, double grad_scale);
  // dp.sync = async: waits for the previous step's reduction, puts its result where the
  // optimizer reads gradients, starts reducing this step's. False when nothing was in flight.
  bool exchange_async_gradients();
  // dp.sync = local_sgd: parameters and AdamW moments averaged over dp.
  void average_replicas();
  // fp16: whether any rank's gradient holds an infinity or NaN (0-based `step` for injection).
  bool gradients_overflow(int step);
  // 16-bit storage: the master weights rounded into every chunk's 16-bit parameters.
  void refresh_half_params();
  View1 full_grads(const Chunk& ch);
  // Every chunk's parameters and moments in full-layout buffers, valid at the elements this
  // rank owns (see ShardOwner): what a checkpoint writes, and where a load lands.
  std::vector<ShardBuffers> shards();
  ShardOwner owner() const {
    return {grid_.shape().dp, grid_.coord().dp, grid_.coord().tp, c_.zero.stage};
  }
  // Copies loaded full moments into each chunk's optimizer shard.
  void keep_own_moments(const std::vector<ShardBuffers>& full);
  void gather_params();
  // In-place all-gather over dp of every unit's shards of a flat buffer laid out like `ch`'s.
  void allgather_units(const Chunk& ch, const View1& buffer);
  int pp_tag(int microbatch, int receiving_stage, int direction) const {
    return (microbatch * stages_ + receiving_stage) * 2 + direction;
  }
  void log(const std::string& line) const {
    if (grid_.rank() == 0) {
      std::fputs((line + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
  }

  Config c_;
  const Grid& grid_;
  TrainOptions opt_;
  std::unique_ptr<Communicator> tp_, dp_, pp_;  // per-axis backend (parallel.backend_*)
  MpiCommunicator mp_, world_;                  // host doubles: norms and losses
  std::unique_ptr<MpiCommunicator> embedding_;
  PhaseTimer timer_;
  std::vector<Chunk> chunks_;
  std::vector<pipeline::Action> schedule_, eval_actions_;
  int stages_ = 1, micro_batches_ = 1;
  std::atomic<int> current_step_{0};  // 1-based, for the watchdog's message
  bool reduce_over_dp_ = true;        // this step's backward reduces gradients over dp (ZeRO 0/1)
  Precision precision_ = Precision::kFp32;
  LossScaler scaler_;  // enabled for fp16
  std::vector<int32_t> inputs_, targets_;
};

void Trainer::build_model(MemoryLedger& ledger) {
  const auto& par = c_.parallel;
  const int v = par.virtual_stages, T = c_.train.seq_len, micro = c_.train.micro_batch_size;
  const size_t N = static_cast<size_t>(micro) * T, C = c_.model.n_embd;
  const GridCoord& me = grid_.coord();
  pipeline::ScheduleKind kind;
  pipeline::parse_schedule(par.schedule, kind);
  schedule_ = pipeline::make_schedule(kind, par.pp, me.pp, micro_batches_, v);
  // Evaluation runs forwards only, in (micro-batch, virtual stage) order on every rank.
  for (int mb = 0; mb < micro_batches_; ++mb)
    for (int chunk = 0; chunk < v; ++chunk)
      eval_actions_.push_back({pipeline::ActionType::kForward, mb, chunk});
  Precision grad_reduce = Precision::kFp32;
  parse_precision(c_.precision.grad_reduce, grad_reduce);
  const size_t bucket_elems =
      std::max<size_t>(1, static_cast<size_t>(par.dp_bucket_mb * 1048576.0 / sizeof(float)));
  for (int chunk = 0; chunk < v; ++chunk) {
    Chunk ch;
    ch.virtual_stage = pipeline::virtual_stage(par.pp, me.pp, chunk);
    ch.first = ch.virtual_stage == 0;
    ch.last = ch.virtual_stage == stages_ - 1;
    const int slots = std::max(1, pipeline::max_in_flight(schedule_, chunk));
    const StageLayout layout = stage_layout(c_.model, par.pp, v, me.pp, chunk, par.tp, me.tp);
    const bool sharded = c_.zero.stage >= 1;
    ch.shard_dp = sharded ? par.dp : 1;
    ch.shard_rank = sharded ? me.dp : 0;
    const bool zero2 = c_.zero.stage >= 2, zero3 = c_.zero.stage >= 3;
    ch.stage = std::make_unique<GptStage>(
        c_.model, layout, tp_.get(), ledger, micro, T, slots,
        StageBuffers{ch.shard_dp, !zero3, !zero2, c_.recompute.resolved(), precision_});
    ch.stage->set_timer(&timer_);
    if (zero3) {
      const std::string params_file =
          c_.offload.params == "nvme"
              ? (std::filesystem::path(c_.offload.nvme_dir) /
                 fmt::format("{}.rank{}.chunk{}.params", c_.run.name, grid_.rank(), chunk))
                    .string()
              : std::string();
      ch.param_shards =
          std::make_unique<ParamShards>(*ch.stage, ch.shard_dp, ch.shard_rank, dp_.get(), ledger,
                                        &timer_, params_file, precision_);
      ch.param_shards->init(static_cast<uint64_t>(c_.run.seed));
    } else {
      ch.stage->init_params(static_cast<uint64_t>(c_.run.seed));
    }
    if (precision_ != Precision::kFp32) {
      ch.master = std::make_unique<MasterWeights>(
          ch.stage->local(), zero_shard(ch.stage->local(), ch.shard_dp, ch.shard_rank), ledger);
      ch.master->init(static_cast<uint64_t>(c_.run.seed));
    }
    MomentStorage storage;
    storage.nvme = c_.offload.optimizer == "nvme";
    storage.path_prefix = (std::filesystem::path(c_.offload.nvme_dir) /
                           fmt::format("{}.rank{}.chunk{}", c_.run.name, grid_.rank(), chunk))
                              .string();
    storage.buffer_elements =
        std::max<int64_t>(1, static_cast<int64_t>(c_.offload.buffer_mb * 1048576.0 / 4));
    if (ch.param_shards) storage.params = ch.param_shards->store();
    ch.optimizer = std::make_unique<AdamW>(
        ch.stage->local(), ledger,
        AdamWSettings{c_.optim.beta1, c_.optim.beta2, c_.optim.eps, c_.optim.weight_decay},
        zero_shard(ch.stage->local(), ch.shard_dp, ch.shard_rank), storage);
    if (zero2) {
      ch.grad_shards = std::make_unique<GradShards>(*ch.stage, ch.shard_dp, dp_.get(), ledger,
                                                    &timer_, grad_reduce);
    } else {
      ch.buckets = std::make_unique<GradBuckets>(ch.stage->grads(), bucket_elems, dp_.get(),
                                                 grad_reduce, &ledger);
      ch.stage->set_grad_ready_hook([b = ch.buckets.get()](int64_t from) { b->ready_from(from); });
    }
    const int64_t local_numel = ch.stage->local().total_numel();
    if (c_.dp.sync == "async")
      ch.async_grads = allocate(ledger, MemCategory::kCommBuffers, "async_grads", local_numel);
    if (c_.dp.sync == "local_sgd" && par.dp > 1) {
      ch.replica_m = allocate(ledger, MemCategory::kCommBuffers, "replica_m", local_numel);
      ch.replica_v = allocate(ledger, MemCategory::kCommBuffers, "replica_v", local_numel);
    }
    ch.grad_recv = allocate(ledger, MemCategory::kCommBuffers, "grad_recv", N * C);
    for (int s = 0; s < slots; ++s)
      ch.grad_send.push_back(allocate(ledger, MemCategory::kCommBuffers, "grad_send", N * C));
    ch.fwd_sends.resize(slots);
    ch.bwd_sends.resize(slots);
    chunks_.push_back(std::move(ch));
  }
}

double Trainer::run_actions(const std::vector<pipeline::Action>& actions,
                            const BatchSampler& sampler, int64_t batch_index, bool train) {
  const int T = c_.train.seq_len, micro = c_.train.micro_batch_size;
  const int per_rank = c_.train.batch_size / grid_.shape().dp;
  const size_t NC = static_cast<size_t>(micro) * T * c_.model.n_embd;
  // Mean over the global batch's tokens, times the fp16 loss scale (1 otherwise).
  const float loss_scale = static_cast<float>(
      scaler_.scale() / static_cast<double>(static_cast<int64_t>(c_.train.batch_size) * T));
  std::vector<int> backwards_done(chunks_.size(), 0);
  double loss_sum = 0.0;
  for (const pipeline::Action& act : actions) {
    // MPI advances non-blocking collectives only inside MPI calls: let an async reduction move.
    for (Chunk& c : chunks_) c.async_pending.test();
    Chunk& ch = chunks_[act.chunk];
    GptStage& stage = *ch.stage;
    const int slot = act.microbatch % stage.slots();
    const int prev = (ch.virtual_stage - 1 + stages_) % grid_.shape().pp;
    const int next = (ch.virtual_stage + 1) % grid_.shape().pp;
    if (act.type == pipeline::ActionType::kForward) {
      sampler.fill(batch_index, grid_.coord().dp * per_rank + act.microbatch * micro, micro,
                   inputs_.data(), targets_.data());
      {
        ScopedPhase wait(timer_, Phase::kPpWait);
        ch.fwd_sends[slot].wait();  // the slot's previous output must have left
        if (!ch.first)
          pp_->recv(stage.input_buffer(slot).data(), NC, prev,
                    pp_tag(act.microbatch, ch.virtual_stage, 0));
      }
      double loss = 0.0;
      {
        ScopedPhase phase(timer_, Phase::kForward);
        loss = stage.forward(slot, ch.first ? inputs_.data() : nullptr,
                             ch.last ? targets_.data() : nullptr, micro, T);
      }
      if (ch.last && grid_.coord().tp == 0) loss_sum += loss;  // tp ranks hold the same loss
      if (!ch.last)
        ch.fwd_sends[slot] = pp_->isend(stage.output(slot).data(), NC, next,
                                        pp_tag(act.microbatch, ch.virtual_stage + 1, 0));
    } else {
      if (!ch.last) {
        ScopedPhase wait(timer_, Phase::kPpWait);
        pp_->recv(ch.grad_recv.data(), NC, next, pp_tag(act.microbatch, ch.virtual_stage, 1));
      }
      const bool final_backward = ++backwards_done[act.chunk] == micro_batches_;
      if (ch.buckets) ch.buckets->arm(final_backward && reduce_over_dp_);
      {
        ScopedPhase phase(timer_, Phase::kBackward);
        stage.backward(slot, loss_scale, window(ch.grad_recv, 0, NC));
      }
      if (!ch.first) {
        ScopedPhase wait(timer_, Phase::kPpWait);
        ch.bwd_sends[slot].wait();
        Kokkos::deep_copy(window(ch.grad_send[slot], 0, NC), window(stage.input_grad(), 0, NC));
        ch.bwd_sends[slot] = pp_->isend(ch.grad_send[slot].data(), NC, prev,
                                        pp_tag(act.microbatch, ch.virtual_stage - 1, 1));
      }
    }
  }
  {
    ScopedPhase wait(timer_, Phase::kPpWait);
    for (Chunk& ch : chunks_) {
      for (Request& r : ch.fwd_sends) r.wait();
      for (Request& r : ch.bwd_sends) r.wait();
    }
  }
  if (train) {
    {
      ScopedPhase phase(timer_, Phase::kDpComm);
      for (Chunk& ch : chunks_)
        if (ch.buckets && reduce_over_dp_) ch.buckets->finish();
    }
    // The tied embedding: the first and the last stage each hold wte and a part of its
    // gradient. Summing over them commutes with the dp sum, so it may come after it.
    if (embedding_ && embedding_->size() > 1) {
      ScopedPhase wait(timer_, Phase::kPpWait);
      for (Chunk& ch : chunks_)
        if (ch.first || ch.last) {
          const LocalParam& wte = ch.stage->local().at("wte");
          if (ch.grad_shards) {  // the wte unit is sharded alike on both stages
            const int u = ch.stage->local().unit_of(wte);
            embedding_->allreduce_sum(
                ch.grad_shards->shard().data() + ch.grad_shards->shard_offset(u),
                static_cast<size_t>(ch.grad_shards->shard_size(u)));
          } else {
            embedding_->allreduce_sum(ch.stage->grads().data() + wte.offset, wte.numel);
          }
        }
    }
  }
  return loss_sum;
}

double Trainer::evaluate(const BatchSampler& val) {
  double sum = 0.0;
  for (int b = 0; b < c_.run.eval_batches; ++b) sum += run_actions(eval_actions_, val, b, false);
  world_.allreduce_sum(&sum, 1);
  return sum / (static_cast<double>(c_.run.eval_batches) * c_.train.batch_size * c_.train.seq_len);
}

// Global gradient norm over one model replica (pp x tp), each tensor counted once: tensors
// replicated over tp only on tp rank 0, the tied embedding only on the first stage. Returns it.
double Trainer::clip_and_step(double lr, double grad_scale) {
  double local = 0.0;
  const bool sharded_grads = c_.zero.stage >= 2;
  for (const Chunk& ch : chunks_)
    for (const LocalParam& p : ch.stage->local().params()) {
      if (p.tp_replicated && grid_.coord().tp != 0) continue;
      if (p.spec->name == "wte" && !ch.first) continue;
      if (!sharded_grads) {
        local += kernels::sum_of_squares(Exec(), window(ch.stage->grads(), p.offset, p.numel));
        continue;
      }
      // ZeRO-2: this rank holds the reduced gradient of its shard of each unit only.
      const int u = ch.stage->local().unit_of(p);
      const ParamUnit& unit = ch.stage->local().units()[u];
      const int64_t part = ch.grad_shards->shard_size(u);
      const int64_t own_begin = unit.offset + ch.shard_rank * part, own_end = own_begin + part;
      const int64_t a = std::max(own_begin, p.offset), b = std::min(own_end, p.offset + p.numel);
      if (a < b)
        local += kernels::sum_of_squares(
            Exec(),
            window(ch.grad_shards->shard(), ch.grad_shards->shard_offset(u) + (a - own_begin),
                   static_cast<size_t>(b - a)));
    }
  // One model replica's norm: over pp x tp, and over dp too when dp ranks hold different shards.
  if (sharded_grads)
    world_.allreduce_sum(&local, 1);
  else
    mp_.allreduce_sum(&local, 1);
  const double norm = grad_scale * std::sqrt(local);
  const double max_norm = c_.optim.max_norm;
  const float clip = static_cast<float>(
      grad_scale * (max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0));
  for (Chunk& ch : chunks_) {
    if (ch.master) {  // 16-bit storage: AdamW updates the fp32 master weights
      if (sharded_grads)
        ch.optimizer->step_compact(ch.master->values(), ch.grad_shards->shard(), lr, clip, true);
      else
        ch.optimizer->step_compact(ch.master->values(), ch.stage->grads(), lr, clip, false);
    } else if (ch.param_shards) {  // ZeRO-3: parameters, gradients and moments all sharded
      ch.optimizer->step_shard(ch.param_shards->shard(), ch.grad_shards->shard(), lr, clip, true);
      ch.param_shards->invalidate();
    } else if (sharded_grads) {
      ch.optimizer->step_shard(ch.stage->params(), ch.grad_shards->shard(), lr, clip);
    } else {
      ch.optimizer->step(ch.stage->params(), ch.stage->grads(), lr, clip);
    }
  }
  if (precision_ != Precision::kFp32) refresh_half_params();
  return norm;
}

void Trainer::refresh_half_params() {
  for (Chunk& ch : chunks_) {
    if (ch.param_shards) {  // ZeRO-3: the 16-bit shard, gathered again when next needed
      ch.master->round_into_compact(ch.param_shards->shard16(), precision_);
      ch.param_shards->invalidate();
      continue;
    }
    ch.master->round_into(ch.stage->params16(), precision_);
    ch.stage->invalidate_expanded();
  }
}

bool Trainer::gradients_overflow(int step) {
  double bad = 0.0;
  for (Chunk& ch : chunks_) {
    const View1 grads = ch.grad_shards ? ch.grad_shards->shard() : ch.stage->grads();
    if (step + 1 == opt_.inject_overflow_step && grid_.rank() == opt_.inject_overflow_rank &&
        &ch == &chunks_.front())
      Kokkos::deep_copy(Kokkos::subview(grads, 0), std::numeric_limits<float>::infinity());
    if (kernels::any_non_finite(Exec(), grads, grads.extent(0))) bad = 1.0;
  }
  world_.allreduce_sum(&bad, 1);  // one decision for every rank
  return bad > 0;
}

bool Trainer::exchange_async_gradients() {
  ScopedPhase phase(timer_, Phase::kDpComm);
  bool had_one = false;
  for (Chunk& ch : chunks_) {
    had_one = ch.async_in_flight;
    ch.async_pending.wait();
    kernels::swap_values(Exec(), ch.stage->grads(), ch.async_grads);
    Exec().fence();
    if (grid_.shape().dp > 1)
      ch.async_pending = dp_->iallreduce_sum(ch.async_grads.data(), ch.async_grads.extent(0));
    ch.async_in_flight = true;
  }
  return had_one;
}

void Trainer::average_replicas() {
  const int dp = grid_.shape().dp;
  if (dp == 1) return;
  ScopedPhase phase(timer_, Phase::kDpComm);
  const float inverse = 1.0f / static_cast<float>(dp);
  for (Chunk& ch : chunks_) {
    ch.optimizer->read_moments(ch.replica_m, ch.replica_v);
    // ZeRO-0: the master weights cover the whole flat buffer, in its order.
    const View1 params = ch.master ? ch.master->values() : ch.stage->params();
    for (const View1& x : {params, ch.replica_m, ch.replica_v}) {
      dp_->allreduce_sum(x.data(), x.extent(0));
      kernels::scale(Exec(), x, inverse);
    }
    Exec().fence();
    ch.optimizer->write_moments(ch.replica_m, ch.replica_v);
  }
  if (precision_ != Precision::kFp32) refresh_half_params();
}

// The gradient at flat positions: the buffer itself, or under ZeRO-2 this rank's shard at its
// positions (what --dump-grads writes: each rank its owned elements).
View1 Trainer::full_grads(const Chunk& ch) {
  if (!ch.grad_shards) return ch.stage->grads();
  const LocalParamTable& local = ch.stage->local();
  View1 full("full_grads", local.total_numel());
  for (size_t u = 0; u < local.units().size(); ++u) {
    const int64_t part = ch.grad_shards->shard_size(static_cast<int>(u));
    const int64_t at = local.units()[u].offset + ch.shard_rank * part;
    Kokkos::deep_copy(
        Kokkos::subview(full, std::make_pair(at, at + part)),
        Kokkos::subview(ch.grad_shards->shard(),
                        std::make_pair(ch.grad_shards->shard_offset(static_cast<int>(u)),
                                       ch.grad_shards->shard_offset(static_cast<int>(u)) + part)));
  }
  return full;
}

// ZeRO-1: each dp rank updated its shard of every unit; all-gather the updated shards so every
// replica holds the whole buffer again (one equal-count, in-place collective per unit).
void Trainer::gather_params() {
  if (c_.zero.stage < 1 || c_.zero.stage >= 3 || grid_.shape().dp == 1) return;
  ScopedPhase phase(timer_, Phase::kZeroGather);
  for (Chunk& ch : chunks_) {
    if (!ch.master) {
      allgather_units(ch, ch.stage->params());
      continue;
    }
    // 16-bit storage: the updated 16-bit shards travel, half the bytes of fp32.
    const HalfView1 params16 = ch.stage->params16();
    for (const ParamUnit& u : ch.stage->local().units()) {
      const int64_t part = u.padded / ch.shard_dp;
      dp_->allgather_16(params16.data() + u.offset + ch.shard_rank * part,
                        params16.data() + u.offset, static_cast<size_t>(part));
    }
    ch.stage->invalidate_expanded();
  }
}

void Trainer::allgather_units(const Chunk& ch, const View1& buffer) {
  for (const ParamUnit& u : ch.stage->local().units()) {
    const int64_t part = u.padded / ch.shard_dp;
    dp_->allgather(buffer.data() + u.offset + ch.shard_rank * part, buffer.data() + u.offset,
                   static_cast<size_t>(part));
  }
}

std::vector<ShardBuffers> Trainer::shards() {
  std::vector<ShardBuffers> out;
  for (const Chunk& ch : chunks_) {
    // Full-layout buffers holding this rank's owned elements (its ZeRO shard of the moments,
    // read out of the optimizer, resident or streamed): checkpoints write only those, and
    // loading fills every element the rank holds. Nothing is gathered.
    const int64_t n = ch.stage->local().total_numel();
    View1 m("moment_m", n), v("moment_v", n);
    ch.optimizer->read_moments(m, v);
    View1 params = ch.stage->params();
    if (ch.master) {  // 16-bit storage: the checkpoint holds the fp32 master weights
      params = View1("master_full", n);
      ch.master->read_full(params);
    } else if (ch.param_shards) {
      params = View1("params_full", n);
      ch.param_shards->read_own(params);
    }
    out.push_back({&ch.stage->local(), params, m, v});
  }
  return out;
}

void Trainer::keep_own_moments(const std::vector<ShardBuffers>& full) {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    chunks_[c].optimizer->write_moments(full[c].m, full[c].v);
    if (chunks_[c].param_shards) chunks_[c].param_shards->scatter_full(full[c].params);
    if (chunks_[c].master && chunks_[c].param_shards) chunks_[c].master->write_full(full[c].params);
    if (chunks_[c].master && !chunks_[c].param_shards) {
      chunks_[c].master->write_full(full[c].params);
      const View1& p = full[c].params;
      kernels::store_half(Exec(), chunks_[c].stage->params16(), 0, window(p, 0, p.extent(0)),
                          p.extent(0), precision_);
      Exec().fence();
      chunks_[c].stage->invalidate_expanded();
    }
  }
}

int Trainer::run() {
  const auto& par = c_.parallel;
  const int T = c_.train.seq_len, micro = c_.train.micro_batch_size;
  const int per_rank = c_.train.batch_size / par.dp;
  const int64_t tokens_per_step = static_cast<int64_t>(c_.train.batch_size) * T;
  stages_ = par.pp * par.virtual_stages;
  parse_precision(c_.precision.compute, precision_);
  if (precision_ == Precision::kFp16)
    scaler_ = LossScaler(c_.precision.loss_scale, c_.precision.growth_interval,
                         c_.precision.backoff, c_.precision.hysteresis);
  micro_batches_ = per_rank / micro;

  // Everything the user supplied is checked before any file is written.
  const std::vector<uint16_t> train_tokens = read_token_file(c_.data.train);
  const std::vector<uint16_t> val_tokens = read_token_file(c_.data.val);
  for (const auto* tokens : {&train_tokens, &val_tokens}) {
    const uint16_t max_token =
        tokens->empty() ? 0 : *std::max_element(tokens->begin(), tokens->end());
    if (max_token >= c_.model.vocab_size)
      throw InputError(fmt::format("data file '{}' holds token {} but model.vocab_size = {}",
                                   tokens == &train_tokens ? c_.data.train : c_.data.val, max_token,
                                   c_.model.vocab_size));
  }
  const BatchSampler train_sampler(train_tokens, c_.run.seed, kTrainStream, T);
  const BatchSampler val_sampler(val_tokens, c_.run.seed, kValStream, T);
  const std::filesystem::path run_dir = std::filesystem::path(c_.run.out_dir) / c_.run.name;
  const std::filesystem::path ckpt_dir = run_dir / "checkpoints";
  if (opt_.resume == "auto") {  // what a requeued job needs: the newest complete checkpoint
    // Rank 0 decides and tells the others, so every rank resumes from the same file.
    std::vector<std::string> skipped;
    if (grid_.rank() == 0) opt_.resume = newest_checkpoint(ckpt_dir.string(), &skipped);
    int length = static_cast<int>(opt_.resume.size());
    TRIDENT_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, grid_.world()));
    opt_.resume.resize(static_cast<size_t>(length));
    TRIDENT_MPI(MPI_Bcast(opt_.resume.data(), length, MPI_CHAR, 0, grid_.world()));
    for (const std::string& why : skipped) log("--resume auto: skipping " + why);
    if (opt_.resume.empty())
      log(fmt::format("--resume auto: no checkpoint in {}; starting from step 0",
                      ckpt_dir.string()));
  }
  if (!opt_.resume.empty()) check_resume_compatible(c_, opt_.resume);

  if (grid_.embedding_comm() != MPI_COMM_NULL)
    embedding_ = std::make_unique<MpiCommunicator>(grid_.embedding_comm());
  // The memory model's prediction for every rank, recorded next to what the ranks allocate.
  const MemoryQuery query = memory_query(c_);
  const MemoryPrediction mine =
      predict_rank_memory(query, grid_.coord().pp, grid_.coord().tp, grid_.coord().dp);

  // Before allocating anything: what the memory model says this rank needs, against the memory
  // of its node shared by the ranks on it. One decision for all ranks, so none is left waiting.
  {
    MPI_Comm node = MPI_COMM_NULL;
    TRIDENT_MPI(MPI_Comm_split_type(grid_.world(), MPI_COMM_TYPE_SHARED, grid_.rank(),
                                    MPI_INFO_NULL, &node));
    int node_ranks = 1;
    TRIDENT_MPI(MPI_Comm_size(node, &node_ranks));
    TRIDENT_MPI(MPI_Comm_free(&node));
    const double host_bytes =
        static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    // On a device build the model lives in device memory, which this check does not see.
    double over = std::is_same_v<Exec::memory_space, Kokkos::HostSpace>
                      ? mine.total() / (host_bytes / node_ranks)
                      : 0.0;
    TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_DOUBLE, MPI_MAX, grid_.world()));
    if (over > 1.0)
      throw InputError(fmt::format(
          "this configuration needs {:.1f} GiB on rank {} by the memory model (model states "
          "{:.1f} GiB, activations {:.1f} GiB) but the node's {:.1f} GiB are shared by {} "
          "ranks; use more ranks, ZeRO, offload, recomputation or a smaller model (see "
          "`trident plan`)",
          mine.total() / 1073741824.0, grid_.rank(), mine.model_states() / 1073741824.0,
          mine.bytes[static_cast<int>(MemCategory::kActivations)] / 1073741824.0,
          host_bytes / 1073741824.0, node_ranks));
  }
  MemoryLedger ledger;
  build_model(ledger);
  int start_step = 0;
  if (!opt_.resume.empty()) {
    const auto load_start = std::chrono::steady_clock::now();
    const std::vector<ShardBuffers> buffers = shards();
    const CheckpointMeta meta = load_checkpoint(opt_.resume, buffers, owner(), grid_.world());
    double load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, &load_seconds, 1, MPI_DOUBLE, MPI_MAX, grid_.world()));
    keep_own_moments(buffers);
    start_step = static_cast<int>(meta.data_cursor);
    for (Chunk& ch : chunks_) ch.optimizer->set_steps_taken(static_cast<int>(meta.adam_steps));
    log(fmt::format("resumed from {} at step {} (written with layout {}) in {:.3f} s", opt_.resume,
                    start_step, meta.layout, load_seconds));
    if (scaler_.enabled() && read_checkpoint_config(opt_.resume).precision.compute == "fp16") {
      scaler_.restore(meta.loss_scale, static_cast<int>(meta.loss_scale_clean_steps),
                      static_cast<int>(meta.loss_scale_hysteresis_left));
      log(fmt::format("fp16 loss scale restored: {:g}", scaler_.scale()));
    }
  }
  LrScaling scaling = LrScaling::kNone;
  parse_lr_scaling(c_.optim.lr_scaling, scaling);
  const double peak_lr = scaled_lr(c_.optim.lr, scaling, static_cast<double>(tokens_per_step),
                                   static_cast<double>(c_.optim.base_batch_tokens));
  const LrSchedule schedule{peak_lr, c_.optim.min_lr_ratio, c_.optim.warmup_steps, c_.run.steps};
  inputs_.resize(static_cast<size_t>(micro) * T);
  targets_.resize(static_cast<size_t>(micro) * T);

  const std::string layout =
      grid_.describe() + (par.pp > 1 ? fmt::format(" schedule={}", par.schedule) : std::string()) +
      (par.virtual_stages > 1 ? fmt::format(" v={}", par.virtual_stages) : std::string()) +
      fmt::format(" micro_batch={}", micro) +
      (c_.precision.compute != "fp32" ? " precision=" + c_.precision.compute : std::string()) +
      (c_.precision.grad_reduce != "fp32" ? " grad_reduce=" + c_.precision.grad_reduce
                                          : std::string()) +
      (c_.recompute.policy != "none"
           ? fmt::format(" recompute={}{}", c_.recompute.policy,
                         c_.recompute.layers > 0 ? fmt::format(":{}", c_.recompute.layers) : "")
           : std::string());
  const std::string hosts = hostnames(grid_.world());
  std::vector<double> predicted(static_cast<size_t>(grid_.size()) * kMemCategories);
  TRIDENT_MPI(MPI_Gather(mine.bytes.data(), kMemCategories, MPI_DOUBLE, predicted.data(),
                         kMemCategories, MPI_DOUBLE, 0, grid_.world()));
  std::unique_ptr<TimingsWriter> timings;
  if (grid_.rank() == 0) {
    // run.checkpoint_every = -1 writes no checkpoint, so leaves no checkpoints/ directory.
    std::filesystem::create_directories(c_.run.checkpoint_every >= 0 ? ckpt_dir : run_dir);
    const auto timings_path = run_dir / "timings.h5";
    if (start_step > 0 && std::filesystem::exists(timings_path))
      std::filesystem::rename(timings_path,
                              run_dir / fmt::format("timings.before_step_{}.h5", start_step));
    const char* slurm = std::getenv("SLURM_JOB_ID");
    // Model FLOPs per token and parameters let the analysis compare runs of different models
    // (Megatron-LM's weak scaling grows the model with the GPUs) in FLOP/s per rank.
    timings = std::make_unique<TimingsWriter>(
        timings_path.string(), grid_.size(),
        std::map<std::string, std::string>{
            {"config", c_.to_toml()},
            {"layout", layout},
            {"git_revision", git_revision()},
            {"hostnames", hosts},
            {"slurm_job_id", slurm ? slurm : ""},
            {"start_time", now_iso8601()},
            {"resumed_from", opt_.resume},
            {"peak_lr", fmt::format("{:.17g}", peak_lr)},
            {"flops_per_token", fmt::format("{:.17g}", flops_per_token(c_.model, T))},
            {"parameters", std::to_string(ParamTable(c_.model).total_numel())}},
        predicted);
  }
  TRIDENT_MPI(MPI_Barrier(grid_.world()));

  const double flops_token = flops_per_token(c_.model, T);
  log(fmt::format("trident {} | model {} L={} C={} NH={} V={} T={} | {:.3f}M parameters",
                  git_revision(), c_.model.name, c_.model.n_layer, c_.model.n_embd, c_.model.n_head,
                  c_.model.vocab_size, T, ParamTable(c_.model).total_numel() / 1e6));
  log(
      fmt::format("layout {} | {} ranks | global batch {} x {} = {} tokens | {} micro-batches "
                  "per pipeline",
                  layout, grid_.size(), c_.train.batch_size, T, tokens_per_step, micro_batches_));
  log(
      fmt::format("MFU = {:.4g} FLOP/token x tokens/s / ({} ranks x {} TFLOP/s peak per rank); "
                  "FLOP/token = 6 x params + 12 x L x C x T (PaLM)",
                  flops_token, grid_.size(), c_.run.peak_tflops));
  if (scaling == LrScaling::kNone)
    log(fmt::format("lr: peak {:.4g}, {} warmup steps, cosine to {:.4g}", peak_lr,
                    c_.optim.warmup_steps, peak_lr * c_.optim.min_lr_ratio));
  else
    log(fmt::format(
        "lr: peak {:.4g} = optim.lr {:.4g} x {}({} / {} tokens), {} warmup steps, "
        "cosine to {:.4g}",
        peak_lr, c_.optim.lr, c_.optim.lr_scaling == "sqrt" ? "sqrt" : "", tokens_per_step,
        c_.optim.base_batch_tokens, c_.optim.warmup_steps, peak_lr * c_.optim.min_lr_ratio));
  if (precision_ != Precision::kFp32)
    log(fmt::format(
        "precision: {} parameters and activations, fp32 arithmetic, gradients and "
        "master weights{}",
        c_.precision.compute,
        scaler_.enabled() ? fmt::format("; dynamic loss scale from {:g}", scaler_.scale())
                          : std::string()));
  log(fmt::format("collectives: tp={} dp={} pp={} ({})", tp_->backend(), dp_->backend(),
                  pp_->backend(), backend_summary()));
  if (c_.offload.optimizer == "host" && std::is_same_v<Exec::memory_space, Kokkos::HostSpace>)
    log("offload.optimizer = host: this build is host-only, so the optimizer states already live "
        "in host memory; same as none");
  if (c_.offload.optimizer == "nvme")
    log(
        fmt::format("offload.optimizer = nvme: AdamW moments streamed from {} through {} MiB "
                    "buffers",
                    c_.offload.nvme_dir, c_.offload.buffer_mb));
  log(fmt::format("outputs: {}", run_dir.string()));

  const int world_size = grid_.size();
  std::vector<double> gathered(static_cast<size_t>(world_size) * kPhases);
  std::vector<double> gathered_mem(world_size);
  std::vector<double> gathered_categories(static_cast<size_t>(world_size) * kMemCategories);
  double loss = 0.0, val_loss = NAN, grad_norm = 0.0, lr = 0.0, sum_ms = 0.0;
  int timed_steps = 0;
  std::string last_ckpt;
  const bool async = c_.dp.sync == "async", local_sgd = c_.dp.sync == "local_sgd";
  bool replicas_diverged = false;  // local_sgd: a local step since the last average
  int skipped_steps = 0;
  if (async && start_step > 0)
    log("dp.sync = async: the gradient in flight when the checkpoint was written is not stored; "
        "the first resumed step makes no update");
  const Watchdog watchdog(timer_, c_.run.watchdog_seconds, grid_.rank(),
                          [this] { return current_step_.load(); });
  const bool faulty_rank = !opt_.inject_fault.empty() && grid_.rank() == opt_.inject_fault_rank;
  for (int step = start_step; step < c_.run.steps; ++step) {
    timer_.reset();
    current_step_ = step + 1;
    if (faulty_rank && step + 1 == opt_.inject_fault_step) {
      if (opt_.inject_fault == "kill") std::raise(SIGKILL);
      if (opt_.inject_fault == "hang") {
        ScopedPhase phase(timer_, Phase::kForward);
        for (;;) sleep(1);  // the others block in their first collective with this rank
      }
    }
    const bool last = step + 1 == c_.run.steps;
    const bool want_ckpt =
        c_.run.checkpoint_every >= 0 &&
        (last || (c_.run.checkpoint_every > 0 && (step + 1) % c_.run.checkpoint_every == 0));
    // local_sgd synchronises every local_steps-th step, and before checkpoints, so that a
    // checkpoint holds one model.
    const bool synchronous = !local_sgd || (step + 1) % c_.dp.local_steps == 0 || want_ckpt;
    reduce_over_dp_ = !async && synchronous;
    const auto t0 = std::chrono::steady_clock::now();
    for (Chunk& ch : chunks_) {
      ch.stage->zero_grads();
      if (ch.grad_shards) ch.grad_shards->zero();
    }
    loss = run_actions(schedule_, train_sampler, step, true);
    world_.allreduce_sum(&loss, 1);
    loss /= static_cast<double>(tokens_per_step);
    if (!std::isfinite(loss)) {
      log(fmt::format("error: loss is {} at step {}; stopping (lower optim.lr or check the data)",
                      loss, step + 1));
      return 3;
    }
    // async applies the gradient reduced during the previous step; the first has none.
    bool update = !async || exchange_async_gradients();
    // fp16: an overflow on any rank skips the step everywhere and (after the hysteresis) lowers
    // the loss scale. The gradients hold scale x the true gradient until clipping divides it out.
    const double step_loss_scale = scaler_.scale();
    bool skipped = false;
    if (update && scaler_.enabled() && scaler_.update(gradients_overflow(step))) {
      update = false;
      skipped = true;
      ++skipped_steps;
      log(
          fmt::format("step {:>5}/{} | fp16 gradient overflow: step skipped on every rank, loss "
                      "scale {:g} -> {:g}",
                      step + 1, c_.run.steps, step_loss_scale, scaler_.scale()));
    }
    const bool first_update = step == start_step + (async ? 1 : 0);
    if (first_update && !opt_.dump_grads.empty()) {
      std::vector<ShardBuffers> grads;
      for (const Chunk& ch : chunks_) grads.push_back({&ch.stage->local(), full_grads(ch), {}, {}});
      save_checkpoint(opt_.dump_grads, c_, {step, step, c_.run.seed, 0, layout, git_revision()},
                      grads, owner(), grid_.world());
    }
    {
      ScopedPhase phase(timer_, Phase::kOptimizer);
      lr = schedule.at(step);
      // A local step's gradient is normalised by the global batch: scale it to the replica's.
      const double replica_scale = reduce_over_dp_ || async ? 1.0 : grid_.shape().dp;
      grad_norm = update ? clip_and_step(lr, replica_scale / step_loss_scale) : 0.0;
    }
    if (local_sgd && !synchronous) replicas_diverged = true;
    if (local_sgd && synchronous && replicas_diverged) {
      average_replicas();
      replicas_diverged = false;
    }
    gather_params();
    if (want_ckpt) {
      ScopedPhase phase(timer_, Phase::kIo);
      last_ckpt = (ckpt_dir / fmt::format("step_{:06d}.h5", step + 1)).string();
      CheckpointMeta meta{step + 1, step + 1,      c_.run.seed, chunks_[0].optimizer->steps_taken(),
                          layout,   git_revision()};
      meta.loss_scale = scaler_.scale();
      meta.loss_scale_clean_steps = scaler_.clean_steps();
      meta.loss_scale_hysteresis_left = scaler_.hysteresis_left();
      save_checkpoint(last_ckpt, c_, meta, shards(), owner(), grid_.world(), [&] {
        if (faulty_rank && opt_.inject_fault == "kill-in-checkpoint" &&
            step + 1 == opt_.inject_fault_step)
          std::raise(SIGKILL);
      });
      if (grid_.rank() == 0) rotate_checkpoints(ckpt_dir.string(), c_.run.keep_checkpoints);
    }
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Validation is outside the step's timed phases: it is not training work (its forwards
    // would otherwise add to the forward phase of evaluation steps).
    const std::array<double, kPhases> step_phases = timer_.all();
    val_loss = NAN;
    if (last || (c_.run.eval_every > 0 && (step + 1) % c_.run.eval_every == 0))
      val_loss = evaluate(val_sampler);

    double step_max = 0, step_min = 0;
    const double peak_mem = static_cast<double>(ledger.peak_total());
    TRIDENT_MPI(MPI_Gather(step_phases.data(), kPhases, MPI_DOUBLE, gathered.data(), kPhases,
                           MPI_DOUBLE, 0, grid_.world()));
    TRIDENT_MPI(
        MPI_Gather(&peak_mem, 1, MPI_DOUBLE, gathered_mem.data(), 1, MPI_DOUBLE, 0, grid_.world()));
    double categories[kMemCategories];
    for (int cat = 0; cat < kMemCategories; ++cat)
      categories[cat] = static_cast<double>(ledger.peak(static_cast<MemCategory>(cat)));
    TRIDENT_MPI(MPI_Gather(categories, kMemCategories, MPI_DOUBLE, gathered_categories.data(),
                           kMemCategories, MPI_DOUBLE, 0, grid_.world()));
    TRIDENT_MPI(MPI_Reduce(&step_s, &step_max, 1, MPI_DOUBLE, MPI_MAX, 0, grid_.world()));
    TRIDENT_MPI(MPI_Reduce(&step_s, &step_min, 1, MPI_DOUBLE, MPI_MIN, 0, grid_.world()));
    if (grid_.rank() == 0) {
      StepRecord r;
      r.step = step + 1;
      r.loss = loss;
      r.val_loss = val_loss;
      r.lr = lr;
      r.grad_norm = grad_norm;
      r.loss_scale = step_loss_scale;
      r.skipped = skipped ? 1 : 0;
      r.tokens = tokens_per_step;
      r.step_seconds_max = step_max;
      r.step_seconds_min = step_min;
      r.phase_seconds = gathered;
      r.peak_mem_bytes = gathered_mem;
      r.peak_mem_by_category = gathered_categories;
      // Pipeline bubble: the share of the step the average rank spent waiting on pp.
      double wait = 0;
      for (int rank = 0; rank < world_size; ++rank)
        wait += gathered[static_cast<size_t>(rank) * kPhases + static_cast<int>(Phase::kPpWait)];
      r.bubble = step_max > 0 ? wait / world_size / step_max : 0.0;
      timings->append(r);
      if (step > start_step || c_.run.steps - start_step == 1) {  // first step warms caches
        sum_ms += step_max * 1e3;
        ++timed_steps;
      }
      const double tok_s = tokens_per_step / step_max;
      const double mfu = 100.0 * flops_token * tok_s / (world_size * c_.run.peak_tflops * 1e12);
      if ((step + 1) % c_.run.log_every == 0 || last)
        log(fmt::format(
            "step {:>5}/{} | loss {:.4f} | lr {:.3e} | norm {:.4f} | {:.1f} ms "
            "(min {:.1f}) | {:.0f} tok/s | MFU {:.2f}% | peak mem {:.1f} MiB",
            step + 1, c_.run.steps, loss, lr, grad_norm, step_max * 1e3, step_min * 1e3, tok_s, mfu,
            *std::max_element(gathered_mem.begin(), gathered_mem.end()) / 1048576.0));
      if (!std::isnan(val_loss))
        log(fmt::format("eval  {:>5}/{} | val loss {:.4f}", step + 1, c_.run.steps, val_loss));
    }
  }
  for (Chunk& ch : chunks_) ch.async_pending.wait();  // the last step's reduction has no use
  if (grid_.rank() == 0) {
    const double ms = timed_steps ? sum_ms / timed_steps : 0.0;
    const double tok_s = ms > 0 ? tokens_per_step / (ms / 1e3) : 0.0;
    const double mfu = 100.0 * flops_token * tok_s / (world_size * c_.run.peak_tflops * 1e12);
    log(fmt::format("checkpoint: {}", last_ckpt.empty() ? "none" : last_ckpt));
    log(
        fmt::format("PERFORMANCE steps={} ranks={} layout=\"{}\" ms_per_step={:.2f} "
                    "tokens_per_s={:.1f} mfu_percent={:.3f} final_loss={:.6f} val_loss={:.6f} "
                    "peak_mem_mib={:.1f} skipped_steps={}",
                    c_.run.steps - start_step, world_size, layout, ms, tok_s, mfu, loss, val_loss,
                    ledger.peak_total() / 1048576.0, skipped_steps));
  }
  return 0;
}

}  // namespace

int train(Config config, const Grid& grid, const TrainOptions& options) {
  return Trainer(std::move(config), grid, options).run();
}

}  // namespace trident
