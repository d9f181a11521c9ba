// Start-up of the host threads: OpenMP's thread binding left as the launcher set it, quietly.
#pragma once

#include <cstdlib>

namespace trident {

// Kokkos prints a warning on every rank at initialisation when OMP_PROC_BIND is unset (and into
// gtest's test listing, which CTest then reads as test names). Unset means "false" to libgomp, so
// saying it changes nothing but the noise. Binding that suits a layout (close or spread under
// Slurm's --cpus-per-task, jobs/) stays the launcher's choice. Call before Kokkos is initialised.
inline void settle_omp_proc_bind() {
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
}

}  // namespace trident
