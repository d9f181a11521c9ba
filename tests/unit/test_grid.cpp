// The grid's named axes: rank <-> coordinates (tp fastest, pp slowest), a pure function tested
// for several shapes, and the description every log line uses.
#include <gtest/gtest.h>

#include <array>
#include <stdexcept>
#include <vector>

#include "comm/grid.hpp"
#include "core/device.hpp"

using namespace trident;

TEST(GridMapping, TensorParallelVariesFastest) {
  const GridShape s{{Axis::dp, 2}, {Axis::tp, 2}, {Axis::pp, 2}};
  EXPECT_EQ(grid_rank(s, {{Axis::tp, 1}}), 1);
  EXPECT_EQ(grid_rank(s, {{Axis::dp, 1}}), 2);
  EXPECT_EQ(grid_rank(s, {{Axis::pp, 1}}), 4);
  EXPECT_EQ(grid_rank(s, {{Axis::dp, 1}, {Axis::tp, 1}, {Axis::pp, 1}}), 7);
}

// A context-parallel group sits next to its tensor-parallel group in rank order (its ranks
// exchange key/value chunks every layer), inside a data-parallel replica; cp is printed only when
// it splits sequences.
TEST(GridMapping, ContextParallelVariesRightAfterTensorParallel) {
  const GridShape s{{Axis::dp, 2}, {Axis::cp, 2}, {Axis::tp, 2}, {Axis::pp, 2}};
  EXPECT_EQ(s.size(), 16);
  EXPECT_EQ(grid_rank(s, {{Axis::tp, 1}}), 1);
  EXPECT_EQ(grid_rank(s, {{Axis::cp, 1}}), 2);
  EXPECT_EQ(grid_rank(s, {{Axis::dp, 1}}), 4);
  EXPECT_EQ(grid_rank(s, {{Axis::pp, 1}}), 8);
  EXPECT_EQ(s.describe(), "dp=2 cp=2 tp=2 pp=2");
  EXPECT_EQ(GridShape({{Axis::dp, 2}}).describe(), "dp=2 tp=1 pp=1");
}

TEST(GridMapping, AxesNotNamedHaveSizeOneAndIndexZero) {
  const GridShape s{{Axis::tp, 4}};
  EXPECT_EQ(s[Axis::dp], 1);
  EXPECT_EQ(s[Axis::pp], 1);
  EXPECT_EQ(s.size(), 4);
  EXPECT_EQ(s.describe(), "dp=1 tp=4 pp=1");
  const GridCoord c{{Axis::tp, 3}};
  EXPECT_EQ(c[Axis::dp], 0);
  EXPECT_EQ(c.with(Axis::pp, 0), c);
  EXPECT_EQ(c.with(Axis::tp, 1)[Axis::tp], 1);
}

TEST(GridMapping, RoundTripsForSeveralShapes) {
  for (const auto& [dp, tp, pp] : std::vector<std::array<int, 3>>{
           {1, 1, 1}, {8, 1, 1}, {2, 2, 2}, {1, 2, 4}, {5, 4, 3}, {3, 8, 1}}) {
    const GridShape s{{Axis::dp, dp}, {Axis::tp, tp}, {Axis::pp, pp}};
    ASSERT_EQ(s.size(), dp * tp * pp);
    for (int r = 0; r < s.size(); ++r) {
      const GridCoord c = grid_coord(s, r);
      for (const Axis a : kAxes) {
        EXPECT_GE(c[a], 0);
        EXPECT_LT(c[a], s[a]) << name_of(a);
      }
      EXPECT_EQ(grid_rank(s, c), r);
    }
  }
}

TEST(GridMapping, ExpertFoldSplitsEachStagesDpTimesTpRanksIntoEpGroupsAndReplicas) {
  for (const auto& [dp, tp, pp, ep] : std::vector<std::array<int, 4>>{
           {8, 1, 1, 8}, {4, 1, 2, 2}, {2, 2, 1, 2}, {4, 2, 1, 4}, {6, 1, 1, 3}, {2, 1, 1, 1}}) {
    const GridShape s{{Axis::dp, dp}, {Axis::tp, tp}, {Axis::pp, pp}};
    // Per stage: every (expert_dp_rank, ep_rank) pair exactly once, so each ep group holds every
    // expert once and each expert has dp tp / ep replicas.
    std::vector<std::vector<int>> held(pp, std::vector<int>(dp * tp, 0));
    for (int r = 0; r < s.size(); ++r) {
      const GridCoord c = grid_coord(s, r);
      const ExpertFold f = expert_fold(s, c, ep);
      EXPECT_EQ(f.ep, ep);
      EXPECT_EQ(f.expert_dp * ep, dp * tp);
      ASSERT_LT(f.ep_rank, ep);
      ASSERT_LT(f.expert_dp_rank, f.expert_dp);
      ++held[c[Axis::pp]][f.expert_dp_rank * ep + f.ep_rank];
      // An ep group is consecutive in rank order: with ep a multiple of tp, a tensor-parallel
      // group lies inside one.
      if (ep % tp == 0) {
        EXPECT_EQ(f.expert_dp_rank, expert_fold(s, c.with(Axis::tp, 0), ep).expert_dp_rank);
      }
    }
    for (const auto& stage : held)
      for (int n : stage) EXPECT_EQ(n, 1);
  }
  EXPECT_THROW(expert_fold(GridShape{{Axis::dp, 4}}, GridCoord{}, 3), std::invalid_argument);
}

TEST(GridLive, SingleRankGridMatchesThePureMapping) {
  Grid grid(MPI_COMM_WORLD, GridShape{});
  EXPECT_EQ(grid.rank(), 0);
  EXPECT_EQ(grid.coord(), GridCoord{});
  for (const Axis a : kAxes) EXPECT_TRUE(grid.groups_node_local(a)) << name_of(a);
  EXPECT_EQ(grid.describe(), "dp=1 tp=1 pp=1");
}

TEST(DeviceChoice, RanksOfANodeSpreadOverItsGpusRoundRobin) {
  EXPECT_EQ(device_for_node_rank(0, 4), 0);
  EXPECT_EQ(device_for_node_rank(3, 4), 3);
  EXPECT_EQ(device_for_node_rank(5, 4), 1);  // more ranks than GPUs: they share, in turn
  EXPECT_EQ(device_for_node_rank(1, 1), 0);  // CUDA_VISIBLE_DEVICES naming one GPU
  EXPECT_EQ(device_for_node_rank(2, 0), 0);
}
