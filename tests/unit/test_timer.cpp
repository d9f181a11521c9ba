// The phase timer: nested phases counted once each, and the settle hook (a device fence) run at
// every phase change, its wait charged to the phase whose work it waits for.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/timer.hpp"

using namespace trident;

namespace {

int settles = 0;
void slow_settle() {  // stands for a fence that waits 20 ms for queued kernels
  ++settles;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

double seconds(const PhaseTimer& timer, Phase p) {
  return timer.all()[static_cast<int>(p)];
}

}  // namespace

TEST(PhaseTimer, SettlesAtEveryPhaseChangeAndChargesTheWaitToThePhaseEnding) {
  PhaseTimer timer;
  timer.set_settle(&slow_settle);
  settles = 0;
  timer.push(Phase::kForward);
  timer.push(Phase::kTpComm);  // forward's queued work settles into forward
  timer.pop();                 // the collective's into tp_comm
  timer.pop();
  EXPECT_EQ(settles, 4);
  EXPECT_GE(seconds(timer, Phase::kForward), 0.039);  // two waits: at the push and the last pop
  EXPECT_GE(seconds(timer, Phase::kTpComm), 0.019);
  EXPECT_LT(seconds(timer, Phase::kTpComm), seconds(timer, Phase::kForward));
  EXPECT_EQ(seconds(timer, Phase::kBackward), 0.0);
}

TEST(PhaseTimer, WithoutSettleNothingWaits) {
  PhaseTimer timer;
  settles = 0;
  timer.push(Phase::kOptimizer);
  timer.pop();
  EXPECT_EQ(settles, 0);
  EXPECT_LT(seconds(timer, Phase::kOptimizer), 0.019);
}

// run.phase_fences = "profiled": steps that are not profiled change phases without the fence.
TEST(PhaseTimer, SettlingOffSkipsTheSettleHook) {
  PhaseTimer timer;
  timer.set_settle(&slow_settle);
  settles = 0;
  timer.set_settling(false);
  timer.push(Phase::kForward);
  timer.pop();
  EXPECT_EQ(settles, 0);
  timer.set_settling(true);
  timer.push(Phase::kBackward);
  timer.pop();
  EXPECT_EQ(settles, 2);
}
