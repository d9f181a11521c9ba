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
        const float m = kmath::lane_sum(C, [&](int c) { return inp(n, c); }) / C;
        const float var = kmath::lane_sum(C, [&](int c) {
          const float d = inp(n, c) - m;
          return d * d;
        });
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
        const float dnorm_mean =
            kmath::lane_sum(C, [&](int c) { return weight(c) * dout(n, c); }) / C;
        const float dnorm_norm_mean =
            kmath::lane_sum(C,
                            [&](int c) { return weight(c) * dout(n, c) * (inp(n, c) - m) * s; }) /
            C;
        for (int c = 0; c < C; ++c) {
          const float xhat = (inp(n, c) - m) * s;
          const float dnorm = weight(c) * dout(n, c);
          dinp(n, c) += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
        }
      });
  // Parameter gradients: kLanes channels per work item, rows summed in order (deterministic);
  // the inner loop runs along a row, so it vectorises.
  constexpr int L = kmath::kLanes;
  Kokkos::parallel_for(
      "layernorm_backward_params", Kokkos::RangePolicy<Exec>(exec, 0, (C + L - 1) / L),
      KOKKOS_LAMBDA(int block) {
        const int c0 = block * L, width = C - c0 < L ? C - c0 : L;
        float dw[L] = {}, db[L] = {};
        for (int n = 0; n < N; ++n) {
          const float m = mean(n), s = rstd(n);
          for (int j = 0; j < width; ++j) {
            const float g = dout(n, c0 + j);
            dw[j] += g * (inp(n, c0 + j) - m) * s;
            db[j] += g;
          }
        }
        for (int j = 0; j < width; ++j) {
          dweight(c0 + j) += dw[j];
          dbias(c0 + j) += db[j];
        }
      });
}

}  // namespace trident::kernels
