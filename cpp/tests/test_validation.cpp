// Bad arguments: a status and a message naming the argument, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "rmsnorm/rmsnorm.hpp"

namespace {

class Validation : public ::testing::Test {
 protected:
    std::vector<float> x = std::vector<float>(8, 1.0f), y = std::vector<float>(8), w = {1, 1, 1, 1};
    std::vector<float> rstd = std::vector<float>(2);
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

    // The forward is refused with a message containing `needle`.
    void refused(const std::string& needle) {
        ASSERT_EQ(rmsnorm_cpu_forward(&fwd), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(rmsnorm_last_error()).find(needle), std::string::npos)
            << rmsnorm_last_error();
    }
    void refused_backward(const std::string& needle) {
        ASSERT_EQ(rmsnorm_cpu_backward(&bwd), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(rmsnorm_last_error()).find(needle), std::string::npos)
            << rmsnorm_last_error();
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
    fwd.x.dtype = static_cast<rmsnorm_dtype>(7);
    refused("x.dtype");
    fwd.x.dtype = RMSNORM_BF16;
    refused("y.dtype is RMSNORM_F32, expected RMSNORM_BF16");
    fwd.x.dtype = RMSNORM_F32;
    fwd.weight = w.data();
    fwd.weight_dtype = static_cast<rmsnorm_dtype>(-1);
    refused("weight_dtype");
    bwd.dx.dtype = RMSNORM_F16;
    refused_backward("dx.dtype is RMSNORM_F16, expected x's");
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
    fwd.casting_mode = static_cast<rmsnorm_casting_mode>(5);
    refused("casting_mode");
    fwd.casting_mode = RMSNORM_LLAMA;
    fwd.accumulation = static_cast<rmsnorm_accumulation>(5);
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
    EXPECT_STREQ(rmsnorm_status_string(static_cast<rmsnorm_status>(99)), "unknown status");
    fwd.n = -3;
    try {
        rmsnorm::cpu_forward(fwd);
        FAIL() << "no exception";
    } catch (const rmsnorm::Error& e) {
        EXPECT_EQ(e.status(), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("n is -3"), std::string::npos) << e.what();
    }
}

}  // namespace
