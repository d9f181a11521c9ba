// The planner's memory and time model and its choice of layout (assumptions in planner.hpp).
#include "plan/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "core/error.hpp"

namespace trident {
namespace {

constexpr double kGB = 1e9;

// Korthikanti et al. 2022, Table 2: bytes per layer per micro-batch in 16-bit, tensor parallel
// t, with or without sequence parallelism (paper_layer_activation_bytes).
double layer_activation_bytes(const PlanModel& m, int b, int t, bool sp,
                              const std::string& recompute) {
  const RecomputePolicy policy = recompute == "full"        ? RecomputePolicy::kFull
                                 : recompute == "selective" ? RecomputePolicy::kSelective
                                                            : RecomputePolicy::kNone;
  if (m.llama)
    return llama_layer_activation_bytes(m.seq, b, m.hidden, m.heads, m.kv(), m.ffn_width(), t, sp,
                                        policy);
  return paper_layer_activation_bytes(m.seq, b, m.hidden, m.heads, t, sp, policy);
}

// Bytes a token keeps per column of an MLP: SwiGLU's gate | up and output, GELU's fc output and
// GELU (16-bit).
double moe_bytes_per_column(const PlanModel& m) {
  return m.llama ? 6.0 : 4.0;
}

// A routed row: its expert MLP's columns and its permuted input (16-bit).
double moe_bytes_per_row(const PlanModel& m) {
  return moe_bytes_per_column(m) * m.expert_width() + 2.0 * m.hidden;
}

// The routed rows a token may bring to one rank, which trident's buffer plan reserves: dropless,
// ep min(top_k, experts / ep); with a capacity, at most each expert's C = top_k capacity_factor /
// experts a token, experts / ep experts from each of ep groups.
double moe_reserved_rows(const PlanModel& m, int ep) {
  const double dropless = static_cast<double>(ep) * std::min(m.moe.top_k, m.moe.experts / ep);
  if (m.moe.capacity_factor <= 0) return dropless;
  return std::min(dropless, m.moe.top_k * m.moe.capacity_factor);
}

// What an MoE layer's kept activations add to the dense layer's for a micro-batch of b
// sequences (planner.hpp): the routed rows' expert MLPs and permuted inputs, the shared experts'
// MLPs for the dense one, and the fp32 router probabilities; each tp rank its own tokens. The
// routed rows are those trident's buffer plan reserves, ep min(top_k, experts / ep) a token, the
// most a dropless all-to-all can bring to one rank. Full recomputation keeps only the layer's
// input.
double moe_extra_activation_bytes(const PlanModel& m, int b, int t, int ep,
                                  const std::string& recompute) {
  if (m.moe_layers() == 0 || recompute == "full") return 0;
  const double dense = (m.moe.shared * m.expert_width() - m.mlp_width()) * moe_bytes_per_column(m);
  return static_cast<double>(m.seq) * b *
         (moe_reserved_rows(m, ep) * moe_bytes_per_row(m) + dense + 4.0 * m.moe.experts) / t;
}

// The scratch every MoE layer of a stage reuses in its backward, for a micro-batch of b
// sequences: the gradients of the reserved rows' expert MLP and of their inputs (as many bytes a
// row as the activations), and of each slot's output and input (2 x 2 top_k h bytes a token).
double moe_scratch_bytes(const PlanModel& m, int b, int t, int ep) {
  if (m.moe_layers() == 0) return 0;
  return static_cast<double>(m.seq) * b *
         (moe_reserved_rows(m, ep) * moe_bytes_per_row(m) + 4.0 * m.moe.top_k * m.hidden) / t;
}

// Ring all-gather or reduce-scatter of `bytes` (the full tensor) over n ranks, per GPU.
double ring_seconds(double bytes, int n, double gbs) {
  return n <= 1 ? 0 : (n - 1.0) / n * bytes / (gbs * kGB);
}

// An all-to-all in which each of ep ranks holds `bytes` and keeps 1 / ep of them, per GPU: the
// share for its node's GPUs (the group is contiguous) on NVLink, the rest over the network,
// whichever link is slower.
double all_to_all_seconds(double bytes, int ep, const PlanCluster& c) {
  if (ep <= 1) return 0;
  const int in_node = std::min(ep, c.gpus_per_node);
  const double near = bytes * (in_node - 1.0) / ep / (c.intra_gbs * kGB);
  const double far =
      bytes * static_cast<double>(ep - in_node) / ep / (kPlanNetworkEfficiency * c.inter_gbs * kGB);
  return std::max(near, far);
}

// What a transfer costs when it can overlap `window` seconds of independent compute.
double exposed(double transfer, double window) {
  return transfer - kPlanOverlapEfficiency * std::min(transfer, window);
}

double gemm_efficiency(double width) {
  return width / (width + kPlanGemmHalfWidth);
}

// 0: data parallel only; 1: tensor parallel inside a node; 2: pipelined (with or without tp);
// 3: context parallel (with or without the others).
int model_parallel_level(const PlanCandidate& k) {
  return k.cp > 1 ? 3 : k.pp > 1 ? 2 : k.tp > 1 ? 1 : 0;
}

int recompute_rank(const std::string& r) {
  return r == "full" ? 2 : r == "selective" ? 1 : 0;
}

// Simplest first: no offload, fewer ZeRO stages, less recomputation, no sequence parallelism
// (which costs no time in this model: its all-gathers and reduce-scatters move what the
// all-reduces did, so it is chosen when the memory it frees buys a faster layout); then faster.
auto simplicity(const PlanCandidate& k) {
  return std::make_tuple(k.offload == "host", k.zero, recompute_rank(k.recompute),
                         k.sequence_parallel, k.step_seconds);
}

std::string percent(double slower) {
  return fmt::format("{:.0f}%", 100 * slower);
}

}  // namespace

const std::vector<DevicePreset>& device_presets() {
  // NVIDIA's datasheets (A100, H100, H200; HGX B200), SXM parts; the network is the DGX systems'
  // one NIC per GPU: 200 Gb/s HDR InfiniBand on DGX A100, 400 Gb/s NDR on DGX H100/H200/B200.
  static const std::vector<DevicePreset> presets = {
      // Fused attention: FlashAttention-2 reaches 50-73% of an A100's peak (Dao 2023; 73% is
      // its forward, so the planner takes the low end for both passes) and 35% of an H100's
      // (Shah et al. 2024, FlashAttention-3's abstract; the H200 has the same SMs and peak).
      {"a100-40gb", "A100 SXM4 40GB", 40, 312, 19.5, 1555, 600, 25, 0.50},
      {"a100-80gb", "A100 SXM4 80GB", 80, 312, 19.5, 2039, 600, 25, 0.50},
      {"h100", "H100 SXM5 80GB", 80, 989.4, 67, 3350, 900, 50, 0.35},
      {"h200", "H200 SXM 141GB", 141, 989.4, 67, 4800, 900, 50, 0.35},
      {"b200", "B200 (HGX, 1000 W) 180GB", 180, 2250, 0, 8000, 1800, 50, 0},
  };
  return presets;
}

const DevicePreset& device_preset(const std::string& name) {
  std::string names;
  for (const DevicePreset& d : device_presets()) {
    if (name == d.name) return d;
    names += (names.empty() ? "" : ", ") + std::string(d.name);
  }
  throw InputError(fmt::format("--device '{}' is not a preset; presets: {}", name, names));
}

const DevicePreset* preset_for_device_name(const std::string& cuda_name) {
  const auto has = [&](const char* part) { return cuda_name.find(part) != std::string::npos; };
  const char* name = has("H200")   ? "h200"
                     : has("H100") ? "h100"
                     : has("B200") ? "b200"
                     : has("A100") ? (has("80G") ? "a100-80gb" : "a100-40gb")
                                   : nullptr;
  return name ? &device_preset(name) : nullptr;
}

double plan_model_flops_per_token(const PlanModel& m) {
  const double lookup = m.llama && !m.tied ? static_cast<double>(m.vocab) * m.hidden : 0.0;
  return 6.0 * (m.active_param_count() - lookup) +
         12.0 * m.layers * m.hidden * static_cast<double>(m.seq);
}

double plan_hardware_flops_per_token(const PlanModel& m, const std::string& recompute) {
  const double h = m.hidden, s = m.seq, L = m.layers;
  const double attention_core = 4.0 * L * h * s;
  // A block's matrices a token multiplies, averaged over the layers: attention's (GPT-2: qkv and
  // proj, 4 h^2; Llama: q, k | v and o) and the MLP's, or an MoE layer's router and experts run.
  double attention = 4.0 * h * h;
  if (m.llama) attention = h * (h + 2.0 * m.kv() * (h / m.heads)) + h * h;
  double mlp = m.mlp_params(m.mlp_width());
  if (m.moe_layers() > 0)
    mlp +=
        m.moe_layers() / L *
        (h * m.moe.experts + (m.moe.top_k + m.moe.shared) * m.mlp_params(m.expert_width()) - mlp);
  const double block_matrices = attention + mlp;
  double extra = 0;
  if (recompute == "full") extra = L * 2.0 * block_matrices + attention_core;
  if (recompute == "selective") extra = attention_core;
  return plan_model_flops_per_token(m) + extra;
}

PlanCluster on_device(PlanCluster c, const DevicePreset& d) {
  c.gpu_mem_gb = d.memory_gb;
  c.peak_tflops = d.bf16_tflops;
  c.hbm_gbs = d.hbm_gbs;
  c.intra_gbs = kPlanNvlinkShare * d.nvlink_gbs;
  c.inter_gbs = d.network_gbs;
  c.attention_efficiency = d.fused_attention_share;
  c.device = &d;
  return c;
}

double PlanModel::param_count() const {
  if (params > 0) return params;
  const double h = hidden, embedding = static_cast<double>(vocab) * h;
  // The MoE layers' router, routed and shared experts, for their dense MLPs.
  const double experts = expert_param_count() +
                         moe_layers() * (h * moe.experts + moe.shared * mlp_params(expert_width()) -
                                         mlp_params(mlp_width()));
  if (!llama) return 12.0 * layers * h * h + embedding + experts;
  // Per layer: two RMSNorm gains, q and o (h x h), k and v (h x kv h/heads each), gate, up and
  // down (h x F each); then the final norm, the embedding and an untied head.
  const double kv_rows = static_cast<double>(kv()) * (hidden / heads);
  const double layer = 2 * h + 2 * h * h + 2 * h * kv_rows + mlp_params(ffn_width());
  return layers * layer + h + embedding * (tied ? 1 : 2) + experts;
}

double PlanModel::expert_param_count() const {
  return static_cast<double>(moe_layers()) * moe.experts * mlp_params(expert_width());
}

double PlanModel::active_param_count() const {
  const double idle = moe.experts > 0 ? 1.0 - static_cast<double>(moe.top_k) / moe.experts : 0.0;
  return param_count() - idle * expert_param_count();
}

std::string PlanCandidate::describe() const {
  return fmt::format("dp={}{} tp={} pp={}{}{} zero={} offload={} recompute={} micro_batch={}{}", dp,
                     cp > 1 ? fmt::format(" cp={}", cp) : "", tp, pp,
                     ep > 1 ? fmt::format(" ep={}", ep) : "",
                     virtual_stages > 1 ? fmt::format(" v={}", virtual_stages) : "", zero, offload,
                     recompute, micro_batch, sequence_parallel ? " sequence_parallel" : "");
}

namespace {

// What every candidate shares: the model's sizes and per-token costs, the usable memory.
struct PlanBasis {
  double psi = 0, h = 0, s = 0, V = 0;
  // The embedding (wte, wpe) sits on the first stage and, tied, feeds the head on the last; an
  // untied head (Llama) is as large and sits on the last stage alone; the blocks are split evenly
  // over the stages.
  double psi_embedding = 0, psi_head = 0, psi_blocks = 0;
  // Of an MoE model's blocks: the routed experts (split over ep), and the routers and shared
  // experts (replicated over tp, each rank running them on its own tokens); not in psi_blocks.
  double psi_experts = 0, psi_moe_replicated = 0;
  // Parameters of the largest rank's model chunk: the blocks of a stage with the embedding (or
  // the untied head, as large), both when one stage holds everything, over tp; the MoE layers'
  // routers and shared experts whole.
  double psi_rank(int tp, int pp) const {
    return (psi_blocks / pp + psi_embedding + (pp == 1 ? psi_head : 0)) / tp +
           psi_moe_replicated / pp;
  }
  // Per token, forward: the tensor-parallel GEMMs of a layer (averaged over the layers; the
  // attention core's products are estimate_time's), the head's, and the MoE layers' routers and the
  // experts a token runs, all layers.
  double layer_flops = 0, head_flops = 0, expert_flops = 0;
  double usable_gb = 0;
  long long sequences = 0;  // per step
};

PlanBasis plan_basis(const PlanModel& m, const PlanCluster& c, double global_batch_tokens) {
  if (m.layers == 0 || m.hidden == 0 || m.heads == 0)
    throw InputError("plan: the model needs --layers, --hidden and --heads");
  // The bounds keep every product the planner forms finite and every loop over layers, GPUs and
  // sequences short; they are far past any model or cluster built.
  const auto require_range = [](double value, double low, double high, const char* flag) {
    if (!(value >= low && value <= high))
      throw InputError(
          fmt::format("plan: {} = {:g} must be between {:g} and {:g}", flag, value, low, high));
  };
  require_range(m.layers, 1, 100000, "--layers");
  require_range(m.hidden, 1, 1 << 20, "--hidden");
  require_range(m.heads, 1, m.hidden, "--heads");
  if (m.hidden % m.heads != 0)
    throw InputError(
        fmt::format("plan: --heads = {} must divide --hidden = {}", m.heads, m.hidden));
  if (m.llama) {  // 0: the defaults (--heads, 8h/3 rounded up)
    require_range(m.kv_heads, 0, m.heads, "--kv-heads");
    if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
      throw InputError(
          fmt::format("plan: --kv-heads = {} must divide --heads = {}", m.kv_heads, m.heads));
    require_range(m.ffn, 0, 1 << 20, "--ffn");
  }
  require_range(m.seq, 1, 1 << 24, "--seq");
  require_range(m.vocab, 1, 1 << 24, "--vocab");
  require_range(m.params, 0, 1e16, "--params");
  if (m.moe.experts > 0) {
    require_range(m.moe.experts, 1, 1 << 16, "--experts");
    require_range(m.moe.top_k, 1, m.moe.experts, "--top-k");
    require_range(m.moe.expert_ffn, 0, 1 << 20, "--expert-ffn");
    require_range(m.moe.shared, 0, 1024, "--shared-experts");
    require_range(m.moe.every, 1, m.layers, "--moe-every");
    require_range(m.moe.capacity_factor, 0, 1e6, "--capacity-factor");
    if (m.params > 0)
      throw InputError("plan: --params cannot be given with --experts (counted from the shape)");
  }
  require_range(c.gpus, 1, 1 << 24, "--gpus");
  require_range(c.gpus_per_node, 1, 4096, "--gpus-per-node");
  require_range(c.gpu_mem_gb, 1e-3, 1e6, "--gpu-mem");
  require_range(c.peak_tflops, 1e-3, 1e6, "--peak-tflops");
  require_range(c.mfu, 1e-3, 1, "--mfu");
  require_range(c.hbm_gbs, 1e-3, 1e6, "--hbm-bw");
  require_range(c.hbm_efficiency, 1e-3, 1, "--hbm-efficiency");
  if (c.attention_efficiency != 0)
    require_range(c.attention_efficiency, 1e-3, 1, "--attention-efficiency");
  require_range(c.intra_gbs, 1e-3, 1e6, "--intra-bw");
  require_range(c.inter_gbs, 1e-3, 1e6, "--inter-bw");
  if (global_batch_tokens < m.seq)
    throw InputError("plan: --batch-tokens must hold at least one sequence");
  require_range(global_batch_tokens, m.seq, 1e12, "--batch-tokens");
  PlanBasis b;
  b.psi = m.param_count();
  b.h = m.hidden;
  b.s = m.seq;
  b.V = m.vocab;
  b.psi_embedding = std::min(b.psi, (m.llama ? b.V : b.V + b.s) * b.h);
  b.psi_head = m.llama && !m.tied ? std::min(b.psi - b.psi_embedding, b.V * b.h + b.h) : 0;
  if (m.moe_layers() > 0) {
    b.psi_experts = m.expert_param_count();
    b.psi_moe_replicated =
        m.moe_layers() * (b.h * m.moe.experts + m.moe.shared * m.mlp_params(m.expert_width()));
    b.expert_flops = 2 * (b.psi_experts * m.moe.top_k / m.moe.experts + b.psi_moe_replicated);
  }
  b.psi_blocks = b.psi - b.psi_embedding - b.psi_head - b.psi_experts - b.psi_moe_replicated;
  b.layer_flops = 2 * b.psi_blocks / m.layers;
  b.head_flops = 2 * b.V * b.h;  // last stage
  b.usable_gb = kPlanUsableMemoryFraction * c.gpu_mem_gb;
  b.sequences = static_cast<long long>(std::floor(global_batch_tokens / m.seq));
  return b;
}

// What the candidates of one (tp, pp, cp) share.
struct ModelParallelShape {
  int tp = 1, pp = 1, dp = 1, ep = 1, expert_dp = 1, layers = 1, cp = 1;
  double moe_layers = 0;  // a stage's share of the MoE layers
  // Parameters per GPU: the dense ones (with routers and shared experts), the routed experts';
  // of one block's tensor-parallel matrices.
  double psi_rank = 0, psi_expert_rank = 0, block_params = 0;
  double dp_gbs = 0, pp_gbs = 0, cp_gbs = 0, flops_per_second = 0, expert_flops_per_second = 0;
  double attention_flops_per_second = 0;    // the attention core's products
  int replicas() const { return dp * cp; }  // the ranks holding the same parameters
  long long per_pipeline = 0;               // sequences per step per dp rank
};

// dp: the largest count that fits the GPUs and divides the batch, or `dp` where it is given.
ModelParallelShape model_parallel_shape(const PlanModel& m, const PlanCluster& c,
                                        const PlanBasis& b, int tp, int pp, int dp = 0, int ep = 1,
                                        int cp = 1) {
  ModelParallelShape x;
  x.tp = tp;
  x.pp = pp;
  x.cp = cp;
  x.dp = dp > 0 ? dp : c.gpus / (tp * pp * cp);
  while (dp == 0 && b.sequences % x.dp != 0) --x.dp;
  x.ep = ep;
  x.expert_dp = x.dp * tp / ep;
  x.layers = m.layers / pp;
  x.moe_layers = static_cast<double>(m.moe_layers()) / pp;
  x.psi_rank = b.psi_rank(tp, pp);
  x.psi_expert_rank = b.psi_experts / pp / ep;
  x.block_params = b.psi_blocks / m.layers / tp;
  // cp groups are contiguous after tp, dp groups after both: they stay on NVLink while tp * cp
  // (tp * cp * dp) fits a node. Stage neighbours are tp * cp * dp ranks apart: some hop crosses
  // nodes unless the whole world fits one.
  const auto link = [&](int span) {
    return span <= c.gpus_per_node ? c.intra_gbs : kPlanNetworkEfficiency * c.inter_gbs;
  };
  x.cp_gbs = link(tp * cp);
  x.dp_gbs = link(tp * cp * x.dp);
  x.pp_gbs = link(tp * cp * x.dp * pp);
  x.expert_flops_per_second = c.peak_tflops * 1e12 * c.mfu;
  x.flops_per_second = x.expert_flops_per_second * gemm_efficiency(b.h / tp) / gemm_efficiency(b.h);
  // Unfused, the products are batched GEMMs; fused, one kernel at its own published rate (a
  // head's work does not shrink with tp), where the device has one.
  x.attention_flops_per_second = m.fused_attention && c.attention_efficiency > 0
                                     ? c.peak_tflops * 1e12 * c.attention_efficiency
                                     : x.flops_per_second;
  x.per_pipeline = b.sequences / x.dp;
  return x;
}

// Memory per GPU of candidate k (its layout fields set).
void estimate_memory(PlanCandidate& k, const PlanModel& m, const PlanBasis& basis,
                     const ModelParallelShape& x) {
  const int tp = x.tp, pp = x.pp, cp = x.cp, zero = k.zero, b = k.micro_batch;
  const int layers = x.layers, micro_batches = k.micro_batches;
  const std::string& offload = k.offload;
  const std::string& recompute = k.recompute;
  const double psi_rank = x.psi_rank, block_params = x.block_params;
  const double psi_embedding = basis.psi_embedding, s = basis.s, V = basis.V;
  // The parameters of a rank sharded at `from_stage` and above: the dense ones over dp, the
  // routed experts over their replicas.
  const auto sharded = [&](int from_stage) {
    return zero >= from_stage ? psi_rank / x.replicas() + x.psi_expert_rank / x.expert_dp
                              : psi_rank + x.psi_expert_rank;
  };
  k.params_gb = 2 * sharded(3) / kGB;
  k.grads_gb = 2 * sharded(2) / kGB;
  k.optimizer_gb = offload == "host" ? 0 : 12 * sharded(1) / kGB;
  // Two of a block's largest unit (ln_2 with mlp.fc: a third of a GPT-2 block, Llama's gate | up
  // 2 h F of it; an MoE layer's first projections of its local experts) and the embedding.
  double largest_unit = m.llama ? 2.0 * m.hidden * m.ffn_width() / tp : block_params / 3;
  if (m.moe_layers() > 0)
    largest_unit = std::max(
        largest_unit, (m.llama ? 2.0 : 1.0) * m.hidden * m.expert_width() * m.moe.experts / x.ep);
  const double unit_buffers = 2 * (2 * largest_unit + psi_embedding / tp);
  k.buffers_gb = (zero >= 2 ? unit_buffers : 0) + (zero >= 3 ? unit_buffers : 0);
  k.buffers_gb /= kGB;
  const bool sp = k.sequence_parallel;
  const double moe_share = x.layers > 0 ? x.moe_layers / x.layers : 0;
  // A cp rank keeps its s / cp tokens' activations (its attention's queries are s / cp too).
  const double per_layer = (layer_activation_bytes(m, b, tp, sp, recompute) +
                            moe_share * moe_extra_activation_bytes(m, b, tp, x.ep, recompute)) /
                           cp;
  double working = recompute == "full" ? (layer_activation_bytes(m, b, tp, sp, "none") +
                                          moe_extra_activation_bytes(m, b, tp, x.ep, "none")) /
                                             cp
                                       : 0;
  if (x.moe_layers > 0) working += moe_scratch_bytes(m, b, tp, x.ep);
  if (cp > 1) {  // the key/value chunks held (ring: two in flight; all-gather: every rank's),
                 // backward's fp32 dq and its key/value sums (ring: three; all-gather: cp + 1)
    const double tokens = s / cp * b, kv = 2.0 * std::max(m.kv() / tp, 1) * (basis.h / m.heads);
    const bool ring = m.cp_comm == CpComm::kRing;
    working += tokens * (2 * (ring ? 2 : cp) * kv + 4 * (basis.h / tp + (ring ? 3 : cp + 1) * kv));
  }
  const double logits = 4 * s / cp * b * V / tp;
  const double first_rank = per_layer * layers * std::min(pp, micro_batches) + working;
  const double last_rank = per_layer * layers + working + logits;
  k.activations_gb = (pp == 1 ? last_rank : std::max(first_rank, last_rank)) / kGB;
  k.other_gb = kPlanRuntimeGB;
}

// Time per step of candidate k, set by the slowest (last) stage.
void estimate_time(PlanCandidate& k, const PlanModel& m, const PlanCluster& c,
                   const PlanBasis& basis, const ModelParallelShape& x) {
  const int tp = x.tp, pp = x.pp, cp = x.cp, zero = k.zero, b = k.micro_batch;
  const int layers = x.layers, micro_batches = k.micro_batches;
  const std::string& offload = k.offload;
  const std::string& recompute = k.recompute;
  const double psi_rank = x.psi_rank, flops_per_second = x.flops_per_second;
  const double pp_gbs = x.pp_gbs, dp_gbs = x.dp_gbs;
  const double h = basis.h, s = basis.s;
  const double layer_flops = basis.layer_flops, head_flops = basis.head_flops;
  const double shard = zero >= 1 ? x.replicas() : 1;
  const double tokens = s * b / cp;  // a rank's tokens of a micro-batch
  // Forward of one micro-batch on the stage: its GEMMs at the GEMM rate, its attention core at
  // the GEMM rate (unfused, with its scores at the HBM rate) or at fused attention's, and the
  // memory-bound element-wise work (planner.hpp) at the HBM rate. Backward costs twice the
  // forward; recomputation repeats the forward (full) or the attention core and its scores
  // (selective).
  const double hbm = c.hbm_gbs * kGB * c.hbm_efficiency;
  const double replicated = k.sequence_parallel ? tp : 1;
  const double score_bytes = m.fused_attention ? 0 : kPlanScoreBytes * m.heads * s / tp;
  const double attention_flops = (m.fused_attention ? 2 : 4) * h * s / tp;  // a token's, a layer
  const double layer_bytes =
      tokens * (kPlanReplicatedBytes * h / replicated + kPlanShardedBytes * h / tp);
  // The stage's share of the MoE layers: the experts a token runs, on each tp rank's own tokens
  // at the full-width rate, and the dispatch and combine permutations.
  const double experts =
      basis.expert_flops / m.layers * layers / tp * tokens / x.expert_flops_per_second +
      x.moe_layers * tokens * kPlanPermuteBytes * m.moe.top_k * h / tp / hbm;
  const double attention_core =
      layers * tokens * (attention_flops / x.attention_flops_per_second + score_bytes / hbm);
  const double forward = (layers * layer_flops + head_flops) / tp * tokens / flops_per_second +
                         layers * layer_bytes / hbm + attention_core + experts;
  double extra = 0;
  if (recompute == "selective") extra = attention_core;
  if (recompute == "full") extra = forward - head_flops / tp * tokens / flops_per_second;
  const double micro = 3 * forward + extra;
  const double backward = micro - forward;
  // Megatron's f/g operators: 2 all-reduces forward, 2 backward, 2 more when the
  // forward is recomputed; an all-reduce is a reduce-scatter and an all-gather. The experts'
  // all-to-alls as many, each moving a tp rank's tokens' top_k rows.
  const int tp_collectives = recompute == "full" ? 6 : 4;
  const double tp_micro =
      tp_collectives * layers * 2 * ring_seconds(2 * tokens * h, tp, c.intra_gbs);
  const double ep_micro = tp_collectives * x.moe_layers *
                          all_to_all_seconds(2 * tokens / tp * m.moe.top_k * h, x.ep, c);
  // Context parallelism, per layer. The ring: a key/value chunk a hop, each hop against one ring
  // step's attention core (1 / cp of the rank's; backward twice the compute and three times the
  // bytes, the gradients' last hop home against nothing). The all-gather: every rank's chunk
  // before the forward and again before the backward, and the fp32 key/value gradients'
  // reduce-scatter after it, none of them overlapped.
  double cp_micro = 0;
  if (cp > 1) {
    const double chunk = 2 * 2.0 * std::max(m.kv() / tp, 1) * (h / m.heads) * tokens;
    const double hop = chunk / (x.cp_gbs * kGB);
    const double step_attention = attention_flops * tokens / x.attention_flops_per_second / cp;
    double forward_cp = (cp - 1) * exposed(hop, step_attention);
    double backward_cp = (cp - 1) * exposed(3 * hop, 2 * step_attention) + 2 * hop;
    if (m.cp_comm == CpComm::kAllgather) {
      forward_cp = ring_seconds(cp * chunk, cp, x.cp_gbs);
      backward_cp = forward_cp + 2 * forward_cp;  // the gradients' reduce-scatter in fp32
    }
    cp_micro = layers * ((recompute == "full" ? 2 : 1) * forward_cp + backward_cp);
  }
  k.compute_seconds = micro_batches * micro;
  k.recompute_seconds = micro_batches * extra;
  k.tp_seconds = micro_batches * tp_micro;
  k.ep_seconds = micro_batches * ep_micro;
  k.cp_seconds = micro_batches * cp_micro;
  // The 1F1B bubble (over v model chunks with the interleaved schedule), plus each micro-batch's
  // activation forward and gradient backward at each of its v stage boundaries: a tp rank sends
  // its 1 / tp of the tokens under sequence parallelism, all of them without.
  const int v = k.virtual_stages;
  k.bubble_seconds =
      pp == 1 ? 0
              : (pp - 1) * (micro + tp_micro + ep_micro + cp_micro) / v +
                    2.0 * v * micro_batches * 2 * tokens / replicated * h / (pp_gbs * kGB);
  // One bf16 pass of the rank's parameters or gradients over dp x cp (the routed experts' over
  // their replicas, on the same links), and the compute each ZeRO stage can hide it behind
  // (planner.hpp).
  const double g = ring_seconds(2 * psi_rank, x.replicas(), dp_gbs) +
                   ring_seconds(2 * x.psi_expert_rank, x.expert_dp, dp_gbs);
  switch (zero) {
    case 0:
      k.dp_traffic_seconds = 2 * g;
      k.dp_seconds = exposed(2 * g, backward);
      break;
    case 1:
      k.dp_traffic_seconds = 2 * g;
      k.dp_seconds = exposed(g, backward) + exposed(g, forward);
      break;
    case 2:
      k.dp_traffic_seconds = (micro_batches + 1) * g;
      k.dp_seconds = micro_batches * exposed(g, backward) + exposed(g, forward);
      break;
    default:
      k.dp_traffic_seconds = 3.0 * micro_batches * g;
      k.dp_seconds = micro_batches * (exposed(g, forward) + exposed(2 * g, backward));
  }
  const double states = psi_rank / shard + x.psi_expert_rank / (zero >= 1 ? x.expert_dp : 1);
  if (offload == "host")
    k.offload_seconds = 4 * states / (c.pcie_gbs * kGB) + 16 * states / (c.host_adam_gbs * kGB);
  k.step_seconds = k.compute_seconds + k.bubble_seconds + k.tp_seconds + k.ep_seconds +
                   k.cp_seconds + k.dp_seconds + k.offload_seconds;
}

// Every layout of the model on the cluster, with whether it fits.
struct Evaluated {
  std::vector<PlanCandidate> all;
  std::vector<bool> fits;
  int considered = 0;
};

// Whether trident trains a layout: an MoE layer on tp > 1 ranks needs sequence parallelism (each
// rank routes its own tokens), and context parallelism is for dense models.
bool trident_runs(const PlanModel& m, const PlanCandidate& k) {
  return m.moe_layers() == 0 || ((k.tp == 1 || k.sequence_parallel) && k.cp == 1);
}

// The layouts of one (tp, pp, dp, ep): ZeRO stage, offload, recomputation, sequence parallelism
// and micro-batch.
void evaluate_stage_layouts(const PlanModel& m, const PlanCluster& c, const PlanBasis& basis,
                            const ModelParallelShape& x, Evaluated& out) {
  for (int zero = 0; zero <= 3; ++zero) {
    if (zero > 0 && x.replicas() == 1) continue;
    for (const std::string offload : {"none", "host"}) {
      if (offload == "host" && zero == 3) continue;  // ZeRO-Offload pairs with stage 2
      for (const std::string recompute : {"none", "selective", "full"}) {
        for (const bool sp : {false, true}) {
          if (sp && x.tp == 1) continue;
          for (int b = 1; b <= 32 && b <= x.per_pipeline; b *= 2) {
            if (x.per_pipeline % b != 0) continue;
            PlanCandidate k;
            k.dp = x.dp, k.tp = x.tp, k.pp = x.pp, k.ep = x.ep, k.cp = x.cp, k.zero = zero;
            k.micro_batch = b;
            k.micro_batches = static_cast<int>(x.per_pipeline / b);
            k.offload = offload, k.recompute = recompute, k.sequence_parallel = sp;
            if (!trident_runs(m, k)) continue;
            ++out.considered;
            estimate_memory(k, m, basis, x);
            estimate_time(k, m, c, basis, x);
            out.fits.push_back(k.memory_gb() <= basis.usable_gb);
            out.all.push_back(k);
          }
        }
      }
    }
  }
}

Evaluated evaluate_layouts(const PlanModel& m, const PlanCluster& c, const PlanBasis& basis) {
  Evaluated out;
  for (int tp = 1; tp <= std::min(8, c.gpus); tp *= 2) {
    if (m.heads % tp != 0 || tp > c.gpus_per_node) continue;  // tp stays inside a node
    if (m.llama && ((m.kv() % tp != 0 && tp % m.kv() != 0) || m.ffn_width() % tp != 0)) continue;
    for (int pp = 1; pp <= m.layers; ++pp) {
      if (m.layers % pp != 0 || tp * pp > c.gpus) continue;
      // Context parallelism (dense models): powers of two that cut the sequence into 2 cp chunks.
      for (int cp = 1; tp * pp * cp <= c.gpus; cp *= 2) {
        if (cp > 1 && (m.moe.experts > 0 || m.seq % (2 * cp) != 0)) break;
        const int dp = model_parallel_shape(m, c, basis, tp, pp, 0, 1, cp).dp;
        // Expert parallelism: every size dividing both the experts and the stage's dp x tp ranks.
        for (int ep = 1; ep <= std::max(1, m.moe.experts); ++ep) {
          if (m.moe.experts > 0 && (m.moe.experts % ep != 0 || (dp * tp) % ep != 0)) continue;
          evaluate_stage_layouts(m, c, basis, model_parallel_shape(m, c, basis, tp, pp, dp, ep, cp),
                                 out);
        }
      }
    }
  }
  return out;
}

// The fastest feasible layout, and the least memory of any layout, among those matching a test.
struct Best {
  const PlanCandidate* fastest = nullptr;
  const PlanCandidate* smallest = nullptr;
};

Best best_of(const Evaluated& e, const std::function<bool(const PlanCandidate&)>& pred) {
  Best best;
  for (size_t i = 0; i < e.all.size(); ++i) {
    const PlanCandidate& k = e.all[i];
    if (!pred(k)) continue;
    if (!best.smallest || k.memory_gb() < best.smallest->memory_gb()) best.smallest = &k;
    if (e.fits[i] && (!best.fastest || k.step_seconds < best.fastest->step_seconds))
      best.fastest = &k;
  }
  return best;
}

// The recommendation: the fewest model-parallel axes whose best layout is within the
// model-parallel tolerance of the fastest; then, at that level, the simplest layout within the
// time tolerance of its best. Sets `level` and `level_best`.
const PlanCandidate& recommend(const Evaluated& e, double fastest, const PlanPolicy& policy,
                               int& level, double& level_best) {
  Best at_level;
  for (level = 0; level <= 3; ++level) {
    at_level = best_of(e, [&](const PlanCandidate& k) { return model_parallel_level(k) == level; });
    if (at_level.fastest &&
        at_level.fastest->step_seconds <= (1 + policy.model_parallel_tolerance) * fastest)
      break;
  }
  level_best = at_level.fastest->step_seconds;
  const PlanCandidate* chosen = at_level.fastest;
  for (size_t i = 0; i < e.all.size(); ++i) {
    const PlanCandidate& k = e.all[i];
    if (e.fits[i] && model_parallel_level(k) == level &&
        k.step_seconds <= (1 + policy.time_tolerance) * level_best &&
        simplicity(k) < simplicity(*chosen))
      chosen = &k;
  }
  return *chosen;
}

// The reasons for the recommendation `best`, one line per decision: memory, time, model
// parallelism, ZeRO stage, offload, recomputation.
class Explanation {
 public:
  Explanation(const Evaluated& e, const PlanBasis& basis, const PlanCluster& c,
              const PlanPolicy& policy, const PlanCandidate& best,
              const PlanCandidate& fastest_layout, int level, double level_best, int experts)
      : n_experts_(experts),
        e_(e),
        basis_(basis),
        c_(c),
        policy_(policy),
        best_(best),
        fastest_(fastest_layout),
        level_(level),
        level_best_(level_best) {}

  std::string text() const {
    std::vector<std::string> why = {memory(), time()};
    if (best_.gpus() < c_.gpus)
      why.push_back(fmt::format(
          "uses {} of the {} GPUs: dp = {} is the largest count that divides the {} sequences "
          "of the batch",
          best_.gpus(), c_.gpus, best_.dp, basis_.sequences));
    model_parallelism(why);
    if (n_experts_ > 0) why.push_back(experts());
    why.push_back(zero());
    memory_savers(why);
    std::string out = why.front();
    for (size_t i = 1; i < why.size(); ++i) out += "\n  " + why[i];
    return out;
  }

 private:
  // How a family of alternatives fares against `reference` seconds: its fastest layout and how
  // much slower it is, or, when none fits, what the smallest needs.
  static std::string alternative(const Best& alt, double reference, const std::string& than) {
    if (alt.fastest)
      return fmt::format("the best layout ({}) is {} slower than {}", alt.fastest->describe(),
                         percent(alt.fastest->step_seconds / reference - 1), than);
    if (alt.smallest)
      return fmt::format("nothing fits (the smallest, {}, needs {:.1f} GB)",
                         alt.smallest->describe(), alt.smallest->memory_gb());
    return std::string("no such layout");
  }
  std::string than_this(const Best& alt) const {
    return alternative(alt, best_.step_seconds, "this one");
  }
  std::string than_fastest(const Best& alt) const {
    return alternative(alt, fastest_.step_seconds, "the fastest");
  }
  Best at_level(int level) const {
    return best_of(e_, [&](const PlanCandidate& k) { return model_parallel_level(k) == level; });
  }
  // The best of the layouts at the chosen model-parallel layout that satisfy `pred`.
  Best at_chosen_layout(const std::function<bool(const PlanCandidate&)>& pred) const {
    return best_of(e_, [&](const PlanCandidate& k) {
      return model_parallel_level(k) == level_ && k.tp == best_.tp && k.pp == best_.pp &&
             k.cp == best_.cp && pred(k);
    });
  }

  std::string memory() const {
    return fmt::format(
        "memory: {:.1f} of {:.1f} GB usable per GPU ({:.0f}% of {} GB, the rest is headroom for "
        "fragmentation): model states {:.1f} GB, ZeRO buffers {:.1f} GB, activations {:.1f} GB "
        "(micro-batch {}, recompute {}), runtime {:.1f} GB",
        best_.memory_gb(), basis_.usable_gb, 100 * kPlanUsableMemoryFraction, c_.gpu_mem_gb,
        best_.model_states_gb(), best_.buffers_gb, best_.activations_gb, best_.micro_batch,
        best_.recompute, best_.other_gb);
  }

  std::string time() const {
    const double over = best_.step_seconds / fastest_.step_seconds - 1;
    return fmt::format(
        "time: {:.2f} s per step: compute {:.2f} (of which recompute {:.2f}), pipeline {:.2f}, "
        "tensor-parallel {:.2f}, {}{}data-parallel {:.2f} exposed of {:.2f} transferred, offload "
        "{:.2f}{}",
        best_.step_seconds, best_.compute_seconds, best_.recompute_seconds, best_.bubble_seconds,
        best_.tp_seconds,
        best_.ep > 1 ? fmt::format("expert all-to-all {:.2f}, ", best_.ep_seconds) : "",
        best_.cp > 1 ? fmt::format("context-parallel ring {:.2f}, ", best_.cp_seconds) : "",
        best_.dp_seconds, best_.dp_traffic_seconds, best_.offload_seconds,
        over > 1e-9 ? fmt::format("; {} slower than the fastest layout, preferred as simpler",
                                  percent(over))
                    : std::string("; the fastest layout"));
  }

  void model_parallelism(std::vector<std::string>& why) const {
    const std::string tolerance = percent(policy_.model_parallel_tolerance);
    if (level_ == 0) {
      if (model_parallel_level(fastest_) == 0)
        why.push_back(c_.gpus == 1 ? "no tensor or pipeline parallelism: one GPU"
                                   : "no tensor or pipeline parallelism: no model-parallel layout "
                                     "is faster");
      else
        why.push_back(fmt::format(
            "no tensor or pipeline parallelism: the fastest layout ({}) is only {} faster, "
            "within the {} a model-parallel layout must gain to be worth its model surgery",
            fastest_.describe(), percent(best_.step_seconds / fastest_.step_seconds - 1),
            tolerance));
      return;
    }
    if (level_ == 1)
      why.push_back(fmt::format(
          "tensor parallelism (tp={}) inside a node, on NVLink: without model parallelism {}; "
          "model parallelism is taken when it gains more than {}",
          best_.tp, than_fastest(at_level(0)), tolerance));
    else if (level_ == 3)
      why.push_back(fmt::format(
          "context parallelism (cp={}{}{}: each sequence split over {} ranks, its ring {:.2f} s "
          "a step exposed): without it, tensor and pipeline parallelism {}; it is taken when it "
          "gains more than {}",
          best_.cp, best_.tp > 1 ? fmt::format(", tp={}", best_.tp) : "",
          best_.pp > 1 ? fmt::format(", pp={}", best_.pp) : "", best_.cp, best_.cp_seconds,
          than_fastest(at_level(2)), tolerance));
    else
      why.push_back(
          fmt::format("pipeline parallelism (pp={}{}): without model parallelism {}; with tensor "
                      "parallelism only {}; each is taken when it gains more than {}",
                      best_.pp, best_.tp > 1 ? fmt::format(", tp={} inside a node", best_.tp) : "",
                      than_fastest(at_level(0)), than_fastest(at_level(1)), tolerance));
    const Best piped = at_level(2);
    if (level_ == 1 && piped.fastest && piped.fastest->step_seconds < level_best_)
      why.push_back(fmt::format(
          "no pipeline parallelism: the best pipelined layout ({}) is only {} faster than the "
          "best without it, within the {} tolerated",
          piped.fastest->describe(), percent(level_best_ / piped.fastest->step_seconds - 1),
          tolerance));
  }

  // The expert-parallel size against the others at the chosen model-parallel layout.
  std::string experts() const {
    const std::string line =
        best_.ep == 1
            ? std::string("no expert parallelism: every rank holds every expert")
            : fmt::format(
                  "expert parallelism ep={}: experts a rank {}, folded onto dp x tp, their "
                  "all-to-alls {:.2f} s a step",
                  best_.ep, n_experts_ / best_.ep, best_.ep_seconds);
    const Best other = at_chosen_layout([&](const PlanCandidate& k) { return k.ep != best_.ep; });
    return line + "; with another ep " + than_this(other);
  }

  std::string zero() const {
    const double replicated_gb =
        16 * (basis_.psi_rank(best_.tp, best_.pp) + basis_.psi_experts / best_.pp / best_.ep) / kGB;
    std::string line;
    if (best_.zero == 0)
      line = best_.dp == 1 ? std::string("no ZeRO: a single data-parallel replica")
                           : fmt::format("no ZeRO: the replicated model states ({:.1f} GB) fit",
                                         replicated_gb);
    else
      line = fmt::format(
          "ZeRO-{}: replicated, the model states would need {:.1f} GB per GPU; with a lower "
          "stage {}",
          best_.zero, replicated_gb,
          than_this(at_chosen_layout([&](const PlanCandidate& k) { return k.zero < best_.zero; })));
    if (best_.zero < 3 && best_.dp > 1) {
      const Best higher =
          at_chosen_layout([&](const PlanCandidate& k) { return k.zero > best_.zero; });
      if (higher.fastest && higher.fastest->step_seconds < best_.step_seconds)
        line += fmt::format("; a higher stage would gain only {}, within the {} tolerated",
                            percent(best_.step_seconds / higher.fastest->step_seconds - 1),
                            percent(policy_.time_tolerance));
      else if (higher.fastest)
        line += "; with a higher stage " + than_this(higher);
    }
    return line;
  }

  // Offload, recomputation and sequence parallelism, where the recommendation uses them.
  void memory_savers(std::vector<std::string>& why) const {
    if (best_.offload == "host")
      why.push_back(fmt::format(
          "optimizer states offloaded to host memory (ZeRO-Offload): without offload {}",
          than_this(at_chosen_layout([](const PlanCandidate& k) { return k.offload == "none"; }))));
    if (best_.recompute != "none")
      why.push_back(fmt::format(
          "{} recomputation ({:.2f} s per step): {} at micro-batch {}; with less recomputation {}",
          best_.recompute, best_.recompute_seconds,
          best_.recompute == "full" ? "keeps only each layer's input"
                                    : "drops the attention scores",
          best_.micro_batch, than_this(at_chosen_layout([&](const PlanCandidate& k) {
            return k.zero == best_.zero && k.offload == best_.offload &&
                   recompute_rank(k.recompute) < recompute_rank(best_.recompute);
          }))));
    if (best_.sequence_parallel)
      why.push_back(fmt::format(
          "sequence parallelism: LayerNorm and residual activations split over tp = {} ({:.1f} "
          "GB of activations); without it {}",
          best_.tp, best_.activations_gb, than_this(at_chosen_layout([&](const PlanCandidate& k) {
            return !k.sequence_parallel && k.zero == best_.zero && k.offload == best_.offload;
          }))));
  }

  int n_experts_;
  const Evaluated& e_;
  const PlanBasis& basis_;
  const PlanCluster& c_;
  const PlanPolicy& policy_;
  const PlanCandidate& best_;
  const PlanCandidate& fastest_;
  int level_;
  double level_best_;
};

}  // namespace

PlanCandidate predict_layout(const PlanModel& m, const PlanCluster& c, double global_batch_tokens,
                             const PlanCandidate& layout) {
  const PlanBasis basis = plan_basis(m, c, global_batch_tokens);
  if (layout.dp < 1 || layout.tp < 1 || layout.pp < 1 || layout.micro_batch < 1 ||
      layout.virtual_stages < 1 || m.layers % (layout.pp * layout.virtual_stages) != 0 ||
      basis.sequences % (layout.dp * layout.micro_batch) != 0 || layout.cp < 1 ||
      m.seq % (2 * layout.cp) != 0)
    throw InputError(
        fmt::format("plan: layout {} does not split {} layers, {} sequences and {}-token sequences",
                    layout.describe(), m.layers, basis.sequences, m.seq));
  if (layout.ep < 1 || (layout.dp * layout.tp) % layout.ep != 0 ||
      (layout.ep > 1 && m.moe.experts % layout.ep != 0))
    throw InputError(fmt::format("plan: ep = {} must divide the experts ({}) and dp x tp = {}",
                                 layout.ep, m.moe.experts, layout.dp * layout.tp));
  const ModelParallelShape x =
      model_parallel_shape(m, c, basis, layout.tp, layout.pp, layout.dp, layout.ep, layout.cp);
  PlanCandidate k = layout;
  k.micro_batches = static_cast<int>(x.per_pipeline / k.micro_batch);
  estimate_memory(k, m, basis, x);
  estimate_time(k, m, c, basis, x);
  return k;
}

double paper_layer_activation_bytes(double s, double b, double h, double a, int t,
                                    bool sequence_parallel, RecomputePolicy recompute) {
  const double sbh = s * b * h, scores = sbh * 5 * a * s / (h * t);
  switch (recompute) {
    case RecomputePolicy::kFull:
      return 2 * sbh / (sequence_parallel ? t : 1);
    case RecomputePolicy::kSelective:
      return sequence_parallel ? 34 * sbh / t : sbh * (10 + 24.0 / t);
    default:
      return (sequence_parallel ? 34 * sbh / t : sbh * (10 + 24.0 / t)) + scores;
  }
}

double llama_layer_activation_bytes(double s, double b, double h, double a, double kv, double F,
                                    int t, bool sequence_parallel, RecomputePolicy recompute) {
  const double sb = s * b, outside = 8 * sb * h / (sequence_parallel ? t : 1);
  const double kv_rank = std::max(kv / t, 1.0);
  const double inside =
      (2 * sb * h + 2 * sb * h + 4 * sb * F + 2 * sb * F) / t + 4 * sb * kv_rank * h / a;
  const double scores = 2 * a * s * s * b / t;
  switch (recompute) {
    case RecomputePolicy::kFull:
      return 2 * sb * h / (sequence_parallel ? t : 1);
    case RecomputePolicy::kSelective:
      return outside + inside;
    default:
      return outside + inside + scores;
  }
}

double paper_step_flops(const PlanModel& m, double sequences) {
  const double s = m.seq, l = m.layers, h = m.hidden, V = m.vocab;
  return 96 * sequences * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

PlanResult plan_layouts(const PlanModel& m, const PlanCluster& c, double global_batch_tokens,
                        const PlanPolicy& policy) {
  const PlanBasis basis = plan_basis(m, c, global_batch_tokens);
  const Evaluated e = evaluate_layouts(m, c, basis);
  PlanResult result;
  result.considered = e.considered;
  const Best overall = best_of(e, [](const PlanCandidate&) { return true; });
  if (!overall.fastest) {
    const PlanCandidate& k = *overall.smallest;
    result.recommendation = "none";
    result.reasons = fmt::format(
        "no layout fits {} GB per GPU ({:.3g} GB usable): the smallest ({}) needs {:.3g} GB: model "
        "states {:.3g} GB, ZeRO buffers {:.3g} GB, activations {:.3g} GB, runtime {:.3g} GB; add "
        "GPUs or memory",
        c.gpu_mem_gb, basis.usable_gb, k.describe(), k.memory_gb(), k.model_states_gb(),
        k.buffers_gb, k.activations_gb, k.other_gb);
    return result;
  }
  const double fastest = overall.fastest->step_seconds;
  result.fastest_seconds = fastest;
  int level = 0;
  double level_best = 0;
  const PlanCandidate best = recommend(e, fastest, policy, level, level_best);
  for (size_t i = 0; i < e.all.size(); ++i)
    if (e.fits[i]) result.feasible.push_back(e.all[i]);
  std::stable_sort(result.feasible.begin(), result.feasible.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) {
                     return a.step_seconds < b.step_seconds;
                   });
  auto same = [&](const PlanCandidate& k) { return k.describe() == best.describe(); };
  std::stable_partition(result.feasible.begin(), result.feasible.end(), same);
  result.recommendation = best.describe();
  result.reasons =
      Explanation(e, basis, c, policy, best, *overall.fastest, level, level_best, m.moe.experts)
          .text();
  return result;
}

}  // namespace trident
