// 16-bit floating-point formats (bf16, IEEE fp16): round-to-nearest-even conversions from fp32,
// exact conversions back and bf16's lossless split of fp32 master weights, usable in kernels.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/precision.hpp"

namespace trident {

KOKKOS_INLINE_FUNCTION uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

KOKKOS_INLINE_FUNCTION float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 keeps fp32's exponent: drop 16 mantissa bits, rounding to nearest, ties to even. NaN stays
// a (quiet) NaN rather than rounding into infinity.
KOKKOS_INLINE_FUNCTION uint16_t to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

KOKKOS_INLINE_FUNCTION float from_bf16(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

// IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits; largest finite 65504, smallest
// subnormal 2^-24. Round to nearest, ties to even; too large becomes infinity.
KOKKOS_INLINE_FUNCTION uint16_t to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: infinity
  const uint32_t exponent = a >> 23, mantissa = a & 0x7FFFFFu;
  if (exponent < 113) {  // below 2^-14: subnormal (m x 2^-24) or zero
    if (exponent < 102) return sign;
    const uint32_t full = mantissa | 0x800000u, shift = 126 - exponent;
    uint32_t m = full >> shift;
    const uint32_t rest = full & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (m & 1u))) ++m;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = ((exponent - 112) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

KOKKOS_INLINE_FUNCTION float from_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

KOKKOS_INLINE_FUNCTION uint16_t to_half(float f, Precision p) {
  return p == Precision::kBf16 ? to_bf16(f) : to_fp16(f);
}
KOKKOS_INLINE_FUNCTION float from_half(uint16_t h, Precision p) {
  return p == Precision::kBf16 ? from_bf16(h) : from_fp16(h);
}

// bf16 master weights in two 16-bit halves, losslessly: `high` is the value rounded to bf16 with
// ties away from zero (the compute copy forward and backward read) and `low` the difference of
// the two bit patterns. That difference lies in [-2^15, 2^15) and fits 16 signed bits exactly
// because ties round away from zero: ties to even would need one value more. join_bf16 gives
// back the fp32 bits, so the two halves are the fp32 master weight in 4 bytes, beside no other
// copy. A NaN stays a NaN.
KOKKOS_INLINE_FUNCTION uint16_t bf16_high(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return to_bf16(f);
  return static_cast<uint16_t>((u + 0x8000u) >> 16);
}

KOKKOS_INLINE_FUNCTION uint16_t bf16_low(float f, uint16_t high) {
  return static_cast<uint16_t>(float_bits(f) - (static_cast<uint32_t>(high) << 16));
}

KOKKOS_INLINE_FUNCTION float join_bf16(uint16_t high, uint16_t low) {
  const int32_t difference = static_cast<int16_t>(low);
  return bits_float((static_cast<uint32_t>(high) << 16) + static_cast<uint32_t>(difference));
}

// A parameter's 16-bit compute copy: bf16 rounds as bf16_high (the upper half of its master
// weight), fp16 to nearest even (beside fp32 master weights).
KOKKOS_INLINE_FUNCTION uint16_t to_compute_half(float f, Precision p) {
  return p == Precision::kBf16 ? bf16_high(f) : to_fp16(f);
}

// The nearest value representable in `p` (the identity for fp32).
KOKKOS_INLINE_FUNCTION float round_to(float f, Precision p) {
  return p == Precision::kFp32 ? f : from_half(to_half(f, p), p);
}

}  // namespace trident
