// What the GPU entry points refuse beyond the validation they share with the CPU reference
// (a status and a message naming the argument, nothing launched), and what they report where
// there is no GPU. Split from test_gpu.cpp, whose harness these tests do not need.
//
// Without a GPU the GpuRefuses tests report themselves skipped ("no GPU"; RMSNORM_REQUIRE_GPU=1
// makes that a failure); GpuWithoutAGpu runs only there.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace {

using rmsnorm_test::DeviceBuffer;
using rmsnorm_test::gpu_count;
using rmsnorm_test::GpuTest;
// ---------------------------------------------------------------------------------------------
// What the GPU path refuses (beyond the validation it shares with the CPU reference): a status
// and a message naming the argument, nothing launched.

class GpuRefuses : public GpuTest {
 protected:
    static constexpr int64_t kRows = 2, kN = 32;
    // Made in SetUp, once there is a GPU; big enough for the arguments' rows.
    std::optional<DeviceBuffer> a_, b_, c_, d_, r_;
    rmsnorm_forward_args fwd = rmsnorm::forward_args();
    rmsnorm_backward_args bwd = rmsnorm::backward_args();

    void SetUp() override {
        GpuTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        a_.emplace(4096);
        b_.emplace(4096);
        c_.emplace(4096);
        d_.emplace(4096);
        r_.emplace(64);
        fwd.rows = kRows;
        fwd.n = kN;
        fwd.x = rmsnorm_rows{a(), kN, RMSNORM_BF16};
        fwd.y = rmsnorm_rows{b(), kN, RMSNORM_BF16};
        bwd.rows = kRows;
        bwd.n = kN;
        bwd.dy = rmsnorm_rows{a(), kN, RMSNORM_BF16};
        bwd.x = rmsnorm_rows{b(), kN, RMSNORM_BF16};
        bwd.dx = rmsnorm_rows{c(), kN, RMSNORM_BF16};
        bwd.rstd = static_cast<const float*>(r_->get());
    }
    void TearDown() override {
        if (!ready()) return;
        // Nothing failed on the device (most of these calls are refused before any launch).
        EXPECT_EQ(cudaStreamSynchronize(stream().get()), cudaSuccess);
        EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }

    void* a() const { return a_->get(); }
    void* b() const { return b_->get(); }
    void* c() const { return c_->get(); }
    void* d() const { return d_->get(); }
    // k TiB: addresses for arguments too large to allocate, 1 TiB apart so that their byte
    // ranges never meet; the calls are refused before any launch could read them.
    static void* far(int k) { return reinterpret_cast<void*>(static_cast<uintptr_t>(k) << 40); }
    static void refused(rmsnorm_status got, rmsnorm_status want, const std::string& needle) {
        EXPECT_EQ(got, want) << rmsnorm_status_string(got) << ": " << rmsnorm_last_error();
        EXPECT_NE(std::string(rmsnorm_last_error()).find(needle), std::string::npos)
            << "message: " << rmsnorm_last_error();
    }
    rmsnorm_status forward() { return rmsnorm_forward(&fwd, stream().cu()); }
    rmsnorm_status fused_forward() { return rmsnorm_fused_add_forward(&fwd, stream().cu()); }
    rmsnorm_status backward() { return rmsnorm_backward(&bwd, nullptr, 0, stream().cu()); }
    rmsnorm_status fused_backward() {
        return rmsnorm_fused_add_backward(&bwd, nullptr, 0, stream().cu());
    }
    rmsnorm_status workspace_size() {
        size_t bytes = 0;
        return rmsnorm_backward_workspace_size(&bwd, &bytes);
    }
};

TEST_F(GpuRefuses, AWeightOfAnotherDtypeAsUnsupported) {
    // x bf16, weight f32: the kernels take one dtype (the Python package mixes them). The
    // weight is named in both modes, also in llama mode, where the contract promotes y to f32.
    fwd.weight = d();
    fwd.weight_dtype = RMSNORM_F32;
    fwd.casting_mode = RMSNORM_GEMMA;
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    fwd.residual = rmsnorm_rows{c(), kN, RMSNORM_BF16};
    fwd.residual_out = fwd.residual;
    refused(fused_forward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    fwd.residual = fwd.residual_out = rmsnorm_rows{nullptr, 0, RMSNORM_BF16};
    fwd.casting_mode = RMSNORM_LLAMA;
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    fwd.y.dtype = RMSNORM_F32;
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");

    bwd.weight = d();
    bwd.weight_dtype = RMSNORM_F32;
    refused(backward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    refused(workspace_size(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    bwd.dresidual = rmsnorm_rows{a(), kN, RMSNORM_BF16};
    refused(fused_backward(), RMSNORM_ERROR_UNSUPPORTED, "weight_dtype");
    // An activation of another dtype, too.
    bwd.weight = nullptr;
    bwd.dresidual.dtype = RMSNORM_F16;
    refused(fused_backward(), RMSNORM_ERROR_UNSUPPORTED, "dresidual.dtype");
}

TEST_F(GpuRefuses, UnknownLaunchFlagsAsInvalid) {
    fwd.launch_flags = 4;
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "launch_flags");
    bwd.launch_flags = RMSNORM_LAUNCH_PDL | 4;
    refused(backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "launch_flags");
    refused(workspace_size(), RMSNORM_ERROR_INVALID_ARGUMENT, "launch_flags");
}

TEST_F(GpuRefuses, FewLoopedRowsOnlyWhenAskedTo) {
    // Rows of 131072 bf16 values take the looped kernel (wider than any tile). With
    // RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS a forward of fewer rows than half the SMs (a fused add:
    // a quarter) is refused, for the caller's split forward; from there on, and without the
    // flag, it launches.
    const int64_t n = 131072, fwd_below = sms() / 2, add_below = sms() / 4;
    const size_t bytes = static_cast<size_t>(fwd_below * n) * 2;
    DeviceBuffer x(bytes), y(bytes), residual(bytes);
    fwd.n = n;
    fwd.x = rmsnorm_rows{x.get(), n, RMSNORM_BF16};
    fwd.y = rmsnorm_rows{y.get(), n, RMSNORM_BF16};
    fwd.launch_flags = RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS;
    fwd.rows = fwd_below - 1;
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS");
    fwd.rows = fwd_below;
    EXPECT_EQ(forward(), RMSNORM_SUCCESS) << rmsnorm_last_error();
    fwd.rows = fwd_below - 1;
    fwd.launch_flags = RMSNORM_LAUNCH_PDL;
    EXPECT_EQ(forward(), RMSNORM_SUCCESS) << rmsnorm_last_error();

    fwd.residual = fwd.residual_out = rmsnorm_rows{residual.get(), n, RMSNORM_BF16};
    fwd.launch_flags = RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS;
    fwd.rows = add_below - 1;
    refused(fused_forward(), RMSNORM_ERROR_UNSUPPORTED, "RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS");
    fwd.rows = add_below;
    EXPECT_EQ(fused_forward(), RMSNORM_SUCCESS) << rmsnorm_last_error();
    // Rows that fit a tile are never refused.
    fwd.n = 4096;
    fwd.rows = 1;
    EXPECT_EQ(fused_forward(), RMSNORM_SUCCESS) << rmsnorm_last_error();
}

TEST_F(GpuRefuses, RowStridesOf2To31ElementsAsUnsupported) {
    // The kernels take 32-bit strides, as Triton's JIT passes them. Rows 4 GiB apart: each
    // argument at an address of its own (far), so that none overlaps another.
    const int64_t huge = int64_t{1} << 31;
    fwd.x = rmsnorm_rows{far(1), huge, RMSNORM_BF16};
    fwd.y = rmsnorm_rows{far(2), kN, RMSNORM_BF16};
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "x.stride is 2147483648");
    fwd.x.stride = kN;
    fwd.y.stride = huge;
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "y.stride is 2147483648");
    fwd.y.stride = kN;
    fwd.residual = fwd.residual_out = rmsnorm_rows{far(3), huge, RMSNORM_BF16};
    refused(fused_forward(), RMSNORM_ERROR_UNSUPPORTED, "residual.stride is 2147483648");
    bwd.dy = rmsnorm_rows{far(1), kN, RMSNORM_BF16};
    bwd.x = rmsnorm_rows{far(2), kN, RMSNORM_BF16};
    bwd.dx = rmsnorm_rows{far(3), huge, RMSNORM_BF16};
    refused(backward(), RMSNORM_ERROR_UNSUPPORTED, "dx.stride is 2147483648");
    refused(workspace_size(), RMSNORM_ERROR_UNSUPPORTED, "dx.stride is 2147483648");
}

TEST_F(GpuRefuses, BackwardsOf2To31RowsAsUnsupported) {
    // One launch and one set of dw partials (the forward splits such calls). 128 GiB per
    // argument: at addresses far apart.
    bwd.rows = int64_t{1} << 31;
    bwd.dy.data = far(1);
    bwd.x.data = far(2);
    bwd.dx.data = far(3);
    bwd.rstd = static_cast<const float*>(far(4));
    refused(backward(), RMSNORM_ERROR_UNSUPPORTED, "rows is 2147483648");
    refused(workspace_size(), RMSNORM_ERROR_UNSUPPORTED, "rows is 2147483648");
}

TEST_F(GpuRefuses, TheFusedAddsArgumentsOnThePlainEntryPointsAndTheirAbsence) {
    fwd.residual = rmsnorm_rows{c(), kN, RMSNORM_BF16};
    fwd.residual_out = fwd.residual;
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "rmsnorm_fused_add_forward");
    fwd.residual = fwd.residual_out = rmsnorm_rows{nullptr, 0, RMSNORM_BF16};
    refused(fused_forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "residual.data is NULL");
    bwd.dresidual = rmsnorm_rows{a(), kN, RMSNORM_BF16};
    refused(backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "rmsnorm_fused_add_backward");
    bwd.dresidual.data = nullptr;
    refused(fused_backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "dresidual.data is NULL");
}

TEST_F(GpuRefuses, RowsOf2To31ElementsAsUnsupported) {
    // Refused before any launch: 4 GiB rows at addresses far apart, never read.
    fwd.n = int64_t{1} << 31;
    fwd.rows = 1;
    fwd.x.data = far(1);
    fwd.y.data = far(2);
    refused(forward(), RMSNORM_ERROR_UNSUPPORTED, "n is 2147483648");
    bwd.n = int64_t{1} << 31;
    bwd.rows = 1;
    bwd.dy.data = far(1);
    bwd.x.data = far(2);
    bwd.dx.data = far(3);
    refused(backward(), RMSNORM_ERROR_UNSUPPORTED, "n is 2147483648");
    refused(workspace_size(), RMSNORM_ERROR_UNSUPPORTED, "n is 2147483648");
}

TEST_F(GpuRefuses, TheSharedValidationsErrorsAsInvalidBeforeAnyLaunch) {
    // What validate.cpp refuses for every entry point (test_validation.cpp has each rule),
    // here with a GPU and a current context: refused first, nothing launched (TearDown).
    // Overlaps: y partly over x, interleaved rows, dw over dx.
    fwd.y = rmsnorm_rows{static_cast<unsigned char*>(a()) + 2, kN, RMSNORM_BF16};
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "y overlaps x");
    fwd.x = rmsnorm_rows{a(), 2 * kN, RMSNORM_BF16};
    fwd.y = rmsnorm_rows{static_cast<unsigned char*>(a()) + 2 * kN, 2 * kN, RMSNORM_BF16};
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "interleaved rows are refused too");
    fwd.x = rmsnorm_rows{a(), kN, RMSNORM_BF16};
    fwd.y = rmsnorm_rows{b(), kN, RMSNORM_BF16};
    fwd.residual = rmsnorm_rows{c(), kN, RMSNORM_BF16};
    fwd.residual_out = fwd.x;
    refused(fused_forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "residual_out overlaps x");
    fwd.residual = fwd.residual_out = rmsnorm_rows{};
    bwd.weight = d();
    bwd.weight_dtype = RMSNORM_BF16;
    bwd.dw = c();
    refused(backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "dx overlaps dw");
    refused(workspace_size(), RMSNORM_ERROR_INVALID_ARGUMENT, "dx overlaps dw");
    bwd.dw = nullptr;
    // Byte offsets beyond int64: invalid, whatever the GPU's own limits.
    fwd.x.stride = int64_t{1} << 62;
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "x.stride is 4611686018427387904");
    fwd.x.stride = kN;
    bwd.dy.stride = INT64_MAX;
    refused(backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "dy.stride is 9223372036854775807");
    bwd.dy.stride = kN;
    // A weight dtype that is no dtype: invalid, not a dtype the kernels lack.
    fwd.weight = d();
    std::memset(&fwd.weight_dtype, 0x7F, sizeof fwd.weight_dtype);  // as a C caller may store
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "weight_dtype is ");
    EXPECT_NE(std::string(rmsnorm_last_error()).find("not an rmsnorm_dtype value"),
              std::string::npos)
        << rmsnorm_last_error();
}

TEST_F(GpuRefuses, Fp64AccumulationWhichIsTheCpuReferences) {
    fwd.accumulation = RMSNORM_ACCUMULATE_F64;
    refused(forward(), RMSNORM_ERROR_INVALID_ARGUMENT, "accumulation");
    bwd.accumulation = RMSNORM_ACCUMULATE_F64;
    refused(backward(), RMSNORM_ERROR_INVALID_ARGUMENT, "accumulation");
}

TEST_F(GpuRefuses, AThreadWithNoCurrentContextAsNoGpu) {
    // A new thread has no current context until it makes one current (the runtime does so on
    // its first call there; this thread makes none).
    rmsnorm_status status = RMSNORM_SUCCESS;
    std::string message;
    std::thread([&] {
        status = rmsnorm_forward(&fwd, stream().cu());
        message = rmsnorm_last_error();
    }).join();
    EXPECT_EQ(status, RMSNORM_ERROR_NO_GPU) << message;
    EXPECT_NE(message.find("no current CUDA context"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------
// Where there is no GPU (this test needs none, and is skipped where there is one).

TEST(GpuWithoutAGpu, EntryPointsReportNoGpuWithAMessage) {
    std::string why;
    if (gpu_count(&why) > 0) GTEST_SKIP() << "a GPU is present";
    // Valid arguments (host memory: nothing may be launched without a GPU).
    std::vector<float> x(8, 1.0f), y(8), rstd(2), dw(4), w(4, 1.0f);
    auto fwd = rmsnorm::forward_args();
    fwd.rows = 2;
    fwd.n = 4;
    fwd.x = rmsnorm_rows{x.data(), 4, RMSNORM_F32};
    fwd.y = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
    EXPECT_EQ(rmsnorm_forward(&fwd, nullptr), RMSNORM_ERROR_NO_GPU);
    EXPECT_STRNE(rmsnorm_last_error(), "");
    EXPECT_NE(std::string(rmsnorm_last_error()).find("rmsnorm"), std::string::npos)
        << rmsnorm_last_error();

    std::vector<float> residual(8, 2.0f);
    fwd.residual = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    fwd.residual_out = fwd.residual;
    EXPECT_EQ(rmsnorm_fused_add_forward(&fwd, nullptr), RMSNORM_ERROR_NO_GPU);
    EXPECT_STRNE(rmsnorm_last_error(), "");

    auto bwd = rmsnorm::backward_args();
    bwd.rows = 2;
    bwd.n = 4;
    bwd.dy = rmsnorm_rows{y.data(), 4, RMSNORM_F32};
    bwd.x = rmsnorm_rows{x.data(), 4, RMSNORM_F32};
    bwd.dx = rmsnorm_rows{residual.data(), 4, RMSNORM_F32};
    bwd.rstd = rstd.data();
    bwd.weight = w.data();
    bwd.weight_dtype = RMSNORM_F32;
    bwd.dw = dw.data();
    size_t bytes = 0;
    EXPECT_EQ(rmsnorm_backward_workspace_size(&bwd, &bytes), RMSNORM_ERROR_NO_GPU);
    EXPECT_EQ(rmsnorm_backward(&bwd, nullptr, 0, nullptr), RMSNORM_ERROR_NO_GPU);
    EXPECT_STRNE(rmsnorm_last_error(), "");
    char text[32];
    EXPECT_EQ(rmsnorm_gpu_kernels(text, sizeof text), RMSNORM_ERROR_NO_GPU);
    // Validation still comes first: bad arguments are reported as such.
    fwd.n = 0;
    EXPECT_EQ(rmsnorm_forward(&fwd, nullptr), RMSNORM_ERROR_INVALID_ARGUMENT);
}

}  // namespace
