// Token + position embedding: forward gathers rows, backward scatter-adds them.
#pragma once

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// out[N,C] = wte[tokens[n], :] + wpe[n % T, :]
inline void embedding_forward(const Exec& exec, const Mat& out, const ConstIntVec& tokens,
                              const ConstMat& wte, const ConstMat& wpe, int T) {
  Region region("trident::embedding_forward");
  const int C = static_cast<int>(out.extent(1));
  Kokkos::parallel_for(
      "embedding_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)), KOKKOS_LAMBDA(int n) {
        const int tok = tokens(n), t = n % T;
        for (int c = 0; c < C; ++c) out(n, c) = wte(tok, c) + wpe(t, c);
      });
}

// dwte[V,C] += scatter of dout rows by token; dwpe[T,C] += sum over batch.
// Parallel over channels with a sequential loop over rows, so the summation order (and the
// result) is the same on every backend.
inline void embedding_backward(const Exec& exec, const Mat& dwte, const Mat& dwpe,
                               const ConstMat& dout, const ConstIntVec& tokens, int T) {
  Region region("trident::embedding_backward");
  const int N = static_cast<int>(dout.extent(0));
  Kokkos::parallel_for(
      "embedding_backward", Kokkos::RangePolicy<Exec>(exec, 0, dout.extent(1)),
      KOKKOS_LAMBDA(int c) {
        for (int n = 0; n < N; ++n) {
          const float g = dout(n, c);
          dwte(tokens(n), c) += g;
          dwpe(n % T, c) += g;
        }
      });
}

}  // namespace trident::kernels
