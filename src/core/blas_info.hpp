// Which BLAS runs the host GEMMs and with which kernel, and whether that kernel wastes the CPU.
#pragma once

#include <string>

namespace trident {

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21", or the configured vendor
  std::string kernel;   // OpenBLAS's core name ("SkylakeX", "Haswell", "Prescott"), or ""
  int threads = 0;      // the threads OpenBLAS runs a GEMM on; 0 when not OpenBLAS
  // When the CPU has AVX-512 or AVX2 and the kernel is a generic fallback: what that costs and
  // how to choose the right one; "" otherwise.
  std::string warning;
  std::string describe() const;  // "OpenBLAS 0.3.21, kernel SkylakeX"
};

BlasInfo blas_info();

// The warning for OpenBLAS kernel `kernel` on a CPU whose best kernel is `fitting` ("SkylakeX"
// with AVX-512, "Haswell" with AVX2, "" without either), `forced` the OPENBLAS_CORETYPE given
// (or ""); "" when the kernel suits the CPU.
std::string blas_kernel_warning(const std::string& kernel, const std::string& fitting,
                                const std::string& forced);

}  // namespace trident
