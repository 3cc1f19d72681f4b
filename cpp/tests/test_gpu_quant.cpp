// The quantized forward on a GPU, bit for bit. For every compiled dtype, casting mode, format
// and mode, plain and fused, at widths that take one tile, chunks of tiles (1536, 2304) and the
// looped kernel (66560):
// - the unquantized y it writes is the plain forward's y (rmsnorm_forward or the fused add on
//   the same input), and its residual_out the fused add's;
// - out and the scales are what the CPU's quantizer (the reference's) makes of that GPU y: the
//   GPU's y may differ from the CPU reference's by the order of its sums, its quantization
//   may not;
// - the same call without y (store_unq 0) writes the same out and scales.
// The same for vLLM's recipe (its fused kernels' quantizer, and with a residual the unrounded
// sum, in the plain fused add too), compiled for llama's casting and the dynamic modes.
// Rows include an all-zero one (the scales' floors) and a NaN one (the NaN outputs). Then
// what the GPU entry point refuses as not compiled: RMSNORM_ERROR_UNSUPPORTED, before it
// looks for a GPU, so those run on any machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.hpp"
#include "quantize.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace {

using rmsnorm::detail::quant_max;
using rmsnorm::detail::quantize_row;
using rmsnorm::detail::Quantizer;
using rmsnorm_test::DeviceBuffer;
using rmsnorm_test::GpuTest;

float to_float(rmsnorm_dtype dtype, uint16_t bits) {
    return dtype == RMSNORM_BF16 ? rmsnorm_bf16_to_float(bits) : rmsnorm_f16_to_float(bits);
}
uint16_t from_float(rmsnorm_dtype dtype, float v) {
    return dtype == RMSNORM_BF16 ? rmsnorm_float_to_bf16(v) : rmsnorm_float_to_f16(v);
}

template <typename T>
void upload(const DeviceBuffer& d, const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
std::vector<T> download(const DeviceBuffer& d, size_t count) {
    std::vector<T> h(count);
    CUDA_CHECK(cudaMemcpy(h.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
void poison(const DeviceBuffer& d) { CUDA_CHECK(cudaMemset(d.get(), 0xFF, d.size())); }

struct Mode {
    rmsnorm_scale_mode mode;
    int64_t group;
};
const Mode kModes[] = {{RMSNORM_SCALE_STATIC, 0},
                       {RMSNORM_SCALE_PER_TOKEN, 0},
                       {RMSNORM_SCALE_PER_GROUP, 64},
                       {RMSNORM_SCALE_PER_GROUP, 128}};

struct QuantCase {
    rmsnorm_dtype dtype;
    bool fused;
    bool vllm = false;  // RMSNORM_QUANTIZER_VLLM_FUSED (and RMSNORM_SUM_FP32 when fused)
};

class GpuQuantMatchesCpu : public GpuTest, public ::testing::WithParamInterface<QuantCase> {
 protected:
    // One width: every casting mode, format and mode, each call checked as the file says.
    void check_width(int64_t rows, int64_t n, std::mt19937& gen) {
        const auto [dtype, fused, vllm] = GetParam();
        const size_t count = static_cast<size_t>(rows * n);
        std::normal_distribution<float> normal(0.0f, 1.5f);
        std::uniform_real_distribution<float> weight(0.5f, 2.0f);
        std::vector<uint16_t> x(count), residual(count), w(static_cast<size_t>(n));
        for (auto& v : x) v = from_float(dtype, normal(gen));
        for (auto& v : residual) v = from_float(dtype, normal(gen));
        for (auto& v : w) v = from_float(dtype, weight(gen));
        // Row 1 all zero (x and residual); row 2 NaN (one element is enough: its rms is NaN).
        for (int64_t j = 0; j < n; ++j) x[n + j] = residual[n + j] = from_float(dtype, 0.0f);
        x[2 * n + 3] = from_float(dtype, NAN);
        const size_t bytes = count * 2;
        DeviceBuffer dx(bytes), dres(bytes), dw(w.size() * 2), y_plain(bytes), res_plain(bytes),
            unq(bytes), res_out(bytes), out(count), out2(count), scale_in(16), ub(16);
        upload(dx, x);
        upload(dres, residual);
        upload(dw, w);

        auto f = rmsnorm::forward_args();
        f.rows = rows;
        f.n = n;
        f.x = rmsnorm_rows{dx.get(), n, dtype};
        f.weight = dw.get();
        f.weight_dtype = dtype;
        f.eps = 1e-6f;
        if (fused) {
            f.residual = rmsnorm_rows{dres.get(), n, dtype};
            f.residual_out = rmsnorm_rows{res_plain.get(), n, dtype};
            f.normalized_sum = vllm ? RMSNORM_SUM_FP32 : RMSNORM_SUM_ROUNDED;
        }
        for (const rmsnorm_casting_mode casting : {RMSNORM_LLAMA, RMSNORM_GEMMA}) {
            if (vllm && casting != RMSNORM_LLAMA) continue;
            f.casting_mode = casting;
            f.y = rmsnorm_rows{y_plain.get(), n, dtype};
            f.residual_out.data = fused ? res_plain.get() : nullptr;
            rmsnorm::check(fused ? rmsnorm_fused_add_forward(&f, stream().cu())
                                 : rmsnorm_forward(&f, stream().cu()));
            CUDA_CHECK(cudaStreamSynchronize(stream().get()));
            const auto y_want = download<uint16_t>(y_plain, count);
            const auto res_want = fused ? download<uint16_t>(res_plain, count) : y_want;
            for (const rmsnorm_quant_format format : {RMSNORM_QUANT_FP8_E4M3, RMSNORM_QUANT_INT8}) {
                for (const Mode& m : kModes) {
                    if (vllm && m.mode == RMSNORM_SCALE_STATIC) continue;
                    SCOPED_TRACE(std::string(casting == RMSNORM_LLAMA ? "llama" : "gemma") +
                                 (format == RMSNORM_QUANT_INT8 ? " int8" : " e4m3") + " mode " +
                                 std::to_string(m.mode) + " group " + std::to_string(m.group));
                    check_call(f, y_want, res_want, format, m, {&unq, &res_out, &out, &out2},
                               scale_in, ub);
                    if (HasFailure()) return;
                }
            }
        }
    }

    struct Outputs {
        const DeviceBuffer *unq, *res_out, *out, *out2;
    };

    void check_call(rmsnorm_forward_args f, const std::vector<uint16_t>& y_want,
                    const std::vector<uint16_t>& res_want, rmsnorm_quant_format format,
                    const Mode& m, Outputs o, const DeviceBuffer& scale_in,
                    const DeviceBuffer& ub) {
        const auto [dtype, fused, vllm] = GetParam();
        const int64_t rows = f.rows, n = f.n, groups = m.group ? n / m.group : 1;
        const size_t count = static_cast<size_t>(rows * n);
        const bool int8 = format == RMSNORM_QUANT_INT8;
        Quantizer quantizer;
        quantizer.format = format;
        quantizer.mode = m.mode;
        quantizer.group_size = m.group;
        quantizer.vllm_fused = vllm;
        // Static: a scale at which the largest values saturate.
        quantizer.static_scale = 3.0f / quant_max(format);
        // Fused fp8, per token (and per group under vLLM's fused quantizer): a bound under
        // most rows' and groups' amax. Per-group: ue8m0 with llama; the transposed layout
        // when fused.
        quantizer.has_ub = fused && !int8 &&
                           (m.mode == RMSNORM_SCALE_PER_TOKEN ||
                            (vllm && m.mode == RMSNORM_SCALE_PER_GROUP));
        quantizer.ub = 2.0f;
        quantizer.ue8m0 = m.mode == RMSNORM_SCALE_PER_GROUP && f.casting_mode == RMSNORM_LLAMA;
        const bool transposed = fused && m.mode == RMSNORM_SCALE_PER_GROUP;
        upload(scale_in, std::vector<float>{quantizer.static_scale});
        upload(ub, std::vector<float>{quantizer.ub});
        DeviceBuffer scales(static_cast<size_t>(rows * groups) * sizeof(float)),
            scales2(scales.size());

        f.y = rmsnorm_rows{o.unq->get(), n, dtype};
        if (fused) f.residual_out = rmsnorm_rows{o.res_out->get(), n, dtype};
        auto q = rmsnorm::quant_args(f);
        q.out = o.out->get();
        q.out_stride = n;
        q.format = format;
        q.scale_mode = m.mode;
        q.group_size = m.group;
        q.scales =
            static_cast<float*>(m.mode == RMSNORM_SCALE_STATIC ? scale_in.get() : scales.get());
        q.scale_row_stride = transposed ? 1 : groups;
        q.scale_group_stride = transposed ? rows : 1;
        q.scale_ub = quantizer.has_ub ? static_cast<const float*>(ub.get()) : nullptr;
        q.ue8m0 = quantizer.ue8m0 ? 1 : 0;
        q.quantizer = vllm ? RMSNORM_QUANTIZER_VLLM_FUSED : RMSNORM_QUANTIZER_VLLM;
        for (const DeviceBuffer* d : std::initializer_list<const DeviceBuffer*>{
                 o.unq, o.res_out, o.out, o.out2, &scales, &scales2})
            poison(*d);
        rmsnorm::forward_quant(q, stream().cu());
        // Again without y: the same out and scales.
        auto q2 = q;
        auto f2 = f;
        f2.y.data = nullptr;
        q2.forward = &f2;
        q2.out = o.out2->get();
        if (m.mode != RMSNORM_SCALE_STATIC) q2.scales = static_cast<float*>(scales2.get());
        rmsnorm::forward_quant(q2, stream().cu());
        ASSERT_EQ(cudaStreamSynchronize(stream().get()), cudaSuccess);
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);

        const auto y = download<uint16_t>(*o.unq, count);
        ASSERT_EQ(y, y_want) << "the unquantized y is not the forward's";
        if (fused) {
            ASSERT_EQ(download<uint16_t>(*o.res_out, count), res_want) << "residual_out";
        }
        const auto got = download<uint8_t>(*o.out, count);
        ASSERT_EQ(download<uint8_t>(*o.out2, count), got) << "out without y";
        const size_t n_scales = m.mode == RMSNORM_SCALE_STATIC ? 0 : scales.size() / 4;
        const auto got_scales = download<float>(scales, n_scales);
        const auto got_scales2 = download<float>(scales2, n_scales);
        ASSERT_EQ(std::memcmp(got_scales.data(), got_scales2.data(), n_scales * 4), 0)
            << "scales without y";

        std::vector<float> yf(static_cast<size_t>(n)), want_scales(static_cast<size_t>(groups));
        std::vector<uint8_t> want(static_cast<size_t>(n));
        int64_t bad = 0;
        for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < n; ++j) yf[j] = to_float(dtype, y[i * n + j]);
            quantize_row(quantizer, yf.data(), n, want.data(), want_scales.data());
            for (int64_t j = 0; j < n; ++j) {
                if (got[i * n + j] != want[j] && bad++ < 5) {
                    ADD_FAILURE() << "out[" << i << "," << j << "] = 0x" << std::hex
                                  << int{got[i * n + j]} << ", want 0x" << int{want[j]} << std::dec
                                  << " (y " << yf[j] << ")";
                }
            }
            for (int64_t g = 0; g < (m.mode == RMSNORM_SCALE_STATIC ? 0 : groups); ++g) {
                const float s = got_scales[i * q.scale_row_stride + g * q.scale_group_stride];
                if (std::memcmp(&s, &want_scales[g], 4) != 0 && bad++ < 5) {
                    ADD_FAILURE() << "scale of row " << i << " group " << g << " = " << s
                                  << ", want " << want_scales[g];
                }
            }
        }
        EXPECT_EQ(bad, 0) << "elements or scales that differ";
    }
};

TEST_P(GpuQuantMatchesCpu, EveryModeFormatAndCastingModeAtTileChunkAndLoopWidths) {
    std::mt19937 gen(20261203);
    for (const int64_t n : {128, 1536, 2304, 4096, 66560}) {
        SCOPED_TRACE("n " + std::to_string(n));
        check_width(n > 8192 ? 3 : 37, n, gen);
        if (HasFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(DtypesPlainAndFused, GpuQuantMatchesCpu,
                         ::testing::Values(QuantCase{RMSNORM_BF16, false},
                                           QuantCase{RMSNORM_BF16, true},
                                           QuantCase{RMSNORM_F16, false},
                                           QuantCase{RMSNORM_F16, true},
                                           QuantCase{RMSNORM_BF16, false, true},
                                           QuantCase{RMSNORM_BF16, true, true},
                                           QuantCase{RMSNORM_F16, false, true},
                                           QuantCase{RMSNORM_F16, true, true}),
                         [](const ::testing::TestParamInfo<QuantCase>& info) {
                             return std::string(info.param.dtype == RMSNORM_BF16 ? "bf16" : "f16") +
                                    (info.param.fused ? "_FusedAdd" : "_Forward") +
                                    (info.param.vllm ? "_VllmRecipe" : "");
                         });

// A looped width of one row: the flag that refuses it in the plain forward (which has a split
// forward elsewhere) is ignored, as the quantized forward has none.
TEST_F(GpuTest, QuantizedForwardIgnoresRefuseSplitRows) {
    if (!ready()) return;
    const int64_t n = 66560;
    DeviceBuffer x(n * 2), w(n * 2), out(n), scales(16);
    CUDA_CHECK(cudaMemset(x.get(), 0, x.size()));
    CUDA_CHECK(cudaMemset(w.get(), 0, w.size()));
    auto f = rmsnorm::forward_args();
    f.rows = 1;
    f.n = n;
    f.x = rmsnorm_rows{x.get(), n, RMSNORM_BF16};
    f.weight = w.get();
    f.weight_dtype = RMSNORM_BF16;
    f.launch_flags = RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS | RMSNORM_LAUNCH_PDL;
    auto q = rmsnorm::quant_args(f);
    q.out = out.get();
    q.out_stride = n;
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    q.scales = static_cast<float*>(scales.get());
    q.scale_row_stride = 1;
    EXPECT_EQ(rmsnorm_forward_quant(&q, stream().cu()), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_EQ(cudaStreamSynchronize(stream().get()), cudaSuccess);
}

// ---------------------------------------------------------------------------------------------
// Valid calls the compiled kernels do not cover: RMSNORM_ERROR_UNSUPPORTED naming what, before
// any GPU is looked for (host memory here: nothing is launched), so that a caller (the PyTorch
// op) hands them to its own launcher.

class QuantUnsupported : public ::testing::Test {
 protected:
    static constexpr int64_t kRows = 2, kN = 256;
    std::vector<uint16_t> x = std::vector<uint16_t>(kRows * kN), w = std::vector<uint16_t>(kN);
    std::vector<float> x32 = std::vector<float>(kRows * kN), w32 = std::vector<float>(kN);
    std::vector<uint16_t> residual = std::vector<uint16_t>(kRows * kN);
    std::vector<float> residual32 = std::vector<float>(kRows * kN);
    std::vector<uint8_t> out = std::vector<uint8_t>(kRows * kN + 16);
    std::vector<float> scales = std::vector<float>(kRows * 4 + 4);
    rmsnorm_forward_args f = rmsnorm::forward_args();
    rmsnorm_quant_args q = rmsnorm::quant_args(f);

    void SetUp() override {
        f.rows = kRows;
        f.n = kN;
        f.x = rmsnorm_rows{x.data(), kN, RMSNORM_BF16};
        f.weight = w.data();
        f.weight_dtype = RMSNORM_BF16;
        q.out = out.data();
        q.out_stride = kN;
        q.format = RMSNORM_QUANT_FP8_E4M3;
        q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
        q.scales = scales.data();
        q.scale_row_stride = 1;
    }
    void expect_unsupported(const std::string& needle) {
        const rmsnorm_status s = rmsnorm_forward_quant(&q, nullptr);
        EXPECT_EQ(s, RMSNORM_ERROR_UNSUPPORTED) << rmsnorm_last_error();
        EXPECT_NE(std::string(rmsnorm_last_error()).find(needle), std::string::npos)
            << "message: " << rmsnorm_last_error();
        // The CPU reference computes every one of them.
        EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    }
};

TEST_F(QuantUnsupported, TheFixturesCallIsCompiled) {
    // Past every check of what is compiled: on a machine without a GPU, NO_GPU.
    const rmsnorm_status s = rmsnorm_forward_quant(&q, nullptr);
    EXPECT_TRUE(s == RMSNORM_SUCCESS || s == RMSNORM_ERROR_NO_GPU) << rmsnorm_last_error();
}

TEST_F(QuantUnsupported, F32Rows) {
    f.x = rmsnorm_rows{x32.data(), kN, RMSNORM_F32};
    f.weight = w32.data();
    f.weight_dtype = RMSNORM_F32;
    expect_unsupported("x.dtype is RMSNORM_F32");
}

TEST_F(QuantUnsupported, NoWeight) {
    f.weight = nullptr;
    expect_unsupported("weight is NULL");
}

TEST_F(QuantUnsupported, Fp8E5m2) {
    q.format = RMSNORM_QUANT_FP8_E5M2;
    expect_unsupported("RMSNORM_QUANT_FP8_E5M2");
}

TEST_F(QuantUnsupported, MixedDtypes) {
    f.weight = w32.data();
    f.weight_dtype = RMSNORM_F32;
    expect_unsupported("weight_dtype differs");
    f.weight = w.data();
    f.weight_dtype = RMSNORM_BF16;
    f.residual = rmsnorm_rows{residual32.data(), kN, RMSNORM_F32};
    f.residual_out = f.residual;
    f.y = rmsnorm_rows{nullptr, kN, RMSNORM_BF16};
    expect_unsupported("residual.dtype differs");
}

TEST_F(QuantUnsupported, UnalignedLayoutsNamingTheArgument) {
    q.out = out.data() + 1;
    expect_unsupported("kernel argument Y");
    q.out = out.data();
    q.scales = scales.data() + 1;
    expect_unsupported("kernel argument SCALE");
    q.scales = scales.data();
    f.n = 200;  // rows of 200 elements: n and strides not multiples of 16
    f.x.stride = 200;
    q.out_stride = 200;
    expect_unsupported("kernel argument N");
}

TEST_F(QuantUnsupported, ScaleOffsetsOf2To31Elements) {
    q.scale_mode = RMSNORM_SCALE_PER_GROUP;
    q.group_size = 64;  // 4 groups, transposed: group 3 at 3 * 2^30
    q.scale_row_stride = 1;
    q.scale_group_stride = int64_t{1} << 30;
    // 12 GiB of scales: an address apart from every other argument, never touched (refused
    // before any launch).
    q.scales = reinterpret_cast<float*>(uintptr_t{1} << 44);
    const rmsnorm_status s = rmsnorm_forward_quant(&q, nullptr);
    EXPECT_EQ(s, RMSNORM_ERROR_UNSUPPORTED) << rmsnorm_last_error();
    EXPECT_NE(std::string(rmsnorm_last_error()).find("scale_group_stride"), std::string::npos);
}

TEST_F(QuantUnsupported, UnknownLaunchFlagsAreInvalid) {
    f.launch_flags = 1u << 7;
    EXPECT_EQ(rmsnorm_forward_quant(&q, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(rmsnorm_last_error()).find("launch_flags"), std::string::npos);
}

}  // namespace
