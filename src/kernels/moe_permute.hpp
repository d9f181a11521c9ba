// Mixture-of-Experts token movement: token rows into the expert-ordered buffer and back,
// combined in slot order so that a token's output does not depend on where its experts ran.
#pragma once

#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// dispatched[row(t, s)] = x[t] for every kept slot (rows of dropped slots are not written).
template <class E = Fp32Elements>
inline void moe_dispatch_rows(const Exec& exec, const MatOf<E>& dispatched, const ConstMatOf<E>& x,
                              const ConstIntMat& row) {
  Region region("trident::moe_dispatch_rows");
  const int C = static_cast<int>(x.extent(1)), k = static_cast<int>(row.extent(1));
  Kokkos::parallel_for(
      "moe_dispatch_rows", Kokkos::RangePolicy<Exec>(exec, 0, row.extent(0) * k * C),
      KOKKOS_LAMBDA(size_t i) {
        const size_t t = i / (size_t(k) * C);
        const int s = static_cast<int>(i / C % k), c = static_cast<int>(i % C);
        const int r = row(t, s);
        if (r >= 0) dispatched(r, c) = x(t, c);
      });
}

// out[t] = residual[t] + shared[t] + Σ_s weight(t, s) expert_out[row(t, s)] over kept slots,
// summed in that order (slots in slot order) in fp32 and rounded once (a dropped slot contributes
// zero; the surviving weights are not renormalised). residual and shared (the shared experts'
// output) may be empty; out may alias residual.
template <class E = Fp32Elements>
inline void moe_combine(const Exec& exec, const MatOf<E>& out, const ConstMatOf<E>& expert_out,
                        const ConstIntMat& row, const ConstMat& weight,
                        const ConstMatOf<E>& residual = {}, const ConstMatOf<E>& shared = {}) {
  Region region("trident::moe_combine");
  const int C = static_cast<int>(out.extent(1)), k = static_cast<int>(row.extent(1));
  const bool has_residual = residual.extent(0) > 0, has_shared = shared.extent(0) > 0;
  Kokkos::parallel_for(
      "moe_combine", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0) * C),
      KOKKOS_LAMBDA(size_t i) {
        const size_t t = i / C;
        const int c = static_cast<int>(i % C);
        float sum = has_residual ? E::load(residual(t, c)) : 0.0f;
        if (has_shared) sum += E::load(shared(t, c));
        for (int s = 0; s < k; ++s)
          if (row(t, s) >= 0) sum += weight(t, s) * E::load(expert_out(row(t, s), c));
        out(t, c) = E::store(sum);
      });
}

// Backward of moe_combine: dexpert_out[row(t, s)] = weight(t, s) dout[t], and
// dweight(t, s) = <dout[t], expert_out[row(t, s)]> (0 for a dropped slot), in fp32.
template <class E = Fp32Elements>
inline void moe_combine_backward(const Exec& exec, const MatOf<E>& dexpert_out, const Mat& dweight,
                                 const ConstMatOf<E>& dout, const ConstMatOf<E>& expert_out,
                                 const ConstIntMat& row, const ConstMat& weight) {
  Region region("trident::moe_combine_backward");
  const int C = static_cast<int>(dout.extent(1)), k = static_cast<int>(row.extent(1));
  Kokkos::parallel_for(
      "moe_combine_backward", Kokkos::RangePolicy<Exec>(exec, 0, row.extent(0) * k),
      KOKKOS_LAMBDA(size_t i) {
        const size_t t = i / k;
        const int s = static_cast<int>(i % k), r = row(t, s);
        float dot = 0.0f;
        if (r >= 0)
          for (int c = 0; c < C; ++c) {
            const float g = E::load(dout(t, c));
            dot += g * E::load(expert_out(r, c));
            dexpert_out(r, c) = E::store(weight(t, s) * g);
          }
        dweight(t, s) = dot;
      });
}

// Backward of moe_dispatch_rows: dx[t] = extra[t] + Σ_s ddispatched[row(t, s)] over kept slots,
// in slot order, summed in fp32 and rounded once (extra: the router's part, fp32; may be empty).
template <class E = Fp32Elements>
inline void moe_dispatch_rows_backward(const Exec& exec, const MatOf<E>& dx,
                                       const ConstMatOf<E>& ddispatched, const ConstIntMat& row,
                                       const ConstMat& extra) {
  Region region("trident::moe_dispatch_rows_backward");
  const int C = static_cast<int>(dx.extent(1)), k = static_cast<int>(row.extent(1));
  const bool has_extra = extra.extent(0) > 0;
  Kokkos::parallel_for(
      "moe_dispatch_rows_backward", Kokkos::RangePolicy<Exec>(exec, 0, dx.extent(0) * C),
      KOKKOS_LAMBDA(size_t i) {
        const size_t t = i / C;
        const int c = static_cast<int>(i % C);
        float sum = has_extra ? extra(t, c) : 0.0f;
        for (int s = 0; s < k; ++s)
          if (row(t, s) >= 0) sum += E::load(ddispatched(row(t, s), c));
        dx(t, c) = E::store(sum);
      });
}

}  // namespace trident::kernels
