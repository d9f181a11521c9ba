// `trident plan`'s model: what fits, what it recommends where the answer is clear, and errors.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "model/context_parallel.hpp"
#include "model/params.hpp"
#include "plan/planner.hpp"

using namespace trident;

namespace {
PlanModel model(int layers, int hidden, int heads) {
  PlanModel m;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  return m;
}

PlanCluster nodes_of_eight(int nodes) {
  PlanCluster c;  // 8 x 80 GB per node, 25 GB/s per GPU between nodes
  c.gpus = 8 * nodes;
  return c;
}

// The recommendation for a model on a cluster, with every feasible layout inside the headroom.
PlanCandidate recommend(const PlanModel& m, const PlanCluster& c, double tokens) {
  const PlanResult r = plan_layouts(m, c, tokens);
  EXPECT_FALSE(r.feasible.empty()) << r.reasons;
  if (r.feasible.empty()) return {};
  EXPECT_EQ(r.feasible.front().describe(), r.recommendation);
  for (const PlanCandidate& k : r.feasible)
    EXPECT_LE(k.memory_gb(), kPlanUsableMemoryFraction * c.gpu_mem_gb);
  return r.feasible.front();
}

constexpr double kMillion = 1 << 20;  // tokens
}  // namespace

TEST(Planner, SevenBillionOnEightNodesIsDataParallelWithZeroOneOrTwo) {
  PlanCluster c;
  c.gpus = 64;
  const PlanResult r = plan_layouts(model(32, 4096, 32), c, 1 << 20);
  ASSERT_FALSE(r.feasible.empty());
  const PlanCandidate& best = r.feasible.front();
  EXPECT_EQ(best.tp, 1);
  EXPECT_EQ(best.pp, 1);
  EXPECT_EQ(best.dp, 64);
  EXPECT_TRUE(best.zero == 1 || best.zero == 2) << best.describe();
  for (const PlanCandidate& k : r.feasible) EXPECT_LE(k.memory_gb(), c.gpu_mem_gb);
}

TEST(Planner, ASingleSmallGpuNeedsOptimizerOffload) {
  PlanCluster c;
  c.gpus = 1;
  c.gpus_per_node = 1;
  c.gpu_mem_gb = 16;
  const PlanResult r = plan_layouts(model(48, 1600, 25), c, 65536);  // GPT-2 XL, 1.5B
  ASSERT_FALSE(r.feasible.empty());
  EXPECT_EQ(r.feasible.front().offload, "host");
  for (const PlanCandidate& k : r.feasible) EXPECT_EQ(k.offload, "host");  // nothing else fits
  EXPECT_NE(r.reasons.find("offloaded to host memory"), std::string::npos) << r.reasons;
}

TEST(Planner, ATrillionParametersOnOneNodeDoesNotFitAndSaysSo) {
  PlanCluster c;
  PlanModel m = model(128, 25600, 160);
  const PlanResult r = plan_layouts(m, c, 1 << 20);
  EXPECT_TRUE(r.feasible.empty());
  EXPECT_EQ(r.recommendation, "none");
  EXPECT_NE(r.reasons.find("add GPUs"), std::string::npos) << r.reasons;
}

TEST(Planner, MoreMemoryNeverShrinksTheFeasibleSet) {
  PlanCluster small, large;
  small.gpus = large.gpus = 16;
  small.gpu_mem_gb = 40;
  const PlanModel m = model(40, 5120, 40);
  EXPECT_LE(plan_layouts(m, small, 1 << 20).feasible.size(),
            plan_layouts(m, large, 1 << 20).feasible.size());
}

TEST(Planner, RejectsNonsense) {
  PlanCluster c;
  EXPECT_THROW(plan_layouts(model(0, 4096, 32), c, 1 << 20), InputError);
  EXPECT_THROW(plan_layouts(model(32, 4096, 30), c, 1 << 20), InputError);  // heads !| hidden
  c.gpus = 0;
  EXPECT_THROW(plan_layouts(model(32, 4096, 32), c, 1 << 20), InputError);
  c.gpus = 8;
  PlanModel moe = model(32, 4096, 32);
  moe.moe.experts = 8;
  moe.moe.top_k = 9;  // more experts a token than there are
  EXPECT_THROW(plan_layouts(moe, c, 1 << 20), InputError);
  moe.moe.top_k = 2;
  moe.moe.every = 33;  // no layer would hold an MoE
  EXPECT_THROW(plan_layouts(moe, c, 1 << 20), InputError);
  moe.moe.every = 1;
  moe.params = 1e9;  // a count that would ignore the experts
  EXPECT_THROW(plan_layouts(moe, c, 1 << 20), InputError);
  moe.params = 0;
  EXPECT_NO_THROW(plan_layouts(moe, c, 1 << 20));
}

// The practitioners' recipe on 8 x 80 GB nodes, each line at a realistic scale and global batch
// (fixed in tokens). Up to ~7B: data parallelism, with ZeRO-1/2 once the replicated Adam states
// stop fitting.
TEST(Planner, RecipeOneBillionOnOneNodeIsDataParallel) {
  const PlanCandidate best = recommend(model(24, 2048, 16), nodes_of_eight(1), kMillion / 2);
  EXPECT_EQ(best.tp, 1) << best.describe();
  EXPECT_EQ(best.pp, 1) << best.describe();
  EXPECT_EQ(best.dp, 8) << best.describe();
  EXPECT_LE(best.zero, 2) << best.describe();  // 21 GB of replicated states fit: plain DP
}

TEST(Planner, RecipeSevenBillionOnEightNodesIsZeroOneOrTwoAtOneAndTwoMillionTokens) {
  for (double tokens : {kMillion, 2 * kMillion}) {
    const PlanCandidate best = recommend(model(32, 4096, 32), nodes_of_eight(8), tokens);
    EXPECT_EQ(best.tp, 1) << best.describe();
    EXPECT_EQ(best.pp, 1) << best.describe();
    EXPECT_EQ(best.dp, 64) << best.describe();
    EXPECT_TRUE(best.zero == 1 || best.zero == 2) << best.describe();
  }
}

// 13-70B: sharded data parallelism without model parallelism. At 13B on 16 nodes (1M tokens) the
// replicated parameters and gradients still fit beside ZeRO-1's sharded moments, and ZeRO-1
// reduces once per step where ZeRO-3 re-gathers the parameters every micro-batch: with GEMMs at
// the fitted 85% of peak the gathers no longer hide, and ZeRO-3's best (selective, micro-batch 4)
// is 2% slower. From 30B ZeRO-3 is needed to fit (below).
TEST(Planner, RecipeThirteenBillionOnSixteenNodesIsZeroOneWithoutModelParallelism) {
  const PlanCandidate best = recommend(model(40, 5120, 40), nodes_of_eight(16), kMillion);
  EXPECT_EQ(best.tp, 1) << best.describe();
  EXPECT_EQ(best.pp, 1) << best.describe();
  EXPECT_EQ(best.zero, 1) << best.describe();
  EXPECT_GE(best.micro_batch, 4) << best.describe();
}

TEST(Planner, RecipeThirtyBillionOnSixteenNodesIsZeroThree) {
  for (const PlanModel& m : {model(60, 6656, 52), model(48, 7168, 56)}) {
    const PlanCandidate best = recommend(m, nodes_of_eight(16), 2 * kMillion);
    EXPECT_EQ(best.tp, 1) << best.describe();
    EXPECT_EQ(best.pp, 1) << best.describe();
    EXPECT_EQ(best.zero, 3) << best.describe();
  }
}

TEST(Planner, RecipeSeventyBillionOnSixteenNodesIsZeroThree) {
  const PlanCandidate best = recommend(model(80, 8192, 64), nodes_of_eight(16), 2 * kMillion);
  EXPECT_EQ(best.tp, 1) << best.describe();
  EXPECT_EQ(best.pp, 1) << best.describe();
  EXPECT_EQ(best.zero, 3) << best.describe();
}

// ZeRO-3 at 70B is a preference for the simpler layout, not the fastest one: without it the
// planner takes model parallelism.
TEST(Planner, SeventyBillionWithoutThePreferenceForDataParallelismGoesModelParallel) {
  PlanPolicy speed_only;
  speed_only.model_parallel_tolerance = 0;
  const PlanResult r =
      plan_layouts(model(80, 8192, 64), nodes_of_eight(16), 2 * kMillion, speed_only);
  ASSERT_FALSE(r.feasible.empty());
  const PlanCandidate& best = r.feasible.front();
  EXPECT_TRUE(best.tp > 1 || best.pp > 1) << best.describe();
}

// 70-175B: ZeRO-3 plus tensor parallelism inside a node. With a 2M-token batch on 512 GPUs each
// GPU gets two sequences: too few for ZeRO-3 alone to hide its gathers; tp raises the sequences
// per data-parallel rank and shrinks activations.
TEST(Planner, RecipeOneHundredSeventyFiveBillionOnSixtyFourNodesIsZeroThreeWithTensorParallelism) {
  const PlanResult r = plan_layouts(model(96, 12288, 96), nodes_of_eight(64), 2 * kMillion);
  ASSERT_FALSE(r.feasible.empty());
  const PlanCandidate& best = r.feasible.front();
  EXPECT_EQ(best.zero, 3) << best.describe();
  EXPECT_TRUE(best.tp == 2 || best.tp == 4 || best.tp == 8) << best.describe();
  EXPECT_EQ(best.pp, 1) << best.describe();
  EXPECT_NE(r.reasons.find("tensor parallelism (tp="), std::string::npos) << r.reasons;
}

// 400B+: dp x tp x pp is the fastest. Without sequence parallelism ZeRO-3 with tensor parallelism
// fits only micro-batches of 1-2 sequences, whose compute cannot hide the parameter gathers; with
// it (activations / tp) ZeRO-3 + tp (4, inside a node) fits micro-batch 8 and comes within the
// model-parallel tolerance of the 3D layout, so the preference for fewer model-parallel axes
// takes it.
TEST(Planner, ATrillionOnOneHundredTwentyEightNodesIsFastestInThreeDAndSequenceParallel) {
  const PlanResult r = plan_layouts(model(128, 25600, 160), nodes_of_eight(128), 4 * kMillion);
  ASSERT_FALSE(r.feasible.empty());
  const PlanCandidate* fastest = &r.feasible.front();
  for (const PlanCandidate& k : r.feasible)
    if (k.step_seconds < fastest->step_seconds) fastest = &k;
  EXPECT_GT(fastest->tp, 1) << fastest->describe();
  EXPECT_GT(fastest->pp, 1) << fastest->describe();
  EXPECT_GT(fastest->dp, 1) << fastest->describe();
  const PlanCandidate& best = r.feasible.front();
  EXPECT_GT(best.tp, 1) << best.describe();
  EXPECT_LE(best.tp, 8) << best.describe();
  EXPECT_TRUE(best.sequence_parallel) << best.describe();
  // Without sequence parallelism no tp-only layout comes within the tolerance.
  for (const PlanCandidate& k : r.feasible) {
    if (k.tp > 1 && k.pp == 1 && !k.sequence_parallel) {
      EXPECT_GT(k.step_seconds, (1 + kPlanModelParallelTolerance) * r.fastest_seconds)
          << k.describe();
    }
  }
  EXPECT_NE(r.reasons.find("sequence parallelism: "), std::string::npos) << r.reasons;
}

// Sequence parallelism moves the bytes the all-reduces did, and splits the element-wise work and
// the activations that tensor parallelism alone repeats on every rank: with tp > 1 it is never
// slower and always smaller, so a tensor-parallel recommendation uses it.
TEST(Planner, SequenceParallelismIsNeverSlowerAlwaysSmallerAndUsedWithTensorParallelism) {
  const PlanResult r = plan_layouts(model(24, 2048, 16), nodes_of_eight(1), kMillion);
  ASSERT_FALSE(r.feasible.empty());
  int twins = 0;
  for (const PlanCandidate& k : r.feasible) {
    if (!k.sequence_parallel) continue;
    EXPECT_GT(k.tp, 1) << k.describe();
    PlanCandidate off = k;
    off.sequence_parallel = false;
    for (const PlanCandidate& other : r.feasible) {
      if (other.describe() == off.describe()) {
        ++twins;
        EXPECT_LT(k.step_seconds, other.step_seconds) << k.describe();
        EXPECT_LT(k.activations_gb, other.activations_gb) << k.describe();
      }
    }
  }
  EXPECT_GT(twins, 0);
  PlanPolicy eager;  // take model parallelism at any gain, so the choice has tp > 1
  eager.model_parallel_tolerance = 0;
  const PlanResult tp = plan_layouts(model(96, 12288, 96), nodes_of_eight(64), 2 * kMillion, eager);
  ASSERT_FALSE(tp.feasible.empty());
  ASSERT_GT(tp.feasible.front().tp, 1) << tp.feasible.front().describe();
  EXPECT_TRUE(tp.feasible.front().sequence_parallel) << tp.feasible.front().describe();
}

// At 530B on 512 GPUs ZeRO-3 alone fits (its working buffers hold two block quarters, not two
// blocks), but, as Narayanan et al. 2021 found in their Table 2, it falls far behind: every
// micro-batch gathers the whole model over the inter-node links. ZeRO-3 + tp still comes within
// the model-parallel tolerance of dp x tp x pp, so the simpler layout wins; the 3D layout is the
// fastest.
TEST(Planner, FiveHundredThirtyBillionOnSixtyFourNodesIsFarSlowerWithZeroThreeAloneThanInThreeD) {
  const PlanResult r = plan_layouts(model(105, 20480, 128), nodes_of_eight(64), 4 * kMillion);
  ASSERT_FALSE(r.feasible.empty());
  EXPECT_GT(r.feasible.front().tp, 1) << r.feasible.front().describe();
  bool three_d_within_tolerance = false, zero3_alone_fits = false;
  for (const PlanCandidate& k : r.feasible) {
    if (k.tp * k.pp == 1) {
      zero3_alone_fits = true;
      EXPECT_EQ(k.zero, 3) << k.describe();
      EXPECT_GT(k.step_seconds, 2 * r.fastest_seconds) << k.describe();
    }
    if (k.tp > 1 && k.pp > 1 && k.dp > 1 &&
        k.step_seconds <= (1 + kPlanTimeTolerance) * r.fastest_seconds)
      three_d_within_tolerance = true;
  }
  EXPECT_TRUE(zero3_alone_fits);
  EXPECT_TRUE(three_d_within_tolerance);
}

// Megatron-Turing NLG's shape and batch (105 layers, h = 20480, 1920 sequences of 2048 tokens) on
// 64 nodes: TP x PP x DP, as it was trained (TP 8 inside a node, PP across nodes).
TEST(Planner, RecipeFiveHundredThirtyBillionAtItsPublishedBatchIsThreeD) {
  const PlanCandidate best = recommend(model(105, 20480, 128), nodes_of_eight(64), 1920 * 2048.0);
  EXPECT_GT(best.tp, 1) << best.describe();
  EXPECT_GT(best.pp, 1) << best.describe();
  EXPECT_GT(best.dp, 1) << best.describe();
  EXPECT_LE(best.tp, 8);
}

// A single small GPU: ZeRO-Offload, the optimizer states and step on the host.
TEST(Planner, RecipeOneBillionOnOneSixteenGigabyteGpuOffloadsTheOptimizer) {
  PlanCluster c;
  c.gpus = 1;
  c.gpus_per_node = 1;
  c.gpu_mem_gb = 16;
  const PlanCandidate best = recommend(model(24, 2048, 16), c, 65536);
  EXPECT_EQ(best.offload, "host") << best.describe();
  EXPECT_EQ(best.dp, 1);
}

TEST(Planner, ReasonsNameTheHeadroomTheZeroStageAndTheModelParallelism) {
  const PlanResult r = plan_layouts(model(40, 5120, 40), nodes_of_eight(16), kMillion);
  for (const char* part : {"headroom", "ZeRO-1:", "with a lower stage", "with a higher stage",
                           "no tensor or pipeline parallelism", "time:"})
    EXPECT_NE(r.reasons.find(part), std::string::npos) << part << " in\n" << r.reasons;
}

// The runtime reserve and the 90% headroom both count: a model whose states alone would fit in
// HBM but not in the usable share is infeasible.
TEST(Planner, ALayoutThatFillsTheWholeGpuDoesNotFit) {
  PlanCluster c;
  c.gpus = 1;
  c.gpus_per_node = 1;
  c.gpu_mem_gb = 16;
  PlanModel m = model(24, 2048, 16);
  m.params = 0.98e9;  // 16 bytes each: 15.7 GB, under 16 GB of HBM, over the 14.4 GB usable
  const PlanResult r = plan_layouts(m, c, 2048);
  for (const PlanCandidate& k : r.feasible) EXPECT_EQ(k.offload, "host") << k.describe();
}

// A layout as written gets the numbers the planner gives the same layout among its candidates.
TEST(Planner, PredictLayoutAgreesWithTheCandidateItEnumerates) {
  const PlanModel m = model(40, 5120, 40);
  const PlanResult r = plan_layouts(m, nodes_of_eight(16), kMillion);
  ASSERT_GT(r.feasible.size(), 10u);
  for (size_t i = 0; i < r.feasible.size(); i += r.feasible.size() / 10) {
    const PlanCandidate& k = r.feasible[i];
    PlanCluster c = nodes_of_eight(16);
    const PlanCandidate p = predict_layout(m, c, kMillion, k);
    EXPECT_EQ(p.describe(), k.describe());
    EXPECT_EQ(p.micro_batches, k.micro_batches) << k.describe();
    EXPECT_DOUBLE_EQ(p.step_seconds, k.step_seconds) << k.describe();
    EXPECT_DOUBLE_EQ(p.memory_gb(), k.memory_gb()) << k.describe();
  }
  PlanCandidate bad = r.feasible.front();
  bad.pp = 3;  // 40 layers do not split over 3 stages
  EXPECT_THROW(predict_layout(m, nodes_of_eight(16), kMillion, bad), InputError);
}

// Narayanan et al. 2021, Eq. 3, for their 1T row (B = 3072, s = 2048, l = 128, h = 25600,
// V = 51200): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), 5.14e19 FLOPs per step.
TEST(Planner, PaperStepFlopsFollowEquationThree) {
  PlanModel m = model(128, 25600, 160);
  m.seq = 2048;
  m.vocab = 51200;
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double f = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_DOUBLE_EQ(paper_step_flops(m, B), f);
  EXPECT_NEAR(f, 5.14e19, 0.01e19);
}

namespace {
// The planner's Llama from a model config's shape.
PlanModel plan_llama(const ModelConfig& c) {
  PlanModel m = model(c.n_layer, c.n_embd, c.n_head);
  m.llama = true;
  m.kv_heads = c.kv_heads();
  m.ffn = c.mlp_hidden();
  m.tied = c.tied();
  m.vocab = c.vocab_size;
  m.seq = 8192;
  return m;
}

ModelConfig llama3(int layers, int embd, int heads, int ffn) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.n_layer = layers;
  c.n_embd = embd;
  c.n_head = heads;
  c.n_kv_head = 8;
  c.ffn_hidden = ffn;
  c.vocab_size = 128256;
  c.block_size = 8192;
  return c;
}
}  // namespace

TEST(Planner, LlamaParameterCountIsTheParameterTables) {
  for (const ModelConfig& c : {llama3(32, 4096, 32, 14336), llama3(80, 8192, 64, 28672)}) {
    EXPECT_EQ(plan_llama(c).param_count(), static_cast<double>(parameter_count(c)));
    ModelConfig tied = c;
    tied.tie_embeddings = true;
    EXPECT_EQ(plan_llama(tied).param_count(), static_cast<double>(parameter_count(tied)));
  }
}

TEST(Planner, LlamaThreeEightBillionOnEightNodesIsShardedDataParallel) {
  // Replicated, its model states (16 bytes a parameter, 128 GB) do not fit: ZeRO-2 or 3.
  const PlanCandidate best =
      recommend(plan_llama(llama3(32, 4096, 32, 14336)), nodes_of_eight(8), 4 * kMillion);
  EXPECT_EQ(best.tp * best.pp, 1) << best.describe();
  EXPECT_GE(best.zero, 2) << best.describe();
}

TEST(Planner, LlamaThreeSeventyBillionOnOneNodeFitsOnlyWithOffload) {
  // ZeRO-3 over 8 GPUs still leaves 141 GB of model states per GPU: only host offload fits.
  const PlanResult r =
      plan_layouts(plan_llama(llama3(80, 8192, 64, 28672)), nodes_of_eight(1), 4 * kMillion);
  ASSERT_FALSE(r.feasible.empty()) << r.reasons;
  for (const PlanCandidate& k : r.feasible) EXPECT_EQ(k.offload, "host") << k.describe();
  const PlanResult more =
      plan_layouts(plan_llama(llama3(80, 8192, 64, 28672)), nodes_of_eight(8), 4 * kMillion);
  ASSERT_FALSE(more.feasible.empty()) << more.reasons;
  EXPECT_EQ(more.feasible.front().offload, "none") << more.recommendation;
}

TEST(Planner, LlamaLayerActivationsCountGroupedQueryAttention) {
  const double s = 4096, b = 1, h = 4096, a = 32, F = 14336;
  const auto bytes = [&](double kv, int t, RecomputePolicy p) {
    return llama_layer_activation_bytes(s, b, h, a, kv, F, t, false, p);
  };
  // 8 key/value heads keep a quarter of multi-head attention's k and v: 4 s b h (1 - 1/4) less.
  EXPECT_DOUBLE_EQ(bytes(32, 1, RecomputePolicy::kNone) - bytes(8, 1, RecomputePolicy::kNone),
                   4 * s * b * h * 0.75);
  // Selective drops exactly the softmax output, 2 a s^2 b / t; full keeps the input alone.
  EXPECT_DOUBLE_EQ(bytes(8, 2, RecomputePolicy::kNone) - bytes(8, 2, RecomputePolicy::kSelective),
                   2 * a * s * s * b / 2);
  EXPECT_DOUBLE_EQ(bytes(8, 2, RecomputePolicy::kFull), 2 * s * b * h);
  // Past tp = kv each rank keeps one key/value head, whatever tp.
  const double kv_share_16 = bytes(8, 16, RecomputePolicy::kSelective) - 8 * s * b * h -
                             (4 * s * b * h + 6 * s * b * F) / 16;
  EXPECT_DOUBLE_EQ(kv_share_16, 4 * s * b * h / a);
}

namespace {
// Mixtral 8x7B's shape (Hugging Face config.json), in the model config and as the planner's.
ModelConfig mixtral(int shared = 0, int every = 1) {
  ModelConfig c = llama3(32, 4096, 32, 14336);
  c.vocab_size = 32000;
  c.block_size = 4096;
  c.moe.n_experts = 8;
  c.moe.top_k = 2;
  c.moe.n_shared_experts = shared;
  c.moe.moe_layer_every = every;
  return c;
}

PlanModel plan_moe(const ModelConfig& c) {
  PlanModel m = plan_llama(c);
  m.seq = c.block_size;
  m.moe.experts = c.moe.n_experts;
  m.moe.top_k = c.moe.top_k;
  m.moe.expert_ffn = c.expert_hidden();
  m.moe.shared = c.moe.n_shared_experts;
  m.moe.every = c.moe.moe_layer_every;
  return m;
}

PlanCluster h100_nodes(int nodes) {
  PlanCluster c = on_device(PlanCluster{}, device_preset("h100"));
  c.gpus = 8 * nodes;
  return c;
}

// Megatron-Core's Mixtral layout (TP1 EP8 PP4 on 64 GPUs, ZeRO-1, micro-batch 1), ep and
// virtual stages as given.
PlanCandidate mixtral_layout(int ep, int virtual_stages = 1) {
  PlanCandidate k;
  k.dp = 16, k.tp = 1, k.pp = 4, k.ep = ep, k.zero = 1, k.micro_batch = 1;
  k.virtual_stages = virtual_stages;
  return k;
}
}  // namespace

TEST(PlannerMoe, ParameterCountsAreTheParameterTables) {
  for (const ModelConfig& c : {mixtral(), mixtral(1, 1), mixtral(2, 2)}) {
    const PlanModel m = plan_moe(c);
    EXPECT_EQ(m.param_count(), static_cast<double>(parameter_count(c))) << c.shape_line();
    EXPECT_EQ(m.active_param_count(), static_cast<double>(active_parameter_count(c)))
        << c.shape_line();
    // MFU's numerator counts the experts a token runs, as train's start-up line does.
    EXPECT_NEAR(plan_model_flops_per_token(m), flops_per_token(c, c.block_size),
                1e-12 * flops_per_token(c, c.block_size));
  }
}

TEST(PlannerMoe, ComputeCountsOnlyTheExpertsATokenRuns) {
  // Eight times the experts at the same top-k: the same compute but for the router's columns.
  const PlanCluster c = h100_nodes(8);
  ModelConfig many = mixtral();
  many.moe.n_experts = 64;
  const double tokens = 256.0 * 4096;
  const PlanCandidate few_k = predict_layout(plan_moe(mixtral()), c, tokens, mixtral_layout(8));
  const PlanCandidate many_k = predict_layout(plan_moe(many), c, tokens, mixtral_layout(8));
  EXPECT_NEAR(many_k.compute_seconds / few_k.compute_seconds, 1.0, 1e-3);
  EXPECT_GT(many_k.compute_seconds, few_k.compute_seconds);  // the router's 56 more columns
  // Top-1 instead of top-2 saves one expert MLP a token: 3 x 2 x 3 h F FLOPs a token and layer
  // at the GEMM rate, and the permutation of one row.
  ModelConfig top1 = mixtral();
  top1.moe.top_k = 1;
  const PlanCandidate one = predict_layout(plan_moe(top1), c, tokens, mixtral_layout(8));
  const double rate = c.peak_tflops * 1e12 * c.mfu;
  const double hbm = c.hbm_gbs * 1e9 * c.hbm_efficiency;
  const double per_token = 3 * (2 * 3.0 * 4096 * 14336 / rate + kPlanPermuteBytes * 4096 / hbm);
  EXPECT_NEAR(few_k.compute_seconds - one.compute_seconds, 16 * 4096 * 8 * per_token,
              1e-9 * few_k.compute_seconds);
}

TEST(PlannerMoe, ExpertsShardOverExpertParallelRanksAndTheirStatesOverTheirReplicas) {
  const PlanCluster c = h100_nodes(8);
  const PlanModel m = plan_moe(mixtral());
  const double tokens = 256.0 * 4096, experts_rank = m.expert_param_count() / 4;  // pp = 4
  const PlanCandidate one = predict_layout(m, c, tokens, mixtral_layout(1));
  const PlanCandidate eight = predict_layout(m, c, tokens, mixtral_layout(8));
  // bf16 weights and gradients: 2 + 2 bytes of the 7/8 of the experts a rank no longer holds.
  EXPECT_NEAR((one.params_gb - eight.params_gb) * 1e9, 2 * experts_rank * 7 / 8, 1e3);
  EXPECT_NEAR((one.grads_gb - eight.grads_gb) * 1e9, 2 * experts_rank * 7 / 8, 1e3);
  // ZeRO-1: 12 bytes of the experts over their replicas, dp x tp / ep ranks (16 at ep 1, 2 at 8).
  EXPECT_NEAR((one.optimizer_gb - eight.optimizer_gb) * 1e9,
              12 * (experts_rank / 16 - experts_rank / 8 / 2), 1e3);
  EXPECT_EQ(one.ep_seconds, 0.0);
  EXPECT_GT(eight.ep_seconds, 0.0);
}

TEST(PlannerMoe, AllToAllsLeavingTheNodeCostTheNetworksRate) {
  // ep 8 stays on NVLink; ep 16 sends half its rows to the other node at the network's rate.
  const PlanCluster c = h100_nodes(8);
  const PlanModel m = plan_moe(mixtral());
  ModelConfig sixteen = mixtral();
  sixteen.moe.n_experts = 16;
  const double tokens = 256.0 * 4096;
  const PlanCandidate near = predict_layout(m, c, tokens, mixtral_layout(8));
  const PlanCandidate far = predict_layout(plan_moe(sixteen), c, tokens, mixtral_layout(16));
  const double rows = 2.0 * 4096 * 4096 * 2;  // a micro-batch's top-2 rows of h, bf16
  const double micro = 4 * 8;                 // four all-to-alls in each of the stage's 8 layers
  EXPECT_NEAR(near.ep_seconds, 16 * micro * rows * 7 / 8 / (c.intra_gbs * 1e9), 1e-9);
  EXPECT_NEAR(far.ep_seconds,
              16 * micro * rows * 8 / 16 / (kPlanNetworkEfficiency * c.inter_gbs * 1e9), 1e-9);
}

TEST(PlannerMoe, InterleavingDividesThePipelineBubble) {
  const PlanCluster c = h100_nodes(8);
  const PlanModel m = plan_moe(mixtral());
  const PlanCandidate plain = predict_layout(m, c, 256.0 * 4096, mixtral_layout(8));
  const PlanCandidate interleaved = predict_layout(m, c, 256.0 * 4096, mixtral_layout(8, 8));
  // The bubble's (pp - 1) micro-batch times shrink v-fold; the stage-to-stage transfers (each of
  // 16 micro-batches' activations forward and gradients backward, over the network: neighbouring
  // stages are 16 ranks apart) grow v-fold.
  const double transfers =
      16 * 2 * 2.0 * 4096 * 4096 / (kPlanNetworkEfficiency * c.inter_gbs * 1e9);
  EXPECT_NEAR(interleaved.bubble_seconds - 8 * transfers, (plain.bubble_seconds - transfers) / 8,
              1e-12);
  EXPECT_GT(plain.bubble_seconds - transfers, 0.1);
  EXPECT_EQ(interleaved.compute_seconds, plain.compute_seconds);
  EXPECT_THROW(predict_layout(m, c, 256.0 * 4096, mixtral_layout(3)), InputError);
}

// Under sequence parallelism a tp rank holds, and sends to the next stage, 1 / tp of a
// micro-batch's tokens (pipeline_runner's transfers): the bubble's transfer term is a tp-th of
// the whole activation's.
TEST(Planner, SequenceParallelStagesSendTheirShareOfTheTokens) {
  const PlanCluster c = h100_nodes(4);
  PlanModel m = plan_llama(llama3(32, 4096, 32, 14336));
  m.seq = 4096;
  PlanCandidate k;
  k.dp = 1, k.tp = 8, k.pp = 4, k.zero = 1, k.micro_batch = 1, k.sequence_parallel = true;
  const PlanCandidate plain = predict_layout(m, c, 16.0 * 4096, k);
  k.virtual_stages = 2;
  const PlanCandidate interleaved = predict_layout(m, c, 16.0 * 4096, k);
  // 16 micro-batches' activations forward and gradients backward, bf16, a tp rank's 4096 / 8
  // tokens of h = 4096, over the network (neighbouring stages are 8 ranks apart).
  const double transfers =
      16 * 2 * 2.0 * 4096 / 8 * 4096 / (kPlanNetworkEfficiency * c.inter_gbs * 1e9);
  EXPECT_NEAR(interleaved.bubble_seconds - 2 * transfers, (plain.bubble_seconds - transfers) / 2,
              1e-12);
  EXPECT_GT(plain.bubble_seconds - transfers, 0.01);
}

TEST(PlannerMoe, TheSearchPicksAnExpertParallelLayoutTridentRuns) {
  const PlanResult r = plan_layouts(plan_moe(mixtral()), h100_nodes(8), 256.0 * 4096);
  ASSERT_FALSE(r.feasible.empty()) << r.reasons;
  EXPECT_GT(r.feasible.front().ep, 1) << r.recommendation;
  EXPECT_NE(r.reasons.find("expert parallelism ep="), std::string::npos) << r.reasons;
  bool some_ep = false;
  for (const PlanCandidate& k : r.feasible) {
    EXPECT_EQ(8 % k.ep, 0);
    EXPECT_EQ((k.dp * k.tp) % k.ep, 0);
    // An MoE layer on tp ranks routes each rank's own tokens: sequence parallelism.
    EXPECT_TRUE(k.tp == 1 || k.sequence_parallel) << k.describe();
    some_ep = some_ep || k.ep == 8;
  }
  EXPECT_TRUE(some_ep);
}

TEST(PlannerMoe, ACapacityFactorBoundsTheReservedRows) {
  // Dropless, trident reserves the most rows the all-to-all can bring (at ep 8 with top-2 over 8
  // experts: 8 a token, 4x the balanced 2); a capacity factor of 1 bounds them at 2 a token, and
  // a factor that never binds changes nothing. The time model is the same for all three.
  const PlanCluster c = h100_nodes(8);
  PlanModel m = plan_moe(mixtral());
  const double tokens = 256.0 * 4096;
  const PlanCandidate dropless = predict_layout(m, c, tokens, mixtral_layout(8));
  m.moe.capacity_factor = 1.0;
  const PlanCandidate bounded = predict_layout(m, c, tokens, mixtral_layout(8));
  m.moe.capacity_factor = 100.0;
  const PlanCandidate loose = predict_layout(m, c, tokens, mixtral_layout(8));
  EXPECT_LT(bounded.activations_gb, 0.5 * dropless.activations_gb);
  EXPECT_EQ(loose.activations_gb, dropless.activations_gb);
  EXPECT_EQ(bounded.step_seconds, dropless.step_seconds);
  EXPECT_EQ(bounded.model_states_gb(), dropless.model_states_gb());
}

namespace {
// Llama 3 8B at `seq` tokens on H100 nodes, cp ranks splitting each sequence.
PlanCandidate llama_cp_layout(int dp, int cp, int tp, int zero, const std::string& recompute) {
  PlanCandidate k;
  k.dp = dp, k.cp = cp, k.tp = tp, k.pp = 1, k.zero = zero, k.micro_batch = 1;
  k.recompute = recompute;
  k.sequence_parallel = tp > 1;
  return k;
}
PlanModel llama_at(int seq) {
  PlanModel m = plan_llama(llama3(32, 4096, 32, 14336));
  m.seq = seq;
  return m;
}
}  // namespace

// A cp rank computes and keeps its s / cp tokens: compute, tensor-parallel traffic and
// activations fall by cp; the ZeRO shards spread over dp x cp; the ring adds its exposed hops.
TEST(PlannerContextParallel, EachRankComputesAndKeepsItsShareOfTheSequence) {
  const PlanModel m = llama_at(32768);
  const PlanCluster c = h100_nodes(4);
  const double tokens = 32.0 * 32768;
  const PlanCandidate one = predict_layout(m, c, tokens, llama_cp_layout(4, 1, 8, 3, "full"));
  const PlanCandidate four = predict_layout(m, c, tokens, llama_cp_layout(1, 4, 8, 3, "full"));
  EXPECT_EQ(one.gpus(), 32);
  EXPECT_EQ(four.gpus(), 32);
  // The same sequences per data-parallel rank four times over, each a quarter of the tokens.
  EXPECT_NEAR(four.compute_seconds, one.compute_seconds, 1e-9 * one.compute_seconds);
  EXPECT_NEAR(four.tp_seconds, one.tp_seconds, 1e-9 * one.tp_seconds);
  EXPECT_EQ(one.cp_seconds, 0);
  EXPECT_GT(four.cp_seconds, 0);
  // Model states sharded over 4 ranks either way; activations a quarter (the ring's buffers
  // aside) and the logits a quarter.
  EXPECT_NEAR(four.model_states_gb(), one.model_states_gb(), 1e-9);
  EXPECT_LT(four.activations_gb, 0.3 * one.activations_gb);
  EXPECT_GT(four.activations_gb, 0.25 * one.activations_gb);
  // A sequence that does not cut into 2 cp chunks is not a layout.
  EXPECT_THROW(
      predict_layout(llama_at(32766), c, 32.0 * 32766, llama_cp_layout(1, 4, 8, 3, "full")),
      InputError);
}

// Each hop of the ring overlaps one ring step's attention: at 128K tokens the attention hides it
// (only the overlap's inefficiency shows); across nodes, on short sequences, it shows whole.
TEST(PlannerContextParallel, TheRingHidesBehindTheAttentionOfLongSequences) {
  const PlanCluster c = h100_nodes(16);
  const PlanCandidate layout = llama_cp_layout(1, 16, 8, 3, "full");
  const PlanCandidate longer = predict_layout(llama_at(131072), c, 131072.0, layout);
  const PlanCandidate shorter = predict_layout(llama_at(16384), c, 16384.0, layout);
  EXPECT_LT(longer.cp_seconds, 0.05 * longer.compute_seconds);
  EXPECT_GT(shorter.cp_seconds / shorter.compute_seconds,
            10 * longer.cp_seconds / longer.compute_seconds);
}

// The search finds context parallelism where a long sequence fits nowhere else, and keeps it out
// where the other axes suffice (the memory it frees is then not worth its ring).
TEST(PlannerContextParallel, TheSearchSplitsSequencesOnlyWhenItPays) {
  const PlanResult long_seq = plan_layouts(llama_at(262144), h100_nodes(4), 262144.0);
  ASSERT_FALSE(long_seq.feasible.empty()) << long_seq.reasons;
  EXPECT_GT(long_seq.feasible.front().cp, 1) << long_seq.recommendation;
  EXPECT_NE(long_seq.reasons.find("context parallelism (cp="), std::string::npos)
      << long_seq.reasons;
  for (const PlanCandidate& k : long_seq.feasible) EXPECT_EQ(262144 % (2 * k.cp), 0);
  const PlanResult short_seq = plan_layouts(llama_at(4096), h100_nodes(4), 1024.0 * 4096);
  ASSERT_FALSE(short_seq.feasible.empty()) << short_seq.reasons;
  EXPECT_EQ(short_seq.feasible.front().cp, 1) << short_seq.recommendation;
}

// Fused attention (plan --attention fused) runs the causal half of the score products and keeps
// no scores in HBM: the step's compute falls, the more so the longer the sequence, and nothing
// else changes.
TEST(PlannerContextParallel, FusedAttentionDropsTheScoresTrafficAndTheMaskedHalf) {
  const PlanCluster c = h100_nodes(16);
  const PlanCandidate layout = llama_cp_layout(1, 16, 8, 3, "full");
  double ratio_short = 0, ratio_long = 0;
  for (const int seq : {8192, 131072}) {
    PlanModel unfused = llama_at(seq), fused = llama_at(seq);
    fused.fused_attention = true;
    const PlanCandidate a = predict_layout(unfused, c, seq, layout);
    const PlanCandidate b = predict_layout(fused, c, seq, layout);
    EXPECT_LT(b.compute_seconds, a.compute_seconds) << seq;
    EXPECT_EQ(b.tp_seconds, a.tp_seconds) << seq;
    EXPECT_EQ(b.activations_gb, a.activations_gb) << seq;
    (seq == 8192 ? ratio_short : ratio_long) = b.compute_seconds / a.compute_seconds;
  }
  EXPECT_LT(ratio_long, ratio_short);
  EXPECT_LT(ratio_long, 0.5);
}

// Fused attention runs at the device's published rate (FlashAttention-2: 35% of an H100's peak),
// not its GEMMs': the step's compute is the GEMMs' plus the causal products, 3 x 2 h s / t a
// token and layer, at that rate; --attention-efficiency replaces it; unfused attention stays a
// batched GEMM.
TEST(PlannerContextParallel, FusedAttentionRunsAtTheDevicesPublishedRate) {
  const int seq = 131072, tp = 8;
  const PlanCandidate layout = llama_cp_layout(1, 1, tp, 3, "none");
  PlanCluster published = h100_nodes(1), faster = published;
  EXPECT_EQ(published.attention_efficiency, 0.35);
  faster.attention_efficiency = 0.7;
  PlanModel fused = llama_at(seq);
  fused.fused_attention = true;
  const PlanCandidate slow = predict_layout(fused, published, seq, layout);
  const PlanCandidate fast = predict_layout(fused, faster, seq, layout);
  const double peak = published.peak_tflops * 1e12;
  const double products = 3.0 * fused.layers * seq * (2.0 * fused.hidden * seq / tp);
  EXPECT_NEAR(slow.compute_seconds - fast.compute_seconds,
              products * (1 / (0.35 * peak) - 1 / (0.7 * peak)), 1e-9 * slow.compute_seconds);
  const PlanModel unfused = llama_at(seq);
  EXPECT_EQ(predict_layout(unfused, published, seq, layout).compute_seconds,
            predict_layout(unfused, faster, seq, layout).compute_seconds);
}

// The all-gather (Llama 3's parallel.cp_comm) gathers every rank's key/value chunk before the
// forward and again before the backward, then reduce-scatters their fp32 gradients, nothing
// overlapped; it holds every chunk where the ring holds two, as the memory model counts them.
TEST(PlannerContextParallel, TheAllGatherIsExposedAndHoldsEveryChunk) {
  const int seq = 131072, cp = 16, tp = 8;
  const PlanCluster c = h100_nodes(16);
  const PlanCandidate layout = llama_cp_layout(1, cp, tp, 0, "none");
  PlanModel ring = llama_at(seq), gathered = llama_at(seq);
  ring.fused_attention = gathered.fused_attention = true;
  gathered.cp_comm = CpComm::kAllgather;
  const PlanCandidate a = predict_layout(ring, c, seq, layout);
  const PlanCandidate b = predict_layout(gathered, c, seq, layout);
  // A rank's chunk: s / cp tokens of one key and one value head (8 kv heads over tp 8), bf16; the
  // cp group spans 16 nodes, so the network's rate.
  const double tokens = seq / cp, chunk = 2 * 2.0 * 128 * tokens;
  const double gather = (cp - 1) * chunk / (kPlanNetworkEfficiency * c.inter_gbs * 1e9);
  EXPECT_NEAR(b.cp_seconds, b.micro_batches * ring.layers * 4 * gather, 1e-9 * b.cp_seconds);
  EXPECT_GT(b.cp_seconds, 2 * a.cp_seconds);  // the ring hides behind 8K queries' attention
  EXPECT_EQ(b.compute_seconds, a.compute_seconds);
  const ContextSplit split{cp, 0, seq};
  const ContextAttentionElements ring_elements =
      context_attention_elements(split, CpComm::kRing, 1, 32 / tp, 8 / tp, 128);
  const ContextAttentionElements gathered_elements =
      context_attention_elements(split, CpComm::kAllgather, 1, 32 / tp, 8 / tp, 128);
  const double more_bytes = 2.0 * (gathered_elements.kv - ring_elements.kv) +
                            4.0 * (gathered_elements.sums - ring_elements.sums);
  EXPECT_NEAR((b.activations_gb - a.activations_gb) * 1e9, more_bytes, 1e-6 * more_bytes);
}
