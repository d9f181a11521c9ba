// Each kernel against a naive loop on random inputs, each backward against central finite
// differences of a random linear functional of its output, and the GPU shapes against the CPU ones.
// Buffers are host-accessible on every build (CUDA managed memory on GPU builds), so the same tests
// check the kernels on a device against host references.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/launch_profiler.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_graph.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/streaming.hpp"
#include "kernels/swiglu.hpp"
#include "test_space.hpp"

using namespace trident;
using namespace trident::kernels;

namespace {

// A buffer the host indexes and the kernels take as a window (Vec, Mat, IntVec).
template <class T, class Window, class ConstWindow>
class TestBuffer {
 public:
  TestBuffer(const char* label, size_t n) : view_(std::string(label), n) {}
  T& operator()(size_t i) const { return view_(i); }
  size_t extent(int) const { return view_.extent(0); }
  T* data() const { return view_.data(); }
  operator Window() const { return Window(view_.data(), view_.extent(0)); }
  operator ConstWindow() const { return ConstWindow(view_.data(), view_.extent(0)); }

 private:
  Kokkos::View<T*, Kokkos::LayoutRight, TestSpace> view_;
};
using TestBuf = TestBuffer<float, Vec, ConstVec>;
using TestInts = TestBuffer<int32_t, IntVec, ConstIntVec>;

Mat window(const TestBuf& b, size_t offset, size_t rows, size_t cols) {
  return Mat(b.data() + offset, rows, cols);
}

void fill(const TestBuf& b, float value) {
  for (size_t i = 0; i < b.extent(0); ++i) b(i) = value;
}

TestBuf random_view(size_t n, unsigned seed, float scale = 1.0f) {
  TestBuf v("r", n);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (size_t i = 0; i < n; ++i) v(i) = dist(gen);
  return v;
}

TestBuf copy_of(const TestBuf& v) {
  TestBuf c("c", v.extent(0));
  for (size_t i = 0; i < v.extent(0); ++i) c(i) = v(i);
  return c;
}

double dot(const TestBuf& a, const TestBuf& b) {
  double s = 0;
  for (size_t i = 0; i < a.extent(0); ++i) s += static_cast<double>(a(i)) * b(i);
  return s;
}

// Checks analytic[i] against (f(x + h e_i) - f(x - h e_i)) / 2h for every element of x.
// Float forward passes: h = 1e-2 keeps truncation error ~h^2 and rounding ~1e-7/h small.
void expect_matches_finite_differences(TestBuf x, const TestBuf& analytic,
                                       const std::function<double()>& f, double tol = 2e-2) {
  const float h = 1e-2f;
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < x.extent(0); ++i) {
    const float saved = x(i);
    x(i) = saved + h;
    const double fp = f();
    x(i) = saved - h;
    const double fm = f();
    x(i) = saved;
    const double numeric = (fp - fm) / (2.0 * h);
    max_abs = std::max(max_abs, std::abs(numeric));
    max_err = std::max(max_err, std::abs(numeric - analytic(i)));
  }
  EXPECT_LE(max_err, tol * std::max(max_abs, 1e-3))
      << "max |numeric - analytic| = " << max_err << ", max |numeric| = " << max_abs;
}

// The tests' execution space instance, made once Kokkos has started: one built at namespace scope
// would be constructed before main() initialises Kokkos, which a CUDA build refuses.
const Exec& exec() {
  static const Exec instance;
  return instance;
}

// The three cross-entropy reductions over one whole (unsplit) slice.
void ce_forward(const TestBuf& losses, const TestBuf& lse, const Mat& logits,
                const TestInts& targets, int valid) {
  const int N = static_cast<int>(logits.extent(0));
  TestBuf mx("max", N), sums("sums", N), tl("target_logit", N);
  cross_entropy_row_max(exec(), mx, logits, valid);
  cross_entropy_row_sums(exec(), sums, tl, logits, mx, targets, 0, valid);
  cross_entropy_losses(exec(), losses, lse, mx, sums, tl, targets);
  exec().fence();
}

}  // namespace

TEST(Kernels, LinearForwardMatchesNaiveLoop) {
  const int N = 7, IC = 5, OC = 6;
  TestBuf x = random_view(N * IC, 1), w = random_view(OC * IC, 2), b = random_view(OC, 3);
  TestBuf y("y", N * OC);
  linear_forward(exec(), window(y, 0, N, OC), window(x, 0, N, IC), window(w, 0, OC, IC), b);
  exec().fence();
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double ref = b(o);
      for (int i = 0; i < IC; ++i) ref += static_cast<double>(x(n * IC + i)) * w(o * IC + i);
      EXPECT_NEAR(y(n * OC + o), ref, 1e-5);
    }
}

TEST(Kernels, LinearBackwardMatchesFiniteDifferences) {
  const int N = 4, IC = 5, OC = 3;
  TestBuf x = random_view(N * IC, 4), w = random_view(OC * IC, 5), b = random_view(OC, 6);
  TestBuf r = random_view(N * OC, 7), y("y", N * OC);
  auto f = [&] {
    linear_forward(exec(), window(y, 0, N, OC), window(x, 0, N, IC), window(w, 0, OC, IC), b);
    exec().fence();
    return dot(y, r);
  };
  TestBuf dx("dx", N * IC), dw("dw", OC * IC), db("db", OC);
  linear_backward(exec(), window(dx, 0, N, IC), window(dw, 0, OC, IC), db, window(r, 0, N, OC),
                  window(x, 0, N, IC), window(w, 0, OC, IC), false);
  exec().fence();
  expect_matches_finite_differences(x, dx, f);
  expect_matches_finite_differences(w, dw, f);
  expect_matches_finite_differences(b, db, f);
}

TEST(Kernels, LinearBackwardAccumulatesWhenAsked) {
  const int N = 3, IC = 4, OC = 2;
  TestBuf x = random_view(N * IC, 8), w = random_view(OC * IC, 9), r = random_view(N * OC, 10);
  TestBuf dx1("dx1", N * IC), dw("dw", OC * IC), db("db", OC);
  linear_backward(exec(), window(dx1, 0, N, IC), window(dw, 0, OC, IC), db, window(r, 0, N, OC),
                  window(x, 0, N, IC), window(w, 0, OC, IC), false);
  TestBuf dx2 = copy_of(dx1);
  linear_backward(exec(), window(dx2, 0, N, IC), window(dw, 0, OC, IC), db, window(r, 0, N, OC),
                  window(x, 0, N, IC), window(w, 0, OC, IC), true);
  exec().fence();
  for (int i = 0; i < N * IC; ++i) EXPECT_NEAR(dx2(i), 2 * dx1(i), 1e-6);
}

TEST(Kernels, LayerNormForwardMatchesNaiveLoop) {
  const int N = 5, C = 8;
  TestBuf x = random_view(N * C, 11, 3.0f), w = random_view(C, 12), b = random_view(C, 13);
  TestBuf y("y", N * C), mean("m", N), rstd("s", N);
  layernorm_forward(exec(), window(y, 0, N, C), mean, rstd, window(x, 0, N, C), w, b);
  exec().fence();
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x(n * C + c);
    m /= C;
    for (int c = 0; c < C; ++c) v += (x(n * C + c) - m) * (x(n * C + c) - m);
    v /= C;
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(y(n * C + c), (x(n * C + c) - m) / std::sqrt(v + 1e-5) * w(c) + b(c), 1e-5);
  }
}

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 6;
  TestBuf x = random_view(N * C, 14), w = random_view(C, 15), b = random_view(C, 16);
  TestBuf r = random_view(N * C, 17), y("y", N * C), mean("m", N), rstd("s", N);
  auto f = [&] {
    layernorm_forward(exec(), window(y, 0, N, C), mean, rstd, window(x, 0, N, C), w, b);
    exec().fence();
    return dot(y, r);
  };
  f();
  TestBuf dx("dx", N * C), dw("dw", C), db("db", C);
  layernorm_backward(exec(), window(dx, 0, N, C), dw, db, window(r, 0, N, C), window(x, 0, N, C), w,
                     mean, rstd);
  exec().fence();
  expect_matches_finite_differences(x, dx, f);
  expect_matches_finite_differences(w, dw, f);
  expect_matches_finite_differences(b, db, f);
}

// RMSNorm in both kernel shapes: the formula (eps 1e-6, a Llama default) and both gradients.
TEST(Kernels, RmsNormMatchesFormulaAndFiniteDifferences) {
  const int N = 4, C = 7;
  const float eps = 1e-6f;
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    SCOPED_TRACE(shape == Shape::kGpu ? "gpu shape" : "cpu shape");
    TestBuf x = random_view(N * C, 41, 2.0f), w = random_view(C, 42), r = random_view(N * C, 43);
    TestBuf y("y", N * C), rstd("s", N);
    auto f = [&] {
      rmsnorm_forward(exec(), window(y, 0, N, C), rstd, window(x, 0, N, C), w, eps, shape);
      exec().fence();
      return dot(y, r);
    };
    f();
    for (int n = 0; n < N; ++n) {
      double squares = 0;
      for (int c = 0; c < C; ++c) squares += double(x(n * C + c)) * x(n * C + c);
      for (int c = 0; c < C; ++c)
        EXPECT_NEAR(y(n * C + c), x(n * C + c) / std::sqrt(squares / C + eps) * w(c), 1e-5);
    }
    TestBuf dx("dx", N * C), dw("dw", C);
    fill(dx, 0.0f);
    fill(dw, 0.0f);
    rmsnorm_backward_input(exec(), window(dx, 0, N, C), window(r, 0, N, C), window(x, 0, N, C), w,
                           rstd, shape);
    rmsnorm_backward_params(exec(), dw, window(r, 0, N, C), window(x, 0, N, C), rstd, shape);
    exec().fence();
    expect_matches_finite_differences(x, dx, f);
    expect_matches_finite_differences(w, dw, f);
  }
}

// RoPE: forward rotates each pair (i, i + HS/2) by t theta^(-2i/HS), the backward's -angle
// rotation undoes it exactly (up to rounding), and position 0 is left alone.
TEST(Kernels, RopeRotatesPairsAndItsTransposeUndoesIt) {
  const int B = 2, T = 5, heads = 3, HS = 4, W = heads * HS + 2, N = B * T;  // 2 columns untouched
  TestBuf table("table", T * HS);  // host-addressable (TestSpace)
  fill_rope_table(table.data(), T, HS, 10000.0);
  const TestBuf x0 = random_view(N * W, 44);
  TestBuf x = copy_of(x0);
  rope_rotate(exec(), window(x, 0, N, W), T, heads, HS, table, 1.0f);
  exec().fence();
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < HS / 2; ++i) {
        const double angle = (n % T) * std::pow(10000.0, -2.0 * i / HS);
        const double a = x0(n * W + h * HS + i), b = x0(n * W + h * HS + i + HS / 2);
        EXPECT_NEAR(x(n * W + h * HS + i), a * std::cos(angle) - b * std::sin(angle), 1e-6);
        EXPECT_NEAR(x(n * W + h * HS + i + HS / 2), b * std::cos(angle) + a * std::sin(angle),
                    1e-6);
      }
  for (int n = 0; n < N; ++n)
    for (int c = heads * HS; c < W; ++c) EXPECT_EQ(x(n * W + c), x0(n * W + c));
  rope_rotate(exec(), window(x, 0, N, W), T, heads, HS, table, -1.0f);
  exec().fence();
  for (int i = 0; i < N * W; ++i) EXPECT_NEAR(x(i), x0(i), 1e-6);
}

TEST(Kernels, SwigluMatchesFormulaAndFiniteDifferences) {
  const int N = 3, F = 5;
  TestBuf fc = random_view(N * 2 * F, 45, 2.0f), y("y", N * F), r = random_view(N * F, 46);
  auto f = [&] {
    swiglu_forward(exec(), window(y, 0, N, F), window(fc, 0, N, 2 * F));
    exec().fence();
    return dot(y, r);
  };
  f();
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < F; ++j) {
      const double gate = fc(n * 2 * F + j), up = fc(n * 2 * F + F + j);
      EXPECT_NEAR(y(n * F + j), gate / (1 + std::exp(-gate)) * up, 1e-5);
    }
  TestBuf dfc("dfc", N * 2 * F);
  swiglu_backward(exec(), window(dfc, 0, N, 2 * F), window(r, 0, N, F), window(fc, 0, N, 2 * F));
  exec().fence();
  expect_matches_finite_differences(fc, dfc, f);
}

TEST(Kernels, GeluMatchesFormulaAndFiniteDifferences) {
  const int n = 50;
  TestBuf x = random_view(n, 18, 2.0f), y("y", n), r = random_view(n, 19);
  auto f = [&] {
    gelu_forward(exec(), y, x);
    exec().fence();
    return dot(y, r);
  };
  f();
  for (int i = 0; i < n; ++i) {
    const double v = x(i);
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y(i), ref, 1e-6);
  }
  TestBuf dx("dx", n);
  gelu_backward(exec(), dx, x, r);
  exec().fence();
  expect_matches_finite_differences(x, dx, f);
}

namespace {

// visits(i) += 1 for every i the streamed loop hands its body (a free function: CUDA's device
// lambdas may not live in a test's private body).
void count_visits(const Vec& visits, const ConstVec& source, size_t n) {
  for_each_streamed(
      "visit", exec(), n, KOKKOS_LAMBDA(size_t i) { visits(i) += 1.0f + 0.0f * source(i); },
      source.data());
}

// The lane loops' arguments as functors callable on both sides (nvcc warns of a host lambda
// called from a host-device function).
struct RowTerm {
  const float* row;
  KOKKOS_INLINE_FUNCTION float operator()(int i) const { return row[i]; }
};
struct RecordStarts {
  int* starts;
  int* count;
  KOKKOS_INLINE_FUNCTION void operator()(int i) const { starts[(*count)++] = i; }
};

}  // namespace

// The streamed loop runs the body once per element whatever n is against its chunk (one partial
// chunk, exact chunks, prefetch spans that run past the end), and GELU over many chunks is still
// the formula element by element.
TEST(Kernels, StreamedLoopVisitsEveryElementOnce) {
  for (size_t n : {size_t{0}, size_t{1}, kStreamChunk - 1, kStreamChunk, kStreamChunk + 1,
                   kPrefetchAhead + 3 * kStreamChunk + 7}) {
    TestBuf visits("visits", n), source = random_view(n, 40);
    fill(visits, 0.0f);
    count_visits(visits, source, n);
    exec().fence();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(visits(i), 1.0f) << "n = " << n << ", i = " << i;
  }
  const size_t n = 5 * kPrefetchAhead + 11;
  TestBuf x = random_view(n, 41, 3.0f), y("y", n);
  gelu_forward(exec(), y, x);
  exec().fence();
  for (size_t i = 0; i < n; i += 97) {
    const double v = x(i);
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    ASSERT_NEAR(y(i), ref, 1e-6) << i;
  }
}

// A row kernel's prefetch hook sees the start of every full block of lanes, and the sums and
// maxima are the bits of the loops without it.
TEST(Kernels, LaneLoopsCallTheAheadHookPerFullBlock) {
  std::vector<float> row(3 * kmath::kLanes + 5);
  for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(0.37f * static_cast<float>(i));
  const int n = static_cast<int>(row.size());
  const RowTerm term{row.data()};
  std::vector<int> starts(8, -1);
  int count = 0;
  const float sum = kmath::lane_sum(n, term, RecordStarts{starts.data(), &count});
  EXPECT_EQ(sum, kmath::lane_sum(n, term));
  ASSERT_EQ(count, 3);
  EXPECT_EQ(starts[0], 0);
  EXPECT_EQ(starts[1], kmath::kLanes);
  EXPECT_EQ(starts[2], 2 * kmath::kLanes);
  count = 0;
  const float m = kmath::lane_max(n, term, -3.0e38f, RecordStarts{starts.data(), &count});
  EXPECT_EQ(m, kmath::lane_max(n, term, -3.0e38f));
  EXPECT_EQ(count, 3);
}

TEST(Kernels, ResidualAddsElementwise) {
  TestBuf a = random_view(10, 20), b = random_view(10, 21), out("o", 10);
  residual_forward(exec(), out, a, b);
  exec().fence();
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(out(i), a(i) + b(i));
}

TEST(Kernels, EmbeddingForwardAndBackward) {
  const int B = 2, T = 3, C = 4, V = 5, N = B * T;
  TestBuf wte = random_view(V * C, 22), wpe = random_view(T * C, 23), out("o", N * C);
  TestInts tokens("t", N);
  const int toks[N] = {1, 4, 1, 0, 3, 4};
  for (int n = 0; n < N; ++n) tokens(n) = toks[n];
  embedding_forward(exec(), window(out, 0, N, C), tokens, window(wte, 0, V, C),
                    window(wpe, 0, T, C), T, 0);
  exec().fence();
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      EXPECT_FLOAT_EQ(out(n * C + c), wte(toks[n] * C + c) + wpe((n % T) * C + c));
  TestBuf r = random_view(N * C, 24), dwte("dwte", V * C), dwpe("dwpe", T * C);
  embedding_backward(exec(), window(dwte, 0, V, C), window(dwpe, 0, T, C), window(r, 0, N, C),
                     tokens, T, 0);
  exec().fence();
  auto f = [&] {
    embedding_forward(exec(), window(out, 0, N, C), tokens, window(wte, 0, V, C),
                      window(wpe, 0, T, C), T, 0);
    exec().fence();
    return dot(out, r);
  };
  expect_matches_finite_differences(wte, dwte, f);
  expect_matches_finite_differences(wpe, dwpe, f);
}

// Shapes with one block of query rows, and with several and a partial last one (T = 70 against
// 32 query rows per block on host builds).
const AttentionShape kAttentionShapes[] = {{2, 5, 2, 3}, {1, 70, 2, 4}};
// Grouped-query shapes: 4 query heads on 2 key/value heads, 6 on 1 (multi-query).
const AttentionShape kGroupedShapes[] = {{2, 9, 4, 3, 2}, {1, 19, 6, 2, 1}};

// Columns of the packed q | k | v.
int qkv_width(const AttentionShape& s) {
  return (s.NH + 2 * s.kv_heads()) * s.HS;
}

// Which attention a test runs: this build's with the tiles asked for (attention.tile_rows and
// tile_keys; {0, 0}: its defaults), or one shape with the given tiles, small enough that a short
// sequence crosses several query blocks and key tiles, so that the online softmax rescales earlier
// tiles' output.
enum class AttentionPath { kBuild, kTiled, kBatched };
struct AttentionRun {
  AttentionPath kernel;
  AttentionTiles tiles;
};
const AttentionRun kBuildAttention{AttentionPath::kBuild, {0, 0}};

size_t scratch_elements(const AttentionRun& run, const AttentionShape& s) {
  if (run.kernel == AttentionPath::kBuild)
    return attention_scratch_elements(s.B, s.NH, s.HS, s.T, Precision::kFp32, run.tiles);
  return run.kernel == AttentionPath::kTiled
             ? attention_tiled_scratch(s.B, s.NH, s.HS, s.T, run.tiles, Precision::kFp32)
             : attention_batched_scratch(s.NH, s.HS, s.T, run.tiles, Precision::kFp32);
}

void run_attention_forward(const AttentionRun& run, const AttentionShape& s, const TestBuf& out,
                           const TestBuf& lse, const TestBuf& qkv) {
  const int C = s.NH * s.HS, N = s.B * s.T;
  TestBuf scratch("scratch", scratch_elements(run, s));
  fill(scratch, 7.0f);  // stale values: nothing is read before it is written
  const Mat o = window(out, 0, N, C), q = window(qkv, 0, N, qkv_width(s));
  if (run.kernel == AttentionPath::kBuild)
    attention_forward(exec(), o, lse, scratch, q, s, run.tiles);
#if !defined(KOKKOS_ENABLE_CUDA)
  if (run.kernel == AttentionPath::kTiled)
    attention_forward_tiled(exec(), o, lse, scratch, q, s, run.tiles);
#endif
  if (run.kernel == AttentionPath::kBatched)
    attention_forward_batched(exec(), o, lse, scratch, q, s, run.tiles);
  exec().fence();
}

void run_attention_backward(const AttentionRun& run, const AttentionShape& s, const TestBuf& dqkv,
                            const TestBuf& dout, const TestBuf& qkv, const TestBuf& out,
                            const TestBuf& lse) {
  const int C = s.NH * s.HS, N = s.B * s.T;
  TestBuf scratch("scratch", scratch_elements(run, s));
  fill(scratch, 7.0f);
  const Mat d = window(dqkv, 0, N, qkv_width(s)), g = window(dout, 0, N, C);
  const Mat q = window(qkv, 0, N, qkv_width(s)), o = window(out, 0, N, C);
  if (run.kernel == AttentionPath::kBuild)
    attention_backward(exec(), d, scratch, g, q, o, lse, s, run.tiles);
#if !defined(KOKKOS_ENABLE_CUDA)
  if (run.kernel == AttentionPath::kTiled)
    attention_backward_tiled(exec(), d, scratch, g, q, o, lse, s, run.tiles);
#endif
  if (run.kernel == AttentionPath::kBatched)
    attention_backward_batched(exec(), d, scratch, g, q, o, lse, s, run.tiles);
  exec().fence();
}

// This build's attention with its default tiles, with whole-sequence tiles (one block of one tile,
// the GPU's default up to T = 1024) and with small ones asked for at run time; and each shape
// with tiles smaller than the sequence (rows above, below and equal to the keys per tile, neither
// dividing T).
std::vector<AttentionRun> attention_runs() {
  std::vector<AttentionRun> runs{
      kBuildAttention, {AttentionPath::kBuild, {1024, 1024}}, {AttentionPath::kBuild, {3, 7}}};
  for (const AttentionTiles tiles :
       {AttentionTiles{4, 8}, AttentionTiles{8, 4}, AttentionTiles{5, 5}}) {
#if !defined(KOKKOS_ENABLE_CUDA)
    runs.push_back({AttentionPath::kTiled, tiles});
#endif
    runs.push_back({AttentionPath::kBatched, tiles});
  }
  return runs;
}

std::string describe(const AttentionRun& run, const AttentionShape& s) {
  const char* names[] = {"build", "tiled", "batched"};
  return std::string(names[static_cast<int>(run.kernel)]) + " tiles " +
         std::to_string(run.tiles.rows) + "x" + std::to_string(run.tiles.keys) +
         " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " KVH=" + std::to_string(s.kv_heads());
}

TEST(Kernels, AttentionForwardMatchesNaiveLoop) {
  for (const AttentionRun& run : attention_runs())
    for (const AttentionShape& s :
         {kAttentionShapes[0], kAttentionShapes[1], AttentionShape{2, 23, 3, 4}, kGroupedShapes[0],
          kGroupedShapes[1]}) {
      const int C = s.NH * s.HS, N = s.B * s.T, W = qkv_width(s), G = s.group();
      TestBuf qkv = random_view(N * W, 25), out("o", N * C), lse("lse", N * s.NH);
      fill(out, 7.0f);  // stale values: every output is written
      fill(lse, 7.0f);
      run_attention_forward(run, s, out, lse, qkv);
      // Query head h reads key/value head h / G.
      auto q = [&](int b, int t, int h, int i) { return qkv((b * s.T + t) * W + h * s.HS + i); };
      auto k = [&](int b, int t, int h, int i) {
        return qkv((b * s.T + t) * W + C + h / G * s.HS + i);
      };
      auto v = [&](int b, int t, int h, int i) {
        return qkv((b * s.T + t) * W + C + (s.kv_heads() + h / G) * s.HS + i);
      };
      for (int b = 0; b < s.B; ++b)
        for (int h = 0; h < s.NH; ++h)
          for (int t = 0; t < s.T; ++t) {
            std::vector<double> w(t + 1);
            double mx = -1e30, sum = 0;
            for (int t2 = 0; t2 <= t; ++t2) {
              double d = 0;
              for (int i = 0; i < s.HS; ++i) d += q(b, t, h, i) * k(b, t2, h, i);
              w[t2] = d / std::sqrt(s.HS);
              mx = std::max(mx, w[t2]);
            }
            for (auto& x : w) sum += (x = std::exp(x - mx));
            ASSERT_NEAR(lse((b * s.NH + h) * s.T + t), mx + std::log(sum),
                        2e-6 * (1 + std::fabs(mx)))
                << describe(run, s) << " t=" << t;
            for (int i = 0; i < s.HS; ++i) {
              double ref = 0;
              for (int t2 = 0; t2 <= t; ++t2) ref += w[t2] / sum * v(b, t2, h, i);
              ASSERT_NEAR(out((b * s.T + t) * C + h * s.HS + i), ref, 1e-5)
                  << describe(run, s) << " t=" << t;
            }
          }
    }
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) {
  for (const AttentionRun& run : attention_runs())
    for (const AttentionShape& s :
         {kAttentionShapes[0], AttentionShape{1, 19, 2, 3}, kGroupedShapes[0], kGroupedShapes[1]}) {
      const int C = s.NH * s.HS, N = s.B * s.T;
      TestBuf qkv = random_view(N * qkv_width(s), 26), out("o", N * C), lse("lse", N * s.NH);
      TestBuf r = random_view(N * C, 27);
      auto f = [&] {
        run_attention_forward(run, s, out, lse, qkv);
        return dot(out, r);
      };
      f();
      TestBuf dqkv("dqkv", N * qkv_width(s));
      fill(dqkv, 7.0f);  // stale values: the gradient is overwritten, not added to
      run_attention_backward(run, s, dqkv, r, qkv, out, lse);
      SCOPED_TRACE(describe(run, s));
      expect_matches_finite_differences(qkv, dqkv, f);
    }
}

// The GPU's shape (strided-batched GEMMs over the heads; here on CBLAS with the column-major calls
// cuBLAS gets) computes what the host's per-(sequence, head) shape does, whatever the tiles of
// either: tiling changes only the order of the sums.
TEST(Kernels, AttentionShapesAgree) {
  for (const AttentionShape& s : {AttentionShape{3, 37, 3, 4}, AttentionShape{2, 37, 6, 4, 2}}) {
    const int C = s.NH * s.HS, N = s.B * s.T, W = qkv_width(s);
    const TestBuf qkv = random_view(N * W, 30), dout = random_view(N * C, 31);
    TestBuf out("o", N * C), lse("lse", N * s.NH), dqkv("d", N * W);
    run_attention_forward(kBuildAttention, s, out, lse, qkv);
    run_attention_backward(kBuildAttention, s, dqkv, dout, qkv, out, lse);
    for (const AttentionRun& run : attention_runs()) {
      TestBuf out_b("ob", N * C), lse_b("lb", N * s.NH), dqkv_b("db", N * W);
      for (const TestBuf& v : {out_b, lse_b, dqkv_b}) fill(v, 7.0f);  // stale
      run_attention_forward(run, s, out_b, lse_b, qkv);
      run_attention_backward(run, s, dqkv_b, dout, qkv, out_b, lse_b);
      for (int i = 0; i < N * s.NH; ++i) ASSERT_NEAR(lse_b(i), lse(i), 1e-5) << describe(run, s);
      for (int i = 0; i < N * C; ++i) ASSERT_NEAR(out_b(i), out(i), 1e-5) << describe(run, s);
      for (int i = 0; i < N * W; ++i)
        ASSERT_NEAR(dqkv_b(i), dqkv(i), 1e-5 * (1.0 + std::fabs(dqkv(i)))) << describe(run, s);
    }
  }
}

// The graphs that GPU builds hand to cuDNN's fused attention compute what the tiled attention
// computes, forward and backward, for multi-head and grouped-query shapes with rows wider than
// their heads (padding after qkv and out, as a tensor-parallel slice's views have).
TEST(Kernels, AttentionGraphsMatchTheTiledAttention) {
  for (const AttentionShape& s :
       {kAttentionShapes[0], AttentionShape{2, 37, 3, 4}, kGroupedShapes[0], kGroupedShapes[1]}) {
    const int C = s.NH * s.HS, N = s.B * s.T, W = qkv_width(s);
    const TestBuf qkv = random_view(N * W, 40), dout = random_view(N * C, 41);
    TestBuf out("o", N * C), lse("lse", N * s.NH), dqkv("d", N * W);
    run_attention_forward(kBuildAttention, s, out, lse, qkv);
    run_attention_backward(kBuildAttention, s, dqkv, dout, qkv, out, lse);
    const int pad = 3;  // rows of the graph's own copies are `pad` elements wider
    const AttentionGraphShape g{s.B,     s.T,     s.NH,    s.kv_heads(), s.HS,
                                W + pad, C + pad, C + pad, W + pad};
    std::vector<float> qkv_g(size_t(N) * (W + pad), 0.0f), dout_g(size_t(N) * (C + pad), 0.0f);
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < W; ++c) qkv_g[size_t(n) * (W + pad) + c] = qkv(size_t(n) * W + c);
      for (int c = 0; c < C; ++c) dout_g[size_t(n) * (C + pad) + c] = dout(size_t(n) * C + c);
    }
    std::vector<float> out_g(size_t(N) * (C + pad), 7.0f), stats(size_t(N) * s.NH, 7.0f);
    std::vector<float> dqkv_g(size_t(N) * (W + pad), 7.0f), row_dot(size_t(N) * s.NH, 7.0f);
    std::vector<float> dq_sums(size_t(N) * C, 0.0f);
    float* const q = qkv_g.data();
    float* const dq = dqkv_g.data();
    const int k_col = C, v_col = C + s.kv_heads() * s.HS;
    evaluate_attention_graph(attention_forward_graph(g), {{kUidQ, q},
                                                          {kUidK, q + k_col},
                                                          {kUidV, q + v_col},
                                                          {kUidOut, out_g.data()},
                                                          {kUidStats, stats.data()}});
    evaluate_attention_graph(attention_backward_graph(g), {{kUidQ, q},
                                                           {kUidK, q + k_col},
                                                           {kUidV, q + v_col},
                                                           {kUidOut, out_g.data()},
                                                           {kUidStats, stats.data()},
                                                           {kUidDout, dout_g.data()},
                                                           {kUidRowDot, row_dot.data()},
                                                           {kUidDqSums, dq_sums.data()},
                                                           {kUidDq, dq},
                                                           {kUidDk, dq + k_col},
                                                           {kUidDv, dq + v_col}});
    const std::string what = describe(kBuildAttention, s);
    for (int i = 0; i < N * s.NH; ++i) ASSERT_NEAR(stats[i], lse(i), 1e-5) << what;
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c)
        ASSERT_NEAR(out_g[size_t(n) * (C + pad) + c], out(size_t(n) * C + c), 1e-5) << what;
      for (int c = 0; c < W; ++c) {
        const float want = dqkv(size_t(n) * W + c);
        ASSERT_NEAR(dqkv_g[size_t(n) * (W + pad) + c], want, 1e-5 * (1.0 + std::fabs(want)))
            << what << " row " << n << " column " << c;
      }
      for (int c = W; c < W + pad; ++c)  // the padding is not written
        ASSERT_EQ(dqkv_g[size_t(n) * (W + pad) + c], 7.0f) << what;
    }
  }
}

// A graph names every tensor a caller binds, and reshapes only transpose: what cuDNN's
// descriptors are built from.
TEST(Kernels, AttentionGraphsBindTheirTensorsByUid) {
  const AttentionGraphShape g{2, 16, 4, 2, 8, 128, 32, 32, 128};
  const AttentionGraph forward = attention_forward_graph(g), backward = attention_backward_graph(g);
  for (const int64_t uid : {kUidQ, kUidK, kUidV, kUidOut, kUidStats})
    EXPECT_FALSE(forward.tensor(uid).is_virtual) << uid;
  for (const int64_t uid : {kUidDout, kUidDq, kUidDk, kUidDv, kUidRowDot, kUidDqSums})
    EXPECT_FALSE(backward.tensor(uid).is_virtual) << uid;
  EXPECT_THROW(forward.tensor(kUidDq), std::logic_error);
  // cuDNN binds memory by uid: no two tensors of a graph share one (grouped or not).
  for (const AttentionGraphShape& shape : {g, AttentionGraphShape{2, 16, 4, 4, 8, 96, 32, 32, 96}})
    for (const AttentionGraph& graph :
         {attention_forward_graph(shape), attention_backward_graph(shape)}) {
      std::set<int64_t> uids;
      for (const GraphTensor& t : graph.tensors)
        EXPECT_TRUE(uids.insert(t.uid).second) << t.name << " repeats uid " << t.uid;
    }
  // k (and v in backward) as cuDNN takes them: transposed through their strides.
  EXPECT_EQ(forward.tensor(kUidK).dims, (std::array<int64_t, 4>{2, 2, 8, 16}));
  EXPECT_EQ(forward.tensor(kUidK).strides, (std::array<int64_t, 4>{16 * 128, 8, 1, 128}));
  EXPECT_EQ(backward.tensor(kUidV).strides, (std::array<int64_t, 4>{16 * 128, 8, 1, 128}));
  EXPECT_EQ(forward.tensor(kUidV).strides, (std::array<int64_t, 4>{16 * 128, 8, 128, 1}));
  EXPECT_EQ(forward.tensor(kUidStats).strides, (std::array<int64_t, 4>{4 * 16, 16, 1, 1}));
  EXPECT_TRUE(forward.tensor(kUidScale).by_value);
  EXPECT_FLOAT_EQ(forward.tensor(kUidScale).value, 1.0f / std::sqrt(8.0f));
  EXPECT_THROW(attention_forward_graph({2, 16, 4, 3, 8, 128, 32, 32, 128}),
               std::invalid_argument);  // 3 key/value heads cannot serve 4 query heads
}

TEST(Kernels, CrossEntropyMatchesNaiveLoopAndFiniteDifferences) {
  const int N = 4, V = 7;
  TestBuf logits = random_view(N * V, 28, 2.0f), losses("l", N), lse("lse", N);
  TestInts targets("t", N);
  const int tg[N] = {3, 0, 6, -1};  // -1: ignored position
  for (int n = 0; n < N; ++n) targets(n) = tg[n];
  auto f = [&] {
    ce_forward(losses, lse, window(logits, 0, N, V), targets, V);
    exec().fence();
    double s = 0;
    for (int n = 0; n < N; ++n) s += losses(n);
    return s / 3.0;
  };
  f();
  for (int n = 0; n < N; ++n) {
    double mx = -1e30, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max<double>(mx, logits(n * V + v));
    for (int v = 0; v < V; ++v) sum += std::exp(logits(n * V + v) - mx);
    const double ref = tg[n] < 0 ? 0.0 : mx + std::log(sum) - logits(n * V + tg[n]);
    EXPECT_NEAR(losses(n), ref, 1e-5);
  }
  TestBuf saved = copy_of(logits), dlogits("d", N * V);
  cross_entropy_backward(exec(), window(dlogits, 0, N, V), window(logits, 0, N, V), lse, targets, 0,
                         V, 1.0f / 3.0f);
  exec().fence();
  expect_matches_finite_differences(logits, dlogits, f);
  for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits(3 * V + v), 0.0f);  // ignored row
  // In place, as the model uses it.
  cross_entropy_backward(exec(), window(saved, 0, N, V), window(saved, 0, N, V), lse, targets, 0, V,
                         1.0f / 3.0f);
  exec().fence();
  for (int i = 0; i < N * V; ++i) EXPECT_FLOAT_EQ(saved(i), dlogits(i));
}

TEST(Kernels, CrossEntropyIgnoresPaddedVocabularyColumns) {
  const int N = 2, V = 3, VP = 5;
  TestBuf logits = random_view(N * VP, 29), losses("l", N), lse("lse", N), d("d", N * VP);
  TestInts targets("t", N);
  targets(0) = 1;
  targets(1) = 2;
  ce_forward(losses, lse, window(logits, 0, N, VP), targets, V);
  TestBuf narrow("n", N * V);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) narrow(n * V + v) = logits(n * VP + v);
  TestBuf losses2("l2", N), lse2("lse2", N);
  ce_forward(losses2, lse2, window(narrow, 0, N, V), targets, V);
  cross_entropy_backward(exec(), window(d, 0, N, VP), window(logits, 0, N, VP), lse, targets, 0, V,
                         1.0f);
  exec().fence();
  for (int n = 0; n < N; ++n) {
    EXPECT_FLOAT_EQ(losses(n), losses2(n));
    EXPECT_EQ(d(n * VP + 3), 0.0f);
    EXPECT_EQ(d(n * VP + 4), 0.0f);
  }
}

TEST(Kernels, AdamWMatchesReferenceUpdate) {
  const int n = 16;
  TestBuf p = random_view(n, 30), g = random_view(n, 31), m = random_view(n, 32, 0.1f);
  TestBuf v("v", n);
  for (int i = 0; i < n; ++i) v(i) = 0.01f * (i + 1);
  TestBuf p0 = copy_of(p), m0 = copy_of(m), v0 = copy_of(v);
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  adamw_update(exec(), p, m, v, g, h, 0.5f);
  exec().fence();
  for (int i = 0; i < n; ++i) {
    // PyTorch's AdamW: decay first, then the bias-corrected Adam step.
    const double gi = 0.5 * g(i);
    const double mi = 0.9 * m0(i) + 0.1 * gi, vi = 0.95 * v0(i) + 0.05 * gi * gi;
    const double bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.95, 3);
    const double ref = p0(i) * (1 - 1e-2 * 0.1) - 1e-2 / bc1 * mi / (std::sqrt(vi / bc2) + 1e-8);
    EXPECT_NEAR(m(i), mi, 1e-6);
    EXPECT_NEAR(v(i), vi, 1e-6);
    EXPECT_NEAR(p(i), ref, 1e-5);
  }
}

// The fused update on fp16's master weights gives the plain update's bits, and writes each new
// value rounded to fp16 into the compute copy (what a separate rounding pass wrote before).
TEST(Kernels, AdamWWithRoundedCopyIsThePlainUpdateThenRounding) {
  const int n = 37;
  const AdamWHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
  TestBuf p = random_view(n, 50), g = random_view(n, 51), m = random_view(n, 52, 0.1f);
  TestBuf v("v", n);
  for (int i = 0; i < n; ++i) v(i) = 0.02f * (i + 1);
  TestBuf p2 = copy_of(p), m2 = copy_of(m), v2 = copy_of(v);
  TestBuffer<uint16_t, HalfVec, ConstHalfVec> rounded("rounded", n);
  adamw_update(exec(), p, m, v, g, h, 0.7f);
  adamw_update(exec(), p2, m2, v2, g, h, 0.7f, rounded);
  exec().fence();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(float_bits(p2(i)), float_bits(p(i))) << i;
    EXPECT_EQ(float_bits(m2(i)), float_bits(m(i))) << i;
    EXPECT_EQ(float_bits(v2(i)), float_bits(v(i))) << i;
    EXPECT_EQ(rounded(i), to_fp16(p(i))) << i;
  }
}

// bf16's split master weights: joined, updated and split again, over more than one CPU block,
// they hold the bits the plain fp32 update computes, and the compute copy is their upper half.
TEST(Kernels, AdamWOnSplitMasterWeightsIsThePlainFp32Update) {
  const int n = static_cast<int>(2 * kAdamWBlock + 77);
  const AdamWHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
  TestBuf p = random_view(n, 60), g = random_view(n, 61), m = random_view(n, 62, 0.1f);
  TestBuf v("v", n);
  for (int i = 0; i < n; ++i) v(i) = 0.02f * (i % 50 + 1);
  TestBuf m2 = copy_of(m), v2 = copy_of(v);
  TestBuffer<uint16_t, HalfVec, ConstHalfVec> high("high", n), low("low", n);
  for (int i = 0; i < n; ++i) {
    high(i) = bf16_high(p(i));
    low(i) = bf16_low(p(i), high(i));
  }
  adamw_update(exec(), p, m, v, g, h, 0.7f);
  adamw_update_split(exec(), high, low, m2, v2, g, h, 0.7f);
  exec().fence();
  int changed = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(float_bits(join_bf16(high(i), low(i))), float_bits(p(i))) << i;
    EXPECT_EQ(high(i), bf16_high(p(i))) << i;
    EXPECT_EQ(float_bits(m2(i)), float_bits(m(i))) << i;
    EXPECT_EQ(float_bits(v2(i)), float_bits(v(i))) << i;
    changed += low(i) != 0;
  }
  EXPECT_GT(changed, n / 2);  // the low halves carry the bits bf16 drops
}

TEST(Kernels, SumOfSquares) {
  TestBuf x = random_view(100, 33);
  // Float partial sums over 16-element chunks, accumulated in double: ~1e-7 relative at worst.
  EXPECT_NEAR(sum_of_squares(exec(), x), dot(x, x), 1e-6 * dot(x, x));
}

// The norm's batched squares (one wait per step on GPUs) are the bits of a loop of
// sum_of_squares calls in either shape, an empty vector adds nothing, add_to() empties the queue,
// and queuing past the slots made is refused.
TEST(Kernels, SquareSumsAreTheBitsOfOneSumOfSquaresPerVector) {
  const TestBuf a = random_view(1000, 41), b = random_view(37, 42), c = random_view(5000, 43);
  const TestBuf empty("empty", 0);
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    SquareSums sums(3, shape);
    double batched = 0.5, looped = 0.5;
    for (const TestBuf* x : {&a, &empty, &b, &c}) {
      sums.queue(exec(), *x);
      looped += sum_of_squares(exec(), *x, shape);
    }
    sums.add_to(exec(), batched);
    EXPECT_EQ(batched, looped) << (shape == Shape::kGpu ? "gpu" : "cpu") << " shape";
    double again = 0.0;
    sums.add_to(exec(), again);
    EXPECT_EQ(again, 0.0);
    sums.queue(exec(), a);
    sums.add_to(exec(), again);
    EXPECT_EQ(again, sum_of_squares(exec(), a, shape));
  }
  SquareSums one_slot(1, Shape::kGpu);
  one_slot.queue(exec(), a);
  EXPECT_THROW(one_slot.queue(exec(), b), std::logic_error);
}

// The clip on the device: SquareSums leaves add_to()'s bits there (0 + each vector's sum, in
// order) in either shape, a round that queues other vectors as well, and clip_scale computes the
// norm and AdamW's scale with the host's arithmetic, bit for bit: clipped, unclipped, and with
// clipping off (max_norm 0).
TEST(Kernels, ClipOnTheDeviceIsTheHostsBits) {
  const TestBuf a = random_view(150001, 47), b = random_view(37, 48), c = random_view(5000, 49);
  const Kokkos::View<double, MemSpace> total("total"), norm("norm");
  const Kokkos::View<float, MemSpace> scale("scale");
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    SquareSums sums(3, shape);
    for (const std::vector<const TestBuf*>& round :
         {std::vector<const TestBuf*>{&a, &b, &c}, std::vector<const TestBuf*>{&c, &a}}) {
      double on_host = 0.0;
      for (const TestBuf* x : round) sums.queue(exec(), *x);
      sums.add_to(exec(), on_host);
      for (const TestBuf* x : round) sums.queue(exec(), *x);
      sums.sum_on_device(exec(), total);
      double on_device = 0.0;
      Kokkos::deep_copy(on_device, total);
      EXPECT_EQ(on_device, on_host) << (shape == Shape::kGpu ? "gpu" : "cpu") << " shape";
      for (const double max_norm : {0.0, 1.0, 1e9}) {
        const double grad_scale = 0.37;
        clip_scale(exec(), total, grad_scale, max_norm, norm, scale);
        double device_norm = 0.0;
        float device_scale = 0.0f;
        Kokkos::deep_copy(device_norm, norm);
        Kokkos::deep_copy(device_scale, scale);
        const double host_norm = grad_scale * std::sqrt(on_host);
        const float host_scale = static_cast<float>(
            grad_scale *
            (max_norm > 0 && host_norm > max_norm ? max_norm / (host_norm + 1e-6) : 1.0));
        EXPECT_EQ(device_norm, host_norm);
        EXPECT_EQ(device_scale, host_scale) << "max_norm " << max_norm;
      }
    }
  }
}

// The GPU shape sums every queued vector in one launch, in chunks that a long vector spans
// several of, and agrees with the CPU shape's sums (whose float lanes keep ~1e-7 relative); a
// round that queues other vectors uploads its own chunk table.
TEST(Kernels, SquareSumsOnGpusAreOneLaunch) {
  const TestBuf a = random_view(150001, 44), b = random_view(3, 45), c = random_view(65536, 46);
  for (int round = 0; round < 3; ++round) {
    SquareSums gpu(3, Shape::kGpu), cpu(3, Shape::kCpu);
    const std::vector<const TestBuf*> vectors =
        round == 2 ? std::vector<const TestBuf*>{&c, &a} : std::vector<const TestBuf*>{&a, &b, &c};
    for (const TestBuf* x : vectors) {
      gpu.queue(exec(), *x);
      cpu.queue(exec(), *x);
    }
    double on_gpu = 0.0, on_cpu = 0.0;
    LaunchProfiler profiler;
    profiler.start();
    gpu.add_to(exec(), on_gpu);
    profiler.stop();
    cpu.add_to(exec(), on_cpu);
    EXPECT_NEAR(on_gpu, on_cpu, 1e-6 * on_cpu) << "round " << round;
    int64_t launches = 0;
    for (const LaunchRow& r : profiler.rows())
      if (r.kind == LaunchKind::kKernel) launches += r.calls;
    EXPECT_EQ(launches, 1) << "round " << round;
  }
}

TEST(Kernels, VocabularySlicesCombineToTheWholeCrossEntropy) {
  // Two tp ranks hold columns [0, 4) and [4, 7) (+1 padding) of a V = 7 vocabulary; combining
  // their reductions as the all-reduces do (max, then sums) gives the unsplit loss and gradient.
  const int N = 3, V = 7, half = 4;
  TestBuf logits = random_view(N * V, 40, 2.0f), losses("l", N), lse("lse", N);
  TestInts targets("t", N);
  targets(0) = 1;
  targets(1) = 5;
  targets(2) = 6;
  ce_forward(losses, lse, window(logits, 0, N, V), targets, V);
  TestBuf slices[2] = {TestBuf("s0", N * half), TestBuf("s1", N * half)};
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) slices[v / half](n * half + v % half) = logits(n * V + v);
  const int start[2] = {0, half}, valid[2] = {half, V - half};
  TestBuf mx[2] = {TestBuf("m0", N), TestBuf("m1", N)},
          sums[2] = {TestBuf("a", N), TestBuf("b", N)};
  TestBuf tl[2] = {TestBuf("c", N), TestBuf("d", N)};
  for (int r = 0; r < 2; ++r)
    cross_entropy_row_max(exec(), mx[r], window(slices[r], 0, N, half), valid[r]);
  exec().fence();
  TestBuf gmax("gmax", N), gsum("gsum", N), gtl("gtl", N), l2("l2", N), lse2("lse2", N);
  for (int n = 0; n < N; ++n) gmax(n) = std::max(mx[0](n), mx[1](n));
  for (int r = 0; r < 2; ++r)
    cross_entropy_row_sums(exec(), sums[r], tl[r], window(slices[r], 0, N, half), gmax, targets,
                           start[r], valid[r]);
  exec().fence();
  for (int n = 0; n < N; ++n) {
    gsum(n) = sums[0](n) + sums[1](n);
    gtl(n) = tl[0](n) + tl[1](n);
  }
  cross_entropy_losses(exec(), l2, lse2, gmax, gsum, gtl, targets);
  TestBuf d_whole("dw", N * V);
  cross_entropy_backward(exec(), window(d_whole, 0, N, V), window(logits, 0, N, V), lse, targets, 0,
                         V, 0.5f);
  TestBuf d_slice[2] = {TestBuf("d0", N * half), TestBuf("d1", N * half)};
  for (int r = 0; r < 2; ++r)
    cross_entropy_backward(exec(), window(d_slice[r], 0, N, half), window(slices[r], 0, N, half),
                           lse2, targets, start[r], valid[r], 0.5f);
  exec().fence();
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(l2(n), losses(n), 1e-5);
    for (int v = 0; v < V; ++v)
      EXPECT_NEAR(d_slice[v / half](n * half + v % half), d_whole(n * V + v), 1e-6);
    EXPECT_EQ(d_slice[1](n * half + 3), 0.0f);  // padding column
  }
}

TEST(Kernels, EmbeddingVocabularySliceHoldsOnlyItsTokens) {
  const int T = 2, C = 3, N = 4, rows = 3, start = 3;  // this slice holds tokens 3, 4, 5
  TestBuf wte = random_view(rows * C, 41), out("o", N * C), dwte("dwte", rows * C);
  TestBuf dwpe("dwpe", T * C), r = random_view(N * C, 42);
  TestInts tokens("t", N);
  const int toks[N] = {0, 4, 5, 2};
  for (int n = 0; n < N; ++n) tokens(n) = toks[n];
  embedding_forward(exec(), window(out, 0, N, C), tokens, window(wte, 0, rows, C), ConstMat(), T,
                    start);
  embedding_backward(exec(), window(dwte, 0, rows, C), window(dwpe, 0, T, C), window(r, 0, N, C),
                     tokens, T, start);
  exec().fence();
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const bool held = toks[n] >= start && toks[n] < start + rows;
      EXPECT_EQ(out(n * C + c), held ? wte((toks[n] - start) * C + c) : 0.0f);
    }
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dwte(0 * C + c), 0.0f);  // token 3 never seen
    EXPECT_FLOAT_EQ(dwte(1 * C + c), r(1 * C + c));
    EXPECT_FLOAT_EQ(dwte(2 * C + c), r(2 * C + c));
  }
}

namespace {

// Every kernel that has a CPU and a GPU shape, run in one shape on the same inputs: rows and
// columns that fill no team, lane block or vocabulary block evenly, a vocabulary slice with padding
// columns, targets outside the slice and an ignored position.
struct ShapeRun {
  std::vector<std::pair<std::string, TestBuf>> outputs;
  double squares = 0.0;
};

ShapeRun run_shaped_kernels(Shape shape) {
  // C and OC above kmath::kHostColumnBlock: the host column sums run a full block and a partial
  // one.
  const int N = 37, C = 83, OC = 70, T = 8, width = 61, valid = 58, start = 5, rows = 29;
  const TestBuf x = random_view(N * C, 50, 2.0f), w = random_view(C, 51), b = random_view(C, 52);
  const TestBuf dout = random_view(N * C, 53), lw = random_view(OC * C, 54);
  const TestBuf lb = random_view(OC, 55), ldout = random_view(N * OC, 56);
  const TestBuf logits = random_view(N * width, 57, 3.0f), wte = random_view(rows * C, 58);
  const TestBuf wpe = random_view(T * C, 59);
  TestInts targets("targets", N), tokens("tokens", N);
  std::mt19937 gen(60);
  for (int n = 0; n < N; ++n) {
    targets(n) = n == 3 ? -1 : static_cast<int>(gen() % 70);
    tokens(n) = static_cast<int>(gen() % 40);
  }
  ShapeRun run;
  auto out = [&](const char* name, size_t n, bool stale = false) {
    TestBuf buf = stale ? random_view(n, 61) : TestBuf(name, n);  // stale: kernels add to it
    run.outputs.emplace_back(name, buf);
    return buf;
  };
  const TestBuf y = out("ln_out", N * C), mean = out("ln_mean", N), rstd = out("ln_rstd", N);
  const TestBuf dx = out("ln_dinp", N * C, true), dw = out("ln_dweight", C, true);
  const TestBuf db = out("ln_dbias", C, true);
  layernorm_forward(exec(), window(y, 0, N, C), mean, rstd, window(x, 0, N, C), w, b, shape);
  layernorm_backward(exec(), window(dx, 0, N, C), dw, db, window(dout, 0, N, C), window(x, 0, N, C),
                     w, mean, rstd, shape);

  const TestBuf ly = out("linear_out", N * OC), ldx = out("linear_dinp", N * C);
  const TestBuf ldw = out("linear_dweight", OC * C, true), ldb = out("linear_dbias", OC, true);
  linear_forward(exec(), window(ly, 0, N, OC), window(x, 0, N, C), window(lw, 0, OC, C), lb, shape);
  linear_backward(exec(), window(ldx, 0, N, C), window(ldw, 0, OC, C), ldb, window(ldout, 0, N, OC),
                  window(x, 0, N, C), window(lw, 0, OC, C), false, shape);

  const TestBuf mx = out("ce_max", N), sums = out("ce_sums", N), tl = out("ce_target_logit", N);
  const TestBuf losses = out("ce_losses", N), lse = out("ce_lse", N);
  const TestBuf dlogits = out("ce_dlogits", N * width, true);
  cross_entropy_row_max(exec(), mx, window(logits, 0, N, width), valid, shape);
  cross_entropy_row_sums(exec(), sums, tl, window(logits, 0, N, width), mx, targets, start, valid,
                         shape);
  cross_entropy_losses(exec(), losses, lse, mx, sums, tl, targets);
  cross_entropy_backward(exec(), window(dlogits, 0, N, width), window(logits, 0, N, width), lse,
                         targets, start, valid, 0.25f, shape);

  const TestBuf emb = out("embedding_out", N * C);
  const TestBuf dwte = out("embedding_dwte", rows * C, true);
  const TestBuf dwpe = out("embedding_dwpe", T * C, true);
  embedding_forward(exec(), window(emb, 0, N, C), tokens, window(wte, 0, rows, C),
                    window(wpe, 0, T, C), T, start, shape);
  embedding_backward(exec(), window(dwte, 0, rows, C), window(dwpe, 0, T, C), window(dout, 0, N, C),
                     tokens, T, start, shape);
  run.squares = sum_of_squares(exec(), logits, shape);
  exec().fence();
  return run;
}

}  // namespace

TEST(Kernels, GpuShapesMatchCpuShapes) {
  const ShapeRun cpu = run_shaped_kernels(Shape::kCpu), gpu = run_shaped_kernels(Shape::kGpu);
  ASSERT_EQ(cpu.outputs.size(), gpu.outputs.size());
  for (size_t k = 0; k < cpu.outputs.size(); ++k) {
    const std::string& name = cpu.outputs[k].first;
    const TestBuf &want = cpu.outputs[k].second, &got = gpu.outputs[k].second;
    // The embedding adds its terms in the same order in both shapes; the rest sum in other orders.
    const bool same_bits = name.rfind("embedding", 0) == 0;
    for (size_t i = 0; i < want.extent(0); ++i) {
      if (same_bits)
        ASSERT_EQ(got(i), want(i)) << name << " i=" << i;
      else
        ASSERT_NEAR(got(i), want(i), 1e-5 * (1.0 + std::fabs(want(i)))) << name << " i=" << i;
    }
  }
  EXPECT_NEAR(gpu.squares, cpu.squares, 1e-6 * cpu.squares);
}

// The GPU shape's column sums run over a 2-D grid: row blocks of kColumnRowBlock rows write their
// partial sums, which a second pass adds in block order. For the bias, LayerNorm and RMSNorm
// gradients they give the CPU shape's sums whatever the grid (every row block, two, or one when no
// partials are given), the same bits run after run for a given grid, and the full grid writes its
// partials.
TEST(Kernels, ColumnSumsOverATwoDimensionalGrid) {
  const int N = 1000, C = 70, OC = 45;  // four row blocks of 256 rows, the last one short
  const TestBuf x = random_view(N * C, 70, 2.0f), w = random_view(C, 71), b = random_view(C, 72);
  const TestBuf dout = random_view(N * C, 73), ldout = random_view(N * OC, 74);
  TestBuf y("y", N * C), mean("mean", N), rstd("rstd", N);
  layernorm_forward(exec(), window(y, 0, N, C), mean, rstd, window(x, 0, N, C), w, b, Shape::kCpu);
  exec().fence();
  struct Sums {
    std::vector<float> ln_dw, ln_db, rms_dw, bias;
  };
  const auto run = [&](Shape shape, const TestBuf& partials) {
    TestBuf dw("dw", C), db("db", C), rdw("rdw", C), dbias("dbias", OC);
    const Vec scratch = partials;
    layernorm_backward_params(exec(), dw, db, window(dout, 0, N, C), window(x, 0, N, C), mean, rstd,
                              shape, scratch);
    rmsnorm_backward_params(exec(), rdw, window(dout, 0, N, C), window(x, 0, N, C), rstd, shape,
                            scratch);
    linear_backward_weight(exec(), Mat(), dbias, window(ldout, 0, N, OC), window(x, 0, N, C), true,
                           shape, scratch);
    exec().fence();
    const auto host = [](const TestBuf& v) {
      return std::vector<float>(v.data(), v.data() + v.extent(0));
    };
    return Sums{host(dw), host(db), host(rdw), host(dbias)};
  };
  const Sums cpu = run(Shape::kCpu, TestBuf("none", 0));
  const size_t full = column_partials_elements(2, N, std::max(C, OC));
  ASSERT_EQ(full, 2u * 4 * 70);
  TestBuf partials("partials", full);
  fill(partials, -7.0f);
  const Sums grid = run(Shape::kGpu, partials);
  size_t written = 0;
  for (size_t i = 0; i < full; ++i) written += partials(i) != -7.0f;
  EXPECT_GE(written, 2u * 4 * C) << "the full grid left its partials unwritten";
  const Sums again = run(Shape::kGpu, partials);
  EXPECT_EQ(grid.ln_dw, again.ln_dw);
  EXPECT_EQ(grid.ln_db, again.ln_db);
  EXPECT_EQ(grid.rms_dw, again.rms_dw);
  EXPECT_EQ(grid.bias, again.bias);
  const Sums two_blocks = run(Shape::kGpu, TestBuf("two", 2 * 2 * std::max(C, OC)));
  const Sums one_block = run(Shape::kGpu, TestBuf("none", 0));
  for (const Sums* s : {&grid, &two_blocks, &one_block}) {
    const auto near = [](const std::vector<float>& got, const std::vector<float>& want,
                         const char* name) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i]))) << name << " i=" << i;
    };
    near(s->ln_dw, cpu.ln_dw, "layernorm dweight");
    near(s->ln_db, cpu.ln_db, "layernorm dbias");
    near(s->rms_dw, cpu.rms_dw, "rmsnorm dweight");
    near(s->bias, cpu.bias, "linear dbias");
  }
}

// LayerNorm's and RMSNorm's backward in one pass (the GPU shape): the input gradient added to
// what dinp held and the parameters' gradients, as the CPU shape's two kernels give them, over
// row blocks of kNormRowBlock rows (a short last one) with their partials, or one block; the same
// bits run after run; and a width whose accumulators pass a team's scratch takes the two kernels.
TEST(Kernels, NormBackwardInOnePassMatchesTheTwoHalves) {
  struct Grads {
    std::vector<float> ln_dx, ln_dw, ln_db, rms_dx, rms_dw;
  };
  const auto run = [](Shape shape, int N, int C, size_t partial_floats) {
    const TestBuf x = random_view(N * C, 80, 2.0f), w = random_view(C, 81), b = random_view(C, 82);
    const TestBuf dout = random_view(N * C, 83);
    TestBuf y("y", N * C), mean("mean", N), rstd("rstd", N), rrstd("rrstd", N);
    layernorm_forward(exec(), window(y, 0, N, C), mean, rstd, window(x, 0, N, C), w, b,
                      Shape::kCpu);
    rmsnorm_forward(exec(), window(y, 0, N, C), rrstd, window(x, 0, N, C), w, 1e-5f, Shape::kCpu);
    const TestBuf ln_dx = random_view(N * C, 84), rms_dx = random_view(N * C, 84);
    const TestBuf ln_dw = random_view(C, 85), ln_db = random_view(C, 86),
                  rms_dw = random_view(C, 85);
    TestBuf partials("partials", partial_floats);
    layernorm_backward(exec(), window(ln_dx, 0, N, C), ln_dw, ln_db, window(dout, 0, N, C),
                       window(x, 0, N, C), w, mean, rstd, shape, partials);
    rmsnorm_backward(exec(), window(rms_dx, 0, N, C), rms_dw, window(dout, 0, N, C),
                     window(x, 0, N, C), w, rrstd, shape, partials);
    exec().fence();
    const auto host = [](const TestBuf& v) {
      return std::vector<float>(v.data(), v.data() + v.extent(0));
    };
    return Grads{host(ln_dx), host(ln_dw), host(ln_db), host(rms_dx), host(rms_dw)};
  };
  const auto near = [](const Grads& got, const Grads& want, const char* what) {
    const auto one = [&](const std::vector<float>& g, const std::vector<float>& v, const char* n) {
      ASSERT_EQ(g.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(g[i], v[i], 1e-4 * (1.0 + std::fabs(v[i]))) << what << ' ' << n << " i=" << i;
    };
    one(got.ln_dx, want.ln_dx, "layernorm dinp");
    one(got.ln_dw, want.ln_dw, "layernorm dweight");
    one(got.ln_db, want.ln_db, "layernorm dbias");
    one(got.rms_dx, want.rms_dx, "rmsnorm dinp");
    one(got.rms_dw, want.rms_dw, "rmsnorm dweight");
  };
  const int N = 300, C = 45;  // three row blocks, the last of 44 rows
  ASSERT_EQ(column_row_blocks(2, N, C, 2 * 3 * C, kNormRowBlock), 3);
  ASSERT_TRUE(norm_backward_fits(2, 2, C));
  const Grads cpu = run(Shape::kCpu, N, C, 0);
  const Grads blocks = run(Shape::kGpu, N, C, 2 * 3 * C);
  near(blocks, cpu, "three row blocks");
  near(run(Shape::kGpu, N, C, 0), cpu, "one row block");
  const Grads again = run(Shape::kGpu, N, C, 2 * 3 * C);
  EXPECT_EQ(again.ln_dx, blocks.ln_dx);
  EXPECT_EQ(again.ln_dw, blocks.ln_dw);
  EXPECT_EQ(again.rms_dw, blocks.rms_dw);
  const int wide = 6200;
  ASSERT_FALSE(norm_backward_fits(2, 2, wide));
  near(run(Shape::kGpu, 3, wide, 0), run(Shape::kCpu, 3, wide, 0), "too wide for one pass");
}

// The GPU shape's norms forward a warp per row, 16 bytes a lane at a time where every row starts
// on a 16-byte boundary and the width is a multiple of the pack, element by element where not (a
// window one float in): both give the CPU shape's outputs and statistics.
TEST(Kernels, NormForwardInPacksMatchesTheCpuShape) {
  const int N = 21, C = 96;
  const TestBuf x = random_view(N * C + 1, 90, 2.0f), w = random_view(C + 1, 91);
  const TestBuf b = random_view(C + 1, 92);
  ASSERT_TRUE(rows_split_into_packs<Fp32Elements>(C, {x.data(), w.data(), b.data()}));
  ASSERT_FALSE(rows_split_into_packs<Fp32Elements>(C, {x.data() + 1, w.data(), b.data()}));
  for (const size_t at : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE(at == 0 ? "packs" : "elements");
    std::vector<float> cpu;
    for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
      TestBuf y("y", N * C), mean("mean", N), rstd("rstd", N), ry("ry", N * C), rr("rr", N);
      const ConstMat in(x.data() + at, N, C);
      const ConstVec weight(w.data() + at, C), bias(b.data() + at, C);
      layernorm_forward(exec(), Mat(y.data(), N, C), mean, rstd, in, weight, bias, shape);
      rmsnorm_forward(exec(), Mat(ry.data(), N, C), rr, in, weight, 1e-6f, shape);
      exec().fence();
      std::vector<float> all;
      for (const TestBuf* v : {&y, &mean, &rstd, &ry, &rr})
        all.insert(all.end(), v->data(), v->data() + v->extent(0));
      if (shape == Shape::kCpu) {
        cpu = all;
        continue;
      }
      ASSERT_EQ(all.size(), cpu.size());
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_NEAR(all[i], cpu[i], 1e-5 * (1.0 + std::fabs(cpu[i]))) << "i=" << i;
    }
  }
}
