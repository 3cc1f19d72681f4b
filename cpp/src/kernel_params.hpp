// A kernel's parameter block, filled argument by argument through the generated ABI
// (generated/kernel_abi.hpp, from the kernels' own argument lists): which slot an argument
// takes, its kind, the parameters Triton appends and which arguments an alignment class
// assumes aligned all come from there, so this runtime holds no copy of them. Pointers are
// device addresses (CUdeviceptr's value), so that the CPU tests need no cuda.h.
#pragma once

#include <array>
#include <cstdint>

#include "generated/kernel_abi.hpp"

namespace rmsnorm::detail {

template <typename Arg, int Count, int Hidden>
class KernelParams {
 public:
    explicit KernelParams(const abi::ArgInfo (&info)[Count]) : info_(info) {
        for (int i = 0; i < Count; ++i) slots_[i] = &values_[i];
        // Triton's hidden parameters: NULL, since no kernel is built that needs scratch.
        for (int i = Count - Hidden; i < Count; ++i) set_[i] = true;
    }
    // slots_ points into the object itself.
    KernelParams(const KernelParams&) = delete;
    KernelParams& operator=(const KernelParams&) = delete;

    void pointer(Arg a, uint64_t value) { put(a, abi::ArgKind::kPointer).pointer = value; }
    void int32(Arg a, int32_t value) { put(a, abi::ArgKind::kInt32).int32 = value; }
    void float32(Arg a, float value) { put(a, abi::ArgKind::kFloat32).float32 = value; }

    // The most the arguments let a kernel assume (what Triton's JIT specialises on too):
    // kAlignPointers when every pointer that class names is 16-byte aligned, kAlignVec when
    // also every int that class names is a multiple of 16.
    uint32_t alignment() const {
        for (int i = 0; i < Count; ++i)
            if (info_[i].aligned_from == abi::kAlignPointers && values_[i].pointer % 16 != 0)
                return abi::kAlignNone;
        for (int i = 0; i < Count; ++i)
            if (info_[i].aligned_from == abi::kAlignVec && values_[i].int32 % 16 != 0)
                return abi::kAlignPointers;
        return abi::kAlignVec;
    }

    // The name of the first argument that keeps alignment() below kAlignVec, or nullptr.
    const char* unaligned() const {
        for (int i = 0; i < Count; ++i) {
            const bool pointer = info_[i].aligned_from == abi::kAlignPointers;
            const bool integer = info_[i].aligned_from == abi::kAlignVec;
            if ((pointer && values_[i].pointer % 16 != 0) ||
                (integer && values_[i].int32 % 16 != 0))
                return info_[i].name;
        }
        return nullptr;
    }

    // The argument array for cuLaunchKernel, or nullptr when an argument was left unset or
    // set as another kind (missing() names it): a runtime that disagrees with the ABI.
    void** slots() {
        for (int i = 0; i < Count; ++i)
            if (!set_[i] || mistyped_[i]) return nullptr;
        return slots_.data();
    }
    const char* missing() const {
        for (int i = 0; i < Count; ++i)
            if (!set_[i] || mistyped_[i]) return info_[i].name;
        return nullptr;
    }

 private:
    // The driver reads each parameter's own size from the start of its slot.
    union Value {
        uint64_t pointer;
        int32_t int32;
        float float32;
    };

    Value& put(Arg a, abi::ArgKind kind) {
        const int i = static_cast<int>(a);
        set_[i] = true;
        mistyped_[i] = info_[i].kind != kind;
        values_[i].pointer = 0;
        return values_[i];
    }

    const abi::ArgInfo (&info_)[Count];
    std::array<Value, Count> values_{};
    std::array<bool, Count> set_{};
    std::array<bool, Count> mistyped_{};
    std::array<void*, Count> slots_{};
};

struct ForwardParams
    : KernelParams<abi::ForwardArg, abi::kForwardArgCount, abi::kForwardHiddenArgs> {
    ForwardParams() : KernelParams(abi::kForwardArgs) {}
};
struct BackwardParams
    : KernelParams<abi::BackwardArg, abi::kBackwardArgCount, abi::kBackwardHiddenArgs> {
    BackwardParams() : KernelParams(abi::kBackwardArgs) {}
};
struct QuantForwardParams
    : KernelParams<abi::QuantForwardArg, abi::kQuantForwardArgCount, abi::kQuantForwardHiddenArgs> {
    QuantForwardParams() : KernelParams(abi::kQuantForwardArgs) {}
};
struct ReduceParams : KernelParams<abi::ReduceArg, abi::kReduceArgCount, abi::kReduceHiddenArgs> {
    ReduceParams() : KernelParams(abi::kReduceArgs) {}
};

}  // namespace rmsnorm::detail
