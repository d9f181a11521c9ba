// Conversions between fp32 working buffers and 16-bit (bf16 / fp16) storage, and rounding fp32
// values in place to what 16-bit storage would hold.
#pragma once

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

// out[i] = from_half(in[in_offset + i]) for i < n.
inline void load_half(const Exec& exec, const Vec& out, const HalfView1& in, size_t in_offset,
                      size_t n, Precision p) {
  Region region("trident::load_half");
  Kokkos::parallel_for(
      "load_half", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i) { out(i) = from_half(in(in_offset + i), p); });
}

// Keeps src[0, n) in dst, in dst's format (nothing to do when dst is src itself).
inline void keep(const Exec& exec, const StoredTensor& dst, const ConstVec& src, size_t n) {
  if (dst.format != Precision::kFp32)
    store_half(exec, dst.f16, 0, ConstVec(src.data(), n), n, dst.format);
  else if (dst.f32.data() != src.data())
    Kokkos::deep_copy(exec, window(dst.f32, 0, n), ConstVec(src.data(), n));
}

// dst[0, n) = the values src keeps (nothing to do when src is dst itself).
inline void restore(const Exec& exec, const Vec& dst, const StoredTensor& src, size_t n) {
  if (src.format != Precision::kFp32)
    load_half(exec, Vec(dst.data(), n), src.f16, 0, n, src.format);
  else if (src.f32.data() != dst.data())
    Kokkos::deep_copy(exec, Vec(dst.data(), n), window(src.f32, 0, n));
}

// x[i] = round_to(x[i], p) for i < n: the value a 16-bit tensor would hold.
inline void round_in_place(const Exec& exec, const Vec& x, size_t n, Precision p) {
  if (p == Precision::kFp32) return;
  Region region("trident::round_in_place");
  Kokkos::parallel_for(
      "round_in_place", Kokkos::RangePolicy<Exec>(exec, 0, n),
      KOKKOS_LAMBDA(size_t i) { x(i) = round_to(x(i), p); });
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
