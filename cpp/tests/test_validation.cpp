// Bad arguments: a status and a message naming the argument, never a crash, from every entry
// point that takes them. The GPU entry points validate before they look for a GPU, so these
// tests run on any machine and build (host memory: a refused call launches nothing).
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "c_caller.h"
#include "rmsnorm/rmsnorm.hpp"

namespace {

struct EntryPoint {
    std::string name;
    std::function<rmsnorm_status()> call;
};

// The CPU reference and the GPU entry point (plain or fused, as the args ask) of a forward.
std::vector<EntryPoint> entry_points(const rmsnorm_forward_args& a) {
    const bool fused = a.residual.data != nullptr;
    return {{"rmsnorm_cpu_forward", [&a] { return rmsnorm_cpu_forward(&a); }},
            {fused ? "rmsnorm_fused_add_forward" : "rmsnorm_forward", [&a, fused] {
                 return fused ? rmsnorm_fused_add_forward(&a, nullptr)
                              : rmsnorm_forward(&a, nullptr);
             }}};
}

// ... of a backward, with the workspace size query.
std::vector<EntryPoint> entry_points(const rmsnorm_backward_args& a) {
    const bool fused = a.dresidual.data != nullptr;
    return {{"rmsnorm_cpu_backward", [&a] { return rmsnorm_cpu_backward(&a); }},
            {"rmsnorm_backward_workspace_size",
             [&a] {
                 size_t bytes = 0;
                 return rmsnorm_backward_workspace_size(&a, &bytes);
             }},
            {fused ? "rmsnorm_fused_add_backward" : "rmsnorm_backward", [&a, fused] {
                 return fused ? rmsnorm_fused_add_backward(&a, nullptr, 0, nullptr)
                              : rmsnorm_backward(&a, nullptr, 0, nullptr);
             }}};
}

// Every entry point refuses the args as invalid, with a message containing every needle.
template <typename Args>
void expect_refused(const Args& args, std::initializer_list<std::string> needles) {
    for (const EntryPoint& e : entry_points(args)) {
        SCOPED_TRACE(e.name);
        const rmsnorm_status status = e.call();
        const std::string message = rmsnorm_last_error();
        EXPECT_EQ(status, RMSNORM_ERROR_INVALID_ARGUMENT) << message;
        for (const std::string& needle : needles) {
            EXPECT_NE(message.find(needle), std::string::npos)
                << "no \"" << needle << "\" in: " << message;
        }
    }
}

class Validation : public ::testing::Test {
 protected:
    std::vector<float> x = std::vector<float>(8, 1.0f), y = std::vector<float>(8), w = {1, 1, 1, 1};
    std::vector<float> rstd = std::vector<float>(2);
    // Room for arguments placed at chosen offsets from each other.
    std::vector<float> pool = std::vector<float>(64, 1.0f);
    rmsnorm_forward_args fwd = rmsnorm::forward_args();
    rmsnorm_backward_args bwd = rmsnorm::backward_args();

    void SetUp() override {
        fwd.rows = 2;
        fwd.n = 4;
        fwd.x = rmsnorm_rows{x.data(), 4, RMSNORM_F32};
        fwd.y = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
        bwd.rows = 2;
        bwd.n = 4;
        bwd.dy = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
        bwd.x = rmsnorm_rows{x.data(), 4, RMSNORM_F32};
        bwd.dx = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
        bwd.rstd = rstd.data();
    }

    float* at(size_t k) { return pool.data() + k; }

    // The forward is refused with a message containing `needle`.
    void refused(const std::string& needle) { expect_refused(fwd, {needle}); }
    void refused_backward(const std::string& needle) { expect_refused(bwd, {needle}); }
    void accepted() {
        EXPECT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS) << rmsnorm_last_error();
    }
    void accepted_backward() {
        EXPECT_EQ(rmsnorm_cpu_backward(&bwd), RMSNORM_SUCCESS) << rmsnorm_last_error();
    }
};

TEST_F(Validation, AcceptsTheBaseCaseAndClearsTheLastError) {
    fwd.n = 0;
    ASSERT_NE(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS);
    fwd.n = 4;
    EXPECT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS);
    EXPECT_STREQ(rmsnorm_last_error(), "");
    EXPECT_EQ(rmsnorm_cpu_backward(&bwd), RMSNORM_SUCCESS);
}

TEST_F(Validation, NullArgsAndStructSize) {
    EXPECT_EQ(rmsnorm_cpu_forward(nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(rmsnorm_last_error()).find("args is NULL"), std::string::npos);
    EXPECT_EQ(rmsnorm_cpu_backward(nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(rmsnorm_forward(nullptr, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(rmsnorm_backward(nullptr, nullptr, 0, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(rmsnorm_backward_workspace_size(&bwd, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(rmsnorm_last_error()).find("bytes is NULL"), std::string::npos);
    fwd.struct_size = 8;
    refused("struct_size");
}

TEST_F(Validation, Shapes) {
    fwd.rows = -1;
    refused("rows is -1");
    fwd.rows = 2;
    fwd.n = 0;
    refused("n is 0");
}

TEST_F(Validation, NoRowsNeedNoPointers) {
    fwd.rows = 0;
    fwd.x.data = nullptr;
    fwd.y.data = nullptr;
    EXPECT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS);
}

TEST_F(Validation, Pointers) {
    fwd.x.data = nullptr;
    refused("x.data is NULL");
    fwd.x.data = x.data();
    fwd.y.data = nullptr;
    refused("y.data is NULL");
    bwd.rstd = nullptr;
    refused_backward("rstd is NULL");
}

TEST_F(Validation, StridesOfOutputsMustKeepRowsApart) {
    fwd.y.stride = 3;
    refused("y.stride is 3");
    fwd.y.stride = 4;
    fwd.x.stride = -4;
    refused("x.stride is -4");
    fwd.x.stride = 0;  // one input row broadcast to every row is fine
    EXPECT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS);
}

TEST_F(Validation, Dtypes) {
    c_store_dtype(&fwd.x.dtype, 7);
    refused("x.dtype");
    fwd.x.dtype = RMSNORM_BF16;
    refused("y.dtype is RMSNORM_F32, expected RMSNORM_BF16");
    fwd.x.dtype = RMSNORM_F32;
    fwd.weight = w.data();
    c_store_dtype(&fwd.weight_dtype, -1);
    refused("weight_dtype");
    bwd.dx.dtype = RMSNORM_F16;
    refused_backward("dx.dtype is RMSNORM_F16, expected x's");
}

// ---------------------------------------------------------------------------------------------
// Enum fields: a C caller may store any int in them. Each is read as an integer until known
// to hold an enumerator (loading another value as the C++ enum is undefined behaviour, which
// the sanitizer build of this suite turns into a failure).

TEST_F(Validation, EnumFieldsHoldingNoEnumeratorAreRefusedFirstByEveryEntryPoint) {
    // 3 lies within rmsnorm_dtype's range of values (two bits) but names no dtype; 7, 1000
    // and -1 lie outside it.
    for (const int bad : {3, 7, 1000, -1}) {
        SCOPED_TRACE("value " + std::to_string(bad));
        const std::string is = " is " + std::to_string(bad) + ", not an rmsnorm_dtype value";
        for (rmsnorm_dtype* field : {&fwd.x.dtype, &fwd.y.dtype}) {
            const rmsnorm_dtype good = *field;
            c_store_dtype(field, bad);
            // Before the other checks: also with n bad.
            fwd.n = 0;
            expect_refused(fwd, {(field == &fwd.x.dtype ? "x.dtype" : "y.dtype") + is});
            fwd.n = 4;
            *field = good;
        }
        // Where the call reads it: with a weight, with a residual.
        fwd.weight = w.data();
        c_store_dtype(&fwd.weight_dtype, bad);
        expect_refused(fwd, {"weight_dtype" + is});
        fwd.weight_dtype = RMSNORM_F32;
        fwd.weight = nullptr;
        fwd.residual = fwd.residual_out = rmsnorm_rows{at(0), 4, RMSNORM_F32};
        c_store_dtype(&fwd.residual.dtype, bad);
        expect_refused(fwd, {"residual.dtype" + is});
        fwd.residual.dtype = RMSNORM_F32;
        c_store_dtype(&fwd.residual_out.dtype, bad);
        expect_refused(fwd, {"residual_out.dtype" + is});
        fwd.residual = fwd.residual_out = rmsnorm_rows{};

        for (rmsnorm_dtype* field : {&bwd.dy.dtype, &bwd.x.dtype, &bwd.dx.dtype}) {
            const rmsnorm_dtype good = *field;
            c_store_dtype(field, bad);
            const std::string name = field == &bwd.dy.dtype  ? "dy.dtype"
                                     : field == &bwd.x.dtype ? "x.dtype"
                                                             : "dx.dtype";
            expect_refused(bwd, {name + is});
            *field = good;
        }
        bwd.dresidual = rmsnorm_rows{at(0), 4, RMSNORM_F32};
        c_store_dtype(&bwd.dresidual.dtype, bad);
        expect_refused(bwd, {"dresidual.dtype" + is});
        bwd.dresidual = rmsnorm_rows{};
        bwd.weight = w.data();
        c_store_dtype(&bwd.weight_dtype, bad);
        expect_refused(bwd, {"weight_dtype" + is});
        bwd.weight = nullptr;
        bwd.weight_dtype = RMSNORM_F32;

        c_store_casting_mode(&fwd.casting_mode, bad);
        expect_refused(fwd, {"casting_mode is " + std::to_string(bad)});
        c_store_casting_mode(&bwd.casting_mode, bad);
        expect_refused(bwd, {"casting_mode is " + std::to_string(bad)});
        fwd.casting_mode = bwd.casting_mode = RMSNORM_LLAMA;
        c_store_accumulation(&fwd.accumulation, bad);
        expect_refused(fwd, {"accumulation is " + std::to_string(bad)});
        c_store_accumulation(&bwd.accumulation, bad);
        expect_refused(bwd, {"accumulation is " + std::to_string(bad)});
        fwd.accumulation = bwd.accumulation = RMSNORM_ACCUMULATE_F32;
    }
}

TEST_F(Validation, AnUnknownWeightDtypeIsInvalidOnTheGpuToo) {
    // The GPU entry points refuse a weight dtype other than x's as unsupported, but an unknown
    // value is no dtype at all: the CPU reference's status and message.
    fwd.weight = w.data();
    c_store_dtype(&fwd.weight_dtype, 9);
    expect_refused(fwd, {"weight_dtype is 9, not an rmsnorm_dtype value"});
    fwd.residual = fwd.residual_out = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    expect_refused(fwd, {"weight_dtype is 9, not an rmsnorm_dtype value"});
}

TEST_F(Validation, EnumFieldsTheCallIgnoresMayHoldAnything) {
    // No weight: weight_dtype is not read; no residual: neither residual's dtype.
    c_store_dtype(&fwd.weight_dtype, 1000);
    c_store_dtype(&fwd.residual.dtype, -5);
    c_store_dtype(&fwd.residual_out.dtype, 77);
    accepted();
    EXPECT_NEAR(y[0], 1.0f, 1e-5f);
    c_store_dtype(&bwd.weight_dtype, 1000);
    c_store_dtype(&bwd.dresidual.dtype, 1000);
    accepted_backward();
}

TEST_F(Validation, FusedAdd) {
    std::vector<float> residual(8, 2.0f);
    fwd.residual_out = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    refused("residual_out is set but residual.data is NULL");
    fwd.residual = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    fwd.residual_out.dtype = RMSNORM_BF16;
    refused("residual_out.dtype");
    fwd.residual_out.dtype = RMSNORM_F32;
    EXPECT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_SUCCESS);
    EXPECT_EQ(residual[0], 3.0f);
}

TEST_F(Validation, TheUnroundedSumIsTheFusedAddsAndItsEnumIsChecked) {
    fwd.normalized_sum = RMSNORM_SUM_FP32;
    refused("normalized_sum is RMSNORM_SUM_FP32, the fused add's; it needs a residual");
    std::vector<float> residual(8, 2.0f);
    fwd.residual = fwd.residual_out = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    accepted();
    for (const int bad : {2, -1}) {
        c_store_normalized_sum(&fwd.normalized_sum, bad);
        refused("normalized_sum is " + std::to_string(bad) +
                ", not RMSNORM_SUM_ROUNDED or RMSNORM_SUM_FP32");
    }
    fwd.normalized_sum = RMSNORM_SUM_ROUNDED;
    fwd.reserved = 1;
    refused("reserved is 1; it must be 0");
}

TEST_F(Validation, AFirstVersionStructIsReadUpToItsSizeAndTakesTheRoundedSum) {
    // A caller built against the first rmsnorm.h passes its struct's size; what lies past it
    // is not the caller's and is never read (here: bytes that would be refused if read).
    ASSERT_LT(c_forward_args_v1_size(), sizeof(rmsnorm_forward_args));
    std::vector<float> residual(8, 2.0f), y_v2(8);
    fwd.residual = fwd.residual_out = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    alignas(rmsnorm_forward_args) unsigned char v1[sizeof(rmsnorm_forward_args)];
    std::memset(v1, 0xff, sizeof v1);
    std::memcpy(v1, &fwd, c_forward_args_v1_size());
    auto* old = reinterpret_cast<rmsnorm_forward_args*>(v1);
    old->struct_size = c_forward_args_v1_size();
    EXPECT_EQ(rmsnorm_cpu_forward(old), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_EQ(residual[0], 3.0f);
    old->struct_size = c_forward_args_v1_size() + 4;
    expect_refused(*old, {"struct_size is", "its first version's"});
}

TEST_F(Validation, Scalars) {
    fwd.eps = -1.0f;
    refused("eps must be");
    fwd.eps = NAN;
    refused("eps must be");
    fwd.eps = 1e-6f;
    fwd.offset = 1.0f;
    refused("weight is NULL");
    fwd.weight = w.data();
    fwd.weight_dtype = RMSNORM_F32;
    fwd.offset = INFINITY;
    refused("offset must be finite");
    fwd.offset = 0.0f;
    c_store_casting_mode(&fwd.casting_mode, 5);
    refused("casting_mode");
    fwd.casting_mode = RMSNORM_LLAMA;
    c_store_accumulation(&fwd.accumulation, 5);
    refused("accumulation");
}

TEST_F(Validation, WeightGradientNeedsAWeight) {
    std::vector<float> dw(4);
    bwd.dw = dw.data();
    refused_backward("dw is set but weight is NULL");
}

TEST_F(Validation, StatusStringsAndTheCppLayer) {
    EXPECT_STREQ(rmsnorm_status_string(RMSNORM_SUCCESS), "success");
    EXPECT_STREQ(rmsnorm_status_string(RMSNORM_ERROR_INVALID_ARGUMENT), "invalid argument");
    // Whatever int a C caller passes.
    EXPECT_STREQ(c_status_string(7), "unknown status");
    EXPECT_STREQ(c_status_string(99), "unknown status");
    EXPECT_STREQ(c_status_string(-1), "unknown status");
    fwd.n = -3;
    try {
        rmsnorm::cpu_forward(fwd);
        FAIL() << "no exception";
    } catch (const rmsnorm::Error& e) {
        EXPECT_EQ(e.status(), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("n is -3"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------------------------------------
// Every byte an argument covers, (rows - 1) * stride + n elements (n for the weight and dw,
// rows floats for rstd), must be addressable from its data pointer: within int64 and the
// address space. Beyond, the addresses the kernels and the CPU reference form would wrap.

TEST_F(Validation, StridesWhoseLastRowLiesBeyondInt64BytesAreRefusedNamingTheField) {
    for (const int64_t huge : {INT64_MAX, int64_t{1} << 62, int64_t{1} << 61}) {
        SCOPED_TRACE("stride " + std::to_string(huge));
        const std::string is = ".stride is " + std::to_string(huge);
        fwd.x.stride = huge;
        expect_refused(fwd, {"x" + is, "2^63"});
        fwd.x.stride = 4;
        fwd.y.stride = huge;
        expect_refused(fwd, {"y" + is, "2^63"});
        fwd.y.stride = 4;
        fwd.residual = fwd.residual_out = rmsnorm_rows{at(0), huge, RMSNORM_F32};
        expect_refused(fwd, {"residual" + is});
        fwd.residual.stride = 4;
        expect_refused(fwd, {"residual_out" + is});
        fwd.residual = fwd.residual_out = rmsnorm_rows{};

        for (rmsnorm_rows* rows : {&bwd.dy, &bwd.x, &bwd.dx}) {
            const std::string name = rows == &bwd.dy ? "dy" : rows == &bwd.x ? "x" : "dx";
            if (rows == &bwd.dx) bwd.dy = rmsnorm_rows{at(0), 4, RMSNORM_F32};  // not dy itself
            rows->stride = huge;
            expect_refused(bwd, {name + is});
            rows->stride = 4;
        }
        bwd.dresidual = rmsnorm_rows{at(16), huge, RMSNORM_F32};
        expect_refused(bwd, {"dresidual" + is});
        bwd.dresidual = rmsnorm_rows{};
    }
}

TEST_F(Validation, RowsAndWidthsBeyondInt64BytesAreRefusedNamingThem) {
    // A row of 2^62 f32 elements: 2^64 bytes.
    fwd.rows = 1;
    fwd.n = int64_t{1} << 62;
    expect_refused(fwd, {"n is 4611686018427387904", "a row of x"});
    // No rows: the weight's n elements remain (the backward writes dw even then).
    fwd.rows = 0;
    fwd.weight = w.data();
    fwd.weight_dtype = RMSNORM_F32;
    expect_refused(fwd, {"n is 4611686018427387904", "weight's"});
    bwd.rows = 0;
    bwd.n = fwd.n;
    bwd.weight = w.data();
    bwd.weight_dtype = RMSNORM_F32;
    expect_refused(bwd, {"n is 4611686018427387904", "weight's"});

    // 2^61 + 1 rows of one f16 element: inputs broadcast (stride 0), y within 2^62 + 2 bytes,
    // and rstd's floats past 2^63.
    const int64_t rows = (int64_t{1} << 61) + 1;
    const std::string is = "rows is " + std::to_string(rows);
    fwd = rmsnorm::forward_args();
    fwd.rows = rows;
    fwd.n = 1;
    fwd.x = rmsnorm_rows{at(0), 0, RMSNORM_F16};
    fwd.y = rmsnorm_rows{y.data(), 1, RMSNORM_F16};
    fwd.rstd = rstd.data();
    expect_refused(fwd, {is, "rstd's"});
    bwd = rmsnorm::backward_args();
    bwd.rows = rows;
    bwd.n = 1;
    bwd.dy = bwd.x = rmsnorm_rows{at(0), 0, RMSNORM_F16};
    bwd.dx = rmsnorm_rows{y.data(), 1, RMSNORM_F16};
    bwd.rstd = rstd.data();
    expect_refused(bwd, {is, "rstd's"});
}

TEST_F(Validation, ArgumentsPassingTheEndOfTheAddressSpaceAreRefused) {
    // 16 bytes of x from 8 bytes below the top: they would wrap to address 0.
    void* const top = reinterpret_cast<void*>(UINTPTR_MAX - 7);
    fwd.rows = 1;
    fwd.x.data = top;
    expect_refused(fwd, {"x.data + 16 bytes passes the end of the address space"});
    fwd.x.data = x.data();
    fwd.weight = top;
    fwd.weight_dtype = RMSNORM_F32;
    expect_refused(fwd, {"weight + 16 bytes passes the end of the address space"});
    bwd.rstd = static_cast<const float*>(top);
    bwd.rows = 3;
    bwd.dy.stride = bwd.x.stride = 0;
    bwd.dx = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    expect_refused(bwd, {"rstd + 12 bytes passes the end of the address space"});
}

TEST_F(Validation, ASingleRowsStrideIsNeverUsed) {
    fwd.rows = 1;
    for (const int64_t stride : {INT64_MAX, INT64_MIN, int64_t{-1}}) {
        fwd.x.stride = fwd.y.stride = stride;
        accepted();
    }
}

// ---------------------------------------------------------------------------------------------
// Overlaps. An output may be one input exactly (the same data, stride and dtype: each element
// is read before it is written, by the same thread) where the contract allows it, y = x,
// residual_out = residual, dx = dy, and must otherwise share no byte with any other argument.
// Byte ranges are compared: rows interleaved at a common stride overlap too.

TEST_F(Validation, YMayBeXItself) {
    fwd.y = fwd.x;
    accepted();
    EXPECT_NEAR(x[5], 1.0f, 1e-5f);
}

TEST_F(Validation, YOverlappingXOtherwiseIsRefused) {
    fwd.x = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    fwd.y = rmsnorm_rows{at(1), 4, RMSNORM_F32};
    expect_refused(fwd, {"y overlaps x", "y may be x itself"});
    // The same data at another stride.
    fwd.x = rmsnorm_rows{at(0), 8, RMSNORM_F32};
    fwd.y = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    expect_refused(fwd, {"y overlaps x"});
    // The same data and stride in another dtype of the same size: the norm of an f16 residual
    // stream, y in f16, over x's bf16.
    fwd.x = rmsnorm_rows{at(0), 4, RMSNORM_BF16};
    fwd.residual = fwd.residual_out = rmsnorm_rows{at(16), 4, RMSNORM_F16};
    fwd.y = rmsnorm_rows{at(0), 4, RMSNORM_F16};
    expect_refused(fwd, {"y overlaps x"});
}

TEST_F(Validation, InterleavedRowsAreRefusedTooTheirByteRangesOverlap) {
    // x in the even halves of 8-float rows, y in the odd ones: no element shared.
    fwd.x = rmsnorm_rows{at(0), 8, RMSNORM_F32};
    fwd.y = rmsnorm_rows{at(4), 8, RMSNORM_F32};
    expect_refused(fwd, {"y overlaps x", "interleaved rows are refused too"});
    bwd.dy = rmsnorm_rows{at(0), 8, RMSNORM_F32};
    bwd.dx = rmsnorm_rows{at(4), 8, RMSNORM_F32};
    expect_refused(bwd, {"dx overlaps dy", "interleaved rows are refused too"});
}

TEST_F(Validation, YLiesApartFromTheWeightTheResidualsAndRstd) {
    fwd.weight = y.data() + 4;
    fwd.weight_dtype = RMSNORM_F32;
    expect_refused(fwd, {"y overlaps weight"});
    fwd.weight = w.data();
    fwd.rstd = y.data() + 7;
    expect_refused(fwd, {"y overlaps rstd"});
    fwd.rstd = rstd.data();
    // y may be x itself, not the residual itself.
    fwd.residual = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    fwd.residual_out = rmsnorm_rows{at(8), 4, RMSNORM_F32};
    fwd.y = fwd.residual;
    expect_refused(fwd, {"y overlaps residual", "(y may be x itself)"});
    fwd.y = rmsnorm_rows{at(10), 4, RMSNORM_F32};
    expect_refused(fwd, {"y overlaps residual_out"});
    fwd.y = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
    accepted();
}

TEST_F(Validation, ResidualOutMayBeTheResidualItselfAndLiesApartFromTheRest) {
    fwd.residual = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    fwd.residual_out = fwd.residual;  // in place
    accepted();
    fwd.residual_out = rmsnorm_rows{at(2), 4, RMSNORM_F32};
    expect_refused(fwd, {"residual_out overlaps residual", "residual itself"});
    fwd.residual_out = fwd.x;
    expect_refused(fwd, {"residual_out overlaps x", "(residual_out may be residual itself)"});
    fwd.residual_out = rmsnorm_rows{at(16), 4, RMSNORM_F32};
    fwd.weight = at(20);
    fwd.weight_dtype = RMSNORM_F32;
    expect_refused(fwd, {"residual_out overlaps weight"});
    fwd.weight = w.data();
    fwd.rstd = at(23);
    expect_refused(fwd, {"residual_out overlaps rstd"});
    fwd.rstd = at(24);
    accepted();
}

TEST_F(Validation, RstdLiesApartFromEveryArgument) {
    fwd.rstd = x.data() + 6;
    expect_refused(fwd, {"rstd overlaps x"});
    fwd.weight = at(0);
    fwd.weight_dtype = RMSNORM_F32;
    fwd.rstd = at(3);
    expect_refused(fwd, {"rstd overlaps weight"});
    fwd.residual = rmsnorm_rows{at(8), 4, RMSNORM_F32};
    fwd.residual_out = rmsnorm_rows{at(32), 4, RMSNORM_F32};
    fwd.rstd = at(15);
    expect_refused(fwd, {"rstd overlaps residual"});
}

TEST_F(Validation, InputsMayShareMemory) {
    // x, the residual and the weight all in one place: only read.
    fwd.residual = fwd.x;
    fwd.residual_out = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    fwd.weight = x.data();
    fwd.weight_dtype = RMSNORM_F32;
    accepted();
    bwd.x = bwd.dy = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    bwd.dresidual = bwd.x;
    bwd.dx = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
    bwd.weight = at(2);
    bwd.weight_dtype = RMSNORM_F32;
    accepted_backward();
}

TEST_F(Validation, DxMayBeDyItselfAndLiesApartFromTheRest) {
    accepted_backward();  // the fixture's dx is dy
    bwd.dy = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    bwd.dx = rmsnorm_rows{at(1), 4, RMSNORM_F32};
    expect_refused(bwd, {"dx overlaps dy", "dx may be dy itself"});
    bwd.dx = bwd.x;
    expect_refused(bwd, {"dx overlaps x", "(dx may be dy itself)"});
    bwd.dx = rmsnorm_rows{at(16), 4, RMSNORM_F32};
    bwd.dresidual = rmsnorm_rows{at(20), 4, RMSNORM_F32};
    expect_refused(bwd, {"dx overlaps dresidual"});
    bwd.dresidual = rmsnorm_rows{};
    bwd.weight = at(23);
    bwd.weight_dtype = RMSNORM_F32;
    expect_refused(bwd, {"dx overlaps weight"});
    bwd.weight = w.data();
    bwd.rstd = at(17);
    expect_refused(bwd, {"dx overlaps rstd"});
    bwd.rstd = rstd.data();
    bwd.dw = at(20);
    expect_refused(bwd, {"dx overlaps dw"});
    bwd.dw = at(32);
    accepted_backward();
}

TEST_F(Validation, DwLiesApartFromEveryArgument) {
    bwd.weight = w.data();
    bwd.weight_dtype = RMSNORM_F32;
    bwd.dx = rmsnorm_rows{at(0), 4, RMSNORM_F32};
    bwd.dw = y.data() + 2;
    expect_refused(bwd, {"dw overlaps dy"});
    bwd.dw = x.data() + 4;
    expect_refused(bwd, {"dw overlaps x"});
    bwd.dresidual = rmsnorm_rows{at(16), 4, RMSNORM_F32};
    bwd.dw = at(22);
    expect_refused(bwd, {"dw overlaps dresidual"});
    bwd.dresidual = rmsnorm_rows{};
    bwd.dw = w.data() + 1;
    expect_refused(bwd, {"dw overlaps weight"});
    bwd.dw = rstd.data();
    expect_refused(bwd, {"dw overlaps rstd"});
    bwd.dw = at(32);
    accepted_backward();
}

TEST_F(Validation, NoRowsOverlapNothing) {
    // Without rows nothing is read or written but dw.
    fwd.rows = 0;
    fwd.y = rmsnorm_rows{x.data() + 1, 4, RMSNORM_F32};
    accepted();
}

}  // namespace
