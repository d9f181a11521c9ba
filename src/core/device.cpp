// The GPU check of a CUDA build (core/device.hpp).
#include "core/device.hpp"

#include <Kokkos_Macros.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

std::string device_name() {
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0;
  cudaDeviceProp props;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&props, device) != cudaSuccess)
    return "";
  return props.name;
#else
  return "";
#endif
}

void choose_device(MPI_Comm world, int argc, char** argv) {
#if defined(KOKKOS_ENABLE_CUDA)
  bool chosen = std::getenv("KOKKOS_DEVICE_ID") != nullptr;
  for (int i = 1; i < argc; ++i)
    chosen = chosen || std::strncmp(argv[i], "--kokkos-device", 15) == 0;
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_rank = 0, devices = 0;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  if (chosen || cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return;
  setenv("KOKKOS_DEVICE_ID", std::to_string(device_for_node_rank(node_rank, devices)).c_str(), 1);
#else
  (void)world, (void)argc, (void)argv;
#endif
}

}  // namespace trident
