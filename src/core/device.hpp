// The GPU a CUDA build runs on, checked before Kokkos starts (a host build needs none).
#pragma once

#include <mpi.h>

#include <string>

namespace trident {

// Empty when this build can run here: a host build, or a CUDA build that sees a GPU. Otherwise
// why not, in words for the user (Kokkos itself would abort with a bare CUDA error).
std::string missing_device();

// For a program's main(), before Kokkos starts: true when missing_device() says why this build
// cannot run here, having printed "PROGRAM: error: WHY" when `print` (rank 0 of a job).
bool report_missing_device(const char* program, bool print);

// The GPU this rank runs on as CUDA names it ("NVIDIA H200"); empty on host builds.
std::string device_name();

// The device a rank of a node with `devices` GPUs uses: its rank among the node's ranks, round
// robin (ranks beyond the device count share, and the banner warns).
inline int device_for_node_rank(int node_rank, int devices) {
  return devices > 0 ? node_rank % devices : 0;
}

// A CUDA build, before Kokkos starts: picks this rank's GPU by device_for_node_rank from its rank
// among the ranks of `world` on its node (MPI's shared-memory split, whatever the launcher), and
// hands it to Kokkos through KOKKOS_DEVICE_ID, unless --kokkos-device or KOKKOS_DEVICE_ID already
// chose one. A CUDA_VISIBLE_DEVICES naming one device leaves that one. Collective over `world`;
// a host build does nothing.
void choose_device(MPI_Comm world, int argc, char** argv);

}  // namespace trident
