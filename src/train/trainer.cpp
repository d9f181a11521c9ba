// The training driver: sets a run up (data, resume, memory check, model chunks, outputs), then
// runs the step loop the README describes, through the pipeline runner, the data-parallel
// strategies, the checkpointer and the step metrics.
#include "train/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "comm/backend.hpp"
#include "comm/host_comm.hpp"
#include "core/blas_info.hpp"
#include "core/error.hpp"
#include "core/flight_recorder.hpp"
#include "core/host_memory.hpp"
#include "core/memory.hpp"
#include "core/paths.hpp"
#include "core/provenance.hpp"
#include "core/stop_request.hpp"
#include "core/threads_per_rank.hpp"
#include "core/timer.hpp"
#include "core/version.hpp"
#include "core/watchdog.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/timings.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cast.hpp"
#include "kernels/cublas.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/gemm.hpp"
#if !defined(KOKKOS_ENABLE_CUDA)
#include "kernels/onednn.hpp"
#endif
#include "model/gpt.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/data/strategy.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "plan/memory_model.hpp"
#include "train/checkpointer.hpp"
#include "train/pipeline_runner.hpp"
#include "train/run_directory.hpp"
#include "train/step_metrics.hpp"

namespace trident {
namespace {

constexpr uint64_t kTrainStream = 1, kValStream = 2;
constexpr int kExitLossNotFinite = 3;
constexpr int kExitStoppedEarly = 4;  // a signal or the time budget: checkpoint written, resumable

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The token files, checked against the vocabulary before any file is written.
struct TrainingData {
  TokenIds train, val;
};

TrainingData read_training_data(const Config& c) {
  TrainingData data{read_token_file(c.data.train), read_token_file(c.data.val)};
  for (const auto& [tokens, path] :
       {std::pair{&data.train, &c.data.train}, std::pair{&data.val, &c.data.val}})
    if (const std::string past = token_past_vocabulary(*tokens, c.model.vocab_size, *path);
        !past.empty())
      throw InputError(past);
  return data;
}

// Checks a checkpoint's config against the run's, before anything is written: the model must be
// the same; keys that change what the remaining steps compute only with --allow-config-change.
// Every difference is listed.
void check_resume_compatible(const Config& ours, const std::string& path, bool allow_math_changes,
                             const std::string& data_identity, const Console& console) {
  const Config theirs = read_checkpoint_config(path);
  const ModelConfig &a = ours.model, &b = theirs.model;
  if (a.shape_line() != b.shape_line())
    throw InputError(
        fmt::format("checkpoint '{}' holds a different model ({}) than the config ({})", path,
                    b.shape_line(), a.shape_line()));
  const std::vector<ConfigChange> changes = config_changes(theirs, ours);
  std::string math;
  for (const ConfigChange& c : changes)
    if (c.changes_math)
      math += fmt::format("{}{} {} -> {}", math.empty() ? "" : ", ", c.key, c.before, c.after);
  if (!math.empty() && !allow_math_changes)
    throw InputError(fmt::format(
        "resuming from '{}' with a config that changes what the remaining steps compute: {}; "
        "pass --allow-config-change if that is intended (layout, ZeRO, offload, recompute and "
        "output keys may change freely)",
        path, math));
  for (const ConfigChange& c : changes)
    console.line(
        fmt::format("resume: {} = {} (checkpoint: {}){}", c.key, c.after, c.before,
                    c.changes_math ? "; changes the remaining run (--allow-config-change)" : ""));
  // The data itself: a file replaced or shuffled under the same name changes the remaining
  // batches as surely as a config key.
  const std::string recorded = read_checkpoint_meta(path).data_identity;
  if (recorded.empty()) {
    console.line(fmt::format(
        "resume: '{}' records no data identity (an older trident wrote it): the data files are "
        "not checked",
        path));
    return;
  }
  const std::string change = data_identity_change(recorded, data_identity);
  if (change.empty()) return;
  if (!allow_math_changes)
    throw InputError(
        fmt::format("resuming from '{}': the {}; resume with the data it was trained on, or pass "
                    "--allow-config-change if that is intended",
                    path, change));
  console.line(fmt::format("resume: the {} (--allow-config-change)", change));
}

// run.init_from: a checkpoint that opens with valid metadata and holds this config's model
// (model.name aside); InputError naming every model key that differs otherwise.
void check_init_from(const Config& ours) {
  const std::string& path = ours.run.init_from;
  const Config stored = read_checkpoint_config(path);
  read_checkpoint_meta(path);
  std::vector<std::string> differ;
  for (const ConfigChange& c : config_changes(stored, ours))
    if (c.key.rfind("model.", 0) == 0 && c.key != "model.name")
      differ.push_back(fmt::format("{} = {} (this config: {})", c.key, c.before, c.after));
  if (!differ.empty())
    throw InputError(fmt::format(
        "run.init_from '{}' holds another model: {}; give this run the checkpoint's [model] "
        "(trident ckpt info {} shows it)",
        path, fmt::join(differ, ", "), path));
}

// --resume auto, what a requeued job needs: the complete checkpoints, newest first by the step
// recorded inside them. Rank 0 decides and tells the others, so every rank tries the same files.
std::vector<std::string> complete_checkpoints_for_all(const std::filesystem::path& dir,
                                                      const HostCollectives& world,
                                                      const Console& console) {
  std::vector<std::string> skipped;
  std::string joined;  // one path a line
  if (world.rank() == 0)
    for (const std::string& path : complete_checkpoints(dir.string(), &skipped))
      joined += path + "\n";
  joined = world.broadcast(joined);
  for (const std::string& why : skipped) console.line("--resume auto: skipping " + why);
  std::vector<std::string> out;
  for (size_t begin = 0, end; (end = joined.find('\n', begin)) != std::string::npos;
       begin = end + 1)
    out.push_back(joined.substr(begin, end - begin));
  if (out.empty())
    console.line(
        fmt::format("--resume auto: no checkpoint in {}; starting from step 0", dir.string()));
  return out;
}

// Before allocating anything: what the memory model says this rank needs, against the memory its
// kernels use. On a GPU build that is its device's, shared by the ranks using it (ranks take a
// node's devices round-robin, as Kokkos assigns them); on the host, the tightest of the node's
// memory and the node's cgroup limit, each shared by the node's ranks, and the address space
// `ulimit -v` leaves this process. One decision for all ranks, so none is left waiting.
void check_memory_fits(const MemoryPrediction& mine, const HostCollectives& world) {
  const int node_ranks = world.ranks_on_node();
  std::vector<HostMemoryBound> bounds;
#if defined(KOKKOS_ENABLE_CUDA)
  size_t free_bytes = 0, device_bytes = 0;
  cudaMemGetInfo(&free_bytes, &device_bytes);
  int devices = 1;
  cudaGetDeviceCount(&devices);
  const int sharing = (node_ranks + std::max(devices, 1) - 1) / std::max(devices, 1);
  const double bytes = static_cast<double>(device_bytes);
  bounds.push_back({bytes, fmt::format("GPU's {:.1f} GiB", bytes / 1073741824.0), true});
#else
  const int sharing = node_ranks;
  bounds = host_memory_bounds();
#endif
  double over = 0;
  std::string limit;
  for (const HostMemoryBound& b : bounds) {
    const double ratio = mine.total() / (b.shared ? b.bytes / sharing : b.bytes);
    if (ratio > over) {
      over = ratio;
      limit = b.shared ? fmt::format("{} shared by {} ranks", b.what, sharing) : b.what;
    }
  }
  if (world.max(over) > 1.0)
    throw InputError(fmt::format(
        "this configuration needs {:.1f} GiB on rank {} by the memory model (model states "
        "{:.1f} GiB, activations {:.1f} GiB), more than {}; use more ranks, ZeRO, offload, "
        "recomputation or a smaller model (see `trident plan`)",
        mine.total() / 1073741824.0, world.rank(), mine.model_states() / 1073741824.0,
        mine.bytes[static_cast<int>(MemCategory::kActivations)] / 1073741824.0, limit));
}

// "dp=2 tp=1 pp=2 schedule=1f1b micro_batch=4 precision=bf16": the layout in logs and files.
std::string describe_layout(const Config& c, const Grid& grid) {
  const ParallelSection& par = c.parallel;
  std::string out = grid.describe();
  if (par.ep > 1) out += fmt::format(" ep={}", par.ep);
  if (par.cp > 1) out += fmt::format(" cp_comm={}", name_of(par.cp_comm));
  if (par.cp > 1 && par.cp_split != CpSplit::kBalanced)
    out += fmt::format(" cp_split={}", name_of(par.cp_split));
  if (par.pp > 1) out += fmt::format(" schedule={}", name_of(par.schedule));
  if (par.virtual_stages > 1) out += fmt::format(" v={}", par.virtual_stages);
  if (par.sequence_parallel && par.tp > 1) out += " sequence_parallel";
  out += fmt::format(" micro_batch={}", c.train.micro_batch_size);
  if (c.precision.compute != Precision::kFp32)
    out += fmt::format(" precision={}", name_of(c.precision.compute));
  if (c.precision.grad_reduce != Precision::kFp32)
    out += fmt::format(" grad_reduce={}", name_of(c.precision.grad_reduce));
  if (c.recompute.policy != RecomputePolicy::kNone)
    out += fmt::format(" recompute={}{}", name_of(c.recompute.policy),
                       c.recompute.layers > 0 ? fmt::format(":{}", c.recompute.layers) : "");
  return out;
}

// <nvme_dir>/<run name>.rank<r>: what this rank's NVMe offload files are named after (and locked).
std::string offload_prefix(const Config& c, int rank) {
  return (std::filesystem::path(c.offload.nvme_dir) / fmt::format("{}.rank{}", c.run.name, rank))
      .string();
}

DataParallelSettings data_parallel_settings(const Config& c, int rank, int chunk) {
  DataParallelSettings s;
  s.zero = c.zero.stage;
  s.precision = c.precision.compute;
  s.grad_reduce = c.precision.grad_reduce;
  s.sync = c.dp.sync;
  s.bucket_elements = dp_bucket_elements(c.parallel.dp_bucket_mb);
  s.adamw = {c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay};
  // Files are per rank and chunk, named after the run so that runs sharing a directory differ.
  const std::string files = fmt::format("{}.chunk{}", offload_prefix(c, rank), chunk);
  s.moments.nvme = c.offload.optimizer == OffloadTarget::kNvme;
  s.moments.path_prefix = files;
  s.moments.buffer_elements =
      std::max<int64_t>(1, static_cast<int64_t>(c.offload.buffer_mb * 1048576.0 / 4));
  if (c.offload.params == OffloadTarget::kNvme) s.params_file = files + ".params";
  s.seed = static_cast<uint64_t>(c.run.seed);
  return s;
}

// The flight recorder over run()'s steps: started with where its dumps go, stopped when run()
// returns, since it reads the trainer's phase timer and step.
class FlightRecording {
 public:
  FlightRecording(int capacity, int rank, const std::filesystem::path& dir, const PhaseTimer& timer,
                  const std::atomic<int>& step) {
    FlightRecorder::instance().start(static_cast<size_t>(capacity), rank, node_name(),
                                     (dir / fmt::format("rank_{:05d}.jsonl", rank)).string(),
                                     &timer, &step);
  }
  ~FlightRecording() { FlightRecorder::instance().stop(); }
  FlightRecording(const FlightRecording&) = delete;
  FlightRecording& operator=(const FlightRecording&) = delete;
};

class Trainer {
 public:
  Trainer(Config config, const Grid& grid, const TrainOptions& options, StepHooks& hooks);
  int run();

 private:
  // Data, resume, memory check, model chunks, restore, outputs; returns the first step to run.
  int setup(std::unique_ptr<TimingsWriter>& timings);
  // The run owns its directory (and its NVMe offload files) from here to its end: locked; a fresh
  // run refuses one holding an earlier run, an explicit --resume one holding later checkpoints.
  void own_run_directory();
  // Loads the first of `candidates` that verifies; returns its step. --resume auto falls back
  // past a checkpoint that fails its checksums, with a line; an explicit --resume does not.
  int resume_from(const std::vector<std::string>& candidates);
  void build_chunks(MemoryLedger& ledger);
  std::unique_ptr<TimingsWriter> open_outputs(int start_step, const MemoryPrediction& mine);
  void print_banner(int start_step) const;
  // The banner's lines on what computes: GEMM libraries, kernels, threads, devices, warnings.
  void print_compute_lines() const;
  // One optimizer step (0-based `step`); false when the loss is not finite.
  bool train_step(int step, StepOutcome& out);
  // After a step: writes (or starts) its checkpoint when `checkpoint`, or commits an asynchronous
  // one whose write has ended; the seconds go to `out` apart from the step's. Collective.
  void checkpoint_after(StepOutcome& out, bool checkpoint);
  // Clips by the global norm of grad_scale x the gradient and steps every chunk; returns the
  // norm.
  double clip_and_step(double lr, double grad_scale);
  // The step's mean loss from the summed per-token losses into `out`; false, saying so, when it
  // is not finite (the run stops).
  bool take_loss(double loss_sum, StepOutcome& out);
  // The MoE blocks' balance over the step's forwards, summed over every chunk and rank.
  void take_moe_stats(StepOutcome& out);
  // train.expert_bias_rate > 0: the selection bias moved by the step's expert counts.
  void update_expert_bias(const StepOutcome& out);
  // fp16: whether any rank's gradient holds an infinity or NaN (1-based `step`), decided for
  // every rank: then the step is skipped and the loss scale updated.
  bool overflow_skips_step(int step);
  bool exchange_async_gradients();
  double evaluate();
  // After 1-based `step`: a checkpoint (unless the step wrote one), the closing lines.
  void stop_early(int step, const std::string& why, const StepMetrics& metrics);

  Config config_;
  const Grid& grid_;
  TrainOptions options_;
  StepHooks& hooks_;
  Console console_;
  const std::string layout_;               // describe_layout(): logs, timings and checkpoints
  HostCollectives world_, model_replica_;  // every rank; one model replica (pp x tp)
  // Per-axis backend (parallel.backend_*); dp_ spans dp x cp (the ranks holding the same
  // parameters), cp_ the context-parallel group (null with cp = 1).
  std::unique_ptr<Communicator> tp_, dp_, pp_, cp_;
  std::unique_ptr<Communicator> embedding_;  // first and last stage: the tied embedding
  // Expert parallelism (parallel.ep > 1): the ranks exchanging tokens, and the experts' replicas.
  std::unique_ptr<Communicator> ep_, expert_dp_;
  std::unique_ptr<RunDirectory> run_dir_;  // created and locked first, released last
  PhaseTimer timer_;
  MemoryLedger ledger_;
  std::vector<ModelChunk> chunks_;
  // One rank and one model chunk: the global norm and AdamW's gradient scale are computed on the
  // device (kernels::clip_scale), so AdamW follows the norm with no wait for the host, which
  // reads the norm once AdamW is launched. Decided at the first update.
  enum class DeviceClip { kUndecided, kOn, kOff } device_clip_ = DeviceClip::kUndecided;
  Kokkos::View<double, MemSpace> clip_squares_{"clip_squares"}, clip_norm_{"clip_norm"};
  Kokkos::View<float, MemSpace> clip_scale_{"clip_scale"};
  std::unique_ptr<PipelineRunner> runner_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::vector<pipeline::Action> schedule_, eval_actions_;
  TrainingData data_;
  std::string data_identity_;  // what the checkpoints record of data_ (data_identity lines)
  std::unique_ptr<BatchSampler> train_sampler_, val_sampler_;
  LrSchedule lr_;
  LossScaler scaler_;  // enabled for fp16
  int64_t tokens_per_step_ = 0;
  int first_update_step_ = 0;       // 0-based: async makes no update on a run's first step
  bool replicas_diverged_ = false;  // local_sgd: a local step since the last average
  // Context parallelism: the bytes this rank's stages have sent over cp so far.
  size_t cp_bytes_sent() const {
    size_t bytes = 0;
    for (const ModelChunk& ch : chunks_) bytes += ch.stage->cp_bytes_sent();
    return bytes;
  }
  std::atomic<int> current_step_{0};  // 1-based, for the watchdog's message
  // Mixture of Experts: every MoE layer's aux-loss-free selection bias [moe layers x E], the same
  // on every rank (updated from counts summed over every rank); empty for a dense model.
  std::vector<float> expert_bias_;
};

// What GPU GEMMs multiply in: the 16-bit format of a 16-bit run (its operands hold such values),
// else fp32 or, asked for, TF32.
kernels::GemmMath gemm_math_for(const PrecisionSection& p) {
  switch (p.compute) {
    case Precision::kBf16:
      return kernels::GemmMath::kBf16;
    case Precision::kFp16:
      return kernels::GemmMath::kFp16;
    case Precision::kFp32:
      break;
  }
  return p.fp32_matmul == Fp32Matmul::kTf32 ? kernels::GemmMath::kTf32 : kernels::GemmMath::kFp32;
}

Trainer::Trainer(Config config, const Grid& grid, const TrainOptions& options, StepHooks& hooks)
    : config_(std::move(config)),
      grid_(grid),
      options_(options),
      hooks_(hooks),
      console_(grid.rank() == 0),
      layout_(describe_layout(config_, grid)),
      world_(grid.world(), "world"),
      model_replica_(grid.model_parallel_comm(), "replica"),
      // auto: NCCL for tp and dp where every group of the axis shares a node (comm/backend.hpp).
      // The pipeline's auto stays on MPI, staged through pinned host memory when the MPI is not
      // CUDA-aware, until NCCL point-to-point in schedule order has run on a GPU;
      // parallel.backend_pp = "nccl" asks for it.
      tp_(make_communicator(grid.comm(Axis::tp), config_.parallel.backend_tp,
                            grid.groups_node_local(Axis::tp), "parallel.backend_tp", "tp")),
      dp_(make_communicator(grid.data_comm(), config_.parallel.backend_dp,
                            grid.groups_node_local(Axis::dp) && grid.groups_node_local(Axis::cp),
                            "parallel.backend_dp", "dp")),
      pp_(make_communicator(grid.comm(Axis::pp), config_.parallel.backend_pp, /*node_local=*/false,
                            "parallel.backend_pp", "pp")),
      tokens_per_step_(static_cast<int64_t>(config_.train.batch_size) * config_.train.seq_len) {
  if (grid.embedding_comm() != MPI_COMM_NULL)
    embedding_ = std::make_unique<MpiCommunicator>(grid.embedding_comm());
  // Key/value chunks every layer: the tensor-parallel axis's choice of backend (both are the
  // fast, node-local axes).
  if (config_.parallel.cp > 1)
    cp_ = make_communicator(grid.comm(Axis::cp), config_.parallel.backend_tp,
                            grid.groups_node_local(Axis::cp), "parallel.backend_tp", "cp");
  // The expert groups are parts of dp x tp: they take parallel.backend_dp's choice. Experts have
  // replicas of their own under expert parallelism, and when the tp ranks route their own tokens
  // (their experts' gradients are then partial over tp as well as dp): the memory model's test,
  // which also lays out their units.
  if (grid.experts().ep > 1)
    ep_ = make_communicator(grid.expert_comm(), config_.parallel.backend_dp,
                            grid.groups_node_local(Axis::dp), "parallel.backend_dp", "ep");
  if (experts_own_replicas(memory_query(config_)))
    expert_dp_ =
        make_communicator(grid.expert_data_comm(), config_.parallel.backend_dp,
                          grid.groups_node_local(Axis::dp), "parallel.backend_dp", "expert_dp");
  // Kernels on a GPU run behind the host: phases fence (in the steps run.phase_fences and the
  // hooks choose), or each is charged its predecessor's queued work. Host kernels finish before
  // the host goes on.
  if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
    timer_.set_settle([] { Exec().fence(); });
  kernels::set_gemm_math(gemm_math_for(config_.precision));
  const PrecisionSection& p = config_.precision;
  if (p.compute == Precision::kFp16)
    scaler_ = LossScaler(p.loss_scale, p.growth_interval, p.backoff, p.hysteresis);
  const double peak_lr =
      scaled_lr(config_.optim.lr, config_.optim.lr_scaling, static_cast<double>(tokens_per_step_),
                static_cast<double>(config_.optim.base_batch_tokens));
  lr_ = {peak_lr, config_.optim.min_lr_ratio, config_.optim.warmup_steps, config_.run.steps};
}

int Trainer::run() {
  std::unique_ptr<TimingsWriter> timings;
  const int start_step = setup(timings);
  if (start_step == config_.run.steps) {
    console_.line(fmt::format("run {} is already complete at step {} ({}); nothing to do",
                              run_dir_->path().string(), start_step, options_.resume));
    return 0;
  }
  std::vector<int> stages(static_cast<size_t>(grid_.size()));
  for (int r = 0; r < grid_.size(); ++r)
    stages[static_cast<size_t>(r)] = grid_coord(grid_.shape(), r)[Axis::pp];
  const RunShape shape{config_.run.steps,
                       start_step,
                       config_.run.log_every,
                       tokens_per_step_,
                       flops_per_token(config_.model, config_.train.seq_len),
                       config_.run.peak_tflops,
                       layout_,
                       stages};
  StepMetrics metrics(shape, world_, ledger_, std::move(timings), console_);
  const FlightRecording recording(config_.run.flight_recorder, grid_.rank(),
                                  run_dir_->path() / "flight", timer_, current_step_);
  const Watchdog watchdog(timer_, config_.run.watchdog_seconds, grid_.rank(),
                          [this] { return current_step_.load(); });
  const StopRequest stop(config_.run.stop_signals, config_.run.max_minutes);
  for (int step = start_step; step < config_.run.steps; ++step) {
    StepOutcome outcome;
    if (!train_step(step, outcome)) {
      checkpointer_->finish();  // the last checkpoint before the loss went bad is kept
      return kExitLossNotFinite;
    }
    // Validation is outside the step's timed phases: it is not training work.
    const int every = config_.run.eval_every;
    const bool evaluation =
        outcome.step == config_.run.steps || (every > 0 && outcome.step % every == 0);
    outcome.val_loss = evaluation ? evaluate() : NAN;
    metrics.record(outcome);
    // Every rank learns whether any was asked to stop, so all stop after the same step.
    const int why = static_cast<int>(world_.max(stop.reason(outcome.seconds)));
    if (why != 0 && outcome.step < config_.run.steps) {
      stop_early(outcome.step, stop.describe(why), metrics);
      return kExitStoppedEarly;
    }
  }
  checkpointer_->finish();
  run_dir_->require_still_there();
  metrics.summarise(checkpointer_->last_written());
  return 0;
}

bool Trainer::train_step(int step, StepOutcome& out) {
  timer_.reset();
  out.step = step + 1;
  current_step_ = out.step;
  timer_.set_settling(config_.run.phase_fences == PhaseFences::kEveryStep ||
                      hooks_.fences_phases(out.step));
  hooks_.step_begins(out.step, timer_);
  const DpSync sync = config_.dp.sync;
  const bool checkpoint = checkpointer_->due(out.step);
  // local_sgd synchronises every local_steps-th step, and before checkpoints, so that a
  // checkpoint holds one model.
  const bool synchronous =
      sync != DpSync::kLocalSgd || out.step % config_.dp.local_steps == 0 || checkpoint;
  const bool reduce_over_dp = sync != DpSync::kAsync && synchronous;
  const auto start = std::chrono::steady_clock::now();
  const size_t cp_before = cp_bytes_sent();
  // Forward and backward over every micro-batch in the schedule's order; gradients reduced.
  for (ModelChunk& ch : chunks_) ch.dp->zero_grads();
  // The MoE balance counts this step's training forwards only (not an evaluation's before it).
  if (config_.model.moe.enabled())
    for (ModelChunk& ch : chunks_) ch.stage->take_moe_stats();
  // Mean over the global batch's tokens, times the fp16 loss scale (1 otherwise).
  const float loss_scale =
      static_cast<float>(scaler_.scale() / static_cast<double>(tokens_per_step_));
  // One rank reads its loss with the gradient norm, once AdamW is launched, so that the device
  // runs on from backward to the update; several ranks sum theirs over MPI first.
  const bool loss_with_norm = world_.size() == 1;
  const double loss_sum =
      runner_->train(schedule_, *train_sampler_, step, reduce_over_dp, loss_scale, !loss_with_norm);
  if (config_.model.moe.enabled()) take_moe_stats(out);
  if (!loss_with_norm && !take_loss(world_.sum(loss_sum), out)) return false;
  // async applies the gradient reduced during the previous step; the first has none.
  bool update = sync != DpSync::kAsync || exchange_async_gradients();
  // fp16: an overflow on any rank skips the step everywhere and (after the hysteresis) lowers the
  // loss scale. The gradients hold scale x the true gradient until clipping divides it out.
  out.loss_scale = scaler_.scale();
  out.skipped = update && overflow_skips_step(out.step);
  update = update && !out.skipped;
  if (step == first_update_step_ && !options_.dump_grads.empty())
    checkpointer_->dump_gradients(options_.dump_grads, step,
                                  {options_.config_path, options_.resume, config_.data.train,
                                   config_.data.val, config_.run.init_from});
  {  // Clip by the global norm and step the optimizer on this rank's part.
    ScopedPhase phase(timer_, Phase::kOptimizer);
    out.lr = lr_.at(step);
    // A local step's gradient is normalised by the global batch: scale it to the replica's.
    const double replica_scale =
        reduce_over_dp || sync == DpSync::kAsync ? 1.0 : grid_.shape()[Axis::dp];
    out.grad_norm = update ? clip_and_step(out.lr, replica_scale / out.loss_scale) : 0.0;
  }
  if (loss_with_norm && !take_loss(runner_->read_losses(), out)) return false;
  if (config_.model.moe.enabled()) {
    if (update && config_.train.expert_bias_rate > 0) update_expert_bias(out);
    out.moe_layers.expert_bias = expert_bias_;
  }
  if (sync == DpSync::kLocalSgd && !synchronous) replicas_diverged_ = true;
  if (sync == DpSync::kLocalSgd && synchronous && replicas_diverged_) {
    ScopedPhase phase(timer_, Phase::kDpComm);
    for (ModelChunk& ch : chunks_) ch.dp->average_replicas();
    replicas_diverged_ = false;
  }
  for (ModelChunk& ch : chunks_) ch.dp->gather_params();
  hooks_.step_ends(out.step);
  // The step's training time ends here: a checkpoint written after it is reported apart.
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (checkpoint || checkpointer_->pending()) checkpoint_after(out, checkpoint);
  out.end_unix = unix_seconds();
  out.phases = timer_.all();
  out.compute_seconds = timer_.compute_seconds();
  out.cp_bytes = static_cast<double>(cp_bytes_sent() - cp_before);
  return true;
}

void Trainer::checkpoint_after(StepOutcome& out, bool checkpoint) {
  // Every second the training thread spends on checkpoints after the step is reported apart.
  const auto start = std::chrono::steady_clock::now();
  ScopedPhase phase(timer_, Phase::kIo);
  if (checkpoint) {
    // An asynchronous write still running is waited for first; the last step's is at once.
    out.checkpoint_background_seconds = checkpointer_->finish();
    checkpointer_->save(out.step, scaler_);
    if (out.step == config_.run.steps) out.checkpoint_background_seconds = checkpointer_->finish();
  } else {
    out.checkpoint_background_seconds = checkpointer_->poll();
  }
  out.checkpoint_saved = checkpoint;
  out.checkpoint_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Trainer::update_expert_bias(const StepOutcome& out) {
  // Once per optimizer step, from the step's slots per expert summed over every micro-batch and
  // rank (training forwards only: a recomputation does not count them again).
  const size_t E = static_cast<size_t>(config_.model.moe.n_experts);
  const View1 bias("expert_bias", E), counts("expert_counts", E);
  const auto host_bias = Kokkos::create_mirror_view(bias);
  const auto host_counts = Kokkos::create_mirror_view(counts);
  for (size_t l = 0; l * E < expert_bias_.size(); ++l) {
    for (size_t e = 0; e < E; ++e) {
      host_bias(e) = expert_bias_[l * E + e];
      host_counts(e) = static_cast<float>(out.moe_layers.tokens_per_expert[l * E + e]);
    }
    Kokkos::deep_copy(bias, host_bias);
    Kokkos::deep_copy(counts, host_counts);
    kernels::expert_bias_update(Exec(), bias, counts,
                                static_cast<float>(config_.train.expert_bias_rate));
    Kokkos::deep_copy(host_bias, bias);
    for (size_t e = 0; e < E; ++e) expert_bias_[l * E + e] = host_bias(e);
  }
  for (ModelChunk& ch : chunks_) ch.stage->set_expert_bias(expert_bias_);
}

void Trainer::take_moe_stats(StepOutcome& out) {
  // Every MoE layer of the model, in layer order: its sums from whichever ranks hold it, summed
  // over every rank (data-parallel replicas add their forwards and tokens).
  const ModelConfig& m = config_.model;
  const std::vector<int> layers = m.moe_layer_indices();
  const size_t E = static_cast<size_t>(m.moe.n_experts), width = 5 + E;
  std::vector<double> sums(layers.size() * width, 0.0);
  // The tp ranks route the same groups (the statistics are the group's on each): one counts.
  const bool counts = grid_.coord()[Axis::tp] == 0;
  for (ModelChunk& ch : chunks_)
    for (const MoeBlockStats& b : ch.stage->take_moe_stats()) {
      if (!counts) continue;
      const size_t at =
          static_cast<size_t>(std::find(layers.begin(), layers.end(), b.layer) - layers.begin());
      double* row = &sums[at * width];
      row[0] += b.aux, row[1] += b.z, row[2] += b.dropped, row[3] += b.slots, row[4] += b.forwards;
      for (size_t e = 0; e < E; ++e) row[5 + e] += b.tokens[e];
    }
  sums = world_.sum(sums);
  double aux = 0, z = 0, dropped = 0, slots = 0, forwards = 0;
  MoeLayerBalance& per = out.moe_layers;
  per.layers = layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    const double* row = &sums[l * width];
    aux += row[0], z += row[1], dropped += row[2], slots += row[3], forwards += row[4];
    per.aux_loss.push_back(row[0] / std::max(1.0, row[4]));
    per.z_loss.push_back(row[1] / std::max(1.0, row[4]));
    per.dropped_fraction.push_back(row[3] > 0 ? row[2] / row[3] : 0.0);
    per.tokens_per_expert.insert(per.tokens_per_expert.end(), row + 5, row + width);
  }
  out.moe = true;
  out.moe_aux_loss = aux / std::max(1.0, forwards);
  out.moe_z_loss = z / std::max(1.0, forwards);
  out.moe_dropped_fraction = slots > 0 ? dropped / slots : 0.0;
}

bool Trainer::take_loss(double loss_sum, StepOutcome& out) {
  out.loss = loss_sum / static_cast<double>(tokens_per_step_);
  if (std::isfinite(out.loss)) return true;
  console_.line(
      fmt::format("error: loss is {} at step {}; stopping (lower optim.lr or check the data)",
                  out.loss, out.step));
  return false;
}

double Trainer::clip_and_step(double lr, double grad_scale) {
  // One model replica's norm, each tensor counted once: a slice held by several tp ranks only on
  // the first of them, the tied embedding only on the first stage.
  const int tp_rank = grid_.coord()[Axis::tp];
  const auto counted = [tp_rank](const ModelChunk& ch) {
    return [&ch, tp_rank](const LocalParam& p) {
      return p.first_replica(tp_rank) && (ch.first || p.spec->name != "wte");
    };
  };
  if (device_clip_ == DeviceClip::kUndecided)
    device_clip_ = world_.size() == 1 && chunks_.size() == 1 &&
                           chunks_.front().dp->read_grad_scale_from(clip_scale_.data())
                       ? DeviceClip::kOn
                       : DeviceClip::kOff;
  if (device_clip_ == DeviceClip::kOn) {
    const ModelChunk& ch = chunks_.front();
    ch.dp->grad_squares_on_device(counted(ch), clip_squares_);
    kernels::clip_scale(Exec(), clip_squares_, grad_scale, config_.optim.max_norm, clip_norm_,
                        clip_scale_);
    ch.dp->step(lr, 0.0f);  // AdamW reads the scale clip_scale wrote
    double norm = 0.0;
    Kokkos::deep_copy(norm, clip_norm_);
    return norm;
  }
  double squares = 0.0;
  const bool sharded = chunks_.front().dp->gradient_sharded();
  if (expert_dp_ && !sharded) {
    // Experts differ between the ranks of an expert-parallel group and repeat over their
    // replicas: their squares count on the first replica, summed over every rank.
    const bool first_replica = grid_.experts().expert_dp_rank == 0;
    double experts = 0.0;
    for (const ModelChunk& ch : chunks_) {
      const auto all = counted(ch);
      ch.dp->add_grad_squares(squares, [&](const LocalParam& p) { return !p.experts() && all(p); });
      ch.dp->add_grad_squares(
          experts, [&](const LocalParam& p) { return p.experts() && first_replica && all(p); });
    }
    squares = model_replica_.sum(squares) + world_.sum(experts);
  } else {
    for (const ModelChunk& ch : chunks_) ch.dp->add_grad_squares(squares, counted(ch));
    // Summed over pp x tp, and over dp too when dp ranks hold different shards of the gradient
    // (ZeRO-2/3: every element on one rank of its group, the dp ranks or the experts' replicas).
    squares = sharded ? world_.sum(squares) : model_replica_.sum(squares);
  }
  const double norm = grad_scale * std::sqrt(squares);
  const double max_norm = config_.optim.max_norm;
  const float clip = static_cast<float>(
      grad_scale * (max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0));
  for (ModelChunk& ch : chunks_) ch.dp->step(lr, clip);
  return norm;
}

bool Trainer::overflow_skips_step(int step) {
  if (!scaler_.enabled()) return false;
  hooks_.gradients_final(step, chunks_.front().dp->held_gradients());
  double bad = 0.0;
  for (const ModelChunk& ch : chunks_) {
    const View1 grads = ch.dp->held_gradients();
    if (kernels::any_non_finite(Exec(), grads, grads.extent(0))) bad = 1.0;
  }
  const double scale = scaler_.scale();
  if (!scaler_.update(world_.sum(bad) > 0)) return false;  // one decision for every rank
  console_.line(fmt::format(
      "step {:>5}/{} | fp16 gradient overflow: step skipped on every rank, loss scale {:g} -> {:g}",
      step, config_.run.steps, scale, scaler_.scale()));
  return true;
}

bool Trainer::exchange_async_gradients() {
  ScopedPhase phase(timer_, Phase::kDpComm);
  bool had_one = false;
  for (ModelChunk& ch : chunks_) had_one = ch.dp->exchange_async_gradients();
  return had_one;
}

void Trainer::stop_early(int step, const std::string& why, const StepMetrics& metrics) {
  std::string saved = "run.checkpoint_every = -1: no checkpoint written";
  if (config_.run.checkpoint_every >= 0) {
    if (!checkpointer_->due(step)) {
      // A checkpoint holds one model: local_sgd replicas are averaged first, as before any.
      if (config_.dp.sync == DpSync::kLocalSgd && replicas_diverged_) {
        for (ModelChunk& ch : chunks_) ch.dp->average_replicas();
        for (ModelChunk& ch : chunks_) ch.dp->gather_params();
        replicas_diverged_ = false;
      }
      checkpointer_->save(step, scaler_);
    }
    checkpointer_->finish();
    saved =
        fmt::format("checkpoint {}; continue with --resume auto", checkpointer_->last_written());
  }
  const std::string line =
      fmt::format("stopping after step {}/{} on {}: {}", step, config_.run.steps, why, saved);
  console_.line(line);
  run_dir_->record_stop(line);
  metrics.summarise(checkpointer_->last_written());
}

double Trainer::evaluate() {
  double sum = 0.0;
  for (int b = 0; b < config_.run.eval_batches; ++b)
    sum += runner_->evaluate(eval_actions_, *val_sampler_, b);
  return world_.sum(sum) / (static_cast<double>(config_.run.eval_batches) *
                            config_.train.batch_size * config_.train.seq_len);
}

int Trainer::setup(std::unique_ptr<TimingsWriter>& timings) {
  // Everything the user supplied is checked before any file is written; a run that fails after
  // its directory was created leaves no empty directory behind.
  data_ = read_training_data(config_);
  data_identity_ = data_identity("train", config_.data.train, data_.train) + "\n" +
                   data_identity("val", config_.data.val, data_.val);
  const int T = config_.train.seq_len;
  train_sampler_ = std::make_unique<BatchSampler>(data_.train.ids, config_.run.seed, kTrainStream,
                                                  T, config_.data.train);
  val_sampler_ = std::make_unique<BatchSampler>(data_.val.ids, config_.run.seed, kValStream, T,
                                                config_.data.val);
  const std::filesystem::path run_dir =
      std::filesystem::path(config_.run.out_dir) / config_.run.name;
  std::vector<std::string> candidates;  // checkpoints to resume from, the first that loads wins
  if (options_.resume_newest)
    candidates = complete_checkpoints_for_all(run_dir / "checkpoints", world_, console_);
  else if (!options_.resume.empty())
    candidates = {options_.resume};
  if (!candidates.empty())
    check_resume_compatible(config_, candidates.front(), options_.allow_config_change,
                            data_identity_, console_);
  const bool init_from = candidates.empty() && !config_.run.init_from.empty();
  if (init_from) check_init_from(config_);
  if (!candidates.empty() && !config_.run.init_from.empty())
    console_.line(
        fmt::format("run.init_from = '{}' not used: the resumed checkpoint holds the "
                    "weights",
                    config_.run.init_from));
  // The memory model's prediction for this rank, checked now and recorded next to what the
  // ranks allocate.
  const GridCoord& me = grid_.coord();
  const MemoryPrediction mine = predict_rank_memory(memory_query(config_), me);
  check_memory_fits(mine, world_);
  own_run_directory();
  build_chunks(ledger_);
  const int start_step = candidates.empty() ? 0 : resume_from(candidates);
  if (init_from) checkpointer_->init_weights(config_.run.init_from, world_, console_);
  if (start_step > config_.run.steps)
    throw InputError(fmt::format(
        "checkpoint '{}' is at step {}, past run.steps = {}; raise run.steps to train further",
        options_.resume, start_step, config_.run.steps));
  if (start_step == config_.run.steps) return start_step;  // finished: nothing to write
  first_update_step_ = start_step + (config_.dp.sync == DpSync::kAsync ? 1 : 0);
  timings = open_outputs(start_step, mine);
  print_banner(start_step);
  return start_step;
}

void Trainer::own_run_directory() {
  run_dir_ = std::make_unique<RunDirectory>(config_, world_, console_);
  if (config_.offload.optimizer == OffloadTarget::kNvme ||
      config_.offload.params == OffloadTarget::kNvme) {
    run_dir_->lock_offload_files(offload_prefix(config_, grid_.rank()));
    run_dir_->remove_dead_offload_files(config_.offload.nvme_dir, config_.run.name, grid_.size());
  }
  if (!options_.resume_newest && options_.resume.empty())
    run_dir_->require_fresh(options_.overwrite);
  else if (!options_.resume_newest)
    run_dir_->require_nothing_after(checkpoint_step(options_.resume), options_.resume);
}

int Trainer::resume_from(const std::vector<std::string>& candidates) {
  for (size_t i = 0;; ++i) {
    try {
      if (i > 0)
        check_resume_compatible(config_, candidates[i], options_.allow_config_change,
                                data_identity_, console_);
      const int step = checkpointer_->load(candidates[i], scaler_, world_, console_);
      options_.resume = candidates[i];
      return step;
    } catch (const CorruptCheckpoint& e) {
      if (!options_.resume_newest || i + 1 == candidates.size()) throw;
      console_.line(fmt::format("--resume auto: skipping {}", e.what()));
    }
  }
}

void Trainer::build_chunks(MemoryLedger& ledger) {
  const ParallelSection& par = config_.parallel;
  const int v = par.virtual_stages, stages = par.pp * v;
  const int per_rank = config_.train.batch_size / par.dp;
  const PipelinePlace place{
      par.pp,
      grid_.coord()[Axis::pp],
      v,
      grid_.coord()[Axis::tp],
      config_.train.seq_len / par.cp,
      {par.cp, grid_.coord()[Axis::cp], config_.train.seq_len, par.cp_split == CpSplit::kBalanced},
      config_.train.micro_batch_size,
      per_rank / config_.train.micro_batch_size,
      grid_.coord()[Axis::dp] * per_rank};
  schedule_ = pipeline::make_schedule(par.schedule, par.pp, place.pp_rank, place.micro_batches, v);
  // Evaluation runs forwards only, in (micro-batch, virtual stage) order on every rank.
  for (int mb = 0; mb < place.micro_batches; ++mb)
    for (int chunk = 0; chunk < v; ++chunk)
      eval_actions_.push_back({pipeline::ActionType::kForward, mb, chunk});
  std::vector<int> deferred_sets;
  const MemoryQuery query = memory_query(config_);
  for (int chunk = 0; chunk < v; ++chunk) {
    ModelChunk ch;
    ch.virtual_stage = pipeline::virtual_stage(par.pp, place.pp_rank, chunk);
    ch.first = ch.virtual_stage == 0;
    ch.last = ch.virtual_stage == stages - 1;
    // The memory model's recipe: the stage it predicts is the one built here.
    const StageShape shape = stage_recipe(query, grid_.coord(), chunk);
    deferred_sets.push_back(shape.buffers.deferred_sets);
    ch.stage = std::make_unique<GptStage>(
        shape.model, shape.layout, tp_.get(), ledger, shape.max_batch, shape.max_seq, shape.slots,
        shape.buffers, ExpertComms{ep_.get(), grid_.expert_comm()}, cp_.get());
    ch.stage->set_timer(&timer_);
    ch.stage->set_moe_loss_coefficients(config_.train.aux_loss_coeff, config_.train.z_loss_coeff);
    ch.dp = DataParallelStrategy::create(*ch.stage, *dp_,
                                         data_parallel_settings(config_, grid_.rank(), chunk),
                                         ledger, timer_, expert_dp_.get());
    chunks_.push_back(std::move(ch));
  }
  runner_ = std::make_unique<PipelineRunner>(chunks_, *pp_, embedding_.get(), place, ledger, timer_,
                                             deferred_sets);
  expert_bias_.assign(static_cast<size_t>(config_.model.moe_layers()) * config_.model.moe.n_experts,
                      0.0f);
  checkpointer_ = std::make_unique<Checkpointer>(config_, grid_, world_, chunks_, layout_,
                                                 data_identity_, hooks_, expert_bias_);
}

// The timings file of this segment of the run, with what identifies it (rank 0), and the
// checkpoint directory. A resumed run starts a new segment; earlier ones are kept.
std::unique_ptr<TimingsWriter> Trainer::open_outputs(int start_step, const MemoryPrediction& mine) {
  const std::string hosts = world_.node_names();
  const std::vector<double> predicted =
      world_.gather(std::vector<double>(mine.bytes.begin(), mine.bytes.end()));
  // run.checkpoint_every = -1 writes no checkpoint, so leaves no checkpoints/ directory.
  if (config_.run.checkpoint_every >= 0) {
    checkpointer_->require_writable();
    for (const std::string& removed : checkpointer_->remove_unfinished_writes())
      console_.line(
          fmt::format("removed {}: a checkpoint write a killed process left unfinished", removed));
  }
  std::unique_ptr<TimingsWriter> timings;
  if (grid_.rank() == 0) {
    TimingsSegment segment{0, start_step};
    const std::filesystem::path timings_path = run_dir_->next_timings_segment(segment.number);
    const char* slurm = std::getenv("SLURM_JOB_ID");
    const BlasInfo blas = blas_info();
    // Model FLOPs per token and parameters let the analysis compare runs of different models
    // (Megatron-LM's weak scaling grows the model with the GPUs) in FLOP/s per rank.
    const ThreadsPerRank& threads = threads_per_rank();
    const std::map<std::string, TimingsAttribute> attributes{
        {"config", config_.to_toml()},
        {"layout", layout_},
        {"git_revision", std::string(git_revision())},
        {"hostnames", hosts},
        {"slurm_job_id", std::string(slurm ? slurm : "")},
        {"start_time", now_iso8601()},
        {"process_start_unix", process_start_unix()},
        {"resumed_from", options_.resume},
        {"peak_lr", lr_.peak_lr},
        {"flops_per_token", flops_per_token(config_.model, config_.train.seq_len)},
        {"parameters", static_cast<int64_t>(ParamTable(config_.model).total_numel())},
        {"blas", blas.describe()},
        {"blas_threads", static_cast<int64_t>(blas.threads)},
        {"host_simd", host_simd()},
        {"cpu_model", cpu_model()},
        {"mpi", mpi_library()},
        {"kokkos_backend", std::string(Exec::name())},
        {"threads_per_rank", static_cast<int64_t>(Exec().concurrency())},
        {"threads_chosen_by",
         std::string(threads.from_environment ? "OMP_NUM_THREADS" : "share of node")},
        {"node_cpus", static_cast<int64_t>(threads.node_cpus)}};
    timings = std::make_unique<TimingsWriter>(
        timings_path.string(), grid_.size(), attributes, segment, predicted,
        TimingsMoe{config_.model.moe_layer_indices(), config_.model.moe.n_experts});
  }
  world_.barrier();
  return timings;
}

#if defined(KOKKOS_ENABLE_CUDA)
// The banner's lines on the ranks' GPUs, on rank 0 (collective over `world`): each rank's device
// ordinal and PCI address (the first 16 ranks), and a warning for every GPU that several ranks of
// one host share.
std::vector<std::string> device_lines(const HostCollectives& world) {
  cudaDeviceProp p{};
  const int ordinal = Exec().cuda_device();
  cudaGetDeviceProperties(&p, ordinal);
  const std::vector<double> all =
      world.gather({static_cast<double>(ordinal), static_cast<double>(p.pciDomainID),
                    static_cast<double>(p.pciBusID), static_cast<double>(p.pciDeviceID)});
  std::istringstream hosts(world.node_names());
  if (world.rank() != 0) return {};
  std::map<std::string, std::string> sharing;  // "host, PCI address" -> its ranks
  std::string list;
  for (int r = 0; r < world.size(); ++r) {
    const double* d = &all[4 * static_cast<size_t>(r)];
    const std::string pci = fmt::format("{:04x}:{:02x}:{:02x}", static_cast<int>(d[1]),
                                        static_cast<int>(d[2]), static_cast<int>(d[3]));
    std::string host;
    std::getline(hosts, host, ',');
    std::string& ranks = sharing[host + ", PCI " + pci];
    ranks += (ranks.empty() ? "" : " ") + std::to_string(r);
    if (r < 16)
      list +=
          fmt::format("{}rank {} -> GPU {} ({})", r ? ", " : "", r, static_cast<int>(d[0]), pci);
  }
  std::vector<std::string> lines = {"devices: " + list + (world.size() > 16 ? ", ..." : "")};
  for (const auto& [where, ranks] : sharing)
    if (ranks.find(' ') != std::string::npos)
      lines.push_back(fmt::format(
          "warning: ranks {} share one GPU ({}): they take turns on it; run one rank per GPU "
          "(fewer ranks per node, or CUDA_VISIBLE_DEVICES)",
          ranks, where));
  return lines;
}
#endif

void Trainer::print_compute_lines() const {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaDeviceProp device{};
  cudaGetDeviceProperties(&device, Exec().cuda_device());
  console_.line(fmt::format("GEMM: {}, {} | kernels: Kokkos Cuda on device {} ({}, sm_{}{})",
                            kernels::cublas_summary(Exec()),
                            kernels::describe(kernels::gemm_math()), Exec().cuda_device(),
                            device.name, device.major, device.minor));
  console_.line(fmt::format("attention: attention.kernel = '{}' | {}",
                            name_of(config_.attention.kernel), kernels::cudnn_summary()));
  for (const std::string& line : device_lines(world_)) console_.line(line);
#else
  const BlasInfo blas = blas_info();
  console_.line(
      fmt::format("GEMM: {} | host kernels: {} | threads per rank: {} {} (Kokkos), BLAS {}",
                  blas.describe(), host_simd(), Exec::name(), Exec().concurrency(), blas.threads));
  console_.line(fmt::format("threads per rank: {}", threads_per_rank().describe()));
  const std::string oversubscribed = threads_per_rank().oversubscription_warning();
  if (!oversubscribed.empty()) console_.line("warning: " + oversubscribed);
  if (!blas.warning.empty()) console_.line("warning: " + blas.warning);
  if (config_.precision.compute != Precision::kFp32) {
    console_.line(fmt::format("{} GEMM: {}", name_of(config_.precision.compute),
                              kernels::onednn::describe(config_.precision.compute)));
    const std::string slower = kernels::onednn::slower_than_fp32(config_.precision.compute);
    if (!slower.empty()) console_.line("warning: " + slower);
  }
  const std::string pool_warning =
      blas_pool_warning(blas.threading, blas.threads, Exec::name(), Exec().concurrency());
  if (!pool_warning.empty()) console_.line("warning: " + pool_warning);
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const std::string wait_warning =
      wait_policy_warning(wait_policy ? wait_policy : "", Exec().concurrency(),
                          grid_.ranks_on_node(), threads_per_rank().node_cpus);
  if (!wait_warning.empty()) console_.line("warning: " + wait_warning);
#endif
}

void Trainer::print_banner(int start_step) const {
  const Config& c = config_;
  const int T = c.train.seq_len;
  const int micro_batches = c.train.batch_size / c.parallel.dp / c.train.micro_batch_size;
  console_.line(fmt::format("trident {} | model {} {} T={} | {:.3f}M parameters", git_revision(),
                            c.model.name, c.model.shape_line(), T,
                            ParamTable(c.model).total_numel() / 1e6));
  console_.line(fmt::format(
      "layout {} | {} ranks | global batch {} x {} = {} tokens | {} micro-batches per pipeline",
      layout_, grid_.size(), c.train.batch_size, T, tokens_per_step_, micro_batches));
  console_.line(fmt::format(
      "MFU = {:.4g} FLOP/token x tokens/s / ({} ranks x {} TFLOP/s peak per rank); FLOP/token = "
      "6 x params + 12 x L x C x T (PaLM)",
      flops_per_token(c.model, T), grid_.size(), c.run.peak_tflops));
  const double floor = lr_.peak_lr * c.optim.min_lr_ratio;
  if (c.optim.lr_scaling == LrScaling::kNone)
    console_.line(fmt::format("lr: peak {:.4g}, {} warmup steps, cosine to {:.4g}", lr_.peak_lr,
                              c.optim.warmup_steps, floor));
  else
    console_.line(fmt::format(
        "lr: peak {:.4g} = optim.lr {:.4g} x {}({} / {} tokens), {} warmup steps, cosine to "
        "{:.4g}",
        lr_.peak_lr, c.optim.lr, c.optim.lr_scaling == LrScaling::kSqrt ? "sqrt" : "",
        tokens_per_step_, c.optim.base_batch_tokens, c.optim.warmup_steps, floor));
  if (c.precision.compute != Precision::kFp32)
    console_.line(fmt::format(
        "precision: {0} parameters, activations and their gradients; {0} GEMMs with fp32 sums; "
        "fp32 statistics, weight gradients and master weights{1}{2}",
        name_of(c.precision.compute),
        c.precision.compute == Precision::kBf16
            ? " (each the bf16 parameter and its low 16 bits: 4 bytes, no fp32 copy)"
            : "",
        scaler_.enabled() ? fmt::format("; dynamic loss scale from {:g}", scaler_.scale())
                          : std::string()));
  console_.line(fmt::format("collectives: tp={} dp={} pp={} ({})", tp_->backend(), dp_->backend(),
                            pp_->backend(), backend_summary()));
  print_compute_lines();
  if (c.offload.optimizer == OffloadTarget::kHost &&
      std::is_same_v<Exec::memory_space, Kokkos::HostSpace>)
    console_.line(
        "offload.optimizer = host: this build is host-only, so the optimizer states already "
        "live in host memory; same as none");
  if (c.offload.optimizer == OffloadTarget::kNvme)
    console_.line(fmt::format(
        "offload.optimizer = nvme: AdamW moments streamed from {} through {} MiB buffers",
        c.offload.nvme_dir, c.offload.buffer_mb));
  console_.line(
      fmt::format("outputs: {}", (std::filesystem::path(c.run.out_dir) / c.run.name).string()));
  if (c.dp.sync == DpSync::kAsync && start_step > 0)
    console_.line(
        "dp.sync = async: the gradient in flight when the checkpoint was written is not stored; "
        "the first resumed step makes no update");
}

}  // namespace

namespace {

// Mixture of Experts on tensor-parallel ranks: each rank routes its own rows, so the sequence is
// split over them (Megatron-Core's rule; docs/moe.md).
void require_moe_sequence_parallel(const Config& c) {
  if (c.model.moe.enabled() && c.parallel.tp > 1 && !c.parallel.sequence_parallel)
    throw InputError(
        "Mixture of Experts with parallel.tp > 1 needs parallel.sequence_parallel = true: each "
        "tensor-parallel rank routes its own rows (Megatron-Core's rule; docs/moe.md)");
}

}  // namespace

int train(Config config, const Grid& grid, const TrainOptions& options) {
  require_moe_sequence_parallel(config);
  StepHooks no_hooks;
  StepHooks& hooks = options.hooks ? *options.hooks : no_hooks;
  return Trainer(std::move(config), grid, options, hooks).run();
}

}  // namespace trident
