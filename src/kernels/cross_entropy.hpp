// Softmax cross-entropy over a (possibly vocabulary-parallel) slice of the logits: the forward
// in three row reductions, so a tensor-parallel caller can all-reduce between them, and the
// gradient written in place. No rank ever needs the full logits.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"
#include "kernels/streaming.hpp"

namespace trident::kernels {

// Columns [0, valid) of logits[N, V_slice] are real vocabulary entries vocab_start + v; the
// rest are padding and ignored. A negative target marks a position without a loss. Logits and
// their gradient are stored as E (kernels/elements.hpp); the row statistics and losses are fp32.

// The lane loops' prefetch along a row: the line kPrefetchAhead columns on, while still in the row.
template <class T>
KOKKOS_INLINE_FUNCTION void prefetch_in_row(const T* row, int v, int valid) {
  const size_t ahead = static_cast<size_t>(v) + kPrefetchAhead;
  if (ahead < static_cast<size_t>(valid)) kmath::prefetch(row + ahead);
}

// A valid column's d(loss)/d(logit) times `scale`: softmax(logit) - [the column is the target].
// The unfused backward and the fused classifier both call it, so they give the same bits.
KOKKOS_INLINE_FUNCTION float cross_entropy_gradient(float logit, float lse, float scale,
                                                    bool target) {
  return scale * (kmath::exp_vec(logit - lse) - (target ? 1.0f : 0.0f));
}

// row_max[n] = max over the slice's valid columns (-inf-ish when the slice has none).
template <class E = Fp32Elements>
inline void cross_entropy_row_max(const Exec& exec, const Vec& row_max, const ConstMatOf<E>& logits,
                                  int valid, Shape shape = kBuildShape) {
  Region region("trident::cross_entropy_row_max");
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "cross_entropy_row_max", row_teams(exec, static_cast<int>(logits.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float m = team_max(
              team, valid, [&](int v) { return E::load(logits(n, v)); }, -3.0e38f);
          Kokkos::single(Kokkos::PerTeam(team), [&] { row_max(n) = m; });
        });
    return;
  }
  Kokkos::parallel_for(
      "cross_entropy_row_max", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        const auto* row = &logits(n, 0);
        row_max(n) = kmath::lane_max(
            valid, [&](int v) { return E::load(row[v]); }, -3.0e38f,
            [&](int v) { prefetch_in_row(row, v, valid); });
      });
}

// row_sum[n] = sum over valid columns of exp(logit - row_max[n]) (row_max: the global max).
// target_logit[n] = the target's logit if this slice holds it, else 0 (so a sum over slices
// gives the target's logit).
template <class E = Fp32Elements>
inline void cross_entropy_row_sums(const Exec& exec, const Vec& row_sum, const Vec& target_logit,
                                   const ConstMatOf<E>& logits, const ConstVec& row_max,
                                   const ConstIntVec& targets, int vocab_start, int valid,
                                   Shape shape = kBuildShape) {
  Region region("trident::cross_entropy_row_sums");
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "cross_entropy_row_sums", row_teams(exec, static_cast<int>(logits.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const float m = row_max(n);
          const float sum = team_sum(
              team, valid, [&](int v) { return kmath::exp_vec(E::load(logits(n, v)) - m); });
          Kokkos::single(Kokkos::PerTeam(team), [&] {
            row_sum(n) = sum;
            const int local = targets(n) - vocab_start;
            target_logit(n) = local >= 0 && local < valid ? E::load(logits(n, local)) : 0.0f;
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "cross_entropy_row_sums", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        const float m = row_max(n);
        const auto* row = &logits(n, 0);
        row_sum(n) = kmath::lane_sum(
            valid, [&](int v) { return kmath::exp_vec(E::load(row[v]) - m); },
            [&](int v) { prefetch_in_row(row, v, valid); });
        const int local = targets(n) - vocab_start;
        target_logit(n) = local >= 0 && local < valid ? E::load(logits(n, local)) : 0.0f;
      });
}

// losses[n] = lse[n] - target_logit[n] with lse = row_max + log(row_sum) (global values).
inline void cross_entropy_losses(const Exec& exec, const Vec& losses, const Vec& lse,
                                 const ConstVec& row_max, const ConstVec& row_sum,
                                 const ConstVec& target_logit, const ConstIntVec& targets) {
  Region region("trident::cross_entropy_losses");
  Kokkos::parallel_for(
      "cross_entropy_losses", Kokkos::RangePolicy<Exec>(exec, 0, losses.extent(0)),
      KOKKOS_LAMBDA(int n) {
        const float l = row_max(n) + kmath::log(row_sum(n));
        lse(n) = l;
        losses(n) = targets(n) >= 0 ? l - target_logit(n) : 0.0f;
      });
}

// dlogits[n,v] = scale * (softmax[n,v] - [vocab_start + v == target]); padding columns get 0.
// dlogits may alias logits. `scale` is d(loss)/d(per-token loss): 1 / global token count.
template <class E = Fp32Elements>
inline void cross_entropy_backward(const Exec& exec, const MatOf<E>& dlogits,
                                   const ConstMatOf<E>& logits, const ConstVec& lse,
                                   const ConstIntVec& targets, int vocab_start, int valid,
                                   float scale, Shape shape = kBuildShape) {
  Region region("trident::cross_entropy_backward");
  const int width = static_cast<int>(logits.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "cross_entropy_backward", row_teams(exec, static_cast<int>(logits.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank();
          const int local = targets(n) - vocab_start;
          const float l = lse(n);
          const float s = targets(n) >= 0 ? scale : 0.0f;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, width), [&](int v) {
            dlogits(n, v) = E::store(
                v < valid ? cross_entropy_gradient(E::load(logits(n, v)), l, s, v == local) : 0.0f);
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "cross_entropy_backward", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        const int local = targets(n) - vocab_start;
        const float l = lse(n);
        const float s = targets(n) >= 0 ? scale : 0.0f;
        for (int v = 0; v < valid; ++v)
          dlogits(n, v) = E::store(cross_entropy_gradient(E::load(logits(n, v)), l, s, v == local));
        for (int v = valid; v < width; ++v) dlogits(n, v) = E::store(0.0f);
      });
}

// The whole classifier of a vocabulary held by one rank (tp = 1), row by row in one launch: each
// row's maximum, sum and target logit as cross_entropy_row_max and _row_sums compute them, its
// log-sum-exp and loss as cross_entropy_losses, then its gradient written over it as
// cross_entropy_backward writes it. The same arithmetic in the same order gives the same bits;
// the row is read from memory once and re-read from cache (a team's or a thread's row), where
// the four kernels read it three times and write it once, each a launch.
template <class E = Fp32Elements>
inline void cross_entropy_fused(const Exec& exec, const MatOf<E>& logits, const Vec& losses,
                                const Vec& lse, const ConstIntVec& targets, int valid, float scale,
                                Shape shape = kBuildShape) {
  Region region("trident::cross_entropy_fused");
  const int width = static_cast<int>(logits.extent(1));
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "cross_entropy_fused", row_teams(exec, static_cast<int>(logits.extent(0))),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const int n = team.league_rank(), target = targets(n);
          const float m = team_max(
              team, valid, [&](int v) { return E::load(logits(n, v)); }, -3.0e38f);
          const float sum = team_sum(
              team, valid, [&](int v) { return kmath::exp_vec(E::load(logits(n, v)) - m); });
          const float target_logit =
              target >= 0 && target < valid ? E::load(logits(n, target)) : 0.0f;
          const float l = m + kmath::log(sum);
          team.team_barrier();  // every thread has read the row before any writes its gradient
          Kokkos::single(Kokkos::PerTeam(team), [&] {
            lse(n) = l;
            losses(n) = target >= 0 ? l - target_logit : 0.0f;
          });
          const float s = target >= 0 ? scale : 0.0f;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, width), [&](int v) {
            logits(n, v) = E::store(
                v < valid ? cross_entropy_gradient(E::load(logits(n, v)), l, s, v == target)
                          : 0.0f);
          });
        });
    return;
  }
  Kokkos::parallel_for(
      "cross_entropy_fused", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        auto* row = &logits(n, 0);
        const int target = targets(n);
        const float m = kmath::lane_max(
            valid, [&](int v) { return E::load(row[v]); }, -3.0e38f,
            [&](int v) { prefetch_in_row(row, v, valid); });
        const float sum = kmath::lane_sum(
            valid, [&](int v) { return kmath::exp_vec(E::load(row[v]) - m); },
            [&](int v) { prefetch_in_row(row, v, valid); });
        const float target_logit = target >= 0 && target < valid ? E::load(row[target]) : 0.0f;
        const float l = m + kmath::log(sum);
        lse(n) = l;
        losses(n) = target >= 0 ? l - target_logit : 0.0f;
        const float s = target >= 0 ? scale : 0.0f;
        for (int v = 0; v < valid; ++v)
          row[v] = E::store(cross_entropy_gradient(E::load(row[v]), l, s, v == target));
        for (int v = valid; v < width; ++v) row[v] = E::store(0.0f);
      });
}

// The sum of losses[0, N) in double, written to `total` on the device without waiting for it:
// the micro-batch's loss, which the trainer reads once a step with the others.
inline void cross_entropy_loss_sum(const Exec& exec, const ConstVec& losses, int N,
                                   const Kokkos::View<double, Device>& total) {
  Kokkos::parallel_reduce(
      "loss_sum", Kokkos::RangePolicy<Exec>(exec, 0, N),
      KOKKOS_LAMBDA(int n, double& acc) { acc += losses(n); }, total);
}

}  // namespace trident::kernels
