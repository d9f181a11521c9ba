// Rank <-> (dp, tp, pp) coordinates: tp fastest, pp slowest, a pure function tested for several
// shapes.
#include <gtest/gtest.h>

#include "comm/grid.hpp"
#include "core/device.hpp"

using namespace trident;

TEST(GridMapping, TensorParallelVariesFastest) {
  const GridShape s{2, 2, 2};  // dp, tp, pp
  EXPECT_EQ(grid_rank(s, {0, 1, 0}), 1);
  EXPECT_EQ(grid_rank(s, {1, 0, 0}), 2);
  EXPECT_EQ(grid_rank(s, {0, 0, 1}), 4);
  EXPECT_EQ(grid_rank(s, {1, 1, 1}), 7);
}

TEST(GridMapping, RoundTripsForSeveralShapes) {
  for (const GridShape s : {GridShape{1, 1, 1}, GridShape{8, 1, 1}, GridShape{2, 2, 2},
                            GridShape{1, 2, 4}, GridShape{5, 4, 3}, GridShape{3, 8, 1}}) {
    for (int r = 0; r < s.size(); ++r) {
      const GridCoord c = grid_coord(s, r);
      EXPECT_GE(c.tp, 0);
      EXPECT_LT(c.tp, s.tp);
      EXPECT_LT(c.dp, s.dp);
      EXPECT_LT(c.pp, s.pp);
      EXPECT_EQ(grid_rank(s, c), r);
    }
  }
}

TEST(GridLive, SingleRankGridMatchesThePureMapping) {
  Grid grid(MPI_COMM_WORLD, GridShape{1, 1, 1});
  EXPECT_EQ(grid.rank(), 0);
  EXPECT_EQ(grid.coord().dp, 0);
  EXPECT_TRUE(grid.tp_groups_node_local());
  EXPECT_EQ(grid.describe(), "dp=1 tp=1 pp=1");
}

TEST(DeviceChoice, RanksOfANodeSpreadOverItsGpusRoundRobin) {
  EXPECT_EQ(device_for_node_rank(0, 4), 0);
  EXPECT_EQ(device_for_node_rank(3, 4), 3);
  EXPECT_EQ(device_for_node_rank(5, 4), 1);  // more ranks than GPUs: they share, in turn
  EXPECT_EQ(device_for_node_rank(1, 1), 0);  // CUDA_VISIBLE_DEVICES naming one GPU
  EXPECT_EQ(device_for_node_rank(2, 0), 0);
}
