// The launch roofline: every kernel launch and library call of one training step predicted from
// the model and the layout, by the labels `trident train --profile-step` measures, and timed on a
// GPU's ceilings (`trident plan --config ... --device ...`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/launch_profiler.hpp"
#include "plan/memory_model.hpp"

namespace trident {

// Which build's kernels a prediction names: the CUDA build's (the GPU shape: attention as batched
// GEMMs and softmax kernels per tile, one AdamW launch, column sums in two passes) or a host
// build's (attention in one kernel, a launch per tensor in the optimizer).
struct LaunchTarget {
  bool gpu = true;
  // Host builds computing in a 16-bit format oneDNN has no matmul for on this CPU widen both
  // operands of every 16-bit GEMM to fp32 first (kernels::onednn::widened()): two more kernels a
  // call.
  bool half_widened = false;
  // GPU shape: 16-bit GEMMs add their bias and residual in cuBLASLt's epilogue (the default;
  // TRIDENT_CUBLASLT=0 fills the output with the bias first and adds the residual in a kernel).
  bool cublaslt_epilogues = true;
  // GPU shape: attention runs on cuDNN's fused flash attention where the config lets it
  // (attention.kernel not tiled) and cuDNN takes the shape (16-bit, head size a multiple of 8 up
  // to 128): one call a layer forward and one backward. False: the tiled attention's launches.
  bool cudnn_attention = true;
};

// One label's launches in a step, as LaunchRow counts them.
struct PredictedLaunch {
  std::string label;
  LaunchKind kind = LaunchKind::kKernel;
  int64_t calls = 0;
  double flops = 0;  // summed over the calls: what the hardware executes (masked tiles included)
  double bytes = 0;  // summed: read from and written to device memory, caches ignored
  bool tensor_cores = false;  // a 16-bit GEMM (bf16 / fp16 operands); else fp32 arithmetic
};

class StepLaunches {
 public:
  void add(const std::string& label, LaunchKind kind, double flops, double bytes, int64_t calls = 1,
           bool tensor_cores = false);
  // A GEMM as the dispatch labels it (gemm_label) with its FLOPs and its operands' bytes: A, B
  // and C in their widths, C read too when beta is 1.
  void add_gemm(const char* kind, char trans_a, char trans_b, int m, int n, int k, int batch,
                int in_bytes, int out_bytes, bool reads_c);
  // Labels in the order first added.
  const std::vector<PredictedLaunch>& rows() const { return rows_; }
  const PredictedLaunch* find(const std::string& label) const;
  int64_t launches() const;
  double gemm_flops() const;  // library rows named gemm*

 private:
  std::vector<PredictedLaunch> rows_;
  std::map<std::string, size_t> index_;
};

// Every launch of one optimizer step of q on its one rank: q.micro_batches forward and backward
// passes of q.micro_batch sequences of q.seq_len tokens, the gradient clearing, the global norm
// and AdamW. Predicts one rank's step (dp = tp = pp = 1, no offload); throws InputError naming
// what it does not predict otherwise. Host-to-device copies are not launches and not predicted.
StepLaunches predict_step_launches(const MemoryQuery& q, const LaunchTarget& target);

// The batched attention's launches (the GPU shape) for one layer's forward (and backward) over B
// sequences of T tokens: per sequence, query block and key tile a batched GEMM per query head of a
// group for the scores and one for the values, and the softmax kernels between them.
struct AttentionLaunchShape {
  int B = 1, T = 1, heads = 1, kv_heads = 1, head_size = 1;
  kernels::AttentionTiles tiles{0, 0};  // as resolved (attention_tiles)
  bool half = false;                    // 16-bit tensors
};
void add_attention_forward_batched(StepLaunches& out, const AttentionLaunchShape& s);
void add_attention_backward_batched(StepLaunches& out, const AttentionLaunchShape& s);
// cuDNN's fused attention (kernels/cudnn_attention.hpp): one call forward, one backward, the
// causal half's products on tensor cores (2 B NH T^2 HS FLOPs forward, 2.5 times that backward:
// the scores again, dp, dq, dk and dv), q, k, v, out and the statistics crossing memory once.
bool cudnn_takes(const AttentionLaunchShape& s);
void add_attention_forward_cudnn(StepLaunches& out, const AttentionLaunchShape& s);
void add_attention_backward_cudnn(StepLaunches& out, const AttentionLaunchShape& s);

// What a launch costs on a device: its GEMM rates (a share of the datasheet peak, or measured),
// the bandwidth element-wise kernels reach, and the floors a launch cannot go under.
struct RooflineCeilings {
  std::string source = "datasheet";  // or "measured"
  double gemm16_tflops = 0;          // 16-bit GEMMs on tensor cores
  double gemm32_tflops = 0;          // fp32 GEMMs (0: not known for the device)
  double memory_gbs = 0;             // what element-wise kernels and copies reach
  // Per call: a kernel occupies the device at least this long (launch to launch on one stream),
  // and the host needs this long to issue one (Kokkos and cuBLAS each add their own overhead).
  double device_floor_us = kRooflineDeviceFloorUs;
  double host_launch_us = kRooflineHostLaunchUs;
  // Measured per-call times of library labels (bench/gpu_ceilings.py's TSV: torch_mean_us; GEMMs
  // and cuDNN's attention), used for the labels they name instead of the rate.
  std::map<std::string, double> library_us;

  // Assumptions, not yet fitted to a GPU: the first device check's profile table says how far
  // off each is, label by label.
  static constexpr double kRooflineDeviceFloorUs = 2.0;
  static constexpr double kRooflineHostLaunchUs = 4.0;
};

// A device's datasheet ceilings at the planner's efficiencies (kPlanGemmEfficiency of the GEMM
// peaks, kPlanHbmEfficiency of the HBM bandwidth).
struct DevicePreset;
RooflineCeilings datasheet_ceilings(const DevicePreset& d);
// Measured ceilings: `copy_gbs` (a device-to-device copy's read + write rate), `gemm_tflops` (a
// large bf16 GEMM's rate, for GEMM labels not timed one by one) and, from `gemm_tsv` when not
// empty, each GEMM label's own time (gpu_ceilings.py --out). Throws InputError for a file that
// cannot be read or holds no label.
RooflineCeilings measured_ceilings(double copy_gbs, double gemm_tflops,
                                   const std::string& gemm_tsv);

struct RooflineRow {
  PredictedLaunch launch;
  double seconds = 0;  // on the device, summed over the calls
};
struct Roofline {
  std::vector<RooflineRow> rows;  // the longest first
  double device_seconds = 0;      // every launch back to back on one stream
  double host_seconds = 0;        // issuing them
  // The step: the device's time, or the host's where issuing the launches takes longer (the
  // device then waits on the host).
  double step_seconds() const {
    return device_seconds > host_seconds ? device_seconds : host_seconds;
  }
  int64_t launches = 0;
};
// Each label's time: per call the larger of its FLOPs at the GEMM rate (or its measured time) and
// its bytes at the memory rate, but at least the device floor. Throws InputError for an fp32 GEMM
// where the ceilings know no fp32 rate.
Roofline time_launches(const StepLaunches& launches, const RooflineCeilings& c);

// The roofline as a table with the profile table's columns (label, kind, calls, total_ms,
// mean_us, gflop, tflops, gbs), predicted: bench/gpu_ceilings.py --profile reads either.
std::string roofline_tsv(const Roofline& r);

// What `trident plan --config ... --device ...` prints for a one-rank config: the ceilings, the
// `top` longest labels and the line "GPU_ROOFLINE device=... ceilings=... step_ms=...
// mfu_percent=... launches=... device_ms=... host_ms=... gemm_ms=... tokens_per_s=...". MFU as
// `train` computes it: `model_flops` (6N + 12 L C T a token, times the step's tokens) over the
// step time and the preset's bf16 peak.
std::string roofline_report(const Roofline& r, const RooflineCeilings& c, const DevicePreset& d,
                            double model_flops, double tokens, int top);

// The vocabulary padding a GPU build would use for `m` (its default, 128, where `m` keeps this
// host build's default of 1): a prediction for a GPU made on a host pads as the GPU would.
int gpu_vocab_padding(const ModelConfig& m);

}  // namespace trident
