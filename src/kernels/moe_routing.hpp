// Mixture-of-Experts routing of one token group: router scores, top-k choice, the dispatch plan
// (capacity, drops, each kept slot's row in the expert-ordered buffer), the balancing losses and
// the router's backward. Every decision is a pure function of the group's logits, so any layout
// that routes the same group routes it bit for bit the same.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/moe_options.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// One group of T tokens routed to k of E experts.
struct RoutingShape {
  int tokens = 0, experts = 0, top_k = 1;
  int capacity = 0;  // slots an expert keeps; 0: dropless (every slot kept)
  int slots() const { return tokens * top_k; }
};

// scores[T, E] from logits[T, E] (fp32).
inline void router_scores(const Exec& exec, const Mat& scores, const ConstMat& logits,
                          RouterScore kind) {
  Region region("trident::router_scores");
  const int E = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "router_scores", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(size_t t) {
        if (kind == RouterScore::kSigmoid) {
          for (int e = 0; e < E; ++e) scores(t, e) = 1.0f / (1.0f + kmath::exp(-logits(t, e)));
          return;
        }
        float most = logits(t, 0);
        for (int e = 1; e < E; ++e) most = logits(t, e) > most ? logits(t, e) : most;
        float sum = 0.0f;
        for (int e = 0; e < E; ++e) {
          scores(t, e) = kmath::exp(logits(t, e) - most);
          sum += scores(t, e);
        }
        for (int e = 0; e < E; ++e) scores(t, e) /= sum;
      });
}

// choice[T, k]: each token's k experts by descending scores + bias (bias may be empty; ties go
// to the lower expert), slot 0 the best. weight[T, k]: the chosen unbiased scores divided by
// their sum.
inline void router_top_k(const Exec& exec, const IntMat& choice, const Mat& weight,
                         const ConstMat& scores, const ConstVec& bias) {
  Region region("trident::router_top_k");
  const int E = static_cast<int>(scores.extent(1)), k = static_cast<int>(choice.extent(1));
  const bool biased = bias.extent(0) > 0;
  Kokkos::parallel_for(
      "router_top_k", Kokkos::RangePolicy<Exec>(exec, 0, scores.extent(0)),
      KOKKOS_LAMBDA(size_t t) {
        float sum = 0.0f;
        for (int s = 0; s < k; ++s) {
          int best = -1;
          float best_key = 0.0f;
          for (int e = 0; e < E; ++e) {
            bool taken = false;
            for (int q = 0; q < s; ++q) taken = taken || choice(t, q) == e;
            const float key = scores(t, e) + (biased ? bias(e) : 0.0f);
            if (!taken && (best < 0 || key > best_key)) {  // strict: ties keep the lower expert
              best = e;
              best_key = key;
            }
          }
          choice(t, s) = best;
          weight(t, s) = scores(t, best);
          sum += weight(t, s);
        }
        for (int s = 0; s < k; ++s) weight(t, s) /= sum;
      });
}

// The scratch of the dispatch plan: [T k] slots listed by expert, [E + 1] their offsets.
struct DispatchScratch {
  IntVec listed;          // [T k] the slots t k + s routed to each expert, by expert then token
  IntVec listed_offsets;  // [E + 1] expert e's slots are listed[listed_offsets[e] ..]
  IntVec kept;            // [T k] 1 where the listed slot survives the capacity
};

// The dispatch plan. counts[E]: slots routed to each expert (before drops). offsets[E + 1]:
// expert e's kept slots are rows offsets[e] .. offsets[e + 1] of the expert-ordered buffer, in
// token order. row[T, k]: each slot's row there, -1 where the capacity dropped it.
inline void router_dispatch_plan(const Exec& exec, const IntMat& row, const IntVec& counts,
                                 const IntVec& offsets, const DispatchScratch& scratch,
                                 const ConstIntMat& choice, const ConstMat& scores,
                                 const RoutingShape& shape, DropPolicy policy) {
  Region region("trident::router_dispatch_plan");
  const int T = shape.tokens, k = shape.top_k, E = shape.experts, capacity = shape.capacity;
  const IntVec listed = scratch.listed, listed_offsets = scratch.listed_offsets,
               kept = scratch.kept;
  Kokkos::parallel_for(
      "moe_count", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        int n = 0;
        for (int i = 0; i < T * k; ++i) n += choice(i / k, i % k) == e ? 1 : 0;
        counts(e) = n;
      });
  Kokkos::parallel_scan(
      "moe_listed_offsets", Kokkos::RangePolicy<Exec>(exec, 0, E),
      KOKKOS_LAMBDA(int e, int& before, bool last) {
        if (last) listed_offsets(e) = before;
        before += counts(e);
        if (last && e == E - 1) listed_offsets(E) = before;
      });
  Kokkos::parallel_for(
      "moe_list", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        int at = listed_offsets(e);
        for (int i = 0; i < T * k; ++i)
          if (choice(i / k, i % k) == e) listed(at++) = i;
      });
  // A listed slot's priority: how many slots of its expert go before it; kept below capacity.
  Kokkos::parallel_for(
      "moe_capacity", Kokkos::RangePolicy<Exec>(exec, 0, T * k), KOKKOS_LAMBDA(int j) {
        if (capacity == 0) {
          kept(j) = 1;
          return;
        }
        int e = 0;
        while (listed_offsets(e + 1) <= j) ++e;
        const int me = listed(j), my_slot = me % k;
        const float my_score = scores(me / k, e);
        int ahead = 0;
        for (int q = listed_offsets(e); q < listed_offsets(e + 1); ++q) {
          const int other = listed(q), slot = other % k;
          const float score = scores(other / k, e);
          // Listed in token order, so q < j is "an earlier token" among the expert's slots.
          const bool before = policy == DropPolicy::kPosition
                                  ? slot < my_slot || (slot == my_slot && q < j)
                                  : score > my_score || (score == my_score && q < j);
          ahead += before ? 1 : 0;
        }
        kept(j) = ahead < capacity ? 1 : 0;
      });
  Kokkos::parallel_scan(
      "moe_offsets", Kokkos::RangePolicy<Exec>(exec, 0, E),
      KOKKOS_LAMBDA(int e, int& before, bool last) {
        int n = 0;
        for (int q = listed_offsets(e); q < listed_offsets(e + 1); ++q) n += kept(q);
        if (last) offsets(e) = before;
        before += n;
        if (last && e == E - 1) offsets(E) = before;
      });
  Kokkos::parallel_for(
      "moe_rows", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        int at = offsets(e);
        for (int q = listed_offsets(e); q < listed_offsets(e + 1); ++q)
          row(listed(q) / k, listed(q) % k) = kept(q) ? at++ : -1;
      });
}

// A rank's share of a group's dispatch plan when ranks split the group's tokens (tensor-parallel
// ranks under sequence parallelism, this one routing tokens [first, first + n)): local_row[n, k]
// each of its slots' row in its own expert-ordered buffer (-1: dropped) and local_offsets[E + 1].
// Both plans list an expert's rows in token order, so a rank's rows of expert e are the group's
// rows of e that its tokens hold, renumbered from local_offsets[e]; the drops are the group's.
inline void router_local_plan(const Exec& exec, const IntMat& local_row,
                              const IntVec& local_offsets, const ConstIntMat& row,
                              const ConstIntMat& choice, int first) {
  Region region("trident::router_local_plan");
  const int n = static_cast<int>(local_row.extent(0)), k = static_cast<int>(local_row.extent(1));
  const int E = static_cast<int>(local_offsets.extent(0)) - 1;
  Kokkos::parallel_scan(
      "moe_local_offsets", Kokkos::RangePolicy<Exec>(exec, 0, E),
      KOKKOS_LAMBDA(int e, int& before, bool last) {
        int kept = 0;
        for (int i = 0; i < n * k; ++i) {
          const int t = first + i / k, s = i % k;
          kept += choice(t, s) == e && row(t, s) >= 0 ? 1 : 0;
        }
        if (last) local_offsets(e) = before;
        before += kept;
        if (last && e == E - 1) local_offsets(E) = before;
      });
  Kokkos::parallel_for(
      "moe_local_rows", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        int at = local_offsets(e);
        for (int i = 0; i < n * k; ++i) {
          const int t = first + i / k, s = i % k;
          if (choice(t, s) == e) local_row(i / k, s) = row(t, s) >= 0 ? at++ : -1;
        }
      });
}

// The balancing terms' coefficients for one group, already divided as the loss is.
struct RouterLossScales {
  float aux = 0.0f;  // coeff_aux · (this group's share of the objective)
  float z = 0.0f;    // coeff_z · (this group's share of the objective)
};

// The group's balancing losses, unscaled: aux = E Σ_i f_i P_i with f_i = counts_i / (T k) and
// P_i the mean over tokens of the full distribution (softmax; sigmoid scores normalised per
// token), and z = mean over tokens of logsumexp(logits)². Per-expert sums run in token order, so
// the values do not depend on the thread count. out[0] = aux, out[1] = z; expert_mass[E] scratch.
inline void router_losses(const Exec& exec, const Vec& out, const Vec& expert_mass,
                          const ConstMat& scores, const ConstMat& logits, const ConstIntVec& counts,
                          RouterScore kind, int top_k) {
  Region region("trident::router_losses");
  const int T = static_cast<int>(scores.extent(0)), E = static_cast<int>(scores.extent(1));
  Kokkos::parallel_for(
      "router_expert_mass", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        float mass = 0.0f;
        for (int t = 0; t < T; ++t) {
          float norm = 1.0f;
          if (kind == RouterScore::kSigmoid) {
            norm = 0.0f;
            for (int q = 0; q < E; ++q) norm += scores(t, q);
          }
          mass += scores(t, e) / norm;
        }
        expert_mass(e) = mass / T;
      });
  Kokkos::parallel_for(
      "router_loss_sums", Kokkos::RangePolicy<Exec>(exec, 0, 1), KOKKOS_LAMBDA(int) {
        float aux = 0.0f, z = 0.0f;
        for (int e = 0; e < E; ++e)
          aux += static_cast<float>(counts(e)) / static_cast<float>(T * top_k) * expert_mass(e);
        for (int t = 0; t < T; ++t) {
          float most = logits(t, 0);
          for (int e = 1; e < E; ++e) most = logits(t, e) > most ? logits(t, e) : most;
          float sum = 0.0f;
          for (int e = 0; e < E; ++e) sum += kmath::exp(logits(t, e) - most);
          const float lse = most + kmath::log(sum);
          z += lse * lse;
        }
        out(0) = E * aux;
        out(1) = z / T;
      });
}

// dlogits[n, E] (overwritten) from the gradient of the combine weights dweight[n, k] and the
// balancing losses' scales: back through the renormalisation over the k chosen scores, the
// aux loss (f_i held constant, as counts are), the score function and the z-loss. The n tokens
// are the group's T or a rank's share of them (the rows of scores, logits, choice and weight);
// counts and T are the group's, which the losses normalise by.
inline void router_backward(const Exec& exec, const Mat& dlogits, const ConstMat& dweight,
                            const ConstMat& scores, const ConstMat& logits,
                            const ConstIntMat& choice, const ConstMat& weight,
                            const ConstIntVec& counts, RouterScore kind, RouterLossScales scales,
                            int T) {
  Region region("trident::router_backward");
  const int n = static_cast<int>(scores.extent(0)), E = static_cast<int>(scores.extent(1));
  const int k = static_cast<int>(choice.extent(1));
  Kokkos::parallel_for(
      "router_backward", Kokkos::RangePolicy<Exec>(exec, 0, n), KOKKOS_LAMBDA(int t) {
        // dL/dscores into dlogits first. Renormalisation: w_s = p_cs / S with S = Σ_s p_cs.
        for (int e = 0; e < E; ++e) dlogits(t, e) = 0.0f;
        float chosen = 0.0f, weighted_dw = 0.0f;
        for (int s = 0; s < k; ++s) {
          chosen += scores(t, choice(t, s));
          weighted_dw += dweight(t, s) * weight(t, s);
        }
        for (int s = 0; s < k; ++s)
          dlogits(t, choice(t, s)) += (dweight(t, s) - weighted_dw) / chosen;
        // aux = E Σ_i f_i mean_t(q_ti): dq_ti = E f_i / T, q the full distribution.
        float norm = 1.0f, through_norm = 0.0f;
        if (kind == RouterScore::kSigmoid) {
          norm = 0.0f;
          for (int e = 0; e < E; ++e) norm += scores(t, e);
        }
        for (int e = 0; e < E; ++e) {
          const float a = scales.aux * E * (static_cast<float>(counts(e)) / (T * k)) / T;
          dlogits(t, e) += a / norm;
          through_norm += a * scores(t, e) / (norm * norm);
        }
        if (kind == RouterScore::kSigmoid)  // q = s / Σ s: the normaliser's share
          for (int e = 0; e < E; ++e) dlogits(t, e) -= through_norm;
        // Through the score function.
        if (kind == RouterScore::kSoftmax) {
          float dot = 0.0f;
          for (int e = 0; e < E; ++e) dot += scores(t, e) * dlogits(t, e);
          for (int e = 0; e < E; ++e) dlogits(t, e) = scores(t, e) * (dlogits(t, e) - dot);
        } else {
          for (int e = 0; e < E; ++e) dlogits(t, e) *= scores(t, e) * (1.0f - scores(t, e));
        }
        // z = mean_t lse_t²: dlogit_te = 2 lse_t softmax_te / T.
        if (scales.z != 0.0f) {
          float most = logits(t, 0);
          for (int e = 1; e < E; ++e) most = logits(t, e) > most ? logits(t, e) : most;
          float sum = 0.0f;
          for (int e = 0; e < E; ++e) sum += kmath::exp(logits(t, e) - most);
          const float lse = most + kmath::log(sum);
          for (int e = 0; e < E; ++e)
            dlogits(t, e) += scales.z * 2.0f * lse * kmath::exp(logits(t, e) - lse) / T;
        }
      });
}

// One MoE block's forward added to its statistics `stats` [5 + E]: its aux and z losses
// (losses[0..1]), its dropped slots (row = -1), all its slots, one forward, and the slots routed
// to each expert (counts, before capacity) at 5 + e; one thread in slot order (the sums do not
// depend on threads).
inline constexpr int kMoeStatsHead = 5;
inline void moe_accumulate_stats(const Exec& exec, const Vec& stats, const ConstVec& losses,
                                 const ConstIntVec& row, const ConstIntVec& counts) {
  Region region("trident::moe_accumulate_stats");
  const int slots = static_cast<int>(row.extent(0)), E = static_cast<int>(counts.extent(0));
  Kokkos::parallel_for(
      "moe_accumulate_stats", Kokkos::RangePolicy<Exec>(exec, 0, 1), KOKKOS_LAMBDA(int) {
        int dropped = 0;
        for (int i = 0; i < slots; ++i) dropped += row(i) < 0 ? 1 : 0;
        stats(0) += losses(0);
        stats(1) += losses(1);
        stats(2) += static_cast<float>(dropped);
        stats(3) += static_cast<float>(slots);
        stats(4) += 1.0f;
        for (int e = 0; e < E; ++e) stats(kMoeStatsHead + e) += static_cast<float>(counts(e));
      });
}

// The aux-loss-free balance (DeepSeek-V3): bias_i += rate · sign(mean(c) - c_i) from the step's
// counts summed over every micro-batch and data-parallel rank (held as floats: exact integers).
inline void expert_bias_update(const Exec& exec, const Vec& bias, const ConstVec& counts,
                               float rate) {
  Region region("trident::expert_bias_update");
  const int E = static_cast<int>(bias.extent(0));
  Kokkos::parallel_for(
      "expert_bias_update", Kokkos::RangePolicy<Exec>(exec, 0, E), KOKKOS_LAMBDA(int e) {
        double total = 0.0;
        for (int q = 0; q < E; ++q) total += counts(q);
        const double gap = total / E - counts(e);  // exact: integers, then one division
        bias(e) += gap > 0 ? rate : (gap < 0 ? -rate : 0.0f);
      });
}

}  // namespace trident::kernels
