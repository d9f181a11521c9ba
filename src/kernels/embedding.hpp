// Token + position embedding over a (possibly vocabulary-parallel) slice of the token table:
// forward gathers rows, backward scatter-adds them.
#pragma once

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// out[N,C] = wte[tokens[n] - vocab_start, :] (0 when this slice does not hold the token)
//          + wpe[n % T, :] (skipped when wpe is empty: a tp rank other than 0 adds no position
//          term, so the sum over the tp group counts it once).
inline void embedding_forward(const Exec& exec, const Mat& out, const ConstIntVec& tokens,
                              const ConstMat& wte, const ConstMat& wpe, int T, int vocab_start) {
  Region region("trident::embedding_forward");
  const int C = static_cast<int>(out.extent(1));
  const int rows = static_cast<int>(wte.extent(0));
  const bool with_positions = wpe.extent(0) > 0;
  Kokkos::parallel_for(
      "embedding_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)), KOKKOS_LAMBDA(int n) {
        const int row = tokens(n) - vocab_start, t = n % T;
        const bool held = row >= 0 && row < rows;
        for (int c = 0; c < C; ++c)
          out(n, c) = (held ? wte(row, c) : 0.0f) + (with_positions ? wpe(t, c) : 0.0f);
      });
}

// dwte[V_slice,C] += scatter of dout rows by token (held tokens only); dwpe[T,C] += sum over
// the batch. Parallel over channels with a sequential loop over rows, so the summation order
// (and the result) is the same on every backend.
inline void embedding_backward(const Exec& exec, const Mat& dwte, const Mat& dwpe,
                               const ConstMat& dout, const ConstIntVec& tokens, int T,
                               int vocab_start) {
  Region region("trident::embedding_backward");
  const int N = static_cast<int>(dout.extent(0));
  const int rows = static_cast<int>(dwte.extent(0));
  Kokkos::parallel_for(
      "embedding_backward", Kokkos::RangePolicy<Exec>(exec, 0, dout.extent(1)),
      KOKKOS_LAMBDA(int c) {
        for (int n = 0; n < N; ++n) {
          const float g = dout(n, c);
          const int row = tokens(n) - vocab_start;
          if (row >= 0 && row < rows) dwte(row, c) += g;
          dwpe(n % T, c) += g;
        }
      });
}

}  // namespace trident::kernels
