// Kernels on 16-bit tensors (bf16 and fp16 storage, fp32 arithmetic): each element-wise kernel
// computes what the fp32 kernel computes on the widened inputs, its 16-bit outputs rounded; the
// linear layer's 16-bit GEMMs (oneDNN on CPUs, cuBLAS on GPUs) match a double-precision sum of
// the same 16-bit operands, rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/elements.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"
#include "test_space.hpp"

using namespace trident;
using namespace trident::kernels;

namespace {

template <class T>
using Buffer = Kokkos::View<T*, Kokkos::LayoutRight, TestSpace>;

// A tensor stored as E and its values widened to fp32: what the fp32 kernel reads.
template <class E>
struct Stored {
  Buffer<uint16_t> bits;
  Buffer<float> values;
  explicit Stored(size_t n) : bits("bits", n), values("values", n) {}
  void set(size_t i, float v) {
    bits(i) = E::store(v);
    values(i) = E::load(bits(i));
  }
  VecOf<E> vec() const { return VecOf<E>(bits.data(), bits.extent(0)); }
  MatOf<E> mat(int rows, int cols) const { return MatOf<E>(bits.data(), rows, cols); }
  Vec fvec() const { return Vec(values.data(), values.extent(0)); }
  Mat fmat(int rows, int cols) const { return Mat(values.data(), rows, cols); }
};

template <class E>
Stored<E> random_stored(size_t n, unsigned seed, float mean = 0.0f, float scale = 1.0f) {
  Stored<E> s(n);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(mean, scale);
  for (size_t i = 0; i < n; ++i) s.set(i, dist(gen));
  return s;
}

const Exec& exec() {
  static const Exec instance;
  return instance;
}

// The compiler may contract a multiply and an add into one FMA in one instantiation of a kernel
// and not in another, so the fp32 arithmetic of the two agrees to a few ulps rather than bit for
// bit: each 16-bit output must be the rounding of a value within kUlps fp32 ulps of the fp32
// kernel's, and each fp32 output within kUlps ulps of it (kSumTolerance, relative to the largest,
// for sums over rows).
constexpr float kUlps = 4 * 6e-8f, kSumTolerance = 1e-5f;

template <class E>
void expect_rounded(const Stored<E>& got, const Buffer<float>& expected, const char* what) {
  exec().fence();
  for (size_t i = 0; i < got.bits.extent(0); ++i) {
    const float e = expected(i), slack = kUlps * std::fabs(e);
    const auto bits = got.bits(i);
    ASSERT_TRUE(bits == E::store(e) || bits == E::store(e - slack) || bits == E::store(e + slack))
        << what << " element " << i << ": " << E::load(bits) << " against " << e;
  }
}

void expect_close(const Buffer<float>& got, const Buffer<float>& expected, float relative,
                  const char* what) {
  exec().fence();
  float largest = 0;
  for (size_t i = 0; i < expected.extent(0); ++i)
    largest = std::max(largest, std::fabs(expected(i)));
  for (size_t i = 0; i < got.extent(0); ++i)
    ASSERT_NEAR(got(i), expected(i), relative * largest) << what << " element " << i;
}

template <class E>
class Kernels16 : public ::testing::Test {};
using Formats = ::testing::Types<Bf16Elements, Fp16Elements>;
TYPED_TEST_SUITE(Kernels16, Formats);

TYPED_TEST(Kernels16, GeluForwardAndBackward) {
  using E = TypeParam;
  const size_t n = 3000;  // several streamed chunks and a partial one
  const Stored<E> x = random_stored<E>(n, 1, 0.0f, 2.0f), dout = random_stored<E>(n, 2);
  Stored<E> out(n), dx(n);
  Buffer<float> out32("out32", n), dx32("dx32", n);
  gelu_forward<E>(exec(), out.vec(), x.vec());
  gelu_forward(exec(), Vec(out32.data(), n), x.fvec());
  expect_rounded(out, out32, "gelu forward");
  gelu_backward<E>(exec(), dx.vec(), x.vec(), dout.vec());
  gelu_backward(exec(), Vec(dx32.data(), n), x.fvec(), dout.fvec());
  expect_rounded(dx, dx32, "gelu backward");
}

TYPED_TEST(Kernels16, ResidualAdd) {
  using E = TypeParam;
  const size_t n = 777;
  const Stored<E> a = random_stored<E>(n, 3), b = random_stored<E>(n, 4, 0.0f, 1e-2f);
  Stored<E> out(n);
  Buffer<float> out32("out32", n);
  residual_forward<E>(exec(), out.vec(), a.vec(), b.vec());
  residual_forward(exec(), Vec(out32.data(), n), a.fvec(), b.fvec());
  expect_rounded(out, out32, "residual");
}

// Both shapes (a thread per row on host spaces, a warp per row on GPUs) compile in every build. C
// 70 spans a host column block and a partial one; at 72 the GPU shape's rows split into 16-byte
// packs (8 elements of E, 4 of the fp32 kernel's), at 70 they do not.
TYPED_TEST(Kernels16, LayerNormForwardAndBackward) {
  using E = TypeParam;
  const int N = 13;
  for (const int C : {70, 72})
    for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
      SCOPED_TRACE(testing::Message() << "C " << C << (shape == Shape::kGpu ? " gpu" : " cpu"));
      const size_t nc = static_cast<size_t>(N) * C;
      const Stored<E> x = random_stored<E>(nc, 5, 0.5f, 2.0f), dout = random_stored<E>(nc, 6);
      const Stored<E> weight = random_stored<E>(C, 7, 1.0f, 0.1f);
      const Stored<E> bias = random_stored<E>(C, 8, 0.0f, 0.1f);
      Stored<E> out(nc), dx = random_stored<E>(nc, 9);  // backward adds into dx
      Buffer<float> out32("out32", nc), dx32("dx32", nc);
      Kokkos::deep_copy(dx32, dx.values);
      Buffer<float> mean("mean", N), rstd("rstd", N), mean32("mean32", N), rstd32("rstd32", N);
      layernorm_forward<E>(exec(), out.mat(N, C), Vec(mean.data(), N), Vec(rstd.data(), N),
                           x.mat(N, C), weight.vec(), bias.vec(), shape);
      layernorm_forward(exec(), Mat(out32.data(), N, C), Vec(mean32.data(), N),
                        Vec(rstd32.data(), N), x.fmat(N, C), weight.fvec(), bias.fvec(), shape);
      expect_rounded(out, out32, "layernorm forward");
      expect_close(mean, mean32, kUlps, "mean");
      expect_close(rstd, rstd32, kUlps, "rstd");

      layernorm_backward_input<E>(exec(), dx.mat(N, C), dout.mat(N, C), x.mat(N, C), weight.vec(),
                                  Vec(mean.data(), N), Vec(rstd.data(), N), shape);
      layernorm_backward_input(exec(), Mat(dx32.data(), N, C), dout.fmat(N, C), x.fmat(N, C),
                               weight.fvec(), Vec(mean.data(), N), Vec(rstd.data(), N), shape);
      expect_rounded(dx, dx32, "layernorm input gradient");

      Buffer<float> dw("dw", C), db("db", C), dw32("dw32", C), db32("db32", C);
      layernorm_backward_params<E>(exec(), Vec(dw.data(), C), Vec(db.data(), C), dout.mat(N, C),
                                   x.mat(N, C), Vec(mean.data(), N), Vec(rstd.data(), N), shape);
      layernorm_backward_params(exec(), Vec(dw32.data(), C), Vec(db32.data(), C), dout.fmat(N, C),
                                x.fmat(N, C), Vec(mean.data(), N), Vec(rstd.data(), N), shape);
      expect_close(dw, dw32, kSumTolerance, "layernorm weight gradient");
      expect_close(db, db32, kSumTolerance, "layernorm bias gradient");
    }
}

TYPED_TEST(Kernels16, EmbeddingForwardAndBackward) {
  using E = TypeParam;
  const int V = 11, T = 5, B = 3, C = 9, N = B * T, vocab_start = 2;  // a vocabulary slice
  const Stored<E> wte = random_stored<E>(static_cast<size_t>(V) * C, 16);
  const Stored<E> wpe = random_stored<E>(static_cast<size_t>(T) * C, 17);
  const Stored<E> dout = random_stored<E>(static_cast<size_t>(N) * C, 18);
  Buffer<int32_t> tokens("tokens", N);
  for (int n = 0; n < N; ++n) tokens(n) = (7 * n + 3) % (V + 4);  // some outside the slice
  const ConstIntVec toks(tokens.data(), N);
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    Stored<E> out(static_cast<size_t>(N) * C);
    Buffer<float> out32("out32", static_cast<size_t>(N) * C);
    embedding_forward<E>(exec(), out.mat(N, C), toks, wte.mat(V, C), wpe.mat(T, C), T, vocab_start,
                         shape);
    embedding_forward(exec(), Mat(out32.data(), N, C), toks, wte.fmat(V, C), wpe.fmat(T, C), T,
                      vocab_start, shape);
    expect_rounded(out, out32, "embedding forward");
    Buffer<float> dwte("dwte", static_cast<size_t>(V) * C),
        dwpe("dwpe", static_cast<size_t>(T) * C);
    Buffer<float> dwte32("dwte32", dwte.extent(0)), dwpe32("dwpe32", dwpe.extent(0));
    embedding_backward<E>(exec(), Mat(dwte.data(), V, C), Mat(dwpe.data(), T, C), dout.mat(N, C),
                          toks, T, vocab_start, shape);
    embedding_backward(exec(), Mat(dwte32.data(), V, C), Mat(dwpe32.data(), T, C), dout.fmat(N, C),
                       toks, T, vocab_start, shape);
    expect_close(dwte, dwte32, 0.0f, "token table gradient");
    expect_close(dwpe, dwpe32, 0.0f, "position table gradient");
  }
}

TYPED_TEST(Kernels16, CrossEntropyForwardAndBackward) {
  using E = TypeParam;
  const int N = 6, width = 40, valid = 37, vocab_start = 5;  // 3 padding columns
  const size_t n_logits = static_cast<size_t>(N) * width;
  const Stored<E> logits = random_stored<E>(n_logits, 19, 0.0f, 3.0f);
  Buffer<int32_t> targets("targets", N);
  for (int n = 0; n < N; ++n) targets(n) = n == 2 ? -1 : vocab_start + (11 * n) % (valid + 6);
  const ConstIntVec tg(targets.data(), N);
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    Buffer<float> mx("mx", N), sums("sums", N), tl("tl", N), mx32("mx32", N), sums32("sums32", N),
        tl32("tl32", N), losses("losses", N), lse("lse", N);
    cross_entropy_row_max<E>(exec(), Vec(mx.data(), N), logits.mat(N, width), valid, shape);
    cross_entropy_row_max(exec(), Vec(mx32.data(), N), logits.fmat(N, width), valid, shape);
    expect_close(mx, mx32, 0.0f, "row max");
    cross_entropy_row_sums<E>(exec(), Vec(sums.data(), N), Vec(tl.data(), N), logits.mat(N, width),
                              Vec(mx.data(), N), tg, vocab_start, valid, shape);
    cross_entropy_row_sums(exec(), Vec(sums32.data(), N), Vec(tl32.data(), N),
                           logits.fmat(N, width), Vec(mx.data(), N), tg, vocab_start, valid, shape);
    expect_close(sums, sums32, kUlps, "row sums");
    expect_close(tl, tl32, 0.0f, "target logits");
    cross_entropy_losses(exec(), Vec(losses.data(), N), Vec(lse.data(), N), Vec(mx.data(), N),
                         Vec(sums.data(), N), Vec(tl.data(), N), tg);
    Stored<E> dlogits(n_logits);
    Buffer<float> dlogits32("dlogits32", n_logits);
    cross_entropy_backward<E>(exec(), dlogits.mat(N, width), logits.mat(N, width),
                              Vec(lse.data(), N), tg, vocab_start, valid, 0.125f, shape);
    cross_entropy_backward(exec(), Mat(dlogits32.data(), N, width), logits.fmat(N, width),
                           Vec(lse.data(), N), tg, vocab_start, valid, 0.125f, shape);
    expect_rounded(dlogits, dlogits32, "logit gradients");
  }
}

// The fused classifier (tp = 1) gives the bits of the four kernels it replaces: losses,
// log-sum-exps and the gradient written over the logits, on 16-bit and fp32 logits with padding
// columns and an ignored position, in both shapes.
template <class F>
void expect_fused_classifier_as_unfused(const MatOf<F>& logits, const MatOf<F>& fused,
                                        const ConstIntVec& targets, int valid, Shape shape) {
  const int N = static_cast<int>(logits.extent(0));
  Buffer<float> mx("mx", N), sums("sums", N), tl("tl", N), losses("losses", N), lse("lse", N),
      fused_losses("fused_losses", N), fused_lse("fused_lse", N);
  cross_entropy_row_max<F>(exec(), Vec(mx.data(), N), logits, valid, shape);
  cross_entropy_row_sums<F>(exec(), Vec(sums.data(), N), Vec(tl.data(), N), logits,
                            Vec(mx.data(), N), targets, 0, valid, shape);
  cross_entropy_losses(exec(), Vec(losses.data(), N), Vec(lse.data(), N), Vec(mx.data(), N),
                       Vec(sums.data(), N), Vec(tl.data(), N), targets);
  cross_entropy_backward<F>(exec(), logits, logits, Vec(lse.data(), N), targets, 0, valid, 0.125f,
                            shape);
  cross_entropy_fused<F>(exec(), fused, Vec(fused_losses.data(), N), Vec(fused_lse.data(), N),
                         targets, valid, 0.125f, shape);
  exec().fence();
  const char* name = shape == Shape::kGpu ? "GPU shape" : "CPU shape";
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(fused_losses(n), losses(n)) << name << " row " << n;
    EXPECT_EQ(fused_lse(n), lse(n)) << name << " row " << n;
    for (int v = 0; v < static_cast<int>(logits.extent(1)); ++v)
      ASSERT_EQ(fused(n, v), logits(n, v)) << name << " row " << n << " column " << v;
  }
}

TYPED_TEST(Kernels16, CrossEntropyFusedIsTheFourKernelsBitForBit) {
  using E = TypeParam;
  const int N = 6, width = 40, valid = 37;  // 3 padding columns
  const size_t n_logits = static_cast<size_t>(N) * width;
  Buffer<int32_t> targets("targets", N);
  for (int n = 0; n < N; ++n) targets(n) = n == 2 ? -1 : (11 * n) % valid;
  const ConstIntVec tg(targets.data(), N);
  for (const Shape shape : {Shape::kCpu, Shape::kGpu}) {
    const Stored<E> unfused = random_stored<E>(n_logits, 23, 0.0f, 3.0f);
    const Stored<E> fused = random_stored<E>(n_logits, 23, 0.0f, 3.0f);
    expect_fused_classifier_as_unfused<E>(unfused.mat(N, width), fused.mat(N, width), tg, valid,
                                          shape);
    expect_fused_classifier_as_unfused<Fp32Elements>(unfused.fmat(N, width), fused.fmat(N, width),
                                                     tg, valid, shape);
  }
}

#if !defined(KOKKOS_ENABLE_CUDA)
// The host's tiled attention on 16-bit q|k|v: the fp32 algorithm on the rows widened tile by
// tile, its output and gradients (sums kept in fp32 over the tiles) rounded once.
TYPED_TEST(Kernels16, TiledAttentionForwardAndBackward) {
  using E = TypeParam;
  const AttentionShape s{2, 19, 2, 4};
  const int C = s.NH * s.HS, N = s.B * s.T;
  const size_t n_qkv = static_cast<size_t>(N) * 3 * C, n_out = static_cast<size_t>(N) * C;
  const Stored<E> qkv = random_stored<E>(n_qkv, 20), dout = random_stored<E>(n_out, 21);
  for (const AttentionTiles tiles :
       {AttentionTiles{4, 8}, AttentionTiles{8, 4}, attention_tiles(s.T)}) {
    Buffer<float> scratch("scratch",
                          attention_tiled_scratch(s.B, s.NH, s.HS, s.T, tiles, E::format));
    Buffer<float> scratch32("scratch32",
                            attention_tiled_scratch(s.B, s.NH, s.HS, s.T, tiles, Precision::kFp32));
    Kokkos::deep_copy(scratch, 7.0f);  // stale values: nothing is read before it is written
    Stored<E> out(n_out), dqkv(n_qkv);
    Buffer<float> out32("out32", n_out), dqkv32("dqkv32", n_qkv);
    Buffer<float> lse("lse", static_cast<size_t>(N) * s.NH), lse32("lse32", lse.extent(0));
    const Vec sv(scratch.data(), scratch.extent(0)), sv32(scratch32.data(), scratch32.extent(0));
    attention_forward_tiled<E>(exec(), out.mat(N, C), Vec(lse.data(), lse.extent(0)), sv,
                               qkv.mat(N, 3 * C), s, tiles);
    attention_forward_tiled(exec(), Mat(out32.data(), N, C), Vec(lse32.data(), lse.extent(0)), sv32,
                            qkv.fmat(N, 3 * C), s, tiles);
    expect_rounded(out, out32, "attention output");
    expect_close(lse, lse32, kUlps, "log-sum-exp");
    // Both backwards read the 16-bit output (the fp32 one widened), as a 16-bit run keeps it.
    Stored<E> out_kept(n_out);
    for (size_t i = 0; i < n_out; ++i) out_kept.set(i, E::load(out.bits(i)));
    attention_backward_tiled<E>(exec(), dqkv.mat(N, 3 * C), sv, dout.mat(N, C), qkv.mat(N, 3 * C),
                                out.mat(N, C), Vec(lse.data(), lse.extent(0)), s, tiles);
    attention_backward_tiled(exec(), Mat(dqkv32.data(), N, 3 * C), sv32, dout.fmat(N, C),
                             qkv.fmat(N, 3 * C), out_kept.fmat(N, C),
                             Vec(lse.data(), lse.extent(0)), s, tiles);
    expect_rounded(dqkv, dqkv32, "attention input gradient");
  }
}
#endif

// Half an ulp of E's format, relative: the most rounding a value to E moves it.
template <class E>
double half_ulp() {
  return E::format == Precision::kBf16 ? 1.0 / 256 : 1.0 / 2048;
}

// Every element of got within `halves` half-ulps of E of want, relative to want's largest value.
template <class E>
void expect_within_halves(const Stored<E>& got, const Stored<E>& want, double halves,
                          const char* what) {
  exec().fence();
  double largest = 0;
  for (size_t i = 0; i < want.values.extent(0); ++i)
    largest = std::max(largest, std::fabs(static_cast<double>(E::load(want.bits(i)))));
  const double tolerance = halves * half_ulp<E>() * largest;
  for (size_t i = 0; i < got.bits.extent(0); ++i)
    ASSERT_NEAR(E::load(got.bits(i)), E::load(want.bits(i)), tolerance) << what << " element " << i;
}

#if defined(KOKKOS_ENABLE_CUDA)
// cuDNN's fused attention against the batched attention it replaces, on the same 16-bit inputs
// (the device test of issue 49): GPT-2's head size, a sequence that no tile size of cuDNN's
// divides, multi-head and grouped-query heads. Both round the probabilities to 16 bits for the
// products; they sum in other orders, so each output is within a few half-ulps of E of the other,
// relative to the largest value, and the log-sum-exps within fp32 rounding of sums of 200 terms.
TYPED_TEST(Kernels16, CudnnAttentionAgreesWithTiled) {
  using E = TypeParam;
  for (const AttentionShape s : {AttentionShape{2, 200, 4, 64}, AttentionShape{2, 200, 4, 64, 2}}) {
    const int C = s.NH * s.HS, W = (s.NH + 2 * s.kv_heads()) * s.HS, N = s.B * s.T;
    const size_t n_qkv = size_t(N) * W, n_out = size_t(N) * C, n_lse = size_t(N) * s.NH;
    const Stored<E> qkv = random_stored<E>(n_qkv, 50), dout = random_stored<E>(n_out, 51);
    const AttentionTiles tiles = attention_tiles(s.T, {}, kGpuAttentionTiles);
    Buffer<float> scratch("scratch", attention_batched_scratch(s.NH, s.HS, s.T, tiles, E::format));
    const Vec sv(scratch.data(), scratch.extent(0));
    Stored<E> out(n_out), out_tiled(n_out), dqkv(n_qkv), dqkv_tiled(n_qkv);
    Buffer<float> lse("lse", n_lse), lse_tiled("lse_tiled", n_lse);
    const AttentionGraphShape g{s.B, s.T, s.NH, s.kv_heads(), s.HS, W, C, C, W};
    ASSERT_EQ(cudnn_attention_refusal(exec(), g, E::format, qkv.bits.data(), out.bits.data()), "")
        << "KVH=" << s.kv_heads();
    cudnn_attention_forward(exec(), g, E::format, out.bits.data(), lse.data(), qkv.bits.data());
    attention_forward_batched<E>(exec(), out_tiled.mat(N, C), Vec(lse_tiled.data(), n_lse), sv,
                                 qkv.mat(N, W), s, tiles);
    expect_close(lse, lse_tiled, 1e-5f, "log-sum-exp");
    expect_within_halves(out, out_tiled, 4, "attention output");
    cudnn_attention_backward(exec(), g, E::format, dqkv.bits.data(), dout.bits.data(),
                             qkv.bits.data(), out_tiled.bits.data(), lse_tiled.data());
    attention_backward_batched<E>(exec(), dqkv_tiled.mat(N, W), sv, dout.mat(N, C), qkv.mat(N, W),
                                  out_tiled.mat(N, C), Vec(lse_tiled.data(), n_lse), s, tiles);
    expect_within_halves(dqkv, dqkv_tiled, 8, "attention input gradient");
  }
}
#else

// The GPU's batched attention on 16-bit q|k|v, run here through oneDNN, against the host's tiled
// one: the batched shape rounds each tile's probabilities and score gradients to 16 bits for the
// products that read them (the tiled one multiplies them in fp32), so the two differ by about
// that rounding, a few half-ulps of E relative to the largest value; the log-sum-exps, from fp32
// scores in both, by fp32 rounding alone.
TYPED_TEST(Kernels16, BatchedAttentionAgreesWithTiled) {
  using E = TypeParam;
  const AttentionShape s{2, 19, 2, 4};
  const int C = s.NH * s.HS, N = s.B * s.T;
  const size_t n_qkv = static_cast<size_t>(N) * 3 * C, n_out = static_cast<size_t>(N) * C;
  const size_t n_lse = static_cast<size_t>(N) * s.NH;
  const Stored<E> qkv = random_stored<E>(n_qkv, 30), dout = random_stored<E>(n_out, 31);
  for (const AttentionTiles tiles :
       {AttentionTiles{4, 8}, AttentionTiles{8, 4}, AttentionTiles{5, 5}, attention_tiles(s.T)}) {
    Buffer<float> batched_scratch("batched_scratch",
                                  attention_batched_scratch(s.NH, s.HS, s.T, tiles, E::format));
    Buffer<float> tiled_scratch("tiled_scratch",
                                attention_tiled_scratch(s.B, s.NH, s.HS, s.T, tiles, E::format));
    Kokkos::deep_copy(batched_scratch, 7.0f);  // stale values: nothing is read before it is written
    const Vec bs(batched_scratch.data(), batched_scratch.extent(0));
    const Vec ts(tiled_scratch.data(), tiled_scratch.extent(0));
    Stored<E> out(n_out), out_tiled(n_out), dqkv(n_qkv), dqkv_tiled(n_qkv);
    Buffer<float> lse("lse", n_lse), lse_tiled("lse_tiled", n_lse);
    attention_forward_batched<E>(exec(), out.mat(N, C), Vec(lse.data(), n_lse), bs,
                                 qkv.mat(N, 3 * C), s, tiles);
    attention_forward_tiled<E>(exec(), out_tiled.mat(N, C), Vec(lse_tiled.data(), n_lse), ts,
                               qkv.mat(N, 3 * C), s, tiles);
    expect_close(lse, lse_tiled, kUlps, "log-sum-exp");
    expect_within_halves(out, out_tiled, 4, "attention output");
    // Both backwards read the tiled output and log-sum-exps.
    attention_backward_batched<E>(exec(), dqkv.mat(N, 3 * C), bs, dout.mat(N, C), qkv.mat(N, 3 * C),
                                  out_tiled.mat(N, C), Vec(lse_tiled.data(), n_lse), s, tiles);
    attention_backward_tiled<E>(exec(), dqkv_tiled.mat(N, 3 * C), ts, dout.mat(N, C),
                                qkv.mat(N, 3 * C), out_tiled.mat(N, C),
                                Vec(lse_tiled.data(), n_lse), s, tiles);
    expect_within_halves(dqkv, dqkv_tiled, 8, "attention input gradient");
  }
}
#endif

TYPED_TEST(Kernels16, LinearForwardAndBackwardMatchDoubleSums) {
  using E = TypeParam;
  const int N = 37, IC = 48, OC = 20;
  const size_t nx = static_cast<size_t>(N) * IC, ny = static_cast<size_t>(N) * OC;
  const Stored<E> x = random_stored<E>(nx, 11),
                  w = random_stored<E>(static_cast<size_t>(OC) * IC, 12);
  const Stored<E> b = random_stored<E>(OC, 13), dy = random_stored<E>(ny, 14);
  Stored<E> y(ny), dx = random_stored<E>(nx, 15);
  Buffer<uint16_t> first("first", nx);
  Buffer<float> dw("dw", static_cast<size_t>(OC) * IC), db("db", OC);
  for (int round = 0; round < 2; ++round) {  // the second call reuses the first one's primitives
    Kokkos::deep_copy(dw, 0.5f);             // the weight gradient accumulates
    Kokkos::deep_copy(db, 0.25f);
    linear_forward<E>(exec(), y.mat(N, OC), x.mat(N, IC), w.mat(OC, IC), b.vec());
    linear_backward_input<E>(exec(), dx.mat(N, IC), dy.mat(N, OC), w.mat(OC, IC), false);
    exec().fence();
    Kokkos::deep_copy(first, dx.bits);
    linear_backward_input<E>(exec(), dx.mat(N, IC), dy.mat(N, OC), w.mat(OC, IC), true);
    linear_backward_weight<E>(exec(), Mat(dw.data(), OC, IC), Vec(db.data(), OC), dy.mat(N, OC),
                              x.mat(N, IC), true);
    exec().fence();
    // Each 16-bit output is the double sum rounded once, up to fp32 summation error.
    const auto expect_output = [&](uint16_t got, double sum, double magnitude, const char* what,
                                   int i) {
      ASSERT_NEAR(E::load(got), sum, half_ulp<E>() * std::fabs(sum) + 1e-5 * magnitude)
          << what << " element " << i << " round " << round;
    };
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double sum = b.values(o), magnitude = std::fabs(sum);
        for (int i = 0; i < IC; ++i) {
          sum += static_cast<double>(x.values(n * IC + i)) * w.values(o * IC + i);
          magnitude += std::fabs(static_cast<double>(x.values(n * IC + i)) * w.values(o * IC + i));
        }
        expect_output(y.bits(n * OC + o), sum, magnitude, "forward", n * OC + o);
      }
    // dx = dy w, overwriting dx (first), then dx += dy w (each rounded).
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < IC; ++i) {
        double sum = 0, magnitude = 0;
        for (int o = 0; o < OC; ++o) {
          sum += static_cast<double>(dy.values(n * OC + o)) * w.values(o * IC + i);
          magnitude += std::fabs(static_cast<double>(dy.values(n * OC + o)) * w.values(o * IC + i));
        }
        const int e = n * IC + i;
        expect_output(first(e), sum, magnitude, "input gradient", e);
        const double once = E::load(first(e));
        expect_output(dx.bits(e), once + sum, std::fabs(once) + magnitude,
                      "accumulated input gradient", e);
      }
    for (int o = 0; o < OC; ++o) {
      double bias_sum = 0.25, bias_magnitude = 0.25;
      for (int i = 0; i < IC; ++i) {
        double sum = 0.5, magnitude = 0.5;
        for (int n = 0; n < N; ++n) {
          const double product = static_cast<double>(dy.values(n * OC + o)) * x.values(n * IC + i);
          sum += product;
          magnitude += std::fabs(product);
        }
        ASSERT_NEAR(dw(o * IC + i), sum, 1e-5 * magnitude) << "weight gradient round " << round;
      }
      for (int n = 0; n < N; ++n) {
        bias_sum += dy.values(n * OC + o);
        bias_magnitude += std::fabs(dy.values(n * OC + o));
      }
      ASSERT_NEAR(db(o), bias_sum, 1e-5 * bias_magnitude) << "bias gradient round " << round;
    }
  }
}

}  // namespace
