// How row kernels map onto hardware: a thread per row on CPUs, a team per row on GPUs; both shapes
// compile in every build, so a host test holds the GPU shape to the CPU one.
#pragma once

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

// Column sums on GPUs: a team per kColumnBlock columns, whose vector lanes read a row's columns
// side by side (coalesced) and whose kColumnTeamRows threads take every kColumnTeamRows-th row; the
// threads' partial sums meet in team scratch and are added in thread order.
constexpr int kColumnBlock = 32;
#if defined(KOKKOS_ENABLE_CUDA)
constexpr int kColumnTeamRows = 8;
constexpr int kColumnLanes = kColumnBlock;
#else
constexpr int kColumnTeamRows = 1;
constexpr int kColumnLanes = 1;  // a host team walks its columns in order
#endif

// outs[k](c) += sum over n < rows of term(n, c, t)[k] for every c < cols, k < K: term writes the K
// terms of element (n, c) into t.
template <int K, class Term>
inline void column_sums_teams(const Exec& exec, const char* label,
                              const Kokkos::Array<Vec, K>& outs, int rows, int cols,
                              const Term& term) {
  constexpr int W = kColumnBlock, R = kColumnTeamRows;
  const size_t partial_floats = static_cast<size_t>(K) * R * W;
  TeamPolicy policy(exec, (cols + W - 1) / W, R, kColumnLanes);
  policy.set_scratch_size(0, Kokkos::PerTeam(partial_floats * sizeof(float)));
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const int c0 = team.league_rank() * W, width = cols - c0 < W ? cols - c0 : W;
        const int r = team.team_rank(), stride = team.team_size();
        ScratchFloats partial(team.team_scratch(0), partial_floats);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width), [&](int j) {
          float acc[K] = {};
          for (int n = r; n < rows; n += stride) {
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
              outs[k](c0 + j) += sum;
            }
          });
      });
}

}  // namespace trident::kernels
