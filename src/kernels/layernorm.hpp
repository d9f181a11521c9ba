// LayerNorm over channels (eps 1e-5, biased variance as in PyTorch), forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

constexpr float kLayerNormEps = 1e-5f;

// Activations and parameters (inp, out, dout, dinp, weight, bias) are stored as E
// (kernels/elements.hpp); the statistics and the parameter gradients are fp32.

// out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] kept for backward.
template <class E = Fp32Elements>
inline void layernorm_forward(const Exec& exec, const MatOf<E>& out, const Vec& mean,
                              const Vec& rstd, const ConstMatOf<E>& inp,
                              const ConstVecOf<E>& weight, const ConstVecOf<E>& bias,
                              Shape shape = kBuildShape) {
  Region region("trident::layernorm_forward");
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "layernorm_forward", row_teams(exec, static_cast<int>(inp.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float m = team_sum(team, C, [&](int c) { return E::load(inp(n, c)); }) / C;
          const float var = team_sum(team, C, [&](int c) {
            const float d = E::load(inp(n, c)) - m;
            return d * d;
          });
          const float s = 1.0f / kmath::sqrt(var / C + kLayerNormEps);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
            out(n, c) =
                E::store((E::load(inp(n, c)) - m) * s * E::load(weight(c)) + E::load(bias(c)));
          });
          Kokkos::single(Kokkos::PerTeam(team), [&] {
            mean(n) = m;
            rstd(n) = s;
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "layernorm_forward", Kokkos::RangePolicy<Exec>(exec, 0, inp.extent(0)), KOKKOS_LAMBDA(int n) {
        const float m = kmath::lane_sum(C, [&](int c) { return E::load(inp(n, c)); }) / C;
        const float var = kmath::lane_sum(C, [&](int c) {
          const float d = E::load(inp(n, c)) - m;
          return d * d;
        });
        const float s = 1.0f / kmath::sqrt(var / C + kLayerNormEps);
        for (int c = 0; c < C; ++c)
          out(n, c) =
              E::store((E::load(inp(n, c)) - m) * s * E::load(weight(c)) + E::load(bias(c)));
        mean(n) = m;
        rstd(n) = s;
      });
}

// dinp[N,C] += d/dinp: the input-gradient half of a LayerNorm's backward.
template <class E = Fp32Elements>
inline void layernorm_backward_input(const Exec& exec, const MatOf<E>& dinp,
                                     const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                                     const ConstVecOf<E>& weight, const ConstVec& mean,
                                     const ConstVec& rstd, Shape shape = kBuildShape) {
  Region region("trident::layernorm_backward_input");
  const int N = static_cast<int>(inp.extent(0));
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "layernorm_backward_input", row_teams(exec, N), KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float m = mean(n), s = rstd(n);
          const float dnorm_mean =
              team_sum(team, C, [&](int c) { return E::load(weight(c)) * E::load(dout(n, c)); }) /
              C;
          const float dnorm_norm_mean = team_sum(team, C,
                                                 [&](int c) {
                                                   return E::load(weight(c)) * E::load(dout(n, c)) *
                                                          (E::load(inp(n, c)) - m) * s;
                                                 }) /
                                        C;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
            const float xhat = (E::load(inp(n, c)) - m) * s;
            const float dnorm = E::load(weight(c)) * E::load(dout(n, c));
            dinp(n, c) =
                E::store(E::load(dinp(n, c)) + (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s);
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "layernorm_backward_input", Kokkos::RangePolicy<Exec>(exec, 0, N), KOKKOS_LAMBDA(int n) {
        const float m = mean(n), s = rstd(n);
        const float dnorm_mean =
            kmath::lane_sum(C, [&](int c) { return E::load(weight(c)) * E::load(dout(n, c)); }) / C;
        const float dnorm_norm_mean = kmath::lane_sum(C,
                                                      [&](int c) {
                                                        return E::load(weight(c)) *
                                                               E::load(dout(n, c)) *
                                                               (E::load(inp(n, c)) - m) * s;
                                                      }) /
                                      C;
        for (int c = 0; c < C; ++c) {
          const float xhat = (E::load(inp(n, c)) - m) * s;
          const float dnorm = E::load(weight(c)) * E::load(dout(n, c));
          dinp(n, c) =
              E::store(E::load(dinp(n, c)) + (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s);
        }
      });
}

// dweight[C] += sum_n dout*xhat; dbias[C] += sum_n dout: the weight-gradient half. partials: the
// GPU shape's second-pass floats (column_sums_teams).
template <class E = Fp32Elements>
inline void layernorm_backward_params(const Exec& exec, const Vec& dweight, const Vec& dbias,
                                      const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                                      const ConstVec& mean, const ConstVec& rstd,
                                      Shape shape = kBuildShape, const Vec& partials = Vec()) {
  Region region("trident::layernorm_backward_params");
  const int N = static_cast<int>(inp.extent(0));
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    column_sums_teams<2>(
        exec, "layernorm_backward_params", {dweight, dbias}, N, C,
        KOKKOS_LAMBDA(int n, int c, float* t) {
          const float g = E::load(dout(n, c));
          t[0] = g * (E::load(inp(n, c)) - mean(n)) * rstd(n);
          t[1] = g;
        },
        partials);
    return;
  }
  // Parameter gradients: kHostColumnBlock channels per work item, rows summed in order
  // (deterministic); the inner loop runs along a row, so it vectorises.
  constexpr int L = kmath::kHostColumnBlock;
  Kokkos::parallel_for(
      "layernorm_backward_params", Kokkos::RangePolicy<Exec>(exec, 0, (C + L - 1) / L),
      KOKKOS_LAMBDA(int block) {
        const int c0 = block * L, width = C - c0 < L ? C - c0 : L;
        float dw[L] = {}, db[L] = {};
        kmath::with_block_width<L>(width, [&](auto w) {
          for (int n = 0; n < N; ++n) {
            const float m = mean(n), s = rstd(n);
            for (int j = 0; j < w; ++j) {
              const float g = E::load(dout(n, c0 + j));
              dw[j] += g * (E::load(inp(n, c0 + j)) - m) * s;
              db[j] += g;
            }
          }
        });
        for (int j = 0; j < width; ++j) {
          dweight(c0 + j) += dw[j];
          dbias(c0 + j) += db[j];
        }
      });
}

// Both halves.
template <class E = Fp32Elements>
inline void layernorm_backward(const Exec& exec, const MatOf<E>& dinp, const Vec& dweight,
                               const Vec& dbias, const ConstMatOf<E>& dout,
                               const ConstMatOf<E>& inp, const ConstVecOf<E>& weight,
                               const ConstVec& mean, const ConstVec& rstd,
                               Shape shape = kBuildShape, const Vec& partials = Vec()) {
  layernorm_backward_input<E>(exec, dinp, dout, inp, weight, mean, rstd, shape);
  layernorm_backward_params<E>(exec, dweight, dbias, dout, inp, mean, rstd, shape, partials);
}

}  // namespace trident::kernels
