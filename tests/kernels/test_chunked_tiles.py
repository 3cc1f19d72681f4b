"""Tiles held as several chunks of a narrower power of two (configs.Launch.chunks): rows whose
width is not a power of two, such as 3 x 128, are normalized, and their gradients taken,
exactly as the contract says, every element written, the last chunk masked where the row ends
early."""

import pytest
import torch

from rmsnorm import reference
from rmsnorm.launch import configs, ops
from helpers import (assert_close_float64, assert_matches_recipe, assert_same_bits, nan_like,
                     randn, recipe_rms_norm, seed_of, weight_for)


def chunked(block_n, chunks, rows=2, w_resident=True):
    return configs.Launch("tile", block_n, rows, 1, 1, 4, w_resident, chunks=chunks)


LAUNCHES = {  # width -> launches that hold it in chunks
    48: [chunked(16, 3)],  # 3 full chunks
    40: [chunked(16, 3, rows=1)],  # the last chunk half masked
    100: [chunked(32, 4, w_resident=False), chunked(64, 2, rows=4)],
}


@pytest.mark.parametrize("n", sorted(LAUNCHES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_chunked_rows_match_float64_and_the_recipe(device, n, dtype, casting_mode):
    seed = seed_of("chunked", n, dtype, casting_mode)
    x = randn((7, n), dtype, device, seed, scale=2.0)
    w = weight_for(n, dtype, device, seed)
    for launch in LAUNCHES[n]:
        y = nan_like(x)
        _, _, rstd = ops.forward(x, w, 1e-6, casting_mode=casting_mode, out=y,
                                 return_rstd=True, launch=launch)
        assert_close_float64(y, reference.float64_rms_norm(x, w, 1e-6), dtype)
        assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, casting_mode))
        want = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
        torch.testing.assert_close(rstd.double(), want, rtol=1e-5, atol=0)


@pytest.mark.parametrize("n", sorted(LAUNCHES))
@pytest.mark.parametrize("with_weight", [True, False])
def test_chunked_fused_add_writes_the_rounded_sum_and_normalizes_it(device, n, with_weight):
    seed = seed_of("chunked-add", n, with_weight)
    x = randn((5, n), torch.bfloat16, device, seed)
    r = randn((5, n), torch.bfloat16, device, seed + 7)
    w = weight_for(n, torch.bfloat16, device, seed) if with_weight else None
    s_want = reference.residual_add(x, r)
    for launch in LAUNCHES[n]:
        y, s = nan_like(x), nan_like(r)
        ops.forward(x, w, 1e-6, residual=r, out=y, residual_out=s, launch=launch)
        assert_same_bits(s, s_want)
        assert_close_float64(y, reference.float64_rms_norm(s_want, w, 1e-6), torch.bfloat16)
        assert_matches_recipe(y, *recipe_rms_norm(s_want, w, 1e-6, 0.0, "llama"))


def test_a_launch_narrower_than_the_row_is_refused(device):
    x = randn((2, 100), torch.float32, device, 1)
    with pytest.raises(ValueError, match="holds 96 columns; the rows have 100"):
        ops.forward(x, None, launch=chunked(32, 3))


def chunked_bwd(block_n, chunks, rows=2, w_resident=True, dw_resident=True):
    return configs.Launch("tile", block_n, rows, 1, 1, 4, w_resident, dw_resident, chunks)


BACKWARD_LAUNCHES = {
    48: [chunked_bwd(16, 3)],
    40: [chunked_bwd(16, 3, rows=1, dw_resident=False)],
    100: [chunked_bwd(32, 4, w_resident=False), chunked_bwd(64, 2, rows=4, dw_resident=False)],
}


@pytest.mark.parametrize("n", sorted(BACKWARD_LAUNCHES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_chunked_backward_matches_float64_the_contract_and_the_recipe(device, n, dtype,
                                                                     casting_mode):
    from gradients import assert_gradients_match, expected_gradients

    seed = seed_of("chunked-bwd", n, dtype, casting_mode)
    x, dy = randn((7, n), dtype, device, seed), randn((7, n), dtype, device, seed + 1)
    w = weight_for(n, dtype, device, seed)
    _, _, rstd = ops.forward(x, w, casting_mode=casting_mode, return_rstd=True)
    expected = expected_gradients(x, w, dy, rstd, casting_mode, 0.0)
    for launch in BACKWARD_LAUNCHES[n]:
        dx = nan_like(x)
        _, dw = ops.backward(dy, x, w, rstd, casting_mode=casting_mode, dx_out=dx,
                             launch=launch)
        assert_gradients_match(dx, dw, expected, dtype)


@pytest.mark.parametrize("with_weight", [True, False])
def test_chunked_backward_adds_dresidual(device, with_weight):
    seed = seed_of("chunked-bwd-dresidual", with_weight)
    x, dy = randn((5, 100), torch.float32, device, seed), randn((5, 100), torch.float32,
                                                                 device, seed + 1)
    dresidual = randn((5, 100), torch.float32, device, seed + 2)
    w = weight_for(100, torch.float32, device, seed) if with_weight else None
    _, _, rstd = ops.forward(x, w, return_rstd=True)
    dx_c, dw_c = reference.contract_rms_norm_backward(dy, x, w, rstd, dresidual=dresidual)
    for launch in BACKWARD_LAUNCHES[100]:
        dx = nan_like(x)
        _, dw = ops.backward(dy, x, w, rstd, dresidual=dresidual, dx_out=dx, launch=launch)
        torch.testing.assert_close(dx, dx_c, rtol=1e-5, atol=1e-6)
        if with_weight:
            torch.testing.assert_close(dw, dw_c, rtol=1e-5, atol=1e-5)
        else:
            assert dw is None


def test_a_backward_launch_narrower_than_the_row_is_refused(device):
    x = randn((2, 100), torch.float32, device, 1)
    _, _, rstd = ops.forward(x, None, return_rstd=True)
    with pytest.raises(ValueError, match="holds 96 columns; the rows have 100"):
        ops.backward(x, x, None, rstd, launch=chunked_bwd(32, 3))
