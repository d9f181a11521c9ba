// cuBLAS opened at run time and the process's handle on Kokkos' CUDA stream (GPU builds only).
#include "kernels/cublas.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/launch_profiler.hpp"

namespace trident::kernels {

void* open_runtime_library(const char* what, const char* variable,
                           std::initializer_list<const char*> names, std::string& path,
                           std::string* failure) {
  std::string tried;
  const char* forced = std::getenv(variable);
  std::vector<const char*> candidates{forced};
  candidates.insert(candidates.end(), names);
  for (const char* candidate : candidates) {
    if (!candidate || !*candidate) continue;
    if (void* library = dlopen(candidate, RTLD_NOW | RTLD_LOCAL)) {
      path = candidate;
      char resolved[4096] = {};
      if (dlinfo(library, RTLD_DI_ORIGIN, resolved) == 0 && path.find('/') == std::string::npos)
        path = std::string(resolved) + "/" + path;
      return library;
    }
    tried += std::string("\n  ") + dlerror();
    if (candidate == forced) break;  // a named library that does not open is an error, not a hint
  }
  const std::string reason = std::string("no ") + what + " could be opened:" + tried;
  const std::string hint = std::string("put the directory of ") + *names.begin() +
                           " on LD_LIBRARY_PATH, or set " + variable + " to the library's path";
  if (failure) {
    *failure = reason + " (" + hint + ")";
    return nullptr;
  }
  fatal((std::string("dlopen(") + what + ")").c_str(), __FILE__, __LINE__, reason, hint);
  return nullptr;
}

void* runtime_symbol(void* library, const char* symbol, const std::string& path) {
  void* found = dlsym(library, symbol);
  if (!found) fatal("dlsym", __FILE__, __LINE__, std::string(symbol) + " is not in " + path);
  return found;
}

namespace {

template <class Function>
void load_symbol(void* library, const char* symbol, Function& out, const std::string& path) {
  out = reinterpret_cast<Function>(runtime_symbol(library, symbol, path));
}

CublasApi open_cublas() {
  std::string path;
  void* library = open_runtime_library("cuBLAS", "TRIDENT_CUBLAS",
                                       {"libcublas.so.13", "libcublas.so.12"}, path);
  CublasApi api;
  load_symbol(library, "cublasCreate_v2", api.create, path);
  load_symbol(library, "cublasDestroy_v2", api.destroy, path);
  load_symbol(library, "cublasSetStream_v2", api.set_stream, path);
  load_symbol(library, "cublasGetVersion_v2", api.get_version, path);
  load_symbol(library, "cublasGetStatusString", api.status_string, path);
  load_symbol(library, "cublasGemmEx", api.gemm_ex, path);
  load_symbol(library, "cublasGemmStridedBatchedEx", api.gemm_strided_batched_ex, path);
  api.library = path;
  return api;
}

CublasLtApi open_cublaslt() {
  std::string path;
  // First beside the cuBLAS opened (the same toolkit or wheel: cuBLAS calls into its own
  // cuBLASLt, so mixing versions would load two), then by name.
  const std::string cublas = cublas_api().library;
  const std::string dir = cublas.substr(0, cublas.find_last_of('/') + 1);
  const std::string major = cublas.substr(cublas.find_last_of('.') + 1);
  const std::string beside = dir.empty() ? "" : dir + "libcublasLt.so." + major;
  void* library = open_runtime_library("cuBLASLt", "TRIDENT_CUBLASLT_LIBRARY",
                                       {beside.empty() ? "libcublasLt.so.13" : beside.c_str(),
                                        "libcublasLt.so.13", "libcublasLt.so.12"},
                                       path);
  CublasLtApi api;
  load_symbol(library, "cublasLtCreate", api.create, path);
  load_symbol(library, "cublasLtDestroy", api.destroy, path);
  load_symbol(library, "cublasLtGetVersion", api.get_version, path);
  load_symbol(library, "cublasLtMatmulDescCreate", api.desc_create, path);
  load_symbol(library, "cublasLtMatmulDescDestroy", api.desc_destroy, path);
  load_symbol(library, "cublasLtMatmulDescSetAttribute", api.desc_set, path);
  load_symbol(library, "cublasLtMatrixLayoutCreate", api.layout_create, path);
  load_symbol(library, "cublasLtMatrixLayoutDestroy", api.layout_destroy, path);
  load_symbol(library, "cublasLtMatmulPreferenceCreate", api.preference_create, path);
  load_symbol(library, "cublasLtMatmulPreferenceDestroy", api.preference_destroy, path);
  load_symbol(library, "cublasLtMatmulPreferenceSetAttribute", api.preference_set, path);
  load_symbol(library, "cublasLtMatmulAlgoGetHeuristic", api.heuristic, path);
  load_symbol(library, "cublasLtMatmul", api.matmul, path);
  api.library = path;
  return api;
}

// The largest power of two up to 16 dividing an address: what cuBLASLt's algorithms require of
// their pointers, and so part of a plan's key.
int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// One epilogue GEMM's shape and pointer alignments, and what cuBLASLt chose for it.
struct EpilogueKey {
  char trans_a, trans_b;
  int m, n, k, lda, ldb, ldd;
  Precision format;
  bool bias, residual;
  int align_a, align_b, align_d, align_bias, align_residual;
  GeluEpilogue gelu;
  int ld_aux, align_aux;
  bool bias_grad;  // D fp32 (a weight gradient) and the bias gradient of op(A)'s rows
  auto tie() const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldd, format, bias, residual, align_a,
                    align_b, align_d, align_bias, align_residual, gelu, ld_aux, align_aux,
                    bias_grad);
  }
  bool operator<(const EpilogueKey& o) const { return tie() < o.tie(); }
};
struct EpiloguePlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

struct CublasLtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<EpilogueKey, EpiloguePlan> plans;
};
CublasLtState* lt_state = nullptr;  // GEMMs are launched from the main thread only

CublasLtState& cublaslt_state() {
  if (lt_state) return *lt_state;
  lt_state = new CublasLtState;
  const CublasLtApi& lt = cublaslt_api();
  TRIDENT_CUBLAS(lt.create(&lt_state->handle));
  const cudaError_t rc = cudaMalloc(&lt_state->workspace, kCublasLtWorkspaceBytes);
  if (rc != cudaSuccess)
    fatal("cudaMalloc", __FILE__, __LINE__,
          std::string("cuBLASLt's workspace: ") + cudaGetErrorString(rc));
  Kokkos::push_finalize_hook([] {  // while the device is still there
    cudaDeviceSynchronize();       // no GEMM still reads the workspace
    const CublasLtApi& api = cublaslt_api();
    for (auto& [key, plan] : lt_state->plans) {
      api.layout_destroy(plan.a);
      api.layout_destroy(plan.b);
      api.layout_destroy(plan.d);
      api.desc_destroy(plan.desc);
    }
    cudaFree(lt_state->workspace);
    api.destroy(lt_state->handle);
    delete lt_state;
    lt_state = nullptr;
  });
  return *lt_state;
}

// The plan of a row-major D = op(A) op(B) computed as cuBLAS's column-major D^T = op(B)^T
// op(A)^T: cuBLASLt's first operand is trident's B, its second trident's A.
cublasLtEpilogue_t epilogue_of(const EpilogueKey& key) {
  // cuBLASLt's B is trident's A (make_plan): the sums of op(A)'s rows are BGRADB's.
  if (key.bias_grad) return CUBLASLT_EPILOGUE_BGRADB;
  switch (key.gelu) {
    case GeluEpilogue::kForward:
      return key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GeluEpilogue::kBackward:
      return CUBLASLT_EPILOGUE_DGELU;
    case GeluEpilogue::kNone:
      break;
  }
  return key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

EpiloguePlan make_plan(const EpilogueKey& key, const void* bias, const void* aux) {
  const CublasLtApi& lt = cublaslt_api();
  CublasLtState& state = cublaslt_state();
  const cudaDataType_t type = key.format == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  EpiloguePlan plan;
  TRIDENT_CUBLAS(lt.desc_create(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = key.trans_b == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRIDENT_CUBLAS(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  TRIDENT_CUBLAS(
      lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  const cublasLtEpilogue_t epilogue = epilogue_of(key);
  TRIDENT_CUBLAS(
      lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (key.gelu != GeluEpilogue::kNone) {  // aux is laid out like D (column-major n x m)
    const int64_t ld_aux = key.ld_aux;
    TRIDENT_CUBLAS(
        lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    TRIDENT_CUBLAS(
        lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
  }
  const cudaDataType_t out_type = key.bias_grad ? CUDA_R_32F : type;
  if (key.bias || key.bias_grad) {  // the heuristic reads its alignment; each call sets its own
    TRIDENT_CUBLAS(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    TRIDENT_CUBLAS(
        lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type, sizeof(out_type)));
  }
  // Column-major extents as stored: trident's B is n x k (k x n transposed), A k x m (m x k).
  const bool first_n = key.trans_b != 'T', second_n = key.trans_a != 'T';
  TRIDENT_CUBLAS(
      lt.layout_create(&plan.a, type, first_n ? key.n : key.k, first_n ? key.k : key.n, key.ldb));
  TRIDENT_CUBLAS(
      lt.layout_create(&plan.b, type, second_n ? key.k : key.m, second_n ? key.m : key.k, key.lda));
  TRIDENT_CUBLAS(lt.layout_create(&plan.d, out_type, key.n, key.m, key.ldd));
  cublasLtMatmulPreference_t preference = nullptr;
  TRIDENT_CUBLAS(lt.preference_create(&preference));
  const uint64_t workspace = kCublasLtWorkspaceBytes;
  TRIDENT_CUBLAS(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                   sizeof(workspace)));
  const uint32_t align_first = key.align_b, align_second = key.align_a,
                 align_d = std::min(key.align_d, key.residual ? key.align_residual : 16);
  TRIDENT_CUBLAS(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                   &align_first, sizeof(align_first)));
  TRIDENT_CUBLAS(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                   &align_second, sizeof(align_second)));
  TRIDENT_CUBLAS(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                   sizeof(align_d)));
  TRIDENT_CUBLAS(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                   sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = lt.heuristic(state.handle, plan.desc, plan.a, plan.b, plan.d,
                                             plan.d, preference, 1, &result, &found);
  lt.preference_destroy(preference);
  // A result's fields hold only when its own state says so.
  plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0 &&
               result.state == CUBLAS_STATUS_SUCCESS &&
               result.workspaceSize <= kCublasLtWorkspaceBytes;
  if (plan.found) plan.algo = result.algo;
  return plan;
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

const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = open_cublaslt();
  return api;
}

namespace {
bool& epilogues_setting() {
  static bool on = [] {
    const char* v = std::getenv("TRIDENT_CUBLASLT");
    return !(v && std::string(v) == "0");
  }();
  return on;
}
}  // namespace

bool cublaslt_epilogues() {
  return epilogues_setting();
}

void set_cublaslt_epilogues(bool on) {
  epilogues_setting() = on;
}

namespace {

// A plan's key with the GEMM's shape and operands; no epilogue yet (the caller adds its own).
EpilogueKey shape_key(char trans_a, char trans_b, int m, int n, int k, int lda, int ldb, int ldd,
                      Precision format, const void* A, const void* B, const void* D) {
  EpilogueKey key{};
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldd = ldd;
  key.format = format;
  key.align_a = alignment_of(A);
  key.align_b = alignment_of(B);
  key.align_d = alignment_of(D);
  key.align_bias = key.align_residual = key.align_aux = 16;
  key.gelu = GeluEpilogue::kNone;
  return key;
}

// The kept plan of `key`, made at its first call (the heuristic reads the bias's and aux's
// alignment from their pointers).
EpiloguePlan& plan_of(const EpilogueKey& key, const void* bias, const void* aux) {
  CublasLtState& state = cublaslt_state();
  auto at = state.plans.find(key);
  if (at == state.plans.end()) at = state.plans.emplace(key, make_plan(key, bias, aux)).first;
  return at->second;
}

}  // namespace

bool gemm16_epilogue(const Kokkos::Cuda& exec, char trans_a, char trans_b, int m, int n, int k,
                     float alpha, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                     Precision format, uint16_t* D, int ldd, const uint16_t* bias,
                     const uint16_t* residual, GeluEpilogue gelu, uint16_t* aux, int ld_aux) {
  if (gelu != GeluEpilogue::kNone &&
      (residual || !aux || (gelu == GeluEpilogue::kBackward && bias)))
    throw std::logic_error(
        "gemm16_epilogue: GELU takes aux, and no residual (nor, backward, bias)");
  CublasLtState& state = cublaslt_state();
  EpilogueKey key = shape_key(trans_a, trans_b, m, n, k, lda, ldb, ldd, format, A, B, D);
  key.bias = bias != nullptr;
  key.residual = residual != nullptr;
  key.align_bias = bias ? alignment_of(bias) : 16;
  key.align_residual = residual ? alignment_of(residual) : 16;
  key.gelu = gelu;
  key.ld_aux = aux ? ld_aux : 0;
  key.align_aux = aux ? alignment_of(aux) : 16;
  EpiloguePlan& plan = plan_of(key, bias, aux);
  if (!plan.found) return false;
  const CublasLtApi& lt = cublaslt_api();
  if (bias)
    TRIDENT_CUBLAS(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux)
    TRIDENT_CUBLAS(
        lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float beta = residual ? 1.0f : 0.0f;
  ProfiledCall call;  // the launch roofline names it as the cublasGemmEx path does
  call.open_gemm(gelu == GeluEpilogue::kForward    ? "gemm16_gelu"
                 : gelu == GeluEpilogue::kBackward ? "gemm16_dgelu"
                                                   : "gemm16_out",
                 trans_a, trans_b, m, n, k);
  TRIDENT_CUBLAS(lt.matmul(state.handle, plan.desc, &alpha, B, plan.a, A, plan.b, &beta,
                           residual ? static_cast<const void*>(residual) : D, plan.d, D, plan.d,
                           &plan.algo, state.workspace, kCublasLtWorkspaceBytes,
                           exec.cuda_stream()));
  return true;
}

bool gemm16_weight_grad_epilogue(const Kokkos::Cuda& exec, char trans_a, char trans_b, int m, int n,
                                 int k, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                                 Precision format, float beta, float* D, int ldd,
                                 float* bias_grad) {
  CublasLtState& state = cublaslt_state();
  EpilogueKey key = shape_key(trans_a, trans_b, m, n, k, lda, ldb, ldd, format, A, B, D);
  key.bias_grad = true;
  key.align_bias = alignment_of(bias_grad);
  EpiloguePlan& plan = plan_of(key, bias_grad, nullptr);
  if (!plan.found) return false;
  const CublasLtApi& lt = cublaslt_api();
  TRIDENT_CUBLAS(
      lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad, sizeof(bias_grad)));
  const float alpha = 1.0f;
  ProfiledCall call;
  call.open_gemm("gemm16_bgrad", trans_a, trans_b, m, n, k);
  TRIDENT_CUBLAS(lt.matmul(state.handle, plan.desc, &alpha, B, plan.a, A, plan.b, &beta, D, plan.d,
                           D, plan.d, &plan.algo, state.workspace, kCublasLtWorkspaceBytes,
                           exec.cuda_stream()));
  return true;
}

}  // namespace trident::kernels
