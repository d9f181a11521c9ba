// `trident plan`: feasible (dp, tp, pp, ZeRO, offload, recompute, micro-batch) layouts for a model
// on a GPU cluster, ranked by a cost model, with predicted memory per GPU and a recommendation.
#pragma once

#include <string>
#include <vector>

namespace trident {

// The model as the planner sees it (mixed-precision training: bf16 weights and gradients, fp32
// master weights and Adam moments, i.e. 2 + 2 + 12 bytes per parameter).
struct PlanModel {
  double params = 0;  // Psi; 0: 12 L h^2 + V h
  int layers = 0, hidden = 0, heads = 0, seq = 2048, vocab = 50257;
  double param_count() const;
};

struct PlanCluster {
  int gpus = 8, gpus_per_node = 8;
  double gpu_mem_gb = 80;     // per GPU, GB (1e9 bytes)
  double peak_tflops = 312;   // bf16 dense per GPU
  double mfu = 0.5;           // achievable share of the peak in the matmuls
  double intra_gbs = 150;     // per-GPU bandwidth inside a node (NVLink), GB/s
  double inter_gbs = 25;      // per-GPU bandwidth between nodes (e.g. 200 Gb/s), GB/s
  double pcie_gbs = 25;       // GPU <-> host, for offload
  double host_adam_gbs = 10;  // host memory streamed by a CPU Adam step, GB/s
};

struct PlanCandidate {
  int dp = 1, tp = 1, pp = 1, zero = 0, micro_batch = 1, micro_batches = 1;
  std::string offload = "none";    // none | host (optimizer states and step on the CPU)
  std::string recompute = "none";  // none | selective | full
  double params_gb = 0, grads_gb = 0, optimizer_gb = 0, activations_gb = 0, other_gb = 0;
  double step_seconds = 0, compute_seconds = 0, bubble_seconds = 0, tp_seconds = 0, dp_seconds = 0,
         offload_seconds = 0;
  double memory_gb() const {
    return params_gb + grads_gb + optimizer_gb + activations_gb + other_gb;
  }
  std::string describe() const;
};

struct PlanResult {
  std::vector<PlanCandidate> feasible;  // fastest first
  int considered = 0;
  std::string recommendation, reasons;
};

// Enumerates layouts for `global_batch_tokens` tokens per step. Throws InputError for a model
// or cluster that makes no sense.
PlanResult plan_layouts(const PlanModel& model, const PlanCluster& cluster,
                        double global_batch_tokens);

}  // namespace trident
