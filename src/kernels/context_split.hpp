// Context parallelism's cut of a sequence into 2 cp balanced causal chunks: which global position
// each of a rank's rows holds (the kernels that read positions, and the model, share it).
#pragma once

#include <Kokkos_Core.hpp>

namespace trident::kernels {

// A sequence of T tokens cut into 2 cp chunks of T / (2 cp): rank r of the cp group holds chunks r
// and 2 cp - 1 - r, in that order, as its T / cp rows. The early chunk's queries see few keys and
// the late one's many, so every rank does the same attention work. Not balanced (a study's
// baseline, parallel.cp_split = "contiguous"), rank r holds the r-th T / cp tokens, and the last
// rank does 2 cp - 1 times the first's attention work. With cp = 1 a rank holds the whole
// sequence and row t is position t.
struct ContextSplit {
  int cp = 1, rank = 0, T = 1;
  bool balanced = true;
  KOKKOS_INLINE_FUNCTION int chunk() const { return T / (2 * cp); }
  KOKKOS_INLINE_FUNCTION int local() const { return T / cp; }
  // The global chunk index of `owner`'s first (half 0) or second (half 1) chunk.
  KOKKOS_INLINE_FUNCTION int chunk_of(int owner, int half) const {
    return half == 0 ? owner : 2 * cp - 1 - owner;
  }
  // The global position of this rank's local row t < local().
  KOKKOS_INLINE_FUNCTION int position(int t) const {
    if (cp == 1) return t;
    if (!balanced) return rank * local() + t;
    const int c = chunk();
    return t < c ? chunk_of(rank, 0) * c + t : chunk_of(rank, 1) * c + t - c;
  }
};

// The whole sequence of T tokens on one rank.
KOKKOS_INLINE_FUNCTION ContextSplit whole_sequence_split(int T) {
  return {1, 0, T};
}

}  // namespace trident::kernels
