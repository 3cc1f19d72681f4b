"""Values that break naive kernels: fp16 squares overflowing, constant rows, tiny values,
and inf/NaN staying in their own row."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs
import helpers
from helpers import (assert_close_float64, assert_matches_recipe, randn, recipe_rms_norm,
                     seed_of, weight_for)


def check(x, w, y, casting_mode="llama"):
    assert_close_float64(y, reference.float64_rms_norm(x, w), x.dtype)
    assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, casting_mode))


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_fp16_rows_with_magnitude_300_whose_squares_overflow_fp16(device, casting_mode):
    seed = seed_of("fp16-300")
    signs = torch.where(randn((65, 1000), torch.float32, "cpu", seed) > 0, 1.0, -1.0)
    x = (300.0 * signs).to(torch.float16).to(device)
    x[:, ::3] = 299.5
    w = weight_for(1000, torch.float16, device, seed)
    y = rmsnorm.rms_norm(x, w, casting_mode=casting_mode)
    assert torch.isfinite(y).all()
    check(x, w, y, casting_mode)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rows_of_equal_values(device, dtype):
    x = torch.full((65, 1000), -2.5, dtype=dtype, device=device)
    x[1::2] = 7.0
    w = weight_for(1000, dtype, device, seed_of("const", dtype))
    y = rmsnorm.rms_norm(x, w)
    check(x, w, y)


@pytest.mark.parametrize("scale", [1e-3, 1e-5])
def test_tiny_values_near_eps(device, scale):
    seed = seed_of("tiny", scale)
    x = randn((65, 1000), torch.float32, device, seed, scale=scale)
    w = weight_for(1000, torch.float32, device, seed)
    y = rmsnorm.rms_norm(x, w)
    check(x, w, y)


@pytest.mark.parametrize("max_tile", [None, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_inf_and_nan_poison_only_their_own_row(device, dtype, max_tile):
    seed = seed_of("nonfinite", dtype)
    x = randn((65, 1000), dtype, device, seed)
    x[3, 17] = float("nan")
    x[10, 999] = float("inf")
    x[20, 0] = float("-inf")
    w = weight_for(1000, dtype, device, seed)
    if max_tile:
        with helpers.max_tile(max_tile):
            y = rmsnorm.rms_norm(x, w)
    else:
        y = rmsnorm.rms_norm(x, w)
    y = y.cpu()
    assert torch.isnan(y[3]).all(), "a row holding NaN must be all NaN"
    # An inf makes 1/rms zero: finite entries of its row become 0, the inf itself NaN.
    assert torch.isnan(y[10, 999]) and torch.isnan(y[20, 0])
    assert (y[10, :999] == 0).all() and (y[20, 1:] == 0).all()
    others = torch.ones(65, dtype=torch.bool)
    others[[3, 10, 20]] = False
    assert torch.isfinite(y[others]).all(), "NaN leaked into another row"
    check(x, w, y)


def test_nan_in_fused_add_stays_in_its_row(device):
    seed = seed_of("nonfinite-fused")
    x = randn((9, 256), torch.bfloat16, device, seed)
    residual = randn((9, 256), torch.bfloat16, device, seed + 7)
    residual[4, 100] = float("nan")
    y, s = rmsnorm.fused_add_rms_norm(x, residual, None)
    assert torch.isnan(y[4]).all() and torch.isfinite(y[torch.arange(9) != 4]).all()
    assert torch.isnan(s[4, 100]) and torch.isfinite(s[4, :100]).all()
