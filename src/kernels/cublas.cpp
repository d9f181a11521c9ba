// cuBLAS opened at run time and the process's handle on Kokkos' CUDA stream (GPU builds only).
#include "kernels/cublas.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace trident::kernels {

namespace {

// Not named bind: with a std::string argument, unqualified bind(...) finds std::bind by
// argument-dependent lookup, which binds the string literal without decay and so wins overload
// resolution, and its unused result was optimised away: every pointer stayed null.
template <class Function>
void load_symbol(void* library, const char* symbol, Function& out, const std::string& path) {
  out = reinterpret_cast<Function>(dlsym(library, symbol));
  if (!out) fatal("dlsym", __FILE__, __LINE__, std::string(symbol) + " is not in " + path);
}

CublasApi open_cublas() {
  std::string tried;
  void* library = nullptr;
  std::string path;
  const char* forced = std::getenv("TRIDENT_CUBLAS");
  for (const char* candidate : {forced, "libcublas.so.13", "libcublas.so.12"}) {
    if (!candidate || !*candidate) continue;
    library = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (library) {
      path = candidate;
      break;
    }
    tried += std::string("\n  ") + dlerror();
    if (candidate == forced) break;  // a named library that does not open is an error, not a hint
  }
  if (!library)
    fatal(
        "dlopen(cuBLAS)", __FILE__, __LINE__, "no cuBLAS could be opened:" + tried,
        "put the directory of libcublas.so.13 or .so.12 on LD_LIBRARY_PATH, or set TRIDENT_CUBLAS "
        "to the library's path");
  CublasApi api;
  load_symbol(library, "cublasCreate_v2", api.create, path);
  load_symbol(library, "cublasDestroy_v2", api.destroy, path);
  load_symbol(library, "cublasSetStream_v2", api.set_stream, path);
  load_symbol(library, "cublasGetVersion_v2", api.get_version, path);
  load_symbol(library, "cublasGetStatusString", api.status_string, path);
  load_symbol(library, "cublasGemmEx", api.gemm_ex, path);
  load_symbol(library, "cublasGemmStridedBatchedEx", api.gemm_strided_batched_ex, path);
  char resolved[4096] = {};
  if (dlinfo(library, RTLD_DI_ORIGIN, resolved) == 0 && path.find('/') == std::string::npos)
    path = std::string(resolved) + "/" + path;
  api.library = path;
  return api;
}

cublasHandle_t process_handle = nullptr;  // GEMMs are launched from the main thread only

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = open_cublas();
  return api;
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fatal(call, file, line, std::string("cuBLAS: ") + cublas_api().status_string(status),
        "CUBLAS_STATUS_NOT_INITIALIZED at the first call usually means no usable GPU here");
}

cublasHandle_t cublas_on(const Kokkos::Cuda& exec) {
  if (!process_handle) {
    TRIDENT_CUBLAS(cublas_api().create(&process_handle));
    Kokkos::push_finalize_hook([] {
      cublas_api().destroy(process_handle);
      process_handle = nullptr;
    });
  }
  TRIDENT_CUBLAS(cublas_api().set_stream(process_handle, exec.cuda_stream()));
  return process_handle;
}

std::string cublas_summary(const Kokkos::Cuda& exec) {
  int version = 0;
  TRIDENT_CUBLAS(cublas_api().get_version(cublas_on(exec), &version));
  return "cuBLAS " + std::to_string(version) + " (" + cublas_api().library + ")";
}

}  // namespace trident::kernels
