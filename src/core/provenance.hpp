// What a measurement ran on: CPU, MPI library, BLAS, threads, Kokkos backend, build revision.
#pragma once

#include <string>

namespace trident {

// The CPU's model name from /proc/cpuinfo ("Intel(R) Xeon(R) ..."), "" where it has none.
std::string cpu_model();

// The MPI library's own version line ("Open MPI v4.1.4, package: ..."): its first line, trimmed.
std::string mpi_library();

// One JSON object with what this process runs with (`trident env`; jobs/ stores it in each
// sweep.json): revision, CPU, vector instructions, CPUs and ranks on the node, threads per rank
// and how they were chosen, Kokkos backend, BLAS library, kernel and threads, MPI library, host.
// `kokkos_backend` and `kokkos_threads`: the execution space's name and concurrency. Call after
// choose_threads_per_rank.
std::string environment_json(const std::string& kokkos_backend, int kokkos_threads);

}  // namespace trident
