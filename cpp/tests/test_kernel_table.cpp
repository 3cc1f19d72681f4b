// The launch table's width rules as the runtime applies them (rmsnorm.configs.rule_index):
// a row serves the widths up to its bound, the last row every longer width.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernel_table.hpp"

namespace {

using rmsnorm::detail::Op;
using rmsnorm::detail::WidthRules;

WidthRules three_rows() {
    WidthRules r{};
    for (auto& op : r.count)
        for (int& c : op) c = 1;
    for (auto& op : r.max_n)
        for (auto& dtype : op) dtype[0] = INT64_MAX;
    // The fused add in bf16: tiles up to 768 and 1024, then the loop.
    r.count[1][2] = 3;
    r.max_n[1][2][0] = 768;
    r.max_n[1][2][1] = 1024;
    r.max_n[1][2][2] = INT64_MAX;
    return r;
}

TEST(WidthRules, AWidthTakesTheFirstRowWhoseBoundHoldsIt) {
    const WidthRules r = three_rows();
    EXPECT_EQ(r.row_for(Op::kAdd, 2, 1), 0u);
    EXPECT_EQ(r.row_for(Op::kAdd, 2, 768), 0u);
    EXPECT_EQ(r.row_for(Op::kAdd, 2, 769), 1u);
    EXPECT_EQ(r.row_for(Op::kAdd, 2, 1024), 1u);
    EXPECT_EQ(r.row_for(Op::kAdd, 2, 1025), 2u);
    EXPECT_EQ(r.row_for(Op::kAdd, 2, INT32_MAX), 2u);
}

TEST(WidthRules, OtherOpsAndDtypesKeepTheirOwnRows) {
    const WidthRules r = three_rows();
    EXPECT_EQ(r.row_for(Op::kForward, 2, 100000), 0u);
    EXPECT_EQ(r.row_for(Op::kAdd, 0, 1025), 0u);
    EXPECT_EQ(r.row_for(Op::kBackward, 1, 16), 0u);
}

TEST(KernelKey, TheRowIndexIsPackedAboveTheFlags) {
    rmsnorm::detail::KernelKey a{Op::kBackward, 2}, b = a;
    b.variant = 1;
    EXPECT_EQ(b.packed() - a.packed(), 1u << 10);  // rmsnorm/aot.py's Spec.key
}

}  // namespace
