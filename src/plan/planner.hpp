// `trident plan`: feasible (dp, tp, pp, ZeRO, offload, recompute, micro-batch) layouts for a model
// on a GPU cluster, ranked by a cost model, with predicted memory per GPU and a recommendation.
#pragma once

#include <string>
#include <vector>

#include "model/context_options.hpp"
#include "model/recompute.hpp"

namespace trident {

// The model as the planner sees it. Mixed-precision training as in the ZeRO paper (Rajbhandari
// et al. 2020): bf16 weights and gradients, fp32 master weights and Adam moments, i.e. 2 + 2 + 12
// bytes per parameter before sharding. (Megatron-LM accumulates bf16 gradients in fp32, 2 more
// bytes where the gradient is replicated; not modelled.)
struct PlanModel {
  double params = 0;  // Psi; 0: from the shape (GPT-2: 12 L h^2 + V h; Llama: exact)
  int layers = 0, hidden = 0, heads = 0, seq = 2048, vocab = 50257;
  // The Llama family: no biases, RMSNorm, grouped-query attention over kv_heads (0: heads), a
  // SwiGLU MLP of width ffn (three h x ffn matrices; 0: 8h/3 rounded up to 256) and an output
  // head of its own unless tied.
  bool llama = false;
  int kv_heads = 0, ffn = 0;
  bool tied = false;
  // Mixture of Experts (experts = 0: dense), trident's MoE layer: on layers 0, every, 2 every,
  // ... the MLP becomes a router (h x experts), `experts` MLPs of width expert_ffn (0: the dense
  // MLP's) of which each token runs top_k, and `shared` more of that width that every token runs;
  // each expert keeps at most capacity_factor x its share of the slots (0: dropless).
  struct Experts {
    int experts = 0, top_k = 1, expert_ffn = 0, shared = 0, every = 1;
    double capacity_factor = 0;
  } moe;
  // Fused (flash) attention (`plan --attention fused`): the attention core runs only the causal
  // half of its score products, at the device's fused attention rate (PlanCluster::
  // attention_efficiency; the GEMM rate where it has none), and keeps no scores in HBM (cuDNN's,
  // which trident's GPU builds run, and FlashAttention's). Unfused (the default, Megatron-LM
  // 2019-2021 as the fitted constants saw it): every score product at the GEMM rate, and the
  // scores' element-wise traffic (kPlanScoreBytes).
  bool fused_attention = false;
  // How context parallelism brings keys and values to the queries (parallel.cp_comm, `plan
  // --cp-comm`): the ring overlaps each hop with a step's attention; the all-gather (Llama 3's)
  // gathers every chunk before the attention and its gradients' reduce-scatter after it, exposed.
  CpComm cp_comm = CpComm::kRing;
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int ffn_width() const { return ffn > 0 ? ffn : (8 * hidden / 3 + 255) / 256 * 256; }
  // The dense MLP's width (GPT-2: 4h) and one expert's.
  int mlp_width() const { return llama ? ffn_width() : 4 * hidden; }
  int expert_width() const { return moe.expert_ffn > 0 ? moe.expert_ffn : mlp_width(); }
  // The matrices of an MLP of width w: SwiGLU's three h x w, GPT-2's two (biases not counted).
  double mlp_params(double w) const { return (llama ? 3.0 : 2.0) * hidden * w; }
  int moe_layers() const { return moe.experts > 0 ? (layers + moe.every - 1) / moe.every : 0; }
  double param_count() const;
  // The routed experts' parameters, all layers; the parameters one token uses (the routed
  // experts' top_k / experts share of them, everything else).
  double expert_param_count() const;
  double active_param_count() const;
};

// The compute model's two free constants, fitted to Narayanan et al. 2021, Table 1, on the rows
// 1.7B, 7.5B, 39.1B, 145.6B and 529.6B only (README, "Reproducing published results"): the share
// of the peak that a full-width GEMM reaches, and the share of the HBM bandwidth that element-wise
// kernels reach.
inline constexpr double kPlanGemmEfficiency = 0.85;
inline constexpr double kPlanHbmEfficiency = 0.6;

// A GPU's datasheet figures for `trident plan --device` (docs/zero-and-memory.md names the
// source of each).
struct DevicePreset {
  const char* name;    // what --device takes
  const char* model;   // what the output calls it
  double memory_gb;    // HBM, GB (1e9 bytes)
  double bf16_tflops;  // dense bf16 tensor-core peak (no sparsity)
  double fp32_tflops;  // fp32 without tensor cores (0: not in the sources used)
  double hbm_gbs;      // HBM bandwidth, GB/s
  double nvlink_gbs;   // NVLink per GPU, both directions together, GB/s
  double network_gbs;  // network per GPU (its own NIC), one direction, GB/s
  // Share of the bf16 peak a fused (flash) attention kernel reaches, forward and backward, as
  // published for the device (0: no figure; the time model then runs attention as its GEMMs).
  double fused_attention_share;
};
const std::vector<DevicePreset>& device_presets();
// The preset called `name`; an InputError naming the presets when none is.
const DevicePreset& device_preset(const std::string& name);
// The preset of a GPU as CUDA names it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"), or
// null for one without a preset. PCIe and NVL parts get their SXM part's preset, whose peaks are
// higher: a prediction for them is optimistic.
const DevicePreset* preset_for_device_name(const std::string& cuda_name);
// --intra-bw from a preset: NCCL's ring reaches about half of the links' rate in one direction,
// a quarter of the both-directions figure (the default --intra-bw, 150 GB/s, is that share of an
// A100's 600 GB/s NVLink).
inline constexpr double kPlanNvlinkShare = 0.25;

struct PlanCluster {
  int gpus = 8, gpus_per_node = 8;
  double gpu_mem_gb = 80;                      // per GPU, GB (1e9 bytes)
  double peak_tflops = 312;                    // bf16 dense per GPU
  double mfu = kPlanGemmEfficiency;            // share of the peak a full-width GEMM reaches
  double hbm_gbs = 2039;                       // HBM bandwidth per GPU, GB/s (A100 80 GB)
  double hbm_efficiency = kPlanHbmEfficiency;  // share of it element-wise kernels reach
  double attention_efficiency = 0;       // share of the peak fused attention reaches (0: as GEMMs)
  double intra_gbs = 150;                // per-GPU bandwidth inside a node (NVLink), GB/s
  double inter_gbs = 25;                 // per-GPU bandwidth between nodes (e.g. 200 Gb/s), GB/s
  double pcie_gbs = 25;                  // GPU <-> host, for offload
  double host_adam_gbs = 10;             // host memory streamed by a CPU Adam step, GB/s
  const DevicePreset* device = nullptr;  // the --device these figures came from, if any
};

// FLOPs a token: the model's (MFU's, as `train` counts them: 6 x the parameters that multiply +
// 12 L h s) and the hardware's under a layout's recomputation, as the time model charges it
// ("full": every block's forward again; "selective": the attention core's products again,
// 4 L h s).
double plan_model_flops_per_token(const PlanModel& m);
double plan_hardware_flops_per_token(const PlanModel& m, const std::string& recompute);

// c on `d`: its memory, bf16 peak, HBM bandwidth, NVLink (times kPlanNvlinkShare) and network.
PlanCluster on_device(PlanCluster c, const DevicePreset& d);

// The assumptions of the model, each a documented constant (README, "Planning a layout").
//
// Memory. A layout fits when its predicted bytes, including a fixed runtime reserve, stay under
// kPlanUsableMemoryFraction of HBM: the caching allocator fragments and NCCL, cuBLAS and the CUDA
// context take memory the model does not see, so a layout predicted at 95% of HBM does not run.
inline constexpr double kPlanUsableMemoryFraction = 0.9;
inline constexpr double kPlanRuntimeGB = 2.0;  // CUDA context, NCCL and cuBLAS workspaces
// Activations per layer and micro-batch follow Korthikanti et al. 2022, Table 2: s b h (10 + 24/t
// + 5 a s/(h t)) bytes, or s b h (34 + 5 a s/h) / t with sequence parallelism (tp > 1);
// selective recomputation drops the attention core's 5 a s/(h t) term; full keeps the layer input
// (2 s b h, / t with sequence parallelism) plus one layer's working set during recomputation. 1F1B
// keeps min(pp, micro-batches) micro-batches in flight on the first stage; the last stage also
// holds the fp32 logits (4 s b V / t). ZeRO-2 keeps gradient working buffers for two blocks and the
// embedding (trident's unit buffers), ZeRO-3 the same again for parameters (the block being
// computed and the one prefetched).
//
// Compute. A micro-batch's forward on a stage is its GEMMs and attention core (2 Psi_layer + 4 h s
// FLOPs per token and layer, the head's 2 V h) at mfu of the peak, scaled by a tensor-parallel
// shard's GEMM efficiency w / (w + kPlanGemmHalfWidth) relative to the unsharded width (w = h / t),
// plus the memory-bound element-wise work at hbm_efficiency of the HBM bandwidth, in bytes read
// and written per token and layer (2-byte activations): kPlanReplicatedBytes x h that every tp
// rank repeats (two LayerNorms, two dropouts, two residual adds; / t with sequence parallelism),
// kPlanShardedBytes x h / t in the tensor-parallel regions (bias adds, GELU) and kPlanScoreBytes
// x a s / t for the attention scores (scale and mask, softmax, dropout). This term is why small
// models reach a smaller share of the peak than large ones (Narayanan et al. 2021, Table 1: 44%
// at 1.7B, 52% at 530B). Backward costs twice the forward; full recomputation repeats the forward,
// selective the attention core and its scores. mfu and hbm_efficiency are the fitted constants
// (above).
inline constexpr double kPlanGemmHalfWidth = 128;
inline constexpr double kPlanReplicatedBytes = 20;
inline constexpr double kPlanShardedBytes = 22;
inline constexpr double kPlanScoreBytes = 8;
//
// Communication. Tensor parallelism: 4 all-reduces of s b h bf16 per layer per micro-batch (6 with
// full recomputation) on NVLink, on the critical path (Megatron-LM, Shoeybi et al. 2019); tp stays
// inside a node. Sequence parallelism replaces each all-reduce by a reduce-scatter and an
// all-gather, the same bytes: the same time (it saves the replicated element-wise work). Pipeline:
// the 1F1B bubble (p - 1) micro-batch times, the slowest (last) stage carrying the output layer,
// and stage-to-stage transfers (Narayanan et al. 2021). Data parallel, per GPU on its dp group's
// link (NVLink while the group fits a node, else the inter-node link at kPlanNetworkEfficiency of
// its rate), each transfer overlapped with the compute that does not depend on it: ZeRO-0
// all-reduces the accumulated gradients during the last micro-batch's backward; ZeRO-1
// reduce-scatters them there and all-gathers the updated parameters during the next step's first
// forward; ZeRO-2 reduce-scatters every micro-batch's gradients during its backward (the full
// gradient is never kept), plus that all-gather; ZeRO-3 all-gathers the parameters for each
// micro-batch's forward and again for its backward, and reduce-scatters the gradients in the
// backward: 3 x micro-batches x Psi / (tp pp) bf16 per step, so it needs large micro-batches, which
// its freed memory allows. Overlap is imperfect (NCCL kernels take SMs and HBM bandwidth, prefetch
// stalls): an overlapped transfer still costs (1 - kPlanOverlapEfficiency) of its time, and
// whatever exceeds its window costs in full. The two constants are fit to Narayanan et al. 2021,
// Table 3 (ZeRO-3 on 25 GB/s per GPU: throughput falls 1.8x from micro-batch 4 to 2, and is 6-19%
// under PTD-P at micro-batch 4), with the earlier compute model (GEMMs at a flat 50% of peak);
// they have not been refitted to the fitted compute model yet.
inline constexpr double kPlanNetworkEfficiency = 0.65;
inline constexpr double kPlanOverlapEfficiency = 0.8;
//
//
// Mixture of Experts (trident's layer; Megatron-Core's and DeepSpeed's alike). An MoE layer's
// routed experts are split over ep ranks folded onto a stage's dp x tp ranks (contiguous, so an
// expert-parallel group stays in a node while ep <= GPUs per node) and replicated over the
// dp x tp / ep others, which reduce (and ZeRO-1 shards) the experts' gradients and states as dp
// does the dense ones. Compute counts the experts a token runs (top_k routed and the shared
// ones, and the router), on each tp rank's own tokens (sequence parallelism, which MoE with
// tp > 1 requires), at the full-width GEMM rate (experts are not split over tp), and the
// dispatch and combine permutations as kPlanPermuteBytes x top_k x h per token at the HBM rate.
// Routing is taken as balanced (dropless, every expert receiving its share). Each MoE layer
// exchanges every token's top_k rows of h (16-bit) by all-to-all, to the experts and back,
// forward and backward (twice more with full recomputation), on the critical path (no overlap
// with compute): each GPU sends (ep - 1) / ep of its rows, the share to GPUs of its node at the
// in-node bandwidth and the share to other nodes at kPlanNetworkEfficiency of the network's,
// taking the slower. Activations of an MoE layer: the dense layer's with its MLP replaced by the
// shared experts' MLPs and the routed rows' expert MLPs and permuted inputs (2 h bytes a row), and
// the fp32 router probabilities (4 experts bytes a token), / tp; the routed rows are those
// trident's buffer plan reserves so that no routing overflows them, ep min(top_k, experts / ep) a
// token (top_k when routing is balanced: ep times more at ep >= experts / top_k), or with a
// capacity factor at most top_k x capacity_factor.
inline constexpr double kPlanPermuteBytes = 8;
//
// The interleaved schedule (virtual_stages v > 1, a config's layout only) divides the pipeline
// bubble by v and multiplies the stage-to-stage transfers by v (Narayanan et al. 2021).
//
// Context parallelism (trident's ring on balanced chunks; Megatron-Core's and Llama 3's alike in
// cost): each of cp ranks holds s / cp tokens of every sequence, so compute, activations (the
// attention's too: its queries are s / cp) and tensor-parallel traffic per rank fall by cp, the
// attention core's per-token cost staying that of the whole sequence. cp ranks hold the same
// parameters: they reduce gradients and shard ZeRO with dp (dp x cp ranks). Each layer passes
// the key/value chunks (2 kv_heads / tp x head size x s / cp x b, 16-bit) around the ring,
// cp - 1 times forward, and backward again with their fp32 gradients, which make cp hops; each
// hop overlaps the attention of one ring step (1 / cp of the rank's attention core; twice that in
// backward), as exposed() charges it, on NVLink while tp x cp fits a node (the cp group is
// contiguous after tp), else the network. Held besides: two chunks in flight, and backward's fp32
// sums (dq, and three chunks' key/value gradients).
//
// The world is dp x tp x pp with tp <= GPUs per node and a power of two dividing the heads, pp
// dividing the layers, and dp the largest count <= gpus / (tp pp) that divides the global batch
// of sequences (so a layout may leave a few GPUs idle). The global batch is fixed in tokens, as
// practitioners fix it for convergence.

// The choice among feasible layouts. The time model is not better than about 5%, so among layouts
// within time_tolerance of the fastest the planner takes the simplest: no offload, then fewer ZeRO
// stages, then less recomputation. Model parallelism needs model surgery (Megatron-style layers,
// a partitioned model and a pipeline schedule) that ZeRO data parallelism does not, and
// practitioners stay with ZeRO/FSDP stacks below ~175B although Megatron-style 3D layouts run
// faster (in this model 3D is ~25% faster at 30-70B, because ZeRO-3 without tp must recompute
// everything to fit a micro-batch large enough to hide its gathers). So the planner adds tensor
// parallelism (inside a node), and then pipeline parallelism, only when the best layout without
// it is more than model_parallel_tolerance slower than the fastest overall: a stated preference,
// not physics.
inline constexpr double kPlanTimeTolerance = 0.05;
inline constexpr double kPlanModelParallelTolerance = 0.35;
struct PlanPolicy {
  double time_tolerance = kPlanTimeTolerance;
  double model_parallel_tolerance = kPlanModelParallelTolerance;
};

struct PlanCandidate {
  int dp = 1, tp = 1, pp = 1, zero = 0, micro_batch = 1, micro_batches = 1;
  // Expert parallelism (folded onto the dp x tp ranks of a stage), the interleaved schedule's
  // model chunks per rank (the search keeps 1; a config's layout may set more), and context
  // parallelism (each sequence split over cp ranks; a factor of the GPUs).
  int ep = 1, virtual_stages = 1, cp = 1;
  std::string offload = "none";    // none | host (optimizer states and step on the CPU)
  std::string recompute = "none";  // none | selective | full
  bool sequence_parallel = false;  // tp > 1: LayerNorm and residual activations split over tp
  // Per GPU, on the most loaded pipeline stage. buffers: ZeRO-2/3 working buffers; other: runtime.
  double params_gb = 0, grads_gb = 0, optimizer_gb = 0, activations_gb = 0, buffers_gb = 0,
         other_gb = 0;
  // Per step. compute includes recompute; bubble includes stage-to-stage transfers; ep is the
  // experts' all-to-alls; cp the ring's transfers that the attention does not hide; dp is the
  // exposed part of dp_traffic (gradient reduction, ZeRO gathers).
  double step_seconds = 0, compute_seconds = 0, recompute_seconds = 0, bubble_seconds = 0,
         tp_seconds = 0, ep_seconds = 0, cp_seconds = 0, dp_seconds = 0, dp_traffic_seconds = 0,
         offload_seconds = 0;
  double memory_gb() const {
    return params_gb + grads_gb + optimizer_gb + activations_gb + buffers_gb + other_gb;
  }
  double model_states_gb() const { return params_gb + grads_gb + optimizer_gb; }
  int gpus() const { return dp * cp * tp * pp; }
  std::string describe() const;
};

struct PlanResult {
  std::vector<PlanCandidate> feasible;  // the recommendation first, then fastest first
  int considered = 0;
  double fastest_seconds = 0;
  std::string recommendation, reasons;  // reasons: one line per decision
};

// Enumerates layouts for `global_batch_tokens` tokens per step. Throws InputError for a model
// or cluster that makes no sense.
PlanResult plan_layouts(const PlanModel& model, const PlanCluster& cluster,
                        double global_batch_tokens, const PlanPolicy& policy = {});

// Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer for one micro-batch
// of b sequences of s tokens (hidden h, a heads, tensor parallel t), 16-bit activations and 1-byte
// dropout masks: s b h (10 + 24/t + 5 a s/(h t)) with tensor parallelism, s b h (34 + 5 a s/h) / t
// with sequence parallelism added, 34 s b h / t with selective recomputation on top (without
// sequence parallelism selective keeps s b h (10 + 24/t)); full recomputation keeps the layer
// input, 2 s b h (/t with sequence parallelism).
double paper_layer_activation_bytes(double s, double b, double h, double a, int t,
                                    bool sequence_parallel, RecomputePolicy recompute);
// The same accounting for a Llama layer (16-bit, no dropout): outside the tensor-parallel regions
// the inputs of the two RMSNorms and of the qkv and gate | up GEMMs, 8 s b h (/t with sequence
// parallelism); inside, q (2 s b h), k and v (4 s b kv_rank h/a, kv_rank = max(kv/t, 1): a rank
// keeps at least one key/value head), the attention output (2 s b h), gate and up (4 s b F) and the
// SwiGLU output (2 s b F), each / t but k and v, and the softmax output 2 a s^2 b / t, which
// selective recomputation drops; full recomputation keeps the layer input, 2 s b h (/t with
// sequence parallelism).
double llama_layer_activation_bytes(double s, double b, double h, double a, double kv, double F,
                                    int t, bool sequence_parallel, RecomputePolicy recompute);
// The memory and time model applied to one layout as written (a run config's: dp, tp, pp, ZeRO,
// offload, recompute, micro-batch and sequence parallelism taken from `layout`) for
// `global_batch_tokens` per step. Throws InputError for a layout that does not split the model
// and batch.
PlanCandidate predict_layout(const PlanModel& model, const PlanCluster& cluster,
                             double global_batch_tokens, const PlanCandidate& layout);

// Narayanan et al. 2021, Eq. 3: the FLOPs of one training step of `sequences` sequences with full
// recomputation (the forward pass counted twice), 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); the
// paper's TFLOP/s per GPU are this over the step time and the GPUs.
double paper_step_flops(const PlanModel& model, double sequences);

}  // namespace trident
