// The MoE layer (router, top-k, capacity, SwiGLU or GELU experts, combine, shared experts) against
// a double-precision reference written from the definition: its output, and every gradient against
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
  bool gelu;               // GPT-2's experts: GELU with biases (else SwiGLU, none)
  Doubles x, router, fc, proj, dout, shared_fc, shared_proj;
  Doubles fc_bias, proj_bias, shared_fc_bias, shared_proj_bias;  // empty without GELU
  int width(int F) const { return gelu ? F : 2 * F; }
};

double silu(double v) {
  return v / (1 + std::exp(-v));
}
double gelu(double v) {  // GPT-2's tanh approximation
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

// One MLP of hidden width F on the token row xt: fc [width(F), C] (SwiGLU's gate | up, or GELU's
// with bias fc_b), then proj [C, F] (plus proj_b); null biases for SwiGLU.
Doubles mlp(const Problem& p, const double* xt, const double* fc, const double* fc_b,
            const double* proj, const double* proj_b, int F) {
  const int C = p.C;
  Doubles h(F), y(C);
  for (int f = 0; f < F; ++f) {
    double first = fc_b ? fc_b[f] : 0, up = 0;
    for (int c = 0; c < C; ++c) {
      first += fc[f * C + c] * xt[c];
      if (!p.gelu) up += fc[(F + f) * C + c] * xt[c];
    }
    h[f] = p.gelu ? gelu(first) : silu(first) * up;
  }
  for (int c = 0; c < C; ++c) {
    y[c] = proj_b ? proj_b[c] : 0;
    for (int f = 0; f < F; ++f) y[c] += proj[c * F + f] * h[f];
  }
  return y;
}
const double* or_null(const Doubles& v, size_t at) {
  return v.empty() ? nullptr : v.data() + at;
}

// Sum(dout * out) + a aux + z zloss with the routing (choice, kept) held: the objective whose
// gradient the layer's backward computes.
double objective(const Problem& p, const std::vector<int>& choice, const std::vector<int>& kept,
                 double a, double z, Doubles* out = nullptr) {
  const int N = p.N, C = p.C, E = p.E, k = p.k, Fe = p.Fe, Fs = p.Fs;
  double total = 0, zloss = 0;
  Doubles mean_p(E, 0.0), counts(E, 0.0);
  for (int t = 0; t < N; ++t) {
    // The shared experts: one MLP of width Fs on every token.
    if (Fs > 0) {
      const Doubles y = mlp(p, &p.x[t * C], p.shared_fc.data(), or_null(p.shared_fc_bias, 0),
                            p.shared_proj.data(), or_null(p.shared_proj_bias, 0), Fs);
      for (int c = 0; c < C; ++c) {
        if (out) (*out)[t * C + c] += y[c];
        total += p.dout[t * C + c] * y[c];
      }
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
      const Doubles y = mlp(p, &p.x[t * C], &p.fc[static_cast<size_t>(e) * p.width(Fe) * C],
                            or_null(p.fc_bias, e * Fe), &p.proj[static_cast<size_t>(e) * C * Fe],
                            or_null(p.proj_bias, e * C), Fe);
      for (int c = 0; c < C; ++c) {
        if (out) (*out)[t * C + c] += w * y[c];
        total += p.dout[t * C + c] * w * y[c];
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

void check_layer(double capacity_factor, DropPolicy policy, bool expect_drops, int Fs = 0,
                 bool gelu_experts = false) {
  Problem p{9, 6, 4, 2, 5, Fs, gelu_experts, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(17);
  std::normal_distribution<double> normal(0.0, 0.7);
  auto random = [&](size_t n) {
    Doubles v(n);
    for (double& x : v) x = normal(rng);
    return v;
  };
  const int N = p.N, C = p.C, E = p.E, k = p.k, Fe = p.Fe, slots = N * k;
  const int W = p.width(Fe), Ws = p.width(Fs);
  p.x = random(N * C), p.router = random(E * C), p.fc = random(E * W * C);
  p.proj = random(E * C * Fe), p.dout = random(N * C);
  p.shared_fc = random(Ws * C), p.shared_proj = random(C * Fs);
  if (gelu_experts) {
    p.fc_bias = random(E * Fe), p.proj_bias = random(E * C);
    p.shared_fc_bias = random(Fs), p.shared_proj_bias = random(C * (Fs > 0));
  }
  for (int t = 0; t < N; ++t) p.router[0 * C + t % C] += 0.5;  // lean towards expert 0

  LayerContext ctx;
  MoeShape shape;
  shape.C = C, shape.E = E, shape.k = k, shape.Fe = Fe;
  shape.capacity_factor = capacity_factor, shape.drop_policy = policy, shape.Fs = Fs;
  shape.gelu = gelu_experts;
  MoeLayer layer(&ctx, shape);
  const auto tensor_or_empty = [](const Doubles& v) {
    return v.empty() ? StoredTensor{} : f32_tensor(v);
  };
  const auto zeros_or_empty = [](size_t n) { return n == 0 ? StoredTensor{} : f32_zeros(n); };
  layer.weights = {f32_tensor(p.router),
                   f32_tensor(p.fc),
                   f32_tensor(p.proj),
                   tensor_or_empty(p.shared_fc),
                   tensor_or_empty(p.shared_proj),
                   tensor_or_empty(p.fc_bias),
                   tensor_or_empty(p.proj_bias),
                   tensor_or_empty(p.shared_fc_bias),
                   tensor_or_empty(p.shared_proj_bias)};
  layer.grads = {f32_zeros(E * C),
                 f32_zeros(E * W * C),
                 f32_zeros(E * C * Fe),
                 zeros_or_empty(Ws * C),
                 zeros_or_empty(C * Fs),
                 zeros_or_empty(p.fc_bias.size()),
                 zeros_or_empty(p.proj_bias.size()),
                 zeros_or_empty(p.shared_fc_bias.size()),
                 zeros_or_empty(p.shared_proj_bias.size())};
  MoeActivations a;
  a.logits = View1("l", N * E), a.scores = View1("s", N * E), a.weight = View1("w", slots);
  a.choice = IntView1("c", slots), a.row = IntView1("r", slots), a.counts = IntView1("n", E);
  a.offsets = IntView1("o", E + 1), a.dispatched = f32_zeros(slots * C);
  a.fc = f32_zeros(slots * W), a.act = f32_zeros(slots * Fe);
  a.expert_out = f32_zeros(slots * C);
  a.shared_fc = zeros_or_empty(N * Ws), a.shared_act = zeros_or_empty(N * Fs);
  MoeScratch s;
  s.shared_out = zeros_or_empty(N * C * (Fs > 0)), s.dshared_act = zeros_or_empty(N * Fs);
  s.dshared_fc = zeros_or_empty(N * Ws);
  s.listed = IntView1("listed", slots), s.listed_offsets = IntView1("lo", E + 1);
  s.kept = IntView1("kept", slots);
  s.dlogits = View1("dl", N * E), s.dweight = View1("dw", slots), s.dx_router = View1("dxr", N * C);
  s.dexpert_out = f32_zeros(slots * C), s.dact = f32_zeros(slots * Fe);
  s.dfc = f32_zeros(slots * W), s.ddispatched = f32_zeros(slots * C);
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
  const auto expect = [&](Doubles& values, const StoredTensor& grad, const char* what) {
    if (values.empty()) return;
    expect_gradient(p, values, host_values(grad, 0, values.size()), choice, kept, aux_scale,
                    z_scale, what);
  };
  expect(p.fc, layer.grads.fc, "experts.fc");
  expect(p.proj, layer.grads.proj, "experts.proj");
  expect(p.fc_bias, layer.grads.fc_bias, "experts.fc.bias");
  expect(p.proj_bias, layer.grads.proj_bias, "experts.proj.bias");
  expect(p.shared_fc, layer.grads.shared_fc, "shared.fc");
  expect(p.shared_proj, layer.grads.shared_proj, "shared.proj");
  expect(p.shared_fc_bias, layer.grads.shared_fc_bias, "shared.fc.bias");
  expect(p.shared_proj_bias, layer.grads.shared_proj_bias, "shared.proj.bias");
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

// GPT-2's experts (and shared experts): GELU MLPs with biases, dropless and with drops.
TEST(MoeLayer, GeluExpertsWithBiasesMatchTheDefinition) {
  check_layer(0.0, DropPolicy::kProbs, false, 0, true);
  check_layer(0.0, DropPolicy::kProbs, false, 7, true);
  check_layer(1.0, DropPolicy::kPosition, true, 3, true);
}

TEST(MoeShape, ArrivedRowsAreTheDroplessBoundOrTheCapacitysWhicheverIsSmaller) {
  MoeShape m;
  m.E = 8, m.k = 2, m.ep = 8;  // Mixtral's routing, one expert a rank
  const size_t n = 4096;
  // Dropless: every token of the 8 ranks may send one slot (at most one a rank) to this rank.
  EXPECT_EQ(m.arrived_rows(n), 8 * n);
  // Capacity factor 1: each of the 8 groups keeps C = n k / E slots of this rank's expert.
  m.capacity_factor = 1.0;
  EXPECT_EQ(m.arrived_rows(n), 8 * (n * 2 / 8));
  // A factor so large that the capacity never binds: the dropless bound again.
  m.capacity_factor = 100.0;
  EXPECT_EQ(m.arrived_rows(n), 8 * n);
  // Sequence parallelism: a rank routes n of its group's tp n tokens, and the capacity is the
  // group's; two tp ranks of one group in the ep group share its C.
  m.capacity_factor = 1.0, m.tp = 2, m.ep = 4;
  EXPECT_EQ(m.arrived_rows(n), 4 * 2 * (2 * n * 2 / 8));
  m.tp = 1, m.ep = 1;
  EXPECT_EQ(m.arrived_rows(n), 8 * (n * 2 / 8));  // one rank: every expert's C
}
