// The launch roofline (plan/roofline.hpp): the GPU shape's launches and FLOPs for GPT-2 124M, the
// batched attention's labels against what the kernels launch, and the timing rules.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/launch_profiler.hpp"
#include "kernels/attention.hpp"
#include "plan/planner.hpp"
#include "plan/roofline.hpp"
#include "test_space.hpp"
#include "train/step_profiler.hpp"

using namespace trident;

namespace {

// GPT-2 124M as bench/gpu_check.sh trains it: bf16, B = 16, T = 1024, one micro-batch.
MemoryQuery gpt2_124m_step() {
  MemoryQuery q;
  q.model = ModelConfig::gpt2(12, 768, 12, 50257, 1024);
  q.model.vocab_padding = kGpuVocabPadding;
  q.micro_batch = 16;
  q.seq_len = 1024;
  q.micro_batches = 1;
  q.precision = Precision::kBf16;
  return q;
}

int64_t calls_named(const StepLaunches& s, const std::string& prefix) {
  int64_t n = 0;
  for (const PredictedLaunch& r : s.rows())
    if (r.label.rfind(prefix, 0) == 0) n += r.calls;
  return n;
}

int64_t calls_of(const StepLaunches& s, const std::string& label) {
  const PredictedLaunch* r = s.find(label);
  return r ? r->calls : 0;
}

// The CUDA build's shape with the tiled attention (attention.kernel = "tiled", or no cuDNN).
LaunchTarget tiled_attention() {
  LaunchTarget t;
  t.cudnn_attention = false;
  return t;
}

}  // namespace

// The counts the review made by reading the code: with whole-sequence tiles a layer's
// attention is 4 launches a sequence forward and 10 backward (bf16), 2,688 a step; the 16-bit
// GEMMs add bias and residual in cuBLASLt's epilogue; one AdamW launch and one norm launch.
TEST(Roofline, GpuShapeOfTheGpt2Step) {
  const StepLaunches s = predict_step_launches(gpt2_124m_step(), tiled_attention());
  const int64_t attention = calls_named(s, "attention_") + calls_named(s, "gemm16_batched");
  EXPECT_EQ(attention, 2688);
  // Scores: once forward, again backward with dout v^T beside them.
  EXPECT_EQ(calls_of(s, "gemm16_batched NT 1024x1024x64 x12"), 12 * 16 * 3);
  EXPECT_EQ(calls_of(s, "gemm16_bias"), 0);
  EXPECT_EQ(calls_of(s, "residual_forward"), 0);
  EXPECT_EQ(calls_of(s, "gemm16_out NT 16384x50304x768"), 1);  // the padded head
  EXPECT_EQ(calls_of(s, "adamw_update_split"), 1);
  EXPECT_EQ(calls_of(s, "sum_of_squares"), 1);
  // A bias's gradient in its weight GEMM's epilogue and a kernel adding it to the gradient; a
  // LayerNorm's backward in one pass over 128 row blocks of 128 rows, and its second pass.
  EXPECT_EQ(calls_of(s, "gemm16_bgrad TN 3072x768x16384"), 12);
  EXPECT_EQ(calls_of(s, "linear_bias_grad_add"), 4 * 12);
  EXPECT_EQ(calls_of(s, "linear_backward_bias"), 0);
  EXPECT_EQ(calls_of(s, "column_sums_blocks"), 2 * 12 + 1);
  EXPECT_EQ(calls_of(s, "layernorm_backward"), 2 * 12 + 1);
  EXPECT_EQ(calls_of(s, "layernorm_backward_input") + calls_of(s, "layernorm_backward_params"), 0);
  EXPECT_EQ(calls_of(s, "attention_softmax"), 12 * 16);
  // Forward: the embedding, 70 a layer (2 norms, 4 GEMMs, GELU in the first MLP GEMM's epilogue,
  // 64 attention launches), the final norm, the head, the fused classifier and the loss's sum.
  // Backward: 4 at the head (its 2 GEMMs, the final norm's 2-pass backward), 176 a layer (8 GEMMs
  // with GELU's gradient in one's epilogue and the 4 bias gradients in the weight GEMMs', 4
  // kernels adding those, 2 norm backwards of 2 passes each, 160 attention launches), 2 into the
  // embeddings. Then the norm (the squares, their total and the clip scale, on the device),
  // AdamW, and the gradient clearing: d/d(residual) and 49 runs of biases and norms (wpe to layer
  // 0's ln_1, then 4 a layer, the last joined to ln_f).
  EXPECT_EQ(s.launches(), (1 + 70 * 12 + 4) + (4 + 176 * 12 + 2) + 4 + 1 + 49);
  EXPECT_EQ(calls_of(s, "clip_scale"), 1);
  EXPECT_EQ(calls_of(s, "gemm16_gelu NT 16384x3072x768"), 12);
  EXPECT_EQ(calls_of(s, "gemm16_dgelu NN 16384x3072x768"), 12);
  EXPECT_EQ(calls_of(s, "gelu_forward") + calls_of(s, "gelu_backward"), 0);
  EXPECT_EQ(calls_of(s, "cross_entropy_fused"), 1);
  EXPECT_EQ(calls_of(s, "cross_entropy_backward"), 0);
}

// The GEMMs' FLOPs are 6 x tokens x the multiplying parameters (the head at its padded width) plus
// attention's products: trident's 12 L C T a token of the MFU formula, plus backward's recomputed
// scores (2 L C T); whole-sequence tiles compute the masked half too.
TEST(Roofline, GemmFlopsAreSixNPlusTheAttentionProducts) {
  const MemoryQuery q = gpt2_124m_step();
  const StepLaunches s = predict_step_launches(q, tiled_attention());
  const double L = 12, C = 768, T = 1024, tokens = 16 * T, V = 50304;
  const double matrices = L * 12 * C * C + V * C;
  EXPECT_DOUBLE_EQ(s.gemm_flops(), 6 * tokens * matrices + 14 * L * C * T * tokens);
  // The host shape runs attention inside its kernels: its GEMMs are the matrices alone.
  MemoryQuery host = q;
  host.model.vocab_padding = 1;
  host.micro_batch = 2;
  host.seq_len = 64;
  const StepLaunches h = predict_step_launches(host, LaunchTarget{false, false});
  EXPECT_DOUBLE_EQ(h.gemm_flops(), 6 * 128 * (L * 12 * C * C + 50257 * C));
  EXPECT_EQ(calls_of(h, "attention_forward"), 12);
  EXPECT_EQ(calls_of(h, "adamw_update_split"), 148);
}

// With cuDNN's fused attention a layer's attention is one call forward and one backward, in place
// of 2,688 launches a step; its FLOPs are the causal half's products (2 B NH T^2 HS forward, 2.5
// times that backward). attention.kernel = "tiled", fp32 and head sizes cuDNN does not take keep
// the tiled attention's launches.
TEST(Roofline, CudnnAttentionIsOneCallEachWay) {
  const MemoryQuery q = gpt2_124m_step();
  const StepLaunches cudnn = predict_step_launches(q, LaunchTarget{});
  const StepLaunches tiled = predict_step_launches(q, tiled_attention());
  EXPECT_EQ(calls_of(cudnn, "attention_cudnn_forward"), 12);
  EXPECT_EQ(calls_of(cudnn, "attention_cudnn_backward"), 12);
  EXPECT_EQ(calls_named(cudnn, "gemm16_batched") + calls_named(cudnn, "attention_softmax"), 0);
  EXPECT_EQ(cudnn.launches(), tiled.launches() - 2688 + 24);
  EXPECT_EQ(cudnn.launches(), 353);
  const double products = 2.0 * 16 * 12 * 1024.0 * 1024 * 64;
  EXPECT_DOUBLE_EQ(cudnn.find("attention_cudnn_forward")->flops, 12 * products);
  EXPECT_DOUBLE_EQ(cudnn.find("attention_cudnn_backward")->flops, 12 * 2.5 * products);
  EXPECT_TRUE(cudnn.find("attention_cudnn_forward")->tensor_cores);
  MemoryQuery asked_tiled = q;
  asked_tiled.attention_kernel = kernels::AttentionKernel::kTiled;
  EXPECT_EQ(predict_step_launches(asked_tiled, LaunchTarget{}).launches(), tiled.launches());
  MemoryQuery fp32 = q;
  fp32.precision = Precision::kFp32;
  EXPECT_EQ(calls_of(predict_step_launches(fp32, LaunchTarget{}), "attention_cudnn_forward"), 0);
  MemoryQuery odd_heads = q;
  odd_heads.model = ModelConfig::gpt2(12, 780, 12, 50257, 1024);  // heads of 65 channels
  EXPECT_EQ(calls_of(predict_step_launches(odd_heads, LaunchTarget{}), "attention_cudnn_forward"),
            0);
}

// Recomputation repeats a block's forward but for its last projection; micro-batches repeat the
// passes, not the optimizer.
TEST(Roofline, RecomputationAndMicroBatches) {
  MemoryQuery q = gpt2_124m_step();
  q.micro_batch = 4;
  q.micro_batches = 4;
  const StepLaunches plain = predict_step_launches(q, LaunchTarget{});
  q.recompute.policy = RecomputePolicy::kFull;
  q.recompute.layers = 5;
  const StepLaunches full = predict_step_launches(q, LaunchTarget{});
  EXPECT_EQ(calls_of(plain, "layernorm_forward"), 4 * 25);
  EXPECT_EQ(calls_of(full, "layernorm_forward"), 4 * (25 + 2 * 5));
  EXPECT_EQ(calls_of(full, "gemm16_gelu NT 4096x3072x768"), 4 * (12 + 5));
  EXPECT_EQ(calls_of(full, "adamw_update_split"), 1);
  EXPECT_EQ(calls_of(full, "gemm16_out NT 4096x50304x768"), 4);
  // Without cuBLASLt's epilogues (TRIDENT_CUBLASLT=0) the residual has its own kernel, which
  // recomputation repeats for the attention's projection alone.
  LaunchTarget plain_gemms;
  plain_gemms.cublaslt_epilogues = false;
  const StepLaunches kernels = predict_step_launches(q, plain_gemms);
  EXPECT_EQ(calls_of(kernels, "residual_forward"), 4 * (24 + 5));
  EXPECT_EQ(calls_of(kernels, "gelu_forward"), 4 * (12 + 5));  // and GELU its kernels
  EXPECT_EQ(calls_of(kernels, "gelu_backward"), 4 * 12);
  EXPECT_EQ(calls_of(kernels, "gemm16_bias"), 4 * (48 + 3 * 5));
  EXPECT_EQ(calls_of(full, "residual_forward"), 0);
}

TEST(Roofline, RefusesLayoutsItDoesNotPredict) {
  MemoryQuery q = gpt2_124m_step();
  q.dp = 2;
  EXPECT_THROW(predict_step_launches(q, LaunchTarget{}), InputError);
  q = gpt2_124m_step();
  q.zero_stage = 1;
  EXPECT_THROW(predict_step_launches(q, LaunchTarget{}), InputError);
  q = gpt2_124m_step();
  q.schedule = pipeline::ScheduleKind::kZeroBubbleH1;
  EXPECT_THROW(predict_step_launches(q, LaunchTarget{}), InputError);
}

// The batched attention (the GPU shape, compiled in host builds too) launches what the roofline
// predicts, label by label: blocks and tiles that do not divide the sequence, grouped-query heads,
// fp32 and bf16.
template <class E>
void expect_batched_attention_as_predicted(kernels::AttentionTiles tiles) {
  using Stored = typename E::Stored;
  const kernels::AttentionShape s{2, 37, 4, 8, 2};
  const int qkv_width = (s.NH + 2 * s.KVH) * s.HS, C = s.NH * s.HS, N = s.B * s.T;
  const bool half = E::format != Precision::kFp32;
  Kokkos::View<Stored*, TestSpace> qkv("qkv", static_cast<size_t>(N) * qkv_width),
      dqkv("dqkv", static_cast<size_t>(N) * qkv_width), out("out", static_cast<size_t>(N) * C),
      dout("dout", static_cast<size_t>(N) * C);
  Kokkos::View<float*, TestSpace> lse("lse", static_cast<size_t>(N) * s.NH),
      scratch("scratch", kernels::attention_batched_scratch(s.NH, s.HS, s.T, tiles, E::format));
  const Vec lse_vec(lse.data(), lse.extent(0)), scratch_vec(scratch.data(), scratch.extent(0));
  const kernels::MatOf<E> q(qkv.data(), N, qkv_width), dq(dqkv.data(), N, qkv_width),
      o(out.data(), N, C), g(dout.data(), N, C);
  LaunchProfiler profiler;
  profiler.start();
  kernels::attention_forward_batched<E>(Exec(), o, lse_vec, scratch_vec, q, s, tiles);
  kernels::attention_backward_batched<E>(Exec(), dq, scratch_vec, g, q, o, lse_vec, s, tiles);
  profiler.stop();
  StepLaunches predicted;
  const AttentionLaunchShape shape{s.B, s.T, s.NH, s.KVH, s.HS, tiles, half};
  add_attention_forward_batched(predicted, shape);
  add_attention_backward_batched(predicted, shape);
  std::map<std::string, int64_t> measured, want;
  // A CPU whose oneDNN has no matmul in E's format widens each GEMM's operands (the target's
  // half_widened, which the step's prediction adds): not the attention's own launches.
  for (const LaunchRow& r : profiler.rows())
    if (r.label.rfind("trident::widen", 0) != 0) measured[r.label] += r.calls;
  for (const PredictedLaunch& r : predicted.rows()) want[r.label] += r.calls;
  EXPECT_EQ(measured, want) << "tiles " << tiles.rows << " x " << tiles.keys;
  for (const LaunchRow& r : profiler.rows()) {
    const PredictedLaunch* p = predicted.find(r.label);
    if (r.flops > 0 && p) {
      EXPECT_DOUBLE_EQ(r.flops, p->flops) << r.label;
    }
  }
}

TEST(Roofline, BatchedAttentionLaunchesAsPredicted) {
  for (const kernels::AttentionTiles tiles :
       {kernels::AttentionTiles{37, 37}, kernels::AttentionTiles{8, 12},
        kernels::AttentionTiles{16, 5}}) {
    expect_batched_attention_as_predicted<kernels::Fp32Elements>(tiles);
    expect_batched_attention_as_predicted<kernels::Bf16Elements>(tiles);
  }
}

// A launch takes the longer of its FLOPs at the GEMM rate and its bytes at the memory rate, at
// least the device floor; a measured GEMM time replaces the rate for its label; the step is the
// device's time unless issuing the launches takes the host longer.
TEST(Roofline, TimesEachLaunchByItsCeiling) {
  StepLaunches s;
  s.add_gemm("gemm16", 'N', 'T', 4096, 4096, 4096, 1, 2, 4, false);  // 137.4 GFLOP, 134 MB
  s.add("gelu_forward", LaunchKind::kKernel, 0, 1e9, 2);             // 0.5 GB a call
  s.add("loss_sum", LaunchKind::kKernel, 0, 100, 3);                 // under the floor
  RooflineCeilings c;
  c.gemm16_tflops = 500;
  c.memory_gbs = 2000;
  const Roofline r = time_launches(s, c);
  const double gemm = 2.0 * 4096 * 4096 * 4096 / 500e12, gelu = 2 * 0.5e9 / 2000e9,
               floor = 3 * 1e-6 * c.device_floor_us;
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[0].launch.label, "gelu_forward");  // the longest first
  EXPECT_DOUBLE_EQ(r.rows[0].seconds, gelu);
  EXPECT_DOUBLE_EQ(r.rows[1].seconds, gemm);
  EXPECT_DOUBLE_EQ(r.rows[2].seconds, floor);
  EXPECT_DOUBLE_EQ(r.device_seconds, gemm + gelu + floor);
  EXPECT_EQ(r.launches, 6);
  EXPECT_DOUBLE_EQ(r.step_seconds(), r.device_seconds);
  c.library_us["gemm16 NT 4096x4096x4096"] = 1000;
  EXPECT_DOUBLE_EQ(time_launches(s, c).rows[0].seconds, 1e-3);
  // Any library call with a measured time takes it: cuDNN's attention at PyTorch's SDPA time.
  StepLaunches attention;
  attention.add("attention_cudnn_forward", LaunchKind::kLibrary, 1e12, 1e6, 12, true);
  EXPECT_DOUBLE_EQ(time_launches(attention, c).device_seconds, 1e12 / 500e12);  // 12 calls
  c.library_us["attention_cudnn_forward"] = 250;
  EXPECT_DOUBLE_EQ(time_launches(attention, c).device_seconds, 12 * 250e-6);
  c.host_launch_us = 1e3;  // a host slower than the device
  EXPECT_DOUBLE_EQ(time_launches(s, c).step_seconds(), 6e-3);
  // fp32 GEMMs need an fp32 rate: B200's datasheet figures used here give none.
  StepLaunches fp32;
  fp32.add_gemm("gemm", 'N', 'N', 64, 64, 64, 1, 4, 4, false);
  EXPECT_THROW(time_launches(fp32, datasheet_ceilings(device_preset("b200"))), InputError);
  EXPECT_GT(time_launches(fp32, datasheet_ceilings(device_preset("h100"))).device_seconds, 0);
}

TEST(Roofline, DeviceNamesFindTheirPresets) {
  EXPECT_STREQ(preset_for_device_name("NVIDIA H200")->name, "h200");
  EXPECT_STREQ(preset_for_device_name("NVIDIA H100 80GB HBM3")->name, "h100");
  EXPECT_STREQ(preset_for_device_name("NVIDIA A100-SXM4-80GB")->name, "a100-80gb");
  EXPECT_STREQ(preset_for_device_name("NVIDIA A100-SXM4-40GB")->name, "a100-40gb");
  EXPECT_EQ(preset_for_device_name("NVIDIA GeForce RTX 4090"), nullptr);
  EXPECT_EQ(preset_for_device_name(""), nullptr);
}

// The profiled step fences its phases whatever run.phase_fences says; other steps ask the hooks
// they wrap.
TEST(Roofline, TheProfiledStepFencesItsPhases) {
  struct SeventhStep : StepHooks {
    bool fences_phases(int step) const override { return step == 7; }
  } inner;
  const StepProfiler profiler(&inner, 3);
  EXPECT_TRUE(profiler.fences_phases(3));
  EXPECT_TRUE(profiler.fences_phases(7));
  EXPECT_FALSE(profiler.fences_phases(4));
}
