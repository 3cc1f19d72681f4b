// The CPU reference: DESIGN.md's contract element by element, rounding exactly where the
// contract rounds, summing in fp32 (as the contract) or fp64 (a more exact reference).
#include <cmath>
#include <cstdint>
#include <vector>

#include "errors.hpp"
#include "quantize.hpp"
#include "rmsnorm/rmsnorm.h"
#include "validate.hpp"

namespace rmsnorm::detail {
namespace {

float load(const void* base, rmsnorm_dtype dtype, int64_t index) {
    switch (dtype) {
        case RMSNORM_F32:
            return static_cast<const float*>(base)[index];
        case RMSNORM_F16:
            return rmsnorm_f16_to_float(static_cast<const uint16_t*>(base)[index]);
        case RMSNORM_BF16:
            return rmsnorm_bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    }
    return NAN;
}

void store(void* base, rmsnorm_dtype dtype, int64_t index, float value) {
    switch (dtype) {
        case RMSNORM_F32:
            static_cast<float*>(base)[index] = value;
            return;
        case RMSNORM_F16:
            static_cast<uint16_t*>(base)[index] = rmsnorm_float_to_f16(value);
            return;
        case RMSNORM_BF16:
            static_cast<uint16_t*>(base)[index] = rmsnorm_float_to_bf16(value);
            return;
    }
}

// One rounding to dtype, back in float.
float round_to(rmsnorm_dtype dtype, float value) {
    switch (dtype) {
        case RMSNORM_F32:
            return value;
        case RMSNORM_F16:
            return rmsnorm_f16_to_float(rmsnorm_float_to_f16(value));
        case RMSNORM_BF16:
            return rmsnorm_bf16_to_float(rmsnorm_float_to_bf16(value));
    }
    return NAN;
}

// Element j of row i of a row set.
struct Row {
    const rmsnorm_rows& rows;
    int64_t i;
    float get(int64_t j) const { return load(rows.data, rows.dtype, i * rows.stride + j); }
    void set(int64_t j, float v) const { store(rows.data, rows.dtype, i * rows.stride + j, v); }
};

float weight_at(const void* weight, rmsnorm_dtype dtype, int64_t j, float offset) {
    return weight == nullptr ? 1.0f : load(weight, dtype, j) + offset;
}

// 1 / rms of values the caller sums: sum of squares in Acc, then rsqrt in fp32 (fp32 sum) or
// fp64 (fp64 sum) as the contract's rsqrt(sum / n + eps).
template <typename Acc>
float inv_rms(Acc sum_sq, int64_t n, float eps) {
    const Acc mean = sum_sq / static_cast<Acc>(n) + static_cast<Acc>(eps);
    return static_cast<float>(Acc(1) / std::sqrt(mean));
}

// Each row's y, the contract's, rounded to y.dtype (a.y.data is not used), goes to
// sink(row, y values); the fused add's sum is written to residual_out, rstd where asked.
// What is normalized: x, or the fused add's sum as written (rounded to the residual's dtype)
// or, with RMSNORM_SUM_FP32, before that rounding; llama rounds x * r to that input's dtype
// (the residual's) either way.
template <typename Acc, typename Sink>
void forward_rows(const rmsnorm_forward_args& a, Sink&& sink) {
    const bool fused = a.residual.data != nullptr;
    const bool fp32_sum = fused && a.normalized_sum == RMSNORM_SUM_FP32;
    const rmsnorm_dtype input_dtype = fused ? a.residual_out.dtype : a.x.dtype;
    std::vector<float> y(static_cast<size_t>(a.n)), in(static_cast<size_t>(a.n));
    for (int64_t i = 0; i < a.rows; ++i) {
        const Row x{a.x, i};
        Acc sum_sq = 0;
        for (int64_t j = 0; j < a.n; ++j) {
            float v = x.get(j);
            if (fused) {
                // Read the residual before writing the sum: residual_out may be residual.
                const float sum = v + Row{a.residual, i}.get(j);
                v = round_to(a.residual.dtype, sum);
                Row{a.residual_out, i}.set(j, v);
                if (fp32_sum) v = sum;
            }
            in[static_cast<size_t>(j)] = v;
            sum_sq += static_cast<Acc>(v) * static_cast<Acc>(v);
        }
        const float r = inv_rms(sum_sq, a.n, a.eps);
        if (a.rstd != nullptr) a.rstd[i] = r;
        for (int64_t j = 0; j < a.n; ++j) {
            const float v = in[static_cast<size_t>(j)];
            float out;
            if (a.weight == nullptr) {
                out = v * r;
            } else if (a.casting_mode == RMSNORM_LLAMA) {
                out =
                    round_to(input_dtype, v * r) * weight_at(a.weight, a.weight_dtype, j, a.offset);
            } else {
                out = v * r * weight_at(a.weight, a.weight_dtype, j, a.offset);
            }
            y[static_cast<size_t>(j)] = round_to(a.y.dtype, out);
        }
        sink(i, y.data());
    }
}

// The forward: y stored (rounded already: storing it again rounds nothing). Every element of
// a row is read before y is written: y may be x.
template <typename Acc>
void forward_rows(const rmsnorm_forward_args& a) {
    forward_rows<Acc>(a, [&a](int64_t i, const float* y) {
        const Row row{a.y, i};
        for (int64_t j = 0; j < a.n; ++j) row.set(j, y[j]);
    });
}

template <typename Acc>
void forward_quant_rows(const QuantArgs& qa) {
    const rmsnorm_quant_args& q = qa.quant;
    const rmsnorm_forward_args& a = qa.forward;
    Quantizer quantizer;
    quantizer.format = q.format;
    quantizer.mode = q.scale_mode;
    quantizer.group_size = q.group_size;
    if (a.rows > 0 && q.scale_mode == RMSNORM_SCALE_STATIC) quantizer.static_scale = *q.scales;
    quantizer.has_ub = q.scale_ub != nullptr;
    if (quantizer.has_ub && a.rows > 0) quantizer.ub = *q.scale_ub;
    quantizer.ue8m0 = q.ue8m0 != 0;
    quantizer.vllm_fused = q.quantizer == RMSNORM_QUANTIZER_VLLM_FUSED;
    std::vector<float> scales(static_cast<size_t>(qa.groups));
    forward_rows<Acc>(a, [&](int64_t i, const float* y) {
        if (a.y.data != nullptr) {
            const Row row{a.y, i};
            for (int64_t j = 0; j < a.n; ++j) row.set(j, y[j]);
        }
        quantize_row(quantizer, y, a.n, static_cast<uint8_t*>(q.out) + i * q.out_stride,
                     scales.data());
        if (q.scale_mode == RMSNORM_SCALE_STATIC) return;
        for (int64_t g = 0; g < qa.groups; ++g) {
            q.scales[i * q.scale_row_stride + g * q.scale_group_stride] =
                scales[static_cast<size_t>(g)];
        }
    });
}

template <typename Acc>
void backward_rows(const rmsnorm_backward_args& a) {
    const bool want_dw = a.dw != nullptr;
    std::vector<Acc> dw(want_dw ? static_cast<size_t>(a.n) : 0, Acc(0));
    for (int64_t i = 0; i < a.rows; ++i) {
        const Row dy{a.dy, i}, x{a.x, i}, dx{a.dx, i};
        const Acc r = a.rstd[i];
        Acc sum_gx = 0;
        for (int64_t j = 0; j < a.n; ++j) {
            const Acc g = Acc(dy.get(j)) * Acc(weight_at(a.weight, a.weight_dtype, j, a.offset));
            sum_gx += g * (Acc(x.get(j)) * r);
        }
        const Acc mean_gx = sum_gx / static_cast<Acc>(a.n);
        for (int64_t j = 0; j < a.n; ++j) {
            // Read everything of element j before writing dx: dx may be dy.
            const Acc g_dy = Acc(dy.get(j));
            const Acc xhat = Acc(x.get(j)) * r;
            const Acc g = g_dy * Acc(weight_at(a.weight, a.weight_dtype, j, a.offset));
            Acc d = r * (g - xhat * mean_gx);
            if (a.dresidual.data != nullptr) d += Acc(Row{a.dresidual, i}.get(j));
            if (want_dw) {
                const Acc seen = a.casting_mode == RMSNORM_LLAMA
                                     ? Acc(round_to(a.x.dtype, static_cast<float>(xhat)))
                                     : xhat;
                dw[static_cast<size_t>(j)] += g_dy * seen;
            }
            dx.set(j, static_cast<float>(d));
        }
    }
    for (int64_t j = 0; j < (want_dw ? a.n : 0); ++j) {
        store(a.dw, a.weight_dtype, j, static_cast<float>(dw[static_cast<size_t>(j)]));
    }
}

}  // namespace
}  // namespace rmsnorm::detail

extern "C" {

rmsnorm_status rmsnorm_cpu_forward(const rmsnorm_forward_args* args) {
    using namespace rmsnorm::detail;
    rmsnorm_forward_args a;
    const rmsnorm_status status = validate(args, &a);
    if (status != RMSNORM_SUCCESS) return status;
    if (a.accumulation == RMSNORM_ACCUMULATE_F64) {
        forward_rows<double>(a);
    } else {
        forward_rows<float>(a);
    }
    return succeed();
}

rmsnorm_status rmsnorm_cpu_forward_quant(const rmsnorm_quant_args* args) {
    using namespace rmsnorm::detail;
    QuantArgs a;
    const rmsnorm_status status = validate(args, &a);
    if (status != RMSNORM_SUCCESS) return status;
    if (a.forward.accumulation == RMSNORM_ACCUMULATE_F64) {
        forward_quant_rows<double>(a);
    } else {
        forward_quant_rows<float>(a);
    }
    return succeed();
}

rmsnorm_status rmsnorm_cpu_backward(const rmsnorm_backward_args* args) {
    using namespace rmsnorm::detail;
    rmsnorm_backward_args a;
    const rmsnorm_status status = validate(args, &a);
    if (status != RMSNORM_SUCCESS) return status;
    if (a.accumulation == RMSNORM_ACCUMULATE_F64) {
        backward_rows<double>(a);
    } else {
        backward_rows<float>(a);
    }
    return succeed();
}

}  // extern "C"
