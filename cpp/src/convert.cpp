// Float <-> bf16 / f16 conversions with round-to-nearest-even, on the bits (no compiler or
// hardware support for the 16-bit types is assumed).
#include <cstdint>

#include "float_bits.hpp"
#include "rmsnorm/rmsnorm.h"

using rmsnorm::detail::bits_of;
using rmsnorm::detail::float_of;

extern "C" {

uint16_t rmsnorm_float_to_bf16(float value) {
    uint32_t bits = bits_of(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // a quiet NaN, sign kept
    }
    // Adding 0x7fff plus the lowest kept bit rounds ties to even; a carry into the exponent
    // is the correct rounding up (to infinity past the largest finite value).
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

float rmsnorm_bf16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t rmsnorm_float_to_f16(float value) {
    const uint32_t bits = bits_of(value);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) {
        return static_cast<uint16_t>(sign | 0x7e00u);  // quiet NaN
    }
    if (magnitude >= 0x477ff000u) {
        // 65520 and up round to infinity (65504 is the largest f16; the tie goes up).
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    const int exponent = static_cast<int>(magnitude >> 23) - 127;
    if (exponent < -25) {
        return sign;  // below half the smallest subnormal (2^-25 rounds to even: zero)
    }
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;  // 24 bits with the implicit 1
    // Bits to drop: 13 for normal results; more for subnormal ones (exponent < -14).
    const int shift = exponent < -14 ? 13 + (-14 - exponent) : 13;
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    if (exponent < -14) {
        // Subnormal: `rounded` is the 10-bit mantissa; a carry to 0x400 is the smallest normal.
        return static_cast<uint16_t>(sign | rounded);
    }
    // Normal: rounded holds the implicit bit at 0x400; a carry to 0x800 bumps the exponent.
    uint32_t biased = static_cast<uint32_t>(exponent + 15);
    if (rounded & 0x800u) {
        rounded >>= 1;
        ++biased;
    }
    return static_cast<uint16_t>(sign | (biased << 10) | (rounded & 0x3ffu));
}

float rmsnorm_f16_to_float(uint16_t bits) {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0x1fu) {
        return float_of(sign | 0x7f800000u | (mantissa << 13));  // inf or NaN
    }
    if (exponent != 0) {
        return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    }
    if (mantissa == 0) {
        return float_of(sign);
    }
    // Subnormal: normalize into a float's exponent.
    int e = -14;
    while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        --e;
    }
    return float_of(sign | (static_cast<uint32_t>(e + 127) << 23) | ((mantissa & 0x3ffu) << 13));
}

}  // extern "C"
