// `trident plan`'s model: what fits, what it recommends where the answer is clear, and errors.
#include <gtest/gtest.h>

#include "core/error.hpp"
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
}
