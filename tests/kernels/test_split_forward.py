"""The split forward (rmsnorm.kernels.forward_split): the looped rows' sums of squares taken in
two grids, for fewer rows than SMs. It normalizes as the contract says, writes every element,
and gives the looped kernel's bits for the same table row, so that a row's y and rstd do not
depend on which of the two M selects."""

import pytest
import torch

from rmsnorm import reference
from rmsnorm.launch import configs, ops
from helpers import (assert_close_float64, assert_matches_recipe, assert_same_bits, nan_like,
                     randn, recipe_rms_norm, seed_of, weight_for)


def looped(path="loop", block_n=16, warps=1):
    return configs.Launch(path, block_n, 1, warps, 1, 2, False, False)


def forward(x, w, launch, residual=None, casting_mode="llama", inplace=False):
    y = nan_like(x)
    s = None if residual is None else (residual if inplace else nan_like(residual))
    _, _, rstd = ops.forward(x, w, 1e-6, residual=residual, casting_mode=casting_mode, out=y,
                             residual_out=s, inplace=inplace, return_rstd=True, launch=launch)
    return y, s, rstd


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("n", [40, 100])
def test_split_rows_match_float64_the_recipe_and_the_looped_bits(device, dtype, casting_mode, n):
    seed = seed_of("split-fwd", dtype, casting_mode, n)
    x = randn((5, n), dtype, device, seed, scale=2.0)
    w = weight_for(n, dtype, device, seed)
    y, _, rstd = forward(x, w, looped("split"), casting_mode=casting_mode)
    assert_close_float64(y, reference.float64_rms_norm(x, w, 1e-6), dtype)
    assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, casting_mode))
    want = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), want, rtol=1e-5, atol=0)
    y_loop, _, rstd_loop = forward(x, w, looped(), casting_mode=casting_mode)
    assert_same_bits(y, y_loop)
    assert_same_bits(rstd, rstd_loop)


@pytest.mark.parametrize("with_weight", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_split_fused_add_writes_the_rounded_sum_as_the_loop_does(device, with_weight, inplace):
    seed = seed_of("split-add", with_weight, inplace)
    x = randn((3, 100), torch.bfloat16, device, seed)
    r = randn((3, 100), torch.bfloat16, device, seed + 7)
    w = weight_for(100, torch.bfloat16, device, seed) if with_weight else None
    s_want = reference.residual_add(x, r)
    y, s, _ = forward(x, w, looped("split"), residual=r.clone(), inplace=inplace)
    assert_same_bits(s, s_want)
    assert_close_float64(y, reference.float64_rms_norm(s_want, w, 1e-6), torch.bfloat16)
    y_loop, s_loop, _ = forward(x, w, looped(), residual=r.clone(), inplace=inplace)
    assert_same_bits(y, y_loop)
    assert_same_bits(s, s_loop)


def test_a_row_gives_the_same_bits_whichever_path_its_batch_takes(device):
    # With the looped launch, one row (fewer rows than the interpreter's programs) takes the
    # split forward and three rows the looped kernel.
    seed = seed_of("split-switch")
    x = randn((3, 100), torch.float32, device, seed)
    w = weight_for(100, torch.float32, device, seed)
    y_all, _, rstd_all = forward(x, w, looped())
    for i in range(3):
        y_one, _, rstd_one = forward(x[i:i + 1], w, looped())
        assert_same_bits(y_one, y_all[i:i + 1])
        assert_same_bits(rstd_one, rstd_all[i:i + 1])


def test_split_two_level_rows_match_their_contiguous_copy(device):
    seed = seed_of("split-fwd-strided")
    base = randn((2, 4, 100), torch.float32, device, seed)
    w = weight_for(100, torch.float32, device, seed)
    view = base[:, 1:, :]
    y_view, _, _ = forward(view, w, looped("split"))
    y_copy, _, _ = forward(view.contiguous(), w, looped("split"))
    assert_same_bits(y_view, y_copy)
