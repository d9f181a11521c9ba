// The memory model: the ZeRO paper's Figure 1, and how trident's prediction scales with layout.
#include <gtest/gtest.h>

#include <vector>

#include "plan/expert_plan.hpp"
#include "plan/memory_model.hpp"
#include "plan/planner.hpp"

using namespace trident;

TEST(MemoryModel, ReproducesZeroPaperFigure1) {
  // Psi = 7.5B parameters, Nd = 64 GPUs, K = 12: 120, 31.4, 16.6 and 1.9 GB per device.
  const double psi = 7.5e9, gb = 1e9;
  EXPECT_NEAR(zero_paper_model_states(psi, 64, 0) / gb, 120.0, 0.05);
  EXPECT_NEAR(zero_paper_model_states(psi, 64, 1) / gb, 31.4, 0.05);
  EXPECT_NEAR(zero_paper_model_states(psi, 64, 2) / gb, 16.6, 0.05);
  EXPECT_NEAR(zero_paper_model_states(psi, 64, 3) / gb, 1.9, 0.05);
}

namespace {
MemoryQuery gpt2_query() {
  MemoryQuery q;
  q.model = ModelConfig::gpt2(12, 768, 12, 50257, 1024);  // L, C, NH, V, block
  q.micro_batch = 4;
  q.seq_len = 64;
  q.micro_batches = 1;
  return q;
}
double bytes(const MemoryPrediction& p, MemCategory c) {
  return p.bytes[static_cast<int>(c)];
}
}  // namespace

TEST(MemoryModel, SerialGpt2ModelStatesAreSixteenBytesPerParameter) {
  const MemoryPrediction p = predict_rank_memory(gpt2_query(), GridCoord{});
  // fp32: 4 (parameters) + 4 (gradients) + 8 (AdamW moments) bytes per parameter.
  EXPECT_EQ(p.model_states(), 16.0 * 124439808);
  EXPECT_GT(bytes(p, MemCategory::kActivations), 0);
}

TEST(MemoryModel, ZeroOneShardsOnlyTheOptimizerStates) {
  MemoryQuery q = gpt2_query();
  q.dp = 4;
  const MemoryPrediction base = predict_rank_memory(q, GridCoord{});
  q.zero_stage = 1;
  const MemoryPrediction z1 = predict_rank_memory(q, {{Axis::dp, 1}});
  EXPECT_NEAR(bytes(z1, MemCategory::kOptimizer), bytes(base, MemCategory::kOptimizer) / 4, 16);
  EXPECT_NEAR(bytes(z1, MemCategory::kParams), bytes(base, MemCategory::kParams), 16);
  EXPECT_EQ(bytes(z1, MemCategory::kActivations), bytes(base, MemCategory::kActivations));
}

TEST(MemoryModel, TensorAndPipelineParallelismSplitModelStates) {
  MemoryQuery q = gpt2_query();
  const double serial = predict_rank_memory(q, GridCoord{}).model_states();
  q.tp = 2;
  const double tp2 = predict_rank_memory(q, GridCoord{}).model_states();
  // Everything but LayerNorms, row-parallel biases and wpe is split.
  EXPECT_LT(tp2, 0.52 * serial);
  EXPECT_GT(tp2, 0.5 * serial);
  q.tp = 1;
  q.pp = 4;
  q.micro_batches = 4;
  const double first = predict_rank_memory(q, GridCoord{}).model_states();
  const double middle = predict_rank_memory(q, {{Axis::pp, 1}}).model_states();
  EXPECT_GT(first, middle);  // the first stage also holds the embeddings
  // 1F1B: stage r keeps min(pp - r, m) micro-batches in flight: 4 on the first, 3 on the next,
  // whose layers and inputs are the same size.
  const double act_first = bytes(predict_rank_memory(q, GridCoord{}), MemCategory::kActivations);
  const double act_middle =
      bytes(predict_rank_memory(q, {{Axis::pp, 1}}), MemCategory::kActivations);
  EXPECT_DOUBLE_EQ(act_first / act_middle, 4.0 / 3.0);
}

TEST(MemoryModel, ZeroTwoKeepsTheShardTheUnitsSmallGradientsAndABlockOfRows) {
  MemoryQuery q = gpt2_query();
  q.dp = 8;
  q.zero_stage = 1;
  const MemoryPrediction z1 = predict_rank_memory(q, GridCoord{});
  q.zero_stage = 2;
  const MemoryPrediction z2 = predict_rank_memory(q, GridCoord{});
  const double full = bytes(z1, MemCategory::kGrads);
  // The shard (1/8); the kept gradients of the units in use: wpe (1024 x 768), ln_f (2 x 768)
  // and two blocks' largest quarter (ln_2 and the fc bias: 2 x 768 + 3072); one block of the
  // streamed rows: 25 MiB of fp32 is 8533 rows of 768, a block of wte's 50257.
  const double kept = 1024 * 768 + 2 * 768 + 2 * (2 * 768 + 3072), rows = 8533 * 768;
  EXPECT_EQ(bytes(z2, MemCategory::kGrads), full / 8 + 4 * (kept + rows));
  // The block of rows follows the bucket: 1 MiB is 341 rows.
  q.dp_bucket_mb = 1;
  EXPECT_EQ(bytes(predict_rank_memory(q, GridCoord{}), MemCategory::kGrads),
            full / 8 + 4 * (kept + 341 * 768));
  EXPECT_EQ(bytes(z2, MemCategory::kOptimizer), bytes(z1, MemCategory::kOptimizer));
}

TEST(MemoryModel, ZeroThreeShardsParametersLikeGradients) {
  MemoryQuery q = gpt2_query();
  q.dp = 8;
  q.zero_stage = 2;
  const MemoryPrediction z2 = predict_rank_memory(q, GridCoord{});
  q.zero_stage = 3;
  const MemoryPrediction z3 = predict_rank_memory(q, GridCoord{});
  // Parameters are gathered a whole unit at a time; gradients leave in blocks of rows.
  EXPECT_GT(bytes(z3, MemCategory::kParams), bytes(z3, MemCategory::kGrads));
  EXPECT_EQ(bytes(z3, MemCategory::kGrads), bytes(z2, MemCategory::kGrads));
  EXPECT_LT(bytes(z3, MemCategory::kParams), 0.65 * bytes(z2, MemCategory::kParams));
}

// Korthikanti et al. 2022, Table 2, for the paper's 22B model (h = 6144, a = 64, s = 2048,
// b = 4, t = 8): per layer 10 + 24/t + 5as/(ht) = 10 + 3 + 53.3 times sbh bytes, and (34 +
// 5as/h)/t = (34 + 106.7)/8 with sequence parallelism; selective drops the 5as/h term.
TEST(MemoryModel, PaperLayerActivationsFollowTable2) {
  const double s = 2048, b = 4, h = 6144, a = 64, sbh = s * b * h;
  using R = RecomputePolicy;
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(s, b, h, a, 8, false, R::kNone),
                   sbh * (10 + 24.0 / 8 + 5 * a * s / (h * 8)));
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(s, b, h, a, 8, true, R::kNone),
                   sbh * (34 + 5 * a * s / h) / 8);
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(s, b, h, a, 8, true, R::kSelective), 34 * sbh / 8);
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(s, b, h, a, 8, false, R::kSelective),
                   sbh * (10 + 24.0 / 8));
  EXPECT_DOUBLE_EQ(paper_layer_activation_bytes(s, b, h, a, 8, true, R::kFull), 2 * sbh / 8);
  // Sequence parallelism saves the replicated 10 sbh of LayerNorm, residual and dropout tensors.
  EXPECT_LT(paper_layer_activation_bytes(s, b, h, a, 8, true, R::kNone),
            paper_layer_activation_bytes(s, b, h, a, 8, false, R::kNone));
}

// trident's own per-layer bytes against the paper's, term by term: in 16 bits trident keeps
// 32 sbh/t (no dropout: neither the two 1-byte hidden dropout masks, 2 sbh, nor the attention-
// dropout mask and output, 3as²b) plus fp32 statistics: the LayerNorms' 16 sb/t bytes and the
// softmax's log-sum-exp per (token, head), 4 asb/t. The tiled attention keeps no probabilities
// (the paper's 2as²b/t), so trident keeps under none what the paper keeps under selective, and
// selective keeps the same. With sequence parallelism every term is divided by t, so tp 4 keeps
// exactly a quarter of tp 1.
TEST(MemoryModel, LayerActivationsDifferFromThePaperOnlyByDropoutAndStatistics) {
  MemoryQuery q = gpt2_query();
  q.precision = Precision::kBf16;
  const double s = q.seq_len, b = q.micro_batch, h = q.model.n_embd, a = q.model.n_head;
  for (int t : {1, 2, 4}) {
    q.tp = t;
    q.sequence_parallel = true;
    const double selective =
        paper_layer_activation_bytes(s, b, h, a, t, t > 1, RecomputePolicy::kSelective);
    const double dropout = 2 * s * b * h / t, statistics = 16 * s * b / t + 4 * a * s * b / t;
    EXPECT_DOUBLE_EQ(layer_activation_bytes(q, false), selective - dropout + statistics) << t;
    q.recompute.policy = RecomputePolicy::kSelective;
    EXPECT_DOUBLE_EQ(layer_activation_bytes(q, false), selective - dropout + statistics) << t;
    q.recompute.policy = RecomputePolicy::kNone;
  }
  MemoryQuery one = q, four = q;
  one.tp = 1;
  four.tp = 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(four, false) * 4, layer_activation_bytes(one, false));
  // Without sequence parallelism the LayerNorm and residual rows stay whole on every tp rank.
  four.sequence_parallel = false;
  EXPECT_GT(layer_activation_bytes(four, false) * 4, layer_activation_bytes(one, false));
}

TEST(ExpertPlan, EachEpDividingExpertsAndRanksWithItsBusiestRankAndTraffic) {
  MemoryQuery q;
  q.model.family = ModelFamily::kLlama;
  q.model.n_layer = 4, q.model.n_embd = 32, q.model.n_head = 4, q.model.n_kv_head = 2;
  q.model.ffn_hidden = 88, q.model.vocab_size = 256, q.model.block_size = 32;
  q.model.moe.n_experts = 8, q.model.moe.top_k = 2, q.model.moe.expert_ffn_hidden = 24;
  q.model.moe.moe_layer_every = 2;
  q.dp = 4, q.pp = 2, q.micro_batch = 2, q.seq_len = 16, q.micro_batches = 2;
  const std::vector<ExpertOption> options = expert_options(q);
  ASSERT_EQ(options.size(), 3u);  // ep 1, 2, 4 divide both 8 experts and dp x tp = 4
  double previous = 1e300;
  for (size_t i = 0; i < options.size(); ++i) {
    const ExpertOption& o = options[i];
    EXPECT_EQ(o.ep, 1 << i);
    MemoryQuery with = q;
    with.ep = o.ep;
    EXPECT_EQ(o.busiest.prediction.total(), predict_busiest_rank(with).prediction.total());
    EXPECT_LT(o.busiest.prediction.model_states(), previous) << "fewer experts per rank";
    previous = o.busiest.prediction.model_states();
    // One MoE layer per pipeline rank, two micro-batches, 32 tokens x top-2 rows of 32 fp32s,
    // four passes, (ep - 1) / ep of them to other ranks.
    EXPECT_DOUBLE_EQ(o.exchanged_bytes, 4.0 * 2 * 32 * 2 * (o.ep - 1.0) / o.ep * 32 * 4);
  }
  q.model.moe = {};
  EXPECT_TRUE(expert_options(q).empty());
}
