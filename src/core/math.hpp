// Device-callable math functions across Kokkos versions (Experimental:: before 3.7), and the
// vectorisable exp and row sums the host kernels are built from.
#pragma once

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace trident::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

// exp(x) in float, written so that GCC vectorises the loops that call it: glibc's expf is a call
// it vectorises only under -ffast-math. x = k ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two
// parts), exp(r) by its degree-6 Taylor polynomial (relative error under 2e-7), 2^k built in the
// exponent bits. Flushes to 0 below -87 (where exp leaves the normal floats), +inf above 88.5;
// NaN stays NaN. On a GPU, the device's own exp.
KOKKOS_INLINE_FUNCTION float exp_vec(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || !defined(__AVX2__)
  // A GPU's exp is fast; and GCC does not vectorise the polynomial below for SSE2 alone, where
  // glibc's scalar expf is the faster of the two.
  return exp(x);
#else
  constexpr float kLow = -87.0f, kHigh = 88.5f;
  const float clamped = x < kLow ? kLow : (x > kHigh ? kHigh : x);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float shifted = clamped * kLog2e + kRound;
  const float k = shifted - kRound;
  std::int32_t k_bits;
  std::memcpy(&k_bits, &shifted, sizeof k_bits);  // k sits in the low mantissa bits
  const std::int32_t k_int = k_bits - 0x4B400000;
  const float r = (clamped - k * 0.693145751953125f) - k * 1.428606820309417232e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t scale_bits = (k_int + 127) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const float y = p * scale;
  return x < kLow ? 0.0f : (x > kHigh ? HUGE_VALF : y);
#endif
}

// Sums of a row, term(i) for i in [0, n), in kLanes interleaved partial sums combined in a fixed
// order: GCC vectorises the loop without -ffast-math (a single running sum is a dependency chain
// it may not reorder), and the bits depend on n only, never on the number of threads.
constexpr int kLanes = 16;

// A width known at compile time (std::integral_constant's conversion is host-only for nvcc).
template <int N>
struct FixedWidth {
  KOKKOS_INLINE_FUNCTION constexpr operator int() const { return N; }
};

// Calls f(width): as a compile-time Full for a full block of columns, whose loops over the block
// then have a constant trip count and vectorise (a variable one left GCC with 16 scalar adds per
// row), as the int itself for the last, partial block.
template <int Full, class F>
KOKKOS_INLINE_FUNCTION void with_block_width(int width, const F& f) {
  if (width == Full)
    f(FixedWidth<Full>());
  else
    f(width);
}

// Columns per work item of the host kernels that sum a matrix's columns over its rows (bias and
// LayerNorm parameter gradients): each column sums its rows in order whatever the block (the bits
// do not change with it), and a row's block spans four cache lines, which the prefetchers follow.
// With 16 columns (one line per row, each row a page or more from the last) the linear layers'
// bias gradients took 4.3 ms of a GPT-2 124M step at 2 threads on a 2-core Xeon VM, 1.7 with 64.
constexpr int kHostColumnBlock = 64;

// Folds the lanes in halves (in place), the same tree whatever the row.
KOKKOS_INLINE_FUNCTION float combine_lanes(float* lanes) {
  for (int half = kLanes / 2; half > 0; half /= 2)
    for (int j = 0; j < half; ++j) lanes[j] += lanes[j + half];
  return lanes[0];
}

// A read hint for the cache line holding p (nothing on GPUs). See kernels/streaming.hpp for why.
KOKKOS_INLINE_FUNCTION void prefetch(const void* p) {
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

// The lane loops' optional `ahead(i)`, called before each full block of kLanes terms from i: a
// row kernel prefetches there what a later block will read.
struct NothingAhead {
  KOKKOS_INLINE_FUNCTION void operator()(int) const {}
};

template <class Term, class Ahead = NothingAhead>
KOKKOS_INLINE_FUNCTION float lane_sum(int n, const Term& term, const Ahead& ahead = {}) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    ahead(i);
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(i + j);
  }
  for (int j = 0; i + j < n; ++j) lanes[j] += term(i + j);
  return combine_lanes(lanes);
}

template <class Term, class Ahead = NothingAhead>
KOKKOS_INLINE_FUNCTION float lane_max(int n, const Term& term, float lowest,
                                      const Ahead& ahead = {}) {
  float lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = lowest;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    ahead(i);
    for (int j = 0; j < kLanes; ++j) {
      const float t = term(i + j);
      lanes[j] = t > lanes[j] ? t : lanes[j];
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const float t = term(i + j);
    lanes[j] = t > lanes[j] ? t : lanes[j];
  }
  float m = lanes[0];
  for (int j = 1; j < kLanes; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}

}  // namespace trident::kmath
