// Context parallelism's split of a sequence: balanced chunks, global positions, attention parts
// that cover every causal (query, key) pair of the sequence exactly once, and the kernels of both
// shapes computing those parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "model/context_parallel.hpp"
#include "test_space.hpp"

using namespace trident;
using kernels::MatOf;

TEST(ContextSplit, RankHoldsChunkRAndItsMirror) {
  const ContextSplit split{4, 1, 32};  // 8 chunks of 4 tokens: rank 1 holds chunks 1 and 6
  EXPECT_EQ(split.chunk(), 4);
  EXPECT_EQ(split.local(), 8);
  const std::vector<int> want{4, 5, 6, 7, 24, 25, 26, 27};
  for (int t = 0; t < split.local(); ++t) EXPECT_EQ(split.position(t), want[t]) << t;
}

// Every query of every rank sees, over the parts of every source, each key at or before its
// position exactly once and no key after it; the first part a query meets starts its softmax
// (merge false) and every later one merges. Balanced, every rank does the same number of score
// products; cut in contiguous blocks, each rank does more than the one before (the imbalance the
// balanced chunks remove: bench/context_parallel.sh shows it in step time).
TEST(ContextSplit, PartsCoverEveryCausalPairOnce) {
  for (const bool balanced : {true, false})
    for (int cp = 1; cp <= 8; ++cp) {
      const int T = 2 * cp * 3;  // chunks of 3
      std::vector<long> work(cp, 0);
      for (int rank = 0; rank < cp; ++rank) {
        const ContextSplit split{cp, rank, T, balanced};
        std::vector<int> seen(size_t(T) * T, 0);  // [query position, key position]
        std::vector<int> parts_met(split.local(), 0);
        for (int step = 0; step < cp; ++step) {
          const int source = (rank + cp - step) % cp;
          const ContextSplit from{cp, source, T, balanced};
          for (const kernels::AttentionPart& part : context_parts(split, source)) {
            ASSERT_GE(part.shift, 0);
            for (int i = 0; i < part.q_rows; ++i) {
              const int q_row = part.q_first + i;
              EXPECT_EQ(part.merge, parts_met[q_row] > 0)
                  << "cp " << cp << " rank " << rank << " source " << source << " row " << q_row;
              ++parts_met[q_row];
              for (int j = 0; j < part.k_rows && j <= i + part.shift; ++j) {
                ++seen[size_t(split.position(q_row)) * T + from.position(part.k_first + j)];
                ++work[rank];
              }
            }
          }
        }
        for (int t = 0; t < split.local(); ++t)
          for (int key = 0; key < T; ++key)
            ASSERT_EQ(seen[size_t(split.position(t)) * T + key], key <= split.position(t) ? 1 : 0)
                << (balanced ? "balanced" : "contiguous") << " cp " << cp << " rank " << rank
                << " query " << split.position(t) << " key " << key;
      }
      for (int rank = 1; rank < cp; ++rank)
        if (balanced)
          EXPECT_EQ(work[rank], work[0]) << "cp " << cp;
        else
          EXPECT_GT(work[rank], work[rank - 1]) << "contiguous cp " << cp;
    }
}

namespace {

template <class T>
using HostView = Kokkos::View<T*, Kokkos::LayoutRight, TestSpace>;
using HostFloats = HostView<float>;

template <class T>
HostView<T> buffer(size_t n, T value) {
  HostView<T> v("v", n);
  for (size_t i = 0; i < n; ++i) v(i) = value;
  return v;
}

template <class T>
Kokkos::View<T**, Kokkos::LayoutRight, Device, Unmanaged> mat(const HostView<T>& v, size_t rows,
                                                              size_t cols) {
  return Kokkos::View<T**, Kokkos::LayoutRight, Device, Unmanaged>(v.data(), rows, cols);
}

enum class Path { kTiled, kBatched };

template <class E>
void forward_part(Path path, const MatOf<E>& out, const HostFloats& lse, const HostFloats& scratch,
                  const MatOf<E>& qkv, const MatOf<E>& kv, const kernels::AttentionShape& s,
                  const kernels::AttentionPart& part, kernels::AttentionTiles tiles) {
  const kernels::KeyValueRows<typename E::Stored> rows{kv.data(), static_cast<int>(kv.stride(0))};
#if !defined(KOKKOS_ENABLE_CUDA)
  if (path == Path::kTiled)
    return kernels::attention_forward_tiled<E>(Exec(), out, lse, scratch, qkv, rows, s, tiles,
                                               part);
#endif
  (void)path;
  kernels::attention_forward_batched<E>(Exec(), out, lse, scratch, qkv, rows, s, tiles, part);
}

template <class E>
void backward_part(Path path, const kernels::AttentionGradSums& sums, const HostFloats& scratch,
                   const MatOf<E>& dout, const MatOf<E>& qkv, const MatOf<E>& kv,
                   const MatOf<E>& out, const HostFloats& lse, const kernels::AttentionShape& s,
                   const kernels::AttentionPart& part, kernels::AttentionTiles tiles) {
  const kernels::KeyValueRows<typename E::Stored> rows{kv.data(), static_cast<int>(kv.stride(0))};
#if !defined(KOKKOS_ENABLE_CUDA)
  if (path == Path::kTiled)
    return kernels::attention_backward_tiled<E>(Exec(), MatOf<E>(), scratch, dout, qkv, rows, out,
                                                lse, s, tiles, part, &sums);
#endif
  (void)path;
  kernels::attention_backward_batched<E>(Exec(), MatOf<E>(), scratch, dout, qkv, rows, out, lse, s,
                                         tiles, part, &sums);
}

// Every simulated cp rank's queries against every rank's key/value chunks through `path` with
// tensors stored as E, merged and summed over the parts, against the whole sequence's fp32
// attention of the same (rounded) inputs: the largest |difference| / (1 + |value|) of out, lse,
// dq, dk and dv.
template <class E>
double worst_part_error(Path path, bool balanced, int cp) {
  using Stored = typename E::Stored;
  const kernels::AttentionShape whole{2, 8 * cp, 4, 4, 2};
  const int T = whole.T, Tl = T / cp, B = whole.B, NH = whole.NH, HS = whole.HS;
  const int C = NH * HS, KVW = 2 * whole.kv_heads() * HS, W = C + KVW;
  const kernels::AttentionTiles tiles{3, 5};
  HostFloats qkv = buffer(size_t(B) * T * W, 0.0f), dout = buffer(size_t(B) * T * C, 0.0f);
  std::mt19937 gen(7);
  std::normal_distribution<float> dist;
  for (size_t i = 0; i < qkv.extent(0); ++i) qkv(i) = E::load(E::store(dist(gen)));
  for (size_t i = 0; i < dout.extent(0); ++i) dout(i) = E::load(E::store(dist(gen)));
  HostFloats out = buffer(size_t(B) * T * C, 0.0f), lse = buffer(size_t(B) * NH * T, 0.0f);
  HostFloats dqkv = buffer(size_t(B) * T * W, 0.0f);
  HostFloats scratch =
      buffer(std::max(kernels::attention_tiled_scratch(B, NH, HS, T, tiles, E::format),
                      kernels::attention_batched_scratch(NH, HS, T, tiles, E::format)),
             0.0f);
  kernels::attention_forward_batched<>(Exec(), mat(out, B * T, C), lse, scratch, mat(qkv, B * T, W),
                                       whole, tiles);
  kernels::attention_backward_batched<>(Exec(), mat(dqkv, B * T, W), scratch, mat(dout, B * T, C),
                                        mat(qkv, B * T, W), mat(out, B * T, C), lse, whole, tiles);
  Exec().fence();
  // Each rank's rows, its keys and values apart, and its outputs and sums.
  const kernels::AttentionShape local{B, Tl, NH, HS, whole.KVH};
  std::vector<HostView<Stored>> q(cp), kv(cp), o(cp), g(cp);
  std::vector<HostFloats> l(cp), dq(cp), dkv(cp);
  for (int r = 0; r < cp; ++r) {
    const ContextSplit split{cp, r, T, balanced};
    q[r] = buffer(size_t(B) * Tl * W, E::store(0)),
    kv[r] = buffer(size_t(B) * Tl * KVW, E::store(0));
    g[r] = buffer(size_t(B) * Tl * C, E::store(0)), o[r] = buffer(size_t(B) * Tl * C, E::store(7));
    l[r] = buffer(size_t(B) * NH * Tl, 7.0f), dq[r] = buffer(size_t(B) * Tl * C, 0.0f);
    dkv[r] = buffer(size_t(B) * Tl * KVW, 0.0f);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t) {
        const size_t mine = size_t(b) * Tl + t, global = size_t(b) * T + split.position(t);
        for (int c = 0; c < W; ++c) q[r](mine * W + c) = E::store(qkv(global * W + c));
        for (int c = 0; c < KVW; ++c) kv[r](mine * KVW + c) = E::store(qkv(global * W + C + c));
        for (int c = 0; c < C; ++c) g[r](mine * C + c) = E::store(dout(global * C + c));
      }
  }
  for (int r = 0; r < cp; ++r)
    for (int step = 0; step < cp; ++step) {
      const int source = (r + cp - step) % cp;
      for (const kernels::AttentionPart& part :
           context_parts(ContextSplit{cp, r, T, balanced}, source))
        forward_part<E>(path, mat(o[r], B * Tl, C), l[r], scratch, mat(q[r], B * Tl, W),
                        mat(kv[source], B * Tl, KVW), local, part, tiles);
    }
  for (int r = 0; r < cp; ++r)
    for (int source = 0; source < cp; ++source)
      for (const kernels::AttentionPart& part :
           context_parts(ContextSplit{cp, r, T, balanced}, source))
        backward_part<E>(path, {dq[r].data(), C, dkv[source].data(), KVW}, scratch,
                         mat(g[r], B * Tl, C), mat(q[r], B * Tl, W), mat(kv[source], B * Tl, KVW),
                         mat(o[r], B * Tl, C), l[r], local, part, tiles);
  Exec().fence();
  double worst = 0;
  const auto check = [&](float got, float want) {
    worst = std::max(worst, std::fabs(double(got) - want) / (1.0 + std::fabs(want)));
  };
  for (int r = 0; r < cp; ++r) {
    const ContextSplit split{cp, r, T, balanced};
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t) {
        const size_t mine = size_t(b) * Tl + t, global = size_t(b) * T + split.position(t);
        for (int c = 0; c < C; ++c) {
          check(E::load(o[r](mine * C + c)), out(global * C + c));
          check(dq[r](mine * C + c), dqkv(global * W + c));
        }
        for (int c = 0; c < KVW; ++c) check(dkv[r](mine * KVW + c), dqkv(global * W + C + c));
        for (int h = 0; h < NH; ++h)
          check(l[r]((size_t(b) * NH + h) * Tl + t),
                lse((size_t(b) * NH + h) * T + split.position(t)));
      }
  }
  return worst;
}

}  // namespace

// Both shapes of the attention kernels (the host's per-(sequence, head) tiles and the GPU's
// batched products, which host builds compile too) compute context parallelism's parts: every
// simulated cp rank's queries against every rank's key/value chunks, merged through the
// log-sum-exp, and the gradients summed over the parts, equal the whole sequence's attention at
// the ranks' positions (GQA, tiles that cut across the chunks, both cuts of the sequence): fp32
// to 1e-5, bf16 (outputs rounded between parts) to 3e-2.
TEST(ContextSplit, KernelPartsOfEveryRankMakeTheWholeAttention) {
  for (const Path path : {Path::kTiled, Path::kBatched})
    for (const bool balanced : {true, false})
      for (const int cp : {2, 4}) {
#if defined(KOKKOS_ENABLE_CUDA)
        if (path == Path::kTiled) continue;
#endif
        const std::string what = std::string(path == Path::kTiled ? "tiled" : "batched") +
                                 (balanced ? " balanced" : " contiguous") + " cp " +
                                 std::to_string(cp);
        EXPECT_LT(worst_part_error<kernels::Fp32Elements>(path, balanced, cp), 1e-5) << what;
        EXPECT_LT(worst_part_error<kernels::Bf16Elements>(path, balanced, cp), 3e-2)
            << what << " bf16";
      }
}
