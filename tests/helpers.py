"""Data, tolerances and comparisons shared by the kernel tests."""

import contextlib
import dataclasses
import pathlib
import zlib

import torch
from torch import nn

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs

# The repository's root (helpers.py stays at tests/ whatever folder a test is in).
ROOT = pathlib.Path(__file__).resolve().parent.parent

# Relative error allowed against the float64 ground truth: two roundings to the dtype (llama
# rounds twice) plus fp32 reduction noise; fp32 and fp64 at their own level.
RTOL_F64 = {torch.bfloat16: 2 ** -7 + 1e-5, torch.float16: 2 ** -10 + 1e-5,
            torch.float32: 1e-5, torch.float64: 1e-12}
ATOL_F64 = {torch.bfloat16: 1e-6, torch.float16: 2e-7, torch.float32: 1e-7,
            torch.float64: 1e-14}


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


def randn(shape, dtype, device, seed, scale=1.0, shift=0.0):
    """Fresh normal data from a per-test seed, drawn in fp32 on the CPU (same on every
    device), never zeros."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float32) * scale + shift
    return t.to(dtype).to(device)


def weight_for(n, dtype, device, seed):
    return randn((n,), dtype, device, seed + 1, scale=0.5, shift=1.0)


def nan_like(t, dtype=None):
    return torch.full(t.shape, float("nan"), dtype=dtype or t.dtype, device=t.device)


def assert_same_bits(a, b):
    """a and b hold the very same bits (NaNs included), dtype and shape."""
    assert a.dtype == b.dtype and a.shape == b.shape
    as_int = torch.int16 if a.element_size() == 2 else torch.int32
    assert torch.equal(a.view(as_int), b.view(as_int))


def _byte_codes(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def assert_same(a, b, what):
    """Equal values, NaNs where the other has NaNs (fp8 and int8 compared as bytes, so their
    codes bit for bit); for floats -0 equals +0 and NaN payloads are not compared, where
    assert_same_bits compares the raw bits (and gives no count or position)."""
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs " \
                                                      f"{b.dtype}{tuple(b.shape)}"
    a, b = _byte_codes(a).cpu(), _byte_codes(b).cpu()
    if a.is_floating_point():
        assert torch.equal(a.isnan(), b.isnan()), f"{what}: NaNs differ"
        a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
    differ = a != b
    assert not differ.any(), f"{what}: {int(differ.sum())} of {a.numel()} elements differ, " \
                             f"first at {differ.nonzero()[0].tolist()}"


def assert_close_float64(y, y64, *dtypes):
    """y against float64 ground truth, relative error at the level of the least precise of
    y's dtype and `dtypes` (the dtypes the contract rounds to on the way)."""
    dtype = max((y.dtype, *dtypes), key=RTOL_F64.get)
    y = y.double().cpu()
    y64 = y64.cpu()
    assert torch.equal(torch.isnan(y), torch.isnan(y64)), "NaN pattern differs from float64"
    ok = ~torch.isnan(y64)
    err = (y[ok] - y64[ok]).abs()
    bound = RTOL_F64[dtype] * y64[ok].abs() + ATOL_F64[dtype]
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"error vs float64 is {worst:.3g}x the {dtype} tolerance"


def _ordered_bits(t):
    bits = t.view(torch.int16 if t.element_size() == 2 else torch.int32).to(torch.int64)
    sign_bit = 1 << (8 * t.element_size() - 1)
    return torch.where(bits < 0, -(bits & (sign_bit - 1)), bits)


def ulp_distance(a, b):
    return (_ordered_bits(a) - _ordered_bits(b)).abs()


def ulp_of(t):
    """Spacing of t's dtype at |t| (in t's dtype)."""
    a = t.abs()
    return torch.nextafter(a, torch.full_like(a, float("inf"))) - a


def assert_matches_recipe(y, ref, slack=None):
    """y against the PyTorch recipe it claims to match.

    16-bit: on at most 1% (+1) of elements y differs, and then by at most one ulp of each
    rounding the recipe makes: one ulp of y, plus `slack` (llama's intermediate rounding: one
    ulp of x * rsqrt(...) in the input dtype, times the weight), since two fp32 sums of squares
    summed in different orders may round that intermediate apart. fp32: ~1e-6 relative;
    fp64: at rounding level.
    """
    assert y.dtype == ref.dtype, f"dtype {y.dtype} != recipe's {ref.dtype}"
    assert y.shape == ref.shape
    y, ref = y.cpu(), ref.cpu()
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(y), nan), "NaN pattern differs from the recipe"
    if slack is not None:
        slack = slack.cpu().expand(nan.shape)[~nan]
    y, ref = y[~nan], ref[~nan]
    if y.element_size() == 2:
        allowed = ulp_of(ref).double() + (0 if slack is None else slack.double())
        diff = (y.double() - ref.double()).abs()
        worst = (diff / allowed).max().item() if diff.numel() else 0.0
        assert worst <= 1.0, f"{worst:.2f}x one rounding step from the recipe"
        off = int((diff > 0).sum())
        assert off <= 0.01 * diff.numel() + 1, f"{off} of {diff.numel()} elements differ"
    else:
        rtol, atol = (2e-6, 1e-6) if y.dtype == torch.float32 else (1e-12, 1e-14)
        torch.testing.assert_close(y, ref, rtol=rtol, atol=atol)


def llama_slack(x, weight, eps=1e-6, offset=0.0):
    """One ulp of llama's intermediate x * rsqrt(...) (in x's dtype), scaled by the weight."""
    v = x.float()
    xn = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ulp_of(xn).double() * (weight.double() + offset).abs()


def recipe_rms_norm(x, weight, eps, offset, casting_mode):
    """(recipe output, slack) for the PyTorch recipe a call claims to match: HF Llama
    (llama), F.rms_norm or HF Gemma (gemma); DESIGN.md's contract where no library recipe has
    that combination. slack: see assert_matches_recipe."""
    slack = None
    if casting_mode == "llama" and weight is not None and x.element_size() == 2:
        slack = llama_slack(x, weight, eps, offset)
    matching_w = weight is None or weight.dtype == x.dtype
    if x.dtype != torch.float64 and offset == 0:
        if casting_mode == "llama":
            return reference.hf_llama_rms_norm(x, weight, eps), slack
        if matching_w:
            return reference.torch_rms_norm(x, weight, eps), slack
    if casting_mode == "gemma" and offset == 1 and weight is not None \
            and x.dtype != torch.float64:
        return reference.hf_gemma_rms_norm(x, weight, eps), slack
    return reference.contract_rms_norm(x, weight, eps, offset=offset,
                                       casting_mode=casting_mode)[0], slack


class NormBlock(nn.Module):
    """norm -> linear -> fused residual add + norm, the pre-norm pattern of an LLM block, with
    weights other than the ones / zeros the norms start from (a weight bug must show)."""

    def __init__(self, n, device):
        super().__init__()
        self.norm1 = rmsnorm.RMSNorm(n, device=device)
        self.proj = nn.Linear(n, n, device=device)
        self.norm2 = rmsnorm.GemmaRMSNorm(n, device=device)
        with torch.no_grad():
            self.norm1.weight.copy_(weight_for(n, torch.float32, device, 1))
            self.norm2.weight.copy_(weight_for(n, torch.float32, device, 2) - 1)
            self.proj.weight.copy_(randn((n, n), torch.float32, device, 3, scale=n ** -0.5))
            self.proj.bias.copy_(randn((n,), torch.float32, device, 4))

    def forward(self, x, residual):
        return self.norm2(self.proj(self.norm1(x)), residual)


@contextlib.contextmanager
def max_tile(n):
    """Tiles capped at n elements while it lasts, so that rows the interpreter can run take
    the looped path: a row whose tile is wider takes the table's loop row, narrowed to n. The
    launcher is not told: its table lookup (configs._launch) is swapped for the capped one.
    CUDA calls go to the launcher meanwhile (the compiled kernels have their own table)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"max_tile must be a power of two >= 1, got {n}")
    table_launch = configs._launch

    def capped(op, width, elem_bytes, streams, weight_bytes, arch, dtype, quantized=None):
        group = configs.rules_for(op, elem_bytes, arch, dtype)
        rule = group[configs.rule_index(op, width, elem_bytes, arch, dtype)]
        if rule.path == "tile" and rule.block_n <= n:
            return table_launch(op, width, elem_bytes, streams, weight_bytes, arch, dtype,
                                quantized)
        loop = group[-1]
        return configs.rule_launch(dataclasses.replace(loop, block_n=min(loop.block_n, n)),
                                   streams, weight_bytes, arch)

    configs._launch = capped
    with launcher_only():
        try:
            yield
        finally:
            configs._launch = table_launch


@contextlib.contextmanager
def launcher_only():
    """Every CUDA call through the Python launcher while it lasts, for tests of the launcher
    itself (its kernels, launches and table)."""
    import rmsnorm

    previous = rmsnorm.use_compiled_kernels(False)
    try:
        yield
    finally:
        rmsnorm.use_compiled_kernels(previous)
