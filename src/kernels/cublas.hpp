// cuBLAS on Kokkos' CUDA stream (GPU builds): opened at run time, the process's handle, checked
// calls.
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/precision.hpp"

namespace trident::kernels {

// dlopen of the library at $variable (a path) if set, else of the first of `names` that opens;
// `path` is set to the file opened. When none opens: a fatal error naming what was tried, or,
// given `failure`, nullptr with the reason there (a library the run can do without).
void* open_runtime_library(const char* what, const char* variable,
                           std::initializer_list<const char*> names, std::string& path,
                           std::string* failure = nullptr);
// dlsym of `symbol`; a fatal error naming `path` when the library lacks it.
void* runtime_symbol(void* library, const char* symbol, const std::string& path);

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

// cuBLASLt's functions, opened like cuBLAS: TRIDENT_CUBLASLT_LIBRARY (a path) first, else
// libcublasLt.so.13, else .so.12 (PyTorch's wheels carry it beside cuBLAS).
struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  std::string library;
};
const CublasLtApi& cublaslt_api();

// Whether 16-bit GEMMs with a bias or a residual add them in cuBLASLt's epilogue, in the one
// rounding of the fp32 sums (as oneDNN's post-ops do on CPUs): yes unless TRIDENT_CUBLASLT=0,
// which keeps the bias kernel and cublasGemmEx (and the residual in its own kernel) for an
// old-against-new comparison.
bool cublaslt_epilogues();
// For tests that run both paths in one process (TRIDENT_CUBLASLT sets it at start-up).
void set_cublaslt_epilogues(bool on);

// The device workspace cuBLASLt's algorithms may use, allocated once at the first epilogue GEMM
// (within the planner's runtime reserve, kPlanRuntimeGB, like cuBLAS's own).
constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;

// GELU (tanh approximation) in an epilogue: none; forward, D = gelu(sum) with the sum itself
// written to `aux` (what backward reads); backward, D = sum * gelu'(aux).
enum class GeluEpilogue { kNone, kForward, kBackward };

// Row-major D[m,n] (16-bit in `format`) = alpha op(A) op(B) + bias + residual, summed in fp32 and
// rounded once, on Kokkos' stream: bias [n] or null, residual [m,n] with D's leading dimension or
// null; with `gelu`, aux [m,n] (leading dimension ld_aux) as GeluEpilogue says (no residual).
// The descriptors, layouts and algorithm of a shape (with its pointers' alignments) are chosen
// once and kept. False when cuBLASLt has no algorithm for it (the caller falls back).
bool gemm16_epilogue(const Kokkos::Cuda& exec, char trans_a, char trans_b, int m, int n, int k,
                     float alpha, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                     Precision format, uint16_t* D, int ldd, const uint16_t* bias,
                     const uint16_t* residual, GeluEpilogue gelu = GeluEpilogue::kNone,
                     uint16_t* aux = nullptr, int ld_aux = 0);

// Row-major D[m,n] (fp32) = op(A) op(B) + beta D from 16-bit A and B, and bias_grad[m] (fp32,
// overwritten) = the sums of op(A)'s rows, in cuBLASLt's BGRADB epilogue: a 16-bit linear
// layer's weight gradient and its bias's from one read of dout. Plans kept as above; false when
// cuBLASLt has no algorithm for it.
bool gemm16_weight_grad_epilogue(const Kokkos::Cuda& exec, char trans_a, char trans_b, int m, int n,
                                 int k, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                                 Precision format, float beta, float* D, int ldd, float* bias_grad);

}  // namespace trident::kernels

#define TRIDENT_CUBLAS(call) ::trident::kernels::check_cublas((call), #call, __FILE__, __LINE__)

#endif
