"""The quantizer's conversion itself (rmsnorm.kernels.quantize.quantize), value by value:
saturation (infinities included), round-to-nearest-even at every tie of every binade,
subnormals and NaN, against torch's own conversions (on the GPU int8 is one cvt.rni.s8.f32,
quantize.int8_of). Under the interpreter fp8 is rounded on the bits; on the GPU both the
GPU's conversion and the bit-level one are held to torch."""

import pytest
import torch
import triton
import triton.language as tl

from rmsnorm.kernels import quantize as q
from rmsnorm.launch import ops
from rmsnorm.launch.quant import TRITON_DTYPES

# These tests launch their kernels themselves, on infinities, NaNs and zeros: numpy's warnings
# of those (the interpreter's arithmetic) are expected here; rmsnorm's own launches silence them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")


@triton.jit
def _static_quantize(V, OUT, N, Q_DTYPE: tl.constexpr, SOFT: tl.constexpr, BLOCK: tl.constexpr):
    # Static quantization with scale 1: fp8 multiplies by 1 and int8 divides by 1, exactly.
    offs = tl.arange(0, BLOCK)
    m = offs < N
    v = tl.load(V + offs, mask=m)
    tl.store(OUT + offs, q.quantize(v, 1.0, 1.0, q.STATIC, Q_DTYPE, SOFT, True), mask=m)


def values(quant_dtype):
    """Every representable value, the midpoints between neighbours (ties), a hair either side
    of each, values past saturation, tiny values, signed zeros and NaN."""
    if quant_dtype == torch.int8:
        grid = torch.arange(-128, 128, dtype=torch.float32)
    else:
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(quant_dtype).float()
        grid = codes[torch.isfinite(codes)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    near = torch.cat([torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1)])
    top = grid.abs().max().item()
    extra = torch.tensor([top * 1.01, -top * 1.01, top * 4, -top * 4, 1e-30, -1e-30, 0.0, -0.0,
                          float("nan"), 3e38, -3e38, float("inf"), float("-inf")])
    return torch.cat([grid, mids, near, extra])


def torch_reference(v, quant_dtype):
    qmax = 127.0 if quant_dtype == torch.int8 else torch.finfo(quant_dtype).max
    qmin = -128.0 if quant_dtype == torch.int8 else -qmax
    nan_out = 0.0 if quant_dtype == torch.int8 else qmax  # static mode: vLLM's NaN mapping
    c = torch.where(v.isnan(), nan_out, v.clamp(qmin, qmax))
    return (c.round() if quant_dtype == torch.int8 else c).to(quant_dtype)


def devices_and_soft():
    cases = [("cpu", True)] if ops.INTERPRETED else []
    if torch.cuda.is_available():
        cases += [("cuda", False), ("cuda", True)]
    return cases or [pytest.param("none", False, marks=pytest.mark.skip(reason="no kernels"))]


@pytest.mark.parametrize("where,soft", devices_and_soft())
@pytest.mark.parametrize("quant_dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8],
                         ids=str)
def test_conversion_matches_torch_at_every_tie(where, soft, quant_dtype):
    if soft and quant_dtype == torch.int8:
        pytest.skip("int8 has one rounding route")
    v = values(quant_dtype).to(where)
    block = triton.next_power_of_2(v.numel())
    fp8_bits = soft and quant_dtype != torch.int8
    out = torch.empty(v.shape, dtype=torch.uint8 if fp8_bits else quant_dtype, device=where)
    _static_quantize[(1,)](v, out, v.numel(), Q_DTYPE=TRITON_DTYPES[quant_dtype], SOFT=soft,
                           BLOCK=block)
    got = out.cpu() if fp8_bits else out.cpu().view(torch.uint8)
    expected = torch_reference(v.cpu(), quant_dtype).view(torch.uint8)
    bad = (got != expected).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} values differ, e.g. {v[bad[:4]].tolist()}: " \
                             f"{got[bad[:4]].tolist()} vs {expected[bad[:4]].tolist()}"


@triton.jit
def _divide_values(V, S, OUT, N, QUANT: tl.constexpr, Q_DTYPE: tl.constexpr, SOFT: tl.constexpr,
                   may_overflow, BLOCK: tl.constexpr):
    # Each value over its own scale, as the per-row and per-group modes divide.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    v = tl.load(V + offs, mask=m, other=1.0)
    s = tl.load(S + offs, mask=m, other=1.0)
    tl.store(OUT + offs, q.quantize(v, s, tl.math.div_rn(1.0, s), QUANT, Q_DTYPE, SOFT,
                                    may_overflow), mask=m)


@pytest.mark.parametrize("may_overflow", [1, 0], ids=["may-overflow", "in-range"])
@pytest.mark.parametrize("where,soft", devices_and_soft())
@pytest.mark.parametrize("quant_dtype", [torch.float8_e4m3fn, torch.int8], ids=str)
def test_division_is_the_correctly_rounded_quotient(where, soft, quant_dtype, may_overflow):
    """y / s as the GPU computes it (a reciprocal and Markstein's two FMAs) quantizes as the
    IEEE quotient does, over random y and s of every magnitude the modes produce, and at the
    edges: an infinite scale, infinities, NaN, signed zeros, and (where the kernel is told
    the quotient may overflow: a static scale, scale_ub) quotients far past fp32's range.
    Told it may not, the route skips its overflow guard and still gets every in-range
    quotient right."""
    if soft and quant_dtype == torch.int8 and where == "cuda":
        pytest.skip("int8 has one rounding route")
    g = torch.Generator().manual_seed(5)
    count = 200_000 if where == "cuda" else 4096
    y = (torch.randn(count, generator=g) * torch.exp2(torch.randint(-20, 20, (count,),
                                                                      generator=g).float()))
    s = torch.exp2(torch.randint(-30, 10, (count,), generator=g).float()) * \
        (1 + torch.rand(count, generator=g))
    y[:8] = torch.tensor([1.0, float("inf"), float("nan"), -3e38, 0.0, -0.0, -1.0, 3e38])
    s[:8] = torch.tensor([float("inf"), 1.0, 1.0, 1e-12, float("inf"), 2.0, float("inf"),
                          1e-12])
    if not may_overflow:
        # Told no quotient overflows: no infinite quotient of a finite scale (in the kernels,
        # an infinite y makes its row's or group's scale infinite).
        y[3], y[7] = -3e25, 3e25  # over 1e-12: large, but within fp32
        s[1] = float("inf")
    y, s = y.to(where), s.to(where)
    mode = q.GROUP if quant_dtype == torch.int8 else q.TOKEN
    fp8_bits = soft and quant_dtype != torch.int8
    out = torch.empty(count, dtype=torch.uint8 if fp8_bits else quant_dtype, device=where)
    _divide_values[(triton.cdiv(count, 1024),)](y, s, out, count, QUANT=mode,
                                               Q_DTYPE=TRITON_DTYPES[quant_dtype], SOFT=soft,
                                               may_overflow=may_overflow, BLOCK=1024)
    got = out.cpu() if fp8_bits else out.cpu().view(torch.uint8)
    quotient = y.cpu() / s.cpu()  # the CPU's IEEE division, element by element
    qmax = 127.0 if quant_dtype == torch.int8 else 448.0
    qmin = -128.0 if quant_dtype == torch.int8 else -448.0
    if quant_dtype == torch.int8:  # group int8: to nearest even, NaN to -128
        want = torch.where(quotient.isnan(), qmin, quotient.clamp(qmin, qmax)).round()
    else:  # per-row fp8: NaN to +448
        want = torch.where(quotient.isnan(), qmax, quotient.clamp(qmin, qmax))
    want = want.to(quant_dtype).view(torch.uint8)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} quotients differ, e.g. y={y[bad[:3]].tolist()} " \
                             f"s={s[bad[:3]].tolist()}"


@pytest.mark.parametrize("overflows", [True, False], ids=["guarded", "unguarded"])
@pytest.mark.parametrize("where", ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
def test_the_gpus_division_keeps_signed_zeros_and_special_quotients(where, overflows):
    """The GPU's route (a reciprocal and Markstein's correction, SOFT off) at the values it
    must get right with no select, whose results need no fused multiply-add (so the
    interpreter runs it too): signed zeros stay signed (-0 / s, and a negative quotient that
    underflows), an infinite scale gives a zero of y's sign (NaN for an infinite y), NaN
    stays NaN (fp8 rows: +448); with its overflow guard (OVERFLOWS), quotients past fp32's
    range saturate with their sign."""
    if where == "cpu" and not ops.INTERPRETED:
        pytest.skip("needs Triton's interpreter")
    y = [-0.0, 0.0, -0.0, 1.0, -1.0, float("inf"), float("nan"), -1e-30, 1e-30, -1e-30]
    s = [2.0, 2.0, float("inf"), float("inf"), float("inf"), float("inf"), 3.0, 5.0, 5.0, 1e30]
    want = [-0.0, 0.0, -0.0, 0.0, -0.0, 448.0, 448.0, -0.0, 0.0, -0.0]
    if overflows:
        y, s, want = y + [-3e38, 3e38], s + [1e-12, 1e-12], want + [-448.0, 448.0]
    y, s = torch.tensor(y), torch.tensor(s)
    out = torch.empty(y.numel(), dtype=torch.float8_e4m3fn, device=where)
    v = out.view(torch.uint8) if where == "cpu" else out
    # Soft conversion on the CPU only where it must be (fp8 bits); the division is the GPU's.
    _divide_fast[(1,)](y.to(where), s.to(where), v, y.numel(), Q_DTYPE=tl.float8e4nv,
                       SOFT_CONVERT=where == "cpu", OVERFLOWS=overflows, BLOCK=16)
    got = v.cpu() if where == "cpu" else out.cpu().view(torch.uint8)
    assert torch.equal(got, torch.tensor(want).to(torch.float8_e4m3fn).view(torch.uint8)), got


@triton.jit
def _divide_fast(V, S, OUT, N, Q_DTYPE: tl.constexpr, SOFT_CONVERT: tl.constexpr,
                 OVERFLOWS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < N
    v = tl.load(V + offs, mask=m, other=1.0)
    s = tl.load(S + offs, mask=m, other=1.0)
    quotient = q.divide(v, s, tl.math.div_rn(1.0, s), OVERFLOWS, False)
    tl.store(OUT + offs, q.quantize(quotient, 1.0, 1.0, q.STATIC, Q_DTYPE, SOFT_CONVERT, True),
             mask=m)
