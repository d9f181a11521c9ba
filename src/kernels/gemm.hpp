// The one GEMM dispatch: cuBLAS on Kokkos' stream in GPU builds; on host execution spaces CBLAS
// sgemm (Debian's OpenBLAS by default) for fp32 operands and oneDNN for 16-bit ones.
#pragma once

#include <algorithm>
#include <stdexcept>

#include "core/half.hpp"
#include "core/launch_profiler.hpp"
#include "core/precision.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cublas.hpp"
#else
#include <cblas.h>

#include "kernels/onednn.hpp"
#endif

namespace trident::kernels {

// How GPU GEMMs multiply their fp32 operands. Under 16-bit compute every operand already holds a
// bf16 (fp16) value, so cuBLAS's down-conversion to bf16 (fp16) is exact: kBf16 and kFp16 are real
// 16-bit products on tensor cores with fp32 accumulation, reading fp32 words. kTf32 rounds fp32
// operands to TF32 (10-bit mantissa): an opt-in for fp32 runs. Host builds multiply in fp32 always.
enum class GemmMath { kFp32, kTf32, kBf16, kFp16 };

inline GemmMath& gemm_math_setting() {
  static GemmMath math = GemmMath::kFp32;
  return math;
}
// The math of every GEMM from now on (the trainer sets it from [precision] before the first step).
inline void set_gemm_math(GemmMath math) {
  gemm_math_setting() = math;
}
inline GemmMath gemm_math() {
  return gemm_math_setting();
}

// Whether 16-bit GEMMs add a residual in their epilogue (gemm16's `residual`): oneDNN's binary
// post-op on CPUs, cuBLASLt's C != D on GPUs (unless TRIDENT_CUBLASLT=0: then the layers add the
// residual in its own kernel).
inline bool fused_residual_add() {
#if defined(KOKKOS_ENABLE_CUDA)
  return cublaslt_epilogues();
#else
  return true;
#endif
}
inline const char* describe(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return "TF32 tensor cores, fp32 accumulation";
    case GemmMath::kBf16:
      return "bf16 tensor cores, fp32 accumulation";
    case GemmMath::kFp16:
      return "fp16 tensor cores, fp32 accumulation";
    case GemmMath::kFp32:
      break;
  }
  return "fp32";
}

#if defined(KOKKOS_ENABLE_CUDA)
static_assert(std::is_same_v<Exec, Kokkos::Cuda>, "GPU builds run their kernels on Kokkos::Cuda");

// Row-major C[m,n] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets the operands
// swapped, each with its own transpose flag, and the same leading dimensions.
inline cublasOperation_t cublas_op(char trans) {
  return trans == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N;
}

inline cublasComputeType_t cublas_compute(GemmMath math) {
  switch (math) {
    case GemmMath::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmMath::kFp16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
    case GemmMath::kFp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}
#endif

// C = alpha * op(A) * op(B) + beta * C, with op = transpose when trans_* is 'T'. The Views are
// row-major (LayoutRight), so their row stride is the leading dimension BLAS takes.
inline void gemm(const Exec& exec, char trans_a, char trans_b, float alpha, const ConstMat& A,
                 const ConstMat& B, float beta, const Mat& C) {
  Region region("trident::gemm");
  const auto leading = [](auto view) { return std::max<int>(1, static_cast<int>(view.stride(0))); };
  const int m = static_cast<int>(C.extent(0)), n = static_cast<int>(C.extent(1));
  const int k = static_cast<int>(trans_a == 'T' ? A.extent(0) : A.extent(1));
  ProfiledCall call;
  call.open_gemm("gemm", trans_a, trans_b, m, n, k);
#if defined(KOKKOS_ENABLE_CUDA)
  TRIDENT_CUBLAS(cublas_api().gemm_ex(
      cublas_on(exec), cublas_op(trans_b), cublas_op(trans_a), n, m, k, &alpha, B.data(),
      CUDA_R_32F, leading(B), A.data(), CUDA_R_32F, leading(A), &beta, C.data(), CUDA_R_32F,
      leading(C), cublas_compute(gemm_math()), CUBLAS_GEMM_DEFAULT));
#else
  exec.fence();  // BLAS runs outside Kokkos: the kernels writing A, B and C must have finished
  cblas_sgemm(CblasRowMajor, trans_a == 'T' ? CblasTrans : CblasNoTrans,
              trans_b == 'T' ? CblasTrans : CblasNoTrans, m, n, k, alpha, A.data(), leading(A),
              B.data(), leading(B), beta, C.data(), leading(C));
#endif
}

// C (fp32) = alpha * op(A) * op(B) + beta * C with A and B 16-bit bit patterns in `format` (bf16
// or fp16): the products are exact in fp32 and summed in fp32 (cuBLAS on tensor cores; oneDNN on
// CPUs, see kernels/onednn.hpp). beta = 1 accumulates into C, as weight gradients do.
inline void gemm16(const Exec& exec, char trans_a, char trans_b, float alpha, const ConstHalfMat& A,
                   const ConstHalfMat& B, Precision format, float beta, const Mat& C) {
  Region region("trident::gemm16");
  const auto leading = [](auto view) { return std::max<int>(1, static_cast<int>(view.stride(0))); };
  const int m = static_cast<int>(C.extent(0)), n = static_cast<int>(C.extent(1));
  const int k = static_cast<int>(trans_a == 'T' ? A.extent(0) : A.extent(1));
  ProfiledCall call;
  call.open_gemm("gemm16", trans_a, trans_b, m, n, k);
#if defined(KOKKOS_ENABLE_CUDA)
  const cudaDataType_t type = format == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  TRIDENT_CUBLAS(cublas_api().gemm_ex(cublas_on(exec), cublas_op(trans_b), cublas_op(trans_a), n, m,
                                      k, &alpha, B.data(), type, leading(B), A.data(), type,
                                      leading(A), &beta, C.data(), CUDA_R_32F, leading(C),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
#else
  exec.fence();  // oneDNN runs outside Kokkos, like BLAS
  onednn::gemm(trans_a, trans_b, m, n, k, alpha, A.data(), leading(A), B.data(), leading(B), beta,
               C.data(), leading(C), format);
#endif
}

// C (16-bit, in `format`) = alpha * op(A) * op(B) + bias + beta * C, summed in fp32 and rounded
// once into C: a 16-bit layer's output. bias: [n] in `format` added to every row, or empty (only
// with beta 0). oneDNN adds it in the matmul's epilogue, and so does cuBLASLt on GPUs; with
// TRIDENT_CUBLASLT=0 (or no cuBLASLt algorithm for the shape) cuBLAS adds the product to C filled
// with it (exact: the bias already holds 16-bit values). `residual` ([m, n] like C, or empty; with
// beta 0, where fused_residual_add()) is added in the same epilogue: a row-parallel layer's
// output and the residual stream in one rounding.
inline void gemm16(const Exec& exec, char trans_a, char trans_b, float alpha, const ConstHalfMat& A,
                   const ConstHalfMat& B, Precision format, float beta, const HalfMat& C,
                   const ConstHalfVec& bias = ConstHalfVec(),
                   const ConstHalfMat& residual = ConstHalfMat()) {
  Region region("trident::gemm16");
  const auto leading = [](auto view) { return std::max<int>(1, static_cast<int>(view.stride(0))); };
  const int m = static_cast<int>(C.extent(0)), n = static_cast<int>(C.extent(1));
  const int k = static_cast<int>(trans_a == 'T' ? A.extent(0) : A.extent(1));
  const bool adds_residual = residual.extent(0) > 0;
  if (adds_residual && (residual.extent(0) != C.extent(0) || residual.extent(1) != C.extent(1) ||
                        leading(residual) != leading(C) || beta != 0.0f || !fused_residual_add()))
    throw std::logic_error(
        "gemm16: a residual must be laid out like C, with beta 0, where the epilogue adds it");
#if defined(KOKKOS_ENABLE_CUDA)
  if ((bias.extent(0) > 0 || adds_residual) && beta == 0.0f && cublaslt_epilogues()) {
    if (gemm16_epilogue(exec, trans_a, trans_b, m, n, k, alpha, A.data(), leading(A), B.data(),
                        leading(B), format, C.data(), leading(C),
                        bias.extent(0) > 0 ? bias.data() : nullptr,
                        adds_residual ? residual.data() : nullptr))
      return;
  }
  if (adds_residual) {  // no cuBLASLt algorithm for it: C starts as residual + bias, rounded
    const ConstHalfMat r = residual;
    const bool has_bias = bias.extent(0) > 0;
    const bool bf16 = format == Precision::kBf16;
    Kokkos::parallel_for(
        "gemm16_bias_residual", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(m) * n),
        KOKKOS_LAMBDA(size_t e) {
          const int i = static_cast<int>(e / n), j = static_cast<int>(e % n);
          const float sum = (bf16 ? from_bf16(r(i, j)) : from_fp16(r(i, j))) +
                            (has_bias ? (bf16 ? from_bf16(bias(j)) : from_fp16(bias(j))) : 0.0f);
          C(i, j) = bf16 ? to_bf16(sum) : to_fp16(sum);
        });
    beta = 1.0f;
  } else if (bias.extent(0) > 0) {
    Kokkos::parallel_for(
        "gemm16_bias", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(m) * n),
        KOKKOS_LAMBDA(size_t e) { C(e / n, e % n) = bias(e % n); });
    beta = 1.0f;
  }
  const cudaDataType_t type = format == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  ProfiledCall call;
  call.open_gemm("gemm16_out", trans_a, trans_b, m, n, k);
  TRIDENT_CUBLAS(cublas_api().gemm_ex(cublas_on(exec), cublas_op(trans_b), cublas_op(trans_a), n, m,
                                      k, &alpha, B.data(), type, leading(B), A.data(), type,
                                      leading(A), &beta, C.data(), type, leading(C),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
#else
  exec.fence();
  ProfiledCall call;
  call.open_gemm("gemm16_out", trans_a, trans_b, m, n, k);
  onednn::gemm_to_half(trans_a, trans_b, m, n, k, alpha, A.data(), leading(A), B.data(), leading(B),
                       beta, C.data(), leading(C), bias.extent(0) > 0 ? bias.data() : nullptr,
                       adds_residual ? residual.data() : nullptr, format);
#endif
}

// `batch` row-major GEMMs C_i = alpha op(A_i) op(B_i) + beta C_i, where X_i = X + i * stride_x: one
// cuBLAS launch for all heads of a sequence (attention on GPUs). Host builds run the same
// column-major calls one by one through CBLAS, so that the GPU's algorithm is tested here.
inline void gemm_strided_batched(const Exec& exec, char trans_a, char trans_b, int m, int n, int k,
                                 float alpha, const float* A, int lda, long long stride_a,
                                 const float* B, int ldb, long long stride_b, float beta, float* C,
                                 int ldc, long long stride_c, int batch) {
  ProfiledCall call;
  call.open_gemm("gemm_batched", trans_a, trans_b, m, n, k, batch);
#if defined(KOKKOS_ENABLE_CUDA)
  TRIDENT_CUBLAS(cublas_api().gemm_strided_batched_ex(
      cublas_on(exec), cublas_op(trans_b), cublas_op(trans_a), n, m, k, &alpha, B, CUDA_R_32F, ldb,
      stride_b, A, CUDA_R_32F, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
      cublas_compute(gemm_math()), CUBLAS_GEMM_DEFAULT));
#else
  exec.fence();
  for (int i = 0; i < batch; ++i)
    cblas_sgemm(CblasColMajor, trans_b == 'T' ? CblasTrans : CblasNoTrans,
                trans_a == 'T' ? CblasTrans : CblasNoTrans, n, m, k, alpha, B + i * stride_b, ldb,
                A + i * stride_a, lda, beta, C + i * stride_c, ldc);
#endif
}

// The same on 16-bit A_i and B_i (bit patterns in `format`) with fp32 C_i: the batched products
// of 16-bit attention (a head's q k^T scores, and the probabilities rounded to 16 bits times v).
// Host builds run oneDNN's matmul per item.
inline void gemm16_strided_batched(const Exec& exec, char trans_a, char trans_b, int m, int n,
                                   int k, float alpha, const uint16_t* A, int lda,
                                   long long stride_a, const uint16_t* B, int ldb,
                                   long long stride_b, Precision format, float beta, float* C,
                                   int ldc, long long stride_c, int batch) {
  Region region("trident::gemm16_strided_batched");
  ProfiledCall call;
  call.open_gemm("gemm16_batched", trans_a, trans_b, m, n, k, batch);
#if defined(KOKKOS_ENABLE_CUDA)
  const cudaDataType_t type = format == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  TRIDENT_CUBLAS(cublas_api().gemm_strided_batched_ex(
      cublas_on(exec), cublas_op(trans_b), cublas_op(trans_a), n, m, k, &alpha, B, type, ldb,
      stride_b, A, type, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
#else
  exec.fence();
  for (int i = 0; i < batch; ++i)
    onednn::gemm(trans_a, trans_b, m, n, k, alpha, A + i * stride_a, lda, B + i * stride_b, ldb,
                 beta, C + i * stride_c, ldc, format);
#endif
}

#if !defined(KOKKOS_ENABLE_CUDA)
// The same on raw row-major blocks, for a kernel's work item on a host space: no fence and no
// profiling region, as it runs inside a parallel loop. Called from inside an OpenMP parallel
// region, Debian's OpenMP OpenBLAS runs it on the calling thread alone, so concurrent work items
// do not fight over the cores, and each result is the same whatever the number of threads.
inline void gemm_block(char trans_a, char trans_b, int m, int n, int k, float alpha, const float* A,
                       int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == 'T' ? CblasTrans : CblasNoTrans,
              trans_b == 'T' ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C,
              ldc);
}
#endif

}  // namespace trident::kernels
