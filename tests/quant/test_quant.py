"""rms_norm_quant and fused_add_rms_norm_quant: the norm's output quantized in the same kernel,
bit-identical to quantizing what rms_norm (fused_add_rms_norm) returns with vLLM's quantizer
of the mode (rmsnorm.reference.quantize), scales included."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs, quant
from helpers import assert_close_float64, assert_same, randn, seed_of, weight_for

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
QUANT_DTYPES = FP8 + (torch.int8,)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# name -> the keywords of a mode (scale and scale_ub are made per test: they live on x's device)
MODES = {
    "static": dict(scale=0.03),
    "token": dict(),
    "token-ub": dict(scale_ub=1.5),
    "group64": dict(group_size=64),
    "group128-ue8m0": dict(group_size=128, ue8m0=True),
    "group64-transposed": dict(group_size=64, transposed_scales=True),
}


def mode_kwargs(mode, quant_dtype, device):
    kw = dict(MODES[mode])
    for name in ("scale", "scale_ub"):
        if name in kw:
            kw[name] = torch.tensor([kw[name]], dtype=torch.float32, device=device)
    return kw


def applies(mode, quant_dtype):
    return not (mode == "token-ub" and quant_dtype == torch.int8)


def composition(x, weight, residual, quant_dtype, casting_mode="llama", inplace=False, **kw):
    """What the fused call must equal: rmsnorm's own (unquantized) call, then the quantizer."""
    if residual is None:
        y, residual_out = rmsnorm.rms_norm(x, weight, casting_mode=casting_mode), None
    else:
        y, residual_out = rmsnorm.fused_add_rms_norm(x, residual.clone(), weight,
                                                     casting_mode=casting_mode)
    q, scales = reference.quantize(y, quant_dtype, scale=kw.get("scale"),
                                   group_size=kw.get("group_size"),
                                   scale_ub=kw.get("scale_ub"), use_ue8m0=kw.get("ue8m0", False))
    return q, scales, residual_out, y


def check(x, weight, residual, quant_dtype, casting_mode="llama", inplace=False, **kw):
    """Runs the fused call and holds every output to the composition; returns the result."""
    q_ref, scales_ref, residual_out_ref, y = composition(x, weight, residual, quant_dtype,
                                                         casting_mode, **kw)
    if residual is None:
        r = rmsnorm.rms_norm_quant(x, weight, quant_dtype=quant_dtype, casting_mode=casting_mode,
                                   return_unquantized=True, **kw)
        assert r.residual_out is None
    else:
        target = residual if inplace else residual.clone()
        r = rmsnorm.fused_add_rms_norm_quant(x, target, weight, inplace=inplace,
                                             quant_dtype=quant_dtype, casting_mode=casting_mode,
                                             return_unquantized=True, **kw)
        assert_same(r.residual_out, residual_out_ref, "residual_out")
        assert (r.residual_out is target) == inplace
    assert r.out.dtype == quant_dtype and r.out.shape == x.shape
    assert_same(r.out, q_ref, "out")
    assert_same(r.scales, scales_ref, "scales")
    assert_same(r.unquantized, y, "unquantized")
    if "scale" in kw:
        assert r.scales is kw["scale"]
    return r


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fused", [False, True], ids=["norm", "fused-add"])
def test_matches_norm_then_quantizer(device, mode, quant_dtype, dtype, fused):
    if not applies(mode, quant_dtype):
        pytest.skip("scale_ub is for fp8 (an error for int8, tested below)")
    seed = seed_of("quant", mode, quant_dtype, dtype, fused)
    x = randn((7, 384), dtype, device, seed, scale=2.0)
    residual = randn((7, 384), dtype, device, seed + 3) if fused else None
    check(x, weight_for(384, dtype, device, seed), residual, quant_dtype,
          **mode_kwargs(mode, quant_dtype, device))


def _widths_with_their_own_launch():
    """(op, dtype, n): each table row whose quantized launch differs from the plain forward's
    (configs.quantized_rule: one row per program, the weight re-read, fewer programs), at its
    widest."""
    out = []
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16"),
                        (torch.float32, "fp32")):
        for op in ("fwd", "add"):
            for rule in configs.rules_for(op, dtype.itemsize, configs.DEFAULT_ARCH, name):
                if rule.max_n and configs.quantized_rule(rule, row_scales=True) != rule:
                    out.append((op, dtype, rule.max_n))
    return out


@pytest.mark.parametrize("op,dtype,n", _widths_with_their_own_launch(), ids=str)
def test_a_launch_of_its_own_quantizes_the_plain_forwards_bits(device, op, dtype, n):
    """Where the quantized forward takes a launch other than the plain forward's, its rows
    are still summed as the plain forward sums them: y and the scales are its bits."""
    if device == "cpu" and n > 2048:
        pytest.skip("wide rows under the interpreter: the GPU run covers them")
    seed = seed_of("quant-own-launch", op, dtype, n)
    x = randn((5, n), dtype, device, seed, scale=2.0)
    residual = randn((5, n), dtype, device, seed + 1) if op == "add" else None
    w = weight_for(n, dtype, device, seed)
    for mode, quant_dtype in (("static", torch.float8_e4m3fn), ("token", torch.float8_e4m3fn),
                              ("token", torch.int8), ("group64", torch.float8_e4m3fn)):
        check(x, w, residual, quant_dtype, **mode_kwargs(mode, quant_dtype, device))


# (x's dtype, the weight's): one dtype, and an fp32 weight beside 16-bit rows (y fp32).
ROW_DTYPES = ((torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
              (torch.float32, torch.float32), (torch.bfloat16, torch.float32))


@pytest.mark.parametrize("n", [777, 2049, 3000, 4097, 5125, 7000, 8191, 12289, 16383])
@pytest.mark.parametrize("dtype,w_dtype", ROW_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["fwd", "add"])
def test_rows_off_16_bytes_quantize_the_plain_forwards_bits(device, op, dtype, w_dtype, n):
    """Rows whose width is no multiple of 16 are read and written an element at a time and
    the weight (aligned) in vectors: still one layout for every access, so the quantized
    forward sums the squares as the plain one does (float32 at 4096 x 5125 once differed in
    most rows; 16-bit rows in a few elements per million: hence the many rows)."""
    if device == "cpu" and n > 1024:
        pytest.skip("wide rows under the interpreter: the GPU run covers them")
    rows = 2048 if device == "cuda" else 3
    seed = seed_of("quant-unaligned", op, dtype, w_dtype, n)
    x = randn((rows, n), dtype, device, seed, scale=2.0)
    residual = randn((rows, n), dtype, device, seed + 1) if op == "add" else None
    w = weight_for(n, w_dtype, device, seed)
    for mode in ("static", "token"):
        check(x, w, residual, torch.float8_e4m3fn,
              **mode_kwargs(mode, torch.float8_e4m3fn, device))


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("mode", ["static", "token", "group128-ue8m0"])
def test_casting_modes_and_fp32_weights(device, casting_mode, mode):
    """An fp32 weight makes llama's y fp32 (HF's promotion): that y is what is quantized."""
    seed = seed_of("quant-casting", casting_mode, mode)
    x = randn((5, 256), torch.bfloat16, device, seed)
    w = weight_for(256, torch.float32, device, seed)
    r = check(x, w, None, torch.float8_e4m3fn, casting_mode,
              **mode_kwargs(mode, torch.float8_e4m3fn, device))
    assert r.unquantized.dtype == (torch.float32 if casting_mode == "llama" else torch.bfloat16)


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=str)
def test_fused_add_in_place_updates_the_residual(device, quant_dtype):
    seed = seed_of("quant-inplace", quant_dtype)
    x = randn((6, 256), torch.bfloat16, device, seed)
    residual = randn((6, 256), torch.bfloat16, device, seed + 1, scale=4.0)
    check(x, weight_for(256, torch.bfloat16, device, seed), residual, quant_dtype, inplace=True)


@pytest.mark.parametrize("mode", ["token", "group64-transposed", "static"])
def test_strided_rows_and_3d_views(device, mode):
    """Rows one stride apart and q/k heads sliced from a fused QKV tensor take no copy of
    their own results: same bits as the contiguous call, scales in x.shape[:-1] order."""
    seed = seed_of("quant-views", mode)
    kw = mode_kwargs(mode, torch.float8_e4m3fn, device)
    qkv = randn((3, 5, 3 * 4 * 128), torch.bfloat16, device, seed)
    heads = qkv.view(3, 5, 3, 4, 128)[:, :, 1]  # (3, 5, 4, 128): two levels of row strides
    w = weight_for(128, torch.bfloat16, device, seed)
    r = check(heads, w, None, torch.float8_e4m3fn, **kw)
    if "group_size" in kw:
        assert r.scales.shape == (3, 5, 4, 2)
    wide = randn((9, 512), torch.bfloat16, device, seed + 1)[::2, :256]
    check(wide, w.repeat(2), None, torch.float8_e4m3fn, **kw)


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["token", "group64", "static"])
def test_nan_inf_and_zero_rows_stay_in_their_row(device, quant_dtype, mode):
    """A NaN or an inf changes its own row's outputs and scale only; an all-zero row gets
    the mode's floor (or 0) as its scale and zeros as its values."""
    seed = seed_of("quant-special", quant_dtype, mode)
    x = randn((6, 128), torch.float16, device, seed)
    x[1] = 0.0
    x[2, 5] = float("nan")
    x[3, 7] = float("inf")
    w = weight_for(128, torch.float16, device, seed)
    kw = mode_kwargs(mode, quant_dtype, device)
    r = check(x, w, None, quant_dtype, **kw)
    clean = x.clone()
    clean[2:4] = 1.0
    r_clean = rmsnorm.rms_norm_quant(clean, w, quant_dtype=quant_dtype, **kw)
    for row in (0, 1, 4, 5):
        assert_same(r.out[row], r_clean.out[row], f"row {row}")
        if mode != "static":
            assert_same(r.scales[row], r_clean.scales[row], f"scale of row {row}")
    assert (r.out[1].float() == 0).all(), "an all-zero row quantizes to (signed) zeros"


@pytest.mark.parametrize("quant_dtype", [torch.float8_e4m3fn, torch.int8], ids=str)
@pytest.mark.parametrize("mode", ["token", "token-ub", "group64"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fused", [False, True], ids=["norm", "fused-add"])
def test_nans_are_left_out_of_the_scales(device, quant_dtype, mode, dtype, fused):
    """A NaN in y (a NaN weight column: one per row; a NaN in x: the whole row) is left out
    of its row's or group's max, in every dtype (the interpreter once compared bf16 by its
    bits, where a NaN equals itself, and kept it: a NaN scale)."""
    if not applies(mode, quant_dtype):
        pytest.skip("scale_ub is for fp8")
    seed = seed_of("quant-nan", quant_dtype, mode, dtype, fused)
    x = randn((5, 192), dtype, device, seed, scale=2.0)
    x[3, 10] = float("nan")
    residual = randn((5, 192), dtype, device, seed + 1) if fused else None
    w = weight_for(192, dtype, device, seed)
    w[70] = float("nan")
    r = check(x, w, residual, quant_dtype, **mode_kwargs(mode, quant_dtype, device))
    assert not r.scales.isnan().any(), "a NaN reached a scale"
    assert (r.scales[0] > 0).all()
    # The all-NaN row: per-token int8's scale of an empty max, 0; every other mode's floor.
    empty = r.scales[3] == 0 if quant_dtype == torch.int8 and mode == "token" else \
        r.scales[3] > 0
    assert empty.all()


def test_a_nan_bound_bounds_nothing(device):
    """scale_ub = NaN: vLLM bounds the max with fminf, which returns the number of a (number,
    NaN) pair; so do rmsnorm's kernels, its interpreter route and its CPU recipe."""
    seed = seed_of("quant-nan-ub")
    x = randn((4, 256), torch.bfloat16, device, seed, scale=3.0)
    w = weight_for(256, torch.bfloat16, device, seed)
    nan = torch.tensor([float("nan")], device=device)
    r = check(x, w, None, torch.float8_e4m3fn, scale_ub=nan)
    free = rmsnorm.rms_norm_quant(x, w)
    assert_same(r.scales, free.scales, "scales")
    assert_same(r.out, free.out, "out")
    assert_same(reference.quantize(r.unquantized, torch.float8_e4m3fn, scale_ub=nan)[1],
                free.scales, "the recipe's scales")


def test_scale_ub_bounds_the_scale(device):
    """A row whose max exceeds scale_ub gets scale_ub / 448 and saturates."""
    seed = seed_of("quant-ub")
    x = randn((4, 256), torch.bfloat16, device, seed)
    x[2] *= 50.0
    ub = torch.tensor([0.5], device=device)
    r = check(x, None, None, torch.float8_e4m3fn, scale_ub=ub)
    assert r.scales[2].item() == (ub / 448.0).item()
    assert r.out[2].float().abs().max().item() == 448.0


@pytest.mark.parametrize("path", ["loop", "chunks"])
@pytest.mark.parametrize("mode", ["token", "group128-ue8m0", "static"])
def test_looped_and_chunked_launches(device, path, mode):
    """The looped kernel (rows wider than any tile: the row's max takes a pass of its own)
    and a tile of several chunks give the composition's bits too."""
    launch = configs.Launch("loop", 128, 1, 4, 1, 1, False) if path == "loop" else \
        configs.Launch("tile", 128, 2, 4, 1, 1, True, chunks=3)
    seed = seed_of("quant-launch", path, mode)
    for fused in (False, True):
        x = randn((5, 384), torch.bfloat16, device, seed, scale=3.0)
        residual = randn((5, 384), torch.bfloat16, device, seed + 1) if fused else None
        w = weight_for(384, torch.bfloat16, device, seed)
        kw = mode_kwargs(mode, torch.int8, device)
        q_ref, scales_ref, _, y = composition(x, w, residual, torch.int8, **kw)
        kw.pop("ue8m0", None)
        out, scales, _, unq = quant.forward_quant(
            x, w, residual=residual, quant_dtype=torch.int8, ue8m0=mode.endswith("ue8m0"),
            return_unquantized=True, launch=launch, **kw)
        assert_same(out, q_ref, "out")
        assert_same(scales, scales_ref, "scales")
        assert_same(unq, y, "unquantized")


@pytest.mark.parametrize("quant_dtype", QUANT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["token", "group64"])
def test_dequantized_values_near_float64(device, quant_dtype, mode):
    """out * scale is within the format's rounding of the float64 norm (plus y's own bf16
    rounding): the quantization is the right one, not just consistent."""
    seed = seed_of("quant-f64", quant_dtype, mode)
    x = randn((8, 256), torch.bfloat16, device, seed)
    w = weight_for(256, torch.bfloat16, device, seed)
    kw = mode_kwargs(mode, quant_dtype, device)
    r = rmsnorm.rms_norm_quant(x, w, quant_dtype=quant_dtype, **kw)
    y64 = reference.float64_rms_norm(x, w).cpu()
    scales = r.scales.cpu().double()
    if mode == "group64":
        scales = scales.repeat_interleave(64, dim=-1)
    deq = r.out.cpu().double() * scales
    if quant_dtype == torch.int8:
        # Half a step of the scale (int8 rounds to nearest), plus y's rounding to bf16.
        bound = scales * 0.5 + 2 ** -7 * y64.abs()
    else:
        mant = 3 if quant_dtype == torch.float8_e4m3fn else 2
        sub = 2.0 ** (-9 if quant_dtype == torch.float8_e4m3fn else -16)
        bound = (2 ** -(mant + 1) + 2 ** -7) * y64.abs() + scales * sub
    assert ((deq - y64).abs() <= bound * 1.0001).all()
    assert_close_float64(rmsnorm.rms_norm(x, w), y64, torch.bfloat16)


def test_unquantized_only_when_asked(device):
    x = randn((2, 128), torch.bfloat16, device, seed_of("quant-unq"))
    r = rmsnorm.rms_norm_quant(x)
    assert r.unquantized is None and r.residual_out is None
    assert r.scales.shape == (2, 1) and r.scales.dtype == torch.float32


def test_empty_input(device):
    x = torch.empty((0, 128), dtype=torch.bfloat16, device=device)
    r = rmsnorm.rms_norm_quant(x, group_size=64)
    assert r.out.shape == (0, 128) and r.scales.shape == (0, 2)


@pytest.mark.parametrize("mode", ["static", "token", "group64"])
def test_fp32_residual_stream_with_16_bit_activations(device, mode):
    """The sum, the norm's input and y are fp32 there (the contract's promotion): that y is
    what is quantized, summed in the plain forward's order."""
    seed = seed_of("quant-mixed", mode)
    x = randn((6, 256), torch.bfloat16, device, seed)
    residual = randn((6, 256), torch.float32, device, seed + 1, scale=4.0)
    r = check(x, weight_for(256, torch.bfloat16, device, seed), residual, torch.float8_e4m3fn,
              **mode_kwargs(mode, torch.float8_e4m3fn, device))
    assert r.residual_out.dtype == torch.float32 and r.unquantized.dtype == torch.float32
