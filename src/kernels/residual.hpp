// Residual add. Its backward is the identity on both inputs, so the model realises it by
// accumulating into the residual stream's gradient (every consumer's dinp uses +=) instead of
// a separate pass.
#pragma once

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// out = a + b; out may alias a.
inline void residual_forward(const Exec& exec, const Vec& out, const ConstVec& a,
                             const ConstVec& b) {
  Region region("trident::residual_forward");
  Kokkos::parallel_for(
      "residual_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)),
      KOKKOS_LAMBDA(size_t i) { out(i) = a(i) + b(i); });
}

}  // namespace trident::kernels
