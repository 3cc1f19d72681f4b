#include "quantize.hpp"

#include <cmath>

#include "float_bits.hpp"

namespace rmsnorm::detail {
namespace {

// An fp8 format's layout: mantissa bits and exponent bias.
struct Fp8 {
    int mantissa, bias;
};

Fp8 fp8_of(rmsnorm_quant_format format) {
    return format == RMSNORM_QUANT_FP8_E5M2 ? Fp8{2, 15} : Fp8{3, 7};
}

// To nearest, ties to even, for |v| <= 128 (int8's range after saturation): floor and the
// fraction are exact there, so no rounding mode of the machine's is involved.
float round_half_even(float v) {
    const float down = std::floor(v), fraction = v - down;
    if (fraction > 0.5f || (fraction == 0.5f && std::fmod(down, 2.0f) != 0.0f)) return down + 1;
    return down;
}

// max |y| over n values from 0, NaNs skipped (a NaN compares false), as fmaxf does.
float abs_max(const float* y, int64_t n) {
    float m = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        const float a = std::fabs(y[j]);
        if (a > m) m = a;
    }
    return m;
}

float max_of(float a, float b) { return a > b ? a : b; }

// A power of two at or above s (positive, finite or infinite): the exponent bumped where any
// mantissa bit is set, on the bits, so that it is exact.
float ue8m0_round_up(float s) {
    const uint32_t bits = bits_of(s);
    return (bits & 0x7fffffu) != 0 ? float_of((bits & 0x7f800000u) + 0x800000u) : s;
}

}  // namespace

float quant_max(rmsnorm_quant_format format) {
    switch (format) {
        case RMSNORM_QUANT_FP8_E4M3:
            return 448.0f;
        case RMSNORM_QUANT_INT8:
            return 127.0f;
        case RMSNORM_QUANT_FP8_E5M2:
            return 57344.0f;
    }
    return NAN;
}

uint8_t float_to_fp8(float v, rmsnorm_quant_format format) {
    const Fp8 f = fp8_of(format);
    const uint32_t bits = bits_of(v);
    const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
    if (magnitude == 0) return sign;
    const int exponent = static_cast<int>(magnitude >> 23) - 127;
    const int min_normal = 1 - f.bias;
    // Below half the smallest subnormal (2^(min_normal - mantissa)): zero; exactly half
    // rounds to even, zero too.
    if (exponent < min_normal - f.mantissa - 1) return sign;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;  // 24 bits, implicit 1
    // Bits to drop: 23 - mantissa for a normal result, more for a subnormal one (<= 24).
    const int shift = 23 - f.mantissa + (exponent < min_normal ? min_normal - exponent : 0);
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    if (exponent < min_normal) {
        // Subnormal: `rounded` is the mantissa field; a carry into the exponent field is the
        // smallest normal, which is what the bits then say.
        return static_cast<uint8_t>(sign | rounded);
    }
    // Normal: rounded holds the implicit bit; a carry past it bumps the exponent.
    auto biased = static_cast<uint32_t>(exponent + f.bias);
    if (rounded & (2u << f.mantissa)) {
        rounded >>= 1;
        ++biased;
    }
    const uint32_t field = rounded & ((1u << f.mantissa) - 1u);
    return static_cast<uint8_t>(sign | (biased << f.mantissa) | field);
}

float fp8_to_float(uint8_t bits, rmsnorm_quant_format format) {
    const Fp8 f = fp8_of(format);
    const float sign = (bits & 0x80u) != 0 ? -1.0f : 1.0f;
    const int exponent_bits = 7 - f.mantissa;
    const int exponent = (bits >> f.mantissa) & ((1 << exponent_bits) - 1);
    const int mantissa = bits & ((1 << f.mantissa) - 1);
    const int top = (1 << exponent_bits) - 1;
    if (format == RMSNORM_QUANT_FP8_E4M3 && exponent == top && mantissa == (1 << f.mantissa) - 1)
        return NAN;  // e4m3fn: S.1111.111 is its only NaN; no infinities
    if (format == RMSNORM_QUANT_FP8_E5M2 && exponent == top)
        return mantissa == 0 ? sign * INFINITY : NAN;
    if (exponent == 0)
        return sign * std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa);
    return sign * std::ldexp(static_cast<float>(mantissa + (1 << f.mantissa)),
                             exponent - f.bias - f.mantissa);
}

void quantize_row(const Quantizer& q, const float* y, int64_t n, uint8_t* out, float* scales) {
    const bool int8 = q.format == RMSNORM_QUANT_INT8;
    const float qmax = quant_max(q.format), qmin = int8 ? -128.0f : -qmax;
    // v saturated (a NaN to nan_out) and converted to nearest even.
    const auto store = [&](int64_t j, float v, float nan_out) {
        v = std::isnan(v) ? nan_out : v > qmax ? qmax : v < qmin ? qmin : v;
        if (int8) {
            out[j] = static_cast<uint8_t>(static_cast<int8_t>(round_half_even(v)));
        } else {
            out[j] = float_to_fp8(v, q.format);
        }
    };
    if (q.vllm_fused && q.mode != RMSNORM_SCALE_STATIC) {
        // One formula for rows and groups: s = max(min(amax, ub) / qmax, floor); fp8 rows
        // divide, everything else multiplies by 1 / s; a NaN goes where a row's does.
        const float floor = int8 ? 0x1p-23f : 1.0f / (qmax * 512.0f);
        const float nan_out = int8 ? 0.0f : qmax;
        const bool groups = q.mode == RMSNORM_SCALE_PER_GROUP;
        const int64_t size = groups ? q.group_size : n;
        for (int64_t g = 0; g * size < n; ++g) {
            const float* yg = y + g * size;
            float amax = abs_max(yg, size);
            if (q.has_ub && q.ub < amax) amax = q.ub;
            float s = max_of(amax / qmax, floor);
            if (q.ue8m0) s = ue8m0_round_up(s);
            scales[g] = s;
            const float inverse = 1.0f / s;
            for (int64_t j = 0; j < size; ++j) {
                store(g * size + j, !groups && !int8 ? yg[j] / s : yg[j] * inverse, nan_out);
            }
        }
        return;
    }
    switch (q.mode) {
        case RMSNORM_SCALE_STATIC: {
            // fp8 multiplies by the inverse, int8 divides: as vLLM's static kernels do.
            const float inverse = 1.0f / q.static_scale;
            for (int64_t j = 0; j < n; ++j) {
                if (int8) {
                    store(j, y[j] / q.static_scale, 0.0f);
                } else {
                    store(j, y[j] * inverse, qmax);
                }
            }
            return;
        }
        case RMSNORM_SCALE_PER_TOKEN: {
            float amax = abs_max(y, n);
            if (int8) {
                scales[0] = amax / 127.0f;
                const float inverse = amax == 0.0f ? 0.0f : 127.0f / amax;
                for (int64_t j = 0; j < n; ++j) store(j, y[j] * inverse, 0.0f);
                return;
            }
            if (q.has_ub && q.ub < amax) amax = q.ub;
            const float s = max_of(amax / qmax, 1.0f / (qmax * 512.0f));
            scales[0] = s;
            for (int64_t j = 0; j < n; ++j) store(j, y[j] / s, qmax);
            return;
        }
        case RMSNORM_SCALE_PER_GROUP: {
            for (int64_t g = 0; g * q.group_size < n; ++g) {
                const float* yg = y + g * q.group_size;
                float s = max_of(abs_max(yg, q.group_size), 1e-10f) / qmax;
                if (q.ue8m0) s = ue8m0_round_up(max_of(s, 1e-10f));
                scales[g] = s;
                for (int64_t j = 0; j < q.group_size; ++j) {
                    store(g * q.group_size + j, yg[j] / s, qmin);
                }
            }
            return;
        }
    }
}

}  // namespace rmsnorm::detail
