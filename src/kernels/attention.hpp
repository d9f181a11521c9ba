// Causal multi-head self-attention on a packed qkv tensor, forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/region.hpp"

namespace trident::kernels {

struct AttentionShape {
  int B, T, NH, HS;  // C = NH * HS
};

// qkv[B*T, 3C] holds q | k | v, each head h at columns h*HS..h*HS+HS of its third.
// out[B*T, C]: per head softmax(q k^T / sqrt(HS), causal) v.  att[B*NH*T, T]: the
// probabilities (zero above the diagonal), kept for backward.
inline void attention_forward(const Exec& exec, const Mat& out, const Mat& att, const ConstMat& qkv,
                              AttentionShape s) {
  Region region("trident::attention_forward");
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  Kokkos::parallel_for(
      "attention_forward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH * T),
      KOKKOS_LAMBDA(int idx) {
        const int t = idx % T;
        const int h = (idx / T) % NH;
        const int b = idx / (T * NH);
        const int qrow = b * T + t;
        float maxv = -3.0e38f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const int krow = b * T + t2;
          const float dot =
              kmath::lane_sum(
                  HS, [&](int i) { return qkv(qrow, h * HS + i) * qkv(krow, C + h * HS + i); }) *
              scale;
          att(idx, t2) = dot;
          if (dot > maxv) maxv = dot;
        }
        const float sum = kmath::lane_sum(t + 1, [&](int t2) {
          const float e = kmath::exp_vec(att(idx, t2) - maxv);
          att(idx, t2) = e;
          return e;
        });
        const float inv = 1.0f / sum;
        for (int t2 = 0; t2 < T; ++t2) att(idx, t2) = t2 <= t ? att(idx, t2) * inv : 0.0f;
        // Row-wise over the values: contiguous in i, so it vectorises.
        for (int i = 0; i < HS; ++i) out(qrow, h * HS + i) = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float a = att(idx, t2);
          for (int i = 0; i < HS; ++i)
            out(qrow, h * HS + i) += a * qkv(b * T + t2, 2 * C + h * HS + i);
        }
      });
}

// dqkv[B*T, 3C] = gradient w.r.t. qkv (overwritten). One work item per (batch, head) so the
// scattered k/v gradients are summed in a fixed order. datt_scratch: [B*NH, T].
inline void attention_backward(const Exec& exec, const Mat& dqkv, const Mat& datt_scratch,
                               const ConstMat& dout, const ConstMat& qkv, const ConstMat& att,
                               AttentionShape s) {
  Region region("trident::attention_backward");
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  Kokkos::parallel_for(
      "attention_backward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), KOKKOS_LAMBDA(int bh) {
        const int h = bh % NH;
        const int b = bh / NH;
        for (int t = 0; t < T; ++t) {
          const int row = b * T + t;
          for (int i = 0; i < HS; ++i) {
            dqkv(row, h * HS + i) = 0.f;
            dqkv(row, C + h * HS + i) = 0.f;
            dqkv(row, 2 * C + h * HS + i) = 0.f;
          }
        }
        for (int t = 0; t < T; ++t) {
          const int idx = bh * T + t;
          const int qrow = b * T + t;
          // datt[t2] = dout[t] . v[t2];  dv[t2] += att[t,t2] * dout[t]
          float dot_sum = 0.f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const int vrow = b * T + t2;
            const float d = kmath::lane_sum(
                HS, [&](int i) { return dout(qrow, h * HS + i) * qkv(vrow, 2 * C + h * HS + i); });
            const float a = att(idx, t2);
            for (int i = 0; i < HS; ++i)
              dqkv(vrow, 2 * C + h * HS + i) += a * dout(qrow, h * HS + i);
            datt_scratch(bh, t2) = d;
            dot_sum += att(idx, t2) * d;
          }
          // Softmax backward, then the scaled dot product's.
          for (int t2 = 0; t2 <= t; ++t2) {
            const float dpre = att(idx, t2) * (datt_scratch(bh, t2) - dot_sum) * scale;
            const int krow = b * T + t2;
            for (int i = 0; i < HS; ++i) {
              dqkv(qrow, h * HS + i) += dpre * qkv(krow, C + h * HS + i);
              dqkv(krow, C + h * HS + i) += dpre * qkv(qrow, h * HS + i);
            }
          }
        }
      });
}

}  // namespace trident::kernels
