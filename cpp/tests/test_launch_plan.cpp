// librmsnorm plans its launches as the Python launcher does (src/launch_plan.hpp), case by
// case against what the Python rules computed (generated/launch_plan_cases.hpp, written by
// tests/aot/test_launch_plan_cases.py).
#include <gtest/gtest.h>

#include "generated/launch_plan_cases.hpp"
#include "launch_plan.hpp"

namespace {

using namespace rmsnorm::detail;

TEST(LaunchPlan, TheGridIsThePythonLaunchersForEveryLaunchOfTheTable) {
    for (const auto& c : launch_plan_cases::kGrid) {
        EXPECT_EQ(grid_of(c.rows, c.rows_per_program, c.programs_per_sm, c.sm_count), c.grid)
            << c.rows << " rows, " << c.rows_per_program << " a program, " << c.programs_per_sm
            << " programs per SM, " << c.sm_count << " SMs";
    }
}

TEST(LaunchPlan, ASingleRowGetsStrideNAndOtherRowsTheirOwn) {
    for (const auto& c : launch_plan_cases::kStride) {
        EXPECT_EQ(kernel_row_stride(c.stride, c.rows, c.n), c.kernel_stride)
            << c.rows << " rows of " << c.n << ", stride " << c.stride;
    }
}

TEST(LaunchPlan, TheDwReductionTakesThePythonLaunchersColumnBlocks) {
    for (const auto& c : launch_plan_cases::kReduce) {
        EXPECT_EQ(reduce_block(c.n), c.block) << "n " << c.n;
        EXPECT_EQ(reduce_grid(c.n), c.grid) << "n " << c.n;
    }
}

}  // namespace
