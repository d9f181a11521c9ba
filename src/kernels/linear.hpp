// Fully connected layer y = x W^T + b with W stored [out, in] (PyTorch's nn.Linear layout).
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

// out[N,OC] = inp[N,IC] * weight[OC,IC]^T + bias[OC]; bias may be empty (extent 0).
inline void linear_forward(const Exec& exec, const Mat& out, const ConstMat& inp,
                           const ConstMat& weight, const ConstVec& bias,
                           Shape shape = kBuildShape) {
  Region region("trident::linear_forward");
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

// dinp[N,IC] (+)= dout * weight: the input-gradient half of a linear layer's backward.
// `accumulate_dinp` chooses += (the input feeds several consumers) or = (it feeds only this one).
inline void linear_backward_input(const Exec& exec, const Mat& dinp, const ConstMat& dout,
                                  const ConstMat& weight, bool accumulate_dinp) {
  Region region("trident::linear_backward_input");
  gemm(exec, 'N', 'N', 1.0f, dout, weight, accumulate_dinp ? 1.0f : 0.0f, dinp);
}

// dweight[OC,IC] (+)= dout^T * inp (= without accumulate_dweight: the first write after the
// gradients were cleared); dbias[OC] += column sums (none when dbias is empty): the
// weight-gradient half, which a zero-bubble schedule runs later.
inline void linear_backward_weight(const Exec& exec, const Mat& dweight, const Vec& dbias,
                                   const ConstMat& dout, const ConstMat& inp,
                                   bool accumulate_dweight = true, Shape shape = kBuildShape) {
  Region region("trident::linear_backward_weight");
  gemm(exec, 'T', 'N', 1.0f, dout, inp, accumulate_dweight ? 1.0f : 0.0f, dweight);
  if (dbias.extent(0) > 0 && shape == Shape::kGpu) {
    column_sums_teams<1>(
        exec, "linear_backward_bias", {dbias}, static_cast<int>(dout.extent(0)),
        static_cast<int>(dout.extent(1)),
        KOKKOS_LAMBDA(int n, int o, float* t) { t[0] = dout(n, o); });
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
              for (int j = 0; j < w; ++j) sum[j] += dout(n, o0 + j);
          });
          for (int j = 0; j < width; ++j) dbias(o0 + j) += sum[j];
        });
  }
}

// Both halves: dinp (+)= dout * weight, dweight += dout^T * inp, dbias += column sums.
inline void linear_backward(const Exec& exec, const Mat& dinp, const Mat& dweight, const Vec& dbias,
                            const ConstMat& dout, const ConstMat& inp, const ConstMat& weight,
                            bool accumulate_dinp, Shape shape = kBuildShape) {
  linear_backward_input(exec, dinp, dout, weight, accumulate_dinp);
  linear_backward_weight(exec, dweight, dbias, dout, inp, true, shape);
}

}  // namespace trident::kernels
