// GEMMs on CPUs through oneDNN (Debian's libdnnl): bf16 x bf16 -> fp32 matmul primitives for 16-bit
// compute (and fp32 ones, measured against OpenBLAS by bench/gemm16_vs_fp32.sh), made once per
// shape and kept, and what oneDNN dispatches to on this CPU.
#pragma once

#include <cstdint>
#include <string>

#include "core/precision.hpp"

namespace trident::kernels::onednn {

// Row-major C[m,n] (fp32) = alpha * op(A) * op(B) + beta * C, with A and B in `format` (fp32
// values, or bf16 / fp16 bit patterns), op = transpose when trans_* is 'T', and leading dimensions
// as BLAS takes them. 16-bit products are exact in fp32 and summed in fp32. The primitive for a
// shape is made on its first call (with its scratchpad) and reused: later calls allocate nothing.
// A 16-bit format oneDNN has no matmul for here (widened()) is widened to fp32 and multiplied by
// CBLAS.
void gemm(char trans_a, char trans_b, int m, int n, int k, float alpha, const void* A, int lda,
          const void* B, int ldb, float beta, float* C, int ldc, Precision format);

// The same with C in `format` too (bf16 / fp16 bit patterns), plus `bias` ([n] in `format`, or
// null; only with beta 0) added to every row and `residual` (null, or [m, n] in `format` with
// C's leading dimension) added element by element: the fp32 sum alpha op(A) op(B) + bias +
// beta C + residual is rounded once into C. oneDNN adds the bias and the residual in the matmul's
// epilogue (a binary post-op); where the format is widened, the fp32 product goes through a
// buffer kept per shape.
void gemm_to_half(char trans_a, char trans_b, int m, int n, int k, float alpha, const void* A,
                  int lda, const void* B, int ldb, float beta, uint16_t* C, int ldc,
                  const uint16_t* bias, const uint16_t* residual, Precision format);

// The instruction set oneDNN's kernels use on this CPU ("avx512_core_bf16", "avx512_core_amx",
// ...): what decides whether bf16 GEMMs beat fp32 ones.
std::string cpu_isa();
// Whether bf16 matmuls run on native bf16 instructions here (AVX512-BF16 or AMX); without them
// oneDNN emulates bf16 and a bf16 GEMM is slower than an fp32 one.
bool native_bf16();
// Whether GEMMs on `format` widen their operands to fp32 here: oneDNN 2.6 has no fp16 matmul
// without AVX512-FP16 and no bf16 one without AVX-512 (false for fp32).
bool widened(Precision format);
// What a run computing in `format` multiplies with on this CPU, for the start-up banner:
// "oneDNN 2.6.3 matmul, bf16 x bf16 -> fp32 sums, on avx512_core_bf16".
std::string describe(Precision format);
// Why 16-bit GEMMs in `format` will be slower than fp32 ones on this CPU ("": they will not).
std::string slower_than_fp32(Precision format);

}  // namespace trident::kernels::onednn
