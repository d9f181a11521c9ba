// How tiled causal attention cuts its (query, key) plane: shared by the kernels and the memory
// model.
#pragma once

#include <cstddef>

#include "core/names.hpp"
#include "core/precision.hpp"

namespace trident::kernels {

// Which attention a GPU build runs (attention.kernel): cuDNN's fused flash attention where it
// takes the shape, else the tiled one below, saying why once (auto); cuDNN, or an error naming why
// it cannot (cudnn); the tiled one (tiled). Host builds have no cuDNN: auto and tiled run the
// tiled attention, cudnn is a configuration error.
enum class AttentionKernel { kAuto, kCudnn, kTiled };

// Attention is computed tile by tile: a block of query rows against a tile of keys at a time, with
// an online softmax (each row's running maximum and sum; earlier tiles' output rescaled when the
// maximum grows). Forward keeps only each row's log-sum-exp; backward recomputes each tile's
// probabilities from it. Nothing [T, T] is ever stored, and a block of rows [r0, r0 + rows) visits
// only the key tiles below r0 + rows: the causal half is skipped but for the diagonal's tiles.
struct AttentionTiles {
  int rows;  // query rows per block
  int keys;  // keys per tile
};

// GPU builds run one (sequence, query block, key tile) at a time, as GEMMs batched over the heads
// and a softmax kernel: each tile costs launches, not FLOPs, at GPT-2's sizes. Whole-sequence
// tiles up to T = 1024 make one block of one tile per sequence (34 launches a sequence and layer
// in forward at T = 1024 with 256-row tiles, 4 with whole ones), at the price of the masked half
// of the score products and a [NH, T, T] scratch.
constexpr AttentionTiles kGpuAttentionTiles{1024, 1024};
// Host builds run one (sequence, head) per thread: 32 rows keep a tile of scores in L2 beside the
// head's keys; 256 keys per tile make a short sequence (T <= 256) a single tile.
constexpr AttentionTiles kHostAttentionTiles{32, 256};
#if defined(KOKKOS_ENABLE_CUDA)
constexpr AttentionTiles kBuildAttentionTiles = kGpuAttentionTiles;
#else
constexpr AttentionTiles kBuildAttentionTiles = kHostAttentionTiles;
#endif

// The tiles for sequences of T tokens when `asked` for (attention.tile_rows, attention.tile_keys;
// 0: the `defaults`, this build's unless a prediction for another build asks), never larger than
// the sequence.
constexpr AttentionTiles attention_tiles(int T, AttentionTiles asked = {0, 0},
                                         AttentionTiles defaults = kBuildAttentionTiles) {
  const int rows = asked.rows > 0 ? asked.rows : defaults.rows;
  const int keys = asked.keys > 0 ? asked.keys : defaults.keys;
  return {T < rows ? T : rows, T < keys ? T : keys};
}

// Scratch of the per-(sequence, head) shape (host builds), in floats: per work item a tile of
// probabilities and one of their gradients, and two values per query row (the running maximum
// and sum in forward, the row's dout . out in backward). On 16-bit tensors also the rows the BLAS
// reads widened to fp32 (a block of q and of dout, a tile of k and of v) and the fp32 sums of a
// block's output or dq and of the head's dk and dv, rounded once into their 16-bit tensors.
constexpr size_t attention_tiled_scratch(int B, int NH, int HS, int T, AttentionTiles t,
                                         Precision format) {
  const size_t R = static_cast<size_t>(t.rows), K = static_cast<size_t>(t.keys);
  const size_t widened =
      format == Precision::kFp32 ? 0 : (3 * R + 2 * K + 2 * static_cast<size_t>(T)) * HS;
  return static_cast<size_t>(B) * NH * (2 * R * K + 2 * R + widened);
}

// Scratch of the batched shape (GPU builds), in floats: the same tiles for every head of one
// (sequence, query block), and one value per row (the running sum, then dout . out). On 16-bit
// tensors also the tiles rounded to 16 bits (two per head), the fp32 sums of a block's o or dq,
// and those of one sequence's dk and dv.
constexpr size_t attention_batched_scratch(int NH, int HS, int T, AttentionTiles t,
                                           Precision format) {
  const size_t R = static_cast<size_t>(t.rows), K = static_cast<size_t>(t.keys);
  const size_t rounded = format == Precision::kFp32 ? 0 : R * K + R * HS + 2 * size_t(T) * HS;
  return static_cast<size_t>(NH) * (R * (2 * K + 1) + rounded);
}

// The scratch this build's attention takes for B sequences of T tokens, NH heads of HS channels,
// tensors stored in `format`, tiles as `asked` (attention_tiles).
constexpr size_t attention_scratch_elements(int B, int NH, int HS, int T, Precision format,
                                            AttentionTiles asked = {0, 0}) {
#if defined(KOKKOS_ENABLE_CUDA)
  (void)B;
  return attention_batched_scratch(NH, HS, T, attention_tiles(T, asked), format);
#else
  return attention_tiled_scratch(B, NH, HS, T, attention_tiles(T, asked), format);
#endif
}

}  // namespace trident::kernels

namespace trident {
template <>
inline constexpr std::array<Named<kernels::AttentionKernel>, 3> kNames<kernels::AttentionKernel>{
    {{kernels::AttentionKernel::kAuto, "auto"},
     {kernels::AttentionKernel::kCudnn, "cudnn"},
     {kernels::AttentionKernel::kTiled, "tiled"}}};
}  // namespace trident
