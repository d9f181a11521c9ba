// LayerNorm over channels (eps 1e-5, biased variance as in PyTorch), forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

constexpr float kLayerNormEps = 1e-5f;

// out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] kept for backward.
inline void layernorm_forward(const Exec& exec, const Mat& out, const Vec& mean, const Vec& rstd,
                              const ConstMat& inp, const ConstVec& weight, const ConstVec& bias) {
  Region region("trident::layernorm_forward");
  const int C = static_cast<int>(inp.extent(1));
  Kokkos::parallel_for(
      "layernorm_forward", Kokkos::RangePolicy<Exec>(exec, 0, inp.extent(0)), KOKKOS_LAMBDA(int n) {
        float sum = 0.f;
        for (int c = 0; c < C; ++c) sum += inp(n, c);
        const float m = sum / C;
        float var = 0.f;
        for (int c = 0; c < C; ++c) {
          const float d = inp(n, c) - m;
          var += d * d;
        }
        const float s = 1.0f / kmath::sqrt(var / C + kLayerNormEps);
        for (int c = 0; c < C; ++c) out(n, c) = (inp(n, c) - m) * s * weight(c) + bias(c);
        mean(n) = m;
        rstd(n) = s;
      });
}

// dinp[N,C] += d/dinp; dweight[C] += sum_n dout*xhat; dbias[C] += sum_n dout.
inline void layernorm_backward(const Exec& exec, const Mat& dinp, const Vec& dweight,
                               const Vec& dbias, const ConstMat& dout, const ConstMat& inp,
                               const ConstVec& weight, const ConstVec& mean, const ConstVec& rstd) {
  Region region("trident::layernorm_backward");
  const int N = static_cast<int>(inp.extent(0));
  const int C = static_cast<int>(inp.extent(1));
  Kokkos::parallel_for(
      "layernorm_backward_input", Kokkos::RangePolicy<Exec>(exec, 0, N), KOKKOS_LAMBDA(int n) {
        const float m = mean(n), s = rstd(n);
        float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
        for (int c = 0; c < C; ++c) {
          const float xhat = (inp(n, c) - m) * s;
          const float dnorm = weight(c) * dout(n, c);
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * xhat;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; ++c) {
          const float xhat = (inp(n, c) - m) * s;
          const float dnorm = weight(c) * dout(n, c);
          dinp(n, c) += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
        }
      });
  // Parameter gradients: one channel per work item, rows summed in order (deterministic).
  Kokkos::parallel_for(
      "layernorm_backward_params", Kokkos::RangePolicy<Exec>(exec, 0, C), KOKKOS_LAMBDA(int c) {
        float dw = 0.f, db = 0.f;
        for (int n = 0; n < N; ++n) {
          const float g = dout(n, c);
          dw += g * (inp(n, c) - mean(n)) * rstd(n);
          db += g;
        }
        dweight(c) += dw;
        dbias(c) += db;
      });
}

}  // namespace trident::kernels
