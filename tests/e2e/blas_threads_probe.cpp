// Prints a checksum of the bits of GEMMs in the tiny model's shapes: two runs at different
// OMP_NUM_THREADS show whether the results depend on the thread count. No argument: the host
// BLAS's single-precision GEMMs; "bf16": oneDNN's bf16 x bf16 -> fp32 ones (kernels::gemm16).
#include <cblas.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "kernels/onednn.hpp"

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bf16";
  const int shapes[][3] = {{256, 96, 32}, {256, 32, 32},  {256, 128, 32}, {256, 32, 128},
                           {96, 32, 256}, {128, 32, 256}, {256, 256, 32}, {256, 32, 256}};
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over every result's bytes
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  };
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int m = s[0], n = s[1], k = s[2];
        std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n),
            c(static_cast<size_t>(m) * n);
        for (float& x : a) x = next();
        for (float& x : b) x = next();
        if (bf16) {
          std::vector<uint16_t> a16(a.size()), b16(b.size());
          for (size_t i = 0; i < a.size(); ++i) a16[i] = trident::to_bf16(a[i]);
          for (size_t i = 0; i < b.size(); ++i) b16[i] = trident::to_bf16(b[i]);
          trident::kernels::onednn::gemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a16.data(),
                                         ta ? m : k, b16.data(), tb ? k : n, 0.0f, c.data(), n,
                                         trident::Precision::kBf16);
        } else {
          cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                      m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
        }
        for (float x : c) {
          uint32_t bits;
          std::memcpy(&bits, &x, 4);
          hash = (hash ^ bits) * 1099511628211ull;
        }
      }
  std::printf("%016llx\n", static_cast<unsigned long long>(hash));
}
