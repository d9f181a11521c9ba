// GoogleTest entry point that initialises MPI and Kokkos once for every unit test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "core/device.hpp"
#include "core/host_threads.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (trident::report_missing_device(argv[0], /*print=*/true)) {  // a CUDA build without a GPU
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  {
    trident::settle_omp_proc_bind();
    Kokkos::ScopeGuard kokkos(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    status = RUN_ALL_TESTS();
  }
  MPI_Finalize();
  return status;
}
