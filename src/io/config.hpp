// Run configuration: TOML file + `--set key=value` overrides, every key typed and validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/recompute.hpp"

namespace trident {

struct RunSection {
  std::string name = "run";
  std::string out_dir = "runs";
  int64_t seed = 1337;
  int steps = 100;
  int log_every = 1;
  int eval_every = 0;  // 0: validate only at the end
  int eval_batches = 4;
  int checkpoint_every = 0;       // 0: checkpoint only at the end; -1: never
  int keep_checkpoints = 0;       // keep the newest N checkpoints; 0: keep all
  double watchdog_seconds = 600;  // abort when a rank's phase is unchanged this long; 0: off
  double peak_tflops = 1.0;       // per rank; the denominator of MFU
};

struct DataSection {
  std::string train = "data/kjv_train.bin";
  std::string val = "data/kjv_val.bin";
};

struct TrainSection {
  int seq_len = 64;          // T
  int batch_size = 8;        // global sequences per optimizer step
  int micro_batch_size = 0;  // sequences per rank per forward/backward; 0 = batch_size / dp
};

struct OptimSection {
  double lr = 6e-4;
  double min_lr_ratio = 0.1;  // cosine decay floor, as a fraction of lr
  int warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double max_norm = 1.0;            // global-norm clipping; 0 disables it
  std::string lr_scaling = "none";  // none | linear | sqrt: lr scaled with the global batch
  int64_t base_batch_tokens = 0;    // the global batch (tokens) at which lr was tuned
};

struct ParallelSection {
  int dp = 0;  // 0: derived from the world size
  int tp = 1;
  int pp = 1;
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved)
  double dp_bucket_mb = 25.0;     // gradient all-reduce bucket size over dp (MiB)
  // Collectives backend per axis: auto | mpi | nccl. "auto" is NCCL for node-local axes on a
  // CUDA build with NCCL, MPI otherwise.
  std::string backend_tp = "auto";
  std::string backend_dp = "auto";
  std::string backend_pp = "auto";
};

struct ZeroSection {
  int stage = 0;  // 0: replicated optimizer; 1: optimizer states sharded over dp
};

struct OffloadSection {
  std::string optimizer = "none";  // none | host | nvme
  std::string params = "none";     // none | nvme (ZeRO-3 parameter shards in files)
  std::string nvme_dir = "/tmp";   // where nvme-offloaded optimizer states live
  double buffer_mb = 16.0;         // resident buffer per moment while streaming from nvme
};

struct PrecisionSection {
  // fp32, or bf16 / fp16 storage of parameters and activations with fp32 arithmetic, fp32
  // gradients and fp32 master weights in the optimizer.
  std::string compute = "fp32";
  // The format gradients are summed in over dp (fp32, or bf16 / fp16: half the bytes).
  std::string grad_reduce = "fp32";
  // fp16 dynamic loss scaling: the initial scale, doubled after growth_interval steps without
  // overflow, multiplied by backoff after `hysteresis` overflowing steps (each one skipped).
  double loss_scale = 65536.0;
  int growth_interval = 1000;
  double backoff = 0.5;
  int hysteresis = 2;
};

struct DpSection {
  // sync: gradients all-reduced every step. async: the reduction started after a step's backward
  // is applied at the next step (staleness 1). local_sgd: replicas step on their own gradients;
  // every local_steps-th step is synchronous and then parameters and moments are averaged.
  std::string sync = "sync";
  int local_steps = 4;  // H for local_sgd
};

struct RecomputeSection {
  std::string policy = "none";  // none | selective | full
  int layers = 0;               // full: the first N blocks of each model chunk (0: all)
  Recompute resolved() const {  // after validate()
    Recompute r;
    parse_recompute(policy, r.policy);
    r.layers = layers;
    return r;
  }
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
  DpSection dp;
  PrecisionSection precision;
  std::string source;  // the file it was read from, for messages

  // The resolved configuration as TOML: what `from`, defaults and overrides produced.
  std::string to_toml() const;
};

// Reads `path` (following [model] from = "...", relative to the file), applies overrides
// ("section.key=value"), validates. Throws InputError naming the key or file.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// Parses TOML text (a checkpoint's stored config); no `from` includes.
Config parse_config_text(const std::string& text, const std::string& origin);
// Checks relations between keys (heads divide C, T within the block size, ...) for a world of
// `world_size` ranks. Throws InputError.
void validate(Config& c, int world_size);

}  // namespace trident
