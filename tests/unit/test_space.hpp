// Where kernel tests keep their buffers: memory both the host (which fills and checks them) and
// the kernels reach: unified memory on GPU builds, the host space otherwise.
#pragma once

#include "core/types.hpp"

namespace trident {

#if defined(KOKKOS_ENABLE_CUDA)
using TestSpace = Kokkos::CudaUVMSpace;
#else
using TestSpace = MemSpace;
#endif

}  // namespace trident
