// Fully connected layer y = x W^T + b with W stored [out, in] (PyTorch's nn.Linear layout).
#pragma once

#include <stdexcept>
#include <type_traits>

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

// Activations, weights and biases are stored as E (kernels/elements.hpp): fp32 GEMMs on fp32
// tensors, 16-bit GEMMs with fp32 accumulation (gemm16) on bf16 / fp16 ones. Weight and bias
// gradients are fp32 in both.
template <class E>
constexpr bool kFp32Elements = std::is_same_v<E, Fp32Elements>;

// out[N,OC] = inp[N,IC] * weight[OC,IC]^T + bias[OC]; bias may be empty (extent 0).
template <class E = Fp32Elements>
inline void linear_forward(const Exec& exec, const MatOf<E>& out, const ConstMatOf<E>& inp,
                           const ConstMatOf<E>& weight, const ConstVecOf<E>& bias,
                           Shape shape = kBuildShape) {
  Region region("trident::linear_forward");
  if constexpr (!kFp32Elements<E>) {
    (void)shape;
    gemm16(exec, 'N', 'T', 1.0f, inp, weight, E::format, 0.0f, out, bias);
  } else {
    float beta = 0.0f;
    if (bias.extent(0) > 0) {
      const int OC = static_cast<int>(out.extent(1));
      if (shape == Shape::kGpu)
        Kokkos::parallel_for(
            "linear_bias", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0) * OC),
            KOKKOS_LAMBDA(size_t i) { out(i / OC, i % OC) = bias(i % OC); });
      else
        Kokkos::parallel_for(
            "linear_bias", Kokkos::RangePolicy<Exec>(exec, 0, out.extent(0)), KOKKOS_LAMBDA(int n) {
              for (int o = 0; o < OC; ++o) out(n, o) = bias(o);
            });
      beta = 1.0f;
    }
    gemm(exec, 'N', 'T', 1.0f, inp, weight, beta, out);
  }
}

// out[N,OC] = inp[N,IC] * weight[OC,IC]^T + bias[OC] + residual[N,OC], summed in fp32 and rounded
// once: a 16-bit layer's output added to the residual stream in the GEMM's epilogue, where
// fused_residual_add() (CPUs).
template <class E>
inline void linear_forward_residual(const Exec& exec, const MatOf<E>& out, const ConstMatOf<E>& inp,
                                    const ConstMatOf<E>& weight, const ConstVecOf<E>& bias,
                                    const ConstMatOf<E>& residual) {
  static_assert(!kFp32Elements<E>, "fp32 layers add the residual in its own kernel");
  Region region("trident::linear_forward");
  gemm16(exec, 'N', 'T', 1.0f, inp, weight, E::format, 0.0f, out, bias, residual);
}

// fc[N,OC] = inp[N,IC] * weight[OC,IC]^T + bias[OC] and act = gelu(fc): an MLP's first
// projection and its activation (GPT-2). 16-bit tensors on GPUs take one GEMM (cuBLASLt's
// GELU_AUX_BIAS epilogue: the GELU of the fp32 sum, fc and act each rounded once); elsewhere,
// and where cuBLASLt has no algorithm for the shape, the GEMM writes fc and gelu_forward reads
// it back (the GELU of the rounded fc).
template <class E = Fp32Elements>
inline void linear_forward_gelu(const Exec& exec, const MatOf<E>& act, const MatOf<E>& fc,
                                const ConstMatOf<E>& inp, const ConstMatOf<E>& weight,
                                const ConstVecOf<E>& bias, Shape shape = kBuildShape) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (!kFp32Elements<E>) {
    const auto leading = [](auto view) { return static_cast<int>(view.stride(0)); };
    if (cublaslt_epilogues() &&
        gemm16_epilogue(exec, 'N', 'T', static_cast<int>(fc.extent(0)),
                        static_cast<int>(fc.extent(1)), static_cast<int>(inp.extent(1)), 1.0f,
                        inp.data(), leading(inp), weight.data(), leading(weight), E::format,
                        act.data(), leading(act), bias.extent(0) > 0 ? bias.data() : nullptr,
                        nullptr, GeluEpilogue::kForward, fc.data(), leading(fc)))
      return;
  }
#endif
  linear_forward<E>(exec, fc, inp, weight, bias, shape);
  gelu_forward<E>(exec, VecOf<E>(act.data(), act.size()), ConstVecOf<E>(fc.data(), fc.size()));
}

// dinp[N,IC] (+)= dout * weight: the input-gradient half of a linear layer's backward.
// `accumulate_dinp` chooses += (the input feeds several consumers) or = (it feeds only this one).
template <class E = Fp32Elements>
inline void linear_backward_input(const Exec& exec, const MatOf<E>& dinp, const ConstMatOf<E>& dout,
                                  const ConstMatOf<E>& weight, bool accumulate_dinp) {
  Region region("trident::linear_backward_input");
  if constexpr (kFp32Elements<E>)
    gemm(exec, 'N', 'N', 1.0f, dout, weight, accumulate_dinp ? 1.0f : 0.0f, dinp);
  else
    gemm16(exec, 'N', 'N', 1.0f, dout, weight, E::format, accumulate_dinp ? 1.0f : 0.0f, dinp);
}

// dfc[N,IC] = (dout[N,OC] * weight[OC,IC]) * gelu'(fc): the input gradient of an MLP's second
// projection through its activation. 16-bit on GPUs: one GEMM (cuBLASLt's DGELU epilogue on the
// fp32 sum); elsewhere the GEMM writes dact (which may be dfc) and gelu_backward reads it.
template <class E = Fp32Elements>
inline void linear_backward_input_gelu(const Exec& exec, const MatOf<E>& dfc, const MatOf<E>& dact,
                                       const ConstMatOf<E>& dout, const ConstMatOf<E>& weight,
                                       const ConstMatOf<E>& fc) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (!kFp32Elements<E>) {
    const auto leading = [](auto view) { return static_cast<int>(view.stride(0)); };
    if (cublaslt_epilogues() &&
        gemm16_epilogue(exec, 'N', 'N', static_cast<int>(dfc.extent(0)),
                        static_cast<int>(dfc.extent(1)), static_cast<int>(dout.extent(1)), 1.0f,
                        dout.data(), leading(dout), weight.data(), leading(weight), E::format,
                        dfc.data(), leading(dfc), nullptr, nullptr, GeluEpilogue::kBackward,
                        const_cast<typename E::Stored*>(fc.data()), leading(fc)))
      return;
  }
#endif
  linear_backward_input<E>(exec, dact, dout, weight, false);
  gelu_backward<E>(exec, VecOf<E>(dfc.data(), dfc.size()), ConstVecOf<E>(fc.data(), fc.size()),
                   ConstVecOf<E>(dact.data(), dact.size()));
}

// dweight[OC,IC] (+)= dout^T * inp (= without accumulate_dweight: the first write after the
// gradients were cleared); dbias[OC] += column sums (none when dbias is empty): the
// weight-gradient half, which a zero-bubble schedule runs later. partials: the GPU shape's
// second-pass floats for the bias (column_sums_teams).
template <class E = Fp32Elements>
inline void linear_backward_weight(const Exec& exec, const Mat& dweight, const Vec& dbias,
                                   const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                                   bool accumulate_dweight = true, Shape shape = kBuildShape,
                                   const Vec& partials = Vec()) {
  Region region("trident::linear_backward_weight");
  const float beta = accumulate_dweight ? 1.0f : 0.0f;
#if defined(KOKKOS_ENABLE_CUDA)
  // 16-bit on GPUs: the bias gradient in the weight GEMM's epilogue (cuBLASLt's BGRADB), written
  // to the partials' first OC floats and added to dbias (which accumulates) by a small kernel.
  if constexpr (!kFp32Elements<E>) {
    const int OC = static_cast<int>(dout.extent(1));
    const auto leading = [](auto view) { return static_cast<int>(view.stride(0)); };
    if (dweight.extent(0) > 0 && dbias.extent(0) > 0 && shape == Shape::kGpu &&
        partials.extent(0) >= static_cast<size_t>(OC) && cublaslt_epilogues() &&
        gemm16_weight_grad_epilogue(exec, 'T', 'N', OC, static_cast<int>(dweight.extent(1)),
                                    static_cast<int>(dout.extent(0)), dout.data(), leading(dout),
                                    inp.data(), leading(inp), E::format, beta, dweight.data(),
                                    leading(dweight), partials.data())) {
      Kokkos::parallel_for(
          "linear_bias_grad_add", Kokkos::RangePolicy<Exec>(exec, 0, OC),
          KOKKOS_LAMBDA(int o) { dbias(o) += partials(o); });
      return;
    }
  }
#endif
  if (dweight.extent(0) == 0) {  // streamed (linear_weight_grad_rows): the bias alone
  } else if constexpr (kFp32Elements<E>) {
    gemm(exec, 'T', 'N', 1.0f, dout, inp, beta, dweight);
  } else {
    gemm16(exec, 'T', 'N', 1.0f, dout, inp, E::format, beta, dweight);
  }
  if (dbias.extent(0) > 0 && shape == Shape::kGpu) {
    column_sums_teams<1>(
        exec, "linear_backward_bias", {dbias}, static_cast<int>(dout.extent(0)),
        static_cast<int>(dout.extent(1)),
        KOKKOS_LAMBDA(int n, int o, float* t) { t[0] = E::load(dout(n, o)); }, partials);
  } else if (dbias.extent(0) > 0) {
    // kHostColumnBlock columns per work item, rows summed in order: deterministic, and the inner
    // loop runs along a row, so it vectorises.
    const int N = static_cast<int>(dout.extent(0)), OC = static_cast<int>(dout.extent(1));
    constexpr int L = kmath::kHostColumnBlock;
    Kokkos::parallel_for(
        "linear_backward_bias", Kokkos::RangePolicy<Exec>(exec, 0, (OC + L - 1) / L),
        KOKKOS_LAMBDA(int block) {
          const int o0 = block * L, width = OC - o0 < L ? OC - o0 : L;
          float sum[L] = {};
          kmath::with_block_width<L>(width, [&](auto w) {
            for (int n = 0; n < N; ++n)
              for (int j = 0; j < w; ++j) sum[j] += E::load(dout(n, o0 + j));
          });
          for (int j = 0; j < width; ++j) dbias(o0 + j) += sum[j];
        });
  }
}

// Rows [first, first + rows) of dout^T * inp into block [rows, IC] (overwritten): a block of a
// weight gradient streamed out of the GEMM (ZeRO-2/3), from the same operands as the whole one.
template <class E = Fp32Elements>
inline void linear_weight_grad_rows(const Exec& exec, const View1& block, const ConstMatOf<E>& dout,
                                    const ConstMatOf<E>& inp, int first, int rows) {
  Region region("trident::linear_weight_grad_rows");
  const int N = static_cast<int>(dout.extent(0)), OC = static_cast<int>(dout.extent(1));
  const int IC = static_cast<int>(inp.extent(1));
  if (static_cast<size_t>(rows) * IC > block.extent(0) || first + rows > OC)
    throw std::logic_error("linear_weight_grad_rows: the rows do not fit the block or the matrix");
  if constexpr (kFp32Elements<E>)
    gemm_strided_batched(exec, 'T', 'N', rows, IC, N, 1.0f, dout.data() + first, OC, 0, inp.data(),
                         IC, 0, 0.0f, block.data(), IC, 0, 1);
  else
    gemm16_strided_batched(exec, 'T', 'N', rows, IC, N, 1.0f, dout.data() + first, OC, 0,
                           inp.data(), IC, 0, E::format, 0.0f, block.data(), IC, 0, 1);
}

// Both halves: dinp (+)= dout * weight, dweight += dout^T * inp, dbias += column sums.
template <class E = Fp32Elements>
inline void linear_backward(const Exec& exec, const MatOf<E>& dinp, const Mat& dweight,
                            const Vec& dbias, const ConstMatOf<E>& dout, const ConstMatOf<E>& inp,
                            const ConstMatOf<E>& weight, bool accumulate_dinp,
                            Shape shape = kBuildShape, const Vec& partials = Vec()) {
  linear_backward_input<E>(exec, dinp, dout, weight, accumulate_dinp);
  linear_backward_weight<E>(exec, dweight, dbias, dout, inp, true, shape, partials);
}

}  // namespace trident::kernels
