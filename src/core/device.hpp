// The GPU a CUDA build runs on, checked before Kokkos starts (a host build needs none).
#pragma once

#include <string>

namespace trident {

// Empty when this build can run here: a host build, or a CUDA build that sees a GPU. Otherwise
// why not, in words for the user (Kokkos itself would abort with a bare CUDA error).
std::string missing_device();

// For a program's main(), before Kokkos starts: true when missing_device() says why this build
// cannot run here, having printed "PROGRAM: error: WHY" when `print` (rank 0 of a job).
bool report_missing_device(const char* program, bool print);

}  // namespace trident
