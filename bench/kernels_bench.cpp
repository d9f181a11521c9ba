// Google Benchmark timings of every trident kernel at gpt2-124m shapes with B=4, T=64.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/flight_recorder.hpp"
#include "core/half.hpp"
#include "core/runtime.hpp"
#include "core/types.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cast.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"

namespace {

using namespace trident;

// gpt2-124m (L=12, C=768, NH=12, V=50257, block 1024) at micro-batch B=4, T=64.
constexpr int kB = 4, kT = 64, kC = 768, kNH = 12, kHS = kC / kNH, kV = 50257, kBlock = 1024;
constexpr int kN = kB * kT;
constexpr int64_t kBlockParams = 12LL * kC * kC + 13LL * kC;  // one transformer block
constexpr int64_t kModelParams =
    static_cast<int64_t>(kV) * kC + static_cast<int64_t>(kBlock) * kC + 12 * kBlockParams + 2 * kC;
constexpr int64_t kF = sizeof(float);

// A flat buffer of uniform values in [lo, hi), reproducible (64-bit LCG).
View1 random_view(const std::string& label, size_t n, float lo, float hi, uint64_t seed) {
  View1 v(label, n);
  auto host = Kokkos::create_mirror_view(v);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    host(i) = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  Kokkos::deep_copy(v, host);
  return v;
}

IntView1 random_tokens(size_t n, int V, uint64_t seed) {
  IntView1 v("tokens", n);
  auto host = Kokkos::create_mirror_view(v);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    host(i) = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(V));
  }
  Kokkos::deep_copy(v, host);
  return v;
}

void set_bytes(benchmark::State& state, int64_t bytes_per_iter) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes_per_iter);
}

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * flops_per_iter, benchmark::Counter::kIsRate);
}

void BM_EmbeddingForward(benchmark::State& state) {
  const Exec exec;
  View1 out("out", kN * kC);
  const View1 wte = random_view("wte", static_cast<size_t>(kV) * kC, -0.1f, 0.1f, 1);
  const View1 wpe = random_view("wpe", static_cast<size_t>(kBlock) * kC, -0.1f, 0.1f, 2);
  const IntView1 tokens = random_tokens(kN, kV, 3);
  for (auto _ : state) {
    kernels::embedding_forward(exec, window(out, 0, kN, kC), tokens, window(wte, 0, kV, kC),
                               window(wpe, 0, kBlock, kC), kT, 0);
    exec.fence();
  }
  set_bytes(state, 3 * kN * kC * kF);  // gather two rows, write one
}

void BM_EmbeddingBackward(benchmark::State& state) {
  const Exec exec;
  View1 dwte("dwte", static_cast<size_t>(kV) * kC), dwpe("dwpe", static_cast<size_t>(kBlock) * kC);
  const View1 dout = random_view("dout", kN * kC, -1, 1, 4);
  const IntView1 tokens = random_tokens(kN, kV, 3);
  for (auto _ : state) {
    kernels::embedding_backward(exec, window(dwte, 0, kV, kC), window(dwpe, 0, kBlock, kC),
                                window(dout, 0, kN, kC), tokens, kT, 0);
    exec.fence();
  }
  set_bytes(state, 5 * kN * kC * kF);  // read dout, read-modify-write two gradient rows
}

void BM_LayerNormForward(benchmark::State& state) {
  const Exec exec;
  View1 out("out", kN * kC), mean("mean", kN), rstd("rstd", kN);
  const View1 inp = random_view("inp", kN * kC, -1, 1, 5);
  const View1 w = random_view("w", kC, 0.5f, 1.5f, 6), b = random_view("b", kC, -0.1f, 0.1f, 7);
  for (auto _ : state) {
    kernels::layernorm_forward(exec, window(out, 0, kN, kC), mean, rstd, window(inp, 0, kN, kC), w,
                               b);
    exec.fence();
  }
  set_bytes(state, 2 * kN * kC * kF);
}

void BM_LayerNormBackward(benchmark::State& state) {
  const Exec exec;
  View1 out("out", kN * kC), mean("mean", kN), rstd("rstd", kN);
  View1 dinp("dinp", kN * kC), dw("dw", kC), db("db", kC);
  const View1 inp = random_view("inp", kN * kC, -1, 1, 5);
  const View1 dout = random_view("dout", kN * kC, -1, 1, 8);
  const View1 w = random_view("w", kC, 0.5f, 1.5f, 6), b = random_view("b", kC, -0.1f, 0.1f, 7);
  kernels::layernorm_forward(exec, window(out, 0, kN, kC), mean, rstd, window(inp, 0, kN, kC), w,
                             b);
  for (auto _ : state) {
    kernels::layernorm_backward(exec, window(dinp, 0, kN, kC), dw, db, window(dout, 0, kN, kC),
                                window(inp, 0, kN, kC), w, mean, rstd);
    exec.fence();
  }
  set_bytes(state, 4 * kN * kC * kF);  // read dout and inp, read-modify-write dinp
}

void BM_ResidualForward(benchmark::State& state) {
  const Exec exec;
  View1 out("out", kN * kC);
  const View1 a = random_view("a", kN * kC, -1, 1, 9), b = random_view("b", kN * kC, -1, 1, 10);
  for (auto _ : state) {
    kernels::residual_forward(exec, out, a, b);
    exec.fence();
  }
  set_bytes(state, 3 * kN * kC * kF);
}

// Linear layers of the model as (OC, IC, bias): qkv, attn proj, fc, mlp proj, LM head (tied).
void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"OC", "IC", "bias"});
  b->Args({3 * kC, kC, 1})->Args({kC, kC, 1})->Args({4 * kC, kC, 1})->Args({kC, 4 * kC, 1});
  b->Args({kV, kC, 0});
}

void BM_LinearForward(benchmark::State& state) {
  const Exec exec;
  const int OC = static_cast<int>(state.range(0)), IC = static_cast<int>(state.range(1));
  View1 out("out", static_cast<size_t>(kN) * OC);
  const View1 inp = random_view("inp", static_cast<size_t>(kN) * IC, -1, 1, 11);
  const View1 w = random_view("w", static_cast<size_t>(OC) * IC, -0.05f, 0.05f, 12);
  const View1 bias = random_view("bias", state.range(2) ? OC : 0, -0.1f, 0.1f, 13);
  for (auto _ : state) {
    kernels::linear_forward(exec, window(out, 0, kN, OC), window(inp, 0, kN, IC),
                            window(w, 0, OC, IC), bias);
    exec.fence();
  }
  set_flops(state, 2.0 * kN * OC * IC);
}

void BM_LinearBackward(benchmark::State& state) {
  const Exec exec;
  const int OC = static_cast<int>(state.range(0)), IC = static_cast<int>(state.range(1));
  View1 dinp("dinp", static_cast<size_t>(kN) * IC), dw("dw", static_cast<size_t>(OC) * IC);
  View1 db("db", state.range(2) ? OC : 0);
  const View1 dout = random_view("dout", static_cast<size_t>(kN) * OC, -1, 1, 14);
  const View1 inp = random_view("inp", static_cast<size_t>(kN) * IC, -1, 1, 11);
  const View1 w = random_view("w", static_cast<size_t>(OC) * IC, -0.05f, 0.05f, 12);
  for (auto _ : state) {
    kernels::linear_backward(exec, window(dinp, 0, kN, IC), window(dw, 0, OC, IC), db,
                             window(dout, 0, kN, OC), window(inp, 0, kN, IC), window(w, 0, OC, IC),
                             false);
    exec.fence();
  }
  set_flops(state, 4.0 * kN * OC * IC);
}

// One GEMM of a linear layer: op 0 forward (x W^T), 1 input gradient (dy W), 2 weight gradient
// (dy^T x), so a slow transpose case stands out.
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"op", "OC", "IC"});
  for (int op = 0; op < 3; ++op) {
    b->Args({op, 3 * kC, kC})->Args({op, kC, kC})->Args({op, 4 * kC, kC})->Args({op, kC, 4 * kC});
    b->Args({op, kV, kC});
  }
}

void BM_Gemm(benchmark::State& state) {
  const Exec exec;
  const int op = static_cast<int>(state.range(0));
  const int OC = static_cast<int>(state.range(1)), IC = static_cast<int>(state.range(2));
  const View1 x = random_view("x", static_cast<size_t>(kN) * IC, -1, 1, 11);
  const View1 dy = random_view("dy", static_cast<size_t>(kN) * OC, -1, 1, 14);
  const View1 w = random_view("w", static_cast<size_t>(OC) * IC, -0.05f, 0.05f, 12);
  View1 y("y", static_cast<size_t>(kN) * OC), dx("dx", static_cast<size_t>(kN) * IC);
  View1 dw("dw", static_cast<size_t>(OC) * IC);
  for (auto _ : state) {
    if (op == 0)
      kernels::gemm(exec, 'N', 'T', 1.0f, window(x, 0, kN, IC), window(w, 0, OC, IC), 0.0f,
                    window(y, 0, kN, OC));
    else if (op == 1)
      kernels::gemm(exec, 'N', 'N', 1.0f, window(dy, 0, kN, OC), window(w, 0, OC, IC), 0.0f,
                    window(dx, 0, kN, IC));
    else
      kernels::gemm(exec, 'T', 'N', 1.0f, window(dy, 0, kN, OC), window(x, 0, kN, IC), 1.0f,
                    window(dw, 0, OC, IC));
    exec.fence();
  }
  set_flops(state, 2.0 * kN * OC * IC);
}

// Causal attention FLOPs: T(T+1)/2 (query, key) pairs per head, HS multiply-adds per product.
constexpr double kAttentionPairs = static_cast<double>(kB) * kNH * kT * (kT + 1) / 2.0;

// The bf16 bit patterns of v's values.
HalfView1 bf16_copy(const View1& v) {
  HalfView1 h("bf16", v.extent(0));
  auto src = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto dst = Kokkos::create_mirror_view(h);
  for (size_t i = 0; i < v.extent(0); ++i) dst(i) = to_bf16(src(i));
  Kokkos::deep_copy(h, dst);
  return h;
}

// BM_Gemm's products (fp32 outputs) on the other engines, at the same shapes: kernels::gemm16 with
// bf16 operands (oneDNN on CPUs, cuBLAS on GPUs), and on CPUs oneDNN's fp32 matmul, the candidate
// for fp32 GEMMs where it measures faster than OpenBLAS (bench/gemm16_vs_fp32.sh compares them).
enum GemmEngine { kBf16Gemm16 = 1, kFp32OneDnn = 2 };

void BM_GemmEngine(benchmark::State& state) {
  const Exec exec;
  const int op = static_cast<int>(state.range(0));
  const int OC = static_cast<int>(state.range(1)), IC = static_cast<int>(state.range(2));
  const auto engine = static_cast<GemmEngine>(state.range(3));
  const View1 x = random_view("x", static_cast<size_t>(kN) * IC, -1, 1, 11);
  const View1 dy = random_view("dy", static_cast<size_t>(kN) * OC, -1, 1, 14);
  const View1 w = random_view("w", static_cast<size_t>(OC) * IC, -0.05f, 0.05f, 12);
  const HalfView1 x16 = bf16_copy(x), dy16 = bf16_copy(dy), w16 = bf16_copy(w);
  View1 y("y", static_cast<size_t>(kN) * OC), dx("dx", static_cast<size_t>(kN) * IC);
  View1 dw("dw", static_cast<size_t>(OC) * IC);
  // op 0: y = x W^T; op 1: dx = dy W; op 2: dW += dy^T x.
  const char ta = op == 2 ? 'T' : 'N', tb = op == 0 ? 'T' : 'N';
  const float beta = op == 2 ? 1.0f : 0.0f;
  const Mat out = op == 0   ? window(y, 0, kN, OC)
                  : op == 1 ? window(dx, 0, kN, IC)
                            : window(dw, 0, OC, IC);
  [[maybe_unused]] const View1& a = op == 0 ? x : dy;  // the fp32 oneDNN side (CPUs)
  [[maybe_unused]] const View1& b = op == 2 ? x : w;
  const HalfView1& a16 = op == 0 ? x16 : dy16;
  const HalfView1& b16 = op == 2 ? x16 : w16;
  const int a_cols = op == 0 ? IC : OC, b_rows = op == 2 ? kN : OC;
  for (auto _ : state) {
    if (engine == kBf16Gemm16) {
      kernels::gemm16(exec, ta, tb, 1.0f, window(a16, 0, kN, a_cols), window(b16, 0, b_rows, IC),
                      Precision::kBf16, beta, out);
    } else {
#if !defined(KOKKOS_ENABLE_CUDA)
      const int m = static_cast<int>(out.extent(0)), n = static_cast<int>(out.extent(1));
      kernels::onednn::gemm(ta, tb, m, n, op == 2 ? kN : a_cols, 1.0f, a.data(), a_cols, b.data(),
                            IC, beta, out.data(), n, Precision::kFp32);
#endif
    }
    exec.fence();
  }
  set_flops(state, 2.0 * kN * OC * IC);
}

void engine_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"op", "OC", "IC", "engine"});
  std::vector<int> engines = {kBf16Gemm16};
#if !defined(KOKKOS_ENABLE_CUDA)
  engines.push_back(kFp32OneDnn);
#endif
  for (int engine : engines)
    for (int op = 0; op < 3; ++op)
      for (const auto& [oc, ic] :
           {std::pair{3 * kC, kC}, {kC, kC}, {4 * kC, kC}, {kC, 4 * kC}, {kV, kC}})
        b->Args({op, oc, ic, engine});
}

void BM_AttentionForward(benchmark::State& state) {
  const Exec exec;
  const View1 qkv = random_view("qkv", static_cast<size_t>(kN) * 3 * kC, -1, 1, 15);
  View1 out("out", kN * kC), lse("lse", static_cast<size_t>(kN) * kNH);
  View1 scratch("scratch", kernels::attention_scratch_elements(kB, kNH, kHS, kT, Precision::kFp32));
  const kernels::AttentionShape s{kB, kT, kNH, kHS};
  for (auto _ : state) {
    kernels::attention_forward(exec, window(out, 0, kN, kC), lse, scratch,
                               window(qkv, 0, kN, 3 * kC), s);
    exec.fence();
  }
  set_flops(state, 2 * 2.0 * kAttentionPairs * kHS);  // q.k and p.v
}

void BM_AttentionBackward(benchmark::State& state) {
  const Exec exec;
  const View1 qkv = random_view("qkv", static_cast<size_t>(kN) * 3 * kC, -1, 1, 15);
  const View1 dout = random_view("dout", kN * kC, -1, 1, 16);
  View1 out("out", kN * kC), lse("lse", static_cast<size_t>(kN) * kNH);
  View1 scratch("scratch", kernels::attention_scratch_elements(kB, kNH, kHS, kT, Precision::kFp32));
  View1 dqkv("dqkv", static_cast<size_t>(kN) * 3 * kC);
  const kernels::AttentionShape s{kB, kT, kNH, kHS};
  kernels::attention_forward(exec, window(out, 0, kN, kC), lse, scratch, window(qkv, 0, kN, 3 * kC),
                             s);
  for (auto _ : state) {
    kernels::attention_backward(exec, window(dqkv, 0, kN, 3 * kC), scratch, window(dout, 0, kN, kC),
                                window(qkv, 0, kN, 3 * kC), window(out, 0, kN, kC), lse, s);
    exec.fence();
  }
  set_flops(state, 5 * 2.0 * kAttentionPairs * kHS);  // q.k again, dp, dq, dk, dv
}

void BM_GeluForward(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(kN) * 4 * kC;
  const View1 inp = random_view("inp", n, -3, 3, 17);
  View1 out("out", n);
  for (auto _ : state) {
    kernels::gelu_forward(exec, out, inp);
    exec.fence();
  }
  set_bytes(state, 2 * static_cast<int64_t>(n) * kF);
}

void BM_GeluBackward(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(kN) * 4 * kC;
  const View1 inp = random_view("inp", n, -3, 3, 17);
  const View1 dout = random_view("dout", n, -1, 1, 18);
  View1 dinp("dinp", n);
  for (auto _ : state) {
    kernels::gelu_backward(exec, dinp, inp, dout);
    exec.fence();
  }
  set_bytes(state, 3 * static_cast<int64_t>(n) * kF);
}

// The three reductions of the (here unsplit) vocabulary-parallel cross-entropy forward.
void cross_entropy_forward(const Exec& exec, const View1& losses, const View1& lse,
                           const View1& row_max, const View1& sums, const View1& target_logit,
                           const View1& logits, const IntView1& targets) {
  const ConstMat l = window(logits, 0, kN, kV);
  kernels::cross_entropy_row_max(exec, row_max, l, kV);
  kernels::cross_entropy_row_sums(exec, sums, target_logit, l, row_max, targets, 0, kV);
  kernels::cross_entropy_losses(exec, losses, lse, row_max, sums, target_logit, targets);
}

void BM_CrossEntropyForward(benchmark::State& state) {
  const Exec exec;
  const View1 logits = random_view("logits", static_cast<size_t>(kN) * kV, -4, 4, 19);
  const IntView1 targets = random_tokens(kN, kV, 20);
  View1 losses("losses", kN), lse("lse", kN), mx("max", kN), sums("sums", kN), tl("tl", kN);
  for (auto _ : state) {
    cross_entropy_forward(exec, losses, lse, mx, sums, tl, logits, targets);
    exec.fence();
  }
  set_bytes(state, static_cast<int64_t>(kN) * kV * kF);
}

void BM_CrossEntropyBackward(benchmark::State& state) {
  const Exec exec;
  const View1 logits = random_view("logits", static_cast<size_t>(kN) * kV, -4, 4, 19);
  const IntView1 targets = random_tokens(kN, kV, 20);
  View1 losses("losses", kN), lse("lse", kN), dlogits("dlogits", static_cast<size_t>(kN) * kV);
  View1 mx("max", kN), sums("sums", kN), tl("tl", kN);
  cross_entropy_forward(exec, losses, lse, mx, sums, tl, logits, targets);
  for (auto _ : state) {
    // The model writes the gradient over the logits; a separate output keeps the input intact.
    kernels::cross_entropy_backward(exec, window(dlogits, 0, kN, kV), window(logits, 0, kN, kV),
                                    lse, targets, 0, kV, 1.0f / kN);
    exec.fence();
  }
  set_bytes(state, 2 * static_cast<int64_t>(kN) * kV * kF);
}

// AdamW over one transformer block's parameters and over the whole model.
void BM_AdamW(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(state.range(0));
  View1 param = random_view("param", n, -0.05f, 0.05f, 21);
  const View1 grad = random_view("grad", n, -0.01f, 0.01f, 22);
  View1 m("m", n), v("v", n);
  int step = 0;
  for (auto _ : state) {
    const kernels::AdamWHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step};
    kernels::adamw_update(exec, param, m, v, grad, h, 1.0f);
    exec.fence();
  }
  set_bytes(state, 7 * static_cast<int64_t>(n) * kF);  // read p, g, m, v; write p, m, v
}

// AdamW on 16-bit training's master weights: fp16's fp32 values beside an fp16 copy written in
// the same pass, and bf16's split halves (the compute copy and the low halves, core/half.hpp).
void BM_AdamWRoundedFp16(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(state.range(0));
  View1 param = random_view("param", n, -0.05f, 0.05f, 21);
  const View1 grad = random_view("grad", n, -0.01f, 0.01f, 22);
  View1 m("m", n), v("v", n);
  HalfView1 copy("copy", n);
  int step = 0;
  for (auto _ : state) {
    const kernels::AdamWHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step};
    kernels::adamw_update(exec, param, m, v, grad, h, 1.0f, copy);
    exec.fence();
  }
  set_bytes(state, (7 * kF + 2) * static_cast<int64_t>(n));  // and write the copy
}

void BM_AdamWSplitBf16(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(state.range(0));
  const View1 param = random_view("param", n, -0.05f, 0.05f, 21);
  const View1 grad = random_view("grad", n, -0.01f, 0.01f, 22);
  View1 m("m", n), v("v", n);
  HalfView1 high("high", n), low("low", n);
  kernels::store_compute_half(exec, high, 0, param, n, Precision::kBf16);
  int step = 0;
  for (auto _ : state) {
    const kernels::AdamWHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step};
    kernels::adamw_update_split(exec, high, low, m, v, grad, h, 1.0f);
    exec.fence();
  }
  set_bytes(state, (5 * kF + 4 * 2) * static_cast<int64_t>(n));  // g, m, v; both halves in, out
}

void BM_SumOfSquares(benchmark::State& state) {
  const Exec exec;
  const size_t n = static_cast<size_t>(state.range(0));
  const View1 grad = random_view("grad", n, -0.01f, 0.01f, 22);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::sum_of_squares(exec, grad));
  set_bytes(state, static_cast<int64_t>(n) * kF);
}

void BM_ZeroFill(benchmark::State& state) {
  const Exec exec;
  View1 grads("grads", static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    Kokkos::deep_copy(exec, grads, 0.0f);
    exec.fence();
  }
  set_bytes(state, state.range(0) * kF);
}

// One communication operation recorded and completed in the flight recorder (its default 2,048
// entries): what the recorder adds to every collective and point-to-point call.
void BM_FlightRecorderOperation(benchmark::State& state) {
  FlightRecorder& recorder = FlightRecorder::instance();
  const int comm = recorder.add_communicator("bench", {0, 1});
  PhaseTimer timer;
  std::atomic<int> step{1};
  recorder.start(FlightRecorder::kDefaultCapacity, 0, "bench", "/nonexistent/flight.jsonl", &timer,
                 &step);
  for (auto _ : state) {
    const RecordedCall done(recorder.issue(comm, "allreduce_sum", 4096));
    benchmark::ClobberMemory();
  }
  recorder.stop();
  state.SetItemsProcessed(state.iterations());
}

#define TRIDENT_BENCH(fn) BENCHMARK(fn)->UseRealTime()->Unit(benchmark::kMicrosecond)

TRIDENT_BENCH(BM_EmbeddingForward);
TRIDENT_BENCH(BM_EmbeddingBackward);
TRIDENT_BENCH(BM_LayerNormForward);
TRIDENT_BENCH(BM_LayerNormBackward);
TRIDENT_BENCH(BM_ResidualForward);
TRIDENT_BENCH(BM_LinearForward)->Apply(linear_shapes);
TRIDENT_BENCH(BM_LinearBackward)->Apply(linear_shapes);
TRIDENT_BENCH(BM_Gemm)->Apply(gemm_shapes);
TRIDENT_BENCH(BM_GemmEngine)->Apply(engine_shapes);
TRIDENT_BENCH(BM_AttentionForward);
TRIDENT_BENCH(BM_AttentionBackward);
TRIDENT_BENCH(BM_GeluForward);
TRIDENT_BENCH(BM_GeluBackward);
TRIDENT_BENCH(BM_CrossEntropyForward);
TRIDENT_BENCH(BM_CrossEntropyBackward);
TRIDENT_BENCH(BM_AdamW)->ArgName("n")->Arg(kBlockParams)->Arg(kModelParams);
TRIDENT_BENCH(BM_AdamWRoundedFp16)->ArgName("n")->Arg(kModelParams);
TRIDENT_BENCH(BM_AdamWSplitBf16)->ArgName("n")->Arg(kModelParams);
TRIDENT_BENCH(BM_SumOfSquares)->ArgName("n")->Arg(kModelParams);
TRIDENT_BENCH(BM_ZeroFill)->ArgName("n")->Arg(kModelParams);
BENCHMARK(BM_FlightRecorderOperation)->Unit(benchmark::kNanosecond);

}  // namespace

// Kokkos (and MPI, which the trident library links) must be up before any View exists, and
// every View must be gone before Kokkos finalises: the benchmarks own theirs locally.
int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    benchmark::Initialize(&argc, argv);
    int status = 0;
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
      status = 1;
    } else {
      benchmark::RunSpecifiedBenchmarks();
    }
    benchmark::Shutdown();
    return status;
  });
}
