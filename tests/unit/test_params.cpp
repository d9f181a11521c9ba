// The parameter table (names, shapes, splits, counts) and the counter-based initialiser.
#include <gtest/gtest.h>

#include <cmath>

#include "model/params.hpp"

using namespace trident;

namespace {
ModelConfig gpt2_124m() {
  ModelConfig m;
  m.n_layer = 12;
  m.n_embd = 768;
  m.n_head = 12;
  m.vocab_size = 50257;
  m.block_size = 1024;
  return m;
}
}  // namespace

TEST(ParamTable, Gpt2SmallHasTheKnownParameterCount) {
  // 124,439,808: the figure for GPT-2 small with a tied output projection.
  EXPECT_EQ(ParamTable(gpt2_124m()).total_numel(), 124439808);
}

TEST(ParamTable, RowsCarryShapeSplitLayerAndDecay) {
  const ParamTable t(gpt2_124m());
  EXPECT_EQ(t.specs().size(), 2u + 12u * 12u + 2u);
  const ParamSpec& qkv = t.at("h.3.attn.qkv.weight");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{2304, 768}));
  EXPECT_EQ(qkv.tp_split_dim, 0);
  EXPECT_EQ(qkv.tp_split_groups, 3);
  EXPECT_EQ(qkv.layer, 3);
  EXPECT_TRUE(qkv.weight_decay);
  const ParamSpec& proj = t.at("h.11.mlp.proj.weight");
  EXPECT_EQ(proj.shape, (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(proj.tp_split_dim, 1);
  EXPECT_EQ(t.at("h.0.attn.proj.bias").tp_split_dim, -1);
  EXPECT_FALSE(t.at("h.0.ln_1.weight").weight_decay);
  EXPECT_FALSE(t.at("h.0.mlp.fc.bias").weight_decay);
  EXPECT_EQ(t.at("wte").layer, -1);
  EXPECT_EQ(t.at("ln_f.bias").layer, 12);
  // Offsets tile the flat buffer without gaps.
  int64_t expected = 0;
  for (const ParamSpec& p : t.specs()) {
    EXPECT_EQ(p.offset, expected) << p.name;
    expected += p.numel();
  }
  EXPECT_THROW(t.at("h.99.ln_1.weight"), std::out_of_range);
}

TEST(Init, IsAPureFunctionOfSeedNameAndIndex) {
  const ParamTable t(gpt2_124m());
  const ParamSpec& w = t.at("h.2.mlp.fc.weight");
  EXPECT_EQ(initial_value(7, w, 12345), initial_value(7, w, 12345));
  EXPECT_NE(initial_value(7, w, 12345), initial_value(8, w, 12345));
  EXPECT_NE(initial_value(7, w, 12345), initial_value(7, t.at("h.3.mlp.fc.weight"), 12345));
  EXPECT_NE(initial_value(7, w, 12345), initial_value(7, w, 12346));
}

TEST(Init, FollowsGpt2Scheme) {
  const ModelConfig m = gpt2_124m();
  const ParamTable t(m);
  auto moments = [&](const ParamSpec& p) {
    double s = 0, s2 = 0;
    const int64_t n = std::min<int64_t>(p.numel(), 200000);
    for (int64_t i = 0; i < n; ++i) {
      const double v = initial_value(1, p, i);
      s += v;
      s2 += v * v;
    }
    return std::pair<double, double>{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  auto [mean, std] = moments(t.at("h.0.attn.qkv.weight"));
  EXPECT_NEAR(mean, 0.0, 2e-4);
  EXPECT_NEAR(std, 0.02, 2e-4);
  auto [rmean, rstd] = moments(t.at("h.0.attn.proj.weight"));
  EXPECT_NEAR(rmean, 0.0, 2e-4);
  EXPECT_NEAR(rstd, 0.02 / std::sqrt(2.0 * m.n_layer), 1e-4);
  EXPECT_EQ(initial_value(1, t.at("h.0.ln_1.weight"), 5), 1.0f);
  EXPECT_EQ(initial_value(1, t.at("h.0.ln_1.bias"), 5), 0.0f);
  EXPECT_EQ(initial_value(1, t.at("h.0.attn.qkv.bias"), 5), 0.0f);
}

TEST(ModelConfigTest, FlopsPerTokenFollowsPalmFormula) {
  const ModelConfig m = gpt2_124m();
  EXPECT_DOUBLE_EQ(flops_per_token(m, 64), 6.0 * 124439808 + 12.0 * 12 * 768 * 64);
}
