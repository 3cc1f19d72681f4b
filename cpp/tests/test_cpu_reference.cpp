// The CPU reference against hand-computed values, the float64 formula and the contract's
// rounding steps; forward, fused add and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "rmsnorm/rmsnorm.hpp"

namespace {

// A rows x n tensor of one dtype, stored as float or as 16-bit words.
struct Tensor {
    rmsnorm_dtype dtype;
    int64_t rows, n, stride;
    std::vector<float> f32;
    std::vector<uint16_t> half;

    Tensor(rmsnorm_dtype d, int64_t r, int64_t cols, int64_t s = -1)
        : dtype(d), rows(r), n(cols), stride(s < 0 ? cols : s) {
        const size_t size = static_cast<size_t>(rows * stride);
        if (dtype == RMSNORM_F32)
            f32.assign(size, NAN);
        else
            half.assign(size, 0x7e00u);
    }
    void* data() { return dtype == RMSNORM_F32 ? static_cast<void*>(f32.data()) : half.data(); }
    rmsnorm_rows view() { return rmsnorm_rows{data(), stride, dtype}; }
    float get(int64_t i, int64_t j) const {
        const size_t k = static_cast<size_t>(i * stride + j);
        if (dtype == RMSNORM_F32) return f32[k];
        return dtype == RMSNORM_F16 ? rmsnorm_f16_to_float(half[k])
                                    : rmsnorm_bf16_to_float(half[k]);
    }
    void set(int64_t i, int64_t j, float v) {
        const size_t k = static_cast<size_t>(i * stride + j);
        if (dtype == RMSNORM_F32)
            f32[k] = v;
        else
            half[k] = dtype == RMSNORM_F16 ? rmsnorm_float_to_f16(v) : rmsnorm_float_to_bf16(v);
    }
    void fill_random(std::mt19937& gen, float scale = 1.0f, float shift = 0.0f) {
        std::normal_distribution<float> normal(shift, scale);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < n; ++j) set(i, j, normal(gen));
    }
};

float round_to(rmsnorm_dtype dtype, float v) {
    if (dtype == RMSNORM_F16) return rmsnorm_f16_to_float(rmsnorm_float_to_f16(v));
    if (dtype == RMSNORM_BF16) return rmsnorm_bf16_to_float(rmsnorm_float_to_bf16(v));
    return v;
}

// Relative error allowed against float64 for one or two roundings to the dtype.
double tolerance(rmsnorm_dtype dtype) {
    return dtype == RMSNORM_BF16 ? 0x1p-7 : dtype == RMSNORM_F16 ? 0x1p-10 : 1e-5;
}

double inv_rms64(const Tensor& x, int64_t i, double eps) {
    double sum = 0;
    for (int64_t j = 0; j < x.n; ++j) sum += double(x.get(i, j)) * x.get(i, j);
    return 1.0 / std::sqrt(sum / double(x.n) + eps);
}

// Forward arguments over all of x's rows, into y; the rest empty.
rmsnorm_forward_args forward_of(Tensor& x, Tensor& y) {
    auto args = rmsnorm::forward_args();
    args.rows = x.rows;
    args.n = x.n;
    args.x = x.view();
    args.y = y.view();
    return args;
}

// Backward arguments over all of x's rows from the forward's rstd; the rest empty.
rmsnorm_backward_args backward_of(Tensor& dy, Tensor& x, Tensor& dx,
                                  const std::vector<float>& rstd) {
    auto args = rmsnorm::backward_args();
    args.rows = x.rows;
    args.n = x.n;
    args.dy = dy.view();
    args.x = x.view();
    args.dx = dx.view();
    args.rstd = rstd.data();
    return args;
}

TEST(CpuForward, GivesHandComputedValues) {
    Tensor x(RMSNORM_F32, 1, 2), y(RMSNORM_F32, 1, 2);
    x.set(0, 0, 3.0f);
    x.set(0, 1, 4.0f);
    std::vector<float> rstd(1);
    auto args = forward_of(x, y);
    args.rstd = rstd.data();
    args.eps = 0.0f;
    rmsnorm::cpu_forward(args);
    // mean(x^2) = 12.5
    EXPECT_FLOAT_EQ(rstd[0], 1.0f / std::sqrt(12.5f));
    EXPECT_FLOAT_EQ(y.get(0, 0), 3.0f / std::sqrt(12.5f));
    EXPECT_FLOAT_EQ(y.get(0, 1), 4.0f / std::sqrt(12.5f));

    // Gemma's weight with offset 1: scaled by (1 + w) = (2, 3).
    std::vector<float> w = {1.0f, 2.0f};
    args.weight = w.data();
    args.weight_dtype = RMSNORM_F32;
    args.offset = 1.0f;
    args.casting_mode = RMSNORM_GEMMA;
    rmsnorm::cpu_forward(args);
    EXPECT_FLOAT_EQ(y.get(0, 0), 2.0f * 3.0f / std::sqrt(12.5f));
    EXPECT_FLOAT_EQ(y.get(0, 1), 3.0f * 4.0f / std::sqrt(12.5f));
}

struct Case {
    rmsnorm_dtype dtype;
    rmsnorm_casting_mode mode;
};

class CpuForwardDtypes : public ::testing::TestWithParam<Case> {};

TEST_P(CpuForwardDtypes, MatchesFloat64AndTheContractsRoundings) {
    const auto [dtype, mode] = GetParam();
    std::mt19937 gen(17 + dtype * 3 + mode);
    const int64_t rows = 13, n = 1000;
    Tensor x(dtype, rows, n, n + 24), w(dtype, 1, n), y(dtype, rows, n);
    x.fill_random(gen, 3.0f);
    w.fill_random(gen, 0.5f, 1.0f);
    std::vector<float> rstd(rows);
    auto args = forward_of(x, y);
    args.weight = w.data();
    args.weight_dtype = dtype;
    args.rstd = rstd.data();
    args.casting_mode = mode;
    args.offset = 0.25f;
    rmsnorm::cpu_forward(args);
    for (int64_t i = 0; i < rows; ++i) {
        const double r = inv_rms64(x, i, 1e-6);
        EXPECT_NEAR(rstd[i], r, 1e-5 * r);  // an fp32 sum of 1000 squares
        for (int64_t j = 0; j < n; ++j) {
            const double w_j = double(w.get(0, j)) + 0.25;
            const double exact = x.get(i, j) * r * w_j;
            ASSERT_NEAR(y.get(i, j), exact, tolerance(dtype) * std::fabs(exact) + 1e-6);
            // The contract's roundings, from the row's fp32 rstd.
            const float v = x.get(i, j), wf = w.get(0, j) + 0.25f;
            const float want = mode == RMSNORM_LLAMA
                                   ? round_to(dtype, round_to(dtype, v * rstd[i]) * wf)
                                   : round_to(dtype, v * rstd[i] * wf);
            ASSERT_EQ(y.get(i, j), want) << i << "," << j;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypesAndModes, CpuForwardDtypes,
    ::testing::Values(Case{RMSNORM_F32, RMSNORM_LLAMA}, Case{RMSNORM_F16, RMSNORM_LLAMA},
                      Case{RMSNORM_BF16, RMSNORM_LLAMA}, Case{RMSNORM_F32, RMSNORM_GEMMA},
                      Case{RMSNORM_F16, RMSNORM_GEMMA}, Case{RMSNORM_BF16, RMSNORM_GEMMA}));

TEST(CpuForward, SquaresF16InputsInFp32) {
    // 300^2 overflows f16; the sum of squares is fp32, so the row is fine.
    Tensor x(RMSNORM_F16, 1, 4), y(RMSNORM_F16, 1, 4);
    for (int j = 0; j < 4; ++j) x.set(0, j, 300.0f);
    auto args = forward_of(x, y);
    rmsnorm::cpu_forward(args);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.get(0, j), 1.0f, 1e-3f);
}

TEST(CpuForward, FusedAddWritesTheRoundedSumInPlaceAndNormalizesIt) {
    std::mt19937 gen(5);
    const int64_t rows = 6, n = 77;
    Tensor x(RMSNORM_BF16, rows, n), residual(RMSNORM_F32, rows, n), y(RMSNORM_F32, rows, n);
    x.fill_random(gen);
    residual.fill_random(gen, 4.0f);
    const Tensor before = residual;
    auto args = forward_of(x, y);
    args.residual = residual.view();
    args.residual_out = residual.view();  // in place
    args.casting_mode = RMSNORM_GEMMA;
    rmsnorm::cpu_forward(args);
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(residual.get(i, j), x.get(i, j) + before.get(i, j));  // fp32 sum: exact
        }
        const double r = inv_rms64(residual, i, 1e-6);
        for (int64_t j = 0; j < n; ++j) {
            ASSERT_NEAR(y.get(i, j), residual.get(i, j) * r,
                        1e-5 * std::fabs(residual.get(i, j) * r));
        }
    }
}

TEST(CpuForward, TheUnroundedSumIsNormalizedWhileTheRoundedOneIsWritten) {
    // bf16 1 + 2^-9 is 1 (a quarter ulp): the rounded sum's rows are all 1, rstd 1; the
    // unrounded sum v = 1 + 2^-9 has rstd 1 / v exactly (v^2 / 1 needs 19 bits, sqrt of it is
    // v), and gemma's y = v * (1 / v) * w.
    Tensor x(RMSNORM_BF16, 2, 4), residual(RMSNORM_BF16, 2, 4), sum(RMSNORM_BF16, 2, 4),
        y(RMSNORM_BF16, 2, 4);
    for (int64_t i = 0; i < 2; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
            x.set(i, j, 1.0f);
            residual.set(i, j, 0x1p-9f);
        }
    }
    std::vector<float> rstd(2, NAN);
    auto args = forward_of(x, y);
    args.residual = residual.view();
    args.residual_out = sum.view();
    args.rstd = rstd.data();
    args.eps = 0.0f;
    args.casting_mode = RMSNORM_GEMMA;
    args.normalized_sum = RMSNORM_SUM_FP32;
    rmsnorm::cpu_forward(args);
    const float v = 1.0f + 0x1p-9f;
    EXPECT_EQ(rstd[0], 1.0f / v);
    EXPECT_EQ(sum.get(1, 3), 1.0f);
    EXPECT_EQ(y.get(1, 3), round_to(RMSNORM_BF16, v * (1.0f / v)));
    args.normalized_sum = RMSNORM_SUM_ROUNDED;
    rmsnorm::cpu_forward(args);
    EXPECT_EQ(rstd[0], 1.0f);
    EXPECT_EQ(y.get(1, 3), 1.0f);
}

TEST(CpuForward, TheUnroundedSumMatchesFloat64AndLlamaRoundsToTheResidualsDtype) {
    std::mt19937 gen(11);
    const int64_t rows = 5, n = 96;
    for (const rmsnorm_casting_mode mode : {RMSNORM_LLAMA, RMSNORM_GEMMA}) {
        SCOPED_TRACE(mode);
        Tensor x(RMSNORM_F16, rows, n), residual(RMSNORM_F16, rows, n), sum(RMSNORM_F16, rows, n),
            y(RMSNORM_F16, rows, n), w(RMSNORM_F16, 1, n);
        x.fill_random(gen);
        residual.fill_random(gen, 3.0f);
        w.fill_random(gen, 0.5f, 1.0f);
        auto args = forward_of(x, y);
        args.residual = residual.view();
        args.residual_out = sum.view();
        args.weight = w.data();
        args.weight_dtype = RMSNORM_F16;
        args.casting_mode = mode;
        args.normalized_sum = RMSNORM_SUM_FP32;
        rmsnorm::cpu_forward(args);
        for (int64_t i = 0; i < rows; ++i) {
            double sum_sq = 0;
            for (int64_t j = 0; j < n; ++j) {
                const double v = double(x.get(i, j)) + residual.get(i, j);  // exact in fp32
                sum_sq += v * v;
                ASSERT_EQ(sum.get(i, j), round_to(RMSNORM_F16, float(v)));
            }
            const double r = 1.0 / std::sqrt(sum_sq / n + 1e-6);
            for (int64_t j = 0; j < n; ++j) {
                const double v = double(x.get(i, j)) + residual.get(i, j);
                const double normalized =
                    mode == RMSNORM_LLAMA ? round_to(RMSNORM_F16, float(v * r)) : v * r;
                const double want = normalized * w.get(0, j);
                ASSERT_NEAR(y.get(i, j), want, 2 * tolerance(RMSNORM_F16) * std::fabs(want) + 1e-6)
                    << i << ", " << j;
            }
        }
    }
}

TEST(CpuForward, Fp64AccumulationAgreesWithFp32) {
    std::mt19937 gen(9);
    Tensor x(RMSNORM_F32, 3, 4096), y32(RMSNORM_F32, 3, 4096), y64(RMSNORM_F32, 3, 4096);
    x.fill_random(gen);
    auto args = forward_of(x, y32);
    rmsnorm::cpu_forward(args);
    args.y = y64.view();
    args.accumulation = RMSNORM_ACCUMULATE_F64;
    rmsnorm::cpu_forward(args);
    for (int64_t j = 0; j < 4096; ++j) EXPECT_NEAR(y32.get(1, j), y64.get(1, j), 1e-5);
}

// Float64 gradients of sum(y * dy) with y = x * r * (w + offset), r = rsqrt(mean(x^2) + eps).
void gradients64(const Tensor& x, const Tensor& w, const Tensor& dy, double offset,
                 std::vector<double>& dx, std::vector<double>& dw) {
    dx.assign(static_cast<size_t>(x.rows * x.n), 0.0);
    dw.assign(static_cast<size_t>(x.n), 0.0);
    for (int64_t i = 0; i < x.rows; ++i) {
        const double r = inv_rms64(x, i, 1e-6);
        double sum_gx = 0;
        for (int64_t j = 0; j < x.n; ++j)
            sum_gx += dy.get(i, j) * (w.get(0, j) + offset) * x.get(i, j) * r;
        for (int64_t j = 0; j < x.n; ++j) {
            const double xhat = x.get(i, j) * r, g = dy.get(i, j) * (w.get(0, j) + offset);
            dx[static_cast<size_t>(i * x.n + j)] = r * (g - xhat * sum_gx / double(x.n));
            dw[static_cast<size_t>(j)] += dy.get(i, j) * xhat;
        }
    }
}

class CpuBackwardDtypes : public ::testing::TestWithParam<rmsnorm_dtype> {};

TEST_P(CpuBackwardDtypes, MatchesFloat64Gradients) {
    const rmsnorm_dtype dtype = GetParam();
    std::mt19937 gen(23 + dtype);
    const int64_t rows = 65, n = 300;
    Tensor x(dtype, rows, n), w(RMSNORM_F32, 1, n), dy(dtype, rows, n), dx(dtype, rows, n);
    Tensor y(dtype, rows, n);
    x.fill_random(gen);
    w.fill_random(gen, 0.5f, 1.0f);
    dy.fill_random(gen);
    std::vector<float> rstd(rows), dw(n);
    auto fwd = forward_of(x, y);
    fwd.weight = w.data();
    fwd.weight_dtype = RMSNORM_F32;
    fwd.rstd = rstd.data();
    fwd.offset = 0.5f;
    fwd.casting_mode = RMSNORM_GEMMA;
    rmsnorm::cpu_forward(fwd);

    auto bwd = backward_of(dy, x, dx, rstd);
    bwd.weight = w.data();
    bwd.weight_dtype = RMSNORM_F32;
    bwd.dw = dw.data();
    bwd.offset = 0.5f;
    bwd.casting_mode = RMSNORM_GEMMA;
    rmsnorm::cpu_backward(bwd);

    std::vector<double> dx64, dw64;
    gradients64(x, w, dy, 0.5, dx64, dw64);
    double err = 0, norm = 0;
    for (int64_t k = 0; k < rows * n; ++k) {
        const double d = dx.get(k / n, k % n) - dx64[static_cast<size_t>(k)];
        err += d * d;
        norm += dx64[static_cast<size_t>(k)] * dx64[static_cast<size_t>(k)];
    }
    EXPECT_LE(std::sqrt(err / norm), tolerance(dtype));
    for (int64_t j = 0; j < n; ++j) {
        EXPECT_NEAR(dw[static_cast<size_t>(j)], dw64[static_cast<size_t>(j)],
                    1e-4 * std::fabs(dw64[static_cast<size_t>(j)]) + 1e-4);
    }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, CpuBackwardDtypes,
                         ::testing::Values(RMSNORM_F32, RMSNORM_F16, RMSNORM_BF16));

TEST(CpuBackward, FusedAddGradientIncludesTheResidualsAndMayOverwriteDy) {
    std::mt19937 gen(31);
    const int64_t rows = 4, n = 50;
    Tensor s(RMSNORM_F32, rows, n), dy(RMSNORM_F32, rows, n), dresidual(RMSNORM_F32, rows, n);
    Tensor dx_plain(RMSNORM_F32, rows, n);
    s.fill_random(gen);
    dy.fill_random(gen);
    dresidual.fill_random(gen);
    std::vector<float> rstd(rows);
    for (int64_t i = 0; i < rows; ++i) rstd[static_cast<size_t>(i)] = float(inv_rms64(s, i, 1e-6));
    auto bwd = backward_of(dy, s, dx_plain, rstd);
    rmsnorm::cpu_backward(bwd);
    bwd.dresidual = dresidual.view();
    bwd.dx = dy.view();  // the caller's explicit choice: dx over dy
    const Tensor dy_before = dy;
    rmsnorm::cpu_backward(bwd);
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            EXPECT_NEAR(dy.get(i, j), dx_plain.get(i, j) + dresidual.get(i, j), 1e-6);
        }
    }
    EXPECT_NE(dy.get(0, 0), dy_before.get(0, 0));
}

TEST(CpuBackward, LlamaWeightGradientSeesTheRoundedNormalizedInput) {
    std::mt19937 gen(41);
    const int64_t rows = 8, n = 64;
    Tensor x(RMSNORM_BF16, rows, n), dy(RMSNORM_F32, rows, n), dx(RMSNORM_BF16, rows, n);
    x.fill_random(gen);
    dy.fill_random(gen);
    std::vector<float> w(n, 1.0f), dw(n), rstd(rows);
    for (int64_t i = 0; i < rows; ++i) rstd[static_cast<size_t>(i)] = float(inv_rms64(x, i, 1e-6));
    auto bwd = backward_of(dy, x, dx, rstd);
    bwd.weight = w.data();
    bwd.weight_dtype = RMSNORM_F32;
    bwd.dw = dw.data();
    bwd.accumulation = RMSNORM_ACCUMULATE_F64;
    rmsnorm::cpu_backward(bwd);
    for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t i = 0; i < rows; ++i) {
            want +=
                double(dy.get(i, j)) *
                round_to(RMSNORM_BF16, float(double(x.get(i, j)) * rstd[static_cast<size_t>(i)]));
        }
        EXPECT_NEAR(dw[static_cast<size_t>(j)], want, 1e-6 * std::fabs(want) + 1e-7);
    }
}

}  // namespace
