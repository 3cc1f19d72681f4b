"""fused_add_rms_norm: s = x + residual rounded to residual's dtype, written once, normalized."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from helpers import (assert_close_float64, assert_matches_recipe, nan_like, randn,
                     recipe_rms_norm, seed_of, weight_for)

# (x dtype, residual dtype, weight dtype): same dtypes, and an fp32 residual stream carrying
# 16-bit activations.
DTYPE_SETS = [
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16, torch.float16),
    (torch.float32, torch.float32, torch.float32),
    (torch.float64, torch.float64, torch.float64),
    (torch.bfloat16, torch.float32, torch.bfloat16),
    (torch.float16, torch.float32, torch.float32),
]


def inputs(tag, shape, device, xd, rd=None, wd=None):
    """Fresh x, residual (4x larger) and weight for one test."""
    seed = seed_of("fused", tag, shape, xd, rd, wd)
    x = randn(shape, xd, device, seed)
    residual = randn(shape, rd or xd, device, seed + 7, scale=4.0)
    return x, residual, weight_for(shape[-1], wd or xd, device, seed)


def check_fused(x, residual, weight, y, s, offset=0.0, casting_mode="llama", eps=1e-6):
    s_ref = reference.residual_add(x, residual)
    assert s.dtype == residual.dtype
    # The sum is one rounding of an exact fp32 (fp64) add: bit-exact on every path.
    assert torch.equal(s.cpu(), s_ref.cpu()), "residual_out differs from residual + x"
    assert_close_float64(y, reference.float64_rms_norm(s_ref, weight, eps, offset), s.dtype)
    assert_matches_recipe(y, *recipe_rms_norm(s_ref, weight, eps, offset, casting_mode))


@pytest.mark.parametrize("dtypes", DTYPE_SETS, ids=lambda d: "-".join(str(t)[6:] for t in d))
@pytest.mark.parametrize("n", [1, 7, 128, 1000, 5000])
@pytest.mark.parametrize("m", [1, 65])
def test_fused_add_matches_unfused_add_then_norm(device, dtypes, n, m):
    x, residual, w = inputs("dtypes", (m, n), device, *dtypes)
    residual_before = residual.clone()
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w)
    assert torch.equal(residual, residual_before), "residual changed without inplace=True"
    check_fused(x, residual, w, y, s)


@pytest.mark.parametrize("casting_mode,offset", [("llama", 0.0), ("gemma", 0.0),
                                                 ("gemma", 1.0), ("llama", 1.0)])
@pytest.mark.parametrize("with_weight", [True, False])
def test_fused_add_modes_and_offsets(device, casting_mode, offset, with_weight):
    if offset and not with_weight:
        pytest.skip("offset needs a weight (an error, tested in test_errors)")
    seed = seed_of("fused-modes", casting_mode, offset, with_weight)
    x = randn((3, 7, 1000), torch.bfloat16, device, seed)
    residual = randn((3, 7, 1000), torch.bfloat16, device, seed + 7)
    w = weight_for(1000, torch.bfloat16, device, seed) - offset if with_weight else None
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, offset=offset,
                                      casting_mode=casting_mode)
    check_fused(x, residual, w, y, s, offset, casting_mode)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_inplace_writes_the_sum_into_residual_and_returns_it(device, dtype):
    x, residual, w = inputs("inplace", (65, 1000), device, dtype)
    original = residual.clone()
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True)
    assert s is residual
    check_fused(x, original, w, y, s)


def test_out_may_alias_x(device):
    x, residual, w = inputs("out-x", (65, 1000), device, torch.float16)
    x_before = x.clone()
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, out=x)
    assert y is x
    check_fused(x_before, residual, w, y, s)


def test_out_aliasing_x_with_inplace_residual(device):
    # The vLLM decode pattern: both outputs overwrite the inputs.
    x, residual, w = inputs("both-inplace", (3, 4096), device, torch.bfloat16)
    x0, r0 = x.clone(), residual.clone()
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True, out=x)
    assert y is x and s is residual
    check_fused(x0, r0, w, y, s)


def test_out_is_written_when_given(device):
    x, residual, w = inputs("out", (5, 300), device, torch.bfloat16)
    out = nan_like(x)
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, out=out)
    assert y is out
    check_fused(x, residual, w, y, s)


def test_fused_rstd_is_of_the_rounded_sum(device):
    x, residual, _ = inputs("rstd", (9, 640), device, torch.bfloat16)
    _, s, rstd = rmsnorm.launch.ops.forward(x, residual=residual, return_rstd=True)
    expected = reference.contract_rms_norm(s, None)[1].squeeze(-1)
    torch.testing.assert_close(rstd, expected, rtol=2e-6, atol=0)


def test_empty_rows(device):
    x = torch.empty((0, 64), dtype=torch.bfloat16, device=device)
    y, s = rmsnorm.fused_add_rms_norm(x, x.clone(), None)
    assert y.shape == s.shape == (0, 64)
