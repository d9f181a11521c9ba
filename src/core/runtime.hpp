// MPI and Kokkos brought up around an executable's main(), in the order every trident program
// needs.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/threads_per_rank.hpp"

namespace trident {

// Kokkos prints a warning on every rank at initialisation when OMP_PROC_BIND is unset (and into
// gtest's test listing, which CTest then reads as test names). Unset means "false" to libgomp, so
// saying it changes nothing but the noise. Binding that suits a layout (close or spread under
// Slurm's --cpus-per-task, jobs/) stays the launcher's choice. Call before Kokkos is initialised.
inline void settle_omp_proc_bind() {
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
}

// How a CUDA build on a machine without a GPU ends, before Kokkos starts (it would abort with a
// bare CUDA error): with "PROGRAM: error: WHY" on stderr and `status` from every rank.
struct NoDeviceExit {
  const char* program;
  int status;
  // Every rank prints its line (the test and bench executables: the bundle's test reads one per
  // rank to know each loaded the build), or rank 0 alone (trident's own error lines).
  bool every_rank_says;
};

// trident's own `--device NAME` (`plan`'s GPU presets) is Kokkos 3.4's deprecated spelling of
// --kokkos-device-id, which would read NAME as a number and abort, and `--help` / `-h` would
// print Kokkos' options instead of trident's (Kokkos' own stay behind --kokkos-help):
// `kokkos_args` gets argv without them, and `hidden` the arguments taken out, to be put back once
// Kokkos has read the rest.
inline void hide_trident_args(int argc, char** argv, std::vector<char*>& kokkos_args,
                              std::vector<char*>& hidden) {
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      hidden.push_back(argv[i]);
      hidden.push_back(argv[++i]);
    } else if (std::strncmp(argv[i], "--device=", 9) == 0 || std::strcmp(argv[i], "--help") == 0 ||
               std::strcmp(argv[i], "-h") == 0) {
      hidden.push_back(argv[i]);
    } else {
      kokkos_args.push_back(argv[i]);
    }
  }
}

// Runs body() with MPI and Kokkos up and returns its status. Kokkos takes its own --kokkos-*
// arguments out of argc/argv first, so a body that captures them by reference sees the rest.
// Every View must be gone when body returns, since Kokkos finalises right after.
template <class Body>
int with_mpi_and_kokkos(int& argc, char**& argv, NoDeviceExit no_device, Body&& body) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (report_missing_device(no_device.program, no_device.every_rank_says || rank == 0)) {
    MPI_Finalize();
    return no_device.status;
  }
  choose_device(MPI_COMM_WORLD, argc, argv);
  int status = 0;
  {
    settle_omp_proc_bind();
    choose_threads_per_rank(MPI_COMM_WORLD);
    std::vector<char*> kokkos_args, hidden;
    hide_trident_args(argc, argv, kokkos_args, hidden);
    int kokkos_argc = static_cast<int>(kokkos_args.size());
    kokkos_args.push_back(nullptr);
    char** kokkos_argv = kokkos_args.data();
    Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_argv);
    // What Kokkos left, then what it was not shown (after the subcommand it followed).
    std::vector<char*> args(kokkos_argv, kokkos_argv + kokkos_argc);
    args.insert(args.end(), hidden.begin(), hidden.end());
    argc = static_cast<int>(args.size());
    args.push_back(nullptr);
    argv = args.data();
    status = std::forward<Body>(body)();
  }
  MPI_Finalize();
  return status;
}

}  // namespace trident
