// GoogleTest entry point for multi-rank tests: MPI and Kokkos once, one report from rank 0,
// and a failure on any rank fails the run.
#include <gtest/gtest.h>

#include "core/runtime.hpp"

int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    ::testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    const int status = RUN_ALL_TESTS();
    int any_failed = 0;
    MPI_Allreduce(&status, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any_failed;
  });
}
