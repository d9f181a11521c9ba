// The BLAS kernel report: the library and kernel named, and the warning for a kernel narrower than
// the CPU.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include "core/blas_info.hpp"
#include "core/build_options.hpp"

#if defined(TRIDENT_HOST_BLAS)
#include <cblas.h>
#endif

using namespace trident;

TEST(BlasInfo, NamesTheLibraryAndKernel) {
  const BlasInfo info = blas_info();
  EXPECT_FALSE(info.library.empty());
#ifdef OPENBLAS_VERSION
  EXPECT_EQ(info.library.rfind("OpenBLAS 0.", 0), 0u) << info.library;
  EXPECT_FALSE(info.kernel.empty());
  EXPECT_EQ(info.describe(), info.library + " (" + info.threading + "), kernel " + info.kernel);
#endif
}

// Built only against one of Debian's OpenBLAS flavours (CMakeLists.txt defines the name then).
#ifdef TRIDENT_OPENBLAS_FLAVOUR
TEST(BlasInfo, RunsTheOpenBlasFlavourTheBuildChose) {
  // With Kokkos on OpenMP the build links Debian's OpenMP OpenBLAS, so a GEMM and the kernels
  // around it share one pool; its run path must keep the system's libopenblas.so.0 alternative
  // (pthreads by default) from replacing it at run time.
  const std::string flavour = TRIDENT_OPENBLAS_FLAVOUR;
  const std::string expected = flavour == "openmp"    ? "OpenMP"
                               : flavour == "pthread" ? "pthreads"
                                                      : "sequential";
  EXPECT_EQ(blas_info().threading, expected) << "built against the " << flavour << " flavour";
#if defined(KOKKOS_ENABLE_OPENMP) && defined(TRIDENT_OPENBLAS_FLAVOUR_AUTO)
  EXPECT_EQ(flavour, "openmp") << "Kokkos runs on OpenMP: BLAS should share its threads";
#endif
}
#endif

TEST(BlasInfo, WarnsWhenTwoThreadPoolsCompete) {
  EXPECT_EQ(blas_pool_warning("OpenMP", 2, "OpenMP", 2), "");
  EXPECT_EQ(blas_pool_warning("pthreads", 1, "OpenMP", 2), "") << "one BLAS thread: no pool";
  EXPECT_EQ(blas_pool_warning("pthreads", 2, "Serial", 1), "");
  EXPECT_EQ(blas_pool_warning("pthreads", 2, "OpenMP", 1), "");
  const std::string compete = blas_pool_warning("pthreads", 2, "OpenMP", 2);
  EXPECT_NE(compete.find("pthread pool of its own (2 threads)"), std::string::npos) << compete;
  EXPECT_NE(compete.find("-DTRIDENT_OPENBLAS_FLAVOUR=openmp"), std::string::npos);
}

TEST(BlasInfo, WarnsWhenPassiveThreadsHaveCoresOfTheirOwn) {
  EXPECT_EQ(wait_policy_warning("", 2, 1, 2), "") << "libgomp's default spins, then sleeps";
  EXPECT_EQ(wait_policy_warning("ACTIVE", 2, 1, 2), "");
  EXPECT_EQ(wait_policy_warning("PASSIVE", 1, 2, 2), "") << "one thread per rank: no workers";
  EXPECT_EQ(wait_policy_warning("PASSIVE", 2, 2, 2), "") << "oversubscribed: sleeping is right";
  const std::string sleeps = wait_policy_warning("passive", 2, 1, 2);
  EXPECT_NE(sleeps.find("1 rank(s) x 2 threads fit the 2 cores"), std::string::npos) << sleeps;
  EXPECT_NE(sleeps.find("leave OMP_WAIT_POLICY unset"), std::string::npos) << sleeps;
  EXPECT_NE(wait_policy_warning("PASSIVE", 4, 4, 16), "");
}

TEST(BlasInfo, WarnsOnlyForAKernelNarrowerThanTheCpu) {
  EXPECT_EQ(blas_kernel_warning("SkylakeX", "SkylakeX", ""), "");
  EXPECT_EQ(blas_kernel_warning("Cooperlake", "SkylakeX", ""), "") << "AVX-512 as well";
  EXPECT_EQ(blas_kernel_warning("Haswell", "Haswell", ""), "");
  EXPECT_EQ(blas_kernel_warning("Zen", "Haswell", ""), "") << "AVX2 as well";
  EXPECT_EQ(blas_kernel_warning("SkylakeX", "Haswell", "SKYLAKEX"), "") << "wider: not ours";
  EXPECT_EQ(blas_kernel_warning("Nonesuch", "SkylakeX", ""), "") << "a name we cannot rank";
  EXPECT_EQ(blas_kernel_warning("Prescott", "", ""), "") << "no AVX2: nothing better exists";
  const std::string unknown = blas_kernel_warning("Prescott", "SkylakeX", "");
  EXPECT_NE(unknown.find("does not know this CPU"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("AVX-512"), std::string::npos);
  EXPECT_NE(unknown.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
  const std::string forced = blas_kernel_warning("Nehalem", "Haswell", "NEHALEM");
  EXPECT_NE(forced.find("OPENBLAS_CORETYPE=NEHALEM selects"), std::string::npos) << forced;
  EXPECT_NE(forced.find("AVX2"), std::string::npos);
  EXPECT_NE(forced.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
  // OpenBLAS picks an AVX-512 kernel on the AVX-512 CPUs it knows; an AVX2 one there halves the
  // GEMMs' width, whether OpenBLAS chose it or the environment forced it.
  const std::string narrow = blas_kernel_warning("Haswell", "SkylakeX", "Haswell");
  EXPECT_NE(narrow.find("OPENBLAS_CORETYPE=Haswell selects OpenBLAS's AVX2 kernel"),
            std::string::npos)
      << narrow;
  EXPECT_NE(narrow.find("up to 2x slower"), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << narrow;
  const std::string chosen = blas_kernel_warning("Sandybridge", "Haswell", "");
  EXPECT_NE(chosen.find("OpenBLAS chose its AVX kernel 'Sandybridge'"), std::string::npos)
      << chosen;
  EXPECT_NE(chosen.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << chosen;
}
