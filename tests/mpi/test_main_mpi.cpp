// GoogleTest entry point for multi-rank tests: MPI and Kokkos once, one report from rank 0,
// and a failure on any rank fails the run.
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
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    status = RUN_ALL_TESTS();
    int any_failed = 0;
    MPI_Allreduce(&status, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    status = any_failed;
  }
  MPI_Finalize();
  return status;
}
