// The planner's memory and time model (documented in planner.hpp and the README).
#include "plan/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "plan/memory_model.hpp"

namespace trident {
namespace {

constexpr double kGB = 1e9;
constexpr double kOverheadGB = 1.0;  // runtime context and workspace, per GPU

// Korthikanti et al. 2022, bytes per layer per micro-batch in 16-bit, tensor parallel t, no
// sequence parallelism: none s*b*h*(10 + 24/t + 5*a*s/(h*t)); selective drops the attention
// scores; full keeps only the layer input (2*s*b*h).
double layer_activation_bytes(const PlanModel& m, int b, int t, const std::string& recompute) {
  const double s = m.seq, h = m.hidden, a = m.heads;
  if (recompute == "full") return 2 * s * b * h;
  const double base = s * b * h * (10 + 24.0 / t);
  return recompute == "selective" ? base : base + s * b * h * 5 * a * s / (h * t);
}

double all_reduce_seconds(double bytes, int n, double gbs) {
  return n <= 1 ? 0 : 2.0 * (n - 1) / n * bytes / (gbs * kGB);
}

}  // namespace

double PlanModel::param_count() const {
  if (params > 0) return params;
  return 12.0 * layers * static_cast<double>(hidden) * hidden + static_cast<double>(vocab) * hidden;
}

std::string PlanCandidate::describe() const {
  return fmt::format("dp={} tp={} pp={} zero={} offload={} recompute={} micro_batch={}", dp, tp, pp,
                     zero, offload, recompute, micro_batch);
}

PlanResult plan_layouts(const PlanModel& m, const PlanCluster& c, double global_batch_tokens) {
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.hidden % m.heads != 0 || m.seq < 1)
    throw InputError(
        "plan: the model needs --layers, --hidden and --heads (heads dividing "
        "hidden) and a positive --seq");
  if (c.gpus < 1 || c.gpus_per_node < 1 || c.gpu_mem_gb <= 0 || c.peak_tflops <= 0)
    throw InputError("plan: --gpus, --gpus-per-node, --gpu-mem and --peak-tflops must be positive");
  if (global_batch_tokens < m.seq)
    throw InputError("plan: --batch-tokens must hold at least one sequence");
  const double psi = m.param_count();
  const double sequences = std::floor(global_batch_tokens / m.seq);
  PlanResult result;
  PlanCandidate smallest;  // the least memory of any layout, feasible or not
  smallest.other_gb = 1e300;
  for (int tp = 1; tp <= std::min(8, c.gpus); tp *= 2) {
    if (m.heads % tp != 0 || tp > c.gpus_per_node) continue;  // tp stays inside a node
    for (int pp = 1; pp <= m.layers; ++pp) {
      if (m.layers % pp != 0 || c.gpus % (tp * pp) != 0) continue;
      const int dp = c.gpus / (tp * pp);
      const double psi_rank = psi / (tp * pp);
      // dp groups are contiguous after tp: they stay on NVLink while tp * dp fits a node.
      const double dp_gbs = tp * dp <= c.gpus_per_node ? c.intra_gbs : c.inter_gbs;
      for (int zero = 0; zero <= 3; ++zero) {
        if (zero > 0 && dp == 1) continue;
        for (const std::string offload : {"none", "host"}) {
          if (offload == "host" && zero == 3) continue;  // ZeRO-Offload pairs with stage 2
          for (const std::string recompute : {"none", "selective", "full"}) {
            for (int b : {1, 2, 4, 8}) {
              const double per_pipeline = sequences / dp;
              if (per_pipeline < b || std::fmod(per_pipeline, b) != 0) continue;
              const int micro_batches = static_cast<int>(per_pipeline / b);
              ++result.considered;
              PlanCandidate k;
              k.dp = dp, k.tp = tp, k.pp = pp, k.zero = zero, k.micro_batch = b;
              k.micro_batches = micro_batches;
              k.offload = offload, k.recompute = recompute;
              const double shard = zero >= 1 ? dp : 1;
              k.params_gb = 2 * psi_rank / (zero >= 3 ? dp : 1) / kGB;
              k.grads_gb = 2 * psi_rank / (zero >= 2 ? dp : 1) / kGB;
              k.optimizer_gb = offload == "host" ? 0 : 12 * psi_rank / shard / kGB;
              const int in_flight = std::min(pp, micro_batches);  // 1F1B, first stage
              double act =
                  layer_activation_bytes(m, b, tp, recompute) * (m.layers / pp) * in_flight;
              if (recompute == "full") act += layer_activation_bytes(m, b, tp, "none");
              k.activations_gb = act / kGB;
              k.other_gb = kOverheadGB;
              if (k.memory_gb() < smallest.memory_gb()) smallest = k;
              if (k.memory_gb() > c.gpu_mem_gb) continue;
              // Time per step.
              const double factor = recompute == "full" ? 4.0 / 3 : 1.0;
              const double flops =
                  (6 * psi + 12.0 * m.layers * m.hidden * m.seq) * global_batch_tokens * factor;
              // Narrower tensor-parallel GEMMs and more pipeline boundaries run less efficiently:
              // 8% per doubling of tp, 3% per doubling of pp (typical of published sweeps).
              const double efficiency =
                  c.mfu * std::pow(0.92, std::log2(tp)) * std::pow(0.97, std::log2(pp));
              k.compute_seconds = flops / (c.gpus * c.peak_tflops * 1e12 * efficiency);
              k.bubble_seconds = k.compute_seconds * (pp - 1.0) / micro_batches;
              const double act_bytes = 2.0 * m.seq * b * m.hidden;
              const int tp_collectives = recompute == "full" ? 6 : 4;
              k.tp_seconds = micro_batches * (m.layers / pp) * tp_collectives *
                             all_reduce_seconds(act_bytes, tp, c.intra_gbs);
              // Gradient reduction (half hidden behind backward); ZeRO-3 also gathers the
              // parameters for every micro-batch's forward and backward (half hidden).
              double dp_time = all_reduce_seconds(2 * psi_rank, dp, dp_gbs);
              if (zero == 3)
                dp_time += 2 * micro_batches * all_reduce_seconds(psi_rank, dp, dp_gbs);
              k.dp_seconds = 0.5 * dp_time;
              if (offload == "host")
                k.offload_seconds = 4 * psi_rank / shard / (c.pcie_gbs * kGB) +
                                    16 * psi_rank / shard / (c.host_adam_gbs * kGB);
              k.step_seconds = k.compute_seconds + k.bubble_seconds + k.tp_seconds + k.dp_seconds +
                               k.offload_seconds;
              result.feasible.push_back(k);
            }
          }
        }
      }
    }
  }
  // Fastest first; among equally fast layouts the one with clearly less memory, and among those
  // the simplest (fewer ZeRO stages, no offload or recomputation, fewer parallel axes).
  auto complexity = [](const PlanCandidate& k) {
    return k.zero + (k.offload == "host" ? 2 : 0) +
           (k.recompute == "full"        ? 2
            : k.recompute == "selective" ? 1
                                         : 0) +
           (k.tp > 1) + (k.pp > 1);
  };
  std::stable_sort(result.feasible.begin(), result.feasible.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     if (std::abs(a.step_seconds - b.step_seconds) > 1e-3 * a.step_seconds)
                       return a.step_seconds < b.step_seconds;
                     const double ma = a.memory_gb(), mb = b.memory_gb();
                     if (std::abs(ma - mb) > 0.05 * std::max(ma, mb)) return ma < mb;
                     return complexity(a) < complexity(b);
                   });
  if (result.feasible.empty()) {
    result.recommendation = "none";
    result.reasons = fmt::format(
        "no layout fits {} GB per GPU: the smallest ({}) needs {:.3g} GB: model states {:.3g} "
        "GB, activations {:.3g} GB, runtime {:.3g} GB; add GPUs or memory",
        c.gpu_mem_gb, smallest.describe(), smallest.memory_gb(),
        smallest.params_gb + smallest.grads_gb + smallest.optimizer_gb, smallest.activations_gb,
        smallest.other_gb);
    return result;
  }
  const PlanCandidate& best = result.feasible.front();
  result.recommendation = best.describe();
  std::string why = fmt::format(
      "fits in {:.1f} of {} GB (model states {:.1f} GB, activations {:.1f} GB); predicted "
      "{:.2f} s per step: compute {:.2f}, pipeline bubble {:.2f}, tensor-parallel {:.2f}, "
      "data-parallel {:.2f}, offload {:.2f}",
      best.memory_gb(), c.gpu_mem_gb, best.params_gb + best.grads_gb + best.optimizer_gb,
      best.activations_gb, best.step_seconds, best.compute_seconds, best.bubble_seconds,
      best.tp_seconds, best.dp_seconds, best.offload_seconds);
  if (best.zero > 0)
    why += fmt::format("; ZeRO-{} because the replicated model states would need {:.1f} GB",
                       best.zero, 16 * psi / (best.tp * best.pp) / kGB);
  if (best.tp > 1) why += "; tensor parallelism inside a node, on NVLink";
  if (best.pp > 1) why += fmt::format("; {} pipeline stages", best.pp);
  if (best.offload == "host") why += "; optimizer states offloaded to host memory";
  result.reasons = why;
  return result;
}

}  // namespace trident
