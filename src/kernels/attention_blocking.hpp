// How causal attention blocks its query rows: shared by the kernels and the memory model.
#pragma once

#include <Kokkos_Macros.hpp>

namespace trident::kernels {

// Query rows per block. A block of rows [r0, r0 + rows) needs only the keys [0, r0 + rows), so the
// causal half of the score matrix is skipped but for the block's own triangle; the backward keeps
// one block's score gradients, [rows, T], as its scratch per (batch, head).
constexpr int kAttentionRowBlock = 32;

#if defined(KOKKOS_ENABLE_CUDA)
// GPU builds compute all T rows of a (batch, head) at once, as GEMMs batched over the heads.
constexpr int attention_block_rows(int T) {
  return T;
}
#else
constexpr int attention_block_rows(int T) {
  return T < kAttentionRowBlock ? T : kAttentionRowBlock;
}
#endif

}  // namespace trident::kernels
