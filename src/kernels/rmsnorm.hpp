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

// The GPU shape of rmsnorm_forward: a warp per row, P elements a lane at a time (as
// layernorm_forward_warps).
template <class E, int P>
inline void rmsnorm_forward_warps(const Exec& exec, const MatOf<E>& out, const Vec& rstd,
                                  const ConstMatOf<E>& inp, const ConstVecOf<E>& weight,
                                  float eps) {
  const int N = static_cast<int>(inp.extent(0)), C = static_cast<int>(inp.extent(1));
  const int packs = C / P;
  Kokkos::parallel_for(
      "rmsnorm_forward", row_warps(exec, N), KOKKOS_LAMBDA(const TeamMember& team) {
        const Kokkos::pair<int, int> rows = team_rows(team, N);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows.first, rows.second), [&](int n) {
          float squares = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, packs),
              [&](int q, float& acc) {
                float x[P];
                load_pack<E, P>(&inp(n, q * P), x);
                for (int j = 0; j < P; ++j) acc += x[j] * x[j];
              },
              squares);
          const float s = 1.0f / kmath::sqrt(squares / C + eps);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, packs), [&](int q) {
            float x[P], w[P];
            load_pack<E, P>(&inp(n, q * P), x);
            load_pack<E, P>(&weight(q * P), w);
            for (int j = 0; j < P; ++j) x[j] = x[j] * s * w[j];
            store_pack<E, P>(&out(n, q * P), x);
          });
          Kokkos::single(Kokkos::PerThread(team), [&] { rstd(n) = s; });
        });
      });
}

// out[N,C] = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps); rstd[N] kept for
// backward.
template <class E = Fp32Elements>
inline void rmsnorm_forward(const Exec& exec, const MatOf<E>& out, const Vec& rstd,
                            const ConstMatOf<E>& inp, const ConstVecOf<E>& weight, float eps,
                            Shape shape = kBuildShape) {
  Region region("trident::rmsnorm_forward");
  const int C = static_cast<int>(inp.extent(1));
  if (shape == Shape::kGpu) {
    if (rows_split_into_packs<E>(C, {out.data(), inp.data(), weight.data()}))
      rmsnorm_forward_warps<E, kPackElements<E>>(exec, out, rstd, inp, weight, eps);
    else
      rmsnorm_forward_warps<E, 1>(exec, out, rstd, inp, weight, eps);
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

// Both halves, as layernorm_backward: one pass over dout and inp in the GPU shape where its
// accumulators fit a team's scratch, the two kernels otherwise.
template <class E = Fp32Elements>
inline void rmsnorm_backward(const Exec& exec, const MatOf<E>& dinp, const Vec& dweight,
                             const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                             const ConstVecOf<E>& weight, const ConstVec& rstd,
                             Shape shape = kBuildShape, const Vec& partials = Vec()) {
  if (shape == Shape::kGpu) {
    Region region("trident::rmsnorm_backward");
    const int N = static_cast<int>(inp.extent(0)), C = static_cast<int>(inp.extent(1));
    const float inv_c = 1.0f / static_cast<float>(C);
    const bool done = norm_backward_teams<1, 1>(
        exec, "rmsnorm_backward", {dweight}, N, C,
        KOKKOS_LAMBDA(int n, int c, float* t) {
          t[0] = E::load(weight(c)) * E::load(dout(n, c)) * E::load(inp(n, c));
        },
        KOKKOS_LAMBDA(int n, int c, const float* row, float* t) {
          const float g = E::load(dout(n, c)), x = E::load(inp(n, c)), s = rstd(n);
          const float dnorm = E::load(weight(c)) * g;
          dinp(n, c) = E::store(E::load(dinp(n, c)) + s * (dnorm - x * s * s * (row[0] * inv_c)));
          t[0] = g * x * s;
        },
        partials);
    if (done) return;
  }
  rmsnorm_backward_input<E>(exec, dinp, dout, inp, weight, rstd, shape);
  rmsnorm_backward_params<E>(exec, dweight, dout, inp, rstd, shape, partials);
}

}  // namespace trident::kernels
