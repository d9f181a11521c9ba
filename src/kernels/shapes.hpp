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

// A warp per row: kRowWarps rows a team, each row's elements strided by a warp's kWarpLanes lanes
// (Kokkos' threads and vector lanes); one row and one lane a team on hosts. A row's reductions
// are then warp shuffles, with no barrier across the team.
#if defined(KOKKOS_ENABLE_CUDA)
constexpr int kRowWarps = 8;
constexpr int kWarpLanes = 32;
#else
constexpr int kRowWarps = 1;
constexpr int kWarpLanes = 1;
#endif

inline TeamPolicy row_warps(const Exec& exec, int rows) {
  return TeamPolicy(exec, (rows + kRowWarps - 1) / kRowWarps, kRowWarps, kWarpLanes);
}

// The rows [first, last) of a row_warps team.
KOKKOS_INLINE_FUNCTION Kokkos::pair<int, int> team_rows(const TeamMember& team, int rows) {
  const int first = team.league_rank() * kRowWarps;
  return {first, rows < first + kRowWarps ? rows : first + kRowWarps};
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

// The row blocks column_sums_teams (block_rows kColumnRowBlock) or norm_backward_teams
// (kNormRowBlock) splits K column sums over rows x cols into, with `partials` floats between its
// passes: one per block_rows rows, as many as fit (at least one).
constexpr int column_row_blocks(int K, int rows, int cols, size_t partials,
                                int block_rows = kColumnRowBlock) {
  const size_t wanted = static_cast<size_t>((rows + block_rows - 1) / block_rows);
  const size_t per_block = static_cast<size_t>(K) * cols;
  const size_t room = per_block > 0 ? partials / per_block : 0;
  return static_cast<int>(std::max<size_t>(1, std::min(wanted, room)));
}

// outs[k](c) += the sum of sums[k, b, c] over the b < blocks row blocks, in block order: the
// second pass of the GPU shape's column sums.
template <int K>
inline void add_row_block_sums(const Exec& exec, const Kokkos::Array<Vec, K>& outs, const Vec& sums,
                               int blocks, int cols) {
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
  if (blocks > 1) add_row_block_sums<K>(exec, outs, sums, blocks, cols);
}

// Row norms' backward on GPUs in one pass over dout and inp (a team per block of kNormRowBlock
// rows): the input gradient, and K column sums for the parameters' gradients. A team takes its
// rows kNormChunkRows at a time: its warps reduce each row's S statistics (row_terms(n, c, t)
// writes the S terms of element (n, c) that are summed over c), then its threads walk the chunk
// column by column, `column(n, c, sums, t)` writing the input gradient of (n, c) from the row's
// sums and the K column terms, which add into per-column accumulators in team scratch in row
// order. The chunk's second read of a row comes from the cache, so the rows cross memory once
// where the two-kernel backward read them twice. Returns false (nothing done) where the
// accumulators do not fit a team's scratch: the caller runs the two halves.
constexpr int kNormRowBlock = 128;
constexpr int kNormChunkRows = 16;
// A team's scratch for the fused pass, at most: the static shared memory every CUDA GPU gives a
// block without opting in (and a bound the launch roofline can know on a host).
constexpr size_t kNormScratchLimit = 48 * 1024;

// Whether norm_backward_teams runs its one pass for K column sums over cols (S row statistics):
// its two scratch arrays, with room for their alignment, within kNormScratchLimit.
constexpr bool norm_backward_fits(int K, int S, int cols) {
  return (static_cast<size_t>(K) * cols + static_cast<size_t>(kNormChunkRows) * S) * sizeof(float) +
             2 * 128 <=
         kNormScratchLimit;
}

template <int K, int S, class RowTerms, class Column>
inline bool norm_backward_teams(const Exec& exec, const char* label,
                                const Kokkos::Array<Vec, K>& outs, int rows, int cols,
                                const RowTerms& row_terms, const Column& column,
                                const Vec& partials = Vec()) {
  const size_t acc_floats = static_cast<size_t>(K) * cols, stat_floats = kNormChunkRows * S;
  const size_t scratch_bytes =
      ScratchFloats::shmem_size(acc_floats) + ScratchFloats::shmem_size(stat_floats);
  const int blocks = column_row_blocks(K, rows, cols, partials.extent(0), kNormRowBlock);
  const int block_rows = (rows + blocks - 1) / blocks;
  TeamPolicy policy(exec, blocks, kRowWarps, kWarpLanes);
  if (!norm_backward_fits(K, S, cols) ||
      scratch_bytes > static_cast<size_t>(policy.scratch_size_max(0)))
    return false;
  policy.set_scratch_size(0, Kokkos::PerTeam(scratch_bytes));
  const Vec sums = partials;
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const int block = team.league_rank();
        const int n0 = block * block_rows, n1 = rows < n0 + block_rows ? rows : n0 + block_rows;
        ScratchFloats acc(team.team_scratch(0), acc_floats);
        ScratchFloats stats(team.team_scratch(0), stat_floats);
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, K * cols), [&](int e) { acc(e) = 0; });
        for (int r0 = n0; r0 < n1; r0 += kNormChunkRows) {
          const int chunk = n1 - r0 < kNormChunkRows ? n1 - r0 : kNormChunkRows;
          team.team_barrier();  // the accumulators cleared, or the last chunk's stats read
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, chunk), [&](int i) {
            for (int k = 0; k < S; ++k) {
              float sum = 0.0f;
              Kokkos::parallel_reduce(
                  Kokkos::ThreadVectorRange(team, cols),
                  [&](int c, float& part) {
                    float t[S];
                    row_terms(r0 + i, c, t);
                    part += t[k];
                  },
                  sum);
              Kokkos::single(Kokkos::PerThread(team), [&] { stats(i * S + k) = sum; });
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](int c) {
            for (int i = 0; i < chunk; ++i) {
              float t[K];
              column(r0 + i, c, &stats(i * S), t);
              for (int k = 0; k < K; ++k) acc(k * cols + c) += t[k];
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, K * cols), [&](int e) {
          const int k = e / cols, c = e % cols;
          if (blocks == 1)
            outs[k](c) += acc(e);
          else
            sums((static_cast<size_t>(k) * blocks + block) * cols + c) = acc(e);
        });
      });
  if (blocks > 1) add_row_block_sums<K>(exec, outs, sums, blocks, cols);
  return true;
}

}  // namespace trident::kernels
