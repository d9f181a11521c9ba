// Grid construction with MPI_Cart_create / MPI_Cart_sub and the node-locality check.
#include "comm/grid.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

int grid_rank(const GridShape& s, const GridCoord& c) {
  return c.tp + s.tp * (c.dp + s.dp * c.pp);
}

GridCoord grid_coord(const GridShape& s, int rank) {
  GridCoord c;
  c.tp = rank % s.tp;
  c.dp = (rank / s.tp) % s.dp;
  c.pp = rank / (s.tp * s.dp);
  return c;
}

Grid::Grid(MPI_Comm world, GridShape shape) : shape_(shape) {
  // MPI's Cartesian dims vary the last fastest, so they are listed slowest first (pp, dp, tp):
  // exactly grid_rank's numbering. reorder = 0 keeps ranks where the launcher placed them.
  int dims[3] = {shape.pp, shape.dp, shape.tp};
  int periods[3] = {0, 0, 0};
  TRIDENT_MPI(MPI_Cart_create(world, 3, dims, periods, 0, &cart_));
  TRIDENT_MPI(MPI_Comm_rank(cart_, &rank_));
  coord_ = grid_coord(shape, rank_);
  const int keep_pp[3] = {1, 0, 0}, keep_dp[3] = {0, 1, 0}, keep_tp[3] = {0, 0, 1};
  TRIDENT_MPI(MPI_Cart_sub(cart_, keep_pp, &pp_));
  TRIDENT_MPI(MPI_Cart_sub(cart_, keep_dp, &dp_));
  TRIDENT_MPI(MPI_Cart_sub(cart_, keep_tp, &tp_));
  const int keep_mp[3] = {1, 0, 1};
  TRIDENT_MPI(MPI_Cart_sub(cart_, keep_mp, &mp_));
  const bool end_rank = coord_.pp == 0 || coord_.pp == shape.pp - 1;
  // One group per (dp, tp), named by its pp rank 0.
  const int first = grid_rank(shape, {coord_.dp, coord_.tp, 0});
  TRIDENT_MPI(MPI_Comm_split(cart_, end_rank ? first : MPI_UNDEFINED, coord_.pp, &embedding_));
  MPI_Comm node;
  TRIDENT_MPI(MPI_Comm_split_type(cart_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  TRIDENT_MPI(MPI_Comm_size(node, &ranks_on_node_));
  TRIDENT_MPI(MPI_Comm_free(&node));
  tp_node_local_ = axis_node_local(tp_, shape.tp);
  dp_node_local_ = axis_node_local(dp_, shape.dp);
}

bool Grid::axis_node_local(MPI_Comm axis, int size) const {
  // Node-local when splitting every group of the axis by shared memory leaves it whole.
  MPI_Comm node_part;
  TRIDENT_MPI(MPI_Comm_split_type(axis, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_part));
  int part_size = 0, all = 0;
  TRIDENT_MPI(MPI_Comm_size(node_part, &part_size));
  const int local = part_size == size ? 1 : 0;
  TRIDENT_MPI(MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, cart_));
  TRIDENT_MPI(MPI_Comm_free(&node_part));
  return all == 1;
}

Grid::~Grid() {
  for (MPI_Comm* c : {&embedding_, &mp_, &tp_, &dp_, &pp_, &cart_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

std::string Grid::describe() const {
  return fmt::format("dp={} tp={} pp={}", shape_.dp, shape_.tp, shape_.pp);
}

}  // namespace trident
