// oneDNN matmul primitives for 16-bit GEMMs on CPUs, one per shape, made on first use and kept.
#include "kernels/onednn.hpp"

#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"

namespace trident::kernels::onednn {

namespace {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

// Everything that selects a primitive. alpha and beta are baked into it (output scale, sum
// post-op), as the few values trident uses (1 and 0 or 1) make few primitives. The last three: the
// format of C (fp32 or the operands'), whether a bias is added, and whether a residual (a matrix
// laid out like C, in C's format) is added in the epilogue.
using ShapeKey = std::tuple<char, char, int, int, int, int, int, int, float, float, Precision,
                            Precision, bool, bool>;

// The logical [rows, cols] operand stored row-major with leading dimension `ld`, transposed when
// `trans` is 'T' (then the stored matrix is [cols, ld]).
memory::desc operand(int rows, int cols, int ld, char trans, memory::data_type type) {
  const memory::dims strides = trans == 'T' ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

// A matmul primitive with its operands' memory objects (pointed at each call's data) and its own
// scratchpad, so an execution allocates nothing.
struct Matmul {
  dnnl::matmul primitive;
  memory a, b, c, bias, residual, scratchpad;
};

memory::data_type data_type(Precision format) {
  switch (format) {
    case Precision::kBf16:
      return memory::data_type::bf16;
    case Precision::kFp16:
      return memory::data_type::f16;
    case Precision::kFp32:
      break;
  }
  return memory::data_type::f32;
}

std::unique_ptr<Matmul> make_matmul(const ShapeKey& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, format, c_format, with_bias,
              with_residual] = key;
  const memory::data_type type = data_type(format);
  const memory::desc a = operand(m, k, lda, ta, type), b = operand(k, n, ldb, tb, type);
  const memory::desc c({m, n}, data_type(c_format), memory::dims{ldc, 1});
  const memory::desc bias =
      with_bias ? memory::desc({1, n}, type, memory::dims{n, 1}) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  dnnl::post_ops post;
  if (beta != 0.0f) post.append_sum(beta);
  if (with_residual) post.append_binary(dnnl::algorithm::binary_add, c);  // in fp32, then rounded
  attr.set_post_ops(post);
  const dnnl::matmul::desc desc =
      with_bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
  const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  auto mm = std::make_unique<Matmul>();
  mm->primitive = dnnl::matmul(pd);
  mm->a = memory(a, cpu_engine(), DNNL_MEMORY_NONE);
  mm->b = memory(b, cpu_engine(), DNNL_MEMORY_NONE);
  mm->c = memory(c, cpu_engine(), DNNL_MEMORY_NONE);
  if (with_bias) mm->bias = memory(bias, cpu_engine(), DNNL_MEMORY_NONE);
  if (with_residual) mm->residual = memory(c, cpu_engine(), DNNL_MEMORY_NONE);
  mm->scratchpad = memory(pd.scratchpad_desc(), cpu_engine());
  return mm;
}

// 16-bit formats oneDNN has no matmul for here: both operands widened into fp32 copies kept per
// shape.
struct Widened {
  std::vector<float> a, b, c;
};

void widen(const uint16_t* src, std::vector<float>& dst, Precision format) {
  float* out = dst.data();
  Kokkos::parallel_for(
      "trident::widen_half",
      Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, static_cast<int64_t>(dst.size())),
      [=](int64_t i) { out[i] = from_half(src[i], format); });
  Kokkos::DefaultHostExecutionSpace().fence();
}

// Whether oneDNN makes matmuls on `format` operands here, with fp32 and with 16-bit results
// (bias and residual epilogue included): 2.6 has no fp16 matmul on CPUs without AVX512-FP16,
// and no bf16 one without AVX-512 (an AVX2-only CPU).
bool half_matmul_available(Precision format) {
  const auto probe = [](Precision f) {
    try {
      make_matmul(
          {'N', 'N', 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, f, Precision::kFp32, false, false});
      make_matmul({'N', 'N', 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, f, f, true, true});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool fp16 = probe(Precision::kFp16), bf16 = probe(Precision::kBf16);
  return format == Precision::kFp16 ? fp16 : format == Precision::kBf16 ? bf16 : true;
}

// The matmul for `key` (made on first use), run on A, B, C, the bias and the residual.
void run_matmul(const ShapeKey& key, const void* A, const void* B, void* C, const void* bias,
                const void* residual) {
  static std::map<ShapeKey, std::unique_ptr<Matmul>> matmuls;
  std::unique_ptr<Matmul>& mm = matmuls[key];
  if (!mm) mm = make_matmul(key);
  mm->a.set_data_handle(const_cast<void*>(A));
  mm->b.set_data_handle(const_cast<void*>(B));
  mm->c.set_data_handle(C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mm->a},
                                       {DNNL_ARG_WEIGHTS, mm->b},
                                       {DNNL_ARG_DST, mm->c},
                                       {DNNL_ARG_SCRATCHPAD, mm->scratchpad}};
  if (bias) {
    mm->bias.set_data_handle(const_cast<void*>(bias));
    args.emplace(DNNL_ARG_BIAS, mm->bias);
  }
  if (residual) {
    mm->residual.set_data_handle(const_cast<void*>(residual));
    // The binary post-op is the last one: after the sum, when there is one.
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(std::get<9>(key) != 0.0f ? 1 : 0) | DNNL_ARG_SRC_1,
                 mm->residual);
  }
  mm->primitive.execute(cpu_stream(), args);
  cpu_stream().wait();
}

// oneDNN 2.6's matmul blocks a C of many rows badly: the weight gradient of GPT-2's token
// embedding (50257 x 768) runs much faster as a few row chunks (bench/RESULTS.md). So a taller C
// is computed in equal chunks of at most kMaxRows rows (a multiple of 64), each its own
// primitive; an element's sum over K does not depend on which chunk holds its row.
constexpr int kMaxRows = 16384;

// Runs the matmul for `key` on row chunks of C: A's rows (columns when transposed), C's and the
// residual's rows offset alike, B whole.
void run_row_chunks(const ShapeKey& key, const void* A, const void* B, void* C, const void* bias,
                    const void* residual) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, format, c_format, with_bias,
              with_residual] = key;
  if (m <= kMaxRows) {
    run_matmul(key, A, B, C, bias, residual);
    return;
  }
  const int chunks = (m + kMaxRows - 1) / kMaxRows;
  const int rows = ((m + chunks - 1) / chunks + 63) / 64 * 64;
  const size_t a_bytes = format == Precision::kFp32 ? 4 : 2;
  const size_t c_bytes = c_format == Precision::kFp32 ? 4 : 2;
  for (int r0 = 0; r0 < m; r0 += rows) {
    const int part = std::min(rows, m - r0);
    ShapeKey chunk = key;
    std::get<2>(chunk) = part;
    const size_t a_offset = ta == 'T' ? static_cast<size_t>(r0) : static_cast<size_t>(r0) * lda;
    const size_t c_offset = static_cast<size_t>(r0) * ldc * c_bytes;
    run_matmul(chunk, static_cast<const char*>(A) + a_offset * a_bytes, B,
               static_cast<char*>(C) + c_offset, bias,
               residual ? static_cast<const char*>(residual) + c_offset : nullptr);
  }
}

// A 16-bit format without oneDNN's matmul: A and B widened into fp32 copies kept per shape, and
// C (fp32, ldc) = alpha op(A) op(B) + beta C by CBLAS.
void widened_gemm(const ShapeKey& key, const void* A, const void* B, float beta, float* C, int ldc,
                  Widened& w) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc_key, alpha, beta_key, format, c_format, with_bias,
              with_residual] = key;
  (void)ldc_key, (void)beta_key, (void)c_format, (void)with_bias, (void)with_residual;
  w.a.resize(static_cast<size_t>(ta == 'T' ? k : m) * lda);
  w.b.resize(static_cast<size_t>(tb == 'T' ? n : k) * ldb);
  widen(static_cast<const uint16_t*>(A), w.a, format);
  widen(static_cast<const uint16_t*>(B), w.b, format);
  cblas_sgemm(CblasRowMajor, ta == 'T' ? CblasTrans : CblasNoTrans,
              tb == 'T' ? CblasTrans : CblasNoTrans, m, n, k, alpha, w.a.data(), lda, w.b.data(),
              ldb, beta, C, ldc);
}

}  // namespace

void gemm(char trans_a, char trans_b, int m, int n, int k, float alpha, const void* A, int lda,
          const void* B, int ldb, float beta, float* C, int ldc, Precision format) {
  const ShapeKey key{trans_a, trans_b,          m,     n,    k, lda, ldb, ldc, alpha, beta,
                     format,  Precision::kFp32, false, false};
  if (widened(format)) {
    static std::map<ShapeKey, Widened> copies;
    widened_gemm(key, A, B, beta, C, ldc, copies[key]);
    return;
  }
  run_row_chunks(key, A, B, C, nullptr, nullptr);
}

void gemm_to_half(char trans_a, char trans_b, int m, int n, int k, float alpha, const void* A,
                  int lda, const void* B, int ldb, float beta, uint16_t* C, int ldc,
                  const uint16_t* bias, const uint16_t* residual, Precision format) {
  const ShapeKey key{trans_a,
                     trans_b,
                     m,
                     n,
                     k,
                     lda,
                     ldb,
                     ldc,
                     alpha,
                     beta,
                     format,
                     format,
                     bias != nullptr,
                     residual != nullptr};
  if (widened(format)) {
    static std::map<ShapeKey, Widened> copies;
    Widened& w = copies[key];
    w.c.resize(static_cast<size_t>(m) * n);
    // The fp32 product, then + bias + beta C + residual, rounded once.
    widened_gemm(key, A, B, 0.0f, w.c.data(), n, w);
    const float* product = w.c.data();
    Kokkos::parallel_for(
        "trident::widened_gemm_epilogue",
        Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, static_cast<int64_t>(m) * n),
        [=](int64_t e) {
          const int64_t i = e / n, j = e % n;
          uint16_t& c = C[i * ldc + j];
          float sum = product[e] + (bias ? from_half(bias[j], format) : 0.0f);
          if (beta != 0.0f) sum += beta * from_half(c, format);
          if (residual) sum += from_half(residual[i * ldc + j], format);
          c = to_half(sum, format);
        });
    Kokkos::DefaultHostExecutionSpace().fence();
    return;
  }
  run_row_chunks(key, A, B, C, bias, residual);
}

std::string cpu_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "other";
  }
}

bool native_bf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool widened(Precision format) {
  return format != Precision::kFp32 && !half_matmul_available(format);
}

std::string describe(Precision format) {
  const dnnl_version_t* v = dnnl_version();
  const std::string library = "oneDNN " + std::to_string(v->major) + "." +
                              std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (widened(format))
    return library + " has no " + name_of(format) + " matmul on this CPU (" + cpu_isa() +
           "): " + name_of(format) + " operands widened to fp32, CBLAS sgemm";
  return library + " matmul, " + name_of(format) + " x " + name_of(format) + " -> fp32 sums, on " +
         cpu_isa();
}

std::string slower_than_fp32(Precision format) {
  if (widened(format))
    return std::string(name_of(format)) + " GEMMs widen their operands to fp32 on this CPU: a " +
           name_of(format) + " run is slower than fp32 here";
  if (format == Precision::kBf16 && !native_bf16())
    return "this CPU has neither AVX512-BF16 nor AMX (oneDNN runs " + cpu_isa() +
           "): bf16 matmuls are emulated and a bf16 run is slower than fp32 here";
  return "";
}

}  // namespace trident::kernels::onednn
