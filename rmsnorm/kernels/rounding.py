"""Rounding helpers shared by the kernels (device code only)."""

import triton
import triton.language as tl


@triton.jit
def round_to(v, DTYPE: tl.constexpr, SOFT_BF16: tl.constexpr):
    """Round fp32 `v` to DTYPE with round-to-nearest-even.

    Triton 3.6's interpreter truncates fp32 -> bf16 (both `.to` and stores), so under the
    interpreter (SOFT_BF16) bf16 rounding is done on the bits; on the GPU the native
    conversion already rounds to nearest even.
    """
    if SOFT_BF16 and DTYPE == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        # NaN payloads with all mantissa bits set would carry into the sign bit.
        bits = tl.where(v != v, 0x7FC00000, bits)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(DTYPE)
