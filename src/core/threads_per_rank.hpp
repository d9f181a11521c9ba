// How many OpenMP threads each rank runs: OMP_NUM_THREADS when set, else its share of the node.
#pragma once

#include <mpi.h>

#include <string>

namespace trident {

struct ThreadsPerRank {
  int threads = 1;
  // OMP_NUM_THREADS was set: the rank obeys it. Otherwise `threads` is the rank's share of the
  // node, node_cpus / node_ranks (at least 1, at most the CPUs it may run on).
  bool from_environment = false;
  int node_ranks = 1;  // ranks of this job on this node (MPI's shared-memory split)
  // CPUs this job's ranks on this node may run on: the union of their affinity masks (not the
  // node's cores: under Slurm or a binding mpirun, the ranks' own cores).
  int node_cpus = 1;
  int own_cpus = 1;  // CPUs in this rank's affinity mask

  // For the banner: "1 (OMP_NUM_THREADS unset: 2 CPUs / 4 ranks on this node)".
  std::string describe() const;
  // When this node's ranks run several threads each and ranks x threads exceed its CPUs: what
  // that costs and what to set; "" otherwise.
  std::string oversubscription_warning() const;
};

// The share rule on its own: node_cpus / node_ranks, at least 1 and at most own_cpus.
int share_of_node(int node_cpus, int node_ranks, int own_cpus);

// Decides each rank's threads (collective over `world`, before Kokkos starts) and applies them:
// OMP_NUM_THREADS, the OpenMP runtime's own count (libgomp read the environment at load time)
// and OpenBLAS's. Without OMP_NUM_THREADS every rank would otherwise start one thread per core
// of the node, and R ranks x all cores spin against each other (the tiny model's tp2 x pp3
// layout ran 1000x slower on 2 cores); torchrun likewise sets one thread per process.
void choose_threads_per_rank(MPI_Comm world);

// What choose_threads_per_rank decided (the defaults before it ran).
const ThreadsPerRank& threads_per_rank();

}  // namespace trident
