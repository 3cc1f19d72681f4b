// How a launch covers its rows, as the Python launcher plans it: the persistent grid
// (rmsnorm.launch.configs.Launch.grid), the row stride a kernel gets
// (rmsnorm.launch.specs.strides_of over rmsnorm.launch.layout.plan_rows, one level of strides here)
// and the dw reduction's column blocks (rmsnorm.launch.configs.reduce_launch, generated into
// kernel_abi.hpp). The rules are code on both sides; test_launch_plan.cpp checks this side against
// cases the Python functions computed (cpp/tests/generated/launch_plan_cases.hpp,
// tests/aot/test_launch_plan_cases.py).
#pragma once

#include <algorithm>
#include <cstdint>

#include "generated/kernel_abi.hpp"

namespace rmsnorm::detail {

// Programs for `rows` rows: one per row block of rows_per_program, at most programs_per_sm
// per multiprocessor (they loop over the rest), at least one.
inline int64_t grid_of(int64_t rows, int rows_per_program, int programs_per_sm, int sm_count) {
    const int64_t work = (rows + rows_per_program - 1) / rows_per_program;
    const int64_t cap = static_cast<int64_t>(sm_count) * programs_per_sm;
    return std::max<int64_t>(1, std::min(work, cap));
}

// The row stride a kernel gets for a tensor of `rows` rows of n elements: a single row's is
// never used, and it gets n (the kernels are specialised on a stride's divisibility by 16, so
// both paths must pass the same).
inline int64_t kernel_row_stride(int64_t stride, int64_t rows, int64_t n) {
    return rows == 1 ? n : stride;
}

// Columns per program of the dw reduction over rows of n partials, and its programs.
inline int reduce_block(int64_t n) {
    int log2n = 0;
    while ((int64_t{1} << log2n) < n) ++log2n;
    return abi::kReduceBlock[log2n];
}
inline int64_t reduce_grid(int64_t n) {
    const int block = reduce_block(n);
    return (n + block - 1) / block;
}

}  // namespace rmsnorm::detail
