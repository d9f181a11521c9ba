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

void check_shape(const GridShape& shape, int ep = 1) {
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  ASSERT_EQ(shape.size(), world_size);
  Grid grid(MPI_COMM_WORLD, shape, ep);
  EXPECT_EQ(grid.rank(), world_rank);  // no reordering
  const GridCoord c = grid.coord();
  EXPECT_EQ(c, grid_coord(shape, world_rank));
  for (const Axis a : kAxes) {
    std::vector<int> expected;
    for (int i = 0; i < shape[a]; ++i) expected.push_back(grid_rank(shape, c.with(a, i)));
    EXPECT_EQ(members(grid.comm(a), world_rank), expected) << name_of(a);
    // One machine: every group of every axis shares the node.
    EXPECT_TRUE(grid.groups_node_local(a)) << name_of(a);
  }
  std::vector<int> mp_expected;
  for (int p = 0; p < shape[Axis::pp]; ++p)
    for (int t = 0; t < shape[Axis::tp]; ++t)
      mp_expected.push_back(grid_rank(shape, c.with(Axis::pp, p).with(Axis::tp, t)));
  EXPECT_EQ(members(grid.model_parallel_comm(), world_rank), mp_expected);
  const int last_stage = shape[Axis::pp] - 1;
  const bool end_stage = c[Axis::pp] == 0 || c[Axis::pp] == last_stage;
  ASSERT_EQ(grid.embedding_comm() != MPI_COMM_NULL, end_stage);
  if (end_stage) {
    std::vector<int> ends{grid_rank(shape, c.with(Axis::pp, 0))};
    if (last_stage > 0) ends.push_back(grid_rank(shape, c.with(Axis::pp, last_stage)));
    EXPECT_EQ(members(grid.embedding_comm(), world_rank), ends);
  }
  // The expert groups: this stage's ranks with the same expert-dp rank (in ep-rank order), and
  // those with the same ep rank (in expert-dp-rank order).
  const ExpertFold mine = grid.experts();
  EXPECT_EQ(mine.ep, ep);
  std::vector<int> ep_expected(ep), edp_expected(mine.expert_dp);
  for (int r = 0; r < shape.size(); ++r) {
    const GridCoord o = grid_coord(shape, r);
    if (o[Axis::pp] != c[Axis::pp]) continue;
    const ExpertFold f = expert_fold(shape, o, ep);
    if (f.expert_dp_rank == mine.expert_dp_rank) ep_expected[f.ep_rank] = r;
    if (f.ep_rank == mine.ep_rank) edp_expected[f.expert_dp_rank] = r;
  }
  EXPECT_EQ(members(grid.expert_comm(), world_rank), ep_expected);
  EXPECT_EQ(members(grid.expert_data_comm(), world_rank), edp_expected);
}

}  // namespace

TEST(GridMpi, FourRanksAllShapes) {
  check_shape({{Axis::dp, 4}});
  check_shape({{Axis::tp, 4}});
  check_shape({{Axis::pp, 4}});
  check_shape({{Axis::dp, 2}, {Axis::tp, 2}});
  check_shape({{Axis::tp, 2}, {Axis::pp, 2}});
  check_shape({{Axis::dp, 2}, {Axis::pp, 2}});
  check_shape({{Axis::dp, 4}}, 2);
  check_shape({{Axis::dp, 4}}, 4);
  check_shape({{Axis::dp, 2}, {Axis::pp, 2}}, 2);
  check_shape({{Axis::dp, 2}, {Axis::tp, 2}}, 2);
}
