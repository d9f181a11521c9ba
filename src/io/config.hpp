// Run configuration: TOML file + `--set key=value` overrides, every key typed and validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/grid.hpp"
#include "core/precision.hpp"
#include "core/stop_request.hpp"
#include "kernels/attention_tiles.hpp"
#include "model/context_options.hpp"
#include "model/model_config.hpp"
#include "model/recompute.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/data/options.hpp"
#include "parallel/pipeline/options.hpp"

namespace trident {

class HostCollectives;  // comm/host_comm.hpp

// When a GPU build fences the device at each phase change of a step (core/timer.hpp): only in a
// step that `train --profile-step` profiles (no fence stalls the launch queue; the other steps'
// phase times are when the host issued each phase's work, their sum still the step's time), or
// in every step (each phase's time is its own kernels': a phase breakdown, at the cost of a
// drained queue at each of the ~12 phase changes). Host builds run each kernel to its end anyway.
enum class PhaseFences { kProfiled, kEveryStep };
template <>
inline constexpr std::array<Named<PhaseFences>, 2> kNames<PhaseFences>{
    {{PhaseFences::kProfiled, "profiled"}, {PhaseFences::kEveryStep, "every_step"}}};

struct RunSection {
  std::string name = "run";
  std::string out_dir = "runs";
  int64_t seed = 1337;
  int steps = 100;
  int log_every = 1;
  int eval_every = 0;  // 0: validate only at the end
  int eval_batches = 4;
  int checkpoint_every = 0;  // 0: checkpoint only at the end; -1: never
  int keep_checkpoints = 0;  // keep the newest N checkpoints; 0: keep all
  // Write each checkpoint's bytes on a thread of each rank while the next steps run (after a copy
  // of the rank's state to host memory); false: before the next step starts.
  bool async_checkpoints = false;
  double watchdog_seconds = 600;  // abort when a rank's phase is unchanged this long; 0: off
  // Communication operations each rank's flight recorder keeps (core/flight_recorder.hpp); 0: off.
  int flight_recorder = 2048;
  double peak_tflops = 1.0;  // per rank; the denominator of MFU
  PhaseFences phase_fences = PhaseFences::kProfiled;
  // Stop early and resumably (checkpoint, exit status 4) on these signals, or before this
  // wall-clock budget in minutes runs out (0: none).
  std::vector<StopSignal> stop_signals = {StopSignal::kTerm, StopSignal::kInt, StopSignal::kUsr1};
  double max_minutes = 0;
  // A checkpoint whose weights start this run (a fine-tuning run: fresh optimizer, step 0, this
  // run's own schedule); "": initialise from run.seed. A resume takes its weights from the resumed
  // checkpoint instead.
  std::string init_from = "";
};

struct DataSection {
  std::string train = "data/kjv_train.bin";
  std::string val = "data/kjv_val.bin";
  // The Hugging Face model directory whose tokenizer made the token files, so that `generate`
  // encodes and decodes text with it; "": bytes (or no text at all).
  std::string tokenizer = "";
};

struct TrainSection {
  int seq_len = 64;          // T
  int batch_size = 8;        // global sequences per optimizer step
  int micro_batch_size = 0;  // sequences per rank per forward/backward; 0 = batch_size / dp
  // Mixture of Experts balance (model.n_experts > 0): the auxiliary loss E sum_i f_i P_i and the
  // router z-loss, each times its coefficient, and the aux-loss-free expert bias step.
  double aux_loss_coeff = 0.01;
  double z_loss_coeff = 0.0;
  double expert_bias_rate = 0.0;
};

struct OptimSection {
  double lr = 6e-4;
  double min_lr_ratio = 0.1;  // cosine decay floor, as a fraction of lr
  int warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double max_norm = 1.0;                    // global-norm clipping; 0 disables it
  LrScaling lr_scaling = LrScaling::kNone;  // lr scaled with the global batch
  int64_t base_batch_tokens = 0;            // the global batch (tokens) at which lr was tuned
};

struct ParallelSection {
  int dp = 0;  // 0: derived from the world size
  int tp = 1;
  int pp = 1;
  // Expert-parallel ranks, folded onto dp x tp of each stage (comm/grid.hpp): each holds
  // model.n_experts / ep experts of every MoE layer. Not a factor of the world size.
  int ep = 1;
  // Context parallelism: every sequence split over cp ranks (2 cp balanced chunks), which attend
  // to each other's keys and values through cp_comm. A factor of the world size.
  int cp = 1;
  CpComm cp_comm = CpComm::kRing;
  CpSplit cp_split = CpSplit::kBalanced;
  GridShape shape() const {
    return {{Axis::dp, dp}, {Axis::cp, cp}, {Axis::tp, tp}, {Axis::pp, pp}};
  }
  int64_t ranks() const { return int64_t{dp} * cp * tp * pp; }  // the world size it takes
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved)
  // Sequence parallelism: activations outside the tp regions split along the tokens over tp.
  bool sequence_parallel = false;
  double dp_bucket_mb = kDefaultDpBucketMb;  // gradient bucket over dp (MiB)
  // Collectives backend per axis. kAuto is NCCL for node-local axes on a CUDA build with NCCL,
  // MPI otherwise.
  CollectiveBackend backend_tp = CollectiveBackend::kAuto;
  CollectiveBackend backend_dp = CollectiveBackend::kAuto;
  CollectiveBackend backend_pp = CollectiveBackend::kAuto;
};

struct ZeroSection {
  ZeroStage stage = ZeroStage::kNone;
};

struct OffloadSection {
  OffloadTarget optimizer = OffloadTarget::kNone;
  OffloadTarget params = OffloadTarget::kNone;  // kNvme: ZeRO-3 parameter shards in files
  std::string nvme_dir = "/tmp";                // where nvme-offloaded optimizer states live
  double buffer_mb = 16.0;  // resident buffer per moment while streaming from nvme
};

struct PrecisionSection {
  // fp32, or bf16 / fp16 parameters and activations with fp32 sums, fp32 gradients and fp32
  // master weights in the optimizer (bf16: the parameter and its low 16 bits).
  Precision compute = Precision::kFp32;
  // fp32 runs on GPUs: GEMM operands exact (ieee) or rounded to TF32 on tensor cores (tf32).
  Fp32Matmul fp32_matmul = Fp32Matmul::kIeee;
  // The format gradients are summed in over dp (fp32, or bf16 / fp16: half the bytes).
  Precision grad_reduce = Precision::kFp32;
  // fp16 dynamic loss scaling: the initial scale, doubled after growth_interval steps without
  // overflow, multiplied by backoff after `hysteresis` overflowing steps (each one skipped).
  double loss_scale = 65536.0;
  int growth_interval = 1000;
  double backoff = 0.5;
  int hysteresis = 2;
};

struct DpSection {
  // local_sgd: every local_steps-th step is synchronous, then parameters and moments are
  // averaged over dp.
  DpSync sync = DpSync::kSync;
  int local_steps = 4;  // H for local_sgd
};

struct RecomputeSection {
  RecomputePolicy policy = RecomputePolicy::kNone;
  int layers = 0;  // full: the first N blocks of each model chunk (0: all)
  Recompute resolved() const { return {policy, layers}; }
};

// How attention cuts its (query, key) plane (kernels/attention_tiles.hpp): a layout choice that
// changes only the summation order and the scratch, never the math.
struct AttentionSection {
  kernels::AttentionKernel kernel = kernels::AttentionKernel::kAuto;
  int tile_rows = 0;  // query rows per block; 0: the build's default
  int tile_keys = 0;  // keys per tile; 0: the build's default
};

struct Config {
  RunSection run;
  ModelConfig model;
  DataSection data;
  TrainSection train;
  OptimSection optim;
  ParallelSection parallel;
  ZeroSection zero;
  OffloadSection offload;
  RecomputeSection recompute;
  AttentionSection attention;
  DpSection dp;
  PrecisionSection precision;
  std::string source;  // the file it was read from, for messages

  // The resolved configuration as TOML: what `from`, defaults and overrides produced.
  std::string to_toml() const;
  // One section's keys and their values as TOML literals (or JSON ones), in schema order.
  std::vector<std::pair<std::string, std::string>> section_values(const std::string& section,
                                                                  bool as_json = false) const;
};

// A key whose value differs between two configs (checkpoint and run), as TOML values.
struct ConfigChange {
  std::string key, before, after;
  // True when the change alters what the remaining steps compute (model, data, optimizer, LR
  // schedule, seed, precision, dp synchrony); false for layout and bookkeeping keys, which every
  // layout reproduces up to summation order.
  bool changes_math = false;
};
// Every key whose value differs from `before` to `after`, in schema order.
std::vector<ConfigChange> config_changes(const Config& before, const Config& after);
// A 64-bit hash of the resolved config (FNV-1a of to_toml()): ranks compare it at start.
uint64_t config_hash(const Config& c);
// InputError on every rank of `ranks` unless all hold the same resolved config; the message
// names the ranks that differ from rank 0. Collective.
void require_same_config(const Config& c, const HostCollectives& ranks);

// Reads `path` (following [model] from = "...", relative to the file) and applies overrides
// ("section.key=value"). Every value is typed on reading: a name not among an enum's values is
// an InputError naming the key and the valid values.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// Parses TOML text (a checkpoint's stored config); no `from` includes.
Config parse_config_text(const std::string& text, const std::string& origin);
// The config with its derived keys filled for a world of `world_size` ranks (parallel.dp = 0:
// world / (tp * pp); train.micro_batch_size = 0: one micro-batch per stage), then validated.
Config resolve(Config c, int world_size);
// Checks relations between keys (heads divide C, T within the block size, ...) for a world of
// `world_size` ranks; reads and never changes the config. Throws InputError.
void validate(const Config& c, int world_size);
// The model's and the run's keys alone (what `plan` checks of a config it does not lay out).
void validate_model(const Config& c);

}  // namespace trident
