// The one GEMM dispatch: CBLAS sgemm on host execution spaces (Debian's OpenBLAS by default).
#pragma once

#include <cblas.h>

#include <algorithm>

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// C = alpha * op(A) * op(B) + beta * C, with op = transpose when trans_* is 'T'. The Views are
// row-major (LayoutRight), so their row stride is the leading dimension CBLAS takes.
inline void gemm(const Exec& exec, char trans_a, char trans_b, float alpha, const ConstMat& A,
                 const ConstMat& B, float beta, const Mat& C) {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible,
                "a device build needs its own GEMM (cuBLAS)");
  Region region("trident::gemm");
  exec.fence();  // BLAS runs outside Kokkos: the kernels writing A, B and C must have finished
  const auto leading = [](auto view) { return std::max<int>(1, static_cast<int>(view.stride(0))); };
  const int m = static_cast<int>(C.extent(0)), n = static_cast<int>(C.extent(1));
  const int k = static_cast<int>(trans_a == 'T' ? A.extent(0) : A.extent(1));
  cblas_sgemm(CblasRowMajor, trans_a == 'T' ? CblasTrans : CblasNoTrans,
              trans_b == 'T' ? CblasTrans : CblasNoTrans, m, n, k, alpha, A.data(), leading(A),
              B.data(), leading(B), beta, C.data(), leading(C));
}

// The same on raw row-major blocks, for a kernel's work item on a host space: no fence and no
// profiling region, as it runs inside a parallel loop. Called from inside an OpenMP parallel
// region, Debian's OpenMP OpenBLAS runs it on the calling thread alone, so concurrent work items
// do not fight over the cores, and each result is the same whatever the number of threads.
inline void gemm_block(char trans_a, char trans_b, int m, int n, int k, float alpha, const float* A,
                       int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible,
                "a device build needs its own GEMM (cuBLAS)");
  cblas_sgemm(CblasRowMajor, trans_a == 'T' ? CblasTrans : CblasNoTrans,
              trans_b == 'T' ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

}  // namespace trident::kernels
