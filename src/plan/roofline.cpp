// The launch roofline: one step's launches as the layers issue them (model/layers.cpp,
// transformer_block.cpp, output_head.cpp, gpt.cpp; the optimizer), and their time on a device.
#include "plan/roofline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "kernels/shapes.hpp"
#include "model/params.hpp"
#include "model/stage_storage.hpp"
#include "plan/planner.hpp"

namespace trident {

void StepLaunches::add(const std::string& label, LaunchKind kind, double flops, double bytes,
                       int64_t calls, bool tensor_cores) {
  const auto [at, added] = index_.try_emplace(label, rows_.size());
  if (added) rows_.push_back({label, kind, 0, 0, 0, tensor_cores});
  PredictedLaunch& row = rows_[at->second];
  row.calls += calls;
  row.flops += flops;
  row.bytes += bytes;
}

void StepLaunches::add_gemm(const char* kind, char trans_a, char trans_b, int m, int n, int k,
                            int batch, int in_bytes, int out_bytes, bool reads_c) {
  const double mn = static_cast<double>(m) * n, per_item = 2.0 * mn * k;
  const double operands = (static_cast<double>(m) * k + static_cast<double>(k) * n) * in_bytes;
  const double bytes = batch * (operands + mn * out_bytes * (reads_c ? 2 : 1));
  add(gemm_label(kind, trans_a, trans_b, m, n, k, batch), LaunchKind::kLibrary, per_item * batch,
      bytes, 1, in_bytes == 2);
}

const PredictedLaunch* StepLaunches::find(const std::string& label) const {
  const auto at = index_.find(label);
  return at == index_.end() ? nullptr : &rows_[at->second];
}

int64_t StepLaunches::launches() const {
  int64_t n = 0;
  for (const PredictedLaunch& r : rows_) n += r.calls;
  return n;
}

double StepLaunches::gemm_flops() const {
  double f = 0;
  for (const PredictedLaunch& r : rows_)
    if (r.kind == LaunchKind::kLibrary && r.label.rfind("gemm", 0) == 0) f += r.flops;
  return f;
}

namespace {

constexpr LaunchKind kKernel = LaunchKind::kKernel;

// Per (sequence, query block, key tile) of the batched attention: fn(rows, r0, cols).
template <class F>
void for_each_tile(int T, kernels::AttentionTiles t, F&& fn) {
  for (int r0 = 0; r0 < T; r0 += t.rows) {
    const int rows = std::min(t.rows, T - r0), keys_end = r0 + rows;
    fn(rows, -1, 0);  // the block itself: its per-block kernels
    for (int c0 = 0; c0 < keys_end; c0 += t.keys) fn(rows, c0, std::min(t.keys, keys_end - c0));
  }
}

const char* batched_kind(bool half) {
  return half ? "gemm16_batched" : "gemm_batched";
}

// One rank's step, launch by launch, in the order the layers issue them.
class StepPredictor {
 public:
  StepPredictor(const MemoryQuery& q, const LaunchTarget& target)
      : q_(q),
        target_(target),
        shape_(stage_shape(q, whole_model(q.model), 1, 0)),
        table_(q.model),
        local_(table_, q.model, shape_.layout, shape_.buffers.unit_alignment,
               shape_.buffers.expert_unit_alignment),
        half_(q.precision != Precision::kFp32),
        es_(half_ ? 2 : 4),
        B_(q.micro_batch),
        T_(q.seq_len),
        N_(B_ * T_),
        C_(q.model.n_embd),
        partials_(column_partial_floats(shape_)) {}

  StepLaunches predict() {
    for (const Segment& r : grads_to_clear(shape_, local_)) fill(static_cast<double>(r.size()) * 4);
    for (int micro = 0; micro < q_.micro_batches; ++micro) {
      first_micro_ = micro == 0;
      forward();
      backward();
    }
    optimizer();
    return std::move(out_);
  }

 private:
  bool gpu() const { return target_.gpu; }
  bool llama() const { return q_.model.llama(); }
  double rows_bytes(int width) const { return static_cast<double>(N_) * width * es_; }

  void kernel(const char* label, double bytes, double flops = 0) {
    out_.add(label, kKernel, flops, bytes);
  }
  void fill(double bytes) { kernel("Kokkos::ViewFill-1D", bytes); }

  // A 16-bit GEMM through oneDNN on a CPU without matmuls in the run's format: both operands
  // widened first, and a 16-bit output rounded from a kept fp32 product.
  void widened(bool half_output) {
    if (!(target_.half_widened && !gpu() && q_.precision != Precision::kFp32)) return;
    kernel("trident::widen_half", 0, 0);
    kernel("trident::widen_half", 0, 0);
    if (half_output) kernel("trident::widened_gemm_epilogue", 0, 0);
  }

  // gemm / gemm16 (fp32 C) or gemm16_out (16-bit C) as the layers call them.
  void gemm(char ta, char tb, int m, int n, int k, bool half_output, bool reads_c) {
    if (!half_) return out_.add_gemm("gemm", ta, tb, m, n, k, 1, 4, 4, reads_c);
    out_.add_gemm(half_output ? "gemm16_out" : "gemm16", ta, tb, m, n, k, 1, 2, half_output ? 2 : 4,
                  reads_c);
    widened(half_output);
  }

  // The GPU shape's column sums: one kernel, and a second pass over the row blocks' sums.
  void column_sums(const char* label, int K, int cols, double bytes) {
    kernel(label, bytes);
    if (gpu() && kernels::column_row_blocks(K, N_, cols, partials_) > 1)
      kernel("column_sums_blocks",
             4.0 * K * cols * ((N_ + kernels::kColumnRowBlock - 1) / kernels::kColumnRowBlock));
  }

  // ---- layers (model/layers.cpp) ----

  void norm_forward() {
    kernel(llama() ? "rmsnorm_forward" : "layernorm_forward", 2 * rows_bytes(C_) + 8.0 * N_);
  }
  void norm_backward_input() {
    kernel(llama() ? "rmsnorm_backward_input" : "layernorm_backward_input", 4 * rows_bytes(C_));
  }
  void norm_backward_weight() {
    column_sums(llama() ? "rmsnorm_backward_params" : "layernorm_backward_params", llama() ? 1 : 2,
                C_, 2 * rows_bytes(C_));
  }
  // Both halves (the weights' gradient not deferred): the GPU shape's one pass where it fits.
  void norm_backward() {
    const int K = llama() ? 1 : 2, S = K;
    if (!gpu() || !kernels::norm_backward_fits(K, S, C_)) {
      norm_backward_input();
      return norm_backward_weight();
    }
    const int blocks = kernels::column_row_blocks(K, N_, C_, partials_, kernels::kNormRowBlock);
    const double partial_bytes = 4.0 * K * C_ * blocks;
    kernel(llama() ? "rmsnorm_backward" : "layernorm_backward",
           4 * rows_bytes(C_) + (blocks > 1 ? partial_bytes : 0));
    if (blocks > 1) kernel("column_sums_blocks", partial_bytes);
  }

  // Whether 16-bit GEMMs add bias and residual in their epilogue (oneDNN; cuBLASLt on GPUs).
  bool epilogues() const { return !gpu() || target_.cublaslt_epilogues; }
  // out = x W^T + b: fp32 fills the output with the bias and accumulates (beta 1), and so does
  // 16-bit without epilogues; with them the GEMM adds it.
  void linear_forward(int out, int in, bool bias) {
    const bool fill = bias && (!half_ || !epilogues());
    if (fill) kernel(half_ ? "gemm16_bias" : "linear_bias", rows_bytes(out));
    gemm('N', 'T', N_, out, in, true, fill);
  }
  // A row-parallel layer's output added to the residual stream: in the 16-bit GEMM's epilogue
  // (tp 1), else by its own kernel.
  void linear_forward_residual(int out, int in) {
    if (half_ && epilogues()) return gemm('N', 'T', N_, out, in, true, true);
    linear_forward(out, in, !llama());
    kernel("residual_forward", 3 * rows_bytes(out));
  }
  void linear_backward_input(int out, int in) { gemm('N', 'N', N_, in, out, true, false); }
  // 16-bit GPU shape with cuBLASLt's epilogues: the bias gradient in the weight GEMM's (BGRADB,
  // into the column partials' first floats) and a small kernel adding it to the gradient.
  bool bias_grad_in_epilogue(int out) const {
    return gpu() && half_ && epilogues() && partials_ >= static_cast<size_t>(out);
  }
  void linear_backward_weight(int out, int in, bool bias) {
    if (bias && bias_grad_in_epilogue(out)) {
      out_.add_gemm("gemm16_bgrad", 'T', 'N', out, in, N_, 1, 2, 4, !first_micro_);
      return kernel("linear_bias_grad_add", 12.0 * out);
    }
    gemm('T', 'N', out, in, N_, false, !first_micro_);
    if (bias) column_sums("linear_backward_bias", 1, out, rows_bytes(out));
  }

  kernels::AttentionTiles tiles() const {
    return kernels::attention_tiles(
        T_, q_.attention_tiles, gpu() ? kernels::kGpuAttentionTiles : kernels::kHostAttentionTiles);
  }
  AttentionLaunchShape attention_shape() const {
    const AttentionHeads h = shape_.attention_heads();
    return {B_, T_, h.heads, h.kv_heads, h.head_size, tiles(), half_};
  }
  // The host shape's products: per (sequence, head) each block of rows against the keys up to its
  // end, `products` times (2 forward: scores and values; 5 backward: scores, dp, dq, dk, dv).
  double host_attention_flops(int products) const {
    const kernels::AttentionTiles t = tiles();
    double per_head = 0;
    for (int r0 = 0; r0 < T_; r0 += t.rows) {
      const int rows = std::min(t.rows, T_ - r0);
      per_head += 2.0 * rows * (r0 + rows) * q_.model.head_size();
    }
    return products * per_head * B_ * q_.model.n_head;
  }
  void rope() {
    const AttentionHeads h = shape_.attention_heads();
    kernel("rope_rotate", 2.0 * N_ * (h.heads + h.kv_heads) * h.head_size * es_);
  }
  bool cudnn_attention() const {
    return gpu() && target_.cudnn_attention &&
           q_.attention_kernel != kernels::AttentionKernel::kTiled &&
           cudnn_takes(attention_shape());
  }
  void attention_forward() {
    if (llama()) rope();
    if (cudnn_attention()) return add_attention_forward_cudnn(out_, attention_shape());
    if (gpu()) return add_attention_forward_batched(out_, attention_shape());
    kernel("attention_forward", rows_bytes(shape_.qkv_tp() + C_), host_attention_flops(2));
  }
  void attention_backward() {
    if (cudnn_attention())
      add_attention_backward_cudnn(out_, attention_shape());
    else if (gpu())
      add_attention_backward_batched(out_, attention_shape());
    else
      kernel("attention_backward", rows_bytes(2 * shape_.qkv_tp() + 2 * C_),
             host_attention_flops(5));
    if (llama()) rope();
  }

  // GPT-2's GELU in the epilogues of the MLP's GEMMs (the 16-bit GPU shape with cuBLASLt's
  // epilogues): the up projection writes gelu(fc) and fc itself, the down projection's input
  // gradient reads fc back (output bytes counted twice, as a GEMM reading C); else its kernels.
  bool gelu_in_epilogues() const { return gpu() && half_ && epilogues() && !llama(); }
  void mlp_up_forward(bool bias) {
    if (gelu_in_epilogues())
      return out_.add_gemm("gemm16_gelu", 'N', 'T', N_, shape_.fc_tp(), C_, 1, 2, 2, true);
    linear_forward(shape_.fc_tp(), C_, bias);
    activation_forward();
  }
  void mlp_down_backward_input() {
    if (gelu_in_epilogues())
      return out_.add_gemm("gemm16_dgelu", 'N', 'N', N_, shape_.F_tp(), C_, 1, 2, 2, true);
    linear_backward_input(C_, shape_.F_tp());
  }

  void activation_forward() {
    const int F = shape_.F_tp();
    if (llama())
      kernel("swiglu_forward", 3 * rows_bytes(F));
    else
      kernel("gelu_forward", 2 * rows_bytes(F));
  }
  void activation_backward() {
    const int F = shape_.F_tp();
    if (llama())
      kernel("swiglu_backward", 5 * rows_bytes(F));
    else
      kernel("gelu_backward", 3 * rows_bytes(F));
  }

  // ---- the stage (transformer_block.cpp, output_head.cpp, gpt.cpp) ----

  void block_forward(bool complete) {
    const bool bias = !llama();
    norm_forward();
    linear_forward(shape_.qkv_tp(), C_, bias);
    attention_forward();
    linear_forward_residual(C_, shape_.C_tp());
    norm_forward();
    mlp_up_forward(bias);
    if (complete) linear_forward_residual(C_, shape_.F_tp());
  }

  void block_backward(int index) {
    const bool bias = !llama();
    if (shape_.buffers.recompute.full_block(index)) block_forward(false);
    mlp_down_backward_input();
    linear_backward_weight(C_, shape_.F_tp(), bias);
    if (!gelu_in_epilogues()) activation_backward();
    linear_backward_input(shape_.fc_tp(), C_);
    linear_backward_weight(shape_.fc_tp(), C_, bias);
    norm_backward();
    linear_backward_input(C_, shape_.C_tp());
    linear_backward_weight(C_, shape_.C_tp(), bias);
    attention_backward();
    linear_backward_input(shape_.qkv_tp(), C_);
    linear_backward_weight(shape_.qkv_tp(), C_, bias);
    norm_backward();
  }

  void forward() {
    kernel("embedding_forward", 4.0 * N_ + (llama() ? 2 : 3) * rows_bytes(C_));
    for (int i = 0; i < shape_.blocks(); ++i) block_forward(true);
    norm_forward();
    const int V = shape_.V_tp();
    gemm('N', 'T', N_, V, C_, true, false);
    // One rank holds the whole vocabulary: the loss and the logits' gradient in one pass.
    kernel("cross_entropy_fused", 2 * rows_bytes(V) + 12.0 * N_);
    kernel("loss_sum", 4.0 * N_);
  }

  void backward() {
    const int V = shape_.V_tp();
    gemm('N', 'N', N_, C_, V, true, false);
    gemm('T', 'N', V, C_, N_, false, !first_micro_);
    fill(rows_bytes(C_));  // d/d(residual stream) starts at zero
    norm_backward();
    for (int i = shape_.blocks() - 1; i >= 0; --i) block_backward(i);
    const double tokens = rows_bytes(C_) + 4.0 * N_ + 8.0 * N_ * C_;  // dout, ids, rows of dwte
    if (!gpu()) return kernel("embedding_backward", tokens);
    kernel("embedding_backward_tokens", tokens);
    if (!llama()) kernel("embedding_backward_positions", rows_bytes(C_) + 8.0 * T_ * C_);
  }

  // ---- the optimizer (parallel/data/strategy.cpp, optim/adamw.cpp) ----

  void optimizer() {
    double elements = 0;
    int64_t tensors = 0;
    for (const LocalParam& p : local_.params()) {
      if (p.numel == 0) continue;
      elements += static_cast<double>(p.numel);
      ++tensors;
    }
    // fp16: the loss scaler looks for an overflow in the gradients first.
    if (q_.precision == Precision::kFp16) kernel("any_non_finite", 4 * elements);
    // The norm: a reduction per tensor on hosts, one launch over them all on GPUs (SquareSums).
    if (gpu())
      kernel("sum_of_squares", 4 * elements);
    else
      for (const LocalParam& p : local_.params())
        if (p.numel > 0) kernel("sum_of_squares", 4.0 * static_cast<double>(p.numel));
    // One rank clips on the device: the GPU shape adds the chunks' sums there, and one thread
    // computes the norm and AdamW's scale (Trainer::clip_and_step).
    if (gpu()) kernel("sum_of_squares_total", 0);
    kernel("clip_scale", 0);
    const char* label = q_.precision == Precision::kBf16   ? "adamw_update_split"
                        : q_.precision == Precision::kFp16 ? "adamw_update_rounded"
                                                           : "adamw_update";
    // Read parameter, m, v and gradient; write parameter, m, v (and fp16's rounded copy).
    const double bytes = (q_.precision == Precision::kFp16 ? 30 : 28) * elements;
    out_.add(label, kKernel, 0, bytes, gpu() ? 1 : tensors);
  }

  const MemoryQuery& q_;
  LaunchTarget target_;
  StageShape shape_;
  ParamTable table_;
  LocalParamTable local_;
  bool half_;
  int es_, B_, T_, N_, C_;
  size_t partials_;
  bool first_micro_ = true;
  StepLaunches out_;
};

void require_predicted(bool ok, const std::string& what) {
  if (!ok)
    throw InputError(fmt::format(
        "the launch roofline predicts one rank's step (dp = tp = pp = 1, ZeRO 0, no offload, "
        "synchronous): {}",
        what));
}

}  // namespace

void add_attention_forward_batched(StepLaunches& out, const AttentionLaunchShape& s) {
  const int G = s.heads / s.kv_heads, HS = s.head_size, es = s.half ? 2 : 4;
  const char* kind = batched_kind(s.half);
  for (int b = 0; b < s.B; ++b)
    for_each_tile(s.T, s.tiles, [&](int rows, int c0, int cols) {
      const double scores = 4.0 * s.heads * rows * std::max(cols, 1);
      if (c0 < 0)  // o divided by its row sums, the log-sum-exp kept
        return out.add("attention_normalise", kKernel, 0,
                       static_cast<double>(s.heads) * rows * HS * (4 + es));
      for (int j = 0; j < G; ++j)
        out.add_gemm(kind, 'N', 'T', rows, cols, HS, s.kv_heads, es, 4, false);
      out.add("attention_softmax", kKernel, 0, scores * (s.half ? 2.5 : 2));
      for (int j = 0; j < G; ++j)
        out.add_gemm(kind, 'N', 'N', rows, HS, cols, s.kv_heads, es, 4, c0 > 0);
    });
}

void add_attention_backward_batched(StepLaunches& out, const AttentionLaunchShape& s) {
  const int G = s.heads / s.kv_heads, HS = s.head_size, es = s.half ? 2 : 4;
  const double C = static_cast<double>(s.heads) * HS, KV = 2.0 * s.kv_heads * HS;
  const char* kind = batched_kind(s.half);
  if (!s.half) out.add("attention_zero_dkv", kKernel, 0, 4.0 * s.B * s.T * KV);
  for (int b = 0; b < s.B; ++b) {
    if (s.half) out.add("attention_zero_dkv", kKernel, 0, 4.0 * s.T * KV);
    for_each_tile(s.T, s.tiles, [&](int rows, int c0, int cols) {
      if (c0 < 0) {
        out.add("attention_row_dot", kKernel, 0, 2.0 * s.heads * rows * HS * es);
        return;
      }
      for (int j = 0; j < G; ++j) {
        out.add_gemm(kind, 'N', 'T', rows, cols, HS, s.kv_heads, es, 4, false);
        out.add_gemm(kind, 'N', 'T', rows, cols, HS, s.kv_heads, es, 4, false);
      }
      out.add("attention_softmax_backward", kKernel, 0,
              static_cast<double>(s.heads) * rows * cols * (8 + 2 * es));
      for (int j = 0; j < G; ++j) {
        out.add_gemm(kind, 'N', 'N', rows, HS, cols, s.kv_heads, es, 4, c0 > 0);
        out.add_gemm(kind, 'T', 'N', cols, HS, rows, s.kv_heads, es, 4, true);
        out.add_gemm(kind, 'T', 'N', cols, HS, rows, s.kv_heads, es, 4, true);
      }
    });
    // 16-bit: each block's dq rounded once its key tiles are done, the sequence's dk, dv after.
    if (s.half) {
      for (int r0 = 0; r0 < s.T; r0 += s.tiles.rows)
        out.add("attention_store_dq", kKernel, 0, std::min(s.tiles.rows, s.T - r0) * C * (4 + es));
      out.add("attention_store_dkv", kKernel, 0, s.T * KV * (4 + es));
    }
  }
}

bool cudnn_takes(const AttentionLaunchShape& s) {
  return s.half && s.head_size % 8 == 0 && s.head_size <= 128;
}

namespace {
double causal_products(const AttentionLaunchShape& s) {
  return 2.0 * s.B * s.heads * static_cast<double>(s.T) * s.T * s.head_size;
}
// The bytes of B T rows of `heads` heads in 16 bits.
double head_rows(const AttentionLaunchShape& s, int heads) {
  return 2.0 * s.B * s.T * heads * s.head_size;
}
}  // namespace

void add_attention_forward_cudnn(StepLaunches& out, const AttentionLaunchShape& s) {
  const double bytes =
      head_rows(s, s.heads + 2 * s.kv_heads) + head_rows(s, s.heads) + 4.0 * s.B * s.heads * s.T;
  out.add("attention_cudnn_forward", LaunchKind::kLibrary, causal_products(s), bytes, 1, true);
}

void add_attention_backward_cudnn(StepLaunches& out, const AttentionLaunchShape& s) {
  const double qkv = head_rows(s, s.heads + 2 * s.kv_heads), rows = head_rows(s, s.heads);
  const double bytes = 2 * qkv + 2 * rows + 4.0 * s.B * s.heads * s.T * 2;
  out.add("attention_cudnn_backward", LaunchKind::kLibrary, 2.5 * causal_products(s), bytes, 1,
          true);
}

StepLaunches predict_step_launches(const MemoryQuery& q, const LaunchTarget& target) {
  require_predicted(q.dp == 1 && q.tp == 1 && q.pp == 1 && q.virtual_stages == 1,
                    fmt::format("this layout has dp = {}, tp = {}, pp = {}", q.dp, q.tp, q.pp));
  require_predicted(q.zero_stage == 0, fmt::format("zero.stage = {}", q.zero_stage));
  require_predicted(!q.offload_nvme && !q.offload_params_nvme, "offload is on");
  require_predicted(q.dp_sync == DpSync::kSync, "dp.sync is not 'sync'");
  require_predicted(q.schedule != pipeline::ScheduleKind::kZeroBubbleH1,
                    "the zero-bubble schedule splits the backward pass");
  StepPredictor predictor(q, target);
  return predictor.predict();
}

RooflineCeilings datasheet_ceilings(const DevicePreset& d) {
  RooflineCeilings c;
  c.source = "datasheet";
  c.gemm16_tflops = kPlanGemmEfficiency * d.bf16_tflops;
  c.gemm32_tflops = kPlanGemmEfficiency * d.fp32_tflops;
  c.memory_gbs = kPlanHbmEfficiency * d.hbm_gbs;
  return c;
}

RooflineCeilings measured_ceilings(double copy_gbs, double gemm_tflops,
                                   const std::string& gemm_tsv) {
  if (!(copy_gbs > 0) || !(gemm_tflops > 0))
    throw InputError("measured ceilings need a copy rate and a GEMM rate above 0");
  RooflineCeilings c;
  c.source = "measured";
  c.gemm16_tflops = gemm_tflops;
  c.memory_gbs = copy_gbs;
  if (gemm_tsv.empty()) return c;
  std::ifstream in(gemm_tsv);
  if (!in) throw InputError(fmt::format("--gemm-ceilings {}: cannot be read", gemm_tsv));
  std::string line;
  int label_at = -1, us_at = -1;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, '\t');) cells.push_back(cell);
    if (label_at < 0) {  // the header
      for (size_t i = 0; i < cells.size(); ++i) {
        if (cells[i] == "label") label_at = static_cast<int>(i);
        if (cells[i] == "torch_mean_us") us_at = static_cast<int>(i);
      }
      if (label_at < 0 || us_at < 0)
        throw InputError(fmt::format(
            "--gemm-ceilings {}: no 'label' and 'torch_mean_us' columns (bench/gpu_ceilings.py "
            "--out writes them)",
            gemm_tsv));
      continue;
    }
    if (static_cast<int>(cells.size()) <= std::max(label_at, us_at)) continue;
    try {
      c.library_us[cells[label_at]] = std::stod(cells[us_at]);
    } catch (const std::exception&) {
      throw InputError(fmt::format("--gemm-ceilings {}: '{}' is no time in microseconds", gemm_tsv,
                                   cells[us_at]));
    }
  }
  if (c.library_us.empty())
    throw InputError(fmt::format("--gemm-ceilings {}: no GEMM label in it", gemm_tsv));
  return c;
}

Roofline time_launches(const StepLaunches& launches, const RooflineCeilings& c) {
  Roofline r;
  for (const PredictedLaunch& l : launches.rows()) {
    if (l.calls == 0) continue;
    const double calls = static_cast<double>(l.calls);
    double per_call = l.bytes / calls / (c.memory_gbs * 1e9);
    const auto measured = c.library_us.find(l.label);
    if (l.kind == LaunchKind::kLibrary && measured != c.library_us.end()) {
      per_call = 1e-6 * measured->second;
    } else if (l.flops > 0) {
      const double tflops = l.tensor_cores ? c.gemm16_tflops : c.gemm32_tflops;
      if (!(tflops > 0))
        throw InputError(fmt::format(
            "{}: an fp32 GEMM, and the {} ceilings hold no fp32 rate for this device (run in bf16, "
            "or give measured ceilings)",
            l.label, c.source));
      per_call = std::max(per_call, l.flops / calls / (tflops * 1e12));
    }
    per_call = std::max(per_call, 1e-6 * c.device_floor_us);
    r.rows.push_back({l, per_call * calls});
    r.device_seconds += per_call * calls;
    r.launches += l.calls;
  }
  r.host_seconds = 1e-6 * c.host_launch_us * static_cast<double>(r.launches);
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const RooflineRow& a, const RooflineRow& b) {
    return a.seconds > b.seconds;
  });
  return r;
}

std::string roofline_tsv(const Roofline& r) {
  std::string out = "label\tkind\tcalls\ttotal_ms\tmean_us\tgflop\ttflops\tgbs\n";
  for (const RooflineRow& row : r.rows) {
    const PredictedLaunch& l = row.launch;
    const double per_call = row.seconds / static_cast<double>(l.calls);
    out += fmt::format("{}\t{}\t{}\t{:.4f}\t{:.2f}\t{}\t{}\t{:.3f}\n", l.label, name_of(l.kind),
                       l.calls, 1e3 * row.seconds, 1e6 * per_call,
                       l.flops > 0 ? fmt::format("{:.9f}", l.flops / 1e9) : "",
                       l.flops > 0 ? fmt::format("{:.3f}", l.flops / row.seconds / 1e12) : "",
                       l.bytes / row.seconds / 1e9);
  }
  return out;
}

std::string roofline_report(const Roofline& r, const RooflineCeilings& c, const DevicePreset& d,
                            double model_flops, double tokens, int top) {
  const double step = r.step_seconds();
  double gemm = 0;
  for (const RooflineRow& row : r.rows)
    if (row.launch.kind == LaunchKind::kLibrary && row.launch.label.rfind("gemm", 0) == 0)
      gemm += row.seconds;
  std::string out = fmt::format(
      "launch roofline of one step on one {} ({} ceilings: 16-bit GEMMs {:.0f} TFLOP/s, fp32 "
      "GEMMs {}, memory {:.0f} GB/s{}; at least {:.1f} us a launch on the device, {:.1f} us on "
      "the host):\n",
      d.model, c.source, c.gemm16_tflops,
      c.gemm32_tflops > 0 ? fmt::format("{:.1f} TFLOP/s", c.gemm32_tflops) : "none", c.memory_gbs,
      c.library_us.empty() ? "" : fmt::format(", {} library labels timed", c.library_us.size()),
      c.device_floor_us, c.host_launch_us);
  out +=
      fmt::format("  {:<42} {:>7} {:>10} {:>9} {:>6}\n", "label", "calls", "GFLOP", "ms", "share");
  for (size_t i = 0; i < r.rows.size() && static_cast<int>(i) < top; ++i) {
    const RooflineRow& row = r.rows[i];
    out += fmt::format("  {:<42} {:>7} {:>10.1f} {:>9.3f} {:>5.1f}%\n", row.launch.label,
                       row.launch.calls, row.launch.flops / 1e9, 1e3 * row.seconds,
                       100 * row.seconds / r.device_seconds);
  }
  if (static_cast<int>(r.rows.size()) > top)
    out += fmt::format("  ... {} more labels\n", r.rows.size() - top);
  out += fmt::format(
      "GPU_ROOFLINE device={} ceilings={} step_ms={:.3f} mfu_percent={:.2f} launches={} "
      "device_ms={:.3f} host_ms={:.3f} gemm_ms={:.3f} tokens_per_s={:.0f}\n",
      d.name, c.source, 1e3 * step, 100 * model_flops / step / (d.bf16_tflops * 1e12), r.launches,
      1e3 * r.device_seconds, 1e3 * r.host_seconds, 1e3 * gemm, tokens / step);
  return out;
}

int gpu_vocab_padding(const ModelConfig& m) {
  return m.vocab_padding == kDefaultVocabPadding ? kGpuVocabPadding : m.vocab_padding;
}

}  // namespace trident
