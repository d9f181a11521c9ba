// Conversions between fp32 buffers and 16-bit (bf16 / fp16) storage, and copies of stored tensors.
#pragma once

#include <stdexcept>
#include <string>

#include "core/half.hpp"
#include "core/stored.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// out[i] = to_half(in[i]) for i < n, written at out_offset.
inline void store_half(const Exec& exec, const HalfView1& out, size_t out_offset,
                       const ConstVec& in, size_t n, Precision p) {
  Region region("trident::store_half");
  Kokkos::parallel_for(
      "store_half", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i) { out(out_offset + i) = to_half(in(i), p); });
}

// out[i] = to_compute_half(in[i]) for i < n, written at out_offset: parameters' compute copy.
inline void store_compute_half(const Exec& exec, const HalfView1& out, size_t out_offset,
                               const ConstVec& in, size_t n, Precision p) {
  Region region("trident::store_compute_half");
  Kokkos::parallel_for(
      "store_compute_half", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i) { out(out_offset + i) = to_compute_half(in(i), p); });
}

// out[i] = from_half(in[in_offset + i]) for i < n.
inline void load_half(const Exec& exec, const Vec& out, const HalfView1& in, size_t in_offset,
                      size_t n, Precision p) {
  Region region("trident::load_half");
  Kokkos::parallel_for(
      "load_half", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i) { out(i) = from_half(in(in_offset + i), p); });
}

// dst[0, n) = src[0, n), both in the same format (nothing to do when they are one tensor).
inline void copy_stored(const Exec& exec, const StoredTensor& dst, const StoredTensor& src,
                        size_t n) {
  if (dst.format != src.format)
    throw std::logic_error("copy_stored: a " + std::string(name_of(src.format)) +
                           " tensor copied into a " + name_of(dst.format) + " one");
  if (dst.format == Precision::kFp32) {
    if (dst.f32.data() != src.f32.data())
      Kokkos::deep_copy(exec, window(dst.f32, 0, n), window(src.f32, 0, n));
  } else if (dst.f16.data() != src.f16.data()) {
    Kokkos::deep_copy(exec, window(dst.f16, 0, n), window(src.f16, 0, n));
  }
}

// dst[0, n) = 0 in dst's format (zero is all bits clear in each).
inline void zero_stored(const Exec& exec, const StoredTensor& dst, size_t n) {
  if (dst.format == Precision::kFp32)
    Kokkos::deep_copy(exec, window(dst.f32, 0, n), 0.0f);
  else
    Kokkos::deep_copy(exec, window(dst.f16, 0, n), uint16_t{0});
}

// Whether any of x[0, n) is infinite or NaN.
inline bool any_non_finite(const Exec& exec, const ConstVec& x, size_t n) {
  Region region("trident::any_non_finite");
  int bad = 0;
  Kokkos::parallel_reduce(
      "any_non_finite", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i, int& acc) {
        // Infinity and NaN are the values whose exponent bits are all ones.
        if ((float_bits(x(i)) & 0x7F800000u) == 0x7F800000u) acc = 1;
      },
      Kokkos::Max<int>(bad));
  return bad > 0;  // the Max reducer starts from the lowest int, not 0
}

}  // namespace trident::kernels
