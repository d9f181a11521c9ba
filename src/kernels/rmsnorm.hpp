// RMSNorm over channels (Llama's norm: no mean subtraction, no bias), forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

// Activations and the gain (inp, out, dout, dinp, weight) are stored as E (kernels/elements.hpp);
// rstd and the gain's gradient are fp32. The statistics are computed in fp32 whatever E is, as
// Hugging Face's LlamaRMSNorm does.

// out[N,C] = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps); rstd[N] kept for
// backward.
template <class E = Fp32Elements>
inline void rmsnorm_forward(const Exec& exec, const MatOf<E>& out, const Vec& rstd,
                            const ConstMatOf<E>& inp, const ConstVecOf<E>& weight, float eps,
                            Shape shape = kBuildShape) {
  Region region("trident::rmsnorm_forward");
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "rmsnorm_forward", row_teams(exec, static_cast<int>(inp.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float squares = team_sum(team, C, [&](int c) {
            const float x = E::load(inp(n, c));
            return x * x;
          });
          const float s = 1.0f / kmath::sqrt(squares / C + eps);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
            out(n, c) = E::store(E::load(inp(n, c)) * s * E::load(weight(c)));
          });
          Kokkos::single(Kokkos::PerTeam(team), [&] { rstd(n) = s; });
        });
    return;
  }
  Kokkos::parallel_for(
      "rmsnorm_forward", Kokkos::RangePolicy<Exec>(exec, 0, inp.extent(0)), KOKKOS_LAMBDA(int n) {
        const float squares = kmath::lane_sum(C, [&](int c) {
          const float x = E::load(inp(n, c));
          return x * x;
        });
        const float s = 1.0f / kmath::sqrt(squares / C + eps);
        for (int c = 0; c < C; ++c)
          out(n, c) = E::store(E::load(inp(n, c)) * s * E::load(weight(c)));
        rstd(n) = s;
      });
}

// dinp[N,C] += d/dinp = rstd (w dout - inp rstd^2 mean(w dout inp)): the input-gradient half.
template <class E = Fp32Elements>
inline void rmsnorm_backward_input(const Exec& exec, const MatOf<E>& dinp,
                                   const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                                   const ConstVecOf<E>& weight, const ConstVec& rstd,
                                   Shape shape = kBuildShape) {
  Region region("trident::rmsnorm_backward_input");
  const int N = static_cast<int>(inp.extent(0));
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "rmsnorm_backward_input", row_teams(exec, N), KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float s = rstd(n);
          const float dot =
              team_sum(team, C,
                       [&](int c) {
                         return E::load(weight(c)) * E::load(dout(n, c)) * E::load(inp(n, c));
                       }) /
              C;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
            const float dnorm = E::load(weight(c)) * E::load(dout(n, c));
            dinp(n, c) =
                E::store(E::load(dinp(n, c)) + s * (dnorm - E::load(inp(n, c)) * s * s * dot));
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "rmsnorm_backward_input", Kokkos::RangePolicy<Exec>(exec, 0, N), KOKKOS_LAMBDA(int n) {
        const float s = rstd(n);
        const float dot =
            kmath::lane_sum(C,
                            [&](int c) {
                              return E::load(weight(c)) * E::load(dout(n, c)) * E::load(inp(n, c));
                            }) /
            C;
        for (int c = 0; c < C; ++c) {
          const float dnorm = E::load(weight(c)) * E::load(dout(n, c));
          dinp(n, c) =
              E::store(E::load(dinp(n, c)) + s * (dnorm - E::load(inp(n, c)) * s * s * dot));
        }
      });
}

// dweight[C] += sum_n dout * inp * rstd: the weight-gradient half. partials: the GPU shape's
// second-pass floats (column_sums_teams).
template <class E = Fp32Elements>
inline void rmsnorm_backward_params(const Exec& exec, const Vec& dweight, const ConstMatOf<E>& dout,
                                    const ConstMatOf<E>& inp, const ConstVec& rstd,
                                    Shape shape = kBuildShape, const Vec& partials = Vec()) {
  Region region("trident::rmsnorm_backward_params");
  const int N = static_cast<int>(inp.extent(0));
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    column_sums_teams<1>(
        exec, "rmsnorm_backward_params", {dweight}, N, C,
        KOKKOS_LAMBDA(int n, int c, float* t) {
          t[0] = E::load(dout(n, c)) * E::load(inp(n, c)) * rstd(n);
        },
        partials);
    return;
  }
  // kHostColumnBlock channels per work item, rows summed in order (deterministic).
  constexpr int L = kmath::kHostColumnBlock;
  Kokkos::parallel_for(
      "rmsnorm_backward_params", Kokkos::RangePolicy<Exec>(exec, 0, (C + L - 1) / L),
      KOKKOS_LAMBDA(int block) {
        const int c0 = block * L, width = C - c0 < L ? C - c0 : L;
        float dw[L] = {};
        kmath::with_block_width<L>(width, [&](auto w) {
          for (int n = 0; n < N; ++n) {
            const float s = rstd(n);
            for (int j = 0; j < w; ++j)
              dw[j] += E::load(dout(n, c0 + j)) * E::load(inp(n, c0 + j)) * s;
          }
        });
        for (int j = 0; j < width; ++j) dweight(c0 + j) += dw[j];
      });
}

}  // namespace trident::kernels
