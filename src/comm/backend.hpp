// Chooses the collectives backend (MPI or NCCL) for one axis of the grid from the config.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/collective_backend.hpp"
#include "comm/comm.hpp"

namespace trident {

// True when the NCCL backend was compiled in (CMake found CUDA and NCCL).
bool nccl_compiled();
// True when NCCL can be used here: compiled in and Kokkos runs on CUDA (NCCL needs device
// buffers, and trident's Views live in the execution space's memory).
bool nccl_usable();

// A communicator over `comm` (not owned; the grid frees it) for `backend`:
//   kMpi  -> MpiCommunicator;
//   kNccl -> NcclCommunicator, or InputError when NCCL is not usable in this build;
//   kAuto -> NCCL when usable and the axis is `node_local` (NVLink / PCIe between GPUs of one
//            node is where NCCL wins), else MPI.
// Collective over `comm` when it builds an NCCL communicator; every rank of the axis must pass
// the same arguments. `key` names the config key in messages ("parallel.backend_tp"); `axis`
// (a literal) names the communicator in profiles and the flight recorder, which records its
// operations ("" : the key's last part, "tp").
std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, CollectiveBackend backend,
                                                bool node_local,
                                                const std::string& key = "parallel.backend",
                                                const char* axis = "");

// For the start-up log: "NCCL backend compiled: yes, NCCL 2.28.9; Kokkos Serial: host buffers,
// NCCL unusable".
std::string backend_summary();

}  // namespace trident
