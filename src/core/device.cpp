// The GPU check of a CUDA build (core/device.hpp).
#include "core/device.hpp"

#include <Kokkos_Macros.hpp>
#include <cstdio>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace trident {

std::string missing_device() {
#if defined(KOKKOS_ENABLE_CUDA)
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaSuccess && count > 0) return "";
  return std::string("this is trident's CUDA build and no GPU is usable here (") +
         (rc == cudaSuccess ? "no CUDA device" : cudaGetErrorString(rc)) +
         "); run the host build (make build), or check the driver and CUDA_VISIBLE_DEVICES";
#else
  return "";
#endif
}

bool report_missing_device(const char* program, bool print) {
  const std::string why = missing_device();
  if (!why.empty() && print) std::fprintf(stderr, "%s: error: %s\n", program, why.c_str());
  return !why.empty();
}

}  // namespace trident
