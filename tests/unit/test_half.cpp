// bf16 and fp16 conversions: round to nearest even, subnormals, overflow, NaN, exact round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half.hpp"

namespace trident {

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 x 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);  // above tie
  EXPECT_EQ(to_bf16(-2.0f), 0xC000);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(from_bf16(to_bf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  // The largest finite float rounds up into infinity, as IEEE rounding requires.
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::max()))));
}

TEST(Half, Fp16RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(to_fp16(65504.0f), 0x7BFF);                          // largest finite
  EXPECT_EQ(to_fp16(65519.0f), 0x7BFF);                          // below the halfway point to 65536
  EXPECT_EQ(to_fp16(65520.0f), 0x7C00);                          // the tie rounds to even: infinity
  EXPECT_EQ(to_fp16(-1e6f), 0xFC00);                             // -infinity
  EXPECT_EQ(to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie to even (down)
  EXPECT_EQ(to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie to even (up)
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -14)), 0x0400);             // smallest normal
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -25)), 0x0000);             // tie with 0: even
  EXPECT_EQ(to_fp16(std::ldexp(1.5f, -25)), 0x0001);             // above the tie
  EXPECT_EQ(to_fp16(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 x 2^-24: tie to 2
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // carries up
  EXPECT_EQ(to_fp16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(from_fp16(to_fp16(std::nanf("")))));
}

TEST(Half, EveryHalfValueRoundTripsExactly) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f16 = from_fp16(h), bf = from_bf16(h);
    if (!std::isnan(f16)) {
      EXPECT_EQ(to_fp16(f16), h) << std::hex << bits;
    }
    if (!std::isnan(bf)) {
      EXPECT_EQ(to_bf16(bf), h) << std::hex << bits;
    }
  }
}

TEST(Half, RoundingPicksTheNearestRepresentableValue) {
  // Against a brute-force search over neighbours for values spread over fp16's range.
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(std::sin(0.37f * i) * 1.9f, (i % 40) - 25);
    const uint16_t h = to_fp16(x);
    const float r = from_fp16(h);
    const float below = from_fp16(static_cast<uint16_t>(h - 1)), above = from_fp16(h + 1);
    if ((h & 0x7FFF) != 0 && (h & 0x7FFF) != 0x7BFF && std::isfinite(r)) {
      EXPECT_LE(std::abs(x - r), std::abs(x - below)) << x;
      EXPECT_LE(std::abs(x - r), std::abs(x - above)) << x;
    }
    EXPECT_EQ(round_to(x, Precision::kFp32), x);
    EXPECT_EQ(round_to(x, Precision::kFp16), r);
  }
}

}  // namespace trident
