// Backend selection per grid axis: MPI, NCCL or auto (NCCL for node-local axes on CUDA builds).
#include "comm/backend.hpp"

#include <fmt/format.h>

#include <type_traits>

#include "comm/host_comm.hpp"
#include "comm/profiled_comm.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

#ifdef TRIDENT_HAVE_NCCL
#include "comm/nccl_comm.hpp"
#endif

namespace trident {
namespace {

#ifdef KOKKOS_ENABLE_CUDA
constexpr bool kCudaExec = std::is_same_v<Exec, Kokkos::Cuda>;
#else
constexpr bool kCudaExec = false;
#endif

std::string exec_name() {
  return Exec::name();
}

// Why "nccl" cannot be honoured in this build; empty when it can.
std::string nccl_unusable_reason() {
  if (nccl_compiled() && kCudaExec) return "";
  if (!nccl_compiled() && !kCudaExec)
    return fmt::format(
        "this build is host-only (Kokkos {}) and has no NCCL backend (TRIDENT_NCCL=OFF, or "
        "CMake found no CUDA toolkit with NCCL)",
        exec_name());
  if (!kCudaExec)
    return fmt::format(
        "this build is host-only (Kokkos {}): the NCCL backend is compiled but NCCL needs "
        "device buffers",
        exec_name());
  return "this build has no NCCL backend (TRIDENT_NCCL=OFF, or CMake found no NCCL: set "
         "NCCL_ROOT and reconfigure with -DTRIDENT_NCCL=ON)";
}

}  // namespace

bool nccl_compiled() {
#ifdef TRIDENT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool nccl_usable() {
  return nccl_compiled() && kCudaExec;
}

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, CollectiveBackend backend,
                                                bool node_local, const std::string& key,
                                                const char* axis) {
  bool use_nccl = false;
  switch (backend) {
    case CollectiveBackend::kMpi:
      use_nccl = false;
      break;
    case CollectiveBackend::kNccl: {
      const std::string why = nccl_unusable_reason();
      if (!why.empty())
        throw InputError(fmt::format(
            "{} = 'nccl' needs a CUDA build of Kokkos with NCCL; {} — use 'mpi' or 'auto'", key,
            why));
      use_nccl = true;
      break;
    }
    case CollectiveBackend::kAuto:
      use_nccl = nccl_usable() && node_local;
      break;
  }
  // "parallel.backend_tp" -> "tp" where no axis is named.
  const std::string name = *axis ? axis : key.substr(key.rfind('_') + 1);
  const int recorded = FlightRecorder::instance().add_communicator(name, world_ranks(comm));
#ifdef TRIDENT_HAVE_NCCL
  if (use_nccl)
    return std::make_unique<ProfiledCommunicator>(std::make_unique<NcclCommunicator>(comm), name,
                                                  recorded);
#else
  (void)use_nccl;  // never true: NCCL is not usable without the backend
#endif
  return std::make_unique<ProfiledCommunicator>(std::make_unique<MpiCommunicator>(comm), name,
                                                recorded);
}

std::string backend_summary() {
  std::string nccl = "no";
#ifdef TRIDENT_HAVE_NCCL
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess)  // the library loaded at run time, not the header
    nccl = fmt::format("yes, NCCL {}.{}.{}", version / 10000, version / 100 % 100, version % 100);
  else
    nccl = "yes";
#endif
  return fmt::format("NCCL backend compiled: {}; Kokkos {}: {}", nccl, exec_name(),
                     nccl_usable() ? "device buffers, NCCL usable" : "host buffers, NCCL unusable");
}

}  // namespace trident
