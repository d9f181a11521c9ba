// The process grid: a named list of axes (name, size, rank order), one communicator per axis
// and the groups derived from them. A new axis is one entry in Axis, kAxes and kRankOrder.
#pragma once

#include <mpi.h>

#include <array>
#include <initializer_list>
#include <string>

namespace trident {

// The world's axes, in the order they are printed ("dp=2 tp=2 pp=1", cp only when it splits
// sequences: "dp=2 cp=2 tp=2 pp=1") and configured.
enum class Axis { dp, cp, tp, pp };
inline constexpr int kAxisCount = 4;
inline constexpr std::array<Axis, kAxisCount> kAxes{Axis::dp, Axis::cp, Axis::tp, Axis::pp};
// Rank order, fastest first: rank = tp + tp_size * (cp + cp_size * (dp + dp_size * pp)). A
// tensor-parallel group is contiguous in rank order, hence on one node under the usual block rank
// placement, and a context-parallel group (which passes key/value chunks every layer) next to it.
inline constexpr std::array<Axis, kAxisCount> kRankOrder{Axis::tp, Axis::cp, Axis::dp, Axis::pp};
const char* name_of(Axis axis);

// One axis and a value along it: a size in a GridShape, an index in a GridCoord.
struct AxisValue {
  Axis axis;
  int value;
};

// A value per axis; axes not named take `fill`.
class PerAxis {
 public:
  explicit PerAxis(int fill) { values_.fill(fill); }
  PerAxis(int fill, std::initializer_list<AxisValue> named);
  int operator[](Axis a) const { return values_[static_cast<int>(a)]; }
  int& operator[](Axis a) { return values_[static_cast<int>(a)]; }
  bool operator==(const PerAxis& o) const { return values_ == o.values_; }
  std::string describe() const;  // "dp=2 tp=4 pp=1"

 private:
  std::array<int, kAxisCount> values_;
};

// The size of every axis (1 for an axis not named): GridShape{{Axis::dp, 2}, {Axis::tp, 4}}.
class GridShape : public PerAxis {
 public:
  GridShape() : PerAxis(1) {}
  GridShape(std::initializer_list<AxisValue> sizes) : PerAxis(1, sizes) {}
  int size() const;  // the number of ranks: the product of the axes' sizes
};

// A rank's index along every axis (0 for an axis not named).
class GridCoord : public PerAxis {
 public:
  GridCoord() : PerAxis(0) {}
  GridCoord(std::initializer_list<AxisValue> indices) : PerAxis(0, indices) {}
  // This coordinate moved to `index` along `axis`: the members of an axis group.
  GridCoord with(Axis axis, int index) const;
};

// Pure functions, no MPI: the numbering kRankOrder defines.
int grid_rank(const GridShape& s, const GridCoord& c);
GridCoord grid_coord(const GridShape& s, int rank);
// The ranks holding the same parameters, dp x cp (cp ranks are replicas that see different
// tokens of the same sequences), and a rank's index among them: the numbering of Grid::data_comm,
// over which gradients are summed and ZeRO shards.
inline int data_size(const GridShape& s) {
  return s[Axis::dp] * s[Axis::cp];
}
inline int data_rank(const GridShape& s, const GridCoord& c) {
  return c[Axis::cp] + s[Axis::cp] * c[Axis::dp];
}

// Expert parallelism folded onto the dp x tp ranks of one pipeline stage (it adds no factor to
// the world size): number those ranks f = tp + tp_size * dp (rank order); ep consecutive ones
// split a layer's experts (ep_rank = f % ep), and the dp x tp / ep ranks holding the same experts
// are their expert-data-parallel replicas (expert_dp_rank = f / ep).
struct ExpertFold {
  int ep = 1, ep_rank = 0;
  int expert_dp = 1, expert_dp_rank = 0;
};
// ep must divide dp x tp.
ExpertFold expert_fold(const GridShape& s, const GridCoord& c, int ep);

// Owns the Cartesian communicator, one communicator per axis and the derived groups (freed in
// the destructor). Built from the communicator main() hands it; nothing below main() uses
// MPI_COMM_WORLD.
class Grid {
 public:
  // `ep`: expert-parallel ranks folded onto dp x tp (expert_fold); 1 without experts.
  Grid(MPI_Comm world, GridShape shape, int ep = 1);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return rank_; }
  int size() const { return shape_.size(); }
  MPI_Comm world() const { return cart_; }
  // The ranks that differ from this one only along `axis`, in the axis's index order.
  MPI_Comm comm(Axis axis) const { return axis_comms_[static_cast<int>(axis)]; }
  // pp x tp: one model replica, over which the global gradient norm is reduced.
  MPI_Comm model_parallel_comm() const { return mp_; }
  // dp x cp: the ranks holding the same parameters (data_size, data_rank above).
  MPI_Comm data_comm() const { return data_; }
  int data_size() const { return trident::data_size(shape_); }
  int data_rank() const { return trident::data_rank(shape_, coord_); }
  // pp ranks 0 and pp-1 at this (dp, tp): the first and last stage, both holding the tied token
  // embedding (a single rank when pp == 1; MPI_COMM_NULL on the middle pp ranks).
  MPI_Comm embedding_comm() const { return embedding_; }
  // This rank's place in the expert fold, its expert-parallel group (the ranks that split a
  // layer's experts and exchange tokens) and its expert-data-parallel group (the ranks holding
  // the same experts, over which their gradients are summed).
  const ExpertFold& experts() const { return experts_; }
  MPI_Comm expert_comm() const { return expert_; }
  MPI_Comm expert_data_comm() const { return expert_data_; }
  // "dp=2 tp=1 pp=1"
  std::string describe() const { return shape_.describe(); }
  // True when every group of the axis shares a node (NCCL's auto choice, comm/backend.hpp); main()
  // warns when tp groups do not.
  bool groups_node_local(Axis axis) const { return node_local_[static_cast<int>(axis)]; }
  // The ranks of this run on this rank's node (shared memory), which share its cores.
  int ranks_on_node() const { return ranks_on_node_; }

 private:
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  MPI_Comm cart_ = MPI_COMM_NULL, mp_ = MPI_COMM_NULL, embedding_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm expert_ = MPI_COMM_NULL, expert_data_ = MPI_COMM_NULL;
  ExpertFold experts_;
  std::array<MPI_Comm, kAxisCount> axis_comms_{};
  std::array<bool, kAxisCount> node_local_{};
  int ranks_on_node_ = 1;

  // The sub-communicator of the Cartesian one that keeps `kept` and fixes every other axis.
  MPI_Comm sub_grid(std::initializer_list<Axis> kept) const;
  bool axis_node_local(MPI_Comm axis, int size) const;  // collective over every rank
};

}  // namespace trident
