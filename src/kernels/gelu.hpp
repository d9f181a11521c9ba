// GELU, tanh approximation (GPT-2's), forward and backward.
#pragma once

// tanh is evaluated through exp (0.5 (1 + tanh u) = sigmoid(2u)) with kmath::exp_vec: several
// times cheaper than tanhf, and it vectorises.

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/streaming.hpp"

namespace trident::kernels {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

// out = gelu(inp), in any storage format E (kernels/elements.hpp).
template <class E = Fp32Elements>
inline void gelu_forward(const Exec& exec, const VecOf<E>& out, const ConstVecOf<E>& inp) {
  Region region("trident::gelu_forward");
  for_each_streamed(
      "gelu_forward", exec, inp.extent(0),
      KOKKOS_LAMBDA(size_t i) {
        const float x = E::load(inp(i));
        const float u = kGeluScale * (x + 0.044715f * x * x * x);
        out(i) =
            E::store(x / (1.0f + kmath::exp_vec(-2.0f * u)));  // 0.5 (1 + tanh u) = sigmoid(2u)
      },
      inp.data());
}

// dinp = dout * gelu'(inp). May alias dinp with dout.
template <class E = Fp32Elements>
inline void gelu_backward(const Exec& exec, const VecOf<E>& dinp, const ConstVecOf<E>& inp,
                          const ConstVecOf<E>& dout) {
  Region region("trident::gelu_backward");
  for_each_streamed(
      "gelu_backward", exec, inp.extent(0),
      KOKKOS_LAMBDA(size_t i) {
        const float x = E::load(inp(i));
        const float u = kGeluScale * (x + 0.044715f * x * x * x);
        const float s = 1.0f / (1.0f + kmath::exp_vec(-2.0f * u));  // 0.5 (1 + tanh u)
        const float sech2 = 4.0f * s * (1.0f - s);                  // 1 - tanh^2 u
        const float grad = s + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp(i) = E::store(E::load(dout(i)) * grad);
      },
      inp.data(), dout.data());
}

}  // namespace trident::kernels
