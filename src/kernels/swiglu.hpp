// SwiGLU (Llama's MLP activation): silu(gate) * up, forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// The gate and up projections come out of one column-parallel GEMM, so each row of `fc` [N, 2F]
// holds gate | up; out[N, F] = silu(gate) * up with silu(x) = x sigmoid(x). Stored as E.
template <class E = Fp32Elements>
inline void swiglu_forward(const Exec& exec, const MatOf<E>& out, const ConstMatOf<E>& fc) {
  Region region("trident::swiglu_forward");
  const int F = static_cast<int>(out.extent(1));
  Kokkos::parallel_for(
      "swiglu_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0) * F),
      KOKKOS_LAMBDA(size_t i) {
        const size_t n = i / F;
        const int j = static_cast<int>(i % F);
        const float gate = E::load(fc(n, j)), up = E::load(fc(n, F + j));
        out(n, j) = E::store(gate / (1.0f + kmath::exp_vec(-gate)) * up);
      });
}

// dfc[N, 2F] = d/d(gate | up) from dout[N, F] and forward's fc (dfc must not alias either).
template <class E = Fp32Elements>
inline void swiglu_backward(const Exec& exec, const MatOf<E>& dfc, const ConstMatOf<E>& dout,
                            const ConstMatOf<E>& fc) {
  Region region("trident::swiglu_backward");
  const int F = static_cast<int>(dout.extent(1));
  Kokkos::parallel_for(
      "swiglu_backward", Kokkos::RangePolicy<Exec>(exec, 0, dout.extent(0) * F),
      KOKKOS_LAMBDA(size_t i) {
        const size_t n = i / F;
        const int j = static_cast<int>(i % F);
        const float gate = E::load(fc(n, j)), up = E::load(fc(n, F + j)), g = E::load(dout(n, j));
        const float sig = 1.0f / (1.0f + kmath::exp_vec(-gate));
        dfc(n, j) = E::store(g * up * sig * (1.0f + gate * (1.0f - sig)));
        dfc(n, F + j) = E::store(g * gate * sig);
      });
}

}  // namespace trident::kernels
