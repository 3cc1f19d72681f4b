// The launch table's width rules as the runtime applies them (rmsnorm.launch.configs.rule_index):
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

TEST(KernelKey, EachFieldIsPackedAtItsGeneratedShift) {
    namespace abi = rmsnorm::detail::abi;
    const rmsnorm::detail::KernelKey base{Op::kForward, 0, false, false, false, false, 0, 0};
    EXPECT_EQ(base.packed(), 0u);
    // tests/aot/test_aot_abi.py checks the shifts against rmsnorm/aot/build.py's Spec.key.
    auto key = base;
    key.op = Op::kBackward;
    EXPECT_EQ(key.packed(), 2u << abi::kOpShift);
    key = base;
    key.dtype = 2;
    EXPECT_EQ(key.packed(), 2u << abi::kDtypeShift);
    key = base;
    key.has_w = true;
    EXPECT_EQ(key.packed(), 1u << abi::kHasWShift);
    key = base;
    key.llama = true;
    EXPECT_EQ(key.packed(), 1u << abi::kLlamaShift);
    key = base;
    key.has_dresidual = true;
    EXPECT_EQ(key.packed(), 1u << abi::kHasDresidualShift);
    key = base;
    key.has_dw = true;
    EXPECT_EQ(key.packed(), 1u << abi::kHasDwShift);
    key = base;
    key.align = abi::kAlignVec;
    EXPECT_EQ(key.packed(), abi::kAlignVec << abi::kAlignShift);
    key = base;
    key.quant = abi::kQuantGroup;
    EXPECT_EQ(key.packed(), abi::kQuantGroup << abi::kQuantShift);
    key = base;
    key.qformat = abi::kQFormatInt8;
    EXPECT_EQ(key.packed(), abi::kQFormatInt8 << abi::kQformatShift);
    key = base;
    key.group = 2;
    EXPECT_EQ(key.packed(), 2u << abi::kGroupShift);
    key = base;
    key.fp32_sum = true;
    EXPECT_EQ(key.packed(), 1u << abi::kFp32SumShift);
    key = base;
    key.vllm_fused = true;
    EXPECT_EQ(key.packed(), 1u << abi::kVllmFusedShift);
    key = base;
    key.variant = 5;
    EXPECT_EQ(key.packed(), 5u << abi::kVariantShift);
    // The widest of every field together stays in its bits.
    key = rmsnorm::detail::KernelKey{Op::kReduce, 3, true, true, true, true, 0, 3};
    key.quant = key.qformat = key.group = 3;
    key.fp32_sum = key.vllm_fused = true;
    key.variant = (1u << abi::kVariantBits) - 1;
    EXPECT_EQ(key.packed(), 0xFFFFFFFFu);
}

}  // namespace
