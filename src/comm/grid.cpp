// Grid construction with MPI_Cart_create / MPI_Cart_sub, the rank numbering and the
// node-locality check.
#include "comm/grid.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace trident {

const char* name_of(Axis axis) {
  switch (axis) {
    case Axis::dp:
      return "dp";
    case Axis::cp:
      return "cp";
    case Axis::tp:
      return "tp";
    case Axis::pp:
      return "pp";
  }
  return "?";
}

PerAxis::PerAxis(int fill, std::initializer_list<AxisValue> named) {
  values_.fill(fill);
  for (const AxisValue& v : named) (*this)[v.axis] = v.value;
}

int GridShape::size() const {
  int n = 1;
  for (const Axis a : kAxes) n *= (*this)[a];
  return n;
}

std::string PerAxis::describe() const {
  std::string out;
  for (const Axis a : kAxes)
    if (a != Axis::cp || (*this)[a] != 1)
      out += fmt::format("{}{}={}", out.empty() ? "" : " ", name_of(a), (*this)[a]);
  return out;
}

GridCoord GridCoord::with(Axis axis, int index) const {
  GridCoord moved = *this;
  moved[axis] = index;
  return moved;
}

int grid_rank(const GridShape& s, const GridCoord& c) {
  int rank = 0, stride = 1;
  for (const Axis a : kRankOrder) {
    rank += c[a] * stride;
    stride *= s[a];
  }
  return rank;
}

GridCoord grid_coord(const GridShape& s, int rank) {
  GridCoord c;
  for (const Axis a : kRankOrder) {
    c[a] = rank % s[a];
    rank /= s[a];
  }
  return c;
}

namespace {

// MPI's Cartesian dimensions vary the last fastest, so they are kRankOrder reversed: exactly
// grid_rank's numbering.
int cart_dimension(Axis axis) {
  const auto at = std::find(kRankOrder.begin(), kRankOrder.end(), axis);
  return kAxisCount - 1 - static_cast<int>(at - kRankOrder.begin());
}

}  // namespace

ExpertFold expert_fold(const GridShape& s, const GridCoord& c, int ep) {
  const int ranks = s[Axis::dp] * s[Axis::tp];
  if (ep < 1 || ranks % ep != 0)
    throw std::invalid_argument("expert_fold: ep = " + std::to_string(ep) +
                                " must divide dp x tp = " + std::to_string(ranks));
  const int f = c[Axis::tp] + s[Axis::tp] * c[Axis::dp];
  return {ep, f % ep, ranks / ep, f / ep};
}

Grid::Grid(MPI_Comm world, GridShape shape, int ep) : shape_(shape) {
  std::array<int, kAxisCount> dims{}, periods{};
  for (const Axis a : kAxes) dims[cart_dimension(a)] = shape[a];
  // reorder = 0 keeps ranks where the launcher placed them.
  TRIDENT_MPI(MPI_Cart_create(world, kAxisCount, dims.data(), periods.data(), 0, &cart_));
  TRIDENT_MPI(MPI_Comm_rank(cart_, &rank_));
  coord_ = grid_coord(shape, rank_);
  axis_comms_.fill(MPI_COMM_NULL);
  for (const Axis a : kAxes) axis_comms_[static_cast<int>(a)] = sub_grid({a});
  mp_ = sub_grid({Axis::pp, Axis::tp});
  data_ = sub_grid({Axis::dp, Axis::cp});
  const int last_stage = shape[Axis::pp] - 1;
  const bool end_rank = coord_[Axis::pp] == 0 || coord_[Axis::pp] == last_stage;
  // One group per (dp, tp), named by its pp rank 0.
  const int first = grid_rank(shape, coord_.with(Axis::pp, 0));
  TRIDENT_MPI(
      MPI_Comm_split(cart_, end_rank ? first : MPI_UNDEFINED, coord_[Axis::pp], &embedding_));
  // The fold splits this stage's dp x tp ranks (colours below dp x tp x pp name one group each).
  experts_ = expert_fold(shape, coord_, ep);
  const int stage_colour =
      (coord_[Axis::pp] * shape[Axis::cp] + coord_[Axis::cp]) * shape[Axis::dp] * shape[Axis::tp];
  TRIDENT_MPI(
      MPI_Comm_split(cart_, stage_colour + experts_.expert_dp_rank, experts_.ep_rank, &expert_));
  TRIDENT_MPI(MPI_Comm_split(cart_, stage_colour + experts_.ep_rank, experts_.expert_dp_rank,
                             &expert_data_));
  MPI_Comm node;
  TRIDENT_MPI(MPI_Comm_split_type(cart_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  TRIDENT_MPI(MPI_Comm_size(node, &ranks_on_node_));
  TRIDENT_MPI(MPI_Comm_free(&node));
  for (const Axis a : kAxes) node_local_[static_cast<int>(a)] = axis_node_local(comm(a), shape[a]);
}

MPI_Comm Grid::sub_grid(std::initializer_list<Axis> kept) const {
  std::array<int, kAxisCount> keep{};
  for (const Axis a : kept) keep[cart_dimension(a)] = 1;
  MPI_Comm sub = MPI_COMM_NULL;
  TRIDENT_MPI(MPI_Cart_sub(cart_, keep.data(), &sub));
  return sub;
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
  for (MPI_Comm& c : axis_comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  for (MPI_Comm* c : {&expert_, &expert_data_, &embedding_, &mp_, &data_, &cart_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace trident
