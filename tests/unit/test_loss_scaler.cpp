// Dynamic loss scaling: skip on overflow, back off after the hysteresis, grow after clean steps.
#include <gtest/gtest.h>

#include "optim/loss_scaler.hpp"

namespace trident {

TEST(LossScaler, DisabledNeverScalesOrSkips) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, EveryOverflowSkipsAndTheScaleHalvesAfterTheHysteresis) {
  LossScaler s(65536.0, 1000, 0.5, 2);
  EXPECT_TRUE(s.update(true));  // skipped, scale kept (hysteresis 2)
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(true));  // second overflow: skipped and halved
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(true));  // hysteresis is only restored by growth: halved again
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_FALSE(s.update(false));
}

TEST(LossScaler, GrowsAfterTheIntervalOfCleanStepsAndResetsTheHysteresis) {
  LossScaler s(1024.0, 3, 0.5, 1);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_TRUE(s.update(true));  // an overflow restarts the clean count
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 2048.0);
}

TEST(LossScaler, NeverFallsBelowOne) {
  LossScaler s(2.0, 1000, 0.5, 1);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 1.0);
}

}  // namespace trident
