// Backend selection per axis: "mpi", "auto" and "nccl" on this build, bad names, config keys.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <string>

#include "comm/backend.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/launch_profiler.hpp"
#include "io/config.hpp"

using namespace trident;

namespace {

// The InputError message make_communicator throws, or "" when it returns a communicator.
std::string error_of(CollectiveBackend backend, const std::string& key) {
  try {
    make_communicator(MPI_COMM_SELF, backend, true, key);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string validate_error(const Config& c) {
  try {
    validate(c, 1);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A config for one rank with the parallel keys given as TOML text, parsed as a file would be.
Config parallel_config(const std::string& keys) {
  return resolve(parse_config_text("[parallel]\n" + keys, "test"), 1);
}

// The MPI backend's name: a GPU build whose MPI cannot read device memory stages through the host.
const char* mpi_name() {
  return mpi_buffer_access() == MpiBufferAccess::kStaged ? "mpi (host-staged)" : "mpi";
}

}  // namespace

TEST(Backend, MpiGivesAnMpiCommunicator) {
  for (const bool node_local : {true, false}) {
    const auto comm = make_communicator(MPI_COMM_SELF, CollectiveBackend::kMpi, node_local);
    ASSERT_NE(comm, nullptr);
    EXPECT_STREQ(comm->backend(), mpi_name());
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->rank(), 0);
  }
}

TEST(Backend, AutoPicksNcclForNodeLocalAxesOnlyWhereUsable) {
  // Host-only builds (this one in CI) always get MPI; a CUDA build with NCCL gets NCCL.
  const auto comm = make_communicator(MPI_COMM_SELF, CollectiveBackend::kAuto, true);
  EXPECT_STREQ(comm->backend(), nccl_usable() ? "nccl" : mpi_name());
}

// Every communicator make_communicator gives labels its calls for the step profiler:
// "<backend> <operation> <axis>" with the bytes they move, and only while one listens.
TEST(Backend, CommunicatorsLabelTheirCallsForTheProfiler) {
  const auto comm =
      make_communicator(MPI_COMM_SELF, CollectiveBackend::kMpi, true, "parallel.backend_dp");
  View1 values("values", 256);
  comm->allreduce_sum(CommBuffer(values));  // not listened to
  LaunchProfiler profiler;
  profiler.start();
  comm->allreduce_sum(CommBuffer(values));
  comm->allreduce_sum(CommBuffer(values));
  comm->broadcast(CommBuffer(values), 0);
  profiler.stop();
  const std::string allreduce = std::string(mpi_name()) + " allreduce_sum dp";
  int seen = 0;
  for (const LaunchRow& row : profiler.rows()) {
    if (row.label == allreduce) {
      EXPECT_EQ(row.calls, 2);
      EXPECT_EQ(row.bytes, 2 * 256 * 4.0);
      ++seen;
    }
    if (row.label == std::string(mpi_name()) + " broadcast dp") ++seen;
  }
  EXPECT_EQ(seen, 2);
}

TEST(Backend, AutoOffNodeIsAlwaysMpi) {
  const auto comm = make_communicator(MPI_COMM_SELF, CollectiveBackend::kAuto, false);
  EXPECT_STREQ(comm->backend(), mpi_name());
}

TEST(Backend, NcclWorksWhereUsableAndOtherwiseSaysWhyAndWhatToUse) {
  if (nccl_usable()) {  // a CUDA build with NCCL and a GPU
    EXPECT_STREQ(make_communicator(MPI_COMM_SELF, CollectiveBackend::kNccl, true)->backend(),
                 "nccl");
    return;
  }
  const std::string msg = error_of(CollectiveBackend::kNccl, "parallel.backend_tp");
  EXPECT_NE(msg.find("parallel.backend_tp = 'nccl'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs a CUDA build of Kokkos"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host-only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use 'mpi' or 'auto'"), std::string::npos) << msg;
}

TEST(Backend, SummaryReportsTheLinkedNcclAndARequestSaysWhatIsMissing) {
  const std::string summary = backend_summary();
  if (nccl_compiled()) {
    // The version is asked of the library loaded at run time (ncclGetVersion), not the header.
    EXPECT_NE(summary.find("NCCL backend compiled: yes, NCCL 2."), std::string::npos) << summary;
  } else {
    EXPECT_NE(summary.find("NCCL backend compiled: no"), std::string::npos) << summary;
    EXPECT_FALSE(nccl_usable());
  }
  if (nccl_usable()) return;
  const std::string msg = error_of(CollectiveBackend::kNccl, "parallel.backend_dp");
  EXPECT_NE(
      msg.find(nccl_compiled() ? "compiled but NCCL needs device buffers" : "no NCCL backend"),
      std::string::npos)
      << msg;
}

TEST(BackendConfig, KeysDefaultToAutoAndAcceptEveryBackend) {
  const Config defaults;
  EXPECT_EQ(defaults.parallel.backend_tp, CollectiveBackend::kAuto);
  EXPECT_EQ(defaults.parallel.backend_dp, CollectiveBackend::kAuto);
  EXPECT_EQ(defaults.parallel.backend_pp, CollectiveBackend::kAuto);
  for (const char* name : {"auto", "mpi", "nccl"}) {
    // Availability is checked when the axes are built, not by validation.
    const Config c =
        parallel_config(fmt::format("backend_tp = \"{0}\"\nbackend_dp = \"{0}\"\n", name));
    EXPECT_EQ(name_of(c.parallel.backend_dp), std::string(name));
    EXPECT_EQ(validate_error(c), "") << name;
  }
  // Pipeline transfers are tagged MPI messages; NCCL (no tags) is refused on that axis.
  Config c = parallel_config("");
  c.parallel.backend_pp = CollectiveBackend::kNccl;
  EXPECT_NE(validate_error(c).find("parallel.backend_pp = 'nccl' is not supported"),
            std::string::npos);
}

TEST(BackendConfig, UnknownNamesAreRefusedOnReadingWithTheKeyAndTheValidValues) {
  for (const std::string bad : {"gloo", "", "MPI", "nccl "}) {
    try {
      parallel_config("backend_dp = \"" + bad + "\"\n");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("parallel.backend_dp = '" + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("one of auto, mpi, nccl"), std::string::npos) << msg;
    }
  }
}
