// The Cartesian process grid world = dp x tp x pp and its per-axis communicators. Axes are named
// in the order dp, tp, pp everywhere; ranks are numbered tp fastest, then dp, then pp.
#pragma once

#include <mpi.h>

#include <array>
#include <string>

namespace trident {

struct GridShape {
  int dp = 1, tp = 1, pp = 1;
  int size() const { return dp * tp * pp; }
};

struct GridCoord {
  int dp = 0, tp = 0, pp = 0;
};

// rank = tp + tp_size * (dp + dp_size * pp): a tensor-parallel group is contiguous in rank
// order, hence on one node under the usual block rank placement. Pure functions, no MPI.
int grid_rank(const GridShape& s, const GridCoord& c);
GridCoord grid_coord(const GridShape& s, int rank);

// Owns the Cartesian communicator and one communicator per axis (freed in the destructor).
// Built from the communicator main() hands it; nothing below main() uses MPI_COMM_WORLD.
class Grid {
 public:
  Grid(MPI_Comm world, GridShape shape);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  int size() const { return shape_.size(); }
  MPI_Comm world() const { return cart_; }
  MPI_Comm dp_comm() const { return dp_; }
  MPI_Comm tp_comm() const { return tp_; }
  MPI_Comm pp_comm() const { return pp_; }
  // pp x tp: one model replica, over which the global gradient norm is reduced.
  MPI_Comm model_parallel_comm() const { return mp_; }
  // pp ranks 0 and pp-1 at this (dp, tp): the first and last stage, both holding the tied token
  // embedding (a single rank when pp == 1; MPI_COMM_NULL on the middle pp ranks).
  MPI_Comm embedding_comm() const { return embedding_; }
  // "dp=2 tp=1 pp=1"
  std::string describe() const;
  // True when every group of the axis shares a node (NCCL's auto choice, comm/backend.hpp); main()
  // warns when tp groups do not.
  bool tp_groups_node_local() const { return tp_node_local_; }
  bool dp_groups_node_local() const { return dp_node_local_; }
  // The ranks of this run on this rank's node (shared memory), which share its cores.
  int ranks_on_node() const { return ranks_on_node_; }

 private:
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  MPI_Comm cart_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL, tp_ = MPI_COMM_NULL, pp_ = MPI_COMM_NULL;
  MPI_Comm mp_ = MPI_COMM_NULL, embedding_ = MPI_COMM_NULL;
  bool tp_node_local_ = true, dp_node_local_ = true;
  int ranks_on_node_ = 1;

  bool axis_node_local(MPI_Comm axis, int size) const;  // collective over every rank
};

}  // namespace trident
