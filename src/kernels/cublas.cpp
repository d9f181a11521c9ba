// The process's cuBLAS handle, bound to Kokkos' CUDA stream (GPU builds only).
#include "kernels/cublas.hpp"

#include <string>

#include "core/error.hpp"

namespace trident::kernels {

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fatal(call, file, line, std::string("cuBLAS: ") + cublasGetStatusString(status),
        "CUBLAS_STATUS_NOT_INITIALIZED at the first call usually means no usable GPU here");
}

namespace {
cublasHandle_t process_handle = nullptr;  // GEMMs are launched from the main thread only
}  // namespace

cublasHandle_t cublas_on(const Kokkos::Cuda& exec) {
  if (!process_handle) {
    TRIDENT_CUBLAS(cublasCreate(&process_handle));
    Kokkos::push_finalize_hook([] {
      cublasDestroy(process_handle);
      process_handle = nullptr;
    });
  }
  TRIDENT_CUBLAS(cublasSetStream(process_handle, exec.cuda_stream()));
  return process_handle;
}

}  // namespace trident::kernels
