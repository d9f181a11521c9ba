// The storage and compute precisions a run names (fp32, bf16, fp16), with no kernel code: host-only
// translation units (the config) include this, not core/half.hpp.
#pragma once

#include "core/names.hpp"

namespace trident {

enum class Precision { kFp32, kBf16, kFp16 };

template <>
inline constexpr std::array<Named<Precision>, 3> kNames<Precision>{
    {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}}};

// How a GPU multiplies fp32 GEMM operands in an fp32 run: exactly (IEEE fp32), or rounded to TF32
// on tensor cores (PyTorch's torch.backends.cuda.matmul.allow_tf32). CPUs always use fp32.
enum class Fp32Matmul { kIeee, kTf32 };

template <>
inline constexpr std::array<Named<Fp32Matmul>, 2> kNames<Fp32Matmul>{
    {{Fp32Matmul::kIeee, "ieee"}, {Fp32Matmul::kTf32, "tf32"}}};

// Bytes per stored element.
inline int bytes_of(Precision p) {
  return p == Precision::kFp32 ? 4 : 2;
}

}  // namespace trident
