// How row kernels map onto hardware: a thread per row on CPUs, a team per row on GPUs; both shapes
// compile in every build, so a host test holds the GPU shape to the CPU one.
#pragma once

#include <algorithm>

#include "core/types.hpp"

namespace trident::kernels {

// kCpu: a work item per row (or per kmath::kLanes columns), loops along the row that vectorise,
// rows summed in order so the bits never depend on the thread count. kGpu: a team per row whose
// threads stride it (neighbouring threads read neighbouring elements, so loads coalesce), and
// column sums split over rows inside a team; deterministic for a given build and GPU.
enum class Shape { kCpu, kGpu };

#if defined(KOKKOS_ENABLE_CUDA)
constexpr Shape kBuildShape = Shape::kGpu;
#else
constexpr Shape kBuildShape = Shape::kCpu;
#endif

using TeamPolicy = Kokkos::TeamPolicy<Exec>;
using TeamMember = TeamPolicy::member_type;
using ScratchFloats =
    Kokkos::View<float*, Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// One team per row. On a GPU, 256 threads (8 warps) stride a row: 3 elements each for C = 768,
// about 200 for a 50,257-wide logits row. Host spaces let Kokkos choose.
inline TeamPolicy row_teams(const Exec& exec, int rows) {
#if defined(KOKKOS_ENABLE_CUDA)
  return TeamPolicy(exec, rows, 256);
#else
  return TeamPolicy(exec, rows, Kokkos::AUTO);
#endif
}

// sum over i < n of term(i), across the team (every thread gets the result).
template <class Term>
KOKKOS_INLINE_FUNCTION float team_sum(const TeamMember& team, int n, const Term& term) {
  float sum = 0.0f;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, n), [&](int i, float& acc) { acc += term(i); }, sum);
  return sum;
}

// max over i < n of term(i), and `lowest` when n is 0 or every term is below it.
template <class Term>
KOKKOS_INLINE_FUNCTION float team_max(const TeamMember& team, int n, const Term& term,
                                      float lowest) {
  float m = lowest;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, n),
      [&](int i, float& acc) {
        const float t = term(i);
        acc = t > acc ? t : acc;
      },
      Kokkos::Max<float>(m));
  return m > lowest ? m : lowest;
}

// Column sums on GPUs over a 2-D grid of teams, each kColumnBlock columns by a block of rows: its
// vector lanes read a row's columns side by side (coalesced) and its kColumnTeamRows threads take
// every kColumnTeamRows-th row of the block; the threads' partial sums meet in team scratch and
// are added in thread order. With one row block the teams add into the outputs; with several they
// write `partials` [K, row blocks, cols], and a second kernel adds each column's partials in
// row-block order. A team per column block alone (one row block) gave GPT-2's LayerNorm
// gradients 24 teams and each thread 2,048 rows: a few percent of an H200's SMs. The bits depend
// on the grid (as many row blocks of kColumnRowBlock rows as `partials` holds), never on the
// order the teams run in.
constexpr int kColumnBlock = 32;
constexpr int kColumnRowBlock = 256;
#if defined(KOKKOS_ENABLE_CUDA)
constexpr int kColumnTeamRows = 8;
constexpr int kColumnLanes = kColumnBlock;
#else
constexpr int kColumnTeamRows = 1;
constexpr int kColumnLanes = 1;  // a host team walks its columns in order
#endif

// The floats of `partials` that give K column sums over rows x cols their full grid.
constexpr size_t column_partials_elements(int K, int rows, int cols) {
  return static_cast<size_t>(K) * ((rows + kColumnRowBlock - 1) / kColumnRowBlock) * cols;
}

// The row blocks column_sums_teams splits K column sums over rows x cols into, with `partials`
// floats between its passes: one per kColumnRowBlock rows, as many as fit (at least one).
constexpr int column_row_blocks(int K, int rows, int cols, size_t partials) {
  const size_t wanted = static_cast<size_t>((rows + kColumnRowBlock - 1) / kColumnRowBlock);
  const size_t per_block = static_cast<size_t>(K) * cols;
  const size_t room = per_block > 0 ? partials / per_block : 0;
  return static_cast<int>(std::max<size_t>(1, std::min(wanted, room)));
}

// outs[k](c) += sum over n < rows of term(n, c, t)[k] for every c < cols, k < K: term writes the K
// terms of element (n, c) into t. `partials` (column_partials_elements floats, or fewer: fewer
// row blocks; empty: one) holds the row blocks' sums between the two passes.
template <int K, class Term>
inline void column_sums_teams(const Exec& exec, const char* label,
                              const Kokkos::Array<Vec, K>& outs, int rows, int cols,
                              const Term& term, const Vec& partials = Vec()) {
  constexpr int W = kColumnBlock, R = kColumnTeamRows;
  const size_t partial_floats = static_cast<size_t>(K) * R * W;
  const int blocks = column_row_blocks(K, rows, cols, partials.extent(0));
  const int block_rows = (rows + blocks - 1) / blocks, column_blocks = (cols + W - 1) / W;
  TeamPolicy policy(exec, column_blocks * blocks, R, kColumnLanes);
  policy.set_scratch_size(0, Kokkos::PerTeam(partial_floats * sizeof(float)));
  const Vec sums = partials;
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const int block = team.league_rank() / column_blocks;
        const int c0 = (team.league_rank() % column_blocks) * W,
                  width = cols - c0 < W ? cols - c0 : W;
        const int n0 = block * block_rows, n1 = rows < n0 + block_rows ? rows : n0 + block_rows;
        const int r = team.team_rank(), stride = team.team_size();
        ScratchFloats partial(team.team_scratch(0), partial_floats);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width), [&](int j) {
          float acc[K] = {};
          for (int n = n0 + r; n < n1; n += stride) {
            float t[K];
            term(n, c0 + j, t);
            for (int k = 0; k < K; ++k) acc[k] += t[k];
          }
          for (int k = 0; k < K; ++k) partial((k * R + r) * W + j) = acc[k];
        });
        team.team_barrier();
        if (r == 0)
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width), [&](int j) {
            for (int k = 0; k < K; ++k) {
              float sum = 0.0f;
              for (int q = 0; q < stride; ++q) sum += partial((k * R + q) * W + j);
              if (blocks == 1)
                outs[k](c0 + j) += sum;
              else
                sums((static_cast<size_t>(k) * blocks + block) * cols + c0 + j) = sum;
            }
          });
      });
  if (blocks == 1) return;
  Kokkos::parallel_for(
      "column_sums_blocks", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(K) * cols),
      KOKKOS_LAMBDA(size_t e) {
        const int k = static_cast<int>(e / cols), c = static_cast<int>(e % cols);
        float sum = 0.0f;
        for (int b = 0; b < blocks; ++b)
          sum += sums((static_cast<size_t>(k) * blocks + b) * cols + c);
        outs[k](c) += sum;
      });
}

}  // namespace trident::kernels
