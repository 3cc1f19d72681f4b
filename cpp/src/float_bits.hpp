// A float's bits and back, for the conversions and quantizers that round on the bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace rmsnorm::detail {

inline uint32_t bits_of(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

inline float float_of(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

}  // namespace rmsnorm::detail
