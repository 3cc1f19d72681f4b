"""The forward's quantized epilogue (device code only): the norm's output y, rounded to its own
dtype as rms_norm returns it, quantized to fp8 (e4m3fn, e5m2) or int8 for the next GEMM.

Modes (QUANT): STATIC, one dequantization scale given; TOKEN, one scale per row from the
row's max |y|; GROUP, one scale per row and GROUP_SIZE columns. Each mode computes what vLLM's
quantizer of that mode computes, operation by operation in fp32 (docs/USAGE.md, "Quantized
output", lists them; rmsnorm.reference.quantize is the same arithmetic in PyTorch ops):
divisions are correctly rounded (`div_rn` per row or group, and `divide` per element:
Triton's `/` is an approximate division on the GPU), a NaN is left out of the max (as fmaxf
does) and quantizes to what vLLM's clamp makes of it.
"""

import triton
import triton.language as tl

NONE: tl.constexpr = 0
STATIC: tl.constexpr = 1
TOKEN: tl.constexpr = 2
GROUP: tl.constexpr = 3
# The same codes for this module's jit functions: the compiler takes a global there only as a
# tl.constexpr instance (the annotated ints above are plain ints at run time, which the
# interpreter alone accepts); the launcher keeps the ints.
_STATIC = tl.constexpr(STATIC)
_TOKEN = tl.constexpr(TOKEN)
_GROUP = tl.constexpr(GROUP)


@triton.jit
def quant_max(Q_DTYPE: tl.constexpr):
    """The format's largest finite value (int8: 127; -128 is reached only by saturation)."""
    if Q_DTYPE == tl.int8:
        return 127.0
    elif Q_DTYPE == tl.float8e5:
        return 57344.0
    else:
        return 448.0


@triton.jit
def abs_for_max(y, SOFT: tl.constexpr):
    """|y| for a max that starts at 0 and skips NaNs. The GPU's max reductions drop NaNs (as
    fmaxf does); the interpreter's (SOFT) keep them, so there they are mapped to 0 first,
    found in fp32: the interpreter holds bf16 as its bits, and compares the bits (a NaN
    equals itself)."""
    if SOFT:
        yf = y.to(tl.float32)
        return tl.where(yf != yf, 0.0, tl.abs(y))
    else:
        return tl.abs(y)


@triton.jit
def bounded(amax, SCALE_UB, has_ub, SOFT: tl.constexpr):
    """min(amax, scale_ub) where has_ub (scale_ub read once), else amax; a NaN bound bounds
    nothing, as vLLM's fminf takes it."""
    ub = tl.load(SCALE_UB, mask=has_ub != 0, other=float("inf"))
    if SOFT:
        # The GPU's min.f32 returns the number of a (number, NaN) pair; numpy's minimum,
        # the interpreter's, the NaN.
        ub = tl.where(ub != ub, float("inf"), ub)
    return tl.minimum(amax, ub)


@triton.jit
def token_scale(amax, SCALE_UB, has_ub, Q_DTYPE: tl.constexpr, SOFT: tl.constexpr,
                FUSED: tl.constexpr = False):
    """A row's dequantization scale from its max |y|: min(amax, scale_ub) / qmax (bounded),
    floored at 1 / (qmax * 512) for fp8; int8 has neither (an all-zero row gets scale 0),
    except with FUSED (vLLM's fused norm-quant kernels), which floor it at FLT_EPSILON."""
    qmax = quant_max(Q_DTYPE)
    if Q_DTYPE != tl.int8:
        amax = bounded(amax, SCALE_UB, has_ub, SOFT)
    s = tl.math.div_rn(amax, qmax)
    if Q_DTYPE != tl.int8:
        s = tl.maximum(s, tl.math.div_rn(1.0, qmax * 512.0))
    elif FUSED:
        s = tl.maximum(s, 1.1920928955078125e-07)
    return s


@triton.jit
def token_inverse(amax, scale, Q_DTYPE: tl.constexpr, FUSED: tl.constexpr = False):
    """What a row's y is multiplied by: int8, 127 / amax (0 for an all-zero row), as vLLM
    quantizes rows, or 1 / scale with FUSED; fp8, 1 / scale, the reciprocal its division
    (divide) starts from."""
    if Q_DTYPE == tl.int8 and not FUSED:
        return tl.where(amax == 0.0, 0.0, tl.math.div_rn(127.0, amax))
    else:
        return tl.math.div_rn(1.0, scale)


@triton.jit
def group_scale(amax, Q_DTYPE: tl.constexpr, ue8m0, SCALE_UB, has_ub, SOFT: tl.constexpr,
                FUSED: tl.constexpr = False):
    """A group's dequantization scale: max(amax, 1e-10) / qmax, or with FUSED (vLLM's fused
    norm-quant kernels) max(min(amax, scale_ub) / qmax, floor) (bounded; fp8 only, as vLLM's
    rms_norm_per_block_quant), floor 1 / (qmax * 512) for fp8 and FLT_EPSILON for int8; with
    ue8m0 floored at 1e-10 and rounded up to a power of two, on the bits (exact where
    exp2(ceil(log2(s))) in fp32 is not)."""
    qmax = quant_max(Q_DTYPE)
    if FUSED:
        if Q_DTYPE == tl.int8:
            s = tl.maximum(tl.math.div_rn(amax, qmax), 1.1920928955078125e-07)
        else:
            # A group of NaNs alone has a NaN max here (vLLM's starts from 0): 0, before
            # min(amax, scale_ub) could take the bound for it.
            amax = bounded(tl.maximum(amax, 0.0), SCALE_UB, has_ub, SOFT)
            s = tl.maximum(tl.math.div_rn(amax, qmax), tl.math.div_rn(1.0, qmax * 512.0))
    else:
        s = tl.math.div_rn(tl.maximum(amax, 1e-10), qmax)
    bits = tl.maximum(s, 1e-10).to(tl.uint32, bitcast=True)
    up = tl.where((bits & 0x7FFFFF) != 0, (bits & 0x7F800000) + 0x800000, bits)
    return tl.where(ue8m0 != 0, up.to(tl.float32, bitcast=True), s)


@triton.jit
def divide(yf, scale, inverse, OVERFLOWS: tl.constexpr, SOFT: tl.constexpr):
    """yf / scale, correctly rounded, from inverse = 1 / scale (correctly rounded): a multiply
    and Markstein's two FMAs instead of an IEEE division per element, which is too slow for a
    kernel that must keep up with HBM. The correction is formed negated, -(q0 + r * inverse)
    as -r * inverse - q0 (the negations are operand modifiers, free): where it adds zeros, the
    sum takes -q0's sign, so -0 / s stays -0 (fp8 keeps the sign) with no select. The
    remainder takes the scale at most FLT_MAX, per row or group: an infinite scale (inverse
    0) leaves q0 = y * 0, the quotient, and a correction of zeros; an infinite or NaN y gives
    NaN, as y / s does there. OVERFLOWS: y / scale may exceed fp32 (a given static scale, or a
    row's scale bounded by scale_ub): q0 is then infinite with the quotient's sign, its
    correction NaN, and q0 is taken. Without it (a row's or group's own max over its qmax,
    which keeps |y / s| near qmax) no compare or select is spent per element. The interpreter
    (SOFT) divides, exactly, as it has no fused multiply-add."""
    if SOFT:
        return tl.math.div_rn(yf, scale)
    # Negations by a multiply: Triton's unary minus is 0 - x, which is +0 for x = +0.
    neg_inverse = inverse * -1.0
    neg_q0 = yf * neg_inverse
    remainder = tl.fma(neg_q0, tl.minimum(scale, 3.4028234663852886e38), yf)
    negated = tl.fma(remainder, neg_inverse, neg_q0)
    if OVERFLOWS:
        negated = tl.where(negated != negated, neg_q0, negated)
    return negated * -1.0


@triton.jit
def _divide_as(yf, scale, inverse, may_overflow, SOFT: tl.constexpr):
    """divide, its overflow guard only where may_overflow is set. A run-time flag (has_ub) is
    predicated by the compiler: its compare and select run every element, set or not."""
    if may_overflow != 0:
        v = divide(yf, scale, inverse, True, SOFT)
    else:
        v = divide(yf, scale, inverse, False, SOFT)
    return v


@triton.jit
def int8_of(v):
    """fp32 v as int8 in one instruction, cvt.rni.s8.f32: to nearest even, clamped to [-128,
    127] (PTX clamps a float-to-integer conversion to the destination's range; infinities
    too) and NaN to 0, which is vLLM's int8 conversion (a clamp, then to nearest even, NaN to
    0) in every mode. It replaces a NaN select, two clamps and the two fp32 adds that rounded
    (about 5 instructions an element in a kernel bound by them). The 32-bit destination holds
    the sign-extended byte (PTX lets cvt write sub-word results to wider registers)."""
    return tl.inline_asm_elementwise("cvt.rni.s8.f32 $0, $1;", "=r,r", [v], dtype=tl.int32,
                                     is_pure=True, pack=1).to(tl.int8)


@triton.jit
def quantize(yf, scale, inverse, QUANT: tl.constexpr, Q_DTYPE: tl.constexpr,
             SOFT: tl.constexpr, may_overflow, FUSED: tl.constexpr = False):
    """fp32 y in the format, as stored: Q_DTYPE, or under the interpreter (SOFT) an fp8
    value's bits as uint8. y is divided by `scale` (fp8 rows and groups, int8 static and
    groups; `inverse` is 1 / scale) or multiplied by `inverse` (fp8 static: 1 / scale; int8
    rows: 127 / amax), as vLLM does in each mode. may_overflow (a constexpr or a run-time
    flag): y / scale may exceed fp32 (divide's OVERFLOWS). FUSED: vLLM's fused norm-quant
    kernels' formulas, which multiply groups by 1 / scale and quantize a group's NaN as a
    row's (+qmax for fp8, 0 for int8)."""
    int8: tl.constexpr = Q_DTYPE == tl.int8
    GROUP_CLAMPS: tl.constexpr = QUANT == _GROUP and not FUSED
    if (QUANT == _STATIC and not int8) or (QUANT == _TOKEN and int8) or \
            (QUANT == _GROUP and FUSED):
        v = yf * inverse
    else:
        v = _divide_as(yf, scale, inverse, may_overflow, SOFT)
    qmax = quant_max(Q_DTYPE)
    if int8:
        qmin = -128.0
    else:
        qmin = -qmax
    # vLLM's clamps: fminf then fmaxf (NaN to the top) except in its group kernels, fmaxf
    # then fminf (NaN to the bottom); int8's saturating conversion (NaN to 0) in its static
    # and per-row kernels. The GPU's min and max drop NaNs as fminf and fmaxf do; the
    # interpreter's keep them, so there NaNs are placed by hand. e4m3 exists on the GPU only
    # where Triton converts to it with cvt.rn.satfinite (sm_89 on): that conversion saturates
    # every finite value and infinity, so one clamp, the one that places NaN, is enough.
    if GROUP_CLAMPS:
        nan_out = qmin
    elif int8:
        nan_out = 0.0
    else:
        nan_out = qmax
    if SOFT:
        v = tl.where(v != v, nan_out, tl.where(v > qmax, qmax, tl.where(v < qmin, qmin, v)))
    elif int8:
        # One conversion rounds, saturates and takes NaN to 0 (int8_of); only the group
        # kernels' NaN, which vLLM's fmaxf sends to -128, needs a clamp first.
        if GROUP_CLAMPS:
            v = tl.maximum(v, qmin)
        return int8_of(v)
    elif Q_DTYPE == tl.float8e4nv:
        if GROUP_CLAMPS:
            v = tl.maximum(v, qmin)
        else:
            v = tl.minimum(v, qmax)
    elif GROUP_CLAMPS:
        v = tl.minimum(tl.maximum(v, qmin), qmax)
    else:
        v = tl.maximum(tl.minimum(v, qmax), qmin)
    if int8:
        # The interpreter: round half to even by fp32 addition of 1.5 * 2^23 (exact for
        # |v| <= 128), as int8_of does on the GPU. vLLM's Triton group quantizer rounds toward
        # zero instead, with twice the error.
        return ((v + 12582912.0) - 12582912.0).to(tl.int8)
    elif SOFT:
        if Q_DTYPE == tl.float8e5:
            return _fp8_bits(v, 2, 15, 65536.0)
        else:
            return _fp8_bits(v, 3, 7, 512.0)
    else:
        return v.to(Q_DTYPE)


@triton.jit
def _fp8_bits(v, MANT: tl.constexpr, BIAS: tl.constexpr, SUBNORMALS: tl.constexpr):
    """fp32 v, finite and saturated already, as fp8 bits (MANT mantissa bits, exponent bias
    BIAS, SUBNORMALS: 1 / the smallest subnormal), rounded to nearest even: the GPU's
    conversion, for the interpreter, which has no fp8 arithmetic."""
    bits = v.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    SHIFT: tl.constexpr = 23 - MANT
    # Normal results: the mantissa rounded to MANT bits (a carry moves into the exponent),
    # then the exponent rebiased.
    rounded = mag + ((1 << (SHIFT - 1)) - 1) + ((mag >> SHIFT) & 1)
    normal = (rounded >> SHIFT) - ((127 - BIAS) << MANT)
    # Subnormal results: |v| in units of the smallest subnormal (exact: a power of two),
    # rounded to an integer by adding 2^23 in fp32 (ties to even).
    units = mag.to(tl.float32, bitcast=True) * SUBNORMALS
    sub = (units + 8388608.0).to(tl.uint32, bitcast=True) - 0x4B000000
    code = tl.where(mag < ((128 - BIAS) << 23), sub, normal)
    return (code | sign).to(tl.uint8)
