// Backend selection per axis: "mpi", "auto" and "nccl" on this build, bad names, config keys.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "comm/backend.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "io/config.hpp"

using namespace trident;

namespace {

// The InputError message make_communicator throws, or "" when it returns a communicator.
std::string error_of(const std::string& backend, const std::string& key) {
  try {
    make_communicator(MPI_COMM_SELF, backend, true, key);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string validate_error(Config c) {
  try {
    validate(c, 1);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Backend, MpiGivesAnMpiCommunicator) {
  for (const bool node_local : {true, false}) {
    const auto comm = make_communicator(MPI_COMM_SELF, "mpi", node_local);
    ASSERT_NE(comm, nullptr);
    EXPECT_NE(dynamic_cast<MpiCommunicator*>(comm.get()), nullptr);
    EXPECT_STREQ(comm->backend(), "mpi");
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->rank(), 0);
  }
}

TEST(Backend, AutoPicksNcclForNodeLocalAxesOnlyWhereUsable) {
  // Host-only builds (this one in CI) always get MPI; a CUDA build with NCCL gets NCCL.
  const auto comm = make_communicator(MPI_COMM_SELF, "auto", true);
  EXPECT_STREQ(comm->backend(), nccl_usable() ? "nccl" : "mpi");
  if (!nccl_usable()) {
    EXPECT_NE(dynamic_cast<MpiCommunicator*>(comm.get()), nullptr);
  }
}

TEST(Backend, AutoOffNodeIsAlwaysMpi) {
  const auto comm = make_communicator(MPI_COMM_SELF, "auto", false);
  EXPECT_STREQ(comm->backend(), "mpi");
}

TEST(Backend, NcclWorksWhereUsableAndOtherwiseSaysWhyAndWhatToUse) {
  if (nccl_usable()) {  // a CUDA build with NCCL and a GPU
    EXPECT_STREQ(make_communicator(MPI_COMM_SELF, "nccl", true)->backend(), "nccl");
    return;
  }
  const std::string msg = error_of("nccl", "parallel.backend_tp");
  EXPECT_NE(msg.find("parallel.backend_tp = 'nccl'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs a CUDA build of Kokkos"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host-only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use 'mpi' or 'auto'"), std::string::npos) << msg;
}

TEST(Backend, UnknownNameIsRejectedWithTheValidOnes) {
  for (const std::string bad : {"gloo", "", "MPI", "nccl "}) {
    const std::string msg = error_of(bad, "parallel.backend_dp");
    EXPECT_NE(msg.find("parallel.backend_dp = '" + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("auto, mpi, nccl"), std::string::npos) << msg;
  }
}

TEST(Backend, NcclCompiledMatchesTheBuildFlag) {
#ifdef TRIDENT_HAVE_NCCL
  EXPECT_TRUE(nccl_compiled());
  EXPECT_NE(backend_summary().find("NCCL backend compiled: yes"), std::string::npos)
      << backend_summary();
#else
  EXPECT_FALSE(nccl_compiled());
  EXPECT_NE(backend_summary().find("NCCL backend compiled: no"), std::string::npos)
      << backend_summary();
#endif
  if (!nccl_compiled()) {
    EXPECT_FALSE(nccl_usable());
  }
}

TEST(BackendConfig, KeysDefaultToAutoAndAcceptEveryBackend) {
  const Config defaults;
  EXPECT_EQ(defaults.parallel.backend_tp, "auto");
  EXPECT_EQ(defaults.parallel.backend_dp, "auto");
  EXPECT_EQ(defaults.parallel.backend_pp, "auto");
  for (const char* name : {"auto", "mpi", "nccl"}) {
    Config c;
    c.parallel.backend_tp = c.parallel.backend_dp = name;
    EXPECT_EQ(validate_error(c), "") << name;  // availability is checked when axes are built
  }
  // Pipeline transfers are tagged MPI messages; NCCL (no tags) is refused on that axis.
  Config c;
  c.parallel.backend_pp = "nccl";
  EXPECT_NE(validate_error(c).find("parallel.backend_pp = 'nccl' is not supported"),
            std::string::npos);
}

TEST(BackendConfig, ValidationNamesTheKeyAndTheValidValues) {
  Config c;
  c.parallel.backend_dp = "gloo";
  const std::string msg = validate_error(c);
  EXPECT_NE(msg.find("parallel.backend_dp = 'gloo'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("auto, mpi, nccl"), std::string::npos) << msg;
  c.parallel.backend_dp = "mpi";
  c.parallel.backend_pp = "ucx";
  EXPECT_NE(validate_error(c).find("parallel.backend_pp = 'ucx'"), std::string::npos);
}
