// Causal multi-head self-attention on a packed qkv tensor, forward and backward.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/attention_blocking.hpp"
#include "kernels/gemm.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"
#include "kernels/streaming.hpp"

namespace trident::kernels {

struct AttentionShape {
  int B, T, NH, HS;  // C = NH * HS
};

// Batched (the GPU's attention; host builds compile it too, and a test holds it to the blocked
// one): per sequence, the products of all its heads are one strided-batched GEMM (a head's q, k
// and v are HS columns apart in qkv, its scores T rows apart in att), and a kernel per row does
// the causal softmax. The full T x T scores are computed; the causal mask is the softmax's.

// The causal softmax of each row of att[B*NH*T, T] in place, a team per row: row r is query
// t = r % T.
inline void causal_softmax_rows(const Exec& exec, const Mat& att, int T, float scale) {
  Kokkos::parallel_for(
      "attention_softmax", row_teams(exec, static_cast<int>(att.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int r = team.league_rank(), keys = r % T + 1;
        const float m = team_max(
            team, keys, [&](int j) { return att(r, j) * scale; }, -3.0e38f);
        const float sum =
            team_sum(team, keys, [&](int j) { return kmath::exp_vec(att(r, j) * scale - m); });
        const float inv = 1.0f / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](int j) {
          att(r, j) = j < keys ? kmath::exp_vec(att(r, j) * scale - m) * inv : 0.0f;
        });
      });
}

inline void attention_forward_batched(const Exec& exec, const Mat& out, const Mat& att,
                                      const ConstMat& qkv, AttentionShape s) {
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_att = static_cast<int>(att.stride(0));
  const int ld_out = static_cast<int>(out.stride(0));
  const long long head_scores = static_cast<long long>(T) * ld_att;
  for (int b = 0; b < s.B; ++b) {  // scores = q k^T, scaled in the softmax
    const float* q = qkv.data() + static_cast<size_t>(b) * T * ld_qkv;
    float* p = att.data() + static_cast<size_t>(b) * NH * head_scores;
    gemm_strided_batched(exec, 'N', 'T', T, T, HS, 1.0f, q, ld_qkv, HS, q + C, ld_qkv, HS, 0.0f, p,
                         ld_att, head_scores, NH);
  }
  causal_softmax_rows(exec, att, T, 1.0f / kmath::sqrt(static_cast<float>(HS)));
  for (int b = 0; b < s.B; ++b) {  // out = p v
    const float* v = qkv.data() + static_cast<size_t>(b) * T * ld_qkv + 2 * C;
    const float* p = att.data() + static_cast<size_t>(b) * NH * head_scores;
    gemm_strided_batched(exec, 'N', 'N', T, HS, T, 1.0f, p, ld_att, head_scores, v, ld_qkv, HS,
                         0.0f, out.data() + static_cast<size_t>(b) * T * ld_out, ld_out, HS, NH);
  }
}

// dqkv[B*T, 3C] = gradient w.r.t. qkv (overwritten). datt_scratch: [B*NH*T, T], the score
// gradients.
inline void attention_backward_batched(const Exec& exec, const Mat& dqkv, const Mat& datt_scratch,
                                       const ConstMat& dout, const ConstMat& qkv,
                                       const ConstMat& att, AttentionShape s) {
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_att = static_cast<int>(att.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const int ld_ds = static_cast<int>(datt_scratch.stride(0));
  const long long head_scores = static_cast<long long>(T) * ld_att;
  const long long head_ds = static_cast<long long>(T) * ld_ds;
  for (int b = 0; b < s.B; ++b) {  // d(probabilities) = dout v^T
    const float* v = qkv.data() + static_cast<size_t>(b) * T * ld_qkv + 2 * C;
    gemm_strided_batched(exec, 'N', 'T', T, T, HS, 1.0f,
                         dout.data() + static_cast<size_t>(b) * T * ld_dout, ld_dout, HS, v, ld_qkv,
                         HS, 0.0f, datt_scratch.data() + static_cast<size_t>(b) * NH * head_ds,
                         ld_ds, head_ds, NH);
  }
  // Through the softmax and the 1/sqrt(HS) scale: ds = p (dp - sum_j p dp) / sqrt(HS).
  const Mat ds = datt_scratch;
  Kokkos::parallel_for(
      "attention_softmax_backward", row_teams(exec, static_cast<int>(att.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int r = team.league_rank(), keys = r % T + 1;
        const float dot = team_sum(team, keys, [&](int j) { return att(r, j) * ds(r, j); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](int j) {
          ds(r, j) = j < keys ? att(r, j) * (ds(r, j) - dot) * scale : 0.0f;
        });
      });
  for (int b = 0; b < s.B; ++b) {
    const float* q = qkv.data() + static_cast<size_t>(b) * T * ld_qkv;
    const float* p = att.data() + static_cast<size_t>(b) * NH * head_scores;
    const float* g = dout.data() + static_cast<size_t>(b) * T * ld_dout;
    const float* d = datt_scratch.data() + static_cast<size_t>(b) * NH * head_ds;
    float* dq = dqkv.data() + static_cast<size_t>(b) * T * ld_dqkv;
    gemm_strided_batched(exec, 'N', 'N', T, HS, T, 1.0f, d, ld_ds, head_ds, q + C, ld_qkv, HS, 0.0f,
                         dq, ld_dqkv, HS, NH);  // dq = ds k
    gemm_strided_batched(exec, 'T', 'N', T, HS, T, 1.0f, d, ld_ds, head_ds, q, ld_qkv, HS, 0.0f,
                         dq + C, ld_dqkv, HS, NH);  // dk = ds^T q
    gemm_strided_batched(exec, 'T', 'N', T, HS, T, 1.0f, p, ld_att, head_scores, g, ld_dout, HS,
                         0.0f, dq + 2 * C, ld_dqkv, HS, NH);  // dv = p^T dout
  }
}

#if !defined(KOKKOS_ENABLE_CUDA)
// Blocked (host builds): one work item per (batch, head), whose products are GEMMs on blocks of
// kAttentionRowBlock query rows (gemm_block): as fast as the BLAS where one dot product per (query,
// key) pair ran at a few GFLOP/s, and each (batch, head) is summed in a fixed order by one thread.

// qkv[B*T, 3C] holds q | k | v, each head h at columns h*HS..h*HS+HS of its third.
// out[B*T, C]: per head softmax(q k^T / sqrt(HS), causal) v.  att[B*NH*T, T]: the
// probabilities (zero above the diagonal), kept for backward.
inline void attention_forward_blocked(const Exec& exec, const Mat& out, const Mat& att,
                                      const ConstMat& qkv, AttentionShape s) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const int R = attention_block_rows(T);
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_att = static_cast<int>(att.stride(0));
  const int ld_out = static_cast<int>(out.stride(0));
  Kokkos::parallel_for(
      "attention_forward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), [=](int bh) {
        const int h = bh % NH, b = bh / NH;
        const float* q = &qkv(b * T, h * HS);
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* p = &att(bh * T, 0);
        float* o = &out(b * T, h * HS);
        for (int r0 = 0; r0 < T; r0 += R) {
          const int rows = T - r0 < R ? T - r0 : R, keys = r0 + rows;
          float* p_block = p + static_cast<size_t>(r0) * ld_att;
          gemm_block('N', 'T', rows, keys, HS, scale, q + static_cast<size_t>(r0) * ld_qkv, ld_qkv,
                     k, ld_qkv, 0.0f, p_block, ld_att);
          for (int i = 0; i < rows; ++i) {
            const int t = r0 + i;
            float* row = p_block + static_cast<size_t>(i) * ld_att;
            const float m = kmath::lane_max(
                t + 1, [&](int j) { return row[j]; }, -3.0e38f);
            const float sum = kmath::lane_sum(t + 1, [&](int j) {
              const float e = kmath::exp_vec(row[j] - m);
              row[j] = e;
              return e;
            });
            const float inv = 1.0f / sum;
            for (int j = 0; j <= t; ++j) row[j] *= inv;
            for (int j = t + 1; j < T; ++j) row[j] = 0.0f;
          }
          gemm_block('N', 'N', rows, HS, keys, 1.0f, p_block, ld_att, v, ld_qkv, 0.0f,
                     o + static_cast<size_t>(r0) * ld_out, ld_out);
        }
      });
}

// dqkv[B*T, 3C] = gradient w.r.t. qkv (overwritten). datt_scratch: [B*NH*attention_block_rows(T),
// T], one block of score gradients per (batch, head).
inline void attention_backward_blocked(const Exec& exec, const Mat& dqkv, const Mat& datt_scratch,
                                       const ConstMat& dout, const ConstMat& qkv,
                                       const ConstMat& att, AttentionShape s) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS;
  const int R = attention_block_rows(T);
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_att = static_cast<int>(att.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const int ld_scratch = static_cast<int>(datt_scratch.stride(0));
  Kokkos::parallel_for(
      "attention_backward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), [=](int bh) {
        const int h = bh % NH, b = bh / NH;
        const float* q = &qkv(b * T, h * HS);
        const float* k = q + C;
        const float* v = q + 2 * C;
        const float* p = &att(bh * T, 0);
        const float* g = &dout(b * T, h * HS);
        float* dq = &dqkv(b * T, h * HS);
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        float* ds = &datt_scratch(bh * R, 0);
        if (bh + 1 < s.B * NH) {  // the next item's inputs, cold by now (kernels/streaming.hpp)
          const int h_next = (bh + 1) % NH, b_next = (bh + 1) / NH;
          const float* q_next = &qkv(b_next * T, h_next * HS);
          const float* g_next = &dout(b_next * T, h_next * HS);
          for (int t = 0; t < T; ++t) {
            const float* qkv_row = q_next + static_cast<size_t>(t) * ld_qkv;
            for (int part = 0; part < 3; ++part) prefetch_span(0, HS, qkv_row + part * C);
            prefetch_span(0, HS, g_next + static_cast<size_t>(t) * ld_dout);
            prefetch_span(0, t + 1, &att((bh + 1) * T + t, 0));
          }
        }
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < HS; ++i) {
            dk[static_cast<size_t>(t) * ld_dqkv + i] = 0.0f;
            dv[static_cast<size_t>(t) * ld_dqkv + i] = 0.0f;
          }
        for (int r0 = 0; r0 < T; r0 += R) {
          const int rows = T - r0 < R ? T - r0 : R, keys = r0 + rows;
          const float* p_block = p + static_cast<size_t>(r0) * ld_att;
          const float* g_block = g + static_cast<size_t>(r0) * ld_dout;
          // d(probabilities) = dout v^T, then through the softmax and the 1/sqrt(HS) scale.
          gemm_block('N', 'T', rows, keys, HS, 1.0f, g_block, ld_dout, v, ld_qkv, 0.0f, ds,
                     ld_scratch);
          for (int i = 0; i < rows; ++i) {
            const int t = r0 + i;
            const float* prow = p_block + static_cast<size_t>(i) * ld_att;
            float* drow = ds + static_cast<size_t>(i) * ld_scratch;
            const float dot = kmath::lane_sum(t + 1, [&](int j) { return prow[j] * drow[j]; });
            for (int j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
            for (int j = t + 1; j < keys; ++j) drow[j] = 0.0f;
          }
          gemm_block('N', 'N', rows, HS, keys, 1.0f, ds, ld_scratch, k, ld_qkv, 0.0f,
                     dq + static_cast<size_t>(r0) * ld_dqkv, ld_dqkv);
          gemm_block('T', 'N', keys, HS, rows, 1.0f, ds, ld_scratch,
                     q + static_cast<size_t>(r0) * ld_qkv, ld_qkv, 1.0f, dk, ld_dqkv);
          gemm_block('T', 'N', keys, HS, rows, 1.0f, p_block, ld_att, g_block, ld_dout, 1.0f, dv,
                     ld_dqkv);
        }
      });
}

#endif

// The attention of this build: batched on GPUs, blocked on host spaces. datt_scratch has
// B*NH*attention_block_rows(T) rows.
inline void attention_forward(const Exec& exec, const Mat& out, const Mat& att, const ConstMat& qkv,
                              AttentionShape s) {
  Region region("trident::attention_forward");
#if defined(KOKKOS_ENABLE_CUDA)
  attention_forward_batched(exec, out, att, qkv, s);
#else
  attention_forward_blocked(exec, out, att, qkv, s);
#endif
}

inline void attention_backward(const Exec& exec, const Mat& dqkv, const Mat& datt_scratch,
                               const ConstMat& dout, const ConstMat& qkv, const ConstMat& att,
                               AttentionShape s) {
  Region region("trident::attention_backward");
#if defined(KOKKOS_ENABLE_CUDA)
  attention_backward_batched(exec, dqkv, datt_scratch, dout, qkv, att, s);
#else
  attention_backward_blocked(exec, dqkv, datt_scratch, dout, qkv, att, s);
#endif
}

}  // namespace trident::kernels
