// Token + position embedding over a (possibly vocabulary-parallel) slice of the token table:
// forward gathers rows, backward scatter-adds them.
#pragma once

#include "core/types.hpp"
#include "kernels/context_split.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

// out[N,C] = wte[tokens[n] - vocab_start, :] (0 when this slice does not hold the token)
//          + wpe[p, :] (skipped when wpe is empty: a tp rank other than 0 adds no position
//          term, so the sum over the tp group counts it once), p the global position of row
//          n % T (split.position: n % T itself but under context parallelism).
// Tables and output stored as E (kernels/elements.hpp); the sum in fp32, rounded once.
template <class E = Fp32Elements>
inline void embedding_forward(const Exec& exec, const MatOf<E>& out, const ConstIntVec& tokens,
                              const ConstMatOf<E>& wte, const ConstMatOf<E>& wpe, int T,
                              int vocab_start, Shape shape = kBuildShape, ContextSplit split = {}) {
  Region region("trident::embedding_forward");
  const int C = static_cast<int>(out.extent(1));
  const int rows = static_cast<int>(wte.extent(0));
  const bool with_positions = wpe.extent(0) > 0;
  if (shape == Shape::kGpu) {
    Kokkos::parallel_for(
        "embedding_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0) * C),
        KOKKOS_LAMBDA(size_t i) {
          const int n = static_cast<int>(i / C), c = static_cast<int>(i % C);
          const int row = tokens(n) - vocab_start;
          const bool held = row >= 0 && row < rows;
          out(n, c) = E::store((held ? E::load(wte(row, c)) : 0.0f) +
                               (with_positions ? E::load(wpe(split.position(n % T), c)) : 0.0f));
        });
    return;
  }
  Kokkos::parallel_for(
      "embedding_forward", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)), KOKKOS_LAMBDA(int n) {
        const int row = tokens(n) - vocab_start, t = split.position(n % T);
        const bool held = row >= 0 && row < rows;
        for (int c = 0; c < C; ++c)
          out(n, c) = E::store((held ? E::load(wte(row, c)) : 0.0f) +
                               (with_positions ? E::load(wpe(t, c)) : 0.0f));
      });
}

// dwte[V_slice,C] += scatter of dout rows by token (held tokens only); dwpe[T,C] += sum over
// the batch (at the rows' global positions, as forward). Every element of dwte and dwpe adds its
// terms in row order n, so the result is the same bits in both shapes and on every backend. CPUs: a
// work item per channel. GPUs: a work item per (channel, block of vocabulary rows), each scanning
// every token and adding the rows of its block (C alone is too few threads), and a work item per
// element of dwpe.
constexpr int kEmbeddingGpuRowBlocks = 64;

// dout stored as E; the table gradients fp32.
template <class E = Fp32Elements>
inline void embedding_backward(const Exec& exec, const Mat& dwte, const Mat& dwpe,
                               const ConstMatOf<E>& dout, const ConstIntVec& tokens, int T,
                               int vocab_start, Shape shape = kBuildShape,
                               ContextSplit split = {}) {
  Region region("trident::embedding_backward");
  const int N = static_cast<int>(dout.extent(0));
  const int rows = static_cast<int>(dwte.extent(0));
  const bool with_positions = dwpe.extent(0) > 0;  // Llama has no position table
  if (shape == Shape::kGpu) {
    const int C = static_cast<int>(dout.extent(1));
    const int block_rows = (rows + kEmbeddingGpuRowBlocks - 1) / kEmbeddingGpuRowBlocks;
    if (rows > 0)
      Kokkos::parallel_for(
          "embedding_backward_tokens",
          Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(kEmbeddingGpuRowBlocks) * C),
          KOKKOS_LAMBDA(size_t i) {
            const int c = static_cast<int>(i % C);
            const int first = static_cast<int>(i / C) * block_rows;
            for (int n = 0; n < N; ++n) {
              const int row = tokens(n) - vocab_start;
              if (row >= first && row < first + block_rows && row < rows)
                dwte(row, c) += E::load(dout(n, c));
            }
          });
    if (with_positions)
      Kokkos::parallel_for(
          "embedding_backward_positions",
          Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(T) * C), KOKKOS_LAMBDA(size_t i) {
            const int t = static_cast<int>(i / C), c = static_cast<int>(i % C);
            const int p = split.position(t);
            for (int n = t; n < N; n += T) dwpe(p, c) += E::load(dout(n, c));
          });
    return;
  }
  Kokkos::parallel_for(
      "embedding_backward", Kokkos::RangePolicy<Exec>(exec, 0, dout.extent(1)),
      KOKKOS_LAMBDA(int c) {
        for (int n = 0; n < N; ++n) {
          const float g = E::load(dout(n, c));
          const int row = tokens(n) - vocab_start;
          if (row >= 0 && row < rows) dwte(row, c) += g;
          if (with_positions) dwpe(split.position(n % T), c) += g;
        }
      });
}

}  // namespace trident::kernels
