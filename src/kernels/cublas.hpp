// cuBLAS on Kokkos' CUDA stream (GPU builds): opened at run time, the process's handle, checked
// calls.
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>

#include <string>

namespace trident::kernels {

// The cuBLAS functions trident calls, from the library opened at first use. cuBLAS is not linked:
// it is opened with dlopen, TRIDENT_CUBLAS (a path) first, else libcublas.so.13, else .so.12, so
// that a build runs where the only cuBLAS is another CUDA's (PyTorch's nvidia-cublas wheel, say;
// tools/device_bundle.sh cannot carry cuBLAS's 600 MB). The v2 API used here is the same in both.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasGetVersion_v2) get_version = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  // Spelled out: C++ sees a second, inline overload of each (the legacy cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t,
                                            cublasGemmAlgo_t) = nullptr;
  std::string library;  // the file opened
};

// Opens cuBLAS once; aborts the job saying where it looked when no cuBLAS can be opened.
const CublasApi& cublas_api();

// The process's cuBLAS handle with its stream set to `exec`'s, so that a GEMM runs after the
// kernels launched before it and before those after it, with no fence. Created on first use and
// destroyed by a Kokkos finalize hook while the device is still there.
cublasHandle_t cublas_on(const Kokkos::Cuda& exec);

// "cuBLAS 130000 (/usr/local/cuda/lib64/libcublas.so.13)", for the start-up banner.
std::string cublas_summary(const Kokkos::Cuda& exec);

// Aborts the job naming `call` and cuBLAS's status string unless `status` is success.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace trident::kernels

#define TRIDENT_CUBLAS(call) ::trident::kernels::check_cublas((call), #call, __FILE__, __LINE__)

#endif
