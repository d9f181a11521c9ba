// Fused softmax + cross-entropy over the vocabulary: per-row loss forward, in-place gradient.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

// losses[N] = logsumexp(logits[n,:V]) - logits[n, target]; lse[N] kept for backward.
// Columns >= V (vocabulary padding) are ignored; a negative target gives loss 0.
inline void cross_entropy_forward(const Exec& exec, const Vec& losses, const Vec& lse,
                                  const ConstMat& logits, const ConstIntVec& targets, int V) {
  Region region("trident::cross_entropy_forward");
  Kokkos::parallel_for(
      "cross_entropy_forward", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        float maxv = -3.0e38f;
        for (int v = 0; v < V; ++v) maxv = logits(n, v) > maxv ? logits(n, v) : maxv;
        float sum = 0.f;
        for (int v = 0; v < V; ++v) sum += kmath::exp(logits(n, v) - maxv);
        const float l = maxv + kmath::log(sum);
        lse(n) = l;
        const int tgt = targets(n);
        losses(n) = tgt >= 0 ? l - logits(n, tgt) : 0.0f;
      });
}

// dlogits[n,v] = scale * (softmax(logits)[n,v] - [v == target]); dlogits may alias logits.
// `scale` is d(loss)/d(per-row loss), i.e. 1 / (global token count) for a mean loss.
inline void cross_entropy_backward(const Exec& exec, const Mat& dlogits, const ConstMat& logits,
                                   const ConstVec& lse, const ConstIntVec& targets, int V,
                                   float scale) {
  Region region("trident::cross_entropy_backward");
  const int VP = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "cross_entropy_backward", Kokkos::RangePolicy<Exec>(exec, 0, logits.extent(0)),
      KOKKOS_LAMBDA(int n) {
        const int tgt = targets(n);
        const float l = lse(n);
        const float s = tgt >= 0 ? scale : 0.0f;
        for (int v = 0; v < V; ++v) {
          const float p = kmath::exp(logits(n, v) - l);
          dlogits(n, v) = s * (p - (v == tgt ? 1.0f : 0.0f));
        }
        for (int v = V; v < VP; ++v) dlogits(n, v) = 0.0f;
      });
}

}  // namespace trident::kernels
