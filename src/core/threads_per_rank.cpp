// Each rank's OpenMP threads, from OMP_NUM_THREADS or from the CPUs its node gives its ranks.
#include "core/threads_per_rank.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "core/blas_info.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

ThreadsPerRank& decided() {
  static ThreadsPerRank value;
  return value;
}

// The OpenMP runtime's thread count as the environment set it (1 without OpenMP).
int openmp_max_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

int share_of_node(int node_cpus, int node_ranks, int own_cpus) {
  const int share = node_cpus / std::max(node_ranks, 1);
  return std::max(1, std::min(share, own_cpus));
}

std::string ThreadsPerRank::describe() const {
  if (from_environment) return fmt::format("{} (OMP_NUM_THREADS)", threads);
  return fmt::format("{} (OMP_NUM_THREADS unset: {} CPU{} / {} rank{} on this node)", threads,
                     node_cpus, node_cpus == 1 ? "" : "s", node_ranks, node_ranks == 1 ? "" : "s");
}

std::string ThreadsPerRank::oversubscription_warning() const {
  // One thread per rank with more ranks than CPUs is the launcher's choice (mpirun
  // --oversubscribe), and Kokkos says so; threads beyond one then only take turns.
  if (threads < 2 || node_ranks * threads <= node_cpus) return "";
  return fmt::format(
      "{} rank(s) x {} threads on this node exceed the {} CPUs its ranks may run on: the threads "
      "take turns on the cores, and every kernel and GEMM waits for the slowest. Set "
      "OMP_NUM_THREADS={} (or leave it unset: each rank then takes its share)",
      node_ranks, threads, node_cpus, share_of_node(node_cpus, node_ranks, own_cpus));
}

void choose_threads_per_rank(MPI_Comm world) {
  ThreadsPerRank& d = decided();
  MPI_Comm node = MPI_COMM_NULL;
  TRIDENT_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  TRIDENT_MPI(MPI_Comm_size(node, &d.node_ranks));
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof own, &own) != 0) {
    // Without a mask, every online CPU (what the process may run on when nothing binds it).
    for (int cpu = 0; cpu < std::min<long>(CPU_SETSIZE, sysconf(_SC_NPROCESSORS_ONLN)); ++cpu)
      CPU_SET(cpu, &own);
  }
  d.own_cpus = CPU_COUNT(&own);
  std::vector<cpu_set_t> masks(d.node_ranks);
  TRIDENT_MPI(MPI_Allgather(&own, sizeof own, MPI_BYTE, masks.data(), sizeof own, MPI_BYTE, node));
  TRIDENT_MPI(MPI_Comm_free(&node));
  cpu_set_t all;
  CPU_ZERO(&all);
  for (cpu_set_t& mask : masks) CPU_OR(&all, &all, &mask);
  d.node_cpus = std::max(1, CPU_COUNT(&all));

  const char* set = std::getenv("OMP_NUM_THREADS");
  d.from_environment = set != nullptr && *set != '\0';
  if (d.from_environment) {
    d.threads = openmp_max_threads();
    return;
  }
  d.threads = share_of_node(d.node_cpus, d.node_ranks, d.own_cpus);
  setenv("OMP_NUM_THREADS", std::to_string(d.threads).c_str(), /*overwrite=*/1);
#if defined(_OPENMP)
  omp_set_num_threads(d.threads);
#endif
  // OPENBLAS_NUM_THREADS, when given, caps BLAS on its own terms.
  const char* blas_set = std::getenv("OPENBLAS_NUM_THREADS");
  if (blas_set == nullptr || *blas_set == '\0') set_blas_threads(d.threads);
}

const ThreadsPerRank& threads_per_rank() {
  return decided();
}

}  // namespace trident
