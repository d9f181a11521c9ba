// Causal multi-head self-attention on a packed qkv tensor, tiled with an online softmax: forward
// and backward, in the host's per-(sequence, head) shape and the GPU's batched shape.
#pragma once

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/attention_tiles.hpp"
#include "kernels/gemm.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"
#include "kernels/streaming.hpp"

namespace trident::kernels {

struct AttentionShape {
  int B, T, NH, HS;  // C = NH * HS
};

// The layout both shapes share. qkv[B*T, 3C] holds q | k | v, head h at columns h*HS..h*HS+HS of
// each third; out[B*T, C] is per head softmax(q k^T / sqrt(HS), causal) v; lse[B*NH*T], at
// (b*NH + h)*T + t, is each query row's log sum_j exp(q.k_j / sqrt(HS)): all that backward needs
// besides q, k, v and out (the probabilities of a tile are exp(score - lse)). The scratch is
// attention_tiled_scratch (host shape) or attention_batched_scratch (GPU shape) floats.

// Below every score: the running maximum of a row before its first key.
constexpr float kNoScore = -3.0e38f;

// The keys of tile [c0, c0 + cols) that query t may attend to (causal), 0 to cols.
KOKKOS_INLINE_FUNCTION int causal_keys(int t, int c0, int cols) {
  const int n = t - c0 + 1;
  return n < 0 ? 0 : (n > cols ? cols : n);
}

#if !defined(KOKKOS_ENABLE_CUDA)
// Per (sequence, head) (host builds): one work item each, its tiles multiplied by the BLAS on the
// calling thread (gemm_block), so each item is summed in one fixed order whatever the number of
// threads.

inline void attention_forward_tiled(const Exec& exec, const Mat& out, const Vec& lse,
                                    const Vec& scratch, const ConstMat& qkv, AttentionShape s,
                                    AttentionTiles tiles) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS, R = tiles.rows, K = tiles.keys;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const size_t per_item = attention_tiled_scratch(1, 1, tiles);
  Kokkos::parallel_for(
      "attention_forward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), [=](int bh) {
        const int h = bh % NH, b = bh / NH;
        const float* q = &qkv(b * T, h * HS);
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* o = &out(b * T, h * HS);
        float* p = scratch.data() + bh * per_item;  // [R, K] scores, then probabilities
        float* row_max = p + 2 * static_cast<size_t>(R) * K;
        float* row_sum = row_max + R;
        float* row_lse = lse.data() + static_cast<size_t>(bh) * T;
        for (int r0 = 0; r0 < T; r0 += R) {
          const int rows = T - r0 < R ? T - r0 : R, keys_end = r0 + rows;
          const float* q_block = q + static_cast<size_t>(r0) * ld_qkv;
          float* o_block = o + static_cast<size_t>(r0) * ld_out;
          for (int c0 = 0; c0 < keys_end; c0 += K) {
            const int cols = keys_end - c0 < K ? keys_end - c0 : K;
            gemm_block('N', 'T', rows, cols, HS, scale, q_block, ld_qkv,
                       k + static_cast<size_t>(c0) * ld_qkv, ld_qkv, 0.0f, p, K);
            for (int i = 0; i < rows; ++i) {
              float* row = p + static_cast<size_t>(i) * K;
              const int valid = causal_keys(r0 + i, c0, cols);
              const float old_max = c0 == 0 ? kNoScore : row_max[i];
              const float tile_max = kmath::lane_max(
                  valid, [&](int j) { return row[j]; }, kNoScore);
              const float new_max = tile_max > old_max ? tile_max : old_max;
              const float sum = kmath::lane_sum(valid, [&](int j) {
                const float e = kmath::exp_vec(row[j] - new_max);
                row[j] = e;
                return e;
              });
              for (int j = valid; j < cols; ++j) row[j] = 0.0f;
              const float rescale = kmath::exp_vec(old_max - new_max);
              row_sum[i] = c0 == 0 ? sum : row_sum[i] * rescale + sum;
              row_max[i] = new_max;
              if (c0 > 0)
                for (int d = 0; d < HS; ++d)
                  o_block[static_cast<size_t>(i) * ld_out + d] *= rescale;
            }
            gemm_block('N', 'N', rows, HS, cols, 1.0f, p, K, v + static_cast<size_t>(c0) * ld_qkv,
                       ld_qkv, c0 == 0 ? 0.0f : 1.0f, o_block, ld_out);
          }
          for (int i = 0; i < rows; ++i) {
            const float inv = 1.0f / row_sum[i];
            for (int d = 0; d < HS; ++d) o_block[static_cast<size_t>(i) * ld_out + d] *= inv;
            row_lse[r0 + i] = row_max[i] + kmath::log(row_sum[i]);
          }
        }
      });
}

// dqkv[B*T, 3C] = gradient w.r.t. qkv (overwritten), from dout[B*T, C] and forward's out and lse.
inline void attention_backward_tiled(const Exec& exec, const Mat& dqkv, const Vec& scratch,
                                     const ConstMat& dout, const ConstMat& qkv, const ConstMat& out,
                                     const ConstVec& lse, AttentionShape s, AttentionTiles tiles) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS, R = tiles.rows, K = tiles.keys;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const size_t per_item = attention_tiled_scratch(1, 1, tiles);
  Kokkos::parallel_for(
      "attention_backward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), [=](int bh) {
        const int h = bh % NH, b = bh / NH;
        const float* q = &qkv(b * T, h * HS);
        const float* k = q + C;
        const float* v = q + 2 * C;
        const float* o = &out(b * T, h * HS);
        const float* g = &dout(b * T, h * HS);
        float* dq = &dqkv(b * T, h * HS);
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        float* p = scratch.data() + bh * per_item;   // [R, K] probabilities
        float* ds = p + static_cast<size_t>(R) * K;  // [R, K] their gradients, then the scores'
        float* row_dot = ds + static_cast<size_t>(R) * K;  // [R] dout . out
        const float* row_lse = lse.data() + static_cast<size_t>(bh) * T;
        if (bh + 1 < s.B * NH) {  // the next item's inputs, cold by now (kernels/streaming.hpp)
          const int h_next = (bh + 1) % NH, b_next = (bh + 1) / NH;
          const float* q_next = &qkv(b_next * T, h_next * HS);
          const float* g_next = &dout(b_next * T, h_next * HS);
          const float* o_next = &out(b_next * T, h_next * HS);
          for (int t = 0; t < T; ++t) {
            const float* qkv_row = q_next + static_cast<size_t>(t) * ld_qkv;
            for (int part = 0; part < 3; ++part) prefetch_span(0, HS, qkv_row + part * C);
            prefetch_span(0, HS, g_next + static_cast<size_t>(t) * ld_dout);
            prefetch_span(0, HS, o_next + static_cast<size_t>(t) * ld_out);
          }
        }
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < HS; ++i) {
            dk[static_cast<size_t>(t) * ld_dqkv + i] = 0.0f;
            dv[static_cast<size_t>(t) * ld_dqkv + i] = 0.0f;
          }
        for (int r0 = 0; r0 < T; r0 += R) {
          const int rows = T - r0 < R ? T - r0 : R, keys_end = r0 + rows;
          const float* q_block = q + static_cast<size_t>(r0) * ld_qkv;
          const float* g_block = g + static_cast<size_t>(r0) * ld_dout;
          float* dq_block = dq + static_cast<size_t>(r0) * ld_dqkv;
          for (int i = 0; i < rows; ++i) {
            const float* g_row = g_block + static_cast<size_t>(i) * ld_dout;
            const float* o_row = o + static_cast<size_t>(r0 + i) * ld_out;
            row_dot[i] = kmath::lane_sum(HS, [&](int d) { return g_row[d] * o_row[d]; });
          }
          for (int c0 = 0; c0 < keys_end; c0 += K) {
            const int cols = keys_end - c0 < K ? keys_end - c0 : K;
            const float* k_tile = k + static_cast<size_t>(c0) * ld_qkv;
            const float* v_tile = v + static_cast<size_t>(c0) * ld_qkv;
            gemm_block('N', 'T', rows, cols, HS, scale, q_block, ld_qkv, k_tile, ld_qkv, 0.0f, p,
                       K);
            gemm_block('N', 'T', rows, cols, HS, 1.0f, g_block, ld_dout, v_tile, ld_qkv, 0.0f, ds,
                       K);
            // Through the softmax and the 1/sqrt(HS) scale: ds = p (dp - dout . out) / sqrt(HS).
            for (int i = 0; i < rows; ++i) {
              float* prow = p + static_cast<size_t>(i) * K;
              float* drow = ds + static_cast<size_t>(i) * K;
              const int valid = causal_keys(r0 + i, c0, cols);
              const float row_l = row_lse[r0 + i], dot = row_dot[i];
              for (int j = 0; j < valid; ++j) {
                const float pj = kmath::exp_vec(prow[j] - row_l);
                prow[j] = pj;
                drow[j] = pj * (drow[j] - dot) * scale;
              }
              for (int j = valid; j < cols; ++j) prow[j] = drow[j] = 0.0f;
            }
            gemm_block('N', 'N', rows, HS, cols, 1.0f, ds, K, k_tile, ld_qkv, c0 == 0 ? 0.0f : 1.0f,
                       dq_block, ld_dqkv);
            gemm_block('T', 'N', cols, HS, rows, 1.0f, ds, K, q_block, ld_qkv, 1.0f,
                       dk + static_cast<size_t>(c0) * ld_dqkv, ld_dqkv);
            gemm_block('T', 'N', cols, HS, rows, 1.0f, p, K, g_block, ld_dout, 1.0f,
                       dv + static_cast<size_t>(c0) * ld_dqkv, ld_dqkv);
          }
        }
      });
}
#endif

// Batched (GPU builds; host builds compile it too, and a test holds it to the tiled shape): one
// (sequence, query block, key tile) at a time, its products one strided-batched GEMM over the
// heads (a head's q, k and v are HS columns apart in qkv, its tile rows*keys floats apart in the
// scratch), and a kernel per tile with a team per (head, row) for the softmax.

inline void attention_forward_batched(const Exec& exec, const Mat& out, const Vec& lse,
                                      const Vec& scratch, const ConstMat& qkv, AttentionShape s,
                                      AttentionTiles tiles) {
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS, R = tiles.rows, K = tiles.keys;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const long long tile = static_cast<long long>(R) * K;
  float* const scores = scratch.data();           // [NH, R, K]
  float* const row_sum = scores + 2 * NH * tile;  // [NH, R]
  for (int b = 0; b < s.B; ++b)
    for (int r0 = 0; r0 < T; r0 += R) {
      const int rows = T - r0 < R ? T - r0 : R, keys_end = r0 + rows;
      const float* q_block = qkv.data() + static_cast<size_t>(b * T + r0) * ld_qkv;
      float* o_block = out.data() + static_cast<size_t>(b * T + r0) * ld_out;
      for (int c0 = 0; c0 < keys_end; c0 += K) {
        const int cols = keys_end - c0 < K ? keys_end - c0 : K;
        const float* k_tile = qkv.data() + static_cast<size_t>(b * T + c0) * ld_qkv + C;
        gemm_strided_batched(exec, 'N', 'T', rows, cols, HS, scale, q_block, ld_qkv, HS, k_tile,
                             ld_qkv, HS, 0.0f, scores, K, tile, NH);
        Kokkos::parallel_for(
            "attention_softmax", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
              const int h = team.league_rank() / rows, i = team.league_rank() % rows;
              float* row = scores + h * tile + static_cast<long long>(i) * K;
              float* row_max = lse.data() + static_cast<size_t>(b * NH + h) * T + r0 + i;
              float* o_row = o_block + static_cast<size_t>(i) * ld_out + h * HS;
              const int valid = causal_keys(r0 + i, c0, cols);
              const float old_max = c0 == 0 ? kNoScore : *row_max;
              const float tile_max = team_max(
                  team, valid, [&](int j) { return row[j]; }, kNoScore);
              const float new_max = tile_max > old_max ? tile_max : old_max;
              const float sum = team_sum(team, valid, [&](int j) {
                const float e = kmath::exp_vec(row[j] - new_max);
                row[j] = e;
                return e;
              });
              const float rescale = kmath::exp_vec(old_max - new_max);
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, valid, cols),
                                   [&](int j) { row[j] = 0.0f; });
              if (c0 > 0)
                Kokkos::parallel_for(Kokkos::TeamThreadRange(team, HS),
                                     [&](int d) { o_row[d] *= rescale; });
              team.team_barrier();
              Kokkos::single(Kokkos::PerTeam(team), [&] {
                float& l = row_sum[h * R + i];
                l = c0 == 0 ? sum : l * rescale + sum;
                *row_max = new_max;
              });
            });
        gemm_strided_batched(exec, 'N', 'N', rows, HS, cols, 1.0f, scores, K, tile, k_tile + C,
                             ld_qkv, HS, c0 == 0 ? 0.0f : 1.0f, o_block, ld_out, HS, NH);
      }
      Kokkos::parallel_for(
          "attention_normalise", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
            const int h = team.league_rank() / rows, i = team.league_rank() % rows;
            const float l = row_sum[h * R + i];
            float* o_row = o_block + static_cast<size_t>(i) * ld_out + h * HS;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, HS), [&](int d) { o_row[d] /= l; });
            team.team_barrier();
            Kokkos::single(Kokkos::PerTeam(team), [&] {
              float& row_lse = lse(static_cast<size_t>(b * NH + h) * T + r0 + i);
              row_lse += kmath::log(l);
            });
          });
    }
}

inline void attention_backward_batched(const Exec& exec, const Mat& dqkv, const Vec& scratch,
                                       const ConstMat& dout, const ConstMat& qkv,
                                       const ConstMat& out, const ConstVec& lse, AttentionShape s,
                                       AttentionTiles tiles) {
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS, R = tiles.rows, K = tiles.keys;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const long long tile = static_cast<long long>(R) * K;
  float* const probs = scratch.data();       // [NH, R, K]
  float* const grads = probs + NH * tile;    // [NH, R, K]
  float* const row_dot = grads + NH * tile;  // [NH, R] dout . out
  const Mat d = dqkv;
  Kokkos::parallel_for(  // dk and dv are sums over query blocks
      "attention_zero_dkv", Kokkos::RangePolicy<Exec>(exec, 0, s.B * T * 2 * C),
      KOKKOS_LAMBDA(int e) { d(e / (2 * C), C + e % (2 * C)) = 0.0f; });
  for (int b = 0; b < s.B; ++b)
    for (int r0 = 0; r0 < T; r0 += R) {
      const int rows = T - r0 < R ? T - r0 : R, keys_end = r0 + rows;
      const size_t first = static_cast<size_t>(b) * T + r0;
      const float* q_block = qkv.data() + first * ld_qkv;
      const float* g_block = dout.data() + first * ld_dout;
      const float* o_block = out.data() + first * ld_out;
      float* dq_block = dqkv.data() + first * ld_dqkv;
      Kokkos::parallel_for(
          "attention_row_dot", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
            const int h = team.league_rank() / rows, i = team.league_rank() % rows;
            const float* g_row = g_block + static_cast<size_t>(i) * ld_dout + h * HS;
            const float* o_row = o_block + static_cast<size_t>(i) * ld_out + h * HS;
            const float dot = team_sum(team, HS, [&](int e) { return g_row[e] * o_row[e]; });
            Kokkos::single(Kokkos::PerTeam(team), [&] { row_dot[h * R + i] = dot; });
          });
      for (int c0 = 0; c0 < keys_end; c0 += K) {
        const int cols = keys_end - c0 < K ? keys_end - c0 : K;
        const size_t key_row = static_cast<size_t>(b) * T + c0;
        const float* k_tile = qkv.data() + key_row * ld_qkv + C;
        const float* v_tile = k_tile + C;
        gemm_strided_batched(exec, 'N', 'T', rows, cols, HS, scale, q_block, ld_qkv, HS, k_tile,
                             ld_qkv, HS, 0.0f, probs, K, tile, NH);
        gemm_strided_batched(exec, 'N', 'T', rows, cols, HS, 1.0f, g_block, ld_dout, HS, v_tile,
                             ld_qkv, HS, 0.0f, grads, K, tile, NH);
        // Through the softmax and the 1/sqrt(HS) scale: ds = p (dp - dout . out) / sqrt(HS).
        Kokkos::parallel_for(
            "attention_softmax_backward", row_teams(exec, NH * rows),
            KOKKOS_LAMBDA(const TeamMember& team) {
              const int h = team.league_rank() / rows, i = team.league_rank() % rows;
              float* prow = probs + h * tile + static_cast<long long>(i) * K;
              float* drow = grads + h * tile + static_cast<long long>(i) * K;
              const int valid = causal_keys(r0 + i, c0, cols);
              const float row_l = lse(static_cast<size_t>(b * NH + h) * T + r0 + i);
              const float dot = row_dot[h * R + i];
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
                const float pj = j < valid ? kmath::exp_vec(prow[j] - row_l) : 0.0f;
                prow[j] = pj;
                drow[j] = pj * (drow[j] - dot) * scale;
              });
            });
        gemm_strided_batched(exec, 'N', 'N', rows, HS, cols, 1.0f, grads, K, tile, k_tile, ld_qkv,
                             HS, c0 == 0 ? 0.0f : 1.0f, dq_block, ld_dqkv, HS, NH);
        gemm_strided_batched(exec, 'T', 'N', cols, HS, rows, 1.0f, grads, K, tile, q_block, ld_qkv,
                             HS, 1.0f, dqkv.data() + key_row * ld_dqkv + C, ld_dqkv, HS, NH);
        gemm_strided_batched(exec, 'T', 'N', cols, HS, rows, 1.0f, probs, K, tile, g_block, ld_dout,
                             HS, 1.0f, dqkv.data() + key_row * ld_dqkv + 2 * C, ld_dqkv, HS, NH);
      }
    }
}

// The attention of this build: batched on GPUs, tiled per (sequence, head) on host spaces.
// scratch: attention_scratch_elements(B, NH, T) floats.
inline void attention_forward(const Exec& exec, const Mat& out, const Vec& lse, const Vec& scratch,
                              const ConstMat& qkv, AttentionShape s) {
  Region region("trident::attention_forward");
#if defined(KOKKOS_ENABLE_CUDA)
  attention_forward_batched(exec, out, lse, scratch, qkv, s, attention_tiles(s.T));
#else
  attention_forward_tiled(exec, out, lse, scratch, qkv, s, attention_tiles(s.T));
#endif
}

inline void attention_backward(const Exec& exec, const Mat& dqkv, const Vec& scratch,
                               const ConstMat& dout, const ConstMat& qkv, const ConstMat& out,
                               const ConstVec& lse, AttentionShape s) {
  Region region("trident::attention_backward");
#if defined(KOKKOS_ENABLE_CUDA)
  attention_backward_batched(exec, dqkv, scratch, dout, qkv, out, lse, s, attention_tiles(s.T));
#else
  attention_backward_tiled(exec, dqkv, scratch, dout, qkv, out, lse, s, attention_tiles(s.T));
#endif
}

}  // namespace trident::kernels
