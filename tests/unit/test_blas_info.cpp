// The BLAS kernel report: the library and kernel named, and the warning for a generic fallback.
#include <cblas.h>
#include <gtest/gtest.h>

#include "core/blas_info.hpp"

using namespace trident;

TEST(BlasInfo, NamesTheLibraryAndKernel) {
  const BlasInfo info = blas_info();
  EXPECT_FALSE(info.library.empty());
#ifdef OPENBLAS_VERSION
  EXPECT_EQ(info.library.rfind("OpenBLAS 0.", 0), 0u) << info.library;
  EXPECT_FALSE(info.kernel.empty());
  EXPECT_EQ(info.describe(), info.library + ", kernel " + info.kernel);
#endif
}

TEST(BlasInfo, WarnsOnlyForAGenericKernelOnAVectorCpu) {
  EXPECT_EQ(blas_kernel_warning("SkylakeX", "SkylakeX", ""), "");
  EXPECT_EQ(blas_kernel_warning("Haswell", "Haswell", ""), "");
  EXPECT_EQ(blas_kernel_warning("Prescott", "", ""), "") << "no AVX2: nothing better exists";
  const std::string unknown = blas_kernel_warning("Prescott", "SkylakeX", "");
  EXPECT_NE(unknown.find("does not know this CPU"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("AVX-512"), std::string::npos);
  EXPECT_NE(unknown.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
  const std::string forced = blas_kernel_warning("Nehalem", "Haswell", "NEHALEM");
  EXPECT_NE(forced.find("OPENBLAS_CORETYPE=NEHALEM selects"), std::string::npos) << forced;
  EXPECT_NE(forced.find("AVX2"), std::string::npos);
  EXPECT_NE(forced.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
}
