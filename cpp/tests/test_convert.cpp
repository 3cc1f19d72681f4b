// bf16 and f16 conversions: round to nearest even, specials, subnormals, overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "rmsnorm/rmsnorm.h"

namespace {

float float_of(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

TEST(Bf16, RoundsToNearestAndTiesToEven) {
    EXPECT_EQ(rmsnorm_float_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(rmsnorm_float_to_bf16(float_of(0x3f808000u)), 0x3f80);  // tie, even stays
    EXPECT_EQ(rmsnorm_float_to_bf16(float_of(0x3f818000u)), 0x3f82);  // tie, odd goes up
    EXPECT_EQ(rmsnorm_float_to_bf16(float_of(0x3f808001u)), 0x3f81);  // above the tie
    EXPECT_EQ(rmsnorm_float_to_bf16(float_of(0x3f807fffu)), 0x3f80);  // below the tie
    EXPECT_EQ(rmsnorm_float_to_bf16(-2.5f), 0xc020);
}

TEST(Bf16, KeepsSpecialsAndOverflowsToInfinity) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(rmsnorm_float_to_bf16(inf), 0x7f80);
    EXPECT_EQ(rmsnorm_float_to_bf16(-inf), 0xff80);
    EXPECT_TRUE(std::isnan(rmsnorm_bf16_to_float(rmsnorm_float_to_bf16(NAN))));
    // A NaN whose payload is only in the low bits must not become infinity.
    EXPECT_TRUE(std::isnan(rmsnorm_bf16_to_float(rmsnorm_float_to_bf16(float_of(0x7f800001u)))));
    EXPECT_EQ(rmsnorm_float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Bf16, RoundTripsEveryValue) {
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const float f = rmsnorm_bf16_to_float(static_cast<uint16_t>(bits));
        if (std::isnan(f)) continue;
        ASSERT_EQ(rmsnorm_float_to_bf16(f), bits) << bits;
    }
}

TEST(F16, RoundsToNearestAndTiesToEven) {
    EXPECT_EQ(rmsnorm_float_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(rmsnorm_float_to_f16(1.0f + 0x1p-11f), 0x3c00);             // tie, even
    EXPECT_EQ(rmsnorm_float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie, odd up
    EXPECT_EQ(rmsnorm_float_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
    EXPECT_EQ(rmsnorm_float_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(rmsnorm_float_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(rmsnorm_float_to_f16(65520.0f), 0x7c00);  // the tie above the largest: inf
    EXPECT_EQ(rmsnorm_float_to_f16(-300.0f), 0xdcb0);
}

TEST(F16, HandlesSubnormalsAndTinyValues) {
    EXPECT_EQ(rmsnorm_float_to_f16(0x1p-24f), 0x0001);    // smallest subnormal
    EXPECT_EQ(rmsnorm_float_to_f16(0x1p-25f), 0x0000);    // half of it: tie to even (0)
    EXPECT_EQ(rmsnorm_float_to_f16(0x1.8p-24f), 0x0002);  // 1.5 ulps: tie to even (2)
    EXPECT_EQ(rmsnorm_float_to_f16(0x1p-26f), 0x0000);
    EXPECT_EQ(rmsnorm_float_to_f16(0x1p-14f), 0x0400);      // smallest normal
    EXPECT_EQ(rmsnorm_float_to_f16(0x1.ff8p-15f), 0x03ff);  // largest subnormal
    EXPECT_EQ(rmsnorm_float_to_f16(0x1.ffcp-15f), 0x0400);  // the tie above it: up, even
    EXPECT_EQ(rmsnorm_float_to_f16(-0.0f), 0x8000);
}

TEST(F16, RoundTripsEveryValue) {
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const float f = rmsnorm_f16_to_float(static_cast<uint16_t>(bits));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(rmsnorm_f16_to_float(rmsnorm_float_to_f16(f))));
            continue;
        }
        ASSERT_EQ(rmsnorm_float_to_f16(f), bits) << bits;
    }
}

TEST(F16, MatchesTheNearestValueOnAFineGrid) {
    // Every float between two neighbouring f16 values goes to the nearer one.
    for (float x = -70000.0f; x < 70000.0f; x += 0.37f) {
        const float got = rmsnorm_f16_to_float(rmsnorm_float_to_f16(x));
        if (std::isinf(got)) {
            ASSERT_GE(std::fabs(x), 65520.0f);
            continue;
        }
        const uint16_t h = rmsnorm_float_to_f16(x);
        const float up = rmsnorm_f16_to_float(static_cast<uint16_t>(h + 1));
        const float down = rmsnorm_f16_to_float(static_cast<uint16_t>(h - 1));
        ASSERT_LE(std::fabs(got - x), std::fabs(up - x)) << x;
        ASSERT_LE(std::fabs(got - x), std::fabs(down - x)) << x;
    }
}

}  // namespace
