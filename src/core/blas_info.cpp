// The BLAS library and kernel, from OpenBLAS's own queries when it is OpenBLAS.
#include "core/blas_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "core/build_options.hpp"

#if defined(TRIDENT_HOST_BLAS)
#include <cblas.h>
#endif

namespace trident {
namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

std::string BlasInfo::describe() const {
  const std::string name = threading.empty() ? library : fmt::format("{} ({})", library, threading);
  return kernel.empty() ? name : fmt::format("{}, kernel {}", name, kernel);
}

std::string host_simd() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__x86_64__)
  return "SSE2";
#elif defined(__aarch64__)
  return "AArch64";
#else
  return "generic";
#endif
}

std::string blas_pool_warning(const std::string& threading, int blas_threads,
                              const std::string& kokkos_backend, int kokkos_threads) {
  if (threading != "pthreads" || blas_threads < 2 || kokkos_backend != "OpenMP" ||
      kokkos_threads < 2)
    return "";
  return fmt::format(
      "OpenBLAS runs GEMMs on a pthread pool of its own ({} threads) beside Kokkos' {} OpenMP "
      "threads; its workers spin after each GEMM on the cores the next kernel needs (non-GEMM "
      "kernels ran at one-thread speed this way on 2 cores). Build against Debian's OpenMP "
      "OpenBLAS (libopenblas-openmp-dev, -DTRIDENT_OPENBLAS_FLAVOUR=openmp), or run with "
      "OPENBLAS_NUM_THREADS=1",
      blas_threads, kokkos_threads);
}

std::string wait_policy_warning(const std::string& wait_policy, int threads, int node_ranks,
                                int cores) {
  if (lowercase(wait_policy) != "passive" || threads < 2 || node_ranks * threads > cores) return "";
  return fmt::format(
      "OMP_WAIT_POLICY=PASSIVE puts the {} OpenMP threads of each rank to sleep after every kernel "
      "and GEMM, and waking them costs time (the gpt2-124m step ran 10-20% slower at 1 rank x 2 "
      "threads on 2 cores). Here {} rank(s) x {} threads fit the {} cores: leave OMP_WAIT_POLICY "
      "unset (libgomp's threads then spin a while before they sleep)",
      threads, node_ranks, threads, cores);
}

std::string blas_kernel_warning(const std::string& kernel, const std::string& fitting,
                                const std::string& forced) {
  const std::string lower = lowercase(kernel);
  // OpenBLAS's kernels for CPUs before AVX: what it falls back to on a CPU it does not know.
  const bool pre_avx = lower == "prescott" || lower == "core2" || lower == "penryn" ||
                       lower == "dunnington" || lower == "nehalem" || lower == "atom" ||
                       lower == "katmai" || lower == "coppermine" || lower == "northwood" ||
                       lower == "banias" || lower == "opteron" || lower == "barcelona";
  if (!pre_avx || fitting.empty()) return "";
  const std::string why =
      forced.empty()
          ? fmt::format("OpenBLAS does not know this CPU and fell back to its generic '{}' kernel",
                        kernel)
          : fmt::format("OPENBLAS_CORETYPE={} selects OpenBLAS's generic '{}' kernel", forced,
                        kernel);
  return fmt::format(
      "{}, although the CPU has {}: GEMMs run several times slower (4-5x measured on 2 cores). "
      "Launch every rank with OPENBLAS_CORETYPE={}",
      why, fitting == "SkylakeX" ? "AVX-512" : "AVX2", fitting);
}

BlasInfo blas_info() {
  BlasInfo info;
#ifdef OPENBLAS_VERSION
  std::istringstream version(OPENBLAS_VERSION);  // " OpenBLAS 0.3.21 "
  std::string name, number;
  version >> name >> number;
  info.library = name + " " + number;
  info.kernel = openblas_get_corename();
  info.threads = openblas_get_num_threads();
  switch (openblas_get_parallel()) {
    case OPENBLAS_OPENMP:
      info.threading = "OpenMP";
      break;
    case OPENBLAS_THREAD:
      info.threading = "pthreads";
      break;
    default:
      info.threading = "sequential";
      break;
  }
  std::string fitting;
#if defined(__x86_64__) || defined(__i386__)
  fitting = __builtin_cpu_supports("avx512f") ? "SkylakeX"
            : __builtin_cpu_supports("avx2")  ? "Haswell"
                                              : "";
#endif
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  info.warning = blas_kernel_warning(info.kernel, fitting, forced ? forced : "");
#else
  info.library = TRIDENT_BLAS_VENDOR;
#endif
  return info;
}

}  // namespace trident
