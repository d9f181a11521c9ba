// Young's and Daly's checkpoint intervals and the expected effective training time.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "plan/checkpoint_interval.hpp"

using namespace trident;

TEST(CheckpointInterval, YoungDalyAndTheEffectiveTime) {
  // Llama 3's 405B run: 419 interruptions in 54 days, a failure every 3.09 h.
  const double mtbf = 54.0 * 24 * 3600 / 419;
  const CheckpointInterval c = checkpoint_interval(60, mtbf, 600);
  EXPECT_NEAR(c.young_s, std::sqrt(2 * 60 * mtbf), 1e-9);
  const double x = 60 / (2 * mtbf);
  EXPECT_NEAR(c.daly_s, c.young_s * (1 + std::sqrt(x) / 3 + x / 9) - 60, 1e-9);
  EXPECT_LT(c.daly_s, c.young_s);  // the write is not training time
  const double period = c.daly_s + 60;
  EXPECT_NEAR(c.ratio, c.daly_s / period * (1 - (period / 2 + 600) / mtbf), 1e-12);
  // The optimum: a neighbouring interval loses more.
  auto ratio_at = [&](double tau) {
    return tau / (tau + 60) * (1 - ((tau + 60) / 2 + 600) / mtbf);
  };
  EXPECT_GT(c.ratio, ratio_at(0.8 * c.daly_s));
  EXPECT_GT(c.ratio, ratio_at(1.25 * c.daly_s));
  // Faster writes and restarts: more effective time; a write longer than 2M: checkpoint every M.
  EXPECT_GT(checkpoint_interval(10, mtbf, 60).ratio, 0.95);
  EXPECT_DOUBLE_EQ(checkpoint_interval(10, 4, 0).daly_s, 4);
}

TEST(CheckpointInterval, RefusesWhatIsNotATime) {
  EXPECT_THROW(checkpoint_interval(0, 3600, 0), InputError);
  EXPECT_THROW(checkpoint_interval(60, -1, 0), InputError);
  EXPECT_THROW(checkpoint_interval(60, 3600, -5), InputError);
  EXPECT_THROW(checkpoint_interval(NAN, 3600, 0), InputError);
}
