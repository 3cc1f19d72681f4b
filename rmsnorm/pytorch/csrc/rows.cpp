#include "rows.hpp"

#include <cmath>
#include <utility>

namespace rmsnorm_torch {

std::optional<rmsnorm_dtype> dtype_of(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kFloat:
            return RMSNORM_F32;
        case at::kHalf:
            return RMSNORM_F16;
        case at::kBFloat16:
            return RMSNORM_BF16;
        default:
            return std::nullopt;
    }
}

std::optional<int64_t> row_stride(const at::Tensor& t) {
    const int64_t d = t.dim();
    if (d == 0 || (t.size(d - 1) != 1 && t.stride(d - 1) != 1)) return std::nullopt;
    std::optional<int64_t> stride, expected;
    for (int64_t i = d - 2; i >= 0; --i) {
        if (t.size(i) == 1) continue;  // its stride is never used
        if (!stride) {
            stride = expected = t.stride(i);
        } else if (t.stride(i) != *expected) {
            return std::nullopt;
        }
        *expected *= t.size(i);
    }
    return stride.value_or(0);
}

bool plain(const at::Tensor& t) {
    return !t.key_set().has(c10::DispatchKey::Python) && t.layout() == at::kStrided &&
           !t.is_nested() && !t.is_neg();
}

bool ranges_meet(const at::Tensor& a, const at::Tensor& b) {
    const auto span = [](const at::Tensor& t) {
        int64_t last = 0;
        for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
        const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
        return std::pair<uintptr_t, uintptr_t>{
            start, start + static_cast<uintptr_t>((last + 1) * t.element_size())};
    };
    if (a.numel() == 0 || b.numel() == 0) return false;
    const auto [a0, a1] = span(a);
    const auto [b0, b1] = span(b);
    return a0 < b1 && b0 < a1;
}

bool same_view(const at::Tensor& a, const at::Tensor& b) {
    return a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
           a.scalar_type() == b.scalar_type();
}

bool writable(const at::Tensor& t) {
    const auto stride = row_stride(t);
    const int64_t n = t.size(-1);
    return stride && (t.numel() == n || *stride >= n);
}

bool scalars_valid(double eps, double offset, bool has_weight) {
    // The least magnitude that rounds to infinity in fp32 (validation.FP32_OVERFLOW).
    constexpr double kOverflow = 340282356779733661637539395458142568448.0;
    const auto finite = [](double v) { return std::isfinite(v) && std::fabs(v) < kOverflow; };
    return finite(eps) && eps >= 0 && finite(offset) && (offset == 0 || has_weight);
}

std::optional<rmsnorm_casting_mode> casting_mode_of(c10::string_view casting_mode) {
    if (casting_mode == "llama") return RMSNORM_LLAMA;
    if (casting_mode == "gemma") return RMSNORM_GEMMA;
    return std::nullopt;
}

std::optional<rmsnorm_normalized_sum> normalized_sum_of(c10::string_view normalized_sum) {
    if (normalized_sum == "rounded") return RMSNORM_SUM_ROUNDED;
    if (normalized_sum == "fp32") return RMSNORM_SUM_FP32;
    return std::nullopt;
}

std::optional<rmsnorm_quantizer> quantizer_of(c10::string_view quantizer) {
    if (quantizer == "vllm") return RMSNORM_QUANTIZER_VLLM;
    if (quantizer == "vllm_fused") return RMSNORM_QUANTIZER_VLLM_FUSED;
    return std::nullopt;
}

}  // namespace rmsnorm_torch
