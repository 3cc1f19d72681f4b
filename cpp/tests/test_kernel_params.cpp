// A kernel's parameter block (src/kernel_params.hpp) over the generated ABI: every argument
// has one slot of its kind, Triton's hidden ones are NULL, and the alignment class is the most
// the arguments allow.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <tuple>

#include "kernel_params.hpp"

namespace {

using rmsnorm::detail::ReduceParams;
using A = rmsnorm::detail::abi::ReduceArg;
namespace abi = rmsnorm::detail::abi;

void fill(ReduceParams& p, uint64_t dwp, uint64_t dw, int32_t n) {
    p.pointer(A::kDwp, dwp);
    p.pointer(A::kDw, dw);
    p.int32(A::kP, 132);
    p.int32(A::kN, n);
}

TEST(KernelParams, EachArgumentLandsInItsKernelsSlotAndTheHiddenOnesAreNull) {
    ReduceParams p;
    fill(p, 0x1000, 0x2000, 4096);
    void** slots = p.slots();
    ASSERT_NE(slots, nullptr);
    uint64_t dwp = 0, dw = 0, hidden = 1;
    int32_t partial_rows = 0, n = 0;
    std::memcpy(&dwp, slots[static_cast<int>(A::kDwp)], sizeof dwp);
    std::memcpy(&dw, slots[static_cast<int>(A::kDw)], sizeof dw);
    std::memcpy(&partial_rows, slots[static_cast<int>(A::kP)], sizeof partial_rows);
    std::memcpy(&n, slots[static_cast<int>(A::kN)], sizeof n);
    EXPECT_EQ(dwp, 0x1000u);
    EXPECT_EQ(dw, 0x2000u);
    EXPECT_EQ(partial_rows, 132);
    EXPECT_EQ(n, 4096);
    for (int i = abi::kReduceArgCount - abi::kReduceHiddenArgs; i < abi::kReduceArgCount; ++i) {
        std::memcpy(&hidden, slots[i], sizeof hidden);
        EXPECT_EQ(hidden, 0u) << abi::kReduceArgs[i].name;
    }
}

TEST(KernelParams, AnArgumentLeftUnsetIsNamedAndNoLaunchArrayIsGiven) {
    ReduceParams p;
    p.pointer(A::kDwp, 0x1000);
    p.pointer(A::kDw, 0x2000);
    p.int32(A::kP, 1);
    EXPECT_EQ(p.slots(), nullptr);
    EXPECT_STREQ(p.missing(), "N");
}

TEST(KernelParams, AnArgumentSetAsAnotherKindIsNamed) {
    ReduceParams p;
    fill(p, 0x1000, 0x2000, 4096);
    p.float32(A::kN, 4096.0f);
    EXPECT_EQ(p.slots(), nullptr);
    EXPECT_STREQ(p.missing(), "N");
}

TEST(KernelParams, TheAlignmentClassIsTheMostTheArgumentsAllow) {
    for (const auto& [dwp, n, want] : {std::tuple{uint64_t{0x1000}, 4096, abi::kAlignVec},
                                       std::tuple{uint64_t{0x1000}, 4095, abi::kAlignPointers},
                                       std::tuple{uint64_t{0x1008}, 4096, abi::kAlignNone},
                                       std::tuple{uint64_t{0x1008}, 4095, abi::kAlignNone}}) {
        ReduceParams p;
        fill(p, dwp, 0x2000, n);
        EXPECT_EQ(p.alignment(), want) << std::hex << dwp << std::dec << " n " << n;
    }
}

TEST(KernelParams, TheRowCountOfTheReductionDecidesNoAlignment) {
    // Only what the AOT build specialises on counts: P is never assumed a multiple of 16.
    ReduceParams p;
    fill(p, 0x1000, 0x2000, 4096);
    p.int32(A::kP, 7);
    EXPECT_EQ(p.alignment(), abi::kAlignVec);
}

}  // namespace
