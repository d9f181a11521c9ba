// AdamW on a flat fp32 shard (decoupled weight decay), and the squared-norm reduction.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay;
  int step;  // 1-based, for bias correction
};

// Updates param, m, v in place from grad. `grad_scale` multiplies the gradient first (used
// for clipping), so the clipped gradient is never materialised.
inline void adamw_update(const Exec& exec, const Vec& param, const Vec& m, const Vec& v,
                         const ConstVec& grad, AdamWHyper h, float grad_scale) {
  Region region("trident::adamw_update");
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps, lr = h.lr, wd = h.weight_decay;
  const float inv_bc1 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, h.step)));
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(1.0f - static_cast<float>(std::pow(h.beta2, h.step)));
  const float decay = 1.0f - lr * wd;
  Kokkos::parallel_for(
      "adamw_update", Kokkos::RangePolicy<Exec>(exec, 0, param.extent(0)), KOKKOS_LAMBDA(size_t i) {
        const float g = grad(i) * grad_scale;
        const float mi = b1 * m(i) + (1.0f - b1) * g;
        const float vi = b2 * v(i) + (1.0f - b2) * g * g;
        m(i) = mi;
        v(i) = vi;
        param(i) = param(i) * decay - lr * (mi * inv_bc1) / (kmath::sqrt(vi) * inv_sqrt_bc2 + eps);
      });
}

// sum_i x_i^2 in double, for the global gradient norm.
inline double sum_of_squares(const Exec& exec, const ConstVec& x) {
  Region region("trident::sum_of_squares");
  constexpr size_t W = 16;
  const size_t n = x.extent(0), chunks = (n + W - 1) / W;
  double total = 0.0;
  Kokkos::parallel_reduce(
      "sum_of_squares", Kokkos::RangePolicy<Exec>(exec, 0, chunks),
      KOKKOS_LAMBDA(size_t c, double& acc) {
        float part = 0.f;
        const size_t end = (c + 1) * W < n ? (c + 1) * W : n;
        for (size_t i = c * W; i < end; ++i) part += x(i) * x(i);
        acc += part;
      },
      total);
  return total;
}

}  // namespace trident::kernels
