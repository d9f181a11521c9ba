// The parameter table (names, shapes, splits, counts) and the counter-based initialiser.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/build_options.hpp"
#include "io/config.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "model/unit_buffers.hpp"

using namespace trident;

namespace {
ModelConfig gpt2_124m() {
  return ModelConfig::gpt2(12, 768, 12, 50257, 1024);  // L, C, NH, V, block
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

// Hardware FLOPs utilisation counts each recomputed block's forward once more: GPT-2 124M's
// block matrices (qkv, proj, fc, proj) are 7,077,888 parameters, its attention core 4 C T.
TEST(ModelConfigTest, RecomputeFlopsRepeatTheRecomputedBlocksForward) {
  const ModelConfig m = gpt2_124m();
  const double block = 2.0 * 7077888 + 4.0 * 768 * 1024;
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, 1024, {RecomputePolicy::kFull, 0}, 1), 12 * block);
  // Two chunks of 6 blocks, each recomputing its first 4.
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, 1024, {RecomputePolicy::kFull, 4}, 2), 8 * block);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, 1024, {RecomputePolicy::kSelective, 0}, 1), 0.0);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, 1024, {RecomputePolicy::kNone, 0}, 1), 0.0);
}

namespace {
ModelConfig small_vocab_model() {
  // L, C, NH, V, block; V is not a multiple of tp: exercises vocabulary padding.
  return ModelConfig::gpt2(4, 8, 4, 13, 6);
}
}  // namespace

// Whatever the vocabulary padding (none, 8, the GPU builds' 128): every global element is held
// once per replica, each rank's vocabulary slice is a multiple of the padding, and the padded rows
// alone have no global index.
TEST(LocalParams, TensorParallelSlicesCoverEveryGlobalElementExactlyOnce) {
  for (int vocab_padding : {1, 8, 128})
    for (int tp : {1, 2, 4}) {
      ModelConfig m = small_vocab_model();
      m.vocab_padding = vocab_padding;
      const ParamTable table(m);
      SCOPED_TRACE("vocab_padding=" + std::to_string(vocab_padding) + " tp=" + std::to_string(tp));
      std::map<std::string, std::vector<int>> hits;
      for (const ParamSpec& s : table.specs()) hits[s.name].assign(s.numel(), 0);
      int64_t padding = 0;
      for (int r = 0; r < tp; ++r) {
        StageLayout layout = whole_model(m);
        layout.tp_rank = r;
        layout.tp_size = tp;
        const LocalParamTable local(table, m, layout);
        EXPECT_EQ(local.at("wte").shape[0] % vocab_padding, 0);
        for (const LocalParam& p : local.params())
          for (int64_t i = 0; i < p.numel; ++i) {
            const int64_t g = local.global_index(p, i);
            if (g < 0) {
              ASSERT_EQ(p.spec->name, "wte");
              ++padding;
              continue;
            }
            ASSERT_LT(g, p.spec->numel()) << p.spec->name;
            hits[p.spec->name][g] += 1;
          }
      }
      for (const ParamSpec& s : table.specs()) {
        const int expected = s.tp_split_dim < 0 ? tp : 1;  // replicated tensors: once per rank
        for (int h : hits[s.name]) ASSERT_EQ(h, tp == 1 ? 1 : expected) << s.name;
      }
      const int64_t rounded =
          (13 + tp * vocab_padding - 1) / (tp * vocab_padding) * tp * vocab_padding;
      EXPECT_EQ(padded_vocab(m, tp), rounded);
      EXPECT_EQ(padding, (rounded - 13) * m.n_embd);
    }
}

TEST(LocalParams, QkvSliceHoldsTheSameHeadsOfQKAndV) {
  const ModelConfig m = small_vocab_model();  // C = 8, NH = 4, HS = 2
  const ParamTable table(m);
  StageLayout layout = whole_model(m);
  layout.tp_rank = 1;
  layout.tp_size = 2;
  const LocalParamTable local(table, m, layout);
  const LocalParam& qkv = local.at("h.0.attn.qkv.weight");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{12, 8}));
  // Local rows 0-3 are q rows 4-7 (heads 2, 3), rows 4-7 are k rows 12-15, 8-11 v rows 20-23.
  for (int64_t lr = 0; lr < 12; ++lr) {
    const int64_t g = local.global_index(qkv, lr * 8);
    EXPECT_EQ(g / 8, (lr / 4) * 8 + 4 + lr % 4) << "local row " << lr;
  }
  const LocalParam& proj = local.at("h.0.attn.proj.weight");  // row-parallel: columns split
  EXPECT_EQ(proj.shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(local.global_index(proj, 0), 4);
  EXPECT_EQ(local.global_index(proj, 5), 8 + 5);
  EXPECT_EQ(local.at("h.0.attn.proj.bias").tp_replicas, 2);
  EXPECT_EQ(local.at("wte").tp_replicas, 1);
  EXPECT_EQ(local.at("wte").shape, (std::vector<int64_t>{7, 8}));  // padded 14 / 2
}

TEST(LocalParams, PipelineStagesPartitionTheLayers) {
  const ModelConfig m = small_vocab_model();
  const ParamTable table(m);
  for (auto [pp, v] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
    std::map<std::string, int> holders;
    for (int r = 0; r < pp; ++r)
      for (int c = 0; c < v; ++c) {
        const StageLayout s = stage_layout(m, pp, v, r, c, 1, 0);
        EXPECT_EQ(s.has_embedding, r == 0 && c == 0);
        EXPECT_EQ(s.has_head, r == pp - 1 && c == v - 1);
        EXPECT_EQ(s.last_layer - s.first_layer, m.n_layer / (pp * v));
        const LocalParamTable local(table, m, s);
        for (const LocalParam& p : local.params()) holders[p.spec->name]++;
      }
    for (const ParamSpec& s : table.specs()) {
      // The tied embedding lives on the first and the last stage.
      const int expected = s.name == "wte" && pp * v > 1 ? 2 : 1;
      EXPECT_EQ(holders[s.name], expected) << s.name << " pp=" << pp << " v=" << v;
    }
  }
  // Interleaving: rank 0 holds virtual stages 0 and pp (layers 0 and 2 of 4 at pp = v = 2).
  EXPECT_EQ(stage_layout(m, 2, 2, 0, 1, 1, 0).first_layer, 2);
  EXPECT_EQ(stage_layout(m, 2, 2, 1, 0, 1, 0).first_layer, 1);
}

TEST(LocalParams, UnitsArePaddedForZeroAndShardedEvenly) {
  const ModelConfig m = small_vocab_model();  // 4 layers
  const ParamTable table(m);
  const int dp = 3;
  for (auto [pp, rank] : {std::pair{1, 0}, std::pair{2, 1}}) {
    const StageLayout layout = stage_layout(m, pp, 1, rank, 0, 1, 0);
    const LocalParamTable plain(table, m, layout), padded(table, m, layout, dp);
    // Units: wte, wpe (first stage), four per block, the final LayerNorm (last stage).
    const size_t blocks = static_cast<size_t>(layout.last_layer - layout.first_layer);
    const size_t embedding_units = (padded.holds("wte") ? 1 : 0) + (padded.holds("wpe") ? 1 : 0);
    ASSERT_EQ(padded.units().size(),
              embedding_units + kUnitsPerBlock * blocks + (layout.has_head ? 1 : 0));
    // A block's units: ln_1 with qkv, the attention projection, ln_2 with fc, the MLP projection.
    const int64_t C = m.n_embd;
    const size_t first_block = embedding_units;
    EXPECT_EQ(plain.units()[first_block].numel, 2 * C + 3 * C * C + 3 * C);
    EXPECT_EQ(plain.units()[first_block + 1].numel, C * C + C);
    EXPECT_EQ(plain.units()[first_block + 2].numel, 2 * C + 4 * C * C + 4 * C);
    EXPECT_EQ(plain.units()[first_block + 3].numel, 4 * C * C + C);
    for (int part = 0; part < kUnitsPerBlock; ++part) {
      const std::string name = block_unit_first_param(m, layout.first_layer, part);
      EXPECT_EQ(plain.unit_of(plain.at(name)), static_cast<int>(first_block) + part) << name;
      EXPECT_EQ(block_unit_part(name), part);
    }
    int64_t end = 0;
    for (size_t u = 0; u < padded.units().size(); ++u) {
      const ParamUnit& unit = padded.units()[u];
      EXPECT_EQ(unit.offset, end);  // units tile the buffer
      EXPECT_EQ(unit.padded % dp, 0);
      EXPECT_LT(unit.padded - unit.numel, dp);
      EXPECT_EQ(unit.numel, plain.units()[u].numel);
      end = unit.offset + unit.padded;
    }
    EXPECT_EQ(padded.total_numel(), end);
    // Every real element is owned by exactly one dp rank.
    std::vector<int> owners(static_cast<size_t>(end), 0);
    for (int r = 0; r < dp; ++r)
      for (const Segment& seg : zero_shard(padded, dp, r)) {
        EXPECT_EQ(seg.size() * dp, [&] {
          for (const ParamUnit& u : padded.units())
            if (seg.begin >= u.offset && seg.begin < u.offset + u.padded) return u.padded;
          return int64_t{-1};
        }());
        for (int64_t i = seg.begin; i < seg.end; ++i) owners[static_cast<size_t>(i)]++;
      }
    for (int o : owners) EXPECT_EQ(o, 1);
    // Parameters keep their global index map whatever the padding.
    for (const LocalParam& p : padded.params()) {
      const LocalParam& q = plain.at(p.spec->name);
      EXPECT_EQ(padded.global_index(p, p.numel - 1), plain.global_index(q, q.numel - 1));
    }
  }
}

namespace {
// Llama 3 8B's published shape (Hugging Face Meta-Llama-3-8B config.json).
ModelConfig llama3_8b() {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 32;
  m.n_embd = 4096;
  m.n_head = 32;
  m.n_kv_head = 8;
  m.ffn_hidden = 14336;
  m.vocab_size = 128256;
  m.block_size = 8192;
  return m;
}

// A tiny Llama with fewer key/value heads (2) than some tp sizes: C 16, 4 heads of 4 channels.
ModelConfig tiny_llama() {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 2;
  m.n_embd = 16;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.ffn_hidden = 24;
  m.vocab_size = 13;
  m.block_size = 8;
  return m;
}
}  // namespace

TEST(ParamTable, LlamaHasThePublishedParameterCounts) {
  EXPECT_EQ(ParamTable(llama3_8b()).total_numel(), 8030261248);  // Llama 3 8B
  ModelConfig m70 = llama3_8b();
  m70.n_layer = 80;
  m70.n_embd = 8192;
  m70.n_head = 64;
  m70.ffn_hidden = 28672;
  EXPECT_EQ(ParamTable(m70).total_numel(), 70553706496);  // Llama 3 70B
  // The Llama default width: 8C/3 rounded up to multiple_of (Llama 2 7B: 11008).
  ModelConfig llama2 = llama3_8b();
  llama2.ffn_hidden = 0;
  EXPECT_EQ(llama2.mlp_hidden(), 11008);
}

TEST(ParamTable, LlamaRowsHaveNoBiasesAndAnUntiedHead) {
  const ModelConfig m = llama3_8b();
  const ParamTable t(m);
  EXPECT_EQ(t.specs().size(), 1u + 32u * 7u + 2u);  // wte; 7 per layer; ln_f, lm_head
  for (const ParamSpec& p : t.specs()) EXPECT_EQ(p.name.find("bias"), std::string::npos) << p.name;
  EXPECT_EQ(t.at("h.0.attn.q.weight").shape, (std::vector<int64_t>{4096, 4096}));
  const ParamSpec& kv = t.at("h.0.attn.kv.weight");
  EXPECT_EQ(kv.shape, (std::vector<int64_t>{2 * 8 * 128, 4096}));
  EXPECT_EQ(kv.tp_split_groups, 2);
  EXPECT_EQ(kv.tp_split_piece, 128);  // a key/value head is never cut
  EXPECT_EQ(t.at("h.0.mlp.fc.weight").shape, (std::vector<int64_t>{2 * 14336, 4096}));
  EXPECT_EQ(t.at("h.0.mlp.proj.weight").shape, (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(t.at("lm_head").layer, 32);
  EXPECT_TRUE(t.at("lm_head").weight_decay);
  EXPECT_FALSE(t.at("h.0.ln_1.weight").weight_decay);
  EXPECT_THROW(t.at("wpe"), std::out_of_range);
  ModelConfig tied = m;
  tied.tie_embeddings = true;
  EXPECT_THROW(ParamTable(tied).at("lm_head"), std::out_of_range);
}

TEST(LocalParams, KeyValueHeadsSplitOrReplicateOverTp) {
  const ModelConfig m = tiny_llama();
  const ParamTable table(m);
  // tp 2: each rank one of the two key/value heads; its k rows then its v rows.
  const LocalParamTable half(table, m, stage_layout(m, 1, 1, 0, 0, 2, 1));
  const LocalParam& kv2 = half.at("h.0.attn.kv.weight");
  EXPECT_EQ(kv2.tp_replicas, 1);
  EXPECT_EQ(kv2.shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(half.global_index(kv2, 0) / 16, 4);        // k head 1
  EXPECT_EQ(half.global_index(kv2, 4 * 16) / 16, 12);  // v head 1
  // tp 4: two ranks per key/value head; ranks 2 and 3 both hold head 1, rank 2 writes it.
  for (int r = 0; r < 4; ++r) {
    const LocalParamTable quarter(table, m, stage_layout(m, 1, 1, 0, 0, 4, r));
    const LocalParam& kv4 = quarter.at("h.0.attn.kv.weight");
    EXPECT_EQ(kv4.tp_replicas, 2);
    EXPECT_EQ(kv4.shape, (std::vector<int64_t>{8, 16}));
    EXPECT_EQ(quarter.global_index(kv4, 0) / 16, 4 * (r / 2)) << "rank " << r;
    EXPECT_EQ(kv4.first_replica(r), r % 2 == 0);
    const LocalParam& q = quarter.at("h.0.attn.q.weight");  // query heads split 4 ways
    EXPECT_EQ(q.tp_replicas, 1);
    EXPECT_EQ(quarter.global_index(q, 0) / 16, 4 * r);
    // q and kv are adjacent (the column-parallel GEMM reads them as one matrix).
    EXPECT_EQ(kv4.offset, q.offset + q.numel);
    EXPECT_EQ(quarter.unit_of(q), quarter.unit_of(kv4));
    const LocalParam& fc = quarter.at("h.0.mlp.fc.weight");  // gate | up, each split alike
    EXPECT_EQ(fc.shape, (std::vector<int64_t>{12, 16}));
    EXPECT_EQ(quarter.global_index(fc, 6 * 16) / 16, 24 + 6 * r);  // first up row
  }
}

TEST(LocalParams, UntiedHeadSitsOnTheLastStageOnly) {
  const ModelConfig m = tiny_llama();
  const ParamTable table(m);
  const LocalParamTable first(table, m, stage_layout(m, 2, 1, 0, 0, 1, 0));
  const LocalParamTable last(table, m, stage_layout(m, 2, 1, 1, 0, 1, 0));
  EXPECT_TRUE(first.holds("wte"));
  EXPECT_FALSE(first.holds("lm_head"));
  EXPECT_FALSE(last.holds("wte"));
  EXPECT_TRUE(last.holds("lm_head"));
  EXPECT_NE(last.unit_of(last.at("lm_head")), last.unit_of(last.at("ln_f.weight")));
}

namespace {

ModelConfig tiny_moe(bool llama) {
  ModelConfig m;
  m.family = llama ? ModelFamily::kLlama : ModelFamily::kGpt2;
  m.n_layer = 3, m.n_embd = 16, m.n_head = 4, m.vocab_size = 50, m.block_size = 8;
  if (llama) m.ffn_hidden = 40;
  m.moe.n_experts = 8, m.moe.top_k = 2, m.moe.expert_ffn_hidden = 24;
  m.moe.n_shared_experts = 1, m.moe.moe_layer_every = 2;
  return m;
}

}  // namespace

TEST(Params, MoeLayersHoldRouterExpertsAndSharedExpertsInTheirUnits) {
  for (const bool llama : {false, true}) {
    const ModelConfig m = tiny_moe(llama);
    const ParamTable table(m);
    const int64_t C = 16, E = 8, Fe = 24, fc = llama ? 2 * Fe : Fe;
    EXPECT_EQ(table.at("h.0.moe.router.weight").shape, (std::vector<int64_t>{E, C}));
    EXPECT_EQ(table.at("h.0.moe.experts.fc.weight").shape, (std::vector<int64_t>{E, fc, C}));
    EXPECT_EQ(table.at("h.0.moe.experts.proj.weight").shape, (std::vector<int64_t>{E, C, Fe}));
    EXPECT_EQ(table.at("h.0.moe.shared.fc.weight").shape, (std::vector<int64_t>{fc, C}));
    EXPECT_EQ(table.at("h.2.moe.shared.proj.weight").shape, (std::vector<int64_t>{C, Fe}));
    EXPECT_THROW(table.at("h.0.mlp.fc.weight"), std::out_of_range);
    EXPECT_NO_THROW(table.at("h.1.mlp.fc.weight")) << "moe_layer_every = 2: layer 1 is dense";
    EXPECT_EQ(m.moe_layers(), 2);
    if (!llama) {
      EXPECT_EQ(table.at("h.2.moe.experts.fc.bias").shape, (std::vector<int64_t>{E, Fe}));
    }
    // Every block still has four contiguous units; the MoE projection's unit starts at the
    // experts' second projection.
    const LocalParamTable local(table, m, whole_model(m));
    const size_t embedding_units = llama ? 1 : 2;
    ASSERT_EQ(local.units().size(), embedding_units + kUnitsPerBlock * 3 + (m.tied() ? 1 : 2));
    for (int layer = 0; layer < 3; ++layer)
      for (int part = 0; part < kUnitsPerBlock; ++part) {
        const std::string first = block_unit_first_param(m, layer, part);
        EXPECT_EQ(local.unit_of(local.at(first)),
                  static_cast<int>(embedding_units + kUnitsPerBlock * layer + part))
            << first;
        EXPECT_EQ(block_unit_part(first), part);
      }
    EXPECT_EQ(block_unit_first_param(m, 0, 3), "h.0.moe.experts.proj.weight");
    EXPECT_EQ(block_unit_first_param(m, 1, 3), "h.1.mlp.proj.weight");
  }
}

// Where the experts' replicas are not the dp ranks, their tensors form units of their own (never
// mixed with dense tensors), padded for their group; ZeRO-1 then splits dense units over dp and
// expert units over the experts' replicas, each element owned once in its group.
TEST(LocalParams, ExpertUnitsAreTheirOwnAndShardOverTheExpertsReplicas) {
  for (const bool llama : {true, false}) {
    const ModelConfig m = tiny_moe(llama);
    const ParamTable table(m);
    const int dp = 3, expert_dp = 2;
    StageLayout layout = whole_model(m);
    layout.ep_size = 2, layout.ep_rank = 1;
    const LocalParamTable mixed(table, m, layout, dp);
    const LocalParamTable split(table, m, layout, dp, expert_dp);
    EXPECT_GT(split.units().size(), mixed.units().size());
    int expert_units = 0;
    for (const ParamUnit& u : split.units()) {
      expert_units += u.experts ? 1 : 0;
      EXPECT_EQ(u.padded % (u.experts ? expert_dp : dp), 0);
      EXPECT_LT(u.padded - u.numel, u.experts ? expert_dp : dp);
    }
    EXPECT_EQ(expert_units, 4) << "experts.fc and experts.proj (with their biases) of two layers";
    for (const LocalParam& p : split.params())
      EXPECT_EQ(split.units()[static_cast<size_t>(split.unit_of(p))].experts, p.experts())
          << p.spec->name;
    // Every element owned once over dp in a dense unit, once over the replicas in an expert one.
    std::vector<int> dense(static_cast<size_t>(split.total_numel()), 0), expert(dense);
    for (int r = 0; r < 6; ++r) {  // dp x expert_dp coordinates
      const ShardGroups g{dp, r % dp, expert_dp, r / dp};
      const std::vector<Segment> owned = zero_shard(split, g);
      ASSERT_EQ(owned.size(), split.units().size());
      for (size_t u = 0; u < owned.size(); ++u) {
        const bool e = split.units()[u].experts;
        if (e ? r % dp != 0 : r / dp != 0) continue;  // one member of each other group
        for (int64_t i = owned[u].begin; i < owned[u].end; ++i)
          ++(e ? expert : dense)[static_cast<size_t>(i)];
      }
    }
    for (size_t u = 0; u < split.units().size(); ++u) {
      const ParamUnit& unit = split.units()[u];
      for (int64_t i = unit.offset; i < unit.offset + unit.padded; ++i) {
        EXPECT_EQ(dense[static_cast<size_t>(i)], unit.experts ? 0 : 1);
        EXPECT_EQ(expert[static_cast<size_t>(i)], unit.experts ? 1 : 0);
      }
    }
  }
}

TEST(LocalParams, ExpertParallelRanksHoldDisjointBlocksOfExpertsCoveringEachOnce) {
  const ModelConfig m = tiny_moe(true);
  const ParamTable table(m);
  for (const int ep : {1, 2, 4, 8}) {
    std::map<std::string, std::vector<int>> seen;  // expert tensor -> times each element is held
    for (int rank = 0; rank < ep; ++rank) {
      StageLayout layout = whole_model(m);
      layout.ep_size = ep, layout.ep_rank = rank;
      const LocalParamTable local(table, m, layout);
      for (const LocalParam& p : local.params()) {
        if (!p.experts()) {  // everything else is whole on every rank
          EXPECT_EQ(p.shape, p.spec->shape) << p.spec->name;
          continue;
        }
        EXPECT_EQ(p.shape[0], 8 / ep) << p.spec->name;
        std::vector<int>& count = seen[p.spec->name];
        count.resize(static_cast<size_t>(p.spec->numel()));
        const int64_t per_expert = p.spec->numel() / 8;
        for (int64_t i = 0; i < p.numel; ++i) {
          const int64_t g = local.global_index(p, i);
          ++count[static_cast<size_t>(g)];
          EXPECT_EQ(g / per_expert, rank * (8 / ep) + i / per_expert) << "expert of element " << i;
        }
      }
    }
    EXPECT_EQ(seen.size(), 4u) << "fc and proj of two MoE layers";
    for (const auto& [name, count] : seen)
      for (int c : count) ASSERT_EQ(c, 1) << name << " at ep = " << ep;
  }
}

TEST(Params, ActiveParametersCountTheChosenExpertsOnly) {
  const ModelConfig m = tiny_moe(true);
  ModelConfig dense = m;
  dense.moe = {};
  const int64_t C = 16, E = 8, Fe = 24, dense_mlp = 3 * C * 40;
  const int64_t expert = 3 * C * Fe, router = E * C, shared = 3 * C * Fe;
  const int64_t moe_layer = router + E * expert + shared;
  EXPECT_EQ(parameter_count(m), parameter_count(dense) + 2 * (moe_layer - dense_mlp));
  EXPECT_EQ(active_parameter_count(m),
            parameter_count(dense) + 2 * (router + 2 * expert + shared - dense_mlp));
  EXPECT_EQ(active_parameter_count(dense), parameter_count(dense));
  // MFU counts the experts a token runs: the FLOPs follow the active parameters.
  EXPECT_DOUBLE_EQ(flops_per_token(m, 8) - flops_per_token(dense, 8),
                   6.0 * (active_parameter_count(m) - parameter_count(dense)));
}

// DeepSpeed-MoE (Rajbhandari et al. 2022, Table 1): GPT-3 350M and 1.3B with 128 experts on
// every other layer are 13B and 52B parameters (as the paper rounds them).
TEST(Params, DeepSpeedMoeParameterCountsRoundToThePapers) {
  auto deepspeed_moe = [](int hidden) {
    ModelConfig m = ModelConfig::gpt2(24, hidden, 16, 50257, 2048);
    m.moe.n_experts = 128, m.moe.top_k = 1, m.moe.moe_layer_every = 2;
    return m;
  };
  const double small = parameter_count(deepspeed_moe(1024)) / 1e9;
  const double large = parameter_count(deepspeed_moe(2048)) / 1e9;
  EXPECT_EQ(std::lround(small), 13) << small;
  EXPECT_EQ(std::lround(large), 52) << large;
  // An expert is the dense MLP (8 h^2 + 5 h) and a router row h per expert; 12 layers of 128.
  const double h = 1024, dense = parameter_count(ModelConfig::gpt2(24, 1024, 16, 50257, 2048));
  EXPECT_DOUBLE_EQ(small * 1e9, dense + 12 * (127 * (8 * h * h + 5 * h) + 128 * h));
}

TEST(LocalParams, AQuartersExpertAndDenseUnitsShareOneWorkingBufferSideBySide) {
  // ZeRO-2/3 read a quarter's units together (an MoE layer's ln_2 and router, its experts' first
  // projections, its shared expert's): they sit side by side in one of the two alternating
  // buffers, and the next quarter's in the other, so one quarter in use and the next prefetched
  // never share a buffer.
  for (const bool llama : {true, false}) {
    const ModelConfig m = tiny_moe(llama);
    const ParamTable table(m);
    StageLayout layout = whole_model(m);
    layout.ep_size = 2, layout.ep_rank = 0;
    const LocalParamTable local(table, m, layout, 3, 2);
    const UnitBufferPlan plan = plan_unit_buffers(local, m.n_layer);
    const auto& units = local.units();
    ASSERT_EQ(plan.buffer_of_unit.size(), units.size());
    int groups_of_three = 0;
    std::vector<int> block_groups;  // the buffer of each block group, in order
    for (int u = 0; u < static_cast<int>(units.size()); u = local.group_end(u)) {
      const int end = local.group_end(u);
      groups_of_three += end - u == 3 ? 1 : 0;
      int64_t at = 0;
      for (int v = u; v < end; ++v) {
        EXPECT_EQ(plan.buffer_of_unit[v], plan.buffer_of_unit[u]);
        EXPECT_EQ(plan.offset_in_buffer[v], at);
        at += units[v].padded;
      }
      EXPECT_LE(at, plan.buffer_sizes[plan.buffer_of_unit[u]]);
      if (units[u].group >= 2 && units[u].group < 2 + kUnitsPerBlock * m.n_layer)
        block_groups.push_back(plan.buffer_of_unit[u]);
    }
    // ln_2 + router | experts.fc | shared.fc in each of the two MoE layers.
    EXPECT_EQ(groups_of_three, 2);
    ASSERT_EQ(block_groups.size(), static_cast<size_t>(kUnitsPerBlock * m.n_layer));
    for (size_t i = 1; i < block_groups.size(); ++i)
      EXPECT_NE(block_groups[i], block_groups[i - 1]);
    // Parts of one rank side by side: each unit's padded size over its group.
    const ShardGroups groups{3, 1, 2, 1};
    const std::vector<int64_t> parts = unit_part_sizes(local, groups);
    const std::vector<int64_t> offsets = unit_shard_offsets(local, groups);
    for (size_t u = 0; u < units.size(); ++u) {
      EXPECT_EQ(parts[u] * (units[u].experts ? 2 : 3), units[u].padded);
      EXPECT_EQ(offsets[u], u == 0 ? 0 : offsets[u - 1] + parts[u - 1]);
    }
  }
}

TEST(ParamTable, ShippedModelFilesHaveThePublishedParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> published{
      {"gpt2-124m.toml", 124439808},       // GPT-2 small (tied head)
      {"llama3-8b.toml", 8030261248},      // Meta Llama 3 8B
      {"llama3-70b.toml", 70553706496},    // Meta Llama 3 70B
      {"tinyllama-1.1b.toml", 1100048384}  // TinyLlama 1.1B
  };
  for (const auto& [file, count] : published) {
    // From the working directory where it holds inputs/ (a GPU bundle), else the source tree.
    const std::string here = "inputs/models/" + file;
    const Config c = load_config(
        std::filesystem::exists(here) ? here : std::string(TRIDENT_SOURCE_DIR) + "/" + here, {});
    EXPECT_EQ(ParamTable(c.model).total_numel(), count) << file;
  }
}
