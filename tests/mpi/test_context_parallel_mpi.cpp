// Context-parallel attention on 2 and 4 ranks, keys and values on a ring and all-gathered: each
// rank's output, log-sum-exp and gradients of q, k and v equal the whole sequence's attention at
// the rank's global positions, with grouped-query heads and tiles that cut across the chunks,
// in fp32 and bf16.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "comm/comm.hpp"
#include "core/half.hpp"
#include "core/stored.hpp"
#include "kernels/attention.hpp"
#include "model/context_parallel.hpp"

using namespace trident;
using kernels::AttentionShape;
using kernels::AttentionTiles;

namespace {

std::vector<float> random_values(size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>((x >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return v;
}

StoredTensor device_values(const std::vector<float>& values, Precision format = Precision::kFp32) {
  StoredTensor t;
  t.format = format;
  if (format == Precision::kFp32)
    t.f32 = View1("values", values.size());
  else
    t.f16 = HalfView1("values", values.size());
  set_host_values(t, 0, values);
  return t;
}

// The values as `format` holds them.
std::vector<float> rounded(std::vector<float> values, Precision format) {
  if (format != Precision::kFp32)
    for (float& v : values) v = from_half(to_half(v, format), format);
  return values;
}

double worst_relative_error = 0;  // over the fp32 cases, printed at the end
bool counting = true;

// max |got - want| over max |want|: the error relative to the tensor's scale.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  if (counting) worst_relative_error = std::max(worst_relative_error, worst / scale);
  return worst / scale;
}

struct WholeAttention {
  std::vector<float> out, lse, dqkv;
};

// The whole sequence's attention on every rank (the kernels that the single-rank tests hold to a
// naive loop and to finite differences).
WholeAttention whole_attention(const AttentionShape& s, const std::vector<float>& qkv,
                               const std::vector<float>& dout, AttentionTiles tiles) {
  const size_t N = size_t(s.B) * s.T, C = size_t(s.NH) * s.HS, W = C + 2 * s.kv_heads() * s.HS;
  const StoredTensor q = device_values(qkv), g = device_values(dout);
  View1 out("out", N * C), lse("lse", N * s.NH), dqkv("dqkv", N * W);
  View1 scratch("scratch",
                kernels::attention_scratch_elements(s.B, s.NH, s.HS, s.T, Precision::kFp32, tiles));
  const Exec exec;
  kernels::attention_forward(exec, Mat(out.data(), N, C), lse, scratch,
                             ConstMat(q.f32.data(), N, W), s, tiles);
  kernels::attention_backward(exec, Mat(dqkv.data(), N, W), scratch, ConstMat(g.f32.data(), N, C),
                              ConstMat(q.f32.data(), N, W), ConstMat(out.data(), N, C), lse, s,
                              tiles);
  exec.fence();
  auto host = [](const View1& v) {
    return host_values(stored_f32(v.data(), v.extent(0)), 0, v.extent(0));
  };
  return {host(out), host(lse), host(dqkv)};
}

// This rank's rows of a [B*T, width] tensor: row t of sequence b at global position
// split.position(t).
std::vector<float> local_rows(const std::vector<float>& whole, const ContextSplit& split, int B,
                              size_t width) {
  std::vector<float> local;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < split.local(); ++t) {
      const size_t row = size_t(b) * split.T + split.position(t);
      local.insert(local.end(), whole.begin() + row * width, whole.begin() + (row + 1) * width);
    }
  return local;
}

// The same for lse [B, NH, T].
std::vector<float> local_lse(const std::vector<float>& whole, const ContextSplit& split, int B,
                             int NH) {
  std::vector<float> local;
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < split.local(); ++t)
      local.push_back(whole[size_t(bh) * split.T + split.position(t)]);
  return local;
}

struct CpCase {
  int cp;
  CpComm how;
  AttentionShape whole;  // B, T, NH, HS, KVH
  AttentionTiles tiles;
  Precision format = Precision::kFp32;
};

void expect_equals_whole_attention(const CpCase& c) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm group;  // ranks 4k..4k+cp-1 in one cp group
  MPI_Comm_split(MPI_COMM_WORLD, world_rank / c.cp, world_rank, &group);
  {
    MpiCommunicator comm(group);
    const AttentionShape& s = c.whole;
    const ContextSplit split{c.cp, comm.rank(), s.T};
    const AttentionShape local{s.B, split.local(), s.NH, s.HS, s.KVH};
    const size_t C = size_t(s.NH) * s.HS, W = C + 2 * s.kv_heads() * s.HS;
    const Precision f = c.format;
    const std::vector<float> qkv = rounded(random_values(size_t(s.B) * s.T * W, 11), f);
    const std::vector<float> dout = rounded(random_values(size_t(s.B) * s.T * C, 12), f);
    const WholeAttention want = whole_attention(s, qkv, dout, c.tiles);

    const size_t N = size_t(s.B) * split.local();
    const StoredTensor q = device_values(local_rows(qkv, split, s.B, W), f);
    const StoredTensor g = device_values(local_rows(dout, split, s.B, C), f);
    const StoredTensor out = device_values(std::vector<float>(N * C, 7.0f), f);  // stale values
    const StoredTensor dqkv = device_values(std::vector<float>(N * W, 7.0f), f);
    View1 lse("lse", N * s.NH);
    const ContextAttentionElements sizes =
        context_attention_elements(split, c.how, s.B, s.NH, s.kv_heads(), s.HS);
    const StoredTensor kv = device_values(std::vector<float>(sizes.kv, 7.0f), f);
    View1 sums("sums", sizes.sums);
    View1 scratch("scratch",
                  kernels::attention_scratch_elements(s.B, s.NH, s.HS, split.local(), f, c.tiles));
    const ContextAttention attention(&comm, c.cp, comm.rank(), c.how);
    const Exec exec;
    attention.forward(exec, out, lse, scratch, q, local, kv, c.tiles);
    attention.backward(exec, dqkv, scratch, g, q, out, lse, local, kv, sums, c.tiles);
    exec.fence();

    // fp32 to 1e-6 of each tensor's scale; 16-bit to the rounding of out, dq, dk and dv (and of
    // the output merged between ring steps) to 16 bits.
    const double tolerance = f == Precision::kFp32 ? 1e-6 : 2e-2;
    const std::string what = std::string(name_of(f)) + " " + name_of(c.how) +
                             " cp=" + std::to_string(c.cp) + " T=" + std::to_string(s.T) +
                             " NH=" + std::to_string(s.NH) +
                             " KVH=" + std::to_string(s.kv_heads()) + " tiles " +
                             std::to_string(c.tiles.rows) + "x" + std::to_string(c.tiles.keys);
    EXPECT_LT(relative_error(host_values(out, 0, N * C), local_rows(want.out, split, s.B, C)),
              tolerance)
        << what << ": out";
    EXPECT_LT(relative_error(host_values(stored_f32(lse.data(), lse.extent(0)), 0, N * s.NH),
                             local_lse(want.lse, split, s.B, s.NH)),
              f == Precision::kFp32 ? 1e-6 : 1e-3)
        << what << ": lse";
    const std::vector<float> got = host_values(dqkv, 0, N * W);
    const std::vector<float> want_d = local_rows(want.dqkv, split, s.B, W);
    // q, k and v separately: each gradient within 1e-6 of its own scale.
    for (const auto& [first, width, name] :
         {std::tuple<size_t, size_t, const char*>{0, C, "dq"},
          {C, size_t(s.kv_heads()) * s.HS, "dk"},
          {C + size_t(s.kv_heads()) * s.HS, size_t(s.kv_heads()) * s.HS, "dv"}}) {
      std::vector<float> a, b;
      for (size_t n = 0; n < N; ++n)
        for (size_t j = first; j < first + width; ++j) {
          a.push_back(got[n * W + j]);
          b.push_back(want_d[n * W + j]);
        }
      EXPECT_LT(relative_error(a, b), tolerance) << what << ": " << name;
    }
    // What travelled: the key/value chunks, in forward and again in backward, cp - 1 times; their
    // fp32 gradients cp - 1 times all-gathered, or cp times around the ring, the last hop home.
    const size_t kv_rows = N * 2 * s.kv_heads() * s.HS;
    const size_t grad_hops = c.how == CpComm::kRing ? c.cp : c.cp - 1;
    EXPECT_EQ(attention.bytes_sent(),
              2 * size_t(c.cp - 1) * kv_rows * bytes_of(f) + grad_hops * kv_rows * sizeof(float))
        << what;
  }
  MPI_Comm_free(&group);
}

}  // namespace

TEST(ContextParallel, RingAndAllGatherEqualTheWholeSequence) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 4);
  for (const int cp : {2, 4})
    for (const CpComm how : {CpComm::kRing, CpComm::kAllgather})
      for (const AttentionShape& s :
           {AttentionShape{2, 8 * cp, 4, 4, 2}, AttentionShape{1, 6 * cp, 6, 2, 1},
            AttentionShape{1, 4 * cp, 2, 3, 2}})
        for (const AttentionTiles tiles : {AttentionTiles{0, 0}, AttentionTiles{3, 5}})
          expect_equals_whole_attention({cp, how, s, tiles});
  counting = false;
  for (const int cp : {2, 4})
    for (const CpComm how : {CpComm::kRing, CpComm::kAllgather})
      expect_equals_whole_attention(
          {cp, how, AttentionShape{2, 8 * cp, 4, 4, 2}, {3, 5}, Precision::kBf16});
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("context-parallel attention: worst error relative to the tensor's scale %.2e\n",
                worst_relative_error);
}
