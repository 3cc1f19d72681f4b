// The quantized forward's CPU reference against hand-computed values: the fp8 conversions
// exhaustively, each mode's arithmetic at its ties, saturation, NaNs, zero rows and floors,
// then rmsnorm_cpu_forward_quant end to end (strides, the transposed scale layout, the
// unquantized y, the fused add). Rows of x = +-c (c a power of two) have 1/rms = 1/c exactly,
// so with eps 0 an f32 y is +-weight exactly: the weight spells out the y a case needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quantize.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace {

using rmsnorm::detail::float_to_fp8;
using rmsnorm::detail::fp8_to_float;
using rmsnorm::detail::quant_max;
using rmsnorm::detail::quantize_row;
using rmsnorm::detail::Quantizer;

constexpr rmsnorm_quant_format kE4m3 = RMSNORM_QUANT_FP8_E4M3, kE5m2 = RMSNORM_QUANT_FP8_E5M2,
                               kInt8 = RMSNORM_QUANT_INT8;

// Quantizes y as q says; the quantized values read back as floats (fp8 decoded, int8 as is).
struct Quantized {
    std::vector<float> q, scales;
};
Quantized quantize(const Quantizer& q, const std::vector<float>& y) {
    const auto n = static_cast<int64_t>(y.size());
    std::vector<uint8_t> out(y.size());
    Quantized r;
    r.scales.assign(q.mode == RMSNORM_SCALE_PER_GROUP ? y.size() / q.group_size : 1, NAN);
    quantize_row(q, y.data(), n, out.data(), r.scales.data());
    for (uint8_t b : out) {
        r.q.push_back(q.format == kInt8 ? static_cast<float>(static_cast<int8_t>(b))
                                        : fp8_to_float(b, q.format));
    }
    return r;
}

Quantizer static_q(rmsnorm_quant_format f, float scale) {
    Quantizer q;
    q.format = f;
    q.mode = RMSNORM_SCALE_STATIC;
    q.static_scale = scale;
    return q;
}
Quantizer token_q(rmsnorm_quant_format f) {
    Quantizer q;
    q.format = f;
    q.mode = RMSNORM_SCALE_PER_TOKEN;
    return q;
}
Quantizer group_q(rmsnorm_quant_format f, int64_t group, bool ue8m0 = false) {
    Quantizer q;
    q.format = f;
    q.mode = RMSNORM_SCALE_PER_GROUP;
    q.group_size = group;
    q.ue8m0 = ue8m0;
    return q;
}

// Bits compared, so that -0 and +0 differ and NaN equals NaN.
::testing::AssertionResult same_floats(const std::vector<float>& got,
                                       const std::vector<float>& want) {
    if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
    for (size_t k = 0; k < got.size(); ++k) {
        if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0) {
            return ::testing::AssertionFailure()
                   << "element " << k << ": got " << got[k] << ", want " << want[k];
        }
    }
    return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// The fp8 conversions.

TEST(Fp8, EveryCodeDecodesAndEncodesBackToItself) {
    for (const auto f : {kE4m3, kE5m2}) {
        for (int b = 0; b < 256; ++b) {
            const float v = fp8_to_float(static_cast<uint8_t>(b), f);
            if (std::isnan(v) || std::fabs(v) > quant_max(f)) continue;  // NaN, e5m2's inf
            EXPECT_EQ(float_to_fp8(v, f), b) << "format " << f << ", value " << v;
        }
    }
}

TEST(Fp8, TheLargestValuesAndNaNAreTheFormats) {
    EXPECT_EQ(fp8_to_float(0x7e, kE4m3), 448.0f);
    EXPECT_TRUE(std::isnan(fp8_to_float(0x7f, kE4m3)));  // e4m3fn: no infinity
    EXPECT_EQ(fp8_to_float(0x7b, kE5m2), 57344.0f);
    EXPECT_EQ(fp8_to_float(0x7c, kE5m2), INFINITY);
    EXPECT_EQ(fp8_to_float(0x01, kE4m3), 0x1p-9f);  // the smallest subnormals
    EXPECT_EQ(fp8_to_float(0x01, kE5m2), 0x1p-16f);
    EXPECT_EQ(float_to_fp8(NAN, kE4m3) & 0x7f, 0x7f);
    EXPECT_EQ(float_to_fp8(-0.0f, kE4m3), 0x80);
}

// Halfway between two neighbours goes to the even code, a hair above it to the upper one, a
// hair below to the lower one: at every pair of neighbours, normal and subnormal.
TEST(Fp8, RoundsToNearestEvenBetweenEveryTwoNeighbours) {
    for (const auto f : {kE4m3, kE5m2}) {
        for (int b = 0; b < 0x7f; ++b) {
            const float lo = fp8_to_float(static_cast<uint8_t>(b), f);
            const float hi = fp8_to_float(static_cast<uint8_t>(b + 1), f);
            if (!(hi <= quant_max(f))) continue;
            const float mid = (lo + hi) / 2;  // exact: the codes have 4 significant bits
            const int even = (b & 1) == 0 ? b : b + 1;
            EXPECT_EQ(float_to_fp8(mid, f), even) << f << ": " << lo << " .. " << hi;
            EXPECT_EQ(float_to_fp8(-mid, f), even | 0x80);
            EXPECT_EQ(float_to_fp8(std::nextafter(mid, INFINITY), f), b + 1);
            EXPECT_EQ(float_to_fp8(std::nextafter(mid, 0.0f), f), b);
        }
    }
}

TEST(Fp8, BelowHalfTheSmallestSubnormalIsZero) {
    EXPECT_EQ(float_to_fp8(0x1p-10f, kE4m3), 0x00);  // exactly half: the even code, 0
    EXPECT_EQ(float_to_fp8(0x1.000002p-10f, kE4m3), 0x01);
    EXPECT_EQ(float_to_fp8(1e-30f, kE5m2), 0x00);
    EXPECT_EQ(float_to_fp8(-1e-30f, kE5m2), 0x80);
}

// ---------------------------------------------------------------------------------------------
// The quantizers, mode by mode.

TEST(QuantizeStatic, Fp8MultipliesByTheInverseRoundsToEvenSaturatesAndSendsNaNToTheTop) {
    // scale 0.5: y * 2. 1.0625 * 2 = 2.125, halfway between 2 (even) and 2.25.
    const auto r = quantize(static_q(kE4m3, 0.5f), {1.0f, 1.0625f, 1.1875f, -300.0f, NAN, 0.0f});
    EXPECT_TRUE(same_floats(r.q, {2.0f, 2.0f, 2.5f, -448.0f, 448.0f, 0.0f}));
    EXPECT_TRUE(std::isnan(r.scales[0]));  // a static scale is not written
    const float third = 1.0f / 3.0f;
    EXPECT_TRUE(same_floats(quantize(static_q(kE5m2, 3.0f), {57344.0f * 4, 3.0f}).q,
                            {57344.0f, fp8_to_float(float_to_fp8(3.0f * third, kE5m2), kE5m2)}));
}

TEST(QuantizeStatic, Int8DividesRoundsHalfToEvenSaturatesAndSendsNaNToZero) {
    // scale 0.5: y / 0.5 = 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 200 -> 127, -200 -> -128.
    const auto r =
        quantize(static_q(kInt8, 0.5f), {1.25f, 1.75f, -1.25f, 100.0f, -100.0f, NAN, 0.2f});
    EXPECT_TRUE(same_floats(r.q, {2.0f, 4.0f, -2.0f, 127.0f, -128.0f, 0.0f, 0.0f}));
}

TEST(QuantizePerToken, Fp8ScaleIsAmaxOverQmaxAndNaNsAreSkipped) {
    // amax 896 (the NaN skipped): scale 2.
    const auto r = quantize(token_q(kE4m3), {896.0f, -2.125f, NAN, 3.0f});
    EXPECT_EQ(r.scales[0], 2.0f);
    EXPECT_TRUE(same_floats(r.q, {448.0f, -1.0f, 448.0f, 1.5f}));  // -1.0625 -> -1 (even)
}

TEST(QuantizePerToken, Fp8ScaleIsFlooredAtOneOverQmaxTimes512) {
    const auto zero = quantize(token_q(kE4m3), {0.0f, -0.0f});
    EXPECT_EQ(zero.scales[0], 1.0f / (448.0f * 512.0f));
    EXPECT_TRUE(same_floats(zero.q, {0.0f, -0.0f}));
    const auto tiny = quantize(token_q(kE5m2), {1e-30f});
    EXPECT_EQ(tiny.scales[0], 1.0f / (57344.0f * 512.0f));
}

TEST(QuantizePerToken, Fp8ScaleUbBoundsAmax) {
    Quantizer q = token_q(kE4m3);
    q.has_ub = true;
    q.ub = 448.0f;  // amax 896 bounded to 448: scale 1, and 896 saturates
    const auto r = quantize(q, {896.0f, 10.0f});
    EXPECT_EQ(r.scales[0], 1.0f);
    EXPECT_TRUE(same_floats(r.q, {448.0f, 10.0f}));
    q.ub = 1e6f;  // above amax: no effect
    EXPECT_EQ(quantize(q, {896.0f}).scales[0], 2.0f);
}

TEST(QuantizePerToken, Int8MultipliesBy127OverAmaxAndAZeroRowGetsScaleZero) {
    // amax 254: scale 2, y * 0.5: 5 -> 2.5 -> 2, 7 -> 3.5 -> 4, -7 -> -4.
    const auto r = quantize(token_q(kInt8), {254.0f, 5.0f, 7.0f, -7.0f, NAN});
    EXPECT_EQ(r.scales[0], 2.0f);
    EXPECT_TRUE(same_floats(r.q, {127.0f, 2.0f, 4.0f, -4.0f, 0.0f}));
    const auto zero = quantize(token_q(kInt8), {0.0f, 0.0f});
    EXPECT_EQ(zero.scales[0], 0.0f);
    EXPECT_TRUE(same_floats(zero.q, {0.0f, 0.0f}));
}

// Two groups of 64: y[0..63] and y[64..127].
std::vector<float> two_groups(std::vector<float> first, std::vector<float> second) {
    first.resize(64, 0.0f);
    second.resize(64, 0.0f);
    first.insert(first.end(), second.begin(), second.end());
    return first;
}

TEST(QuantizePerGroup, Fp8ScaleIsAmaxOverQmaxPerGroupFlooredAt1e10) {
    const auto r = quantize(group_q(kE4m3, 64), two_groups({1792.0f, -5.0f, NAN}, {}));
    EXPECT_EQ(r.scales[0], 4.0f);
    EXPECT_EQ(r.scales[1], 1e-10f / 448.0f);  // an all-zero group
    EXPECT_EQ(r.q[0], 448.0f);
    EXPECT_EQ(r.q[1], -1.25f);
    EXPECT_EQ(r.q[2], -448.0f);  // NaN to the bottom in the group kernels
    EXPECT_EQ(r.q[64], 0.0f);
}

TEST(QuantizePerGroup, Int8RoundsHalfToEvenAndSendsNaNToMinus128) {
    // amax 127: scale 1; 2.7 -> 3, -2.7 -> -3, 2.5 -> 2 and 3.5 -> 4 (ties to even).
    const auto r = quantize(group_q(kInt8, 64),
                            two_groups({127.0f, 2.7f, -2.7f, 2.5f, 3.5f, NAN}, {}));
    EXPECT_EQ(r.scales[0], 1.0f);
    const std::vector<float> first(r.q.begin(), r.q.begin() + 6);
    EXPECT_TRUE(same_floats(first, {127.0f, 3.0f, -3.0f, 2.0f, 4.0f, -128.0f}));
}

TEST(QuantizePerGroup, Ue8m0RoundsScalesUpToPowersOfTwoExactly) {
    // 1344 / 448 = 3 -> 4; 896 / 448 = 2 stays; an all-zero group: 1e-10 / 448 floored at
    // 1e-10, then up to 2^-33.
    const auto r = quantize(group_q(kE4m3, 128, true), [] {
        std::vector<float> y(384, 0.0f);
        y[0] = 1344.0f;
        y[1] = 3.0f;
        y[128] = -896.0f;
        return y;
    }());
    EXPECT_TRUE(same_floats(r.scales, {4.0f, 2.0f, 0x1p-33f}));
    EXPECT_EQ(r.q[0], 320.0f);  // 1344 / 4 = 336, halfway between 320 and 352: even
    EXPECT_EQ(r.q[1], 0.75f);
    EXPECT_EQ(r.q[128], -448.0f);
    // A scale that is a power of two already is not moved.
    Quantizer q = group_q(kInt8, 64, true);
    EXPECT_EQ(quantize(q, two_groups({127.0f * 8}, {127.0f * 0.25f})).scales,
              (std::vector<float>{8.0f, 0.25f}));
}

// ---------------------------------------------------------------------------------------------
// The fused quantizer (vLLM's fused norm-quant kernels' formulas).

Quantizer fused(Quantizer q) {
    q.vllm_fused = true;
    return q;
}

TEST(QuantizeFused, Int8RowsAreFlooredAtFltEpsilonAndMultipliedByOneOverTheScale) {
    const Quantized zero = quantize(fused(token_q(kInt8)), {0.0f, -0.0f, NAN, 0.0f});
    EXPECT_TRUE(same_floats(zero.scales, {0x1p-23f}));  // vLLM's standalone quantizer: 0
    EXPECT_EQ(zero.q, (std::vector<float>{0, 0, 0, 0}));  // the NaN too
    // amax 381: s = 3, q = y * fl(1 / 3) in fp32, then to nearest even.
    const Quantized r = quantize(fused(token_q(kInt8)), {381.0f, 1.5f, -190.5f, 100.0f});
    EXPECT_TRUE(same_floats(r.scales, {3.0f}));
    const float third = 1.0f / 3.0f;
    EXPECT_EQ(r.q[0], 127.0f);
    EXPECT_EQ(r.q[2], std::nearbyint(-190.5f * third));
    EXPECT_EQ(r.q[3], std::nearbyint(100.0f * third));
}

TEST(QuantizeFused, Fp8RowsAreVllmsStandaloneFormula) {
    const std::vector<float> y = {3.0f, -700.0f, 0.001f, NAN, 17.5f};
    for (const bool ub : {false, true}) {
        Quantizer q = token_q(kE4m3);
        q.has_ub = ub;
        q.ub = 448.0f;
        const Quantized want = quantize(q, y), got = quantize(fused(q), y);
        EXPECT_TRUE(same_floats(got.scales, want.scales));
        EXPECT_TRUE(same_floats(got.q, want.q));
    }
}

TEST(QuantizeFused, GroupsTakeTheRowsFloorMultiplyByTheInverseAndSendNaNToTheTop) {
    // Group 0 all zero: s = 1 / (448 * 512) (vLLM's group quantizer: 1e-10 / 448); group 1:
    // amax 3 * 448, s = 3, q = y * fl(1 / 3); a NaN goes to +448 (the group quantizer: -448).
    std::vector<float> y(128, 0.0f);
    y[64] = 3 * 448.0f;
    y[65] = NAN;
    for (int j = 66; j < 128; ++j) y[static_cast<size_t>(j)] = -1.0f - 7.0f * j;
    const Quantized r = quantize(fused(group_q(kE4m3, 64)), y);
    EXPECT_TRUE(same_floats(r.scales, {1.0f / (448.0f * 512.0f), 3.0f}));
    EXPECT_EQ(r.q[0], 0.0f);
    EXPECT_EQ(r.q[64], 448.0f);
    EXPECT_EQ(r.q[65], 448.0f);
    for (int j = 66; j < 128; ++j) {
        const float q = y[static_cast<size_t>(j)] * (1.0f / 3.0f);
        const float want = fp8_to_float(float_to_fp8(q, kE4m3), kE4m3);
        EXPECT_EQ(r.q[static_cast<size_t>(j)], want) << j;
    }
    // int8: the floor FLT_EPSILON, NaN to 0; ue8m0 rounds the floored scale up.
    const Quantized i8 = quantize(fused(group_q(kInt8, 64, true)), y);
    EXPECT_TRUE(same_floats(i8.scales, {0x1p-23f, 16.0f}));  // 1344 / 127 = 10.58 -> 16
    EXPECT_EQ(i8.q[65], 0.0f);
    EXPECT_EQ(i8.q[64], 84.0f);  // 1344 * (1 / 16)
}

TEST(QuantizeFused, ScaleUbBoundsEachGroupsAmaxAndANaNBoundBoundsNothing) {
    // vLLM's rms_norm_per_block_quant: s = max(min(amax, ub) / qmax, floor) per group.
    std::vector<float> y(128, 1.0f);
    y[0] = 896.0f;   // group 0: amax 896 bounded to 448: s = 1, and 896 saturates
    y[64] = 224.0f;  // group 1: amax 224 under the bound: s = 0.5
    Quantizer q = fused(group_q(kE4m3, 64));
    q.has_ub = true;
    q.ub = 448.0f;
    const Quantized r = quantize(q, y);
    EXPECT_TRUE(same_floats(r.scales, {1.0f, 0.5f}));
    EXPECT_EQ(r.q[0], 448.0f);
    EXPECT_EQ(r.q[1], 1.0f);
    EXPECT_EQ(r.q[64], 448.0f);
    EXPECT_EQ(r.q[65], 2.0f);
    q.ub = NAN;  // fminf(amax, NaN) = amax
    EXPECT_TRUE(same_floats(quantize(q, y).scales, {2.0f, 0.5f}));
}

// ---------------------------------------------------------------------------------------------
// rmsnorm_cpu_forward_quant end to end.

class CpuForwardQuant : public ::testing::Test {
 protected:
    // rows x n, x row i = sign * 2^i (all +, or alternating signs from column 0 on odd rows).
    void make(int64_t rows, int64_t n, const std::vector<float>& weight) {
        fwd.rows = rows;
        fwd.n = n;
        x.assign(static_cast<size_t>(rows * n), 0.0f);
        for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                const float sign = (i % 2 == 1 && j % 2 == 0) ? -1.0f : 1.0f;
                x[static_cast<size_t>(i * n + j)] = sign * std::ldexp(1.0f, static_cast<int>(i));
            }
        }
        w = weight;
        fwd.x = rmsnorm_rows{x.data(), n, RMSNORM_F32};
        fwd.weight = w.data();
        fwd.weight_dtype = RMSNORM_F32;
        fwd.eps = 0.0f;
        fwd.y = rmsnorm_rows{nullptr, n, RMSNORM_F16};  // not written: its dtype is ignored
        out.assign(static_cast<size_t>(rows * n), 0xAB);
        q.out = out.data();
        q.out_stride = n;
    }
    // Row i, column j of y: +-w[j].
    float y_at(int64_t i, int64_t j) const {
        return (i % 2 == 1 && j % 2 == 0) ? -w[static_cast<size_t>(j)] : w[static_cast<size_t>(j)];
    }

    std::vector<float> x, w;
    std::vector<uint8_t> out;
    rmsnorm_forward_args fwd = rmsnorm::forward_args();
    rmsnorm_quant_args q = rmsnorm::quant_args(fwd);
};

TEST_F(CpuForwardQuant, StaticFp8QuantizesTheContractsY) {
    make(3, 4, {1.0f, 1.0625f, -500.0f, 0.25f});
    float scale = 1.0f;
    q.format = RMSNORM_QUANT_FP8_E4M3;
    q.scale_mode = RMSNORM_SCALE_STATIC;
    q.scales = &scale;
    rmsnorm::cpu_forward_quant(q);
    // Row 1 negates columns 0 and 2: -1, 1.0625 -> 1 (even), 500 -> 448, 0.25.
    EXPECT_EQ(out[4], float_to_fp8(-1.0f, kE4m3));
    EXPECT_EQ(out[5], float_to_fp8(1.0f, kE4m3));
    EXPECT_EQ(out[6], float_to_fp8(448.0f, kE4m3));
    EXPECT_EQ(out[2], float_to_fp8(-448.0f, kE4m3));
    EXPECT_EQ(out[11], float_to_fp8(0.25f, kE4m3));
    EXPECT_EQ(scale, 1.0f);  // read, not written
}

TEST_F(CpuForwardQuant, PerTokenScalesGoToTheirStrideAndNothingElseIsWritten) {
    make(3, 4, {254.0f, 5.0f, 7.0f, 0.0f});
    std::vector<float> scales(9, -1.0f);
    q.format = RMSNORM_QUANT_INT8;
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    q.scales = scales.data();
    q.scale_row_stride = 3;
    q.scale_group_stride = 12345;  // per-token: ignored
    rmsnorm::cpu_forward_quant(q);
    EXPECT_EQ(scales, (std::vector<float>{2, -1, -1, 2, -1, -1, 2, -1, -1}));
    const std::vector<int8_t> want = {127, 2, 4, 0, -127, 2, -4, 0, 127, 2, 4, 0};
    EXPECT_EQ(std::vector<int8_t>(out.begin(), out.end()), want);
}

TEST_F(CpuForwardQuant, PerGroupScalesInTheTransposedLayout) {
    // 2 groups of 64; row i's group g at i * 1 + g * 3 (groups of rows: the transpose of a
    // (groups, rows) array).
    std::vector<float> weight(128, 0.0f);
    weight[0] = 1792.0f;  // group 0: amax 1792, scale 4
    weight[64] = 127.0f;  // group 1: amax 127, scale 127/448
    make(3, 128, weight);
    std::vector<float> scales(6, -1.0f);
    q.format = RMSNORM_QUANT_FP8_E4M3;
    q.scale_mode = RMSNORM_SCALE_PER_GROUP;
    q.group_size = 64;
    q.scales = scales.data();
    q.scale_row_stride = 1;
    q.scale_group_stride = 3;
    rmsnorm::cpu_forward_quant(q);
    const float s1 = 127.0f / 448.0f;
    EXPECT_EQ(scales, (std::vector<float>{4, 4, 4, s1, s1, s1}));
    EXPECT_EQ(out[128], float_to_fp8(-448.0f, kE4m3));  // row 1 negates column 0
    EXPECT_EQ(out[64], float_to_fp8(127.0f / s1, kE4m3));
}

TEST_F(CpuForwardQuant, FusedAddInPlaceWithTheUnquantizedYInBf16MatchesTheForward) {
    // Random bf16 rows: residual_out (in place) and y as rmsnorm_cpu_forward gives them, and
    // the quantized values those of quantize_row on that y.
    const int64_t rows = 5, n = 256;
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<uint16_t> xs(rows * n), res(rows * n), w16(n), y(rows * n), y_ref(rows * n);
    for (auto* v : {&xs, &res, &w16})
        for (auto& e : *v) e = rmsnorm_float_to_bf16(normal(gen));
    std::vector<uint16_t> res_ref = res;
    auto plain = rmsnorm::forward_args();
    plain.rows = rows;
    plain.n = n;
    plain.x = rmsnorm_rows{xs.data(), n, RMSNORM_BF16};
    plain.residual = plain.residual_out = rmsnorm_rows{res_ref.data(), n, RMSNORM_BF16};
    plain.weight = w16.data();
    plain.weight_dtype = RMSNORM_BF16;
    plain.casting_mode = RMSNORM_GEMMA;
    plain.y = rmsnorm_rows{y_ref.data(), n, RMSNORM_BF16};
    rmsnorm::cpu_forward(plain);

    fwd = plain;
    fwd.residual = fwd.residual_out = rmsnorm_rows{res.data(), n, RMSNORM_BF16};
    fwd.y = rmsnorm_rows{y.data(), n, RMSNORM_BF16};
    out.assign(rows * n, 0);
    std::vector<float> scales(rows * 2);
    q.out = out.data();
    q.out_stride = n;
    q.format = RMSNORM_QUANT_INT8;
    q.scale_mode = RMSNORM_SCALE_PER_GROUP;
    q.group_size = 128;
    q.scales = scales.data();
    q.scale_row_stride = 2;
    q.scale_group_stride = 1;
    rmsnorm::cpu_forward_quant(q);
    EXPECT_EQ(res, res_ref);
    EXPECT_EQ(y, y_ref);
    for (int64_t i = 0; i < rows; ++i) {
        std::vector<float> yf(n);
        for (int64_t j = 0; j < n; ++j) yf[j] = rmsnorm_bf16_to_float(y_ref[i * n + j]);
        std::vector<uint8_t> want(n);
        std::vector<float> want_scales(2);
        quantize_row(group_q(kInt8, 128), yf.data(), n, want.data(), want_scales.data());
        EXPECT_EQ(std::vector<uint8_t>(out.begin() + i * n, out.begin() + (i + 1) * n), want);
        EXPECT_EQ(std::vector<float>(scales.begin() + 2 * i, scales.begin() + 2 * i + 2),
                  want_scales);
    }
}

TEST_F(CpuForwardQuant, YIsRoundedToItsDtypeBeforeItIsQuantized) {
    // gemma, x = w = 1, offset 2^-11: y = 1 + 2^-11 in fp32, which an f16 y rounds to 1 (a
    // tie, to even): the per-token scale is amax / 448 of that y.
    for (const rmsnorm_dtype dtype : {RMSNORM_F16, RMSNORM_F32}) {
        SCOPED_TRACE(dtype);
        std::vector<uint16_t> x16(4, rmsnorm_float_to_f16(1.0f));
        make(1, 4, {1.0f, 1.0f, 1.0f, 1.0f});
        if (dtype == RMSNORM_F16) {
            fwd.x = rmsnorm_rows{x16.data(), 4, RMSNORM_F16};
            fwd.weight = x16.data();
            fwd.weight_dtype = RMSNORM_F16;
        }
        fwd.casting_mode = RMSNORM_GEMMA;
        fwd.offset = 0x1p-11f;
        float scale = 0.0f;
        q.format = RMSNORM_QUANT_FP8_E4M3;
        q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
        q.scales = &scale;
        rmsnorm::cpu_forward_quant(q);
        const float y = dtype == RMSNORM_F16 ? 1.0f : 1.0f + 0x1p-11f;
        EXPECT_EQ(scale, y / 448.0f);
    }
}

TEST_F(CpuForwardQuant, NoRowsWritesNothing) {
    fwd.rows = 0;
    fwd.n = 64;
    fwd.x = rmsnorm_rows{nullptr, 64, RMSNORM_BF16};
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

}  // namespace
