// GoogleTest entry point that initialises MPI and Kokkos once for every unit test.
#include <gtest/gtest.h>

#include "core/runtime.hpp"

int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  });
}
