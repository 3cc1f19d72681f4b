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


@triton.jit
def round_pairs(v, DTYPE: tl.constexpr, SOFT_BF16: tl.constexpr, PAIRS: tl.constexpr):
    """round_to; with PAIRS (the GPU, fp32 to bf16) two values to one conversion
    (cvt.rn.bf16x2.f32, the same rounding), where the compiler converts a value at a time
    unless the pair is stored as converted."""
    if PAIRS and DTYPE == tl.bfloat16 and v.dtype == tl.float32:
        return tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [v],
                                         dtype=tl.bfloat16, is_pure=True, pack=2)
    else:
        return round_to(v, DTYPE, SOFT_BF16)


@triton.jit
def widen(v, ACC: tl.constexpr, PAIRS: tl.constexpr):
    """v in ACC (exact); with PAIRS (the GPU, bf16 to fp32) two values to a register, one
    instruction each (a shift, a mask), where the compiler spends three on a pair's upper
    half (extract, then shift)."""
    if PAIRS and v.dtype == tl.bfloat16 and ACC == tl.float32:
        return tl.inline_asm_elementwise("{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }",
                                         "=r,=r,r", [v], dtype=tl.float32, is_pure=True, pack=2)
    else:
        return v.to(ACC)
