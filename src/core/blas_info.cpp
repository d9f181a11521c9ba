// The BLAS library and kernel, from OpenBLAS's own queries when it is OpenBLAS.
#include "core/blas_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
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

namespace {

// The vector width OpenBLAS's kernel `lower` (a core name, lower case) computes at: 0 before AVX
// (what OpenBLAS falls back to on a CPU it does not know), 1 AVX without AVX2, 2 AVX2 and FMA,
// 3 AVX-512; -1 for a name not listed here.
int kernel_width_tier(const std::string& lower) {
  static const std::map<std::string, int> tiers = {
      {"prescott", 0},       {"core2", 0},      {"penryn", 0},
      {"dunnington", 0},     {"nehalem", 0},    {"atom", 0},
      {"katmai", 0},         {"coppermine", 0}, {"northwood", 0},
      {"banias", 0},         {"opteron", 0},    {"barcelona", 0},
      {"sandybridge", 1},    {"bulldozer", 1},  {"piledriver", 1},
      {"steamroller", 1},    {"haswell", 2},    {"zen", 2},
      {"excavator", 2},      {"skylakex", 3},   {"cooperlake", 3},
      {"sapphirerapids", 3},
  };
  const auto it = tiers.find(lower);
  return it == tiers.end() ? -1 : it->second;
}

}  // namespace

std::string blas_kernel_warning(const std::string& kernel, const std::string& fitting,
                                const std::string& forced) {
  const int tier = kernel_width_tier(lowercase(kernel));
  const int fitting_tier = fitting == "SkylakeX" ? 3 : fitting == "Haswell" ? 2 : -1;
  if (tier < 0 || tier >= fitting_tier) return "";
  const std::string vector_unit = fitting_tier == 3 ? "AVX-512" : "AVX2";
  if (tier == 0) {
    const std::string why =
        forced.empty()
            ? fmt::format(
                  "OpenBLAS does not know this CPU and fell back to its generic '{}' kernel",
                  kernel)
            : fmt::format("OPENBLAS_CORETYPE={} selects OpenBLAS's generic '{}' kernel", forced,
                          kernel);
    return fmt::format(
        "{}, although the CPU has {}: GEMMs run several times slower (4-5x measured on 2 cores). "
        "Launch every rank with OPENBLAS_CORETYPE={}",
        why, vector_unit, fitting);
  }
  const std::string kind = tier == 1 ? "AVX" : "AVX2";
  const std::string why =
      forced.empty() ? fmt::format("OpenBLAS chose its {} kernel '{}'", kind, kernel)
                     : fmt::format("OPENBLAS_CORETYPE={} selects OpenBLAS's {} kernel '{}'", forced,
                                   kind, kernel);
  // Measured for the AVX2 kernel on an AVX-512 CPU (OpenBLAS itself picks an AVX-512 kernel on
  // the CPUs it knows; an OPENBLAS_CORETYPE set for older nodes can keep it from doing so).
  const std::string cost =
      tier == 2 && fitting_tier == 3
          ? "GEMMs run up to 2x slower (1.9x at the small model's shapes, `make run` 1.5x, against "
            "SkylakeX on a 2-core AMD EPYC)"
          : "GEMMs run slower (its kernels use no FMA)";
  return fmt::format("{}, although the CPU has {}: {}. Launch every rank with OPENBLAS_CORETYPE={}",
                     why, vector_unit, cost, fitting);
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
  // As tools/blas_kernel.sh decides: OpenBLAS's SkylakeX kernels use AVX-512 F, BW, DQ and VL.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  fitting = avx512                                                            ? "SkylakeX"
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                              : "";
#endif
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  info.warning = blas_kernel_warning(info.kernel, fitting, forced ? forced : "");
#else
  info.library = TRIDENT_BLAS_VENDOR;
#endif
  return info;
}

void set_blas_threads([[maybe_unused]] int threads) {
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(threads);
#endif
}

}  // namespace trident
