// Which BLAS runs the host GEMMs and with which kernel, and whether that kernel wastes the CPU.
#pragma once

#include <string>

namespace trident {

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21", or the configured vendor
  std::string kernel;   // OpenBLAS's core name ("SkylakeX", "Haswell", "Prescott"), or ""
  int threads = 0;      // the threads OpenBLAS runs a GEMM on; 0 when not OpenBLAS
  // OpenBLAS's threading: "OpenMP" (its GEMMs run on the OpenMP runtime's threads, Kokkos'
  // too), "pthreads" (a pool of its own) or "sequential"; "" when not OpenBLAS.
  std::string threading;
  // When the CPU has AVX-512 or AVX2 and the kernel is a generic fallback: what that costs and
  // how to choose the right one; "" otherwise.
  std::string warning;
  std::string describe() const;  // "OpenBLAS 0.3.21 (OpenMP), kernel SkylakeX"
};

BlasInfo blas_info();

// Sets the threads OpenBLAS runs a GEMM on (nothing for another BLAS).
void set_blas_threads(int threads);

// The warning for OpenBLAS kernel `kernel` on a CPU whose best kernel is `fitting` ("SkylakeX"
// with AVX-512, "Haswell" with AVX2, "" without either), `forced` the OPENBLAS_CORETYPE given
// (or ""): a kernel narrower than the CPU's vector unit (a generic pre-AVX fallback, or an AVX2
// kernel on an AVX-512 CPU) costs GEMM speed. "" when the kernel suits the CPU.
std::string blas_kernel_warning(const std::string& kernel, const std::string& fitting,
                                const std::string& forced);

// The vector instructions the host kernels were compiled for: "AVX-512", "AVX2", "SSE2", or the
// architecture's name elsewhere.
std::string host_simd();

// When BLAS keeps a thread pool of its own (`threading` "pthreads", `blas_threads` > 1) beside
// Kokkos' OpenMP threads (`kokkos_threads` > 1): the two pools compete for the cores, and what to
// do about it; "" otherwise.
std::string blas_pool_warning(const std::string& threading, int blas_threads,
                              const std::string& kokkos_backend, int kokkos_threads);

// When idle OpenMP threads sleep at once (`wait_policy` PASSIVE, the OMP_WAIT_POLICY given, any
// case) although this node's `node_ranks` x `threads` fit its `cores`: waking them for every
// kernel and GEMM costs time, and what to do about it; "" otherwise.
std::string wait_policy_warning(const std::string& wait_policy, int threads, int node_ranks,
                                int cores);

}  // namespace trident
