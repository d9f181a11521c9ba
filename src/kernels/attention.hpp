// Causal multi-head self-attention on a packed qkv tensor, tiled with an online softmax: forward
// and backward, in the host's per-(sequence, head) shape and the GPU's batched shape.
#pragma once

#include <type_traits>

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/attention_tiles.hpp"
#include "kernels/elements.hpp"
#include "kernels/gemm.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"
#include "kernels/streaming.hpp"

namespace trident::kernels {

struct AttentionShape {
  int B, T, NH, HS;  // C = NH * HS
  int KVH = 0;       // key/value heads (grouped-query attention); 0: NH
  int kv_heads() const { return KVH > 0 ? KVH : NH; }
  int group() const { return NH / kv_heads(); }  // query heads per key/value head
};

// The layout both shapes share. qkv[B*T, (NH + 2 KVH) HS] holds q | k | v: query head h at columns
// h*HS..h*HS+HS, key head g at NH*HS + g*HS and value head g at (NH + KVH)*HS + g*HS; query head h
// reads key/value head h / (NH / KVH) (grouped-query attention; KVH = NH is multi-head attention).
// out[B*T, C] is per head softmax(q k^T / sqrt(HS), causal) v; lse[B*NH*T], at
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

// One part of a causal attention whose keys and values may live apart from the queries (context
// parallelism: a rank's queries against another rank's chunk of keys and values). Each sequence's
// query rows [q_first, q_first + q_rows) of qkv, out and lse attend to its key/value rows
// [k_first, k_first + k_rows) of kv; key j (counted from k_first) is visible to query i (counted
// from q_first) when j <= i + shift, shift being the global position of query q_first less that
// of key k_first (>= 0: every query sees at least the part's first key; shift >= k_rows - 1:
// every key is visible). With merge, out and lse already hold these queries' attention to other
// keys, and this part's joins it through the log-sum-exps (the online softmax, continued).
struct AttentionPart {
  int q_first = 0, q_rows = 0;
  int k_first = 0, k_rows = 0;
  int shift = 0;
  bool merge = false;
};
// The whole causal attention of sequences of T tokens, keys and values beside the queries.
constexpr AttentionPart whole_sequence(int T) {
  return {0, T, 0, T, 0, false};
}

// Where a part's keys and values are: row n of data at n * ld, key head g at columns g HS and
// value head g at (KVH + g) HS (the k | v columns of a packed qkv, or a chunk of them alone).
template <class Stored>
struct KeyValueRows {
  const Stored* data;
  int ld;
};

// The keys and values beside the queries in a packed qkv.
template <class E>
KeyValueRows<typename E::Stored> packed_key_values(const ConstMatOf<E>& qkv, AttentionShape s) {
  return {qkv.data() + static_cast<size_t>(s.NH) * s.HS, static_cast<int>(qkv.stride(0))};
}

// Where a part's gradients are summed (backward): fp32 dq [B*T, NH HS] and dk | dv
// [B*T, 2 KVH HS], added to, never overwritten, so that the parts of one attention sum into them.
struct AttentionGradSums {
  float* dq;
  int ld_dq;
  float* dkv;
  int ld_dkv;
};

#if !defined(KOKKOS_ENABLE_CUDA)
// Per (sequence, head) (host builds): one work item each, its tiles multiplied by the BLAS on the
// calling thread (gemm_block), so each item is summed in one fixed order whatever the number of
// threads.

// Rows of a head's HS columns (leading dimension ld) as fp32 for the BLAS: fp32 rows are read
// where they are; 16-bit ones are widened into `buffer` (leading dimension HS).
template <class E>
struct HostRows {
  const float* data;
  int ld;
};
template <class E>
inline HostRows<E> rows_as_fp32(const typename E::Stored* rows, int ld, int n, int HS,
                                float* buffer) {
  if constexpr (std::is_same_v<E, Fp32Elements>) {
    (void)n, (void)HS, (void)buffer;
    return {rows, ld};
  } else {
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < HS; ++d)
        buffer[static_cast<size_t>(i) * HS + d] = E::load(rows[static_cast<size_t>(i) * ld + d]);
    return {buffer, HS};
  }
}

// Where an fp32 sum over tiles is kept: in the output itself for fp32 (leading dimension ld),
// in `buffer` (leading dimension HS) for 16-bit outputs, which get it rounded once at the end.
template <class E>
struct HostAccumulator {
  float* data;
  int ld;
};
template <class E>
inline HostAccumulator<E> accumulator(typename E::Stored* out, int ld, int HS, float* buffer) {
  if constexpr (std::is_same_v<E, Fp32Elements>) {
    (void)HS, (void)buffer;
    return {out, ld};
  } else {
    (void)out, (void)ld;
    return {buffer, HS};
  }
}

// out rows = the accumulator's rows scaled by scale[i] (fp32: in place; 16-bit: rounded into out).
template <class E>
inline void finish_rows(const HostAccumulator<E>& acc, typename E::Stored* out, int ld, int rows,
                        int HS, const float* scale) {
  for (int i = 0; i < rows; ++i)
    for (int d = 0; d < HS; ++d) {
      const float value = acc.data[static_cast<size_t>(i) * acc.ld + d] * (scale ? scale[i] : 1.0f);
      out[static_cast<size_t>(i) * ld + d] = E::store(value);
    }
}

// Both passes' start on key tile [c0, c0 + cols) of a head: its k and v rows as fp32, and the
// query block's scores against it, scale q k^T, into p [rows, K].
template <class E>
struct KeyTile {
  HostRows<E> k, v;
};
template <class E>
inline KeyTile<E> score_key_tile(const HostRows<E>& q_block, int rows, const typename E::Stored* k,
                                 const typename E::Stored* v, int ld_qkv, int c0, int cols, int HS,
                                 float scale, float* k_buffer, float* v_buffer, float* p, int K) {
  const size_t first = static_cast<size_t>(c0) * ld_qkv;
  const KeyTile<E> tile{rows_as_fp32<E>(k + first, ld_qkv, cols, HS, k_buffer),
                        rows_as_fp32<E>(v + first, ld_qkv, cols, HS, v_buffer)};
  gemm_block('N', 'T', rows, cols, HS, scale, q_block.data, q_block.ld, tile.k.data, tile.k.ld,
             0.0f, p, K);
  return tile;
}

inline void check_attention_scratch(size_t have, size_t need) {
  if (have < need) Kokkos::abort("attention: scratch smaller than attention_tiled_scratch");
}

// q, k, v and out stored as E (kernels/elements.hpp); lse fp32. One part of the attention
// (AttentionPart), keys and values in kv.
template <class E = Fp32Elements>
inline void attention_forward_tiled(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                                    const Vec& scratch, const ConstMatOf<E>& qkv,
                                    KeyValueRows<typename E::Stored> kv, AttentionShape s,
                                    AttentionTiles tiles, AttentionPart part) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  using Stored = typename E::Stored;
  const int T = s.T, NH = s.NH, HS = s.HS, R = tiles.rows, K = tiles.keys;
  const int KVH = s.kv_heads(), G = s.group(), shift = part.shift;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const size_t per_item = attention_tiled_scratch(1, 1, HS, T, tiles, E::format);
  check_attention_scratch(scratch.extent(0), per_item * s.B * NH);
  Kokkos::parallel_for(
      "attention_forward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * NH), [=](int bh) {
        const int h = bh % NH, b = bh / NH;
        const Stored* q = &qkv(b * T + part.q_first, h * HS);
        const Stored* k = kv.data + static_cast<size_t>(b * T + part.k_first) * kv.ld + h / G * HS;
        const Stored* v = k + static_cast<size_t>(KVH) * HS;
        Stored* o = &out(b * T + part.q_first, h * HS);
        float* p = scratch.data() + bh * per_item;  // [R, K] scores, then probabilities
        float* row_max = p + 2 * static_cast<size_t>(R) * K;
        float* row_sum = row_max + R;
        float* widened = row_sum + R;  // 16-bit: q [R, HS], k and v [K, HS], out [R, HS]
        float* q_buffer = widened;
        float* k_buffer = q_buffer + static_cast<size_t>(R) * HS;
        float* v_buffer = k_buffer + static_cast<size_t>(K) * HS;
        float* o_buffer = v_buffer + static_cast<size_t>(K) * HS;
        float* row_lse = lse.data() + static_cast<size_t>(bh) * T + part.q_first;
        for (int r0 = 0; r0 < part.q_rows; r0 += R) {
          const int rows = part.q_rows - r0 < R ? part.q_rows - r0 : R;
          const int keys_end = r0 + rows + shift < part.k_rows ? r0 + rows + shift : part.k_rows;
          const HostRows<E> q_block =
              rows_as_fp32<E>(q + static_cast<size_t>(r0) * ld_qkv, ld_qkv, rows, HS, q_buffer);
          Stored* o_block = o + static_cast<size_t>(r0) * ld_out;
          const HostAccumulator<E> o_acc = accumulator<E>(o_block, ld_out, HS, o_buffer);
          if (part.merge) {  // the earlier parts' normalised output: running maximum lse, sum 1
            rows_as_fp32<E>(o_block, ld_out, rows, HS, o_buffer);
            for (int i = 0; i < rows; ++i) {
              row_max[i] = row_lse[r0 + i];
              row_sum[i] = 1.0f;
            }
          }
          for (int c0 = 0; c0 < keys_end; c0 += K) {
            const int cols = keys_end - c0 < K ? keys_end - c0 : K;
            const bool first = c0 == 0 && !part.merge;
            const KeyTile<E> tile = score_key_tile<E>(q_block, rows, k, v, kv.ld, c0, cols, HS,
                                                      scale, k_buffer, v_buffer, p, K);
            for (int i = 0; i < rows; ++i) {
              float* row = p + static_cast<size_t>(i) * K;
              const int valid = causal_keys(r0 + i + shift, c0, cols);
              const float old_max = first ? kNoScore : row_max[i];
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
              row_sum[i] = first ? sum : row_sum[i] * rescale + sum;
              row_max[i] = new_max;
              if (!first)
                for (int d = 0; d < HS; ++d)
                  o_acc.data[static_cast<size_t>(i) * o_acc.ld + d] *= rescale;
            }
            gemm_block('N', 'N', rows, HS, cols, 1.0f, p, K, tile.v.data, tile.v.ld,
                       first ? 0.0f : 1.0f, o_acc.data, o_acc.ld);
          }
          for (int i = 0; i < rows; ++i) {
            row_lse[r0 + i] = row_max[i] + kmath::log(row_sum[i]);
            row_sum[i] = 1.0f / row_sum[i];
          }
          finish_rows<E>(o_acc, o_block, ld_out, rows, HS, row_sum);
        }
      });
}

// The whole causal attention of qkv (keys and values beside the queries).
template <class E = Fp32Elements>
inline void attention_forward_tiled(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                                    const Vec& scratch, const ConstMatOf<E>& qkv, AttentionShape s,
                                    AttentionTiles tiles) {
  attention_forward_tiled<E>(exec, out, lse, scratch, qkv, packed_key_values<E>(qkv, s), s, tiles,
                             whole_sequence(s.T));
}

// dqkv[B*T, (NH + 2 KVH) HS] = gradient w.r.t. qkv (overwritten), from dout[B*T, C] and
// forward's out and lse; every tensor but lse stored as E. One work item per (sequence, key/value
// head) runs the group's query heads in turn, so a head's dk and dv are summed by one thread. With
// `sums` (a part of the attention, keys and values in kv) the gradients are added to sums instead
// and dqkv is not touched.
template <class E = Fp32Elements>
inline void attention_backward_tiled(const Exec& exec, const MatOf<E>& dqkv, const Vec& scratch,
                                     const ConstMatOf<E>& dout, const ConstMatOf<E>& qkv,
                                     KeyValueRows<typename E::Stored> kv, const ConstMatOf<E>& out,
                                     const ConstVec& lse, AttentionShape s, AttentionTiles tiles,
                                     AttentionPart part, const AttentionGradSums* sums) {
  exec.fence();  // BLAS reads what earlier kernels wrote
  using Stored = typename E::Stored;
  const int T = s.T, NH = s.NH, HS = s.HS, R = tiles.rows, K = tiles.keys;
  const int KVH = s.kv_heads(), G = s.group(), k_col = NH * HS, shift = part.shift;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const size_t per_item = attention_tiled_scratch(1, 1, HS, T, tiles, E::format);
  check_attention_scratch(scratch.extent(0), per_item * s.B * NH);
  const bool summed = sums != nullptr;
  const AttentionGradSums to = summed ? *sums : AttentionGradSums{};
  Kokkos::parallel_for(
      "attention_backward", Kokkos::RangePolicy<Exec>(exec, 0, s.B * KVH), [=](int bg) {
        const int g_head = bg % KVH, b = bg / KVH;
        const size_t q_row = static_cast<size_t>(b) * T + part.q_first;
        const size_t k_row = static_cast<size_t>(b) * T + part.k_first;
        const Stored* k = kv.data + k_row * kv.ld + g_head * HS;
        const Stored* v = k + static_cast<size_t>(KVH) * HS;
        float* p = scratch.data() + bg * per_item;   // [R, K] probabilities
        float* ds = p + static_cast<size_t>(R) * K;  // [R, K] their gradients, then the scores'
        float* row_dot = ds + static_cast<size_t>(R) * K;  // [R] dout . out
        // 16-bit: q, dout and dq [R, HS]; k and v [K, HS]; dk and dv [T, HS] (sums over blocks)
        float* q_buffer = row_dot + 2 * R;
        float* g_buffer = q_buffer + static_cast<size_t>(R) * HS;
        float* dq_buffer = g_buffer + static_cast<size_t>(R) * HS;
        float* k_buffer = dq_buffer + static_cast<size_t>(R) * HS;
        float* v_buffer = k_buffer + static_cast<size_t>(K) * HS;
        float* dk_buffer = v_buffer + static_cast<size_t>(K) * HS;
        float* dv_buffer = dk_buffer + static_cast<size_t>(T) * HS;
        if (bg + 1 < s.B * KVH) {  // the next item's inputs, cold by now (kernels/streaming.hpp)
          const int g_next = (bg + 1) % KVH, b_next = (bg + 1) / KVH;
          for (int t = 0; t < part.q_rows; ++t) {
            const size_t n = static_cast<size_t>(b_next) * T + part.q_first + t;
            prefetch_span(0, G * HS, &qkv(n, g_next * G * HS));
            prefetch_span(0, G * HS, &dout(n, g_next * G * HS));
            prefetch_span(0, G * HS, &out(n, g_next * G * HS));
          }
          for (int t = 0; t < part.k_rows; ++t) {
            const Stored* kv_row =
                kv.data + (static_cast<size_t>(b_next) * T + part.k_first + t) * kv.ld;
            prefetch_span(0, HS, kv_row + g_next * HS);
            prefetch_span(0, HS, kv_row + (KVH + g_next) * HS);
          }
        }
        HostAccumulator<E> dk_acc{nullptr, 0}, dv_acc{nullptr, 0};
        if (summed) {
          dk_acc = {to.dkv + k_row * to.ld_dkv + g_head * HS, to.ld_dkv};
          dv_acc = {dk_acc.data + static_cast<size_t>(KVH) * HS, to.ld_dkv};
        } else {
          dk_acc = accumulator<E>(&dqkv(k_row, k_col + g_head * HS), ld_dqkv, HS, dk_buffer);
          dv_acc =
              accumulator<E>(&dqkv(k_row, k_col + (KVH + g_head) * HS), ld_dqkv, HS, dv_buffer);
          for (int t = 0; t < part.k_rows; ++t)
            for (int i = 0; i < HS; ++i) {
              dk_acc.data[static_cast<size_t>(t) * dk_acc.ld + i] = 0.0f;
              dv_acc.data[static_cast<size_t>(t) * dv_acc.ld + i] = 0.0f;
            }
        }
        for (int h = g_head * G; h < (g_head + 1) * G; ++h) {
          const Stored* q = &qkv(q_row, h * HS);
          const Stored* o = &out(q_row, h * HS);
          const Stored* g = &dout(q_row, h * HS);
          const float* row_lse = lse.data() + static_cast<size_t>(b * NH + h) * T + part.q_first;
          for (int r0 = 0; r0 < part.q_rows; r0 += R) {
            const int rows = part.q_rows - r0 < R ? part.q_rows - r0 : R;
            const int keys_end = r0 + rows + shift < part.k_rows ? r0 + rows + shift : part.k_rows;
            const HostRows<E> q_block =
                rows_as_fp32<E>(q + static_cast<size_t>(r0) * ld_qkv, ld_qkv, rows, HS, q_buffer);
            const HostRows<E> g_block =
                rows_as_fp32<E>(g + static_cast<size_t>(r0) * ld_dout, ld_dout, rows, HS, g_buffer);
            Stored* dq_block = summed ? nullptr : &dqkv(q_row + r0, h * HS);
            const HostAccumulator<E> dq_acc =
                summed ? HostAccumulator<E>{to.dq + (q_row + r0) * to.ld_dq + h * HS, to.ld_dq}
                       : accumulator<E>(dq_block, ld_dqkv, HS, dq_buffer);
            for (int i = 0; i < rows; ++i) {
              const float* g_row = g_block.data + static_cast<size_t>(i) * g_block.ld;
              const Stored* o_row = o + static_cast<size_t>(r0 + i) * ld_out;
              row_dot[i] = kmath::lane_sum(HS, [&](int d) { return g_row[d] * E::load(o_row[d]); });
            }
            for (int c0 = 0; c0 < keys_end; c0 += K) {
              const int cols = keys_end - c0 < K ? keys_end - c0 : K;
              const KeyTile<E> tile = score_key_tile<E>(q_block, rows, k, v, kv.ld, c0, cols, HS,
                                                        scale, k_buffer, v_buffer, p, K);
              gemm_block('N', 'T', rows, cols, HS, 1.0f, g_block.data, g_block.ld, tile.v.data,
                         tile.v.ld, 0.0f, ds, K);
              // Through the softmax and the 1/sqrt(HS) scale: ds = p (dp - dout . out) / sqrt(HS).
              for (int i = 0; i < rows; ++i) {
                float* prow = p + static_cast<size_t>(i) * K;
                float* drow = ds + static_cast<size_t>(i) * K;
                const int valid = causal_keys(r0 + i + shift, c0, cols);
                const float row_l = row_lse[r0 + i], dot = row_dot[i];
                for (int j = 0; j < valid; ++j) {
                  const float pj = kmath::exp_vec(prow[j] - row_l);
                  prow[j] = pj;
                  drow[j] = pj * (drow[j] - dot) * scale;
                }
                for (int j = valid; j < cols; ++j) prow[j] = drow[j] = 0.0f;
              }
              gemm_block('N', 'N', rows, HS, cols, 1.0f, ds, K, tile.k.data, tile.k.ld,
                         c0 == 0 && !summed ? 0.0f : 1.0f, dq_acc.data, dq_acc.ld);
              gemm_block('T', 'N', cols, HS, rows, 1.0f, ds, K, q_block.data, q_block.ld, 1.0f,
                         dk_acc.data + static_cast<size_t>(c0) * dk_acc.ld, dk_acc.ld);
              gemm_block('T', 'N', cols, HS, rows, 1.0f, p, K, g_block.data, g_block.ld, 1.0f,
                         dv_acc.data + static_cast<size_t>(c0) * dv_acc.ld, dv_acc.ld);
            }
            if constexpr (!std::is_same_v<E, Fp32Elements>)
              if (!summed) finish_rows<E>(dq_acc, dq_block, ld_dqkv, rows, HS, nullptr);
          }
        }
        if constexpr (!std::is_same_v<E, Fp32Elements>)
          if (!summed) {
            finish_rows<E>(dk_acc, &dqkv(k_row, k_col + g_head * HS), ld_dqkv, part.k_rows, HS,
                           nullptr);
            finish_rows<E>(dv_acc, &dqkv(k_row, k_col + (KVH + g_head) * HS), ld_dqkv, part.k_rows,
                           HS, nullptr);
          }
      });
}

template <class E = Fp32Elements>
inline void attention_backward_tiled(const Exec& exec, const MatOf<E>& dqkv, const Vec& scratch,
                                     const ConstMatOf<E>& dout, const ConstMatOf<E>& qkv,
                                     const ConstMatOf<E>& out, const ConstVec& lse,
                                     AttentionShape s, AttentionTiles tiles) {
  attention_backward_tiled<E>(exec, dqkv, scratch, dout, qkv, packed_key_values<E>(qkv, s), out,
                              lse, s, tiles, whole_sequence(s.T), nullptr);
}
#endif

// Batched (GPU builds; host builds compile it too, and a test holds it to the tiled shape): one
// (sequence, query block, key tile) at a time, its products one strided-batched GEMM over the
// heads (a head's q, k and v are HS columns apart in qkv, its tile rows*keys floats apart in the
// scratch), and a kernel per tile with a team per (head, row) for the softmax. On 16-bit tensors
// the products take 16-bit operands (gemm16_strided_batched, fp32 sums): the scores and their
// gradients come out in fp32, the probabilities and score gradients are rounded to 16 bits for
// the products that read them (as FlashAttention does), and o, dq, dk and dv are summed in fp32
// in the scratch and rounded once into their tensors.

// C_i = alpha op(A_i) op(B_i) + beta C_i over the heads, A and B stored as E, C fp32.
template <class E>
inline void gemm_heads(const Exec& exec, char trans_a, char trans_b, int m, int n, int k,
                       float alpha, const typename E::Stored* A, int lda, long long stride_a,
                       const typename E::Stored* B, int ldb, long long stride_b, float beta,
                       float* C, int ldc, long long stride_c, int batch) {
  if constexpr (std::is_same_v<E, Fp32Elements>)
    gemm_strided_batched(exec, trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                         beta, C, ldc, stride_c, batch);
  else
    gemm16_strided_batched(exec, trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb,
                           stride_b, E::format, beta, C, ldc, stride_c, batch);
}

template <class E = Fp32Elements>
inline void attention_forward_batched(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                                      const Vec& scratch, const ConstMatOf<E>& qkv,
                                      KeyValueRows<typename E::Stored> kv, AttentionShape s,
                                      AttentionTiles tiles, AttentionPart part) {
  using Stored = typename E::Stored;
  constexpr bool kHalf = !std::is_same_v<E, Fp32Elements>;
  const int T = s.T, NH = s.NH, HS = s.HS, R = tiles.rows, K = tiles.keys;
  const int KVH = s.kv_heads(), G = s.group(), shift = part.shift, ld_kv = kv.ld;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const long long tile = static_cast<long long>(R) * K;
  const bool merge = part.merge;
  float* const scores = scratch.data();           // [NH, R, K]
  float* const row_sum = scores + 2 * NH * tile;  // [NH, R]
  // 16-bit: the probabilities rounded for P v [NH, R, K], and o's fp32 sums [NH, R, HS].
  float* const extra = row_sum + NH * R;
  Stored* const probs16 = reinterpret_cast<Stored*>(extra);
  float* const o_sums = extra + NH * tile;
  const MatOf<E> o = out;
  for (int b = 0; b < s.B; ++b)
    for (int r0 = 0; r0 < part.q_rows; r0 += R) {
      const int rows = part.q_rows - r0 < R ? part.q_rows - r0 : R;
      const int keys_end = r0 + rows + shift < part.k_rows ? r0 + rows + shift : part.k_rows;
      const int q_row = b * T + part.q_first + r0;  // of the block's first query
      const Stored* q_block = qkv.data() + static_cast<size_t>(q_row) * ld_qkv;
      // Where o's rows sum: in out itself (fp32), or per head in o_sums (16-bit).
      float* o_base = o_sums;
      int o_ld = HS;
      long long o_head = static_cast<long long>(R) * HS;
      if constexpr (!kHalf) {
        o_base = out.data() + static_cast<size_t>(q_row) * ld_out;
        o_ld = ld_out;
        o_head = HS;
      }
      if (merge)  // the earlier parts' normalised output, a running sum of 1 (lse: the maximum)
        Kokkos::parallel_for(
            "attention_merge_rows", row_teams(exec, NH * rows),
            KOKKOS_LAMBDA(const TeamMember& team) {
              const int h = team.league_rank() / rows, i = team.league_rank() % rows;
              float* o_row = o_base + static_cast<long long>(i) * o_ld + h * o_head;
              if (kHalf)
                Kokkos::parallel_for(Kokkos::TeamThreadRange(team, HS),
                                     [&](int d) { o_row[d] = E::load(o(q_row + i, h * HS + d)); });
              Kokkos::single(Kokkos::PerTeam(team), [&] { row_sum[h * R + i] = 1.0f; });
            });
      for (int c0 = 0; c0 < keys_end; c0 += K) {
        const int cols = keys_end - c0 < K ? keys_end - c0 : K;
        const bool first = c0 == 0 && !merge;
        const Stored* k_tile = kv.data + static_cast<size_t>(b * T + part.k_first + c0) * ld_kv;
        const Stored* v_tile = k_tile + KVH * HS;
        // Batched over the key/value heads, once per query head of a group (query head g G + j
        // reads key/value head g).
        for (int j = 0; j < G; ++j)
          gemm_heads<E>(exec, 'N', 'T', rows, cols, HS, scale, q_block + j * HS, ld_qkv, G * HS,
                        k_tile, ld_kv, HS, 0.0f, scores + j * tile, K, G * tile, KVH);
        Kokkos::parallel_for(
            "attention_softmax", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
              const int h = team.league_rank() / rows, i = team.league_rank() % rows;
              const long long at = h * tile + static_cast<long long>(i) * K;
              float* row = scores + at;
              float* row_max =
                  lse.data() + static_cast<size_t>(b * NH + h) * T + part.q_first + r0 + i;
              float* o_row = o_base + static_cast<long long>(i) * o_ld + h * o_head;
              const int valid = causal_keys(r0 + i + shift, c0, cols);
              const float old_max = first ? kNoScore : *row_max;
              const float tile_max = team_max(
                  team, valid, [&](int j) { return row[j]; }, kNoScore);
              const float new_max = tile_max > old_max ? tile_max : old_max;
              const float sum = team_sum(team, valid, [&](int j) {
                const float e = kmath::exp_vec(row[j] - new_max);
                row[j] = e;
                if (kHalf) probs16[at + j] = E::store(e);
                return e;
              });
              const float rescale = kmath::exp_vec(old_max - new_max);
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, valid, cols), [&](int j) {
                row[j] = 0.0f;
                if (kHalf) probs16[at + j] = E::store(0.0f);
              });
              if (!first)
                Kokkos::parallel_for(Kokkos::TeamThreadRange(team, HS),
                                     [&](int d) { o_row[d] *= rescale; });
              team.team_barrier();
              Kokkos::single(Kokkos::PerTeam(team), [&] {
                float& l = row_sum[h * R + i];
                l = first ? sum : l * rescale + sum;
                *row_max = new_max;
              });
            });
        // P v from the probabilities as the product reads them (rounded to 16 bits, or fp32).
        const Stored* p = kHalf ? probs16 : reinterpret_cast<const Stored*>(scores);
        for (int j = 0; j < G; ++j)
          gemm_heads<E>(exec, 'N', 'N', rows, HS, cols, 1.0f, p + j * tile, K, G * tile, v_tile,
                        ld_kv, HS, first ? 0.0f : 1.0f, o_base + j * o_head, o_ld, G * o_head, KVH);
      }
      Kokkos::parallel_for(
          "attention_normalise", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
            const int h = team.league_rank() / rows, i = team.league_rank() % rows;
            const float l = row_sum[h * R + i];
            float* o_row = o_base + static_cast<long long>(i) * o_ld + h * o_head;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, HS), [&](int d) {
              if (kHalf)
                o(q_row + i, h * HS + d) = E::store(o_row[d] / l);
              else
                o_row[d] /= l;
            });
            team.team_barrier();
            Kokkos::single(Kokkos::PerTeam(team), [&] {
              float& row_lse = lse(static_cast<size_t>(b * NH + h) * T + part.q_first + r0 + i);
              row_lse += kmath::log(l);
            });
          });
    }
}

template <class E = Fp32Elements>
inline void attention_forward_batched(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                                      const Vec& scratch, const ConstMatOf<E>& qkv,
                                      AttentionShape s, AttentionTiles tiles) {
  attention_forward_batched<E>(exec, out, lse, scratch, qkv, packed_key_values<E>(qkv, s), s, tiles,
                               whole_sequence(s.T));
}

// Through the softmax and the 1/sqrt(HS) scale, for a tile of `rows` queries (row i of head h at
// lse[h T + i]) against `cols` keys, query i seeing keys j <= i + offset: the probabilities p
// (recomputed from the scores in probs) and ds = p (dp - dout . out) / sqrt(HS) (dp in grads), in
// place, or rounded into probs16 and grads16 (16-bit products).
template <class E>
inline void batched_softmax_backward(const Exec& exec, float* probs, float* grads,
                                     typename E::Stored* probs16, typename E::Stored* grads16,
                                     const float* row_dot, const float* lse, int T, int NH, int R,
                                     int K, int rows, int cols, int offset, float scale) {
  constexpr bool kHalf = !std::is_same_v<E, Fp32Elements>;
  const long long tile = static_cast<long long>(R) * K;
  Kokkos::parallel_for(
      "attention_softmax_backward", row_teams(exec, NH * rows),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int h = team.league_rank() / rows, i = team.league_rank() % rows;
        const long long at = h * tile + static_cast<long long>(i) * K;
        float* prow = probs + at;
        float* drow = grads + at;
        const int valid = causal_keys(i + offset, 0, cols);
        const float row_l = lse[static_cast<size_t>(h) * T + i];
        const float dot = row_dot[h * R + i];
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          const float pj = j < valid ? kmath::exp_vec(prow[j] - row_l) : 0.0f;
          const float ds = pj * (drow[j] - dot) * scale;
          if (kHalf) {
            probs16[at + j] = E::store(pj);
            grads16[at + j] = E::store(ds);
          } else {
            prow[j] = pj;
            drow[j] = ds;
          }
        });
      });
}

template <class E = Fp32Elements>
inline void attention_backward_batched(const Exec& exec, const MatOf<E>& dqkv, const Vec& scratch,
                                       const ConstMatOf<E>& dout, const ConstMatOf<E>& qkv,
                                       KeyValueRows<typename E::Stored> kv,
                                       const ConstMatOf<E>& out, const ConstVec& lse,
                                       AttentionShape s, AttentionTiles tiles, AttentionPart part,
                                       const AttentionGradSums* sums) {
  using Stored = typename E::Stored;
  constexpr bool kHalf = !std::is_same_v<E, Fp32Elements>;
  const int T = s.T, NH = s.NH, HS = s.HS, C = s.NH * s.HS, R = tiles.rows, K = tiles.keys;
  const int KVH = s.kv_heads(), G = s.group(), KV = 2 * KVH * HS;  // KV: k | v columns
  const int shift = part.shift, ld_kv = kv.ld;
  const float scale = 1.0f / kmath::sqrt(static_cast<float>(HS));
  const int ld_qkv = static_cast<int>(qkv.stride(0)), ld_out = static_cast<int>(out.stride(0));
  const int ld_dout = static_cast<int>(dout.stride(0)), ld_dqkv = static_cast<int>(dqkv.stride(0));
  const long long tile = static_cast<long long>(R) * K;
  float* const probs = scratch.data();       // [NH, R, K]
  float* const grads = probs + NH * tile;    // [NH, R, K]
  float* const row_dot = grads + NH * tile;  // [NH, R] dout . out
  // 16-bit: the probabilities and score gradients rounded for the products [NH, R, K] each, and
  // the fp32 sums of a block's dq [NH, R, HS] and of the sequence's dk | dv [T, KV].
  float* const extra = row_dot + NH * R;
  Stored* const probs16 = reinterpret_cast<Stored*>(extra);
  Stored* const grads16 = probs16 + NH * tile;
  float* const dq_sums = extra + NH * tile;
  float* const dkv_sums = dq_sums + static_cast<size_t>(NH) * R * HS;
  const long long head_sums = static_cast<long long>(R) * HS;
  const MatOf<E> d = dqkv;
  const bool summed = sums != nullptr;
  if (!kHalf && !summed)
    Kokkos::parallel_for(  // dk and dv are sums over query blocks
        "attention_zero_dkv", Kokkos::RangePolicy<Exec>(exec, 0, s.B * T * KV),
        KOKKOS_LAMBDA(int e) { d(e / KV, C + e % KV) = E::store(0.0f); });
  for (int b = 0; b < s.B; ++b) {
    if (kHalf && !summed)
      Kokkos::parallel_for(
          "attention_zero_dkv", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(T) * KV),
          KOKKOS_LAMBDA(size_t e) { dkv_sums[e] = 0.0f; });
    for (int r0 = 0; r0 < part.q_rows; r0 += R) {
      const int rows = part.q_rows - r0 < R ? part.q_rows - r0 : R;
      const int keys_end = r0 + rows + shift < part.k_rows ? r0 + rows + shift : part.k_rows;
      const size_t first = static_cast<size_t>(b) * T + part.q_first + r0;
      const Stored* q_block = qkv.data() + first * ld_qkv;
      const Stored* g_block = dout.data() + first * ld_dout;
      const Stored* o_block = out.data() + first * ld_out;
      // Where dq sums: into the given sums, into dqkv (fp32) or per head into dq_sums (16-bit).
      float* dq_base = dq_sums;
      int dq_ld = HS;
      long long dq_head = head_sums;
      if (summed) {
        dq_base = sums->dq + first * sums->ld_dq;
        dq_ld = sums->ld_dq;
        dq_head = HS;
      } else if constexpr (!kHalf) {
        dq_base = reinterpret_cast<float*>(dqkv.data() + first * ld_dqkv);
        dq_ld = ld_dqkv;
        dq_head = HS;
      }
      Kokkos::parallel_for(
          "attention_row_dot", row_teams(exec, NH * rows), KOKKOS_LAMBDA(const TeamMember& team) {
            const int h = team.league_rank() / rows, i = team.league_rank() % rows;
            const Stored* g_row = g_block + static_cast<size_t>(i) * ld_dout + h * HS;
            const Stored* o_row = o_block + static_cast<size_t>(i) * ld_out + h * HS;
            const float dot =
                team_sum(team, HS, [&](int e) { return E::load(g_row[e]) * E::load(o_row[e]); });
            Kokkos::single(Kokkos::PerTeam(team), [&] { row_dot[h * R + i] = dot; });
          });
      for (int c0 = 0; c0 < keys_end; c0 += K) {
        const int cols = keys_end - c0 < K ? keys_end - c0 : K;
        const size_t key_row = static_cast<size_t>(b) * T + part.k_first + c0;
        const Stored* k_tile = kv.data + key_row * ld_kv;
        const Stored* v_tile = k_tile + KVH * HS;
        // Where the tile's dk | dv sum: the given sums, dqkv (fp32) or dkv_sums (16-bit).
        float* dk_base = dkv_sums + static_cast<size_t>(part.k_first + c0) * KV;
        int dk_ld = KV;
        if (summed) {
          dk_base = sums->dkv + key_row * sums->ld_dkv;
          dk_ld = sums->ld_dkv;
        } else if constexpr (!kHalf) {
          dk_base = reinterpret_cast<float*>(dqkv.data() + key_row * ld_dqkv + C);
          dk_ld = ld_dqkv;
        }
        for (int j = 0; j < G; ++j) {  // query head g G + j reads key/value head g
          gemm_heads<E>(exec, 'N', 'T', rows, cols, HS, scale, q_block + j * HS, ld_qkv, G * HS,
                        k_tile, ld_kv, HS, 0.0f, probs + j * tile, K, G * tile, KVH);
          gemm_heads<E>(exec, 'N', 'T', rows, cols, HS, 1.0f, g_block + j * HS, ld_dout, G * HS,
                        v_tile, ld_kv, HS, 0.0f, grads + j * tile, K, G * tile, KVH);
        }
        batched_softmax_backward<E>(
            exec, probs, grads, probs16, grads16, row_dot,
            lse.data() + static_cast<size_t>(b) * NH * T + part.q_first + r0, T, NH, R, K, rows,
            cols, r0 + shift - c0, scale);
        // The products read the probabilities and score gradients as rounded (16-bit) or fp32.
        const Stored* p = kHalf ? probs16 : reinterpret_cast<const Stored*>(probs);
        const Stored* ds = kHalf ? grads16 : reinterpret_cast<const Stored*>(grads);
        const float beta = c0 == 0 && !summed ? 0.0f : 1.0f;
        // dk and dv of key/value head g sum over its G query heads: one batched call per j.
        for (int j = 0; j < G; ++j) {
          const long long at = j * tile, every = G * tile;
          gemm_heads<E>(exec, 'N', 'N', rows, HS, cols, 1.0f, ds + at, K, every, k_tile, ld_kv, HS,
                        beta, dq_base + j * dq_head, dq_ld, G * dq_head, KVH);
          gemm_heads<E>(exec, 'T', 'N', cols, HS, rows, 1.0f, ds + at, K, every, q_block + j * HS,
                        ld_qkv, G * HS, 1.0f, dk_base, dk_ld, HS, KVH);
          gemm_heads<E>(exec, 'T', 'N', cols, HS, rows, 1.0f, p + at, K, every, g_block + j * HS,
                        ld_dout, G * HS, 1.0f, dk_base + KVH * HS, dk_ld, HS, KVH);
        }
      }
      if (kHalf && !summed)
        Kokkos::parallel_for(
            "attention_store_dq", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(rows) * C),
            KOKKOS_LAMBDA(size_t e) {
              const int i = static_cast<int>(e / C), c = static_cast<int>(e % C);
              const int h = c / HS, x = c % HS;
              d(first + i, c) =
                  E::store(dq_sums[h * head_sums + static_cast<long long>(i) * HS + x]);
            });
    }
    if (kHalf && !summed)
      Kokkos::parallel_for(
          "attention_store_dkv", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<size_t>(T) * KV),
          KOKKOS_LAMBDA(size_t e) {
            const size_t t = e / KV, c = e % KV;
            d(static_cast<size_t>(b) * T + t, C + c) = E::store(dkv_sums[e]);
          });
  }
}

template <class E = Fp32Elements>
inline void attention_backward_batched(const Exec& exec, const MatOf<E>& dqkv, const Vec& scratch,
                                       const ConstMatOf<E>& dout, const ConstMatOf<E>& qkv,
                                       const ConstMatOf<E>& out, const ConstVec& lse,
                                       AttentionShape s, AttentionTiles tiles) {
  attention_backward_batched<E>(exec, dqkv, scratch, dout, qkv, packed_key_values<E>(qkv, s), out,
                                lse, s, tiles, whole_sequence(s.T), nullptr);
}

// The attention of this build on tensors stored as E: batched on GPUs, tiled per (sequence, head)
// on host spaces, with the tiles `asked` for (attention_tiles; {0, 0}: the build's default).
// scratch: attention_scratch_elements(B, NH, HS, T, E::format, asked) floats.
template <class E = Fp32Elements>
inline void attention_forward(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                              const Vec& scratch, const ConstMatOf<E>& qkv, AttentionShape s,
                              AttentionTiles asked = {0, 0}) {
  Region region("trident::attention_forward");
  const AttentionTiles tiles = attention_tiles(s.T, asked);
#if defined(KOKKOS_ENABLE_CUDA)
  attention_forward_batched<E>(exec, out, lse, scratch, qkv, s, tiles);
#else
  attention_forward_tiled<E>(exec, out, lse, scratch, qkv, s, tiles);
#endif
}

template <class E = Fp32Elements>
inline void attention_backward(const Exec& exec, const MatOf<E>& dqkv, const Vec& scratch,
                               const ConstMatOf<E>& dout, const ConstMatOf<E>& qkv,
                               const ConstMatOf<E>& out, const ConstVec& lse, AttentionShape s,
                               AttentionTiles asked = {0, 0}) {
  Region region("trident::attention_backward");
  const AttentionTiles tiles = attention_tiles(s.T, asked);
#if defined(KOKKOS_ENABLE_CUDA)
  attention_backward_batched<E>(exec, dqkv, scratch, dout, qkv, out, lse, s, tiles);
#else
  attention_backward_tiled<E>(exec, dqkv, scratch, dout, qkv, out, lse, s, tiles);
#endif
}

// One part of an attention (context parallelism): the queries of qkv against the keys and values
// of kv [B*T, 2 KVH HS], into out and lse (merged with what they hold when part.merge). The
// scratch as for attention_forward.
template <class E = Fp32Elements>
inline void attention_forward_part(const Exec& exec, const MatOf<E>& out, const Vec& lse,
                                   const Vec& scratch, const ConstMatOf<E>& qkv,
                                   const ConstMatOf<E>& kv, AttentionShape s, AttentionPart part,
                                   AttentionTiles asked = {0, 0}) {
  Region region("trident::attention_forward_part");
  const AttentionTiles tiles = attention_tiles(s.T, asked);
  const KeyValueRows<typename E::Stored> rows{kv.data(), static_cast<int>(kv.stride(0))};
#if defined(KOKKOS_ENABLE_CUDA)
  attention_forward_batched<E>(exec, out, lse, scratch, qkv, rows, s, tiles, part);
#else
  attention_forward_tiled<E>(exec, out, lse, scratch, qkv, rows, s, tiles, part);
#endif
}

// The part's gradients, from dout and the whole attention's out and lse (every part merged),
// added to sums: dq of qkv's queries, dk | dv of kv's rows.
template <class E = Fp32Elements>
inline void attention_backward_part(const Exec& exec, const AttentionGradSums& sums,
                                    const Vec& scratch, const ConstMatOf<E>& dout,
                                    const ConstMatOf<E>& qkv, const ConstMatOf<E>& kv,
                                    const ConstMatOf<E>& out, const ConstVec& lse, AttentionShape s,
                                    AttentionPart part, AttentionTiles asked = {0, 0}) {
  Region region("trident::attention_backward_part");
  const AttentionTiles tiles = attention_tiles(s.T, asked);
  const KeyValueRows<typename E::Stored> rows{kv.data(), static_cast<int>(kv.stride(0))};
#if defined(KOKKOS_ENABLE_CUDA)
  attention_backward_batched<E>(exec, MatOf<E>(), scratch, dout, qkv, rows, out, lse, s, tiles,
                                part, &sums);
#else
  attention_backward_tiled<E>(exec, MatOf<E>(), scratch, dout, qkv, rows, out, lse, s, tiles, part,
                              &sums);
#endif
}

}  // namespace trident::kernels
