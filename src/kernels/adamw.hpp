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
  const float bc1 = 1.0f - static_cast<float>(std::pow(h.beta1, h.step));
  const float bc2 = 1.0f - static_cast<float>(std::pow(h.beta2, h.step));
  Kokkos::parallel_for(
      "adamw_update", Kokkos::RangePolicy<Exec>(exec, 0, param.extent(0)), KOKKOS_LAMBDA(size_t i) {
        const float g = grad(i) * grad_scale;
        const float mi = b1 * m(i) + (1.0f - b1) * g;
        const float vi = b2 * v(i) + (1.0f - b2) * g * g;
        m(i) = mi;
        v(i) = vi;
        const float mhat = mi / bc1;
        const float vhat = vi / bc2;
        param(i) -= lr * (mhat / (kmath::sqrt(vhat) + eps) + wd * param(i));
      });
}

// sum_i x_i^2 in double, for the global gradient norm.
inline double sum_of_squares(const Exec& exec, const ConstVec& x) {
  Region region("trident::sum_of_squares");
  double total = 0.0;
  Kokkos::parallel_reduce(
      "sum_of_squares", Kokkos::RangePolicy<Exec>(exec, 0, x.extent(0)),
      KOKKOS_LAMBDA(size_t i, double& acc) { acc += static_cast<double>(x(i)) * x(i); }, total);
  return total;
}

}  // namespace trident::kernels
