// The MoE layer (router, top-k, capacity, SwiGLU experts, combine, shared experts) against a
// double-precision reference written from the definition: its output, and every gradient against
// central differences of the same objective with the routing held, dropless and with drops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/memory.hpp"
#include "model/moe_layer.hpp"

using namespace trident;
using namespace trident::kernels;

namespace {

using Doubles = std::vector<double>;

// The layer's inputs and parameters in double, indexed as the layer's tensors.
struct Problem {
  int N, C, E, k, Fe, Fs;  // Fs: the shared experts' width (0: none)
  Doubles x, router, fc, proj, dout, shared_fc, shared_proj;
};

double silu(double v) {
  return v / (1 + std::exp(-v));
}

// Sum(dout * out) + a aux + z zloss with the routing (choice, kept) held: the objective whose
// gradient the layer's backward computes.
double objective(const Problem& p, const std::vector<int>& choice, const std::vector<int>& kept,
                 double a, double z, Doubles* out = nullptr) {
  const int N = p.N, C = p.C, E = p.E, k = p.k, Fe = p.Fe, Fs = p.Fs;
  double total = 0, zloss = 0;
  Doubles mean_p(E, 0.0), counts(E, 0.0);
  for (int t = 0; t < N; ++t) {
    // The shared experts: one SwiGLU MLP of width Fs on every token.
    Doubles hs(Fs);
    for (int f = 0; f < Fs; ++f) {
      double gate = 0, up = 0;
      for (int c = 0; c < C; ++c) {
        gate += p.shared_fc[f * C + c] * p.x[t * C + c];
        up += p.shared_fc[(Fs + f) * C + c] * p.x[t * C + c];
      }
      hs[f] = silu(gate) * up;
    }
    for (int c = 0; c < C && Fs > 0; ++c) {
      double y = 0;
      for (int f = 0; f < Fs; ++f) y += p.shared_proj[c * Fs + f] * hs[f];
      if (out) (*out)[t * C + c] += y;
      total += p.dout[t * C + c] * y;
    }
    Doubles logit(E), prob(E);
    double most = -1e300, sum = 0;
    for (int e = 0; e < E; ++e) {
      logit[e] = 0;
      for (int c = 0; c < C; ++c) logit[e] += p.x[t * C + c] * p.router[e * C + c];
      most = std::max(most, logit[e]);
    }
    for (int e = 0; e < E; ++e) sum += prob[e] = std::exp(logit[e] - most);
    for (int e = 0; e < E; ++e) mean_p[e] += (prob[e] /= sum) / N;
    zloss += std::pow(most + std::log(sum), 2) / N;
    double chosen = 0;
    for (int s = 0; s < k; ++s) chosen += prob[choice[t * k + s]];
    for (int s = 0; s < k; ++s) {
      const int e = choice[t * k + s];
      counts[e] += 1;
      if (!kept[t * k + s]) continue;
      const double w = prob[e] / chosen;
      Doubles h(Fe);
      for (int f = 0; f < Fe; ++f) {
        double gate = 0, up = 0;
        for (int c = 0; c < C; ++c) {
          gate += p.fc[(e * 2 * Fe + f) * C + c] * p.x[t * C + c];
          up += p.fc[(e * 2 * Fe + Fe + f) * C + c] * p.x[t * C + c];
        }
        h[f] = silu(gate) * up;
      }
      for (int c = 0; c < C; ++c) {
        double y = 0;
        for (int f = 0; f < Fe; ++f) y += p.proj[(e * C + c) * Fe + f] * h[f];
        if (out) (*out)[t * C + c] += w * y;
        total += p.dout[t * C + c] * w * y;
      }
    }
  }
  double aux = 0;
  for (int e = 0; e < E; ++e) aux += E * counts[e] / (N * k) * mean_p[e];
  return total + a * aux + z * zloss;
}

StoredTensor f32_tensor(const Doubles& values) {
  StoredTensor t;
  t.f32 = View1("moe_layer_test", values.size());
  set_host_values(t, 0, std::vector<float>(values.begin(), values.end()));
  return t;
}
StoredTensor f32_zeros(size_t n) {
  StoredTensor t;
  t.f32 = View1("moe_layer_test", n);
  return t;
}

std::vector<int> host_ints(const IntView1& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<int>(h.data(), h.data() + h.extent(0));
}

// Central differences of the objective in every element of `values`, against `got`.
void expect_gradient(Problem& p, Doubles& values, const std::vector<float>& got,
                     const std::vector<int>& choice, const std::vector<int>& kept, double a,
                     double z, const char* what) {
  ASSERT_EQ(values.size(), got.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double keep = values[i], h = 1e-6;
    values[i] = keep + h;
    const double up = objective(p, choice, kept, a, z);
    values[i] = keep - h;
    const double down = objective(p, choice, kept, a, z);
    values[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(got[i], numeric, 1e-5 + 1e-4 * std::abs(numeric)) << what << " element " << i;
  }
}

void check_layer(double capacity_factor, DropPolicy policy, bool expect_drops, int Fs = 0) {
  Problem p{9, 6, 4, 2, 5, Fs, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(17);
  std::normal_distribution<double> normal(0.0, 0.7);
  auto random = [&](size_t n) {
    Doubles v(n);
    for (double& x : v) x = normal(rng);
    return v;
  };
  const int N = p.N, C = p.C, E = p.E, k = p.k, Fe = p.Fe, slots = N * k;
  p.x = random(N * C), p.router = random(E * C), p.fc = random(E * 2 * Fe * C);
  p.proj = random(E * C * Fe), p.dout = random(N * C);
  p.shared_fc = random(2 * Fs * C), p.shared_proj = random(C * Fs);
  for (int t = 0; t < N; ++t) p.router[0 * C + t % C] += 0.5;  // lean towards expert 0

  LayerContext ctx;
  MoeShape shape;
  shape.C = C, shape.E = E, shape.k = k, shape.Fe = Fe;
  shape.capacity_factor = capacity_factor, shape.drop_policy = policy, shape.Fs = Fs;
  MoeLayer layer(&ctx, shape);
  const auto tensor_or_empty = [](const Doubles& v) {
    return v.empty() ? StoredTensor{} : f32_tensor(v);
  };
  const auto zeros_or_empty = [](size_t n) { return n == 0 ? StoredTensor{} : f32_zeros(n); };
  layer.weights = {f32_tensor(p.router), f32_tensor(p.fc), f32_tensor(p.proj),
                   tensor_or_empty(p.shared_fc), tensor_or_empty(p.shared_proj)};
  layer.grads = {f32_zeros(E * C), f32_zeros(E * 2 * Fe * C), f32_zeros(E * C * Fe),
                 zeros_or_empty(2 * Fs * C), zeros_or_empty(C * Fs)};
  MoeActivations a;
  a.logits = View1("l", N * E), a.scores = View1("s", N * E), a.weight = View1("w", slots);
  a.choice = IntView1("c", slots), a.row = IntView1("r", slots), a.counts = IntView1("n", E);
  a.offsets = IntView1("o", E + 1), a.dispatched = f32_zeros(slots * C);
  a.fc = f32_zeros(slots * 2 * Fe), a.act = f32_zeros(slots * Fe);
  a.expert_out = f32_zeros(slots * C);
  a.shared_fc = zeros_or_empty(N * 2 * Fs), a.shared_act = zeros_or_empty(N * Fs);
  MoeScratch s;
  s.shared_out = zeros_or_empty(N * C * (Fs > 0)), s.dshared_act = zeros_or_empty(N * Fs);
  s.dshared_fc = zeros_or_empty(N * 2 * Fs);
  s.listed = IntView1("listed", slots), s.listed_offsets = IntView1("lo", E + 1);
  s.kept = IntView1("kept", slots);
  s.dlogits = View1("dl", N * E), s.dweight = View1("dw", slots), s.dx_router = View1("dxr", N * C);
  s.dexpert_out = f32_zeros(slots * C), s.dact = f32_zeros(slots * Fe);
  s.dfc = f32_zeros(slots * 2 * Fe), s.ddispatched = f32_zeros(slots * C);
  s.expert_mass = View1("mass", E);

  const StoredTensor x = f32_tensor(p.x), out = f32_zeros(N * C), dout = f32_tensor(p.dout);
  const StoredTensor dx = f32_zeros(N * C);
  layer.forward(out, x, N, a, s);
  const double aux_scale = 0.3, z_scale = 0.2;
  layer.backward(dx, dout, x, N, a, s, {static_cast<float>(aux_scale), static_cast<float>(z_scale)},
                 false);
  ctx.exec.fence();

  const std::vector<int> choice = host_ints(a.choice), row = host_ints(a.row);
  std::vector<int> kept(slots);
  for (int i = 0; i < slots; ++i) kept[i] = row[i] >= 0;
  const int dropped = slots - std::accumulate(kept.begin(), kept.end(), 0);
  if (expect_drops)
    ASSERT_GT(dropped, 0) << "the skewed router must overflow an expert";
  else
    ASSERT_EQ(dropped, 0);
  Doubles want(N * C, 0.0);
  objective(p, choice, kept, 0, 0, &want);
  const std::vector<float> got = host_values(out, 0, N * C);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "output " << i;
  expect_gradient(p, p.x, host_values(dx, 0, N * C), choice, kept, aux_scale, z_scale, "dx");
  expect_gradient(p, p.router, host_values(layer.grads.router, 0, E * C), choice, kept, aux_scale,
                  z_scale, "router");
  expect_gradient(p, p.fc, host_values(layer.grads.fc, 0, E * 2 * Fe * C), choice, kept, aux_scale,
                  z_scale, "experts.fc");
  expect_gradient(p, p.proj, host_values(layer.grads.proj, 0, E * C * Fe), choice, kept, aux_scale,
                  z_scale, "experts.proj");
  if (Fs == 0) return;
  expect_gradient(p, p.shared_fc, host_values(layer.grads.shared_fc, 0, 2 * Fs * C), choice, kept,
                  aux_scale, z_scale, "shared.fc");
  expect_gradient(p, p.shared_proj, host_values(layer.grads.shared_proj, 0, C * Fs), choice, kept,
                  aux_scale, z_scale, "shared.proj");
}

}  // namespace

TEST(MoeLayer, DroplessOutputAndGradientsMatchTheDefinition) {
  check_layer(0.0, DropPolicy::kProbs, false);
}

TEST(MoeLayer, SharedExpertsAddTheirMlpOnEveryToken) {
  check_layer(0.0, DropPolicy::kProbs, false, 7);
  check_layer(1.0, DropPolicy::kProbs, true, 3);  // drops do not touch the shared experts
}

TEST(MoeLayer, DroppedSlotsContributeNothingAndGetNoGradient) {
  check_layer(1.0, DropPolicy::kPosition, true);
  check_layer(1.0, DropPolicy::kProbs, true);
}
