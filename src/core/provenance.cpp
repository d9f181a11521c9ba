// Provenance of a measurement: the CPU, MPI, BLAS and threads this process runs with, as JSON.
#include "core/provenance.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/blas_info.hpp"
#include "core/threads_per_rank.hpp"
#include "core/version.hpp"

namespace trident {
namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trimmed(line.substr(0, colon)) == "model name") return trimmed(line.substr(colon + 1));
  }
  return "";
}

std::string mpi_library() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(version, &length) != MPI_SUCCESS) return "";
  // Some libraries count the terminating NUL in `length`.
  const std::string text(version, strnlen(version, static_cast<size_t>(length)));
  return trimmed(text.substr(0, text.find_first_of("\r\n")));
}

std::string environment_json(const std::string& kokkos_backend, int kokkos_threads) {
  const BlasInfo blas = blas_info();
  const ThreadsPerRank& threads = threads_per_rank();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const nlohmann::ordered_json report = {
      {"trident_revision", git_revision()},
      {"hostname", host},
      {"cpu_model", cpu_model()},
      {"host_simd", host_simd()},
      {"node_cpus", threads.node_cpus},
      {"node_ranks", threads.node_ranks},
      {"threads_per_rank", threads.threads},
      {"threads_from_environment", threads.from_environment},
      {"kokkos_backend", kokkos_backend},
      {"kokkos_threads", kokkos_threads},
      {"blas", blas.describe()},
      {"blas_library", blas.library},
      {"blas_kernel", blas.kernel},
      {"blas_threading", blas.threading},
      {"blas_threads", blas.threads},
      {"blas_warning", blas.warning},
      {"mpi", mpi_library()},
  };
  return report.dump();
}

}  // namespace trident
