// The learning-rate schedule: batch-size scaling, warmup and cosine decay values.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/lr_schedule.hpp"

namespace trident {

TEST(LrScaling, LinearAndSqrtFollowTheBatchRatio) {
  EXPECT_DOUBLE_EQ(scaled_lr(6e-4, LrScaling::kNone, 65536, 8192), 6e-4);
  EXPECT_DOUBLE_EQ(scaled_lr(6e-4, LrScaling::kLinear, 65536, 8192), 8 * 6e-4);
  EXPECT_DOUBLE_EQ(scaled_lr(6e-4, LrScaling::kSqrt, 65536, 8192), std::sqrt(8.0) * 6e-4);
  EXPECT_DOUBLE_EQ(scaled_lr(6e-4, LrScaling::kLinear, 4096, 8192), 3e-4);  // smaller batch
  EXPECT_DOUBLE_EQ(scaled_lr(6e-4, LrScaling::kSqrt, 8192, 8192), 6e-4);    // the base batch
}

TEST(LrScaling, ParsesTheThreeNames) {
  LrScaling s = LrScaling::kNone;
  EXPECT_TRUE(parse_name("sqrt", s));
  EXPECT_EQ(s, LrScaling::kSqrt);
  EXPECT_TRUE(parse_name("linear", s));
  EXPECT_EQ(s, LrScaling::kLinear);
  EXPECT_FALSE(parse_name("cubic", s));
  EXPECT_EQ(s, LrScaling::kLinear);  // untouched by a bad name
  EXPECT_STREQ(name_of(LrScaling::kNone), "none");
  EXPECT_EQ(valid_names<LrScaling>(), "one of none, linear, sqrt");
}

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloorAlongACosine) {
  const LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);  // warmup reaches the (scaled) peak
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);  // decay starts at the peak
  EXPECT_NEAR(s.at(8), 0.1 + 0.45 * (1 + std::cos(M_PI * 4 / 9)), 1e-12);  // 4 of 9 decay steps
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);                                         // and ends on the floor
  EXPECT_DOUBLE_EQ(s.at(20), 0.1);  // resumed past the end: stays there
  for (int i = 4; i < 13; ++i) EXPECT_GT(s.at(i), s.at(i + 1));
}

}  // namespace trident
