// Residual add. Its backward is the identity on both inputs, so the model realises it by
// accumulating into the residual stream's gradient (every consumer's dinp uses +=) instead of
// a separate pass.
#pragma once

#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// out = a + b, in any storage format E (kernels/elements.hpp); out may alias a.
template <class E = Fp32Elements>
inline void residual_forward(const Exec& exec, const VecOf<E>& out, const ConstVecOf<E>& a,
                             const ConstVecOf<E>& b) {
  Region region("trident::residual_forward");
  Kokkos::parallel_for(
      "residual_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)),
      KOKKOS_LAMBDA(size_t i) { out(i) = E::store(E::load(a(i)) + E::load(b(i))); });
}

}  // namespace trident::kernels
