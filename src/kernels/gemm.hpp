// The one GEMM dispatch: KokkosBlas::gemm (OpenBLAS on host spaces, cuBLAS on CUDA builds).
#pragma once

#include <KokkosBlas3_gemm.hpp>

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// C = alpha * op(A) * op(B) + beta * C, with op = transpose when trans_* is 'T'.
inline void gemm(const Exec& exec, char trans_a, char trans_b, float alpha, const ConstMat& A,
                 const ConstMat& B, float beta, const Mat& C) {
  Region region("trident::gemm");
  const char ta[2] = {trans_a, '\0'};
  const char tb[2] = {trans_b, '\0'};
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40000
  KokkosBlas::gemm(exec, ta, tb, alpha, A, B, beta, C);
#else
  // KokkosKernels before 4.0 has no execution-space overload: order work explicitly.
  exec.fence();
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
#endif
}

}  // namespace trident::kernels
