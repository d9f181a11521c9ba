// bf16 and fp16 conversions: round to nearest even, subnormals, overflow, NaN, exact round trips,
// and bf16's lossless split of fp32 master weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

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

// Every fp32 bit pattern in a sweep (all low halves under a spread of upper halves: signs,
// zeros, subnormals, the largest finite values, infinities) is joined back exactly from its
// two halves; the upper half is the nearest bf16 value (to_bf16 but at exact ties, which round
// away from zero); NaNs stay NaNs.
TEST(Half, Bf16SplitIsLosslessAndItsUpperHalfRoundsToNearest) {
  std::vector<uint32_t> uppers = {0x0000, 0x0001, 0x007F, 0x0080, 0x3F7F, 0x3F80,
                                  0x3F81, 0x7F7E, 0x7F7F, 0x7F80, 0x7FC0, 0x7FFF};
  for (uint32_t u = 0x0000; u < 0x8000; u += 0x0137) uppers.push_back(u);
  int64_t ties = 0;
  for (const uint32_t upper : uppers) {
    for (const uint32_t sign : {0x0000u, 0x8000u}) {
      for (uint32_t lower = 0; lower < 0x10000; ++lower) {
        const uint32_t bits = ((upper | sign) << 16) | lower;
        const float x = bits_float(bits);
        const uint16_t high = bf16_high(x), low = bf16_low(x, high);
        if (std::isnan(x)) {
          ASSERT_TRUE(std::isnan(from_bf16(high))) << std::hex << bits;
          ASSERT_TRUE(std::isnan(join_bf16(high, low))) << std::hex << bits;
          continue;
        }
        ASSERT_EQ(float_bits(join_bf16(high, low)), bits) << std::hex << bits;
        ASSERT_EQ(to_compute_half(x, Precision::kBf16), high);
        if (lower == 0x8000) {  // a tie: away from zero
          ASSERT_EQ(high, static_cast<uint16_t>((bits >> 16) + 1)) << std::hex << bits;
          ++ties;
        } else {
          ASSERT_EQ(high, to_bf16(x)) << std::hex << bits;
        }
      }
    }
  }
  EXPECT_GT(ties, 100);
  EXPECT_EQ(bf16_high(1.0f + std::ldexp(1.0f, -8)), 0x3F81);   // to_bf16 gives 0x3F80
  EXPECT_EQ(bf16_high(-1.0f - std::ldexp(1.0f, -8)), 0xBF81);  // away from zero
  EXPECT_EQ(to_compute_half(1.0f + std::ldexp(1.0f, -11), Precision::kFp16), 0x3C00);  // fp16: even
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
