// The quantized forward's bad arguments: RMSNORM_ERROR_INVALID_ARGUMENT and a message naming
// the field, from the CPU reference and the GPU entry point alike (which validates before it
// looks for a GPU: host memory, nothing launched). The forward's own fields keep the forward's
// checks (test_validation.cpp); here what the quantized forward adds or changes.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>

#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "c_caller.h"
#include "rmsnorm/rmsnorm.hpp"

namespace {

// Both entry points refuse q as invalid, with a message containing every needle.
void expect_refused(const rmsnorm_quant_args& q, std::initializer_list<std::string> needles) {
    const std::vector<std::pair<const char*, std::function<rmsnorm_status()>>> entries = {
        {"rmsnorm_cpu_forward_quant", [&q] { return rmsnorm_cpu_forward_quant(&q); }},
        {"rmsnorm_forward_quant", [&q] { return rmsnorm_forward_quant(&q, nullptr); }}};
    for (const auto& [name, call] : entries) {
        SCOPED_TRACE(name);
        const rmsnorm_status status = call();
        const std::string message = rmsnorm_last_error();
        EXPECT_EQ(status, RMSNORM_ERROR_INVALID_ARGUMENT) << message;
        for (const std::string& needle : needles) {
            EXPECT_NE(message.find(needle), std::string::npos)
                << "no \"" << needle << "\" in: " << message;
        }
    }
}

// 2 rows of 128 f32 values (two groups of 64), per-token fp8 scales, no y: valid (the first
// test says so), and each test breaks one thing.
class QuantValidation : public ::testing::Test {
 protected:
    static constexpr int64_t kRows = 2, kN = 128;
    std::vector<float> x = std::vector<float>(kRows * kN, 1.0f), w = std::vector<float>(kN, 1.0f);
    std::vector<float> y = std::vector<float>(kRows * kN);
    std::vector<uint8_t> out = std::vector<uint8_t>(kRows * kN);
    std::vector<float> scales = std::vector<float>(kRows * 2, 1.0f);
    float ub = 100.0f;
    // Room for arguments placed at chosen offsets from each other (floats).
    std::vector<float> pool = std::vector<float>(4 * kRows * kN, 1.0f);
    rmsnorm_forward_args fwd = rmsnorm::forward_args();
    rmsnorm_quant_args q = rmsnorm::quant_args(fwd);

    void SetUp() override {
        fwd.rows = kRows;
        fwd.n = kN;
        fwd.x = rmsnorm_rows{x.data(), kN, RMSNORM_F32};
        fwd.weight = w.data();
        fwd.weight_dtype = RMSNORM_F32;
        q.out = out.data();
        q.out_stride = kN;
        q.format = RMSNORM_QUANT_FP8_E4M3;
        q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
        q.scales = scales.data();
        q.scale_row_stride = 1;
    }
    void per_group(int64_t group = 64) {
        q.scale_mode = RMSNORM_SCALE_PER_GROUP;
        q.group_size = group;
        q.scale_row_stride = group > 0 ? kN / group : 1;
        q.scale_group_stride = 1;
    }
};

TEST_F(QuantValidation, TheFixturesArgumentsAreValid) {
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    // The GPU entry point gets past validation: f32 is not compiled (or no GPU in this build).
    EXPECT_NE(rmsnorm_forward_quant(&q, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT)
        << rmsnorm_last_error();
    per_group();
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

TEST_F(QuantValidation, ArgsStructSizeAndTheForward) {
    EXPECT_EQ(rmsnorm_cpu_forward_quant(nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(rmsnorm_forward_quant(nullptr, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(rmsnorm_last_error()).find("args is NULL"), std::string::npos);
    q.struct_size = sizeof q - 4;
    expect_refused(q, {"args->struct_size", "rmsnorm_quant_args"});
    q.struct_size = sizeof q;
    q.forward = nullptr;
    expect_refused(q, {"forward is NULL"});
    q.forward = &fwd;
    fwd.struct_size = 8;
    expect_refused(q, {"forward->struct_size", "rmsnorm_forward_args"});
}

TEST_F(QuantValidation, EnumFieldsHoldingNoEnumerator) {
    c_store_quant_format(&q.format, 3);
    expect_refused(q, {"format is 3"});
    c_store_quant_format(&q.format, -1);
    expect_refused(q, {"format is -1"});
    q.format = RMSNORM_QUANT_INT8;
    c_store_scale_mode(&q.scale_mode, 7);
    expect_refused(q, {"scale_mode is 7"});
    q.scale_mode = RMSNORM_SCALE_STATIC;
    c_store_dtype(&fwd.x.dtype, 9);
    expect_refused(q, {"x.dtype is 9"});
}

TEST_F(QuantValidation, TheQuantizerAndReservedAreChecked) {
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    q.scales = scales.data();
    q.scale_row_stride = 1;
    q.quantizer = RMSNORM_QUANTIZER_VLLM_FUSED;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    c_store_quantizer(&q.quantizer, 2);
    expect_refused(q, {"quantizer is 2", "RMSNORM_QUANTIZER_VLLM_FUSED"});
    q.quantizer = RMSNORM_QUANTIZER_VLLM;
    q.reserved = 3;
    expect_refused(q, {"reserved is 3"});
    q.reserved = 0;
    fwd.normalized_sum = RMSNORM_SUM_FP32;  // no residual
    expect_refused(q, {"forward->normalized_sum is RMSNORM_SUM_FP32", "needs a residual"});
}

TEST_F(QuantValidation, AFirstVersionStructIsReadUpToItsSizeAndTakesVllmsQuantizer) {
    ASSERT_LT(c_quant_args_v1_size(), sizeof(rmsnorm_quant_args));
    fwd.x = rmsnorm_rows{x.data(), kN, RMSNORM_F32};
    std::fill(x.begin(), x.end(), 0.0f);  // all-zero rows: int8 scale 0 (vLLM), or FLT_EPSILON
    q.format = RMSNORM_QUANT_INT8;
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    q.scales = scales.data();
    q.scale_row_stride = 1;
    alignas(rmsnorm_quant_args) unsigned char v1[sizeof(rmsnorm_quant_args)];
    std::memset(v1, 0xff, sizeof v1);  // past the first version: never read
    std::memcpy(v1, &q, c_quant_args_v1_size());
    auto* old = reinterpret_cast<rmsnorm_quant_args*>(v1);
    old->struct_size = c_quant_args_v1_size();
    EXPECT_EQ(rmsnorm_cpu_forward_quant(old), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_EQ(scales[0], 0.0f);
    q.quantizer = RMSNORM_QUANTIZER_VLLM_FUSED;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_EQ(scales[0], 0x1p-23f);
}

TEST_F(QuantValidation, YsDtypeIsIgnoredWithoutYAndCheckedWithIt) {
    c_store_dtype(&fwd.y.dtype, 9);
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    fwd.y.data = y.data();
    fwd.y.stride = kN;
    expect_refused(q, {"y.dtype is 9"});
    fwd.y.dtype = RMSNORM_BF16;
    expect_refused(q, {"y.dtype is RMSNORM_BF16", "expected RMSNORM_F32"});
}

TEST_F(QuantValidation, RstdIsNotWritten) {
    std::vector<float> rstd(kRows);
    fwd.rstd = rstd.data();
    expect_refused(q, {"forward->rstd"});
}

TEST_F(QuantValidation, TheForwardsOwnChecksApply) {
    fwd.n = 0;
    expect_refused(q, {"n is 0"});
    fwd.n = kN;
    fwd.eps = -1.0f;
    expect_refused(q, {"eps"});
}

TEST_F(QuantValidation, GroupSize) {
    q.group_size = 64;
    expect_refused(q, {"group_size is 64", "RMSNORM_SCALE_PER_GROUP"});
    per_group(32);
    expect_refused(q, {"group_size is 32", "64 or 128"});
    per_group(0);
    expect_refused(q, {"group_size is 0"});
    per_group(128);
    fwd.n = 192;  // 3 groups of 64 would do; 128 does not divide it
    expect_refused(q, {"group_size 128 does not divide n = 192"});
}

TEST_F(QuantValidation, ScaleUbIsForDynamicFp8ScalesPerGroupUnderTheFusedQuantizer) {
    q.scale_ub = &ub;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    q.format = RMSNORM_QUANT_INT8;
    expect_refused(q, {"scale_ub", "int8"});
    q.format = RMSNORM_QUANT_FP8_E5M2;
    q.scale_mode = RMSNORM_SCALE_STATIC;
    expect_refused(q, {"scale_ub", "static quantization takes none"});
    per_group();
    // vLLM's group quantizer has no bound; its fused per-block kernel has.
    expect_refused(q, {"scale_ub", "per-group", "RMSNORM_QUANTIZER_VLLM_FUSED"});
    q.quantizer = RMSNORM_QUANTIZER_VLLM_FUSED;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

TEST_F(QuantValidation, Ue8m0IsZeroOrOneAndForPerGroupAlone) {
    q.ue8m0 = 1;
    expect_refused(q, {"ue8m0 is 1", "RMSNORM_SCALE_PER_GROUP"});
    per_group();
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    q.ue8m0 = 2;
    expect_refused(q, {"ue8m0 is 2", "0 or 1"});
}

TEST_F(QuantValidation, OutAndItsStride) {
    q.out = nullptr;
    expect_refused(q, {"out is NULL"});
    q.out = out.data();
    q.out_stride = kN - 1;
    expect_refused(q, {"out_stride is 127", ">= n = 128"});
    q.out_stride = INT64_MAX - 64;  // the last row ends past int64
    expect_refused(q, {"out_stride is"});
}

TEST_F(QuantValidation, YTakesOutsStride) {
    std::vector<float> wide(kRows * 2 * kN);
    fwd.y = rmsnorm_rows{wide.data(), 2 * kN, RMSNORM_F32};
    expect_refused(q, {"y.stride is 256", "out_stride 128"});
    // A single row's strides are never used.
    fwd.rows = 1;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

TEST_F(QuantValidation, Scales) {
    q.scales = nullptr;
    expect_refused(q, {"scales is NULL"});
    q.scales = scales.data();
    q.scale_row_stride = 0;
    expect_refused(q, {"scale_row_stride is 0"});
    // Static: one scale, read; the strides are not used.
    q.scale_mode = RMSNORM_SCALE_STATIC;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

TEST_F(QuantValidation, PerGroupScaleStridesMustGiveEveryScaleAnElementOfItsOwn) {
    per_group();
    q.scale_row_stride = 1;  // row-major would need 2; transposed, a group stride of 2
    q.scale_group_stride = 1;
    expect_refused(q, {"scale_row_stride 1 and scale_group_stride 1", "row-major", "transposed"});
    q.scale_group_stride = 2;  // transposed: (groups, rows)
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    q.scale_group_stride = -2;
    expect_refused(q, {"scale_group_stride -2"});
    fwd.rows = 1;
    q.scale_group_stride = 0;
    expect_refused(q, {"scale_group_stride is 0"});
    fwd.rows = kRows;
    q.scale_row_stride = INT64_MAX / 2;
    q.scale_group_stride = 1;
    expect_refused(q, {"scale_row_stride and scale_group_stride", "2^63 - 1 bytes"});
}

TEST_F(QuantValidation, OutputsOverlappingOtherArgumentsNameBoth) {
    // out inside x.
    q.out = x.data() + 8;
    expect_refused(q, {"out overlaps x"});
    q.out = out.data();
    // Dynamic scales inside the weight.
    q.scales = w.data();
    expect_refused(q, {"scales overlaps weight"});
    // A static scale is an input: the weight may hold it, y may not.
    q.scale_mode = RMSNORM_SCALE_STATIC;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    fwd.y = rmsnorm_rows{y.data(), kN, RMSNORM_F32};
    q.scales = y.data() + 5;
    expect_refused(q, {"y overlaps scales"});
    // scale_ub inside out.
    q.scales = scales.data();
    q.scale_mode = RMSNORM_SCALE_PER_TOKEN;
    q.scale_ub = reinterpret_cast<const float*>(out.data() + 16);
    expect_refused(q, {"out overlaps scale_ub"});
}

TEST_F(QuantValidation, FusedAddOutputsApartFromTheQuantizedOnes) {
    fwd.residual = rmsnorm_rows{pool.data(), kN, RMSNORM_F32};
    fwd.residual_out = fwd.residual;  // in place
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    q.out = pool.data() + kN;
    expect_refused(q, {"out overlaps residual"});
    q.out = out.data();
    q.scales = pool.data() + 3;
    expect_refused(q, {"residual_out overlaps scales"});
}

TEST_F(QuantValidation, YMayBeXAsInTheForward) {
    fwd.y = fwd.x;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
    fwd.y.data = x.data() + 1;
    expect_refused(q, {"y overlaps x"});
}

TEST_F(QuantValidation, NoRowsNeedNoPointers) {
    fwd.rows = 0;
    fwd.x.data = nullptr;
    q.out = nullptr;
    q.scales = nullptr;
    EXPECT_EQ(rmsnorm_cpu_forward_quant(&q), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

}  // namespace
