// The live grid on several ranks: Cartesian coordinates equal the pure mapping, and each axis
// communicator holds exactly the ranks that differ only along that axis.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/grid.hpp"

using namespace trident;

namespace {

// All world ranks in `comm`, in comm order.
std::vector<int> members(MPI_Comm comm, int world_rank) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> out(size);
  MPI_Allgather(&world_rank, 1, MPI_INT, out.data(), 1, MPI_INT, comm);
  return out;
}

void check_shape(const GridShape& shape) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  ASSERT_EQ(shape.size(), world_size);
  Grid grid(MPI_COMM_WORLD, shape);
  EXPECT_EQ(grid.rank(), world_rank);  // no reordering
  const GridCoord c = grid.coord(), pure = grid_coord(shape, world_rank);
  EXPECT_EQ(c.pp, pure.pp);
  EXPECT_EQ(c.dp, pure.dp);
  EXPECT_EQ(c.tp, pure.tp);
  std::vector<int> tp_expected, dp_expected, pp_expected;
  for (int t = 0; t < shape.tp; ++t) tp_expected.push_back(grid_rank(shape, {c.dp, t, c.pp}));
  for (int d = 0; d < shape.dp; ++d) dp_expected.push_back(grid_rank(shape, {d, c.tp, c.pp}));
  for (int p = 0; p < shape.pp; ++p) pp_expected.push_back(grid_rank(shape, {c.dp, c.tp, p}));
  EXPECT_EQ(members(grid.tp_comm(), world_rank), tp_expected);
  EXPECT_EQ(members(grid.dp_comm(), world_rank), dp_expected);
  EXPECT_EQ(members(grid.pp_comm(), world_rank), pp_expected);
  // One machine: every group of every axis shares the node.
  EXPECT_TRUE(grid.tp_groups_node_local());
  EXPECT_TRUE(grid.dp_groups_node_local());
  std::vector<int> mp_expected;
  for (int p = 0; p < shape.pp; ++p)
    for (int t = 0; t < shape.tp; ++t) mp_expected.push_back(grid_rank(shape, {c.dp, t, p}));
  EXPECT_EQ(members(grid.model_parallel_comm(), world_rank), mp_expected);
  const bool end_stage = c.pp == 0 || c.pp == shape.pp - 1;
  ASSERT_EQ(grid.embedding_comm() != MPI_COMM_NULL, end_stage);
  if (end_stage) {
    std::vector<int> ends{grid_rank(shape, {c.dp, c.tp, 0})};
    if (shape.pp > 1) ends.push_back(grid_rank(shape, {c.dp, c.tp, shape.pp - 1}));
    EXPECT_EQ(members(grid.embedding_comm(), world_rank), ends);
  }
}

}  // namespace

TEST(GridMpi, FourRanksAllShapes) {
  check_shape({4, 1, 1});
  check_shape({1, 4, 1});
  check_shape({1, 1, 4});
  check_shape({2, 2, 1});
  check_shape({1, 2, 2});
  check_shape({2, 1, 2});
}
