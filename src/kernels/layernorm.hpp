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

// The GPU shape of layernorm_forward: a warp per row (row_warps), its lanes moving P elements at
// a time (a 16-byte pack where the rows allow).
template <class E, int P>
inline void layernorm_forward_warps(const Exec& exec, const MatOf<E>& out, const Vec& mean,
                                    const Vec& rstd, const ConstMatOf<E>& inp,
                                    const ConstVecOf<E>& weight, const ConstVecOf<E>& bias) {
  const int N = static_cast<int>(inp.extent(0)), C = static_cast<int>(inp.extent(1));
  const int packs = C / P;
  Kokkos::parallel_for(
      "layernorm_forward", row_warps(exec, N), KOKKOS_LAMBDA(const TeamMember& team) {
        const Kokkos::pair<int, int> rows = team_rows(team, N);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows.first, rows.second), [&](int n) {
          float sum = 0.0f, squares = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, packs),
              [&](int q, float& acc) {
                float x[P];
                load_pack<E, P>(&inp(n, q * P), x);
                for (int j = 0; j < P; ++j) acc += x[j];
              },
              sum);
          const float m = sum / C;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, packs),
              [&](int q, float& acc) {
                float x[P];
                load_pack<E, P>(&inp(n, q * P), x);
                for (int j = 0; j < P; ++j) acc += (x[j] - m) * (x[j] - m);
              },
              squares);
          const float s = 1.0f / kmath::sqrt(squares / C + kLayerNormEps);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, packs), [&](int q) {
            float x[P], w[P], b[P];
            load_pack<E, P>(&inp(n, q * P), x);
            load_pack<E, P>(&weight(q * P), w);
            load_pack<E, P>(&bias(q * P), b);
            for (int j = 0; j < P; ++j) x[j] = (x[j] - m) * s * w[j] + b[j];
            store_pack<E, P>(&out(n, q * P), x);
          });
          Kokkos::single(Kokkos::PerThread(team), [&] {
            mean(n) = m;
            rstd(n) = s;
          });
        });
      });
}

// out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] kept for backward.
template <class E = Fp32Elements>
inline void layernorm_forward(const Exec& exec, const MatOf<E>& out, const Vec& mean,
                              const Vec& rstd, const ConstMatOf<E>& inp,
                              const ConstVecOf<E>& weight, const ConstVecOf<E>& bias,
                              Shape shape = kBuildShape) {
  Region region("trident::layernorm_forward");
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    if (rows_split_into_packs<E>(C, {out.data(), inp.data(), weight.data(), bias.data()}))
      layernorm_forward_warps<E, kPackElements<E>>(exec, out, mean, rstd, inp, weight, bias);
    else
      layernorm_forward_warps<E, 1>(exec, out, mean, rstd, inp, weight, bias);
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

// Both halves. The GPU shape reads dout and inp once for both (norm_backward_teams) where its
// column accumulators fit a team's scratch; otherwise, and in the CPU shape, the two kernels.
template <class E = Fp32Elements>
inline void layernorm_backward(const Exec& exec, const MatOf<E>& dinp, const Vec& dweight,
                               const Vec& dbias, const ConstMatOf<E>& dout,
                               const ConstMatOf<E>& inp, const ConstVecOf<E>& weight,
                               const ConstVec& mean, const ConstVec& rstd,
                               Shape shape = kBuildShape, const Vec& partials = Vec()) {
  if (shape == Shape::kGpu) {
    Region region("trident::layernorm_backward");
    const int N = static_cast<int>(inp.extent(0)), C = static_cast<int>(inp.extent(1));
    const float inv_c = 1.0f / static_cast<float>(C);
    const bool done = norm_backward_teams<2, 2>(
        exec, "layernorm_backward", {dweight, dbias}, N, C,
        KOKKOS_LAMBDA(int n, int c, float* t) {
          t[0] = E::load(weight(c)) * E::load(dout(n, c));
          t[1] = t[0] * (E::load(inp(n, c)) - mean(n)) * rstd(n);
        },
        KOKKOS_LAMBDA(int n, int c, const float* row, float* t) {
          const float g = E::load(dout(n, c)), s = rstd(n);
          const float xhat = (E::load(inp(n, c)) - mean(n)) * s;
          const float dnorm = E::load(weight(c)) * g;
          dinp(n, c) = E::store(E::load(dinp(n, c)) +
                                (dnorm - row[0] * inv_c - xhat * (row[1] * inv_c)) * s);
          t[0] = g * xhat;
          t[1] = g;
        },
        partials);
    if (done) return;
  }
  layernorm_backward_input<E>(exec, dinp, dout, inp, weight, mean, rstd, shape);
  layernorm_backward_params<E>(exec, dweight, dbias, dout, inp, mean, rstd, shape, partials);
}

}  // namespace trident::kernels
