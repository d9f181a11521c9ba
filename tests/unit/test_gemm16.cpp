// 16-bit GEMMs (kernels::gemm16: oneDNN on CPUs, cuBLAS on GPUs) against a double-precision
// reference of the same 16-bit operands: every transpose, alpha and beta (accumulation into fp32),
// bf16 and fp16, and a second call that reuses the first one's primitive.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if !defined(KOKKOS_ENABLE_CUDA)
#include <omp.h>
#endif

#include "core/half.hpp"
#include "kernels/gemm.hpp"
#include "kernels/linear.hpp"
#include "test_space.hpp"

using namespace trident;

namespace {

// Runs `check` with cuBLASLt's epilogues on and then off (TRIDENT_CUBLASLT=0's path) on GPU
// builds, restoring the setting; once on host builds, which have no such switch.
template <class F>
void with_epilogues_on_and_off(F check) {
#if defined(KOKKOS_ENABLE_CUDA)
  const bool was = kernels::cublaslt_epilogues();
  for (const bool epilogues : {true, false}) {
    kernels::set_cublaslt_epilogues(epilogues);
    check();
  }
  kernels::set_cublaslt_epilogues(was);
#else
  check();
#endif
}

// A row-major [rows, cols] matrix on the test space.
template <class T>
struct Matrix {
  int rows, cols;
  Kokkos::View<T*, Kokkos::LayoutRight, TestSpace> data;
  Matrix(int r, int c) : rows(r), cols(c), data("m", static_cast<size_t>(r) * c) {}
  T& at(int i, int j) const { return data(static_cast<size_t>(i) * cols + j); }
};

Matrix<uint16_t> random_half(int rows, int cols, unsigned seed, Precision format) {
  Matrix<uint16_t> m(rows, cols);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m.at(i, j) = to_half(dist(gen), format);
  return m;
}

// op(X)[i][j] of a stored 16-bit matrix, exactly.
double op_at(const Matrix<uint16_t>& x, char trans, int i, int j, Precision format) {
  return from_half(trans == 'T' ? x.at(j, i) : x.at(i, j), format);
}

ConstHalfMat as_mat(const Matrix<uint16_t>& x) {
  return ConstHalfMat(x.data.data(), x.rows, x.cols);
}

void check(char ta, char tb, Precision format, float alpha, float beta) {
  const int m = 5, n = 7, k = 19;
  const Matrix<uint16_t> A = random_half(ta == 'T' ? k : m, ta == 'T' ? m : k, 1, format);
  const Matrix<uint16_t> B = random_half(tb == 'T' ? n : k, tb == 'T' ? k : n, 2, format);
  Matrix<float> C(m, n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) C.at(i, j) = 0.25f * static_cast<float>(i - j);
  std::vector<double> expected(static_cast<size_t>(m) * n), bound(expected.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int p = 0; p < k; ++p) {
        const double product = op_at(A, ta, i, p, format) * op_at(B, tb, p, j, format);
        sum += product;
        magnitude += std::fabs(product);
      }
      expected[i * n + j] = alpha * sum + beta * C.at(i, j);
      // Exact products summed in fp32: at most k + 2 roundings of 2^-24 of the magnitudes.
      bound[i * n + j] =
          (k + 2) * 6e-8 * (std::fabs(alpha) * magnitude + std::fabs(beta * C.at(i, j))) + 1e-7;
    }
  // Twice: the second call reuses the primitive the first made, on fresh outputs.
  for (int call = 0; call < 2; ++call) {
    Matrix<float> out(m, n);
    Kokkos::deep_copy(out.data, C.data);
    kernels::gemm16(Exec(), ta, tb, alpha, as_mat(A), as_mat(B), format, beta,
                    Mat(out.data.data(), m, n));
    Exec().fence();
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        ASSERT_NEAR(out.at(i, j), expected[i * n + j], bound[i * n + j])
            << ta << tb << (format == Precision::kBf16 ? " bf16" : " fp16") << " alpha " << alpha
            << " beta " << beta << " call " << call << " at " << i << "," << j;
  }
}

}  // namespace

TEST(Gemm16, Bf16MatchesTheExactProductsForEveryTranspose) {
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) check(ta, tb, Precision::kBf16, 1.0f, 0.0f);
}

TEST(Gemm16, Bf16AccumulatesIntoFp32WithAlphaAndBeta) {
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) check(ta, tb, Precision::kBf16, 0.5f, 1.0f);
}

TEST(Gemm16, Fp16MatchesTheExactProducts) {
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      check(ta, tb, Precision::kFp16, 1.0f, 0.0f);
      check(ta, tb, Precision::kFp16, 2.0f, 1.0f);
    }
}

// A C taller than oneDNN's row chunk (kMaxRows = 16384 in kernels/onednn.cpp, as the token
// embedding's weight gradient is): every row of every chunk, with A plain and transposed, fp32 C
// accumulated (alpha 0.5, beta 1) and 16-bit C with a bias, against the double sums.
TEST(Gemm16, TallOutputsAreRightInEveryRowChunk) {
  const int m = 2 * 16384 + 101, n = 3, k = 5;
  const Precision format = Precision::kBf16;
  const Matrix<uint16_t> B = random_half(k, n, 8, format), bias = random_half(1, n, 9, format);
  for (const char ta : {'N', 'T'}) {
    const Matrix<uint16_t> A = random_half(ta == 'T' ? k : m, ta == 'T' ? m : k, 7, format);
    Matrix<float> C(m, n);
    Matrix<uint16_t> C16(m, n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) C.at(i, j) = 0.125f * static_cast<float>((i + j) % 17);
    std::vector<double> start(static_cast<size_t>(m) * n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) start[static_cast<size_t>(i) * n + j] = C.at(i, j);
    kernels::gemm16(Exec(), ta, 'N', 0.5f, as_mat(A), as_mat(B), format, 1.0f,
                    Mat(C.data.data(), m, n));
    kernels::gemm16(Exec(), ta, 'N', 1.0f, as_mat(A), as_mat(B), format, 0.0f,
                    HalfMat(C16.data.data(), m, n), ConstHalfVec(bias.data.data(), n));
    Exec().fence();
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (int p = 0; p < k; ++p) {
          const double product = op_at(A, ta, i, p, format) * op_at(B, 'N', p, j, format);
          sum += product;
          magnitude += std::fabs(product);
        }
        const double before = start[static_cast<size_t>(i) * n + j];
        ASSERT_NEAR(C.at(i, j), 0.5 * sum + before, (k + 2) * 6e-8 * (magnitude + before) + 1e-7)
            << ta << " fp32 C at row " << i << ", column " << j;
        const double with_bias = sum + from_half(bias.at(0, j), format);
        // One rounding to bf16 (2^-8 relative) after the fp32 sum.
        ASSERT_NEAR(from_half(C16.at(i, j), format), with_bias,
                    std::fabs(with_bias) * 4e-3 + (k + 2) * 6e-8 * magnitude + 1e-7)
            << ta << " bf16 C at row " << i << ", column " << j;
      }
  }
}

// A residual added in the epilogue (a row-parallel layer writing the residual stream): C = op(A)
// op(B) + bias + residual, summed in fp32 and rounded once, for bf16 and fp16, at an odd shape and
// one whose leading dimensions are multiples of 16 bytes; a residual laid out unlike C, or with
// beta 1, is refused. GPU builds run it through cuBLASLt's epilogue and, with the epilogues off
// (TRIDENT_CUBLASLT=0), check that the layers are told to add the residual themselves.
namespace {

void expect_residual_added_before_the_one_rounding(int m, int n, int k) {
  for (const Precision format : {Precision::kBf16, Precision::kFp16}) {
    const Matrix<uint16_t> A = random_half(m, k, 11, format), B = random_half(n, k, 12, format);
    const Matrix<uint16_t> bias = random_half(1, n, 13, format);
    const Matrix<uint16_t> residual = random_half(m, n, 14, format);
    Matrix<uint16_t> C(m, n);
    if (!kernels::fused_residual_add()) {  // the layers add it in their own kernel
      EXPECT_THROW(kernels::gemm16(Exec(), 'N', 'T', 1.0f, as_mat(A), as_mat(B), format, 0.0f,
                                   HalfMat(C.data.data(), m, n), ConstHalfVec(), as_mat(residual)),
                   std::logic_error);
      continue;
    }
    kernels::gemm16(Exec(), 'N', 'T', 1.0f, as_mat(A), as_mat(B), format, 0.0f,
                    HalfMat(C.data.data(), m, n), ConstHalfVec(bias.data.data(), n),
                    as_mat(residual));
    Exec().fence();
    int off_by_rounding = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double sum = from_half(bias.at(0, j), format) + from_half(residual.at(i, j), format);
        double magnitude = std::fabs(sum);
        for (int p = 0; p < k; ++p) {
          const double product = op_at(A, 'N', i, p, format) * op_at(B, 'T', p, j, format);
          sum += product;
          magnitude += std::fabs(product);
        }
        // The fp32 sum is within (k + 3) roundings of the exact one; rounded once to 16 bits it is
        // the exact sum's rounding, or a neighbour when the fp32 error crossed a midpoint.
        const uint16_t exact = to_half(static_cast<float>(sum), format);
        const uint16_t got = C.at(i, j);
        if (got != exact) {
          ++off_by_rounding;
          ASSERT_NEAR(from_half(got, format), sum,
                      std::fabs(sum) * (format == Precision::kBf16 ? 8e-3 : 1e-3) +
                          (k + 3) * 6e-8 * magnitude)
              << m << "x" << n << "x" << k << " at " << i << "," << j;
        }
      }
    EXPECT_LE(off_by_rounding, m * n / 10) << "most elements are the exact sum rounded once";
    Matrix<uint16_t> narrow(m, n - 1);
    EXPECT_THROW(kernels::gemm16(Exec(), 'N', 'T', 1.0f, as_mat(A), as_mat(B), format, 0.0f,
                                 HalfMat(C.data.data(), m, n), ConstHalfVec(), as_mat(narrow)),
                 std::logic_error);
    EXPECT_THROW(kernels::gemm16(Exec(), 'N', 'T', 1.0f, as_mat(A), as_mat(B), format, 1.0f,
                                 HalfMat(C.data.data(), m, n), ConstHalfVec(), as_mat(residual)),
                 std::logic_error);
  }
}

}  // namespace

TEST(Gemm16, ResidualIsAddedBeforeTheOneRounding) {
  with_epilogues_on_and_off([] {
    expect_residual_added_before_the_one_rounding(9, 6, 21);
    expect_residual_added_before_the_one_rounding(32, 16, 64);
  });
}

// GPT-2's GELU (tanh approximation) inside the MLP's projections (kernels/linear.hpp): forward
// fc = x W^T + b and act = gelu(fc), backward dfc = (dout W) * gelu'(fc), against double sums of
// the same 16-bit operands. GPU builds run them in cuBLASLt's GELU_AUX_BIAS and DGELU epilogues
// (the GELU of the fp32 sum) where it has an algorithm (16-column rows; 6 columns fall back),
// hosts as the GEMM and the GELU kernel (the GELU of the rounded fc): either is within one 16-bit
// ulp of the exact value, relative, plus the fp32 sum's error.
namespace {

double gelu_exact(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double gelu_slope(double x) {
  const double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

template <class E>
void expect_gelu_in_the_projections(int m, int n, int k) {
  const Precision format = E::format;
  const double ulp = format == Precision::kBf16 ? 1.0 / 128 : 1.0 / 1024;
  const Matrix<uint16_t> x = random_half(m, k, 21, format), W = random_half(n, k, 22, format);
  const Matrix<uint16_t> bias = random_half(1, n, 23, format);
  Matrix<uint16_t> fc(m, n), act(m, n);
  kernels::linear_forward_gelu<E>(Exec(), kernels::MatOf<E>(act.data.data(), m, n),
                                  kernels::MatOf<E>(fc.data.data(), m, n), as_mat(x), as_mat(W),
                                  kernels::ConstVecOf<E>(bias.data.data(), n));
  // Backward through the down projection: dout [m, k] times its weight [k, n].
  const Matrix<uint16_t> dout = random_half(m, k, 24, format), down = random_half(k, n, 25, format);
  Matrix<uint16_t> dfc(m, n);
  kernels::linear_backward_input_gelu<E>(Exec(), kernels::MatOf<E>(dfc.data.data(), m, n),
                                         kernels::MatOf<E>(dfc.data.data(), m, n), as_mat(dout),
                                         as_mat(down), as_mat(fc));
  Exec().fence();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = from_half(bias.at(0, j), format), magnitude = std::fabs(sum);
      double dsum = 0, dmagnitude = 0;
      for (int p = 0; p < k; ++p) {
        const double product = op_at(x, 'N', i, p, format) * op_at(W, 'T', p, j, format);
        const double dproduct = op_at(dout, 'N', i, p, format) * op_at(down, 'N', p, j, format);
        sum += product;
        magnitude += std::fabs(product);
        dsum += dproduct;
        dmagnitude += std::fabs(dproduct);
      }
      const double fp32 = (k + 3) * 6e-8, slope = gelu_slope(sum);
      const std::string at = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                             " at " + std::to_string(i) + "," + std::to_string(j);
      ASSERT_NEAR(from_half(fc.at(i, j), format), sum, ulp * std::fabs(sum) + fp32 * magnitude)
          << "fc " << at;
      ASSERT_NEAR(from_half(act.at(i, j), format), gelu_exact(sum),
                  ulp * (std::fabs(slope * sum) + std::fabs(gelu_exact(sum))) +
                      fp32 * magnitude * (1 + std::fabs(slope)) + 1e-6)
          << "act " << at;
      const double g = gelu_slope(from_half(fc.at(i, j), format));
      ASSERT_NEAR(from_half(dfc.at(i, j), format), dsum * g,
                  ulp * std::fabs(dsum * g) + fp32 * dmagnitude * std::fabs(g) + 1e-6)
          << "dfc " << at;
    }
}

void expect_gelu_in_the_projections_of_each_format(int m, int n, int k) {
  expect_gelu_in_the_projections<kernels::Bf16Elements>(m, n, k);
  expect_gelu_in_the_projections<kernels::Fp16Elements>(m, n, k);
}

}  // namespace

TEST(Gemm16, GeluInTheProjectionsMatchesDoubleSums) {
  with_epilogues_on_and_off([] {
    expect_gelu_in_the_projections_of_each_format(9, 6, 21);
    expect_gelu_in_the_projections_of_each_format(32, 16, 64);
  });
}

// A 16-bit linear layer's weight and bias gradients (kernels::linear_backward_weight): GPU builds
// take the bias gradient in the weight GEMM's epilogue (cuBLASLt's BGRADB) and add it to the
// gradient, hosts sum its columns; either way dW (+)= dout^T x and dbias += the column sums of
// dout, to the fp32 sums' error, accumulating into what was there or overwriting dW.
namespace {

template <class E>
void expect_weight_and_bias_gradients(int rows, int out, int in, bool accumulate) {
  const Precision format = E::format;
  const Matrix<uint16_t> dout = random_half(rows, out, 31, format),
                         x = random_half(rows, in, 32, format);
  Matrix<float> dW(out, in), dbias(1, out);
  for (int o = 0; o < out; ++o) {
    dbias.at(0, o) = 0.25f * o;
    for (int i = 0; i < in; ++i) dW.at(o, i) = 0.5f - 0.01f * (o + i);
  }
  const size_t partial_floats = kernels::column_partials_elements(1, rows, out);
  Kokkos::View<float*, Kokkos::LayoutRight, TestSpace> partials("partials", partial_floats);
  kernels::linear_backward_weight<E>(
      Exec(), Mat(dW.data.data(), out, in), Vec(dbias.data.data(), out), as_mat(dout), as_mat(x),
      accumulate, kernels::kBuildShape, Vec(partials.data(), partial_floats));
  Exec().fence();
  for (int o = 0; o < out; ++o) {
    double bias_sum = 0.25 * o, bias_magnitude = std::fabs(bias_sum);
    for (int r = 0; r < rows; ++r) {
      bias_sum += from_half(dout.at(r, o), format);
      bias_magnitude += std::fabs(from_half(dout.at(r, o), format));
    }
    ASSERT_NEAR(dbias.at(0, o), bias_sum, (rows + 3) * 6e-8 * bias_magnitude) << "dbias " << o;
    for (int i = 0; i < in; ++i) {
      double sum = accumulate ? 0.5 - 0.01 * (o + i) : 0.0, magnitude = std::fabs(sum);
      for (int r = 0; r < rows; ++r) {
        const double product =
            from_half(dout.at(r, o), format) * static_cast<double>(from_half(x.at(r, i), format));
        sum += product;
        magnitude += std::fabs(product);
      }
      ASSERT_NEAR(dW.at(o, i), sum, (rows + 3) * 6e-8 * magnitude) << "dW " << o << "," << i;
    }
  }
}

void expect_weight_and_bias_gradients_of_each_format(int rows, int out, int in) {
  for (const bool accumulate : {true, false}) {
    expect_weight_and_bias_gradients<kernels::Bf16Elements>(rows, out, in, accumulate);
    expect_weight_and_bias_gradients<kernels::Fp16Elements>(rows, out, in, accumulate);
  }
}

}  // namespace

TEST(Gemm16, BiasGradientBesideTheWeightGradient) {
  with_epilogues_on_and_off([] {
    expect_weight_and_bias_gradients_of_each_format(300, 24, 16);
    expect_weight_and_bias_gradients_of_each_format(64, 6, 9);
  });
}

TEST(Gemm16, StridedBatchedIsEachItemsGemm) {
  const int m = 6, n = 5, k = 8, batch = 3;
  for (const Precision format : {Precision::kBf16, Precision::kFp16}) {
    const Matrix<uint16_t> A = random_half(batch * m, k, 5, format);  // item b: rows b*m..
    const Matrix<uint16_t> B = random_half(batch * k, n, 6, format);
    Matrix<float> C(batch * m, n), each(m, n);
    for (int i = 0; i < batch * m; ++i)
      for (int j = 0; j < n; ++j) C.at(i, j) = 0.5f * static_cast<float>(i - j);
    Matrix<float> start(batch * m, n);
    Kokkos::deep_copy(start.data, C.data);
    kernels::gemm16_strided_batched(Exec(), 'N', 'N', m, n, k, 1.0f, A.data.data(), k,
                                    static_cast<long long>(m) * k, B.data.data(), n,
                                    static_cast<long long>(k) * n, format, 1.0f, C.data.data(), n,
                                    static_cast<long long>(m) * n, batch);
    Exec().fence();
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) each.at(i, j) = start.at(b * m + i, j);
      kernels::gemm16(Exec(), 'N', 'N', 1.0f,
                      ConstHalfMat(A.data.data() + static_cast<size_t>(b) * m * k, m, k),
                      ConstHalfMat(B.data.data() + static_cast<size_t>(b) * k * n, k, n), format,
                      1.0f, Mat(each.data.data(), m, n));
      Exec().fence();
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          ASSERT_EQ(C.at(b * m + i, j), each.at(i, j)) << "item " << b << " at " << i << "," << j;
    }
  }
}

#if !defined(KOKKOS_ENABLE_CUDA)
// oneDNN's bf16 matmuls at 1 and 2 OpenMP threads, at the tiny model's shapes (forward, input and
// weight gradients: the last sums over the N = 256 token rows, where a library may split the sum
// across threads): the same bits where oneDNN keeps the order of each sum, else within the
// bound of fp32 summation, and the test says which shapes differ (as the BLAS probe of
// tests/e2e/threads_determinism.sh does for OpenBLAS).
TEST(Gemm16, ThreadCountsGiveTheSameBitsOrSayWhichShapesDiffer) {
  struct Case {
    char ta, tb;
    int m, n, k;
  };
  const Case cases[] = {{'N', 'T', 256, 96, 32},  {'N', 'N', 256, 32, 96},
                        {'T', 'N', 96, 32, 256},  {'N', 'T', 256, 128, 32},
                        {'T', 'N', 32, 128, 256}, {'N', 'T', 256, 256, 32}};
  const int saved = omp_get_max_threads();
  int differing = 0;
  for (const Case& c : cases) {
    const Matrix<uint16_t> A =
        random_half(c.ta == 'T' ? c.k : c.m, c.ta == 'T' ? c.m : c.k, 3, Precision::kBf16);
    const Matrix<uint16_t> B =
        random_half(c.tb == 'T' ? c.n : c.k, c.tb == 'T' ? c.k : c.n, 4, Precision::kBf16);
    Matrix<float> one(c.m, c.n), two(c.m, c.n);
    omp_set_num_threads(1);
    kernels::gemm16(Exec(), c.ta, c.tb, 1.0f, as_mat(A), as_mat(B), Precision::kBf16, 0.0f,
                    Mat(one.data.data(), c.m, c.n));
    omp_set_num_threads(2);
    kernels::gemm16(Exec(), c.ta, c.tb, 1.0f, as_mat(A), as_mat(B), Precision::kBf16, 0.0f,
                    Mat(two.data.data(), c.m, c.n));
    omp_set_num_threads(saved);
    const size_t bytes = static_cast<size_t>(c.m) * c.n * sizeof(float);
    if (std::memcmp(one.data.data(), two.data.data(), bytes) == 0) continue;
    ++differing;
    std::printf("oneDNN bf16 %c%c %dx%dx%d: other bits at 2 threads than at 1\n", c.ta, c.tb, c.m,
                c.n, c.k);
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) {
        double magnitude = 0;
        for (int p = 0; p < c.k; ++p)
          magnitude += std::fabs(op_at(A, c.ta, i, p, Precision::kBf16) *
                                 op_at(B, c.tb, p, j, Precision::kBf16));
        ASSERT_NEAR(two.at(i, j), one.at(i, j), 2 * (c.k + 2) * 6e-8 * magnitude)
            << c.ta << c.tb << " " << c.m << "x" << c.n << "x" << c.k;
      }
  }
  std::printf("oneDNN bf16 matmuls: %d of %zu shapes give other bits at 2 threads than at 1\n",
              differing, sizeof(cases) / sizeof(cases[0]));
}
#endif
