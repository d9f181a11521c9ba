// Rotary position embeddings (RoPE) in Hugging Face's rotate-half layout, and the copies of
// key/value heads that grouped-query attention sums over tensor-parallel replicas and context
// parallelism passes between ranks.
#pragma once

#include <cmath>

#include "core/types.hpp"
#include "kernels/context_split.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// The rotation angles' cosines and sines, table[(t * HS/2 + i) * 2 + {0, 1}] for position t <
// positions and frequency i < HS/2: angle t * theta^(-2i/HS), computed in double (Hugging Face
// computes it in fp32; the two agree to fp32 rounding of the angle). Host values.
inline void fill_rope_table(float* table, int positions, int HS, double theta) {
  const int half = HS / 2;
  for (int t = 0; t < positions; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(theta, -2.0 * i / HS);
      table[(static_cast<size_t>(t) * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(static_cast<size_t>(t) * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
}

// Rotates, in place, the first `heads` heads of HS columns of every row of x [B*T, >= heads*HS]
// (the query heads, then the key heads, of a packed qkv): the pair (i, i + HS/2) of a head at
// position t = split.position(row % T) (row % T itself but under context parallelism) by +angle
// (forward, sign 1) or -angle (backward: the transpose).
template <class E = Fp32Elements>
inline void rope_rotate(const Exec& exec, const MatOf<E>& x, int T, int heads, int HS,
                        const ConstVec& table, float sign, ContextSplit split = {}) {
  Region region("trident::rope_rotate");
  const int half = HS / 2;
  Kokkos::parallel_for(
      "rope_rotate", Kokkos::RangePolicy<Exec>(exec, 0, x.extent(0) * heads * half),
      KOKKOS_LAMBDA(size_t e) {
        const size_t n = e / (static_cast<size_t>(heads) * half);
        const int rest = static_cast<int>(e % (static_cast<size_t>(heads) * half));
        const int h = rest / half, i = rest % half;
        const int t = split.position(static_cast<int>(n % T));
        const size_t at = (static_cast<size_t>(t) * half + i) * 2;
        const float c = table(at), s = sign * table(at + 1);
        const int c1 = h * HS + i, c2 = c1 + half;
        const float x1 = E::load(x(n, c1)), x2 = E::load(x(n, c2));
        x(n, c1) = E::store(x1 * c - x2 * s);
        x(n, c2) = E::store(x2 * c + x1 * s);
      });
}

// dst(n, dst_col + j) = src(n, src_col + j) for j < width, every row; the two may be one tensor
// only if the ranges do not overlap.
template <class E = Fp32Elements>
inline void copy_columns(const Exec& exec, const MatOf<E>& dst, int dst_col,
                         const ConstMatOf<E>& src, int src_col, int width) {
  Kokkos::parallel_for(
      "copy_columns", Kokkos::RangePolicy<Exec>(exec, 0, src.extent(0) * width),
      KOKKOS_LAMBDA(size_t e) {
        const size_t n = e / width;
        const int j = static_cast<int>(e % width);
        dst(n, dst_col + j) = src(n, src_col + j);
      });
}

// dst(n, dst_col + j) = src(n, j) rounded to E, for j < width, every row: fp32 sums stored into
// the columns of a tensor.
template <class E = Fp32Elements>
inline void store_columns(const Exec& exec, const MatOf<E>& dst, int dst_col, const ConstMat& src,
                          int width) {
  Kokkos::parallel_for(
      "store_columns", Kokkos::RangePolicy<Exec>(exec, 0, src.extent(0) * width),
      KOKKOS_LAMBDA(size_t e) {
        const size_t n = e / width;
        const int j = static_cast<int>(e % width);
        dst(n, dst_col + j) = E::store(src(n, j));
      });
}

}  // namespace trident::kernels
