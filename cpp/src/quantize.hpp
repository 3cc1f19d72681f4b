// The quantizers of the quantized forward on the CPU: vLLM's arithmetic mode by mode, in fp32
// with IEEE operations (rmsnorm.h, "The quantized forward"; rmsnorm.launch.quant_contract is
// the same in PyTorch ops), and the fp8 conversions they end with. The CPU reference runs them
// on its own y; the GPU tests run them on the GPU's y, whose sums may differ by their order.
#pragma once

#include <cstdint>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm::detail {

// The format's largest finite value: 448 (e4m3), 57344 (e5m2), 127 (int8).
float quant_max(rmsnorm_quant_format format);

// v in an fp8 format (e4m3fn or e5m2), rounded to nearest even on the bits. v must be NaN
// (the format's NaN, sign kept) or finite with |v| <= quant_max(format): the quantizers
// saturate first, so no rule for larger values is needed.
uint8_t float_to_fp8(float v, rmsnorm_quant_format format);
// An fp8 value (e4m3fn or e5m2) exactly, as a float.
float fp8_to_float(uint8_t bits, rmsnorm_quant_format format);

// What quantizes a row: the mode, the format, and the mode's parameters.
struct Quantizer {
    rmsnorm_quant_format format = RMSNORM_QUANT_FP8_E4M3;
    rmsnorm_scale_mode mode = RMSNORM_SCALE_STATIC;
    int64_t group_size = 0;     // per-group
    float static_scale = 1.0f;  // static: the dequantization scale
    bool has_ub = false;  // dynamic fp8 (per group with vllm_fused): amax is bounded by ub
    float ub = 0.0f;
    bool ue8m0 = false;  // per-group: scales rounded up to powers of two
    // The dynamic modes' formulas of vLLM's fused norm-quant kernels (RMSNORM_QUANTIZER_VLLM_FUSED).
    bool vllm_fused = false;
};

// One row of y (n values, each exact in y's dtype) quantized: out gets n bytes (int8_t, or
// fp8 bits); scales (dynamic modes) the row's scale, or its n / group_size group scales in
// order; static mode writes no scale.
void quantize_row(const Quantizer& q, const float* y, int64_t n, uint8_t* out, float* scales);

}  // namespace rmsnorm::detail
