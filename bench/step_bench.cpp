// Times one gpt2-124m training step (trident::GptStage + AdamW) and the same GEMMs alone, in fp32
// or with 16-bit storage (--precision bf16|fp16: fp32 master weights, and the GEMMs alone on 16-bit
// operands, kernels::gemm16); greppable.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/blas_info.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "core/runtime.hpp"
#include "core/types.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"
#include "model/gpt.hpp"
#include "model/partition.hpp"
#include "optim/adamw.hpp"
#include "optim/master_weights.hpp"

namespace {

using namespace trident;
using Clock = std::chrono::steady_clock;

struct Options {
  int steps = 5, warmup = 2, profile_steps = 2;
  int B = 4, T = 64;
  int layers = 12, vocab = 50257;  // other shapes: smoke tests, and `make run`'s small model
  int embd = 768, heads = 12;
  double max_norm = 1.0;  // global-norm clipping as in the trainer (0: off)
  Precision precision = Precision::kFp32;
};

// The command line, through CLI11 as trident's own: false (after CLI11's message) when it is not
// valid; --help prints every option.
bool parse(int argc, char** argv, Options& o, int& status) {
  CLI::App app("Times one training step of trident's model and the same GEMMs alone",
               "trident_step_bench");
  const auto positive = CLI::Range(1, 1 << 30);
  app.add_option("--steps", o.steps, "timed steps")->check(positive)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--profile-steps", o.profile_steps, "steps with the phase breakdown")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--batch", o.B, "sequences per step")->check(positive)->capture_default_str();
  app.add_option("--seq", o.T, "tokens per sequence")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary")->check(positive)->capture_default_str();
  app.add_option("--embd", o.embd, "model width C")->check(positive)->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads (dividing C)")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--max-norm", o.max_norm, "global-norm clipping (0: off)")->capture_default_str();
  std::string precision = "fp32";
  app.add_option("--precision", precision, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    if (o.embd % o.heads != 0) throw CLI::ValidationError("--heads", "must divide --embd");
  } catch (const CLI::ParseError& e) {
    status = app.exit(e) == 0 ? 0 : 2;
    return false;
  }
  return parse_name(precision, o.precision);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void fill_uniform(const View1& v, float lo, float hi, uint64_t seed) {
  auto host = Kokkos::create_mirror_view(v);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < v.extent(0); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    host(i) = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  Kokkos::deep_copy(v, host);
}

// Attributes wall time to the innermost Kokkos profiling region (every trident kernel opens one),
// keyed by the step phase, through the Kokkos Tools callbacks: no tool library needed.
namespace profile {
std::string phase = "none";
std::vector<std::string> stack;
std::map<std::pair<std::string, std::string>, std::pair<double, long>> self;  // seconds, calls
Clock::time_point last;

void charge(Clock::time_point now) {
  if (!stack.empty())
    self[{phase, stack.back()}].first += std::chrono::duration<double>(now - last).count();
  last = now;
}
void push(const char* name) {
  charge(Clock::now());
  stack.emplace_back(name);
  self[{phase, stack.back()}].second += 1;
}
void pop() {
  charge(Clock::now());
  if (!stack.empty()) stack.pop_back();
}
void enable(bool on) {
  Kokkos::Tools::Experimental::set_push_region_callback(on ? &push : nullptr);
  Kokkos::Tools::Experimental::set_pop_region_callback(on ? &pop : nullptr);
}
}  // namespace profile

// The model's GEMMs alone, in the order forward + backward issue them, with private activations:
// on the model's own weights (in its storage format) and fp32 gradients, so the memory they
// stream is the same. 16-bit: on 16-bit copies of the activations (kernels::gemm16).
class GemmOnly {
 public:
  GemmOnly(const GptStage& model, MemoryLedger& ledger, int N)
      : m_(model.config()),
        N_(N),
        precision_(model.precision()),
        g_(stage_tensors(model.local(), model.layout(),
                         stored_f32(model.grads().data(), model.grads().extent(0)))) {
    const size_t n = N, C = m_.n_embd, V = m_.vocab_size;
    auto act = [&](const char* label, size_t count, uint64_t seed) {
      View1 v = allocate(ledger, MemCategory::kWorkspace, label, count);
      fill_uniform(v, -1.0f, 1.0f, seed);
      return v;
    };
    x_ = act("gemm_x", n * C, 1);
    y_ = act("gemm_y", n * C, 2);
    qkv_ = act("gemm_qkv", n * 3 * C, 3);
    h_ = act("gemm_h", n * 4 * C, 4);
    dx_ = act("gemm_dx", n * C, 5);
    dy_ = act("gemm_dy", n * C, 6);
    dqkv_ = act("gemm_dqkv", n * 3 * C, 7);
    dh_ = act("gemm_dh", n * 4 * C, 8);
    logits_ = act("gemm_logits", n * V, 9);
    const size_t numel = model.local().total_numel();
    if (precision_ == Precision::kFp32) {
      p_ = stage_tensors(model.local(), model.layout(), stored_f32(model.params().data(), numel));
      return;
    }
    p_ = stage_tensors(model.local(), model.layout(),
                       stored_f16(model.params16().data(), numel, precision_));
    for (View1* v : {&x_, &dy_, &dqkv_, &dh_, &logits_, &h_}) half_[v] = half_copy(ledger, *v);
  }

  // FLOPs of one pass: 2 * N * in * out for each of the 3 GEMMs of every linear layer.
  double flops() const {
    const double C = m_.n_embd, V = m_.vocab_size;
    return 3 * 2.0 * N_ * (m_.n_layer * 12.0 * C * C + V * C);
  }

  void run() {
    const int N = N_, C = m_.n_embd, V = m_.vocab_size;
    // Forward: biased layers run with beta 1 on a bias-initialised output, as linear_forward.
    for (int l = 0; l < m_.n_layer; ++l) {
      const BlockTensors& w = p_.blocks[l];
      forward(qkv_, x_, {w.qkv.weight, 3 * C, C}, 1.0f);
      forward(y_, x_, {w.proj.weight, C, C}, 1.0f);
      forward(h_, x_, {w.fc.weight, 4 * C, C}, 1.0f);
      forward(y_, h_, {w.fcproj.weight, C, 4 * C}, 1.0f);
    }
    forward(logits_, x_, {p_.wte, V, C}, 0.0f);
    // Backward: the LM head, then the blocks last to first. dinp = dout W (beta 0: no consumer
    // accumulates), dW = dout^T inp (beta 0: with one micro-batch the backward's GEMM is the
    // step's first write of dW, see zero_grads).
    multiply('N', 'N', logits_, N, V, {p_.wte, V, C}, 0.0f, window(dx_, 0, N, C));
    multiply('T', 'N', logits_, N, V, x_, C, 0.0f, grad(g_.wte, V, C));
    for (int l = m_.n_layer - 1; l >= 0; --l) {
      const BlockTensors& w = p_.blocks[l];
      const BlockTensors& g = g_.blocks[l];
      backward(dh_, grad(g.fcproj.weight, C, 4 * C), dy_, h_, {w.fcproj.weight, C, 4 * C});
      backward(dx_, grad(g.fc.weight, 4 * C, C), dh_, x_, {w.fc.weight, 4 * C, C});
      backward(dx_, grad(g.proj.weight, C, C), dy_, x_, {w.proj.weight, C, C});
      backward(dx_, grad(g.qkv.weight, 3 * C, C), dqkv_, x_, {w.qkv.weight, 3 * C, C});
    }
    exec_.fence();
  }

 private:
  HalfView1 half_copy(MemoryLedger& ledger, const View1& v) const {
    HalfView1 h = allocate_half(ledger, MemCategory::kWorkspace, "gemm_half", v.extent(0));
    kernels::store_half(Exec(), h, 0, v, v.extent(0), precision_);
    return h;
  }
  // A weight matrix of the model [rows, cols] in its storage format.
  struct Weight {
    StoredTensor values;
    int rows, cols;
  };
  static Mat grad(const StoredTensor& g, int rows, int cols) {
    return Mat(g.f32.data(), rows, cols);
  }
  // out = op(a [rows, cols]) op(w) + beta out.
  void multiply(char ta, char tb, const View1& a, int rows, int cols, const Weight& w, float beta,
                const Mat& out) {
    if (precision_ == Precision::kFp32) {
      kernels::gemm(exec_, ta, tb, 1.0f, window(a, 0, rows, cols),
                    Mat(w.values.f32.data(), w.rows, w.cols), beta, out);
      return;
    }
    kernels::gemm16(exec_, ta, tb, 1.0f, window(half_.at(&a), 0, rows, cols),
                    HalfMat(w.values.f16.data(), w.rows, w.cols), precision_, beta, out);
  }
  // out = op(a [rows, cols]) op(b [rows, b_cols]) + beta out, both activations.
  void multiply(char ta, char tb, const View1& a, int rows, int cols, const View1& b, int b_cols,
                float beta, const Mat& out) {
    if (precision_ == Precision::kFp32) {
      kernels::gemm(exec_, ta, tb, 1.0f, window(a, 0, rows, cols), window(b, 0, rows, b_cols), beta,
                    out);
      return;
    }
    kernels::gemm16(exec_, ta, tb, 1.0f, window(half_.at(&a), 0, rows, cols),
                    window(half_.at(&b), 0, rows, b_cols), precision_, beta, out);
  }
  void forward(const View1& out, const View1& in, const Weight& w, float beta) {
    multiply('N', 'T', in, N_, w.cols, w, beta, window(out, 0, N_, w.rows));
  }
  void backward(const View1& dinp, const Mat& dw, const View1& dout, const View1& in,
                const Weight& w) {
    const int OC = w.rows, IC = w.cols;
    multiply('N', 'N', dout, N_, OC, w, 0.0f, window(dinp, 0, N_, IC));
    multiply('T', 'N', dout, N_, OC, in, IC, 0.0f, dw);
  }

  ModelConfig m_;
  int N_;
  Precision precision_;
  StageTensors p_, g_;
  Exec exec_;
  View1 x_, y_, qkv_, h_, dx_, dy_, dqkv_, dh_, logits_;
  std::map<const View1*, HalfView1> half_;  // 16-bit: the copies of the activations read
};

struct StepTimes {
  double zero, forward, backward, optimizer, total;
};

int run(const Options& o) {
  ModelConfig m;
  m.name = o.embd == 768 && o.heads == 12 ? "gpt2-124m" : "custom";
  m.n_layer = o.layers;
  m.n_embd = o.embd;
  m.n_head = o.heads;
  m.vocab_size = o.vocab;
  m.block_size = 1024;
  const int N = o.B * o.T;

  MemoryLedger ledger;
  StageBuffers buffers;
  buffers.precision = o.precision;
  GptStage model(m, whole_model(m), nullptr, ledger, o.B, o.T, 1, buffers);
  model.init_params(1337);
  AdamW optimizer(model.local(), ledger, AdamWSettings{});
  // 16-bit storage: AdamW updates the master weights and their 16-bit compute copy in one pass,
  // as the trainer's data-parallel strategies do (bf16: the two halves of each fp32 value).
  std::unique_ptr<MasterWeights> master;
  if (o.precision != Precision::kFp32) {
    master = std::make_unique<MasterWeights>(
        model.local(), zero_shard(model.local(), 1, 0),
        RoundedCopy{model.params16(), Placement::kFlat, o.precision}, ledger);
    master->init(1337);
  }
  GemmOnly gemms(model, ledger, N);

  std::vector<int32_t> tokens(N), targets(N);
  uint64_t s = 42;
  for (int n = 0; n < N; ++n) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    tokens[n] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(m.vocab_size));
  }
  for (int n = 0; n < N; ++n) targets[n] = tokens[(n + 1) % N];

  const BlasInfo blas = blas_info();
  std::printf(
      "trident_config model=%s L=%d C=%d NH=%d V=%d B=%d T=%d params=%lld "
      "openblas_threads=%d blas=\"%s\" steps=%d warmup=%d max_norm=%g precision=%s\n",
      m.name.c_str(), m.n_layer, m.n_embd, m.n_head, m.vocab_size, o.B, o.T,
      static_cast<long long>(model.table().total_numel()), blas.threads, blas.describe().c_str(),
      o.steps, o.warmup, o.max_norm, name_of(o.precision));
  std::fflush(stdout);

  // One step as the trainer runs it: zero, forward, backward, global-norm clip + AdamW.
  // A fence closes each phase so the phase split is right on asynchronous backends too.
  double loss = 0.0;
  auto step = [&]() {
    StepTimes t{};
    const auto t0 = Clock::now();
    profile::phase = "zero_grads";
    model.zero_grads();
    Kokkos::fence();
    const auto t1 = Clock::now();
    profile::phase = "forward";
    loss = model.forward(0, tokens.data(), targets.data(), o.B, o.T) / N;
    Kokkos::fence();
    const auto t2 = Clock::now();
    profile::phase = "backward";
    model.backward(0, 1.0f / static_cast<float>(N));
    Kokkos::fence();
    const auto t3 = Clock::now();
    profile::phase = "optimizer";
    float clip = 1.0f;
    if (o.max_norm > 0) {
      const double norm = std::sqrt(kernels::sum_of_squares(Exec(), model.grads()));
      if (norm > o.max_norm) clip = static_cast<float>(o.max_norm / (norm + 1e-6));
    }
    if (master) {
      optimizer.step(master->params(), model.grads(), Placement::kFlat, 6e-4, clip);
    } else {
      optimizer.step(model.params(), model.grads(), 6e-4, clip);
    }
    Kokkos::fence();
    const auto t4 = Clock::now();
    auto sec = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    t = {sec(t0, t1), sec(t1, t2), sec(t2, t3), sec(t3, t4), sec(t0, t4)};
    return t;
  };

  for (int i = 0; i < o.warmup; ++i) {
    step();
    gemms.run();
  }
  // Each timed step is followed by the GEMMs alone, so the two sides of step/GEMM see the same
  // state of a shared machine (a neighbour's busy spell slows both, not one): the ratio is the
  // median of the pairs' ratios.
  std::vector<double> zero, fwd, bwd, opt, total, gemm_times, pair_ratios;
  for (int i = 0; i < o.steps; ++i) {
    const StepTimes t = step();
    const auto g0 = Clock::now();
    gemms.run();
    gemm_times.push_back(seconds_since(g0));
    pair_ratios.push_back(t.total / gemm_times.back());
    zero.push_back(t.zero);
    fwd.push_back(t.forward);
    bwd.push_back(t.backward);
    opt.push_back(t.optimizer);
    total.push_back(t.total);
    std::printf("trident_step index=%d seconds=%.4f loss=%.4f\n", i, t.total, loss);
  }

  // Region profile on separate steps, so the callbacks never touch the timed ones.
  std::map<std::string, double> prof_phase;  // seconds per step
  if (o.profile_steps > 0) {
    profile::enable(true);
    for (int i = 0; i < o.profile_steps; ++i) {
      const StepTimes t = step();
      prof_phase["zero_grads"] += t.zero / o.profile_steps;
      prof_phase["forward"] += t.forward / o.profile_steps;
      prof_phase["backward"] += t.backward / o.profile_steps;
      prof_phase["optimizer"] += t.optimizer / o.profile_steps;
      prof_phase["step"] += t.total / o.profile_steps;
    }
    profile::enable(false);
  }

  const double step_s = median(total), gemm_s = median(gemm_times);
  std::printf("trident_zero_grads_seconds=%.4f\n", median(zero));
  std::printf("trident_forward_seconds=%.4f\n", median(fwd));
  std::printf("trident_backward_seconds=%.4f\n", median(bwd));
  std::printf("trident_optimizer_seconds=%.4f\n", median(opt));
  std::printf("trident_gemm_gflops=%.2f\n", gemms.flops() / gemm_s * 1e-9);
  // The step's GEMM work over the whole step's time: what the step achieves end to end.
  std::printf("trident_step_effective_gflops=%.2f\n", gemms.flops() / step_s * 1e-9);
  if (o.profile_steps > 0) {
    // Self time per region per step, largest first; what no region covers is charged to
    // "(outside regions)" of its phase (host loops, copies, launch overhead).
    const double steps = static_cast<double>(o.profile_steps);
    std::map<std::string, double> covered;
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [key, val] : profile::self) {
      rows.emplace_back(val.first / steps,
                        "phase=" + key.first + " region=" + key.second +
                            " calls_per_step=" + std::to_string(val.second / o.profile_steps));
      covered[key.first] += val.first / steps;
    }
    for (const char* phase : {"zero_grads", "forward", "backward", "optimizer"})
      rows.emplace_back(
          prof_phase[phase] - covered[phase],
          std::string("phase=") + phase + " region=(outside regions) calls_per_step=0");
    std::sort(rows.rbegin(), rows.rend());
    const double prof_step = prof_phase["step"];
    std::printf("trident_profile_step_seconds=%.4f instrumented_steps=%d\n", prof_step,
                o.profile_steps);
    for (const char* phase : {"zero_grads", "forward", "backward", "optimizer"})
      std::printf("trident_profile_phase phase=%s seconds=%.4f share=%.3f\n", phase,
                  prof_phase[phase], prof_phase[phase] / prof_step);
    for (const auto& [sec, line] : rows)
      std::printf("trident_profile seconds=%.4f share=%.3f %s\n", sec, sec / prof_step,
                  line.c_str());
  }
  std::printf("trident_step_seconds=%.4f\n", step_s);
  std::printf("trident_gemm_seconds=%.4f\n", gemm_s);
  std::printf("trident_step_over_gemm=%.3f\n", median(pair_ratios));
  std::printf("trident_fastest_step_over_fastest_gemm=%.3f\n",
              *std::min_element(total.begin(), total.end()) /
                  *std::min_element(gemm_times.begin(), gemm_times.end()));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    Options o;
    int status = 2;
    if (!parse(argc, argv, o, status)) return status;
    return run(o);
  });
}
