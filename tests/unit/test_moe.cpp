// Mixture-of-Experts kernels: routing choices, ties, drops under both policies, the balancing
// losses and the router's gradient against double-precision references and finite differences,
// and the token movement (dispatch, combine) with its backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/moe_permute.hpp"
#include "kernels/moe_routing.hpp"
#include "test_space.hpp"

using namespace trident;
using namespace trident::kernels;

namespace {

// Host-filled buffers the kernels see as windows (unified memory on GPU builds).
template <class T>
class Buffer {
 public:
  Buffer(size_t rows, size_t cols = 1) : cols_(cols), view_("moe_test", rows * cols) {}
  T& operator()(size_t i, size_t j = 0) const { return view_(i * cols_ + j); }
  T& flat(size_t i) const { return view_(i); }
  using Window = Kokkos::View<T**, Kokkos::LayoutRight, Device, Unmanaged>;
  using Flat = Kokkos::View<T*, Kokkos::LayoutRight, Device, Unmanaged>;
  Window mat() const { return Window(view_.data(), view_.extent(0) / cols_, cols_); }
  Flat vec() const { return Flat(view_.data(), view_.extent(0)); }
  size_t size() const { return view_.extent(0); }

 private:
  size_t cols_;
  Kokkos::View<T*, Kokkos::LayoutRight, TestSpace> view_;
};
using Floats = Buffer<float>;
using Ints = Buffer<int32_t>;

// Everything one routed group holds.
struct Routed {
  RoutingShape shape;
  Floats logits, scores, weight;
  Ints choice, row, counts, offsets;
  Ints listed, listed_offsets, kept;
  explicit Routed(RoutingShape s)
      : shape(s),
        logits(s.tokens, s.experts),
        scores(s.tokens, s.experts),
        weight(s.tokens, s.top_k),
        choice(s.tokens, s.top_k),
        row(s.tokens, s.top_k),
        counts(s.experts),
        offsets(s.experts + 1),
        listed(s.slots()),
        listed_offsets(s.experts + 1),
        kept(s.slots()) {}

  void route(RouterScore kind, DropPolicy policy, const Floats* bias = nullptr) {
    const Exec exec;
    router_scores(exec, scores.mat(), logits.mat(), kind);
    router_top_k(exec, choice.mat(), weight.mat(), scores.mat(),
                 bias ? ConstVec(bias->vec()) : ConstVec());
    router_dispatch_plan(exec, row.mat(), counts.vec(), offsets.vec(),
                         {listed.vec(), listed_offsets.vec(), kept.vec()}, choice.mat(),
                         scores.mat(), shape, policy);
    exec.fence();
  }
  int dropped() const {
    int n = 0;
    for (int i = 0; i < shape.slots(); ++i) n += row(i / shape.top_k, i % shape.top_k) < 0;
    return n;
  }
};

void fill_normal(const Floats& b, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (size_t i = 0; i < b.size(); ++i) b.flat(i) = normal(rng);
}

// The k best experts of one token by key, ties to the lower index (a sort, not a scan).
std::vector<int> reference_top_k(const std::vector<double>& key, int k) {
  std::vector<int> order(key.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
  order.resize(k);
  return order;
}

}  // namespace

TEST(MoeRouting, SoftmaxTopKPicksTheBestAndRenormalises) {
  Routed r({37, 8, 2, 0});
  fill_normal(r.logits, 1, 2.0f);
  r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
  for (int t = 0; t < 37; ++t) {
    std::vector<double> p(8);
    double sum = 0;
    for (int e = 0; e < 8; ++e) sum += p[e] = std::exp(double(r.logits(t, e)));
    for (double& v : p) v /= sum;
    const std::vector<int> best = reference_top_k(p, 2);
    for (int s = 0; s < 2; ++s) {
      ASSERT_EQ(r.choice(t, s), best[s]) << "token " << t << " slot " << s;
      EXPECT_NEAR(r.weight(t, s), p[best[s]] / (p[best[0]] + p[best[1]]), 1e-6);
      EXPECT_NEAR(r.scores(t, best[s]), p[best[s]], 1e-6);
    }
  }
}

TEST(MoeRouting, TiesGoToTheLowerExpert) {
  Routed r({3, 6, 3, 0});
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < 6; ++e) r.logits(t, e) = e == 4 && t == 1 ? 1.0f : 0.5f;
  r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
  EXPECT_EQ(std::vector<int>({r.choice(0, 0), r.choice(0, 1), r.choice(0, 2)}),
            std::vector<int>({0, 1, 2}));
  EXPECT_EQ(std::vector<int>({r.choice(1, 0), r.choice(1, 1), r.choice(1, 2)}),
            std::vector<int>({4, 0, 1}));
}

TEST(MoeRouting, SigmoidBiasShiftsTheChoiceButNotTheWeights) {
  Routed r({16, 8, 2, 0});
  fill_normal(r.logits, 2);
  Floats bias(8);
  for (int e = 0; e < 8; ++e) bias(e) = e == 5 ? 10.0f : 0.0f;  // expert 5 always chosen first
  r.route(RouterScore::kSigmoid, DropPolicy::kProbs, &bias);
  for (int t = 0; t < 16; ++t) {
    std::vector<double> s(8), key(8);
    for (int e = 0; e < 8; ++e) {
      s[e] = 1.0 / (1.0 + std::exp(-double(r.logits(t, e))));
      key[e] = s[e] + bias(e);
    }
    const std::vector<int> best = reference_top_k(key, 2);
    ASSERT_EQ(best[0], 5);
    for (int q = 0; q < 2; ++q) {
      ASSERT_EQ(r.choice(t, q), best[q]);
      EXPECT_NEAR(r.weight(t, q), s[best[q]] / (s[best[0]] + s[best[1]]), 1e-6);
    }
  }
}

TEST(MoeRouting, DroplessKeepsEverySlotInTokenOrderByExpert) {
  Routed r({29, 4, 2, 0});
  fill_normal(r.logits, 3);
  r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
  EXPECT_EQ(r.dropped(), 0);
  std::vector<int> seen(r.shape.slots(), 0);
  EXPECT_EQ(r.offsets(0), 0);
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(r.offsets(e + 1) - r.offsets(e), r.counts(e));
    int next = r.offsets(e);  // this expert's slots take its rows in token order
    for (int t = 0; t < 29; ++t)
      for (int s = 0; s < 2; ++s)
        if (r.choice(t, s) == e) {
          EXPECT_EQ(r.row(t, s), next++);
          ++seen[r.row(t, s)];
        }
  }
  EXPECT_EQ(r.offsets(4), r.shape.slots());
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), r.shape.slots());
}

// Capacity 2 on expert 0: token 0's second choice and tokens 1, 2 and 3's first choices want it.
void skew_towards_expert_zero(Routed& r) {
  const float table[4][4] = {{0.0f, 3.0f, -5.0f, -5.0f},  // first 1, second 0
                             {2.0f, 1.0f, -5.0f, -5.0f},  // first 0 (the lowest first choice)
                             {4.0f, -5.0f, 1.0f, -5.0f},  // first 0 (the highest probability)
                             {3.0f, -5.0f, -5.0f, 1.0f}};
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < 4; ++e) r.logits(t, e) = table[t][e];
}

TEST(MoeRouting, PositionPolicyPlacesEveryFirstChoiceBeforeAnySecond) {
  Routed r({4, 4, 2, 2});
  skew_towards_expert_zero(r);
  r.route(RouterScore::kSoftmax, DropPolicy::kPosition);
  ASSERT_EQ(r.counts(0), 4);
  EXPECT_LT(r.row(0, 1), 0) << "token 0's second choice must go before the first choices";
  EXPECT_GE(r.row(1, 0), 0);
  EXPECT_GE(r.row(2, 0), 0);
  EXPECT_LT(r.row(3, 0), 0) << "first choices keep token order";
  EXPECT_EQ(r.dropped(), 2);
  EXPECT_EQ(r.offsets(1) - r.offsets(0), 2);
}

TEST(MoeRouting, ProbsPolicyKeepsTheHighestScores) {
  Routed r({4, 4, 2, 2});
  skew_towards_expert_zero(r);
  r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
  // Expert 0's probabilities: token 2 > token 3 > token 1 > token 0.
  EXPECT_GE(r.row(2, 0), 0);
  EXPECT_GE(r.row(3, 0), 0);
  EXPECT_LT(r.row(1, 0), 0);
  EXPECT_LT(r.row(0, 1), 0);
  EXPECT_LT(r.row(2, 0), r.row(3, 0)) << "kept rows stay in token order";
}

TEST(MoeRouting, CapacityDropsMatchAReferenceOnASkewedRouter) {
  for (const DropPolicy policy : {DropPolicy::kProbs, DropPolicy::kPosition}) {
    const int T = 40, E = 8, k = 2, capacity = 6;
    Routed r({T, E, k, capacity});
    fill_normal(r.logits, 4);
    for (int t = 0; t < T; ++t) r.logits(t, 0) += 2.0f, r.logits(t, 1) += 1.0f;  // skewed
    r.route(RouterScore::kSoftmax, policy);
    ASSERT_GT(r.dropped(), 0);
    for (int e = 0; e < E; ++e) {
      std::vector<std::array<double, 3>> wanted;  // (order key, token, slot)
      for (int t = 0; t < T; ++t)
        for (int s = 0; s < k; ++s)
          if (r.choice(t, s) == e)
            wanted.push_back({policy == DropPolicy::kPosition
                                  ? double(s * T + t)
                                  : -double(r.scores(t, e)) * 1e3 + t * 1e-6,
                              double(t), double(s)});
      std::sort(wanted.begin(), wanted.end());
      for (size_t i = 0; i < wanted.size(); ++i) {
        const int t = int(wanted[i][1]), s = int(wanted[i][2]);
        EXPECT_EQ(r.row(t, s) >= 0, int(i) < capacity) << "expert " << e << " token " << t;
      }
      EXPECT_EQ(r.offsets(e + 1) - r.offsets(e), std::min<int>(capacity, wanted.size()));
    }
  }
}

// Ranks that split a group's tokens (tp under sequence parallelism) keep the group's drops, and
// their rows of each expert, laid end to end in rank order, are the group's rows of it.
TEST(MoeRouting, LocalPlansSplitTheGroupPlan) {
  for (const DropPolicy policy : {DropPolicy::kProbs, DropPolicy::kPosition}) {
    const int T = 24, E = 4, k = 2, capacity = 7, parts = 3, n = T / parts;
    Routed r({T, E, k, capacity});
    fill_normal(r.logits, 11);
    for (int t = 0; t < T; ++t) r.logits(t, 2) += 1.5f;  // skewed: expert 2 drops
    r.route(RouterScore::kSoftmax, policy);
    ASSERT_GT(r.dropped(), 0);
    std::vector<int> before(E, 0);  // expert e's rows held by earlier parts
    for (int part = 0; part < parts; ++part) {
      Ints local_row(n, k), local_offsets(E + 1);
      const Exec exec;
      router_local_plan(exec, local_row.mat(), local_offsets.vec(), r.row.mat(), r.choice.mat(),
                        part * n);
      exec.fence();
      std::vector<int> held(E, 0);
      for (int i = 0; i < n; ++i)
        for (int s = 0; s < k; ++s) {
          const int t = part * n + i, e = r.choice(t, s);
          ASSERT_EQ(local_row(i, s) < 0, r.row(t, s) < 0) << "token " << t;
          if (r.row(t, s) < 0) continue;
          EXPECT_EQ(local_row(i, s) - local_offsets(e), r.row(t, s) - r.offsets(e) - before[e])
              << "token " << t << " slot " << s;
          ++held[e];
        }
      for (int e = 0; e < E; ++e) {
        EXPECT_EQ(local_offsets(e + 1) - local_offsets(e), held[e]);
        before[e] += held[e];
      }
    }
    for (int e = 0; e < E; ++e) EXPECT_EQ(before[e], r.offsets(e + 1) - r.offsets(e));
  }
}

// The router's backward over a rank's share of the tokens is the group's, row for row: the
// balancing losses normalise by the group's tokens and counts.
TEST(MoeRouting, RouterBackwardOnAShareIsTheGroupsRows) {
  const int T = 12, E = 5, k = 2, first = 4, n = 6;
  Routed r({T, E, k, 0});
  fill_normal(r.logits, 12);
  r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
  Floats g(T, k), whole(T, E), share(n, E);
  fill_normal(g, 13);
  const RouterLossScales scales{0.3f, 0.2f};
  const auto rows = [&](const Floats& b, int cols) {
    return ConstMat(b.mat().data() + static_cast<size_t>(first) * cols, n, cols);
  };
  const Exec exec;
  router_backward(exec, whole.mat(), g.mat(), r.scores.mat(), r.logits.mat(), r.choice.mat(),
                  r.weight.mat(), r.counts.vec(), RouterScore::kSoftmax, scales, T);
  router_backward(exec, share.mat(), rows(g, k), rows(r.scores, E), rows(r.logits, E),
                  ConstIntMat(r.choice.mat().data() + first * k, n, k), rows(r.weight, k),
                  r.counts.vec(), RouterScore::kSoftmax, scales, T);
  exec.fence();
  for (int i = 0; i < n * E; ++i)
    EXPECT_EQ(share(i / E, i % E), whole(first + i / E, i % E)) << "element " << i;
}

TEST(MoeRouting, BalancedAuxLossIsOneForAnyTopK) {
  // Every expert gets the same share of slots and the same mean probability: E Σ f P = 1. A loss
  // that divided counts by T instead of T k would read k.
  for (const int k : {1, 2, 4}) {
    const int E = 4, T = 8;
    Routed r({T, E, k, 0});
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < E; ++e) r.logits(t, e) = -1e-3f * (((e - t) % E + E) % E);  // a rotation
    r.route(RouterScore::kSoftmax, DropPolicy::kProbs);
    for (int e = 0; e < E; ++e) ASSERT_EQ(r.counts(e), T * k / E) << "k " << k;
    Floats out(2), mass(E);
    const Exec exec;
    router_losses(exec, out.vec(), mass.vec(), r.scores.mat(), r.logits.mat(), r.counts.vec(),
                  RouterScore::kSoftmax, k);
    exec.fence();
    EXPECT_NEAR(out(0), 1.0, 1e-5) << "k " << k;
  }
}

TEST(MoeRouting, LossesMatchDoubleSums) {
  for (const RouterScore kind : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    const int T = 23, E = 6, k = 2;
    Routed r({T, E, k, 0});
    fill_normal(r.logits, 5, 1.5f);
    r.route(kind, DropPolicy::kProbs);
    Floats out(2), mass(E);
    const Exec exec;
    router_losses(exec, out.vec(), mass.vec(), r.scores.mat(), r.logits.mat(), r.counts.vec(), kind,
                  k);
    exec.fence();
    double aux = 0, z = 0;
    std::vector<double> mean_q(E, 0.0);
    for (int t = 0; t < T; ++t) {
      double sum = 0, sig = 0, most = -1e30;
      std::vector<double> q(E);
      for (int e = 0; e < E; ++e) most = std::max(most, double(r.logits(t, e)));
      for (int e = 0; e < E; ++e) sum += std::exp(double(r.logits(t, e)) - most);
      for (int e = 0; e < E; ++e) sig += 1 / (1 + std::exp(-double(r.logits(t, e))));
      for (int e = 0; e < E; ++e)
        mean_q[e] +=
            (kind == RouterScore::kSoftmax ? std::exp(double(r.logits(t, e)) - most) / sum
                                           : 1 / (1 + std::exp(-double(r.logits(t, e)))) / sig) /
            T;
      z += std::pow(most + std::log(sum), 2) / T;
    }
    for (int e = 0; e < E; ++e) aux += E * double(r.counts(e)) / (T * k) * mean_q[e];
    EXPECT_NEAR(out(0), aux, 1e-5 * aux);
    EXPECT_NEAR(out(1), z, 1e-5 * z);
  }
}

// The router's gradient against central differences of L = Σ g·w + a·aux + z·zloss with the
// choice and counts held (they are piecewise constant).
TEST(MoeRouting, RouterBackwardMatchesFiniteDifferences) {
  for (const RouterScore kind : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    const int T = 5, E = 6, k = 2;
    Routed r({T, E, k, 0});
    fill_normal(r.logits, 6);
    r.route(kind, DropPolicy::kProbs);
    Floats g(T, k), dlogits(T, E);
    fill_normal(g, 7);
    const RouterLossScales scales{0.3f, 0.2f};
    const Exec exec;
    router_backward(exec, dlogits.mat(), g.mat(), r.scores.mat(), r.logits.mat(), r.choice.mat(),
                    r.weight.mat(), r.counts.vec(), kind, scales, T);
    exec.fence();
    // The objective in double, with the choices fixed.
    auto objective = [&](const std::vector<double>& x) {
      double L = 0, z = 0;
      std::vector<double> mean_q(E, 0.0);
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(E);
        double most = -1e30, sum = 0, total = 0;
        for (int e = 0; e < E; ++e) most = std::max(most, x[t * E + e]);
        for (int e = 0; e < E; ++e) sum += std::exp(x[t * E + e] - most);
        for (int e = 0; e < E; ++e)
          s[e] = kind == RouterScore::kSoftmax ? std::exp(x[t * E + e] - most) / sum
                                               : 1 / (1 + std::exp(-x[t * E + e]));
        for (int e = 0; e < E; ++e) total += s[e];
        const double norm = kind == RouterScore::kSoftmax ? 1.0 : total;
        for (int e = 0; e < E; ++e) mean_q[e] += s[e] / norm / T;
        const double chosen = s[r.choice(t, 0)] + s[r.choice(t, 1)];
        for (int q = 0; q < k; ++q) L += g(t, q) * s[r.choice(t, q)] / chosen;
        z += std::pow(most + std::log(sum), 2) / T;
      }
      double aux = 0;
      for (int e = 0; e < E; ++e) aux += E * double(r.counts(e)) / (T * k) * mean_q[e];
      return L + scales.aux * aux + scales.z * z;
    };
    std::vector<double> x(T * E);
    for (int i = 0; i < T * E; ++i) x[i] = r.logits(i / E, i % E);
    for (int i = 0; i < T * E; ++i) {
      const double h = 1e-5;
      std::vector<double> up = x, down = x;
      up[i] += h;
      down[i] -= h;
      const double numeric = (objective(up) - objective(down)) / (2 * h);
      EXPECT_NEAR(dlogits(i / E, i % E), numeric, 2e-5 + 1e-4 * std::abs(numeric))
          << (kind == RouterScore::kSoftmax ? "softmax" : "sigmoid") << " logit " << i;
    }
  }
}

TEST(MoeRouting, ExpertBiasMovesTowardsTheMeanLoad) {
  Floats bias(4), counts(4);
  const float c[4] = {9, 1, 3, 3};  // mean 4
  for (int e = 0; e < 4; ++e) bias(e) = 0.5f, counts(e) = c[e];
  const Exec exec;
  expert_bias_update(exec, bias.vec(), counts.vec(), 0.125f);
  exec.fence();
  EXPECT_EQ(bias(0), 0.375f);
  EXPECT_EQ(bias(1), 0.625f);
  EXPECT_EQ(bias(2), 0.625f);
  counts(0) = 4, counts(1) = 4, counts(2) = 4, counts(3) = 4;
  expert_bias_update(exec, bias.vec(), counts.vec(), 0.125f);  // balanced: no move
  exec.fence();
  EXPECT_EQ(bias(3), 0.625f);
}

TEST(MoePermute, CombineAndItsBackwardMatchLoopsWithDrops) {
  const int T = 9, E = 4, k = 2, C = 5;
  Routed r({T, E, k, 3});
  fill_normal(r.logits, 8);
  for (int t = 0; t < T; ++t) r.logits(t, 2) += 3.0f;  // expert 2 overflows
  r.route(RouterScore::kSoftmax, DropPolicy::kPosition);
  ASSERT_GT(r.dropped(), 0);
  const int rows = r.offsets(E);
  Floats x(T, C), dispatched(rows, C), y(rows, C), out(T, C), dout(T, C), dy(rows, C),
      dweight(T, k), dx(T, C);
  fill_normal(x, 9);
  fill_normal(y, 10);
  fill_normal(dout, 11);
  const Exec exec;
  moe_dispatch_rows(exec, dispatched.mat(), x.mat(), r.row.mat());
  moe_combine(exec, out.mat(), y.mat(), r.row.mat(), r.weight.mat());
  moe_combine_backward(exec, dy.mat(), dweight.mat(), dout.mat(), y.mat(), r.row.mat(),
                       r.weight.mat());
  moe_dispatch_rows_backward(exec, dx.mat(), dy.mat(), r.row.mat(), ConstMat());
  exec.fence();
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double sum = 0, grad = 0;
      for (int s = 0; s < k; ++s) {
        const int row = r.row(t, s);
        if (row < 0) continue;
        EXPECT_EQ(dispatched(row, c), x(t, c));
        sum += double(r.weight(t, s)) * y(row, c);
        EXPECT_FLOAT_EQ(dy(row, c), r.weight(t, s) * dout(t, c));
        grad += double(r.weight(t, s)) * dout(t, c);
      }
      EXPECT_NEAR(out(t, c), sum, 1e-6);
      EXPECT_NEAR(dx(t, c), grad, 1e-6);
    }
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < k; ++s) {
      double dot = 0;
      if (r.row(t, s) >= 0)
        for (int c = 0; c < C; ++c) dot += double(dout(t, c)) * y(r.row(t, s), c);
      EXPECT_NEAR(dweight(t, s), dot, 1e-5) << "a dropped slot's weight gets no gradient";
    }
}
