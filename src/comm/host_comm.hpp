// Collectives on host values (losses, norms, timings, names) over an MPI communicator: what the
// driver reduces and gathers about a run, kept apart from the Views the model's collectives move.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace trident {

// This process's node as the job scheduler names it: SLURMD_NODENAME under Slurm (what `srun
// --exclude` takes, which need not be the host name: several slurmd of one host, aliases), else
// the host name.
std::string node_name();

// The world ranks of `comm`'s members, in its rank order.
std::vector<int> world_ranks(MPI_Comm comm);

class HostCollectives {
 public:
  // Over `comm` (not owned; the grid frees it); `axis` names it in the flight recorder, which
  // records its operations.
  explicit HostCollectives(MPI_Comm comm, const std::string& axis = "host");
  int size() const { return size_; }
  int rank() const { return rank_; }

  double sum(double value) const;
  // Element-wise sums of `values` (the same length on every rank), on every rank.
  std::vector<double> sum(const std::vector<double>& values) const;
  double max(double value) const;
  double min(double value) const;
  // Every rank's `values` (the same count on each), in rank order, on `root`; empty elsewhere.
  std::vector<double> gather(const std::vector<double>& values, int root = 0) const;
  // An equal share of `values` to every rank: values holds size() parts of one length in rank
  // order, the result rank r's part for this rank at part r (MPI_Alltoall).
  std::vector<int> alltoall(const std::vector<int>& values) const;
  // Root's string on every rank.
  std::string broadcast(const std::string& value, int root = 0) const;
  // Every rank's node_name(), comma-separated in rank order, on every rank.
  std::string node_names() const;
  // How many ranks of this communicator share this rank's node (its shared memory).
  int ranks_on_node() const;
  void barrier() const;
  // Runs `work` on every rank (it may do nothing on some). When it throws on any rank, every rank
  // throws InputError with the message of the lowest such rank, so none is left waiting in a
  // later collective: for file system work one rank does for all.
  void agree(const std::function<void()>& work) const;

 private:
  double reduce_all(double value, MPI_Op op, const char* operation) const;

  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  int recorded_;  // its index in the flight recorder
};

}  // namespace trident
