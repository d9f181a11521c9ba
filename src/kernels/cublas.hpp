// cuBLAS on Kokkos' CUDA stream (GPU builds): the process's handle and checked calls.
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>

namespace trident::kernels {

// The process's cuBLAS handle with its stream set to `exec`'s, so that a GEMM runs after the
// kernels launched before it and before those after it, with no fence. Created on first use and
// destroyed by a Kokkos finalize hook while the device is still there.
cublasHandle_t cublas_on(const Kokkos::Cuda& exec);

// Aborts the job naming `call` and cuBLAS's status string unless `status` is success.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace trident::kernels

#define TRIDENT_CUBLAS(call) ::trident::kernels::check_cublas((call), #call, __FILE__, __LINE__)

#endif
