// StepAllocations (`trident train --report-allocations`): Views made and freed inside a step are
// charged to it by label, those outside are not, the warm-up steps are reported apart, and the
// run's other hooks still hear every event.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <string>

#include "core/types.hpp"
#include "train/step_allocations.hpp"

using namespace trident;

namespace {

struct CountingHooks final : StepHooks {
  int begins = 0, ends = 0, midway = 0;
  void step_begins(int, PhaseTimer&) override { ++begins; }
  void step_ends(int) override { ++ends; }
  void checkpoint_midway(int) override { ++midway; }
};

}  // namespace

TEST(StepAllocations, ChargesViewsMadeInsideAStepToItByLabel) {
  CountingHooks inner;
  PhaseTimer timer;
  StepAllocations counter(&inner);
  View1 before("made_before_the_run", 16);  // outside any step: not counted
  for (int step = 1; step <= StepAllocations::kWarmupSteps + 3; ++step) {
    counter.step_begins(step, timer);
    if (step == 1) View1 warmup("warmup_scratch", 8);
    if (step == StepAllocations::kWarmupSteps + 2) {
      View1 scratch("step_scratch", 1000);  // made and freed inside the step
    }
    counter.step_ends(step);
    counter.checkpoint_midway(step);
    View1 between("checkpoint_buffer", 32);  // between steps: not counted
  }
  EXPECT_EQ(inner.begins, StepAllocations::kWarmupSteps + 3);
  EXPECT_EQ(inner.ends, StepAllocations::kWarmupSteps + 3);
  EXPECT_EQ(inner.midway, StepAllocations::kWarmupSteps + 3);
  EXPECT_EQ(counter.steps_counted(), StepAllocations::kWarmupSteps + 3);
  EXPECT_EQ(counter.first_step(), 1);

  ASSERT_EQ(counter.steps().size(), 2u);  // the warm-up step and the one with the scratch View
  const StepAllocations::StepRecord& record = counter.steps()[1];
  EXPECT_EQ(record.step, StepAllocations::kWarmupSteps + 2);
  EXPECT_EQ(record.allocations, 1);
  EXPECT_EQ(record.frees, 1);
  EXPECT_GE(record.bytes, 1000 * sizeof(float));
  ASSERT_EQ(record.what.size(), 2u);
  EXPECT_EQ(record.what.begin()->first.rfind("free step_scratch", 0), 0u)
      << record.what.begin()->first;

  const std::string report = counter.report(3);
  EXPECT_NE(report.find("STEP_ALLOCATIONS rank=3 steps=5 first_step=1 warmup_allocations=1 "
                        "allocations_after_warmup=1 frees_after_warmup=1"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("STEP_ALLOCATION rank=3 step=4 allocations=1 frees=1"), std::string::npos)
      << report;
  EXPECT_NE(report.find("step_scratch"), std::string::npos) << report;
}

TEST(StepAllocations, CleanStepsReportNothingAfterTheWarmup) {
  PhaseTimer timer;
  StepAllocations counter(nullptr);
  View1 kept("kept_across_steps", 64);
  for (int step = 7; step < 12; ++step) {  // a resumed run: the warm-up counts from its first step
    counter.step_begins(step, timer);
    Kokkos::deep_copy(kept, static_cast<float>(step));
    counter.step_ends(step);
  }
  EXPECT_TRUE(counter.steps().empty());
  EXPECT_NE(counter.report(0).find("steps=5 first_step=7 warmup_allocations=0 "
                                   "allocations_after_warmup=0 frees_after_warmup=0 "
                                   "bytes_after_warmup=0\n"),
            std::string::npos)
      << counter.report(0);
}
