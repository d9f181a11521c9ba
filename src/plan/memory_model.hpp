// The memory model: per-rank bytes by category for any model, layout, ZeRO stage and micro-batch,
// derived from what trident allocates, plus the ZeRO paper's model-state formulas.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "comm/grid.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "kernels/attention_tiles.hpp"
#include "model/context_options.hpp"
#include "model/model_config.hpp"
#include "model/recompute.hpp"
#include "parallel/data/options.hpp"
#include "parallel/pipeline/options.hpp"

namespace trident {

struct MemoryQuery {
  ModelConfig model;
  int dp = 1, tp = 1, pp = 1, virtual_stages = 1;
  int ep = 1;  // expert-parallel ranks folded onto dp x tp (comm/grid.hpp)
  int cp = 1;  // context-parallel ranks: each holds seq_len / cp tokens of every sequence
  CpComm cp_comm = CpComm::kRing;
  CpSplit cp_split = CpSplit::kBalanced;
  GridShape shape() const {
    return {{Axis::dp, dp}, {Axis::cp, cp}, {Axis::tp, tp}, {Axis::pp, pp}};
  }
  // The ranks holding the same parameters (dp x cp), over which ZeRO shards (comm/grid.hpp).
  int data_replicas() const { return data_size(shape()); }
  bool sequence_parallel = false;  // with tp > 1: LayerNorm / residual rows split over tp
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int zero_stage = 0;
  bool offload_nvme = false;            // optimizer states streamed from files
  bool offload_params_nvme = false;     // ZeRO-3 parameter shards streamed from files
  int64_t offload_buffer_elements = 0;  // resident elements per moment while streaming
  int micro_batch = 1, seq_len = 1, micro_batches = 1;  // per pipeline, per step
  Recompute recompute;
  DpSync dp_sync = DpSync::kSync;  // async holds an extra gradient-sized buffer
  Precision precision = Precision::kFp32;
  Precision grad_reduce = Precision::kFp32;       // 16-bit: gradients rounded into 2-byte buffers
  double dp_bucket_mb = kDefaultDpBucketMb;       // ZeRO-2/3: the block of streamed gradient rows
  kernels::AttentionTiles attention_tiles{0, 0};  // as asked (0: the build's default)
  kernels::AttentionKernel attention_kernel = kernels::AttentionKernel::kAuto;
};

struct MemoryPrediction {
  std::array<double, kMemCategories> bytes{};
  double total() const;
  double model_states() const;  // parameters, gradients, master weights, optimizer states
};

// Bytes the rank at `rank` (its dp, tp, pp coordinates) allocates, by category, for trident as
// built. Model states: every chunk's tp slice of the parameter table (vocabulary padded to tp, each
// unit padded to dp under ZeRO) as parameters; gradients likewise, or under ZeRO-2 the rank's
// shard, the kept gradients (norms, biases, the position table) of the units in use and one block
// of the streamed matrices' rows; AdamW's two moments over the rank's ZeRO shard (or only the
// streaming buffers with nvme offload). Activations per in-flight
// micro-batch (N = b*s tokens, h channels, a heads, t = tp, V_t the vocabulary slice), in fp32
// bytes:
//   per layer   4 * (4*N*h + 4*N*h/t + 8*N*h/t + a*N*s/t + 4*N)
//               (ln1, res_attn, ln2, res_mlp; qkv + attention output; fc and GELU outputs;
//                softmax probabilities; LayerNorm means and reciprocal deviations)
//   per stage   4 * (N*h + 2*N) (input activation, token ids and targets)
//   last stage  4 * (N*h + N*V_t + 4*N) (final LayerNorm, logits, statistics, losses)
// times the schedule's in-flight micro-batches for that chunk. Selective recomputation drops
// a*N*s/t per layer and adds one shared copy per chunk; a block recomputed whole keeps only its
// output (N*h) and the chunk adds one shared set of the rest. With bf16 / fp16 storage the
// parameters and the kept activations take 2 bytes (statistics, token ids and losses stay 4), and
// the master weights cover the rank's shard: 4 bytes each under fp16, 2 under bf16 (their low
// halves; the compute copy is the upper). Megatron's published reference
// for one layer in fp16 with dropout is s*b*h*(34 + 5*a*s/h) bytes.
MemoryPrediction predict_rank_memory(const MemoryQuery& q, const GridCoord& rank);

struct Config;
// The query for a validated run config (layout, micro-batching, precision, recompute, offload as
// the trainer will run it).
MemoryQuery memory_query(const Config& c);

// The stage of `layout` for q, with `slots` micro-batches in flight and `deferred`
// weight-gradient sets: its buffers as the data-parallel strategy, precision, recomputation and
// attention settings lay them out.
struct StageShape;
struct StageLayout;
StageShape stage_shape(const MemoryQuery& q, const StageLayout& layout, int slots, int deferred);
// Whether the experts' replicas are a group of their own rather than the dp ranks: an MoE model
// with expert parallelism, or on tensor-parallel ranks (which route their own rows).
bool experts_own_replicas(const MemoryQuery& q);
// The one recipe of a stage: model chunk `chunk` of the rank at `rank` (its pipeline stage and
// virtual stage, tp slice and share of the experts), with the slots and deferred sets its pipeline
// schedule needs. The trainer builds its stages from it and the memory model sums them, so the
// two cannot disagree on a stage.
StageShape stage_recipe(const MemoryQuery& q, const GridCoord& rank, int chunk);

// The rank with the largest predicted total over every (dp, tp, pp) coordinate of q's layout.
struct BusiestRank {
  GridCoord rank;
  MemoryPrediction prediction;
};
BusiestRank predict_busiest_rank(const MemoryQuery& q);

// trident's own figure for Korthikanti et al.'s per-layer activations (planner.hpp's
// paper_layer_activation_bytes): the bytes predict_rank_memory counts for one kept block
// and micro-batch of q (its recompute policy; `recomputed_whole`: a block under full
// recomputation). Differs from the paper's where trident keeps other tensors: no dropout (its
// masks and the attention-dropout output), the LayerNorm statistics in fp32, the GELU output kept
// rather than recomputed, fp32 activations unless q.precision is 16-bit.
double layer_activation_bytes(const MemoryQuery& q, bool recomputed_whole);

// ZeRO (Rajbhandari et al. 2020), Figure 1: model-state bytes per device for Psi parameters on
// Nd data-parallel devices with mixed-precision Adam (2 bytes of parameters, 2 of gradients, K
// bytes of optimizer state per parameter): stage 0 (2+2+K)Psi, 1 (P_os) 4Psi + K Psi/Nd,
// 2 (P_os+g) 2Psi + (2+K)Psi/Nd, 3 (P_os+g+p) (2+2+K)Psi/Nd.
double zero_paper_model_states(double psi, int nd, int stage, double k = 12.0);

}  // namespace trident
