// Elementwise buffer kernels the drivers need: exchange two buffers, scale one, add one to another.
#pragma once

#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// a <-> b, element by element (same extent).
inline void swap_values(const Exec& exec, const View1& a, const View1& b) {
  Region region("trident::swap_values");
  Kokkos::parallel_for(
      "swap_values", Kokkos::RangePolicy<Exec>(exec, 0, a.extent(0)), KOKKOS_LAMBDA(size_t i) {
        const float t = a(i);
        a(i) = b(i);
        b(i) = t;
      });
}

// x *= factor.
inline void scale(const Exec& exec, const Vec& x, float factor) {
  Region region("trident::scale");
  Kokkos::parallel_for(
      "scale", Kokkos::RangePolicy<Exec>(exec, 0, x.extent(0)),
      KOKKOS_LAMBDA(size_t i) { x(i) *= factor; });
}

// y += x (same extent).
inline void add_values(const Exec& exec, const Vec& y, const ConstVec& x) {
  Region region("trident::add_values");
  Kokkos::parallel_for(
      "add_values", Kokkos::RangePolicy<Exec>(exec, 0, y.extent(0)),
      KOKKOS_LAMBDA(size_t i) { y(i) += x(i); });
}

}  // namespace trident::kernels
